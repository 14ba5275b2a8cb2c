"""Shared bits of the card jobs: arguments, sizing against the card, the run record.

Every job is one plain-torch script, ``--card-gib N --scale S --steps K`` (plus ``--seed``,
``--warmup``, ``--dry-run-cpu``): it sizes itself so that its own rough estimate of its peak at
``S = 1`` is the card (``S`` multiplies the part that grows with the batch: activations, KV
cache, kept graphs), prints its own progress lines, and lets an out-of-memory error propagate
(normal traceback, exit 1). It finishes ``K`` steps after ``--warmup`` steps if it fits.

Besides its log, a job writes a JSON record to ``$CARDS_RECORD`` (when set): the free memory it
saw at start, outcome, step, and ``torch.cuda.memory_stats()`` extracts taken (a) by an OOM
observer, inside the allocator's failure path, while every tensor of the failing step is alive,
and (b) where the exception leaves the job. The record is the runner's; the job's log is what a
user would see.

``--dry-run-cpu`` runs the same code on the CPU at tiny sizes. With ``CARDS_FAKE_OOM=1`` a dry
run also raises a made-up OOM (a ``torch.OutOfMemoryError`` with a message in PyTorch's format)
when the job's own estimate of a step's need, times a made-up fragmentation factor, passes the
card: this drives the runner's search on a machine without a GPU. It says nothing about real
memory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

GiB = 1 << 30
MiB = 1 << 20
OVERHEAD = 700 * MiB
"""What a job reckons its CUDA context, cuBLAS/cuDNN handles and kernels take of the card."""

STAT_KEYS = [
    f"{m}.{p}.current"
    for m in (
        "reserved_bytes",
        "allocated_bytes",
        "active_bytes",
        "requested_bytes",
        "inactive_split_bytes",
        "inactive_split",
        "segment",
        "allocation",
    )
    for p in ("all", "large_pool", "small_pool")
] + [
    "reserved_bytes.all.peak",
    "allocated_bytes.all.peak",
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
    "num_sync_all_streams",
    "max_split_size",
    "oversize_segments.current",
    "oversize_allocations.current",
]


def parse_args(
    description: str,
    steps: int,
    warmup: int,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--card-gib", type=float, default=8.0, help="the card the job is sized for")
    p.add_argument("--scale", type=float, default=1.0, help="1.0: the job's own estimate = card")
    p.add_argument("--steps", type=int, default=steps, help="steps after the warm-up")
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run-cpu", action="store_true", help="tiny sizes on the CPU")
    if extra is not None:
        extra(p)
    return p.parse_args()


def is_oom(e: BaseException) -> bool:
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return "out of memory" in str(e)


class Job:
    """The device, the card budget, progress (step/phase) and the record."""

    def __init__(
        self, name: str, args: argparse.Namespace, varying: bool, init_cuda: bool = True
    ) -> None:
        self.name = name
        self.args = args
        self.dry = bool(args.dry_run_cpu)
        self.varying = varying
        self.card_bytes = int(args.card_gib * GiB)
        self.cap_bytes: int | None = None
        self.step = 0
        self.phase = "setup"
        self.fake_peak = 0
        self.est_peak = 0
        self.t0 = time.time()
        self.conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        self.rec: dict[str, Any] = {
            "job": name,
            "pid": os.getpid(),
            "card_gib": args.card_gib,
            "scale": args.scale,
            "steps": args.steps,
            "warmup": args.warmup,
            "seed": args.seed,
            "alloc_conf": self.conf,
            "dry_run_cpu": self.dry,
            "outcome": "running",
            "oom_events": [],
        }
        torch.manual_seed(args.seed)
        if self.dry:
            self.device = torch.device("cpu")
            torch.set_num_threads(1)  # dry runs go several at a time on a small CPU
            self.rec.update(free_at_start=None, device_total=None)
            return
        if init_cuda and not torch.cuda.is_available():
            print("no CUDA device visible", file=sys.stderr, flush=True)
            sys.exit(3)
        self.device = torch.device("cuda", 0)
        if not init_cuda:  # the job's own first CUDA call makes the context
            return
        free, total = torch.cuda.mem_get_info()  # the job's CUDA context is made here
        self.rec.update(free_at_start=int(free), device_total=int(total))
        observe = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observe is not None:
            observe(self._observer)
        self.rec["observer"] = observe is not None

    # ---- sizing ----------------------------------------------------------------------------
    def budget(self) -> int:
        """Bytes the job may use: the card (its context included), or the memory-fraction cap."""
        if self.cap_bytes is not None:
            return self.cap_bytes
        return self.card_bytes

    def spare(self, static_bytes: float) -> float:
        """``scale`` x what the job reckons is left for activations once ``static_bytes`` (weights,
        optimizer state) and the context are in. Never below 1/50 of the budget."""
        overhead = 64 * MiB if self.cap_bytes is not None else OVERHEAD
        left = max(self.budget() - static_bytes - overhead, self.budget() / 50)
        return self.args.scale * left

    def set_cap(self, fraction_of_card: float) -> float:
        """``torch.cuda.set_per_process_memory_fraction`` as it would be on the card: the cap is
        ``fraction_of_card`` x the card; the fraction passed here is relative to the GPU's total,
        so the cap in bytes (the message's ``allowed``) is the card's."""
        self.cap_bytes = int(fraction_of_card * self.card_bytes)
        if self.dry:
            frac = fraction_of_card
        else:
            total = torch.cuda.get_device_properties(0).total_memory
            frac = self.cap_bytes / total
            torch.cuda.set_per_process_memory_fraction(frac)
        self.rec.update(cap_bytes=self.cap_bytes, fraction_of_card=fraction_of_card, fraction=frac)
        return frac

    def need(self, nbytes: float) -> None:
        """The job's own estimate of what this step needs (for the record; in a dry run with
        ``CARDS_FAKE_OOM=1`` a made-up OOM when it does not fit)."""
        self.est_peak = max(self.est_peak, int(nbytes))
        if not self.dry:
            return
        self.fake_peak = max(self.fake_peak, int(nbytes))
        if os.environ.get("CARDS_FAKE_OOM") != "1":
            return
        if "expandable_segments:True" in self.conf:
            factor = 1.0
        elif "max_split_size_mb" in self.conf:
            factor = 1.03 if self.varying else 1.01
        else:
            factor = 1.07 if self.varying else 1.01
        limit = self.budget() - (0 if self.cap_bytes else 500 * MiB)
        if nbytes * factor > limit:
            held = int(min(nbytes, limit) * 0.9)
            unalloc = int(held * (factor - 1.0))
            req = int(nbytes - held)
            free = max(0, limit - held - unalloc) + 2 * MiB
            capacity = self.card_bytes if self.cap_bytes else int(139.8 * GiB)
            others = "" if self.cap_bytes else "Process 4242 has 131.12 GiB memory in use. "
            allowed = f"{_fmt(self.cap_bytes)} allowed; " if self.cap_bytes else ""
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {_fmt(req)}. GPU 0 has a total capacity "
                f"of {_fmt(capacity)} of which {_fmt(free)} is free. {others}Including "
                f"non-PyTorch memory, this process has {_fmt(held + unalloc + 500 * MiB)} memory "
                f"in use. {allowed}Of the allocated memory {_fmt(held)} is allocated by PyTorch, "
                f"and {_fmt(unalloc)} is reserved by PyTorch but unallocated. [dry-run fake OOM]"
            )

    # ---- progress ----------------------------------------------------------------------------
    def steady(self) -> None:
        """Call at the end of the first step: what stays between steps (weights, grads kept,
        optimizer state)."""
        if "steady_allocated" not in self.rec:
            self.rec["steady_allocated"] = self.allocated()
            self.rec["steady_at_step"] = self.step

    def allocated(self) -> int:
        return int(self.fake_peak * 0.3) if self.dry else int(torch.cuda.memory_allocated())

    def reserved(self) -> int:
        return int(self.fake_peak * 0.35) if self.dry else int(torch.cuda.memory_reserved())

    def mem(self) -> str:
        return f"{self.allocated() / GiB:.2f}/{self.reserved() / GiB:.2f} GiB"

    def sync(self) -> None:
        if not self.dry:
            torch.cuda.synchronize()

    # ---- the record --------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        if self.dry:
            return {
                "max_memory_allocated": self.fake_peak,
                "max_memory_reserved": self.fake_peak,
                "fake": True,
            }
        if not torch.cuda.is_initialized():
            return {"cuda_initialized": False}
        out: dict[str, Any] = {}
        try:
            s = torch.cuda.memory_stats()
            out["memory_stats"] = {k: int(s[k]) for k in STAT_KEYS if k in s}
        except Exception as e:
            out["memory_stats_error"] = repr(e)
        try:
            out["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
            out["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
            free, total = torch.cuda.mem_get_info()
            out["mem_get_info"] = [int(free), int(total)]
        except Exception as e:
            out["mem_error"] = repr(e)
        out["pools"] = pool_summary()
        return out

    def _observer(self, device: int, alloc: int, limit: int, device_free: int) -> None:
        ev: dict[str, Any] = {
            "alloc": int(alloc),
            "limit": int(limit),
            "device_free": int(device_free),
            "step": self.step,
            "phase": self.phase,
            "t": round(time.time() - self.t0, 3),
        }
        try:
            ev.update(self.stats())
        except Exception as e:  # never let the observer raise inside the allocator
            ev["stats_error"] = repr(e)
        evs = self.rec["oom_events"]
        evs.append(ev)
        if len(evs) > 6:  # keep the first two and the last four
            del evs[2]
        self.rec["num_oom_events"] = self.rec.get("num_oom_events", 0) + 1

    def write(self) -> None:
        path = os.environ.get("CARDS_RECORD")
        if not path:
            return
        self.rec["wall_in_job_s"] = round(time.time() - self.t0, 3)
        self.rec["est_peak"] = self.est_peak
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.rec, f)
        os.replace(tmp, path)

    def run(self, main: Callable[[], None]) -> None:
        """Run the job's loop; record how it ended; let any exception propagate."""
        try:
            main()
        except BaseException as e:
            self.rec.update(
                outcome="oom" if is_oom(e) else "error",
                step=self.step,
                phase=self.phase,
                exception=f"{type(e).__module__}.{type(e).__qualname__}",
                message=str(e)[:8000],
                at_raise=self.stats(),
            )
            self.write()
            raise
        self.rec.update(
            outcome="finished",
            step=self.step,
            phase="done",
            steps_done=self.args.steps,
            at_end=self.stats(),
        )
        self.write()


