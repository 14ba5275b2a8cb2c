"""On a real GPU: two quick OOM scenarios end in a real OOM, are diagnosed right, and our fix works.

A small, fast subset of ``bench/gpu/run_proof.py`` (the full proof runs every scenario and every
baseline fix): the pinned-segment fragmentation scenario under a 7 GiB memory fraction, and the
memory-fraction-cap scenario. Each baseline must end in ``torch.OutOfMemoryError``; the
``gpu-auditor diagnose --json`` kind must be the intended one; where we recommend an allocator
setting it must remove the OOM, and where we do not (the cap) the named action must.

Run on the GPU machine: ``PYTHONPATH=operator:. python3 -m pytest -m gpu tests/gpu -q``.
Skipped when torch or a CUDA device is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
SCEN = REPO / "bench" / "gpu" / "scenarios"


def _skip_reason() -> str | None:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        return "torch is not importable"
    if probe.stdout.strip() != "True":
        return "torch reports no CUDA device"
    return None


@pytest.fixture(scope="module", autouse=True)
def _needs_cuda() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(f"gpu test skipped: {reason}")


def run(script: str, *args: str, conf: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    }
    env["PYTHONUNBUFFERED"] = "1"
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return subprocess.run(
        [sys.executable, str(SCEN / script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def diagnose(log: str, tmp_path: Path) -> dict:
    f = tmp_path / "job.log"
    f.write_text(log)
    env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
    out = subprocess.run(
        [sys.executable, "-m", "gpu_auditor.cli", "diagnose", "--json", str(f)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_pinned_fragmentation_diagnosed_and_fixed(tmp_path: Path) -> None:
    base = run("frag_pinned.py")
    assert base.returncode != 0 and "OutOfMemoryError" in base.stdout, base.stdout[-2000:]
    d = diagnose(base.stdout, tmp_path)
    assert d["kind"] == "fragmentation", d
    conf = d["recommendation"]["alloc_conf"]
    assert conf, d
    fixed = run("frag_pinned.py", conf=conf)
    assert fixed.returncode == 0, fixed.stdout[-2000:]
    still = run("frag_pinned.py", conf="max_split_size_mb:128")
    assert still.returncode != 0 and "OutOfMemoryError" in still.stdout


def test_fraction_cap_diagnosed_no_allocator_setting(tmp_path: Path) -> None:
    base = run("fraction_cap.py")
    assert base.returncode != 0 and "OutOfMemoryError" in base.stdout, base.stdout[-2000:]
    d = diagnose(base.stdout, tmp_path)
    assert d["kind"] == "memory-fraction-cap", d
    assert d["recommendation"]["alloc_conf"] is None, d
    assert any("fraction" in a for a in d["recommendation"]["actions"]), d
    raised = run("fraction_cap.py", "--fix", "fraction=0.2")
    assert raised.returncode == 0, raised.stdout[-2000:]
