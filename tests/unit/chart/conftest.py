"""Fixtures of the chart tests: the helm and promtool binaries and a cached `render`."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, Render, find_helm, run_helm, tool_missing


@pytest.fixture(scope="session")
def helm() -> Path:
    found = find_helm()
    if found is None:
        tool_missing("helm not found in ~/.cache/gpu-auditor/bin or on PATH "
                     "(run scripts/build-control-plane.sh)")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def promtool() -> Path:
    found = shutil.which("promtool")
    if found is None:
        tool_missing("promtool not found (Debian package `prometheus`; "
                     "run scripts/install-tools.sh)")
    assert found is not None
    return Path(found)


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """render("agent.report=false", ..., values=["ci/x.yaml"]) -> the rendered objects."""

    @functools.cache
    def _render(sets: tuple[str, ...], values: tuple[str, ...], namespace: str) -> str:
        args = ["template", "rel", str(CHART), "--namespace", namespace,
                "--kube-version", KUBE_VERSION]
        for s in sets:
            args += ["--set", s]
        for v in values:
            args += ["-f", str(CHART / v)]
        return run_helm(helm, *args).stdout

    def render_(*sets: str, values: tuple[str, ...] | list[str] = (),
                namespace: str = "gpu-auditor") -> list[dict[str, Any]]:
        text = _render(tuple(sets), tuple(values), namespace)
        return [d for d in yaml.safe_load_all(text) if d]

    return render_
