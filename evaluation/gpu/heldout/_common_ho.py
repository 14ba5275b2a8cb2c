"""Shared helpers for the held-out OOM jobs (evaluation/gpu/heldout), after
evaluation/gpu/scenarios.

Each job is one real process that prints what such a job prints and lets the out-of-memory
error propagate (non-zero exit, traceback on stderr). Allocator settings come only from
PYTORCH_CUDA_ALLOC_CONF in the environment; code fixes are ``--fix NAME[=VALUE]``.

``--dry-run-cpu`` runs the same code paths on the CPU with tiny sizes, to catch shape errors,
typos and API misuse on a machine without a GPU; it proves nothing about memory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

import torch

GiB = 1024**3
MiB = 1024**2


def parse_args(
    description: str,
    fixes: Iterable[str],
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """``--fix`` (repeatable; ``name`` or ``name=value``), ``--dry-run-cpu``, scenario options."""
    fixes = list(fixes)
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="apply a code fix; one of: " + (", ".join(fixes) if fixes else "(none)"),
    )
    p.add_argument(
        "--dry-run-cpu",
        action="store_true",
        help="run the code paths on the CPU with tiny sizes (API check; no memory behaviour)",
    )
    if extra is not None:
        extra(p)
    args = p.parse_args()
    parsed: dict[str, str | None] = {}
    for f in args.fix:
        name, _, value = f.partition("=")
        if name not in fixes:
            p.error(f"unknown fix {name!r}; choose from {fixes}")
        parsed[name] = value or None
    args.fixes = parsed
    args.dev = torch.device("cpu" if args.dry_run_cpu else "cuda")
    return args


def banner(args: argparse.Namespace, job: str) -> None:
    """What a job prints first: what it is, the device and the torch build."""
    if args.dry_run_cpu:
        print(f"{job}: dry run on CPU, torch {torch.__version__}", flush=True)
        return
    if not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr, flush=True)
        sys.exit(3)
    print(
        f"{job}: starting on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}",
        flush=True,
    )


def total_bytes(args: argparse.Namespace) -> int:
    """The device's memory (a nominal 140 GiB in a dry run, so size arithmetic still runs)."""
    if args.dry_run_cpu:
        return 140 * GiB
    return torch.cuda.get_device_properties(0).total_memory


def free_bytes(args: argparse.Namespace) -> int:
    if args.dry_run_cpu:
        return 139 * GiB
    return torch.cuda.mem_get_info()[0]


def hold(args: argparse.Namespace, leave_gib: float, what: str) -> torch.Tensor | None:
    """Take all free device memory but ``leave_gib`` in one PyTorch allocation.

    It stands for state the job already holds when the interesting part starts (weights
    loaded, a frozen backbone, a resident cache); PyTorch reports it as allocated memory, as
    it would the real thing. Sizing by what is free keeps the run the same on a GPU with a
    slightly different amount free. A dry run holds nothing.
    """
    if args.dry_run_cpu:
        print(f"{what} (dry run: nothing held)", flush=True)
        return None
    free, _total = torch.cuda.mem_get_info()
    n = free - int(leave_gib * GiB)
    if n <= 0:
        raise SystemExit(f"GPU has only {free / GiB:.2f} GiB free; this job needs more")
    n -= n % (2 * MiB)
    held = torch.empty(n, dtype=torch.uint8, device="cuda")
    print(f"{what} ({n / GiB:.1f} GiB on the GPU)", flush=True)
    return held


def hold_bytes(args: argparse.Namespace, nbytes: int, what: str) -> list[torch.Tensor]:
    """Take ``nbytes`` in 1 GiB PyTorch allocations, as a checkpoint loader takes weights.

    Stands for the parts of a model the job holds but whose compute does not matter here.
    A dry run holds nothing.
    """
    if args.dry_run_cpu:
        print(f"{what} (dry run: nothing held)", flush=True)
        return []
    chunks = []
    left = nbytes - nbytes % (2 * MiB)
    while left > 0:
        n = min(GiB, left)
        chunks.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        left -= n
    print(f"{what} ({nbytes / GiB:.1f} GiB on the GPU)", flush=True)
    return chunks


def allocated(args: argparse.Namespace) -> int:
    return 0 if args.dry_run_cpu else torch.cuda.memory_allocated()


def reserved(args: argparse.Namespace) -> int:
    return 0 if args.dry_run_cpu else torch.cuda.memory_reserved()


def max_allocated(args: argparse.Namespace) -> int:
    return 0 if args.dry_run_cpu else torch.cuda.max_memory_allocated()


def sync(args: argparse.Namespace) -> None:
    if not args.dry_run_cpu:
        torch.cuda.synchronize()


def autocast(args: argparse.Namespace, enabled: bool = True) -> torch.autocast:
    """bf16 autocast on the job's device (CPU autocast in a dry run)."""
    return torch.autocast(args.dev.type, dtype=torch.bfloat16, enabled=enabled)
