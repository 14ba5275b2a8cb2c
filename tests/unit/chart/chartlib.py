"""Helpers for the chart tests: where the chart and helm are, rendering, picking objects.

helm comes from scripts/build-control-plane.sh (~/.cache/gpu-auditor/bin/helm, or $GPU_AUDITOR_BIN
or helm on PATH); promtool from Debian's `prometheus` package (scripts/install-tools.sh). A
missing tool skips its tests with the reason, unless GPU_AUDITOR_REQUIRE_CLUSTER=1 (as in CI),
where it fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "gpu-auditor"
# Pinned: a helm built with `go install` assumes Kubernetes v1.20, below the chart's kubeVersion.
# scripts/render-manifests.sh pins the same version.
KUBE_VERSION = "v1.36.3"

# render("agent.report=false", ..., values=["ci/x.yaml"]) -> the rendered objects
Render = Callable[..., list[dict[str, Any]]]



def tool_missing(message: str) -> None:
    """Skip (locally) or fail (CI: GPU_AUDITOR_REQUIRE_CLUSTER=1) for a missing tool."""
    if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
        pytest.fail(message)
    pytest.skip(message)


def find_helm() -> Path | None:
    if explicit := os.environ.get("GPU_AUDITOR_BIN"):
        candidates = [Path(explicit) / "helm"]
    else:
        cache = Path(os.environ.get("GPU_AUDITOR_CACHE", Path.home() / ".cache" / "gpu-auditor"))
        candidates = [cache / "bin" / "helm"]
    if on_path := shutil.which("helm"):
        candidates.append(Path(on_path))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/gpu-auditor-helm",
           "HELM_CONFIG_HOME": "/tmp/gpu-auditor-helm", "HELM_DATA_HOME": "/tmp/gpu-auditor-helm"}
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, env=env,
                            timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def only(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    """The one object of `kind` whose name ends with `name_suffix`."""
    found = [o for o in objects
             if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    names = [o["metadata"]["name"] for o in found]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {names}"
    return found[0]


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}
