"""evaluation/gpu/overhead.py's report on synthetic stage records (no torch, no GPU).

python -m pytest evaluation/gpu/sweep/test_overhead.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import overhead

pytestmark = pytest.mark.unit
MiB = 1024**2
GiB = 1024**3


def stage(name: str, nvml_mib: int, reserved_mib: int, **kw: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "stage": name,
        "ok": True,
        "wall_s": 1.0,
        "nvml_process_used": nvml_mib * MiB,
        "torch_reserved": reserved_mib * MiB,
        "non_pytorch": (nvml_mib - reserved_mib) * MiB,
        "non_pytorch_by_device_growth": (nvml_mib - reserved_mib + 2) * MiB,
        "private_pool_bytes": 0,
        "mem_get_info": {"free": 139 * GiB, "total": 140 * GiB},
        "nvml_device": {"used": 1 * GiB, "total": 140 * GiB},
        "other_processes": [],
    }
    rec.update(kw)
    return rec


def test_each_stage_shows_its_non_pytorch_memory_and_the_change() -> None:
    data = {
        "command": "python3 evaluation/gpu/overhead.py",
        "runs": [
            {
                "run": "cumulative",
                "torch": "2.11.0+cu130",
                "cuda": "13.0",
                "gpu": "NVIDIA H200",
                "rc": 0,
                "stages": [
                    stage("context", 520, 0),
                    stage("cublas_fp32", 760, 200),
                    stage("nccl", 1100, 200, ok=False, error="DistBackendError: boom"),
                ],
            },
            {"run": "serving", "skipped": "deadline"},
        ],
    }
    md = overhead.markdown(data)
    rows = [line for line in md.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    assert [c[0] for c in cells] == ["context", "cublas_fp32", "nccl"]
    # NVML process, reserved, non-PyTorch, change from the stage before, device-growth measure
    assert cells[0][3:8] == ["520", "0", "520", "—", "522"]
    assert cells[1][3:7] == ["760", "200", "560", "40"]
    assert cells[2][1] == "**no**" and cells[2][6] == "340"
    assert "- nccl: DistBackendError: boom" in md
    assert "## serving\nskipped: deadline" in md


def test_the_runs_name_known_stages() -> None:
    for run, stages in overhead.RUNS.items():
        assert stages[0] == "context", run
        assert set(stages) <= set(overhead.STAGES), run
