"""Helpers of the e2e group: our image under podman + runc, as ../shared/facts/container-build.md
measured it works here (cgroupfs, runc rather than crun, rlimits pinned below the hard limit).
"""

from __future__ import annotations

import json
import os
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

    def inspect(self) -> dict[str, Any]:
        return dict(json.loads(self.cmd("image", "inspect", self.image).stdout)[0])

    def cleanup(self) -> None:
        for name in self.created:
            self.cmd("rm", "-f", name, check=False)
