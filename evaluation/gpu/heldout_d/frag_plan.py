#!/usr/bin/env python3
"""Size ``moe_probe_hidden.py`` with set C's allocator model before any GPU run.

Replays the large-pool allocations of the job's forward (the same batches, the same hash routing,
the same tensor order) through ``heldout_c/alloc_sim.py``'s ``Native`` and ``Expandable`` models
for a range of activation budgets, and prints, per budget, whether each allocator gets through
all batches (or the batch and request where it stops). The job's budget ``GPU["leave"]`` should
sit where the native model fails and the expandable one passes with room on both sides. A model,
not the allocator: the GPU runs decide.

    python3 evaluation/gpu/heldout_d/frag_plan.py [--budgets 19,20,...] [--slack-mib 256]

Needs torch only to import the job's module (its configuration and routing); nothing runs on a
device.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
GiB = 1 << 30
MiB = 1 << 20
CUBLAS_WS = 32 * MiB  # cuBLAS workspace, allocated at the first matmul and kept


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def events(job: ModuleType, cfg: dict) -> tuple[list[tuple[str, int, int]], list[int]]:
    """The baseline's large allocations, in the job's order; and where each batch starts."""
    d, f, L, E = cfg["d"], cfg["f"], cfg["layers"], cfg["experts"]
    tables = job.routing_tables(cfg)
    ev: list[tuple[str, int, int]] = []
    starts: list[int] = []
    key = [0]

    def a(n: int) -> int:
        key[0] += 1
        ev.append(("a", key[0], n))
        return key[0]

    def fr(k: int) -> None:
        ev.append(("f", k, 0))

    ws = False
    kept: list[list[int]] = [[] for _ in range(L + 1)]
    for bi in range(cfg["batches"]):
        starts.append(len(ev))
        _, ids = job.batch_tokens(cfg, bi)
        n_tok = len(ids)
        act = n_tok * d * 2
        feat = -(-n_tok // cfg["every"]) * d * 4
        x = a(act)  # embed[ids]
        kept[0].append(a(feat))
        for i in range(L):
            counts = job.expert_counts(tables[i], ids, E)
            xs = a(act)
            ys = []
            for n in counts:
                if n == 0:
                    continue
                h1 = a(n * f * 2)
                if not ws:
                    a(CUBLAS_WS)
                    ws = True
                h3 = a(n * f * 2)
                g = a(n * f * 2)
                fr(h1)
                fr(h3)
                ys.append(a(n * d * 2))
                fr(g)
            y = a(act)  # torch.cat
            for k in reversed(ys):
                fr(k)
            fr(xs)
            out = a(act)
            fr(y)
            h = a(act)  # x + out
            fr(out)
            fr(x)
            x = h
            kept[i + 1].append(a(feat))
        fr(x)
        if (bi + 1) % cfg["fold_every"] == 0:
            for ks in kept:
                for k in ks:
                    fr(k)
                ks.clear()
    return ev, starts


def batch_of(i: int, starts: list[int]) -> int:
    return max(b for b, s in enumerate(starts) if s <= i) + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--budgets", default="19,20,21,22,23,24,25,26")
    ap.add_argument(
        "--slack-mib",
        type=int,
        default=256,
        help="budget lost to what the model leaves out (small pool, CUDA context growth)",
    )
    a = ap.parse_args()
    sim = _load("alloc_sim_c", HERE.parent / "heldout_c" / "alloc_sim.py")
    job = _load("moe_probe_hidden", HERE / "moe_probe_hidden.py")
    cfg = job.GPU
    ev, starts = events(job, cfg)
    peak, live, cur = 0, {}, 0
    for op, k, n in ev:
        if op == "a":
            live[k] = sim.round_size(n)
            cur += live[k]
            peak = max(peak, cur)
        else:
            cur -= live.pop(k)
    print(f"{len(ev)} events, {cfg['batches']} batches; peak live {peak / GiB:.2f} GiB")
    for bi in range(cfg["batches"]):
        dom, ids = job.batch_tokens(cfg, bi)
        loads = [job.expert_counts(t, ids, cfg["experts"]) for t in job.routing_tables(cfg)]
        hot = max(max(c) / len(ids) for c in loads)
        print(f"  batch {bi + 1}: {dom:<7} {len(ids):>6} tokens, hottest bucket {hot:.0%}")
    for b in (float(x) for x in a.budgets.split(",")):
        budget = int(b * GiB) - a.slack_mib * MiB
        res = []
        for name, alloc in (
            ("native", sim.Native(budget)),
            ("expandable", sim.Expandable(budget, 1 << 40)),
        ):
            ok, msg, i = sim.replay(alloc, ev)
            res.append(f"{name}: {'ok' if ok else f'OOM batch {batch_of(i, starts)} ({msg})'}")
        print(f"leave {b:5.1f} GiB | " + " | ".join(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
