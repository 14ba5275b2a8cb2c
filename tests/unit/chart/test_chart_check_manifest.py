"""check-manifest on the chart's own output (helm template, every ci/ values file, and the
rendered manifests/): a clean manifest set exits 0 with nothing printed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from chartlib import CHART, KUBE_VERSION, ROOT, run_helm

from gpu_auditor.cli import main

pytestmark = pytest.mark.unit


def check(stdin: bytes, *paths: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["check-manifest", *(paths or ("-",))], stdout=out, stderr=err,
                stdin=io.BytesIO(stdin))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("values", [None, *sorted(p.name for p in (CHART / "ci").glob("*.yaml"))])
def test_helm_template_output_is_clean(helm: Path, values: str | None) -> None:
    args = ["template", "gpu-auditor", str(CHART), "--kube-version", KUBE_VERSION]
    if values:
        args += ["-f", str(CHART / "ci" / values)]
    rendered = run_helm(helm, *args).stdout
    assert "kind: Deployment" in rendered or "kind: DaemonSet" in rendered  # workloads
    assert check(rendered.encode()) == (0, "", "")


def test_helm_output_with_a_bad_setting_is_found(helm: Path) -> None:
    rendered = run_helm(helm, "template", "gpu-auditor", str(CHART), "--kube-version",
                        KUBE_VERSION).stdout
    bad = rendered.replace(
        "containers:\n", "containers:\n        - name: injected\n          image: img\n"
        "          env: [{name: PYTORCH_CUDA_ALLOC_CONF, value: 'expandable_segment:True'}]\n",
        1)
    code, out, _ = check(bad.encode())
    assert code == 1 and 'container "injected"' in out and "did you mean" in out


def test_the_rendered_manifests_folder_is_clean() -> None:
    assert check(b"", str(ROOT / "manifests")) == (0, "", "")
