"""The probe ships alone: not in gpu-auditor's wheel, no dependencies, and its ``.pth`` route
arms it the same way the ``PYTHONPATH`` route does."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from .probe_helpers import PROBE_DIR, run_python

pytestmark = pytest.mark.unit

ROOT = PROBE_DIR.parent


def test_the_main_wheel_neither_contains_nor_depends_on_the_probe() -> None:
    from setuptools import find_namespace_packages

    main = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = main["tool"]["setuptools"]["packages"]["find"]
    found = [
        name
        for where in find["where"]
        for name in find_namespace_packages(where=str(ROOT / where), include=find["include"])
    ]
    assert "gpu_auditor.diagnosis" in found
    assert not [name for name in found if "probe" in name.split(".")[0] or name.endswith("_probe")]
    everything = json.dumps(main["project"]).lower()
    assert "gpu-auditor-probe" not in everything and "gpu_auditor_probe" not in everything


def test_the_probe_depends_on_nothing_and_installs_no_sitecustomize() -> None:
    probe = tomllib.loads((PROBE_DIR / "pyproject.toml").read_text())
    assert probe["project"]["dependencies"] == []
    wheel = probe["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["gpu_auditor_probe"]
    assert wheel["force-include"] == {"gpu_auditor_probe.pth": "gpu_auditor_probe.pth"}


@pytest.mark.parametrize(("switch", "armed"), [("1", ["TorchImportHook"]), ("0", [])])
def test_the_pth_file_arms_the_probe_only_when_switched_on(
    tmp_path: Path, switch: str, armed: list[str]
) -> None:
    site_dir = tmp_path / "site-packages"
    shutil.copytree(PROBE_DIR / "gpu_auditor_probe", site_dir / "gpu_auditor_probe")
    shutil.copy(PROBE_DIR / "gpu_auditor_probe.pth", site_dir)
    code = (
        f"import site, sys, json; site.addsitedir({str(site_dir)!r})\n"
        "hooks = [f for f in sys.meta_path if getattr(f, 'gpu_auditor_probe', 0)]\n"
        "print(json.dumps([type(f).__name__ for f in hooks]))\n"
    )
    proc = run_python(code, pythonpath=[], env={"GPU_AUDITOR_PROBE": switch})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == armed
