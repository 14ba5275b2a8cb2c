"""What the GPU libraries printed on a full H200 (evaluation/gpu/library_errors.py; torch 2.11,
cuDNN 9.19, JAX 0.11, CuPy 14): each case filled the device to leave 0, 16, 64 or 256 MiB, then
made its library's first call; two device-side asserts are the negatives. The truth is what the
run did: its return code, and who filled the GPU (the job itself, or a holder process for JAX).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.diagnosis import diagnose

pytestmark = pytest.mark.unit

ROWS = Path(__file__).resolve().parents[3] / "evaluation/results/library-errors/library-errors.json"


@cache
def rows() -> list[dict[str, Any]]:
    return list(json.loads(ROWS.read_text())["rows"])


def failed(case: str) -> list[dict[str, Any]]:
    return [r for r in rows() if r["case"] == case and r["rc"] != 0]


def test_every_run_that_failed_for_memory_is_an_oom_and_no_other_run_is() -> None:
    for row in rows():
        memory = row["free_mib"] is not None and row["rc"] != 0
        assert diagnose(row["log"]).detected is memory, (row["case"], row["free_mib"])


@pytest.mark.parametrize("case", ["torch-matmul", "cupy-matmul"])
def test_a_cublas_handle_on_a_full_gpu_names_the_library_and_no_cause(case: str) -> None:
    # the job's own tensors filled the GPU here; the message alone cannot tell that from another
    # process (it read as non-pytorch-memory before: no memory outside the allocator was held)
    found = failed(case)
    assert [r["free_mib"] for r in found] == [0, 16, 64]  # 256 MiB was enough
    for row in found:
        d = diagnose(row["log"])
        assert (d.detected, d.kind) == (True, "unknown")
        assert d.summary.startswith("unknown: cuBLAS could not allocate its own memory")


@pytest.mark.parametrize("case", ["jax-conv", "jax-conv-prealloc"])
def test_jax_beside_a_process_that_filled_the_gpu_is_gpu_shared(case: str) -> None:
    # the context itself could not be created ("Failed to create stream executor ...:
    # CUDA_ERROR_OUT_OF_MEMORY"), then JAX raised "no supported devices found": before the fix
    # neither line was read as an OOM, and the second was taken for a later, unrelated error
    found = failed(case)
    assert len(found) == 4
    for row in found:
        d = diagnose(row["log"])
        assert (d.kind, dict(d.extra).get("phase")) == ("gpu-shared", "cuda-init")


def test_cudnn_on_a_full_gpu_prints_an_oom_and_names_no_cause_without_figures() -> None:
    # torch's conv with 16-64 MiB left: a raw "CUDA error: out of memory" (the cuDNN handle);
    # with nothing left, the allocator's own message (the job's own tensors filled the GPU)
    for case in ("torch-conv", "torch-conv-benchmark"):
        kinds = {r["free_mib"]: diagnose(r["log"]).kind for r in failed(case)}
        assert kinds == {0: "capacity", 16: "unknown", 64: "unknown"}
