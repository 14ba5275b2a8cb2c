"""Shared bits of the held-out-C jobs: arguments, the device (or ``--dry-run-cpu``), the ballast.

Each job is one plain-torch script that prints what such a job prints and lets its out-of-memory
error propagate (non-zero exit, traceback on stderr). On the GPU, memory the job would already
hold (weights loaded earlier, another part of the pipeline) is an in-process ballast sized from
``torch.cuda.mem_get_info()``, so a run takes seconds on any large GPU. ``--dry-run-cpu`` runs the
same code path at tiny sizes on the CPU: it checks that the script and every fix run, not what
they do to GPU memory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

MiB = 1 << 20
GiB = 1 << 30


def parse_args(
    description: str,
    fixes: list[str],
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """``--fix NAME`` (one of ``fixes``) and ``--dry-run-cpu``, plus the job's own options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--fix", choices=fixes, default=None, help="apply one code fix")
    p.add_argument(
        "--dry-run-cpu",
        action="store_true",
        help="run the code path at tiny sizes on the CPU (no GPU needed)",
    )
    if extra is not None:
        extra(p)
    return p.parse_args()


class Device:
    """cuda:0, or the CPU at tiny sizes under ``--dry-run-cpu``."""

    def __init__(self, dry_run_cpu: bool) -> None:
        self.dry = dry_run_cpu
        if self.dry:
            self.device = torch.device("cpu")
            return
        if not torch.cuda.is_available():
            print("no CUDA device visible", file=sys.stderr, flush=True)
            sys.exit(3)
        self.device = torch.device("cuda", 0)

    @property
    def name(self) -> str:
        return "cpu (dry run)" if self.dry else torch.cuda.get_device_name(0)

    def free_bytes(self) -> int:
        if self.dry:
            return 1 * GiB
        return torch.cuda.mem_get_info()[0]

    def total_bytes(self) -> int:
        if self.dry:
            return 2 * GiB
        return torch.cuda.mem_get_info()[1]

    def ballast(self, leave_bytes: int) -> torch.Tensor | None:
        """One tensor holding all free device memory but ``leave_bytes``.

        It is allocated through PyTorch, so the OOM message counts it as allocated, as it would
        count real weights. The cache is emptied first, so memory freed while the job set itself
        up (an fp32 model cast to bf16, say) is not left reusable on top of ``leave_bytes``;
        under ``backend:cudaMallocAsync`` this trims the pool, which otherwise keeps freed
        memory. Returns None on the CPU dry run.
        """
        if self.dry:
            return None
        torch.cuda.empty_cache()
        n = self.free_bytes() - leave_bytes
        if n <= 0:
            raise SystemExit(
                f"GPU has only {self.free_bytes() / GiB:.2f} GiB free; this job needs more"
            )
        n -= n % (2 * MiB)
        return torch.empty(n, dtype=torch.uint8, device=self.device)

    def allocated(self) -> int:
        return 0 if self.dry else torch.cuda.memory_allocated()

    def reserved(self) -> int:
        return 0 if self.dry else torch.cuda.memory_reserved()

    def sync(self) -> None:
        if not self.dry:
            torch.cuda.synchronize()


def gib(n: float) -> str:
    return f"{n / GiB:.2f}"
