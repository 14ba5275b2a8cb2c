"""Shared helpers for the OOM scenario scripts (plain torch, one real process each).

Each scenario is a small "job": it prints what a training/inference job would print, and on
an out-of-memory error lets the exception propagate, so the process exits non-zero with the
traceback on stderr, as a container log holds it. Sizes are chosen so each run takes seconds:
the GPU is pre-filled by an in-process ballast (standing for the model's weights) or capped by a
per-process memory fraction, so the scenario never has to fill a 140 GiB GPU slowly.

Allocator settings (PYTORCH_CUDA_ALLOC_CONF) come from the environment only; code fixes are
selected with ``--fix NAME`` (repeatable).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable

import torch

GiB = 1024**3
MiB = 1024**2


def parse_args(description: str, fixes: Iterable[str], extra=None) -> argparse.Namespace:
    """Parse ``--fix`` (repeatable; ``name`` or ``name=value``) plus scenario options."""
    fixes = list(fixes)
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="apply a code fix; one of: " + (", ".join(fixes) if fixes else "(none)"),
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
    return args


def banner() -> None:
    """What a job prints first: the device and the torch build."""
    if not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr, flush=True)
        sys.exit(3)
    print(
        f"starting job on {torch.cuda.get_device_name(0)} torch {torch.__version__}",
        flush=True,
    )


def fill_gpu(leave_gib: float, what: str = "model loaded") -> torch.Tensor:
    """Take all free device memory but ``leave_gib`` with one plain allocation (the 'model').

    The ballast is allocated by PyTorch, so the OOM message reports it as allocated memory,
    just like a real model's weights and optimizer state would be.
    """
    free, _total = torch.cuda.mem_get_info()
    n = free - int(leave_gib * GiB)
    if n <= 0:
        raise SystemExit(f"GPU has only {free / GiB:.2f} GiB free; scenario needs more")
    n -= n % (2 * MiB)
    ballast = torch.empty(n, dtype=torch.uint8, device="cuda")
    print(f"{what} ({n / GiB:.1f} GiB on the GPU)", flush=True)
    return ballast


def set_fraction_for(allowed_gib: float) -> float:
    """Cap the process at ``allowed_gib`` (set_per_process_memory_fraction); return the fraction."""
    total = torch.cuda.get_device_properties(0).total_memory
    frac = round(allowed_gib * GiB / total, 4)
    torch.cuda.set_per_process_memory_fraction(frac)
    return frac


def mem_gib() -> float:
    return torch.cuda.memory_allocated() / GiB


def mlp(width: int, depth: int) -> torch.nn.Sequential:
    """A plain MLP: Linear+GELU blocks, the usual shape of a transformer's feed-forward stack."""
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def env_conf() -> str:
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
