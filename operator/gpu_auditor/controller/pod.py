"""The pod, parsed once at the edge into a typed, frozen value (`parse_pod`).

kopf hands handlers the pod as a plain mapping (camelCase keys, as the API serves them, every
value written by the tenant). `parse_pod` reads that shape once: identity, the operator's own
annotations, the controller reference, each container's allocator setting, torch release and
memory limits, and the failed terminations. Everything after it works on `Pod`; nothing goes
back to the raw body.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_auditor.base import names
from gpu_auditor.base.containerenv import container_env
from gpu_auditor.base.contract import IGNORE_LABEL, Annotation
from gpu_auditor.base.jobkinds import COMPLETION_INDEX
from gpu_auditor.base.podspec import ALLOC_CONF_VARIABLES, torch_version_hint
from gpu_auditor.base.timestamps import parse_time

MAX_ALLOC_CONF = 1024
"""Characters of a job's allocator setting the operator reads: every key torch has, each with a
long value, takes about 700. A longer value is not read, not merged, not echoed."""
MAX_QUANTITY = 64
MAX_REASON = 128

_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": 0,
}


@dataclass(frozen=True)
class Termination:
    """One container termination that may need a diagnosis."""

    container: str
    restart_count: int
    reason: str
    """Kubernetes' `state.terminated.reason` (`Error`, `OOMKilled`, ...)."""
    exit_code: int
    message: str
    finished_at: dt.datetime | None
    previous: bool
    """True when the termination is the container's lastState (it has restarted since):
    its log is then read with previous=true."""
    started_at: dt.datetime | None = None
    """When the run that ended started (the node's memory series is cut to the run)."""
    evicted: str | None = None
    """The pod's status message when the kubelet evicted it because the node was low on memory
    (`evicted_for_memory`): the container was stopped for host memory, like `OOMKilled`."""
    key: str = field(init=False)
    """Identifies this termination: one diagnosis per (pod UID, key)."""
    host_oom_killed: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.container}/{self.restart_count}")
        object.__setattr__(
            self, "host_oom_killed", self.reason == "OOMKilled" or self.evicted is not None
        )


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


EVICTED_FOR_MEMORY = "The node was low on resource: memory"
"""The start of the kubelet's eviction message under node memory pressure (its other signals,
ephemeral storage or PIDs, are no memory)."""
MAX_EVICTION_MESSAGE = 512


KILLED_EXIT_CODES = frozenset({137, 143})
"""A container the eviction stopped: SIGKILL (a hard threshold) or SIGTERM (a soft one)."""


def evicted_for_memory(status: Mapping[str, Any]) -> str | None:
    """The pod status's message when the kubelet evicted the pod for the node's memory
    (`reason: Evicted`), cut to `MAX_EVICTION_MESSAGE` characters; else None."""
    message = status.get("message")
    if status.get("reason") != "Evicted" or not isinstance(message, str):
        return None
    if not message.startswith(EVICTED_FOR_MEMORY):
        return None
    return message[:MAX_EVICTION_MESSAGE]


def eviction_time(status: Mapping[str, Any]) -> dt.datetime | None:
    """When the kubelet started the eviction: its `DisruptionTarget` condition (Kubernetes
    1.26 and later), if the pod has one."""
    for condition in _list(status.get("conditions")):
        condition = _map(condition)
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _stopped_by(evicted: str | None, at: dt.datetime | None, t: Termination) -> str | None:
    """The eviction's message for a termination it stopped: one that ended when the eviction
    began or after (timestamps are whole seconds), or, with no time to compare, one killed by a
    signal. A container that had failed before (a CUDA OOM, then the pod evicted) keeps its own
    failure."""
    if evicted is None:
        return None
    if at is not None and t.finished_at is not None:
        return evicted if t.finished_at >= at - dt.timedelta(seconds=1) else None
    return evicted if t.exit_code in KILLED_EXIT_CODES else None


def terminations(pod: Mapping[str, Any]) -> Iterator[Termination]:
    """Failed terminations of the pod's containers, current state and last state.

    A container that ended with exit code 0 (and not OOMKilled) is not a failure. In a pod the
    kubelet evicted for the node's memory, each failed one carries the eviction's message.
    """
    pod_status = _map(pod.get("status"))
    evicted, at = evicted_for_memory(pod_status), eviction_time(pod_status)
    for status in _list(pod_status.get("containerStatuses")):
        status = _map(status)
        name = status.get("name", "")
        if not names.is_label(name):
            continue  # the API server allows none; a key we could not record would recur
        restarts = _int(status.get("restartCount"))
        current = _map(_map(status.get("state")).get("terminated")) or None
        last = _map(_map(status.get("lastState")).get("terminated")) or None
        if current:
            termination = _termination(name, restarts, current, previous=False)
            if termination:
                stopped = _stopped_by(evicted, at, termination)
                yield replace(termination, evicted=stopped) if stopped else termination
        if last:
            # lastState belongs to the run before the current one: restartCount - 1.
            termination = _termination(name, max(restarts - 1, 0), last, previous=True)
            if termination:
                yield termination


