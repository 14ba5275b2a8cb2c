"""Shared bits of the held-out-D jobs: arguments, the device (or ``--dry-run-cpu``), the ballast.

Each job is one plain-torch script that prints what such a job prints and lets its out-of-memory
error propagate (non-zero exit, traceback), unless the job's own style catches and logs it. On
the GPU, memory the job holds for reasons outside the story (frozen weights, another model) is an
in-process ballast sized from ``torch.cuda.mem_get_info()``, so a run takes seconds on an H200.
``--dry-run-cpu`` runs the same code path at tiny sizes on the CPU: it checks that the script and
every fix run, not what they do to GPU memory.
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
        return 1 * GiB if self.dry else torch.cuda.mem_get_info()[0]

    def total_bytes(self) -> int:
        return 2 * GiB if self.dry else torch.cuda.mem_get_info()[1]

    def ballast(self, leave_bytes: int) -> torch.Tensor | None:
        """One tensor holding all free device memory but ``leave_bytes`` (None on the CPU).

        Allocated through PyTorch, so the OOM message counts it as allocated, as it would count
        real weights; the cache is emptied first so that memory freed during set-up is not left
        reusable on top of ``leave_bytes``.
        """
        if self.dry:
            return None
        torch.cuda.empty_cache()
        n = self.free_bytes() - leave_bytes
        if n <= 0:
            raise SystemExit(f"GPU has only {gib(self.free_bytes())} GiB free; this job needs more")
        n -= n % (2 * MiB)
        return torch.empty(n, dtype=torch.uint8, device=self.device)

    def held(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of device memory through PyTorch (a few KiB on the CPU dry run)."""
        n = 4096 if self.dry else nbytes - nbytes % (2 * MiB)
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