def pool_summary() -> dict[str, Any]:
    """Per segment type: segments, expandable ones, bytes, allocated, free blocks, largest free."""
    try:
        segs = torch.cuda.memory_snapshot()
    except Exception as e:
        return {"error": repr(e)}
    pools: dict[str, dict[str, int]] = {}
    for seg in segs:
        p = pools.setdefault(
            str(seg.get("segment_type", "?")),
            {
                "segments": 0,
                "expandable": 0,
                "total": 0,
                "allocated": 0,
                "free_blocks": 0,
                "largest_free": 0,
            },
        )
        p["segments"] += 1
        p["expandable"] += int(bool(seg.get("is_expandable", False)))
        p["total"] += int(seg.get("total_size", 0))
        p["allocated"] += int(seg.get("allocated_size", 0))
        for b in seg.get("blocks", ()):
            if b.get("state") == "inactive":
                p["free_blocks"] += 1
                p["largest_free"] = max(p["largest_free"], int(b.get("size", 0)))
    return pools


def _fmt(n: float | None) -> str:
    if n is None:
        return "?"
    if n <= 1024:
        return f"{int(n)} bytes"
    if n <= 1 << 20:
        return f"{n / 1024:.2f} KiB"
    if n <= 1 << 30:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


def round_to(x: float, m: int, lo: int) -> int:
    return max(lo, round(x / m) * m)


def long_tail(rng: Any, n: int, sigma: float, peak_at: float) -> list[float]:
    """``n`` lognormal draws scaled so the largest is 1.0, the largest moved to ``peak_at`` of
    the way through (a long batch comes late, after the cache has seen many shapes)."""
    xs = [rng.lognormvariate(0.0, sigma) for _ in range(n)]
    top = max(xs)
    xs = [x / top for x in xs]
    i = xs.index(1.0)
    j = min(n - 1, int(peak_at * n))
    xs[i], xs[j] = xs[j], xs[i]
    return xs
