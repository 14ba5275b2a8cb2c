"""The job controllers' own CRDs, from their Go modules, for tests against the real schemas.

    python -m devtools.localcluster.crds            # fetch every one into the cache, print paths

Each CRD is the YAML its controller ships, read from the module zip that `go mod download -json
MODULE@VERSION` fetches through the Go module proxy (the checksum database vouches for it; no
other network), and cached like the control-plane binaries: under
`$GPU_AUDITOR_CACHE/crds/<module>@<version>/` (default `~/.cache/gpu-auditor`). Nothing is copied
into the repository. Versions are those docs/operator.md's "One job, many pods" read the
controllers' sources at.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Crd:
    name: str
    """The CRD object's name (`<plural>.<group>`)."""
    module: str
    version: str
    path: str
    """The YAML's path inside the module."""


JOBSET = Crd("jobsets.jobset.x-k8s.io", "sigs.k8s.io/jobset", "v0.11.0",
             "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml")
PYTORCHJOB = Crd("pytorchjobs.kubeflow.org", "github.com/kubeflow/training-operator", "v1.9.0",
                 "manifests/base/crds/kubeflow.org_pytorchjobs.yaml")
TRAINJOB = Crd("trainjobs.trainer.kubeflow.org", "github.com/kubeflow/trainer/v2", "v2.1.0",
               "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml")
LEADERWORKERSET = Crd("leaderworkersets.leaderworkerset.x-k8s.io", "sigs.k8s.io/lws", "v0.8.0",
                      "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml")
RAYCLUSTER = Crd("rayclusters.ray.io", "github.com/ray-project/kuberay/ray-operator", "v1.5.0",
                 "config/crd/bases/ray.io_rayclusters.yaml")
RAYJOB = Crd("rayjobs.ray.io", "github.com/ray-project/kuberay/ray-operator", "v1.5.0",
             "config/crd/bases/ray.io_rayjobs.yaml")
ALL = (JOBSET, PYTORCHJOB, TRAINJOB, LEADERWORKERSET, RAYCLUSTER, RAYJOB)


class CrdUnavailable(RuntimeError):
    """The CRD could not be fetched (no `go`, no module proxy, no such file in the module)."""


def cache_dir() -> Path:
    cache = os.environ.get("GPU_AUDITOR_CACHE", str(Path.home() / ".cache" / "gpu-auditor"))
    return Path(cache) / "crds"


def crd_file(crd: Crd, cache: Path | None = None) -> Path:
    """The CRD's YAML in the cache, fetched from its module first when missing."""
    target = (cache or cache_dir()) / f"{crd.module.replace('/', '_')}@{crd.version}" / crd.path
    if target.is_file():
        return target
    source = module_dir(crd.module, crd.version) / crd.path
    if not source.is_file():
        raise CrdUnavailable(f"{crd.module}@{crd.version} has no {crd.path}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(target)
    return target


def module_dir(module: str, version: str) -> Path:
    """Where `go mod download` unpacked `module@version` (the Go module cache)."""
    go = shutil.which("go")
    if go is None:
        raise CrdUnavailable("go not found: the CRDs come from the controllers' Go modules")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="gpu-auditor-crds-") as outside_any_module:
        result = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                                capture_output=True, text=True, env=env, timeout=600,
                                cwd=outside_any_module)
    try:
        found = json.loads(result.stdout or "{}")
    except ValueError:
        found = {}
    if result.returncode != 0 or "Dir" not in found:
        detail = found.get("Error") or result.stderr.strip()[-500:]
        raise CrdUnavailable(f"go mod download {module}@{version}: {detail}")
    return Path(found["Dir"])


def main() -> int:
    for crd in ALL:
        print(f"{crd.name}: {crd_file(crd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
