"""``probe/sitecustomize.py``: the image's own ``sitecustomize`` it shadows still runs, once, as
Python would run it; and the probe runs on the Pythons jobs use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_auditor.diagnosis.proberecord import find_record

from .probe_helpers import ON, OOM_TWICE, PROBE_DIR, STATE, GiB, make_fake_torch, run_python

pytestmark = pytest.mark.unit


def image_sitecustomize(folder: Path, body: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os\nIMAGE = True\nprint('image sitecustomize ran', flush=True)\n" + body
    )
    return folder


CHECK_CHAIN = "import sitecustomize, sys\nprint(getattr(sitecustomize, 'IMAGE', False))\n"


@pytest.mark.parametrize("switch", [{}, ON])
def test_the_shadowed_sitecustomize_runs_once_and_keeps_its_name(tmp_path: Path, switch) -> None:
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN, pythonpath=[PROBE_DIR, other], env=switch)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["image sitecustomize ran", "True"]


def test_a_second_copy_of_the_probe_further_on_never_loops(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(PROBE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN + STATE, pythonpath=[PROBE_DIR, copy, other], env=ON)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert lines[:2] == ["image sitecustomize ran", "True"]
    assert json.loads(lines[2])["hooks"] == ["TorchImportHook"]  # armed once


def test_an_image_sitecustomize_that_fails_is_reported_as_python_would(tmp_path: Path) -> None:
    other = image_sitecustomize(tmp_path / "image", "raise KeyError('CONFIG')\n")
    proc = run_python(STATE, pythonpath=[PROBE_DIR, other], env=ON)
    assert proc.returncode == 0
    assert (
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nKeyError: 'CONFIG'"
        in proc.stderr
    )
    assert json.loads(proc.stdout.strip().split("\n")[-1])["hooks"] == ["TorchImportHook"]


def test_an_image_sitecustomize_before_ours_on_the_path_is_the_one_python_runs(
    tmp_path: Path,
) -> None:
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN + STATE, pythonpath=[other, PROBE_DIR], env=ON)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().split("\n")[-1])["hooks"] == []  # ours never ran


@pytest.mark.parametrize("python", ["python3.8", "python3.12"])
def test_the_probe_runs_on_the_pythons_jobs_use(tmp_path: Path, python: str) -> None:
    import shutil
    import subprocess

    found = [str(p) for p in sorted(Path.home().glob(f".pyenv/versions/*/bin/{python}"))]
    found += [w for w in [shutil.which(python)] if w]
    usable = [e for e in found if subprocess.run([e, "-V"], capture_output=True).returncode == 0]
    if not usable:
        pytest.skip(f"{python} is not installed here")
    exe = usable[0]
    target = tmp_path / "record"
    other = image_sitecustomize(tmp_path / "image")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("GPU_AUDITOR_")}
    env.update(ON, FAKE_TORCH_CUDA="12.4", GPU_AUDITOR_PROBE_PATH=str(target))
    env["PYTHONPATH"] = f"{PROBE_DIR}:{make_fake_torch(tmp_path)}:{other}"
    code = OOM_TWICE.format(req=GiB, free=0)
    proc = subprocess.run([exe, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("image sitecustomize ran\n")
    parsed = find_record(target.read_bytes())
    assert parsed is not None and parsed.record is not None and parsed.record.oom_count == 2