def _termination(
    container: str, restart_count: int, terminated: Mapping[str, Any], *, previous: bool
) -> Termination | None:
    reason = str(terminated.get("reason") or "")[:MAX_REASON]
    exit_code = _int(terminated.get("exitCode"))
    if exit_code == 0 and reason != "OOMKilled":
        return None
    return Termination(
        container=container, restart_count=restart_count, reason=reason, exit_code=exit_code,
        message=str(terminated.get("message") or ""),
        finished_at=parse_time(terminated.get("finishedAt")), previous=previous,
        started_at=parse_time(terminated.get("startedAt")),
    )


def current_alloc_conf(container: Mapping[str, Any]) -> AllocConf:
    """The job's allocator setting as the kubelet sets it (`base.containerenv`: the last of
    two entries of one name, `$(VAR)` expanded), read only when it is known from the spec and
    of a size and alphabet torch's own parser could mean (printable ASCII, at most
    MAX_ALLOC_CONF characters)."""
    env = container_env(container, ALLOC_CONF_VARIABLES)
    for variable in ALLOC_CONF_VARIABLES:
        if variable not in env:
            continue
        value = env[variable].value
        if value is None:
            return AllocConf(None, f"{variable} not read: {env[variable].unknown}")
        if len(value) > MAX_ALLOC_CONF:
            return AllocConf(None, f"{variable} not read: {len(value)} characters, over the "
                                   f"{MAX_ALLOC_CONF}-character limit")
        if not all(" " <= c <= "~" for c in value):
            return AllocConf(None, f"{variable} not read: characters other than printable "
                                   "ASCII")
        return AllocConf(value)
    return AllocConf(None)


