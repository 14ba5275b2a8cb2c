#!/usr/bin/env python3
"""Replay ``serve_prefill_frag.py``'s large allocations through ``alloc_sim``'s allocator model.

The job's own ``Scheduler`` decides, step by step, which requests are admitted and which finish;
this script turns those decisions into the job's allocations of more than 1 MiB, in the job's
order (each admitted request's KV tensor, then the prefill's hidden states and logits, freed in
that order; finished requests' KV tensors), and replays them through the native model, the
``expandable_segments`` model and, for ``--fix kv-pool``, the native model again. It also shows
the margins: the native model with 5 % and 10 % more memory than the job has, the expandable
model with 10 % less. A model, not the allocator: the GPU runs decide.

``--compare-trace`` checks the replayed allocations against the job's own: it runs the job's
engine loop on the CPU at small sizes under the CPU profiler (``profile_memory``) and compares
every allocation and free of 64 KiB or more, in order, with what ``events()`` lists for the same
small configuration (the job's other tensors are below 64 KiB there; CPU kernels' temporaries of
64 KiB or more would show up as differences).

    python3 evaluation/gpu/heldout_c/frag_check.py [--compare-trace]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from alloc_sim import SMALL, Expandable, GiB, Native, replay  # noqa: E402
from serve_prefill_frag import (  # noqa: E402
    GPU,
    PAGE_TOKENS,
    Config,
    Engine,
    Scheduler,
    make_requests,
    serve,
)

# address space of the expandable segment left after the weights: 1/8 of an H200 beyond its size
ES_SPARE = 18 * GiB


def events(cfg: Config, free: int, paged: bool) -> list[tuple[str, int, int]]:
    sched = Scheduler(cfg, make_requests(cfg), free, paged)
    ev: list[tuple[str, int, int]] = []
    key = itertools.count()
    kv: dict[int, int] = {}
    if paged:
        page = PAGE_TOKENS * cfg.kv_bytes_per_token
        ev.append(("a", next(key), sched.pool_bytes // page * page))
    while sched.waiting or sched.running:
        wave = sched.admit()
        for r in wave:
            if not paged:
                kv[r.rid] = next(key)
                ev.append(("a", kv[r.rid], r.tokens * cfg.kv_bytes_per_token))
        if wave:
            longest = max(r.prompt_len for r in wave)
            h, lg = next(key), next(key)
            ev.append(("a", h, len(wave) * longest * cfg.d_model * cfg.dtype_bytes))
            ev.append(("a", lg, len(wave) * longest * cfg.vocab * cfg.dtype_bytes))
            ev += [("f", lg, 0), ("f", h, 0)]
        if not sched.running:
            raise RuntimeError("scheduler admitted nothing with nothing running")
        for r in sched.advance(cfg.tokens_per_step):
            if not paged:
                ev.append(("f", kv.pop(r.rid), 0))
    return ev


def run(kind: str, ev, mem: int) -> tuple[bool, str, int]:
    a = Native(mem) if kind == "native" else Expandable(mem, mem + ES_SPARE)
    return replay(a, ev)


# small enough for the CPU; KV tensors >= 128 KiB, prefill tensors >= 64 KiB, the rest < 64 KiB
TRACE_CFG = Config(
    d_model=256,
    vocab=1024,
    n_layers=2,
    kv_dim=64,
    budget=24 << 20,
    utilization=0.85,
    max_batch=8,
    tokens_per_step=32,
    prompt_len=(64, 256),
    max_new=(64, 512),
    n_requests=40,
    dtype_bytes=4,  # the CPU run is float32
)
TRACE_MIN = 64 << 10


def job_trace(cfg: Config, paged: bool) -> list[tuple[str, int]]:
    """The job's own allocations and frees of TRACE_MIN bytes or more, CPU profiler, in order."""
    from _hc import Device
    from torch.profiler import ProfilerActivity, profile

    dev = Device(dry_run_cpu=True)
    log = logging.getLogger("trace")
    engine = Engine(cfg, dev, paged, log)
    sched = Scheduler(cfg, make_requests(cfg), cfg.budget, paged)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if paged:
            engine.make_pool(sched.pool_bytes)
        serve(cfg, dev, engine, sched, log)
        del engine
    mem = [e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return [("a" if n > 0 else "f", abs(n)) for n in mem if abs(n) >= TRACE_MIN]


def model_trace(cfg: Config, paged: bool) -> list[tuple[str, int]]:
    sizes: dict[int, int] = {}
    out = []
    for op, key, n in events(cfg, cfg.budget, paged):
        if op == "a":
            sizes[key] = n
        n = sizes[key]
        if n >= TRACE_MIN:
            out.append((op, n))
    return out


def compare_trace() -> int:
    bad = 0
    for paged in (False, True):
        job = job_trace(TRACE_CFG, paged)
        mod = model_trace(TRACE_CFG, paged)
        if paged:  # the pool is never freed in the job's loop; the engine's teardown frees it
            job = [x for x in job if x != ("f", mod[0][1])] if mod else job
        same = job == mod
        bad += not same
        first = next((i for i, (x, y) in enumerate(zip(job, mod, strict=False)) if x != y), None)
        print(
            f"{'kv-pool' if paged else 'baseline'}: job {len(job)} events >= 64 KiB, model "
            f"{len(mod)}: {'identical' if same else f'DIFFER (first at {first})'}"
        )
        if not same and first is not None:
            print("  job  :", job[first : first + 6])
            print("  model:", mod[first : first + 6])
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare-trace", action="store_true")
    if ap.parse_args().compare_trace:
        return compare_trace()
    cfg = GPU
    free = cfg.budget
    base = events(cfg, free, paged=False)
    fixed = events(cfg, free, paged=True)
    n_big = sum(1 for op, _, n in base if op == "a" and n > SMALL)
    print(f"job budget {free / GiB:.1f} GiB; {n_big} allocations above 1 MiB in the baseline")
    rows = [
        ("baseline, native", "native", base, 1.0, False),
        ("baseline, native, +5 % memory", "native", base, 1.05, False),
        ("baseline, native, +10 % memory", "native", base, 1.10, None),
        ("baseline, expandable_segments", "expandable", base, 1.0, True),
        ("baseline, expandable_segments, -10 % memory", "expandable", base, 0.90, True),
        ("--fix kv-pool, native", "native", fixed, 1.0, True),
        ("--fix kv-pool, native, -5 % memory", "native", fixed, 0.95, True),
    ]
    bad = 0
    for label, kind, ev, f, want_ok in rows:
        ok, msg, i = run(kind, ev, int(free * f))
        verdict = "ok " if ok else "OOM"
        flag = "" if want_ok is None or ok == want_ok else "   <-- not as designed"
        bad += bool(flag)
        print(f"{label:<46} {verdict} at event {i:>5}/{len(ev)}: {msg}{flag}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
