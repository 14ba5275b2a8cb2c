"""What a pod's body says about failed containers: pure functions over the raw dict.

kopf hands handlers the pod as a plain mapping (camelCase keys, as the API serves them), so these
functions read that shape and never call the API.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.controller import names

ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""Both names work from torch 2.10; the old one wins when both are set, so it is read first."""
MAX_ALLOC_CONF = 1024
"""Characters of a job's allocator setting the operator reads: every key torch has, each with a
long value, takes about 700. A longer value is not read, not merged, not echoed."""
MAX_IMAGE = 1024
"""Characters of an image reference searched for a torch release (a registry path, a 128-char
tag and a digest fit in 512)."""
MAX_QUANTITY = 64

_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": 0,
}
# pytorch/pytorch:2.1.0-cuda12.1-...: a torch release in the tag. NGC's nvcr.io/nvidia/pytorch:24.01
# tags are year.month, not torch releases: only majors 1 and 2 count.
_TORCH_IN_IMAGE = re.compile(r"(?:pytorch|torch)[^:/]*:v?([12]\.\d{1,2})(?![\d])", re.IGNORECASE)
_TORCH_IN_ENV = re.compile(r"(\d{1,3}\.\d{1,3})(?:[.+-]|$)")


@dataclass(frozen=True)
class Termination:
    """One container termination that may need a diagnosis."""

    container: str
    restart_count: int
    reason: str
    exit_code: int
    message: str
    finished_at: str | None
    previous: bool
    """True when the termination is the container's lastState (it has restarted since):
    its log is then read with previous=true."""

    @property
    def key(self) -> str:
        """Identifies this termination: one diagnosis per (pod UID, key)."""
        return f"{self.container}/{self.restart_count}"

    @property
    def host_oom_killed(self) -> bool:
        return self.reason == "OOMKilled"


@dataclass(frozen=True)
class AllocConf:
    """The job's allocator setting as the operator may use it."""

    value: str | None
    """What the diagnosis reads and merges into its recommendation; None when unset or
    ignored."""
    ignored: str | None = None
    """Why a value that is set was not read (for the evidence)."""


def parse_quantity(value: object) -> int | None:
    """A Kubernetes quantity ('512Mi', '1G', '2e9') in whole units; None when unreadable or
    absurd (2**63 or more)."""
    if value is None:
        return None
    text = str(value).strip()
    match = _QUANTITY.match(text) if len(text) <= MAX_QUANTITY else None
    if not match or match.group(2) not in _SUFFIX:
        return None
    number, suffix = match.groups()
    try:
        amount = float(number) / 1000 if suffix == "m" else float(number) * _SUFFIX[suffix]
        result = int(amount)
    except (ValueError, OverflowError):
        return None
    return result if 0 <= result < 2**63 else None


def terminations(pod: Mapping[str, Any]) -> Iterator[Termination]:
    """Failed terminations of the pod's containers, current state and last state.

    A container that ended with exit code 0 (and not OOMKilled) is not a failure.
    """
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        name = status.get("name", "")
        if not names.is_label(name):
            continue  # the API server allows none; a key we could not record would recur
        restarts = int(status.get("restartCount") or 0)
        current = ((status.get("state") or {}).get("terminated")) or None
        last = ((status.get("lastState") or {}).get("terminated")) or None
        if current:
            termination = _termination(name, restarts, current, previous=False)
            if termination:
                yield termination
        if last:
            # lastState belongs to the run before the current one: restartCount - 1.
            termination = _termination(name, max(restarts - 1, 0), last, previous=True)
            if termination:
                yield termination


def _termination(
    container: str, restart_count: int, terminated: Mapping[str, Any], *, previous: bool
) -> Termination | None:
    reason = str(terminated.get("reason") or "")
    exit_code = int(terminated.get("exitCode") or 0)
    if exit_code == 0 and reason != "OOMKilled":
        return None
    return Termination(
        container=container, restart_count=restart_count, reason=reason, exit_code=exit_code,
        message=str(terminated.get("message") or ""),
        finished_at=terminated.get("finishedAt"), previous=previous,
    )


def container_spec(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == name:
            return dict(container)
    return {}


def env_value(container: Mapping[str, Any], variable: str) -> str | None:
    """A literal env value from the spec (valueFrom references are not resolved)."""
    for item in container.get("env") or []:
        if item.get("name") == variable and "value" in item:
            return str(item["value"])
    return None


def current_alloc_conf(container: Mapping[str, Any]) -> AllocConf:
    """The job's allocator setting, read only when it is of a size and alphabet torch's own
    parser could mean (printable ASCII, at most MAX_ALLOC_CONF characters)."""
    for variable in ALLOC_CONF_VARIABLES:
        value = env_value(container, variable)
        if value is None:
            continue
        if len(value) > MAX_ALLOC_CONF:
            return AllocConf(None, f"{variable} not read: {len(value)} characters, over the "
                                   f"{MAX_ALLOC_CONF}-character limit")
        if not all(" " <= c <= "~" for c in value):
            return AllocConf(None, f"{variable} not read: characters other than printable "
                                   "ASCII")
        return AllocConf(value)
    return AllocConf(None)


def torch_version_hint(container: Mapping[str, Any]) -> str | None:
    """The torch release the job declares: env TORCH_VERSION / PYTORCH_VERSION, else an image
    tag like pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime. Only `major.minor`, each at most
    three digits, is ever passed on."""
    for variable in ("TORCH_VERSION", "PYTORCH_VERSION"):
        value = env_value(container, variable)
        match = _TORCH_IN_ENV.match(value[:32]) if value else None
        if match:
            return match.group(1)
    image = str(container.get("image") or "")
    match = _TORCH_IN_IMAGE.search(image) if len(image) <= MAX_IMAGE else None
    return match.group(1) if match else None


def memory_limits(container: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(limit, request) of host memory in bytes."""
    resources = container.get("resources") or {}
    return (
        parse_quantity((resources.get("limits") or {}).get("memory")),
        parse_quantity((resources.get("requests") or {}).get("memory")),
    )


def requests_gpu(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        for key in (resources.get(section) or {}):
            if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-"):
                return True
    return False


def pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