def memory_limits(container: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(limit, request) of host memory in bytes."""
    resources = _map(container.get("resources"))
    return (
        parse_quantity(_map(resources.get("limits")).get("memory")),
        parse_quantity(_map(resources.get("requests")).get("memory")),
    )


def requests_gpu(container: Mapping[str, Any]) -> bool:
    resources = _map(container.get("resources"))
    for section in ("limits", "requests"):
        for key in _map(resources.get(section)):
            if key == "nvidia.com/gpu" or str(key).startswith("nvidia.com/mig-"):
                return True
    return False


# -- the typed pod ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagnosedKeys:
    """What a pod's `diagnosed-key` annotation records: per container the highest restart count
    diagnosed (or whose diagnosis failed). A termination at or below it is done: one entry per
    container, however often it restarts, and never more entries than the pod has containers."""

    counts: Mapping[str, int] = field(default_factory=dict)
    """Container name -> the highest restart count done."""
    floor: int | None = None
    """Every container is done up to this restart count (`*/<N>`): written only when the
    per-container entries do not fit the annotation's limit (the lowest are folded into it)."""

    def done(self, t: Termination) -> bool:
        highest = self.counts.get(t.container)
        if highest is not None and t.restart_count <= highest:
            return True
        return self.floor is not None and t.restart_count <= self.floor

    def merged(self, other: DiagnosedKeys) -> DiagnosedKeys:
        """What either record says is done."""
        counts = dict(self.counts)
        for container, count in other.counts.items():
            counts[container] = max(count, counts.get(container, count))
        floors = [f for f in (self.floor, other.floor) if f is not None]
        return DiagnosedKeys(counts, max(floors) if floors else None)

    def added(self, t: Termination) -> DiagnosedKeys:
        """This record with `t` done as well."""
        return self.merged(DiagnosedKeys({t.container: t.restart_count}))

    def keys(self) -> list[str]:
        """The entries as the annotation writes them: `<container>/<restartCount>` sorted by
        container, then `*/<floor>`."""
        floor = [] if self.floor is None else [f"*/{self.floor}"]
        return [*(f"{c}/{n}" for c, n in sorted(self.counts.items())), *floor]


@dataclass(frozen=True)
class Container:
    """What one container's spec says that a diagnosis uses, worked out once."""

    name: str
    alloc_conf: AllocConf
    torch_version: str | None
    memory_limit_bytes: int | None
    memory_request_bytes: int | None


@dataclass(frozen=True)
class OwnerReference:
    """The pod's controller reference as written (verified by `owners` before any use)."""

    api_version: object
    kind: object
    name: object
    uid: object


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str
    """A valid node name, or "" (not scheduled, or not a name)."""
    ignored: bool
    """Labelled `gpu-auditor.io/ignore=true`."""
    diagnosed_keys: DiagnosedKeys
    """What our `diagnosed-key` annotation records as done (well-formed entries only)."""
    our_annotations: frozenset[str]
    """Which of our annotation names (`Annotation`, without the prefix) the pod carries."""
    annotations: tuple[tuple[str, str], ...]
    """Our annotations' values (to compare a wanted patch against)."""
    controller: OwnerReference | None
    containers: tuple[Container, ...]
    """Only of a pod with a failed termination (nothing else reads them): kopf's filter parses
    every event of every pod, and a healthy pod's env is not worth scanning."""
    labels: Mapping[str, str]
    """The pod's labels (string values only), which an owner's selector must match; only of a
    pod with a failed termination, like `containers`."""
    terminations: tuple[Termination, ...]
    completion_index: int | None = None
    """An Indexed Job's pod: its index (the annotation, else the label, as the Job controller
    writes both); only of a pod with a failed termination, like `labels`."""
    created_at: dt.datetime | None = None
    """`metadata.creationTimestamp`: a recommendation's trial judges only pods created after
    the failure it answers (`outcome.is_next_pod`)."""
    ref: str = field(init=False)
    """`namespace/name`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", f"{self.namespace}/{self.name}")


def parse_pod(body: Mapping[str, Any], prefix: str) -> Pod:
    """The typed pod of a pod object (as kopf or a GET hands it); any shape is accepted, and
    what is not of the documented shape reads as absent."""
    meta = _map(body.get("metadata"))
    spec = _map(body.get("spec"))
    raw_notes = _map(meta.get("annotations"))
    ours = {name: raw_notes[f"{prefix}{name}"] for name in Annotation
            if isinstance(raw_notes.get(f"{prefix}{name}"), str)}
    node = spec.get("nodeName")
    labels = _map(meta.get("labels"))
    failed = tuple(terminations(body))
    return Pod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node_name=str(node) if names.is_subdomain(node) else "",
        ignored=labels.get(IGNORE_LABEL) == "true",
        diagnosed_keys=diagnosed_keys(ours.get(Annotation.DIAGNOSED_KEY)),
        our_annotations=frozenset(Annotation(k) for k in ours),
        annotations=tuple(sorted(ours.items())),
        controller=controller_reference(meta.get("ownerReferences")),
        containers=tuple(_container(_map(c)) for c in _list(spec.get("containers")))
        if failed else (),
        labels={k: v for k, v in labels.items() if isinstance(v, str)} if failed else {},
        terminations=failed,
        completion_index=_index(raw_notes.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX)))
        if failed else None,
        created_at=parse_time(meta.get("creationTimestamp")) if failed else None,
    )


def _index(value: object) -> int | None:
    """A completion index as the Job controller writes it (decimal, below 2**31)."""
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()) or len(value) > 10:
        return None
    number = int(value)
    return number if number < 2**31 else None


def _container(raw: Mapping[str, Any]) -> Container:
    limit, request = memory_limits(raw)
    return Container(name=str(raw.get("name") or ""), alloc_conf=current_alloc_conf(raw),
                     torch_version=torch_version_hint(raw), memory_limit_bytes=limit,
                     memory_request_bytes=request)


def controller_reference(references: object) -> OwnerReference | None:
    """The controller reference among an object's `ownerReferences`, as written."""
    ref = next((r for r in _list(references)
                if isinstance(r, Mapping) and r.get("controller") is True), None)
    if ref is None:
        return None
    return OwnerReference(api_version=ref.get("apiVersion"), kind=ref.get("kind"),
                          name=ref.get("name"), uid=ref.get("uid"))


_KEY = re.compile(r"([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?|\*)/([0-9]{1,10})")
MAX_KEYS_TEXT = 4 * 1280


def diagnosed_keys(raw: str | None) -> DiagnosedKeys:
    """What a `diagnosed-key` value records (only well-formed entries: the annotation is on the
    tenant's object, and it is copied into our next write). The previous release's value (the
    last 16 keys, several per container) reads the same way: the highest per container."""
    if not isinstance(raw, str):
        return DiagnosedKeys()
    return recorded(raw[:MAX_KEYS_TEXT].split(","))


def recorded(keys: Iterable[str]) -> DiagnosedKeys:
    """The record of `<container>/<restartCount>` and `*/<restartCount>` keys; others are
    ignored."""
    counts: dict[str, int] = {}
    floor: int | None = None
    for key in keys:
        match = _KEY.fullmatch(key)
        if match is None:
            continue
        container, count = match.group(1), int(match.group(2))
        if container == "*":
            floor = max(count, count if floor is None else floor)
        else:
            counts[container] = max(count, counts.get(container, count))
    return DiagnosedKeys(counts, floor)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    try:
        number = int(value) if isinstance(value, int | str) else 0
    except ValueError:
        return 0
    return number if -(2**31) <= number < 2**31 else 0
