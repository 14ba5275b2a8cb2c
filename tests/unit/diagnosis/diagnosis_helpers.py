"""Helpers for the diagnosis tests: OOM messages built from figures, fixture locations."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_auditor.diagnosis.sizes import format_size

GIB = 2**30
MIB = 2**20
ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "oom"
SHARED_CORPUS = ROOT.parent / "shared" / "corpus" / "oom"

PROGRESS = "step 100 loss 2.31\nstep 200 loss 2.05\n"
"""Log lines of a job that finished 200 steps before its OOM (``progress.finished_steps``): a
steady run, so fragmentation is read at the share for such a job (``FRAG_MIN_SHARE_OF_RESERVED``),
not the quarter a job without progress needs nor the requests' worth a job a few steps in needs."""


def torch_oom(
    *,
    requested: float,
    total: float,
    free: float,
    allocated: float,
    unallocated: float,
    process: float | None = None,
    allowed: float | None = None,
    others: Sequence[tuple[int, float]] = (),
    exception: str = "torch.OutOfMemoryError",
) -> str:
    """A torch 2.2+ OOM message; every figure in GiB, printed the way torch prints it."""

    def s(gib: float) -> str:
        return format_size(round(gib * GIB))

    proc = (
        f"Including non-PyTorch memory, this process has {s(process)} memory in use. "
        if (process is not None)
        else ""
    )
    proc += "".join(f"Process {pid} has {s(b)} memory in use. " for pid, b in others)
    cap = f"{s(allowed)} allowed; " if allowed is not None else ""
    return (
        f"{exception}: CUDA out of memory. Tried to allocate {s(requested)}. GPU 0 has a total "
        f"capacity of {s(total)} of which {s(free)} is free. {proc}{cap}Of the allocated memory "
        f"{s(allocated)} is allocated by PyTorch, and {s(unallocated)} is reserved by PyTorch "
        "but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html)\n"
    )


def load_labels(directory: Path) -> dict[str, dict[str, Any]]:
    labels: dict[str, dict[str, Any]] = json.loads((directory / "labels.json").read_text())
    return {name: label for name, label in labels.items() if not name.startswith("_")}
