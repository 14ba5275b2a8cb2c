"""On a real GPU: two quick OOM scenarios end in a real OOM, are diagnosed right, and our fix works.

A small, fast subset of ``evaluation/gpu/run_proof.py`` (the full proof runs every scenario and
every
baseline fix): the pinned-segment fragmentation scenario under a 7 GiB memory fraction, and the
memory-fraction-cap scenario. Each baseline must end in ``torch.OutOfMemoryError``; the
``gpu-auditor diagnose --json`` kind must be the intended one; where we recommend an allocator
setting it must remove the OOM, and where we do not (the cap) the fraction we recommend, read
from the diagnosis, must.

Run on the GPU machine: ``GPU_AUDITOR_REQUIRE_GPU=1 .venv/bin/python -m pytest -m gpu tests/gpu``.
Skipped when torch or a CUDA device is missing (a failure under GPU_AUDITOR_REQUIRE_GPU=1).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import require_torch_cuda

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
SCEN = REPO / "evaluation" / "gpu" / "scenarios"


@pytest.fixture(scope="module", autouse=True)
def _needs_cuda() -> None:
    require_torch_cuda()


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


FRACTION = re.compile(r"raise the per-process memory fraction to about (\d\.\d\d) ")
CAP = re.compile(r"^memory fraction ([0-9.]+) ", re.MULTILINE)


def test_fraction_cap_diagnosed_and_the_recommended_fraction_fixes_it(tmp_path: Path) -> None:
    base = run("fraction_cap.py")
    assert base.returncode != 0 and "OutOfMemoryError" in base.stdout, base.stdout[-2000:]
    d = diagnose(base.stdout, tmp_path)
    assert d["kind"] == "memory-fraction-cap", d
    assert d["recommendation"]["alloc_conf"] is None, d
    found = [m.group(1) for a in d["recommendation"]["actions"] if (m := FRACTION.search(a))]
    assert len(found) == 1, d["recommendation"]["actions"]
    capped = CAP.search(base.stdout)
    assert capped is not None, base.stdout[:2000]
    assert float(found[0]) > float(capped.group(1))  # a raise, not the cap it failed under
    print(f"\nfailed under fraction {capped.group(1)}; we recommend {found[0]}")
    raised = run("fraction_cap.py", "--fix", f"fraction={found[0]}")
    assert raised.returncode == 0, raised.stdout[-2000:]
