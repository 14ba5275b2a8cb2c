#!/usr/bin/env python3
"""Replay ``serve_prefill_frag.py``'s large allocations through ``alloc_sim``'s allocator model.

The job's own ``Scheduler`` decides, step by step, which requests are admitted and which finish;
this script turns those decisions into the job's allocations of more than 1 MiB, in the job's
order (each admitted request's KV tensor, then the prefill's hidden states and logits, freed in
that order; finished requests' KV tensors), and replays them through the native model, the
``expandable_segments`` model and, for ``--fix kv-pool``, the native model again. It also shows
the margins: the native model with 5 % and 10 % more memory than the job has, the expandable
model with 10 % less. A model, not the allocator: the GPU runs decide.

    python3 bench/gpu/heldout_c/frag_check.py
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from alloc_sim import SMALL, Expandable, GiB, Native, replay  # noqa: E402
from serve_prefill_frag import GPU, PAGE_TOKENS, Config, Scheduler, make_requests  # noqa: E402

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


def main() -> int:
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
