"""Shared bits of the held-out-B jobs: the device (or ``--dry-run-cpu``), the ballast, sizes.

Each job is one plain-torch script that prints what such a job prints and lets an out-of-memory
error propagate (non-zero exit, traceback on stderr). On the GPU the memory is first taken by an
in-process ballast that stands for weights already loaded, sized from ``torch.cuda.mem_get_info``,
so a run takes seconds. ``--dry-run-cpu`` runs the same code path at tiny sizes on the CPU: it
checks that the script and every fix run, not what they do to GPU memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
from _common import GiB, MiB
from _common import parse_args as _common_parse_args

__all__ = ["GiB", "MiB", "Run", "parse_args"]


def parse_args(description: str, fixes: list[str], extra=None):
    """``_common.parse_args`` (``--fix NAME``) plus ``--dry-run-cpu``."""

    def _extra(p) -> None:
        p.add_argument(
            "--dry-run-cpu",
            action="store_true",
            help="run the code path at tiny sizes on the CPU (no GPU needed)",
        )
        if extra is not None:
            extra(p)

    return _common_parse_args(description, fixes, _extra)


class Run:
    """Where the job runs: cuda:0, or the CPU at tiny sizes under ``--dry-run-cpu``."""

    def __init__(self, dry_run_cpu: bool) -> None:
        self.dry = dry_run_cpu
        if self.dry:
            self.device = torch.device("cpu")
            print(f"[dry-run-cpu] torch {torch.__version__}: tiny sizes, no GPU", flush=True)
            return
        if not torch.cuda.is_available():
            print("no CUDA device visible", file=sys.stderr, flush=True)
            sys.exit(3)
        self.device = torch.device("cuda", 0)
        print(
            f"starting job on {torch.cuda.get_device_name(0)} torch {torch.__version__}",
            flush=True,
        )

    def free_bytes(self) -> int:
        """What the device has free now (the CPU dry run pretends 1 GiB)."""
        if self.dry:
            return GiB
        free, _total = torch.cuda.mem_get_info()
        return free

    def total_bytes(self) -> int:
        if self.dry:
            return 8 * GiB
        return torch.cuda.get_device_properties(0).total_memory

    def ballast(self, leave_bytes: int, what: str) -> torch.Tensor | None:
        """Take all free device memory but ``leave_bytes`` in one tensor (weights already there).

        It is allocated by PyTorch, so an OOM message counts it as allocated, as it would count
        real weights.
        """
        if self.dry:
            print(f"{what} (dry run: no ballast)", flush=True)
            return None
        n = self.free_bytes() - leave_bytes
        if n <= 0:
            raise SystemExit(f"GPU has only {self.free_bytes() / GiB:.2f} GiB free; job needs more")
        n -= n % (2 * MiB)
        t = torch.empty(n, dtype=torch.uint8, device=self.device)
        print(f"{what} ({n / GiB:.1f} GiB on the GPU)", flush=True)
        return t

    def allocated(self) -> int:
        return 0 if self.dry else torch.cuda.memory_allocated()

    def reserved(self) -> int:
        return 0 if self.dry else torch.cuda.memory_reserved()

    def sync(self) -> None:
        if not self.dry:
            torch.cuda.synchronize()
