"""Helpers of the e2e group: our image under podman + runc, as ../shared/facts/container-build.md
measured it works here (cgroupfs, runc rather than crun, rlimits pinned below the hard limit).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
IMAGE_UID = 65532
# The image's non-root user, and the limits a container may have on this machine: podman's
# default nofile (1048576) is above the hard limit even root may set here.
RUN_DEFAULTS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")


def e2e_unavailable_reason() -> str | None:
    """Why this machine cannot run our image (None when it can)."""
    if os.geteuid() != 0:
        return "the e2e group runs containers with podman/containerd as root; not root here"
    missing = [c for c in ("podman", "buildah", "runc") if shutil.which(c) is None]
    if missing:
        return f"missing {', '.join(missing)} (make image installs them from Debian)"
    return None


def build_image() -> str:
    """scripts/build-image.sh: the image of this tree (a no-op when it is already built)."""
    result = subprocess.run([str(ROOT / "scripts" / "build-image.sh")], capture_output=True,
                            text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/build-image.sh failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip().splitlines()[-1]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


class Podman:
    """`podman` with the storage, runtime and cgroup manager that work on this machine."""

    GLOBAL = ("--storage-driver", "overlay", "--runtime", "runc", "--cgroup-manager", "cgroupfs",
              "--events-backend", "file")

    def __init__(self, image: str) -> None:
        self.image = image
        self.created: list[str] = []

    def cmd(self, *args: str, check: bool = True, input: str | None = None,
            timeout: float = 120) -> Run:
        result = subprocess.run(["podman", *self.GLOBAL, *args], capture_output=True, text=True,
                                input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} -> {result.returncode}\n"
                               f"{result.stdout}\n{result.stderr}")
        return Run(result.returncode, result.stdout, result.stderr)

    def run(self, *command: str, options: Sequence[str] = (), input: str | None = None,
            read_only: bool = True, timeout: float = 120) -> Run:
        """`podman run --rm` of `command` in our image: no network, and by default a read-only
        root with no tmpfs anywhere (podman's --read-only would add /tmp, /var/tmp and /run)."""
        args = ["run", "--rm", "--network", "none", *RUN_DEFAULTS]
        if read_only:
            args += ["--read-only", "--read-only-tmpfs=false"]
        if input is not None:
            args.append("--interactive")
        return self.cmd(*args, *options, self.image, *command, check=False, input=input,
                        timeout=timeout)

    def run_and_diff(self, *command: str, options: Sequence[str] = ()) -> tuple[Run, set[str]]:
        """Run `command` on a writable root, then list what it changed there (`podman diff`): a
        write that a read-only root would turn into a caught error still shows up here. podman
        itself touches a few paths (/etc for its hosts file, mount points of `options`): those
        of `true` run with the same options are not counted."""
        result, changed = self._diff(command, options)
        _, baseline = self._diff(("true",), options)
        return result, changed - baseline

    def _diff(self, command: Sequence[str], options: Sequence[str]) -> tuple[Run, set[str]]:
        name = f"gpu-auditor-e2e-{uuid.uuid4().hex[:10]}"
        self.created.append(name)
        result = self.cmd("run", "--name", name, "--network", "none", *RUN_DEFAULTS, *options,
                          self.image, *command, check=False)
        diff = self.cmd("diff", "--format", "json", name).stdout
        self.cmd("rm", "-f", name, check=False)
        changes: Any = json.loads(diff) if diff.strip() else {}
        paths = {p for kind in ("changed", "added", "deleted") for p in changes.get(kind) or []}
        return result, paths

    def start(self, name: str, plan: ContainerPlan, *options: str) -> str:
        """`podman run --detach` of a planned container (e.g. from the chart), named `name`."""
        self.created.append(name)
        self.cmd("run", "--detach", "--name", name, *RUN_DEFAULTS, *plan.options, *options,
                 self.image, *plan.argv)
        return name

    def logs(self, name: str) -> str:
        result = self.cmd("logs", name, check=False)
        return result.stdout + result.stderr

    def running(self, name: str) -> bool:
        state = self.cmd("inspect", "--format", "{{.State.Running}}", name, check=False)
        return state.stdout.strip() == "true"

    def inspect(self) -> dict[str, Any]:
        return dict(json.loads(self.cmd("image", "inspect", self.image).stdout)[0])

    def cleanup(self) -> None:
        for name in self.created:
            self.cmd("rm", "-f", name, check=False)


# -- a chart's container, as podman flags ----------------------------------------------------

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args: a defined VAR is replaced, `$$` is a
    literal `$`, anything else stays as written."""
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(one, value)


@dataclass
class ContainerPlan:
    """What podman needs to run one container of a rendered pod template as a kubelet would."""

    options: list[str]
    argv: list[str]


def plan_from_pod_template(template: dict[str, Any], *, fields: dict[str, str],
                           host_paths: dict[str, str] | None = None,
                           extra_mounts: Sequence[tuple[str, str]] = ()) -> ContainerPlan:
    """Translate the first container of a rendered pod template (command, args with $(VAR),
    env with fieldRef values from `fields`, the pod's and container's securityContext,
    emptyDir and hostPath volumes, memory and CPU limits, hostPID) into podman flags.
    `host_paths` maps a hostPath volume's path to the folder that stands for it here. A field
    this translation does not know fails loudly rather than being dropped."""
    spec = template["spec"]
    (container, *_) = spec["containers"]
    env: dict[str, str] = {}
    options: list[str] = []
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif (ref := (var.get("valueFrom") or {}).get("fieldRef")) is not None:
            env[var["name"]] = fields[ref["fieldPath"]]
        else:
            raise ValueError(f"env {var['name']}: only value and fieldRef are translated")
    for name, value in env.items():
        options += ["--env", f"{name}={value}"]

    pod_sc = spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    group = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if user is not None:
        options += ["--user", f"{user}:{group}" if group is not None else str(user)]
    if sc.get("readOnlyRootFilesystem"):
        options += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    if sc.get("privileged"):
        raise ValueError("privileged containers are not translated")
    caps = sc.get("capabilities") or {}
    options += [o for c in caps.get("drop") or [] for o in ("--cap-drop", c)]
    options += [o for c in caps.get("add") or [] for o in ("--cap-add", c)]
    if spec.get("hostPID"):
        options += ["--pid", "host"]
    limits = (container.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        options += ["--memory", _bytes(limits["memory"])]

    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            size = (volume["emptyDir"] or {}).get("sizeLimit")
            options += ["--tmpfs", f"{mount['mountPath']}:rw,size={_bytes(size)}" if size
                        else mount["mountPath"]]
        elif "hostPath" in volume:
            source = (host_paths or {}).get(volume["hostPath"]["path"])
            if source is None:
                raise ValueError(f"hostPath {volume['hostPath']['path']}: no stand-in given")
            ro = ":ro" if mount.get("readOnly") else ""
            options += ["--volume", f"{source}:{mount['mountPath']}{ro}"]
        else:
            raise ValueError(f"volume {mount['name']}: only emptyDir and hostPath are translated")
    for source, target in extra_mounts:
        options += ["--volume", f"{source}:{target}:ro"]

    argv = [expand(a, env) for a in [*(container.get("command") or []),
                                      *(container.get("args") or [])]]
    return ContainerPlan(options, argv)


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def _bytes(quantity: str) -> str:
    """A Kubernetes memory quantity (128Mi, 1G, 1048576) in bytes, as podman takes it."""
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix):
            return str(int(quantity[: -len(suffix)]) * factor)
    return str(int(quantity))


def image_archive(ref: str) -> Path:
    """The OCI archive scripts/build-image.sh saved beside the image `ref` (…:ctx-<hash>)."""
    cache = Path(os.environ.get("GPU_AUDITOR_CACHE", str(Path.home() / ".cache" / "gpu-auditor")))
    tag = ref.rsplit(":", 1)[-1]
    return cache / "images" / f"gpu-auditor-{tag}.oci.tar"
