#!/usr/bin/env python3
"""Layer-wise probing of a hash-routed mixture-of-experts stack (Mixtral expert shapes).

A research job: packed batches of documents from six domains go through an 8-layer MoE stack
(8 experts a layer, d=4096, SwiGLU d_ff=14336, bf16, inference mode). Every layer's hidden
state (and the embeddings) is sampled at every 4th position, cast to fp32 and kept on the GPU as
probe features; every 4 batches the buffered features are folded into one Gram matrix per layer
(``G += K^T K``, for ridge probes solved offline) and dropped. Routing is hash routing (each
layer maps a token id to one expert through a fixed table), so the expert buckets follow the
batch's vocabulary: a domain-heavy batch sends a third of its tokens to one expert. Each expert
bucket is a fresh (n, 14336) tensor of a size seen nowhere else, batches vary from 80k to 130k
tokens, and the probe features (128-256 MiB, kept for up to 4 batches) are allocated between
them. The rest of the checkpoint, loaded before, is an in-process ballast that leaves the job
23 GiB; the largest working set is about 19 GiB.

``--fix static-buffers``: every large tensor is allocated once, at the largest batch, before the
first batch (hidden-state, permuted-token and expert-output buffers, (8192, 14336) expert tiles
that each bucket goes through in turn, and one 65536-row feature buffer per layer that is folded
into its Gram matrix whenever it fills), so no size ever changes.

``--leave-gib G`` (calibration only) sets the job's budget; the scenario runs without it.
"""

from __future__ import annotations

import logging
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, GiB, gib, parse_args

log = logging.getLogger("probe")

GPU = {
    "d": 4096, "f": 14336, "experts": 8, "layers": 8, "vocab": 32000, "seq": 2048,
    "rows": (40, 64), "batches": 8, "tile": 8192, "every": 4, "fold_every": 4,
    "feat_rows": 65536, "leave": 23 * GiB,
}  # fmt: skip
CPU = {
    "d": 64, "f": 224, "experts": 8, "layers": 3, "vocab": 500, "seq": 32,
    "rows": (10, 16), "batches": 5, "tile": 64, "every": 4, "fold_every": 2,
    "feat_rows": 200, "leave": 0,
}  # fmt: skip
DOMAINS = ["web", "code", "legal", "biomed", "math", "chat"]


def routing_tables(cfg: dict) -> list[list[int]]:
    """Per layer, token id -> expert (hash routing): a fixed seeded table."""
    rng = random.Random(1234)
    return [
        [rng.randrange(cfg["experts"]) for _ in range(cfg["vocab"])] for _ in range(cfg["layers"])
    ]


def batch_tokens(cfg: dict, i: int) -> tuple[str, list[int]]:
    """Batch i: (domain, token ids). Rows of ``seq`` tokens, a domain's Zipf-like vocabulary."""
    rng = random.Random(7000 + i)
    domain = DOMAINS[rng.randrange(len(DOMAINS))]
    rows = rng.randrange(cfg["rows"][0], cfg["rows"][1] + 1)
    drng = random.Random(DOMAINS.index(domain))
    ranks = list(range(cfg["vocab"]))
    drng.shuffle(ranks)  # the domain's most frequent tokens
    cum, acc = [], 0.0
    for r in range(1, cfg["vocab"] + 1):
        acc += 1.0 / r**1.1
        cum.append(acc)
    n = rows * cfg["seq"]
    return domain, [ranks[k] for k in rng.choices(range(cfg["vocab"]), cum_weights=cum, k=n)]


def expert_counts(table: list[int], ids: list[int], experts: int) -> list[int]:
    counts = [0] * experts
    for t in ids:
        counts[table[t]] += 1
    return counts


class MoEStack:
    def __init__(self, cfg: dict, dev: torch.device) -> None:
        d, f, e, L = cfg["d"], cfg["f"], cfg["experts"], cfg["layers"]
        torch.manual_seed(0)

        def w(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=torch.bfloat16, device=dev).normal_(0.0, 0.02)

        self.embed = w(cfg["vocab"], d)
        self.w1 = [w(e, d, f) for _ in range(L)]
        self.w3 = [w(e, d, f) for _ in range(L)]
        self.w2 = [w(e, f, d) for _ in range(L)]
        tables = routing_tables(cfg)
        self.route = [torch.tensor(t, device=dev) for t in tables]
        self.experts = e

    def layer(self, i: int, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        e = self.route[i][ids]
        order = torch.argsort(e, stable=True)
        counts = torch.bincount(e, minlength=self.experts).tolist()
        xs = x.index_select(0, order)
        ys, off = [], 0
        for j, n in enumerate(counts):
            if n == 0:
                continue
            xe = xs[off : off + n]
            off += n
            h1 = xe @ self.w1[i][j]
            h3 = xe @ self.w3[i][j]
            g = F.silu(h1)
            del h1
            g.mul_(h3)
            del h3
            ys.append(g @ self.w2[i][j])
            del g
        y = torch.cat(ys)
        del ys, xs
        out = torch.empty_like(x).index_copy_(0, order, y)
        del y
        return x + out


class StaticBuffers:
    """The fix: every large buffer allocated once, at the largest batch; the probe features go
    into one preallocated buffer per layer, folded into its Gram matrix whenever it fills."""

    def __init__(self, cfg: dict, stack: MoEStack, grams: list[torch.Tensor]) -> None:
        dev = grams[0].device
        n_max = cfg["rows"][1] * cfg["seq"]
        d, f, t = cfg["d"], cfg["f"], cfg["tile"]
        bf = torch.bfloat16
        self.stack, self.grams, self.tile, self.every = stack, grams, t, cfg["every"]
        self.cur = torch.empty(n_max, d, dtype=bf, device=dev)
        self.nxt = torch.empty(n_max, d, dtype=bf, device=dev)
        self.xs = torch.empty(n_max, d, dtype=bf, device=dev)
        self.y = torch.empty(n_max, d, dtype=bf, device=dev)
        self.h1 = torch.empty(t, f, dtype=bf, device=dev)
        self.h3 = torch.empty(t, f, dtype=bf, device=dev)
        self.feat = [torch.empty(cfg["feat_rows"], d, device=dev) for _ in grams]
        self.fill = [0] * len(grams)

    def keep(self, layer: int, h: torch.Tensor) -> None:
        rows = h[:: self.every]
        buf, p = self.feat[layer], self.fill[layer]
        if p + rows.shape[0] > buf.shape[0]:
            self.fold(layer)
            p = 0
        buf[p : p + rows.shape[0]].copy_(rows)
        self.fill[layer] = p + rows.shape[0]

    def fold(self, layer: int) -> None:
        k = self.feat[layer][: self.fill[layer]]
        self.grams[layer].addmm_(k.T, k)
        self.fill[layer] = 0

    def forward(self, ids: torch.Tensor) -> None:
        s, n = self.stack, ids.numel()
        x, nxt = self.cur[:n], self.nxt[:n]
        torch.index_select(s.embed, 0, ids, out=x)
        self.keep(0, x)
        for i in range(len(s.w1)):
            e = s.route[i][ids]
            order = torch.argsort(e, stable=True)
            counts = torch.bincount(e, minlength=s.experts).tolist()
            xs, y = self.xs[:n], self.y[:n]
            torch.index_select(x, 0, order, out=xs)
            off = 0
            for j, c in enumerate(counts):
                for a in range(off, off + c, self.tile):
                    b = min(a + self.tile, off + c)
                    h1, h3 = self.h1[: b - a], self.h3[: b - a]
                    torch.matmul(xs[a:b], s.w1[i][j], out=h1)
                    torch.matmul(xs[a:b], s.w3[i][j], out=h3)
                    F.silu(h1, inplace=True).mul_(h3)
                    torch.matmul(h1, s.w2[i][j], out=y[a:b])
                off += c
            nxt.index_copy_(0, order, y).add_(x)
            x, nxt = nxt, x
            self.keep(i + 1, x)


def main() -> int:
    a = parse_args(
        __doc__.splitlines()[1],
        ["static-buffers"],
        lambda p: p.add_argument(
            "--leave-gib", type=float, default=None, help="calibration: the job's budget on the GPU"
        ),
    )
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stdout,
    )
    dev = Device(a.dry_run_cpu)
    cfg = dict(CPU if dev.dry else GPU)
    if a.leave_gib is not None:
        cfg["leave"] = int(a.leave_gib * GiB)
    log.info("device %s, %s GiB total, fix=%s", dev.name, gib(dev.total_bytes()), a.fix)
    stack = MoEStack(cfg, dev.device)
    weights = sum(t.numel() * 2 for ws in (stack.w1, stack.w3, stack.w2) for t in ws)
    log.info(
        "MoE stack: %d layers x %d experts (d=%d, d_ff=%d, hash routing), %s GiB of expert "
        "weights; probing %d hidden states on every %dth position",
        cfg["layers"], cfg["experts"], cfg["d"], cfg["f"], gib(weights), cfg["layers"] + 1,
        cfg["every"],
    )  # fmt: skip
    grams = [torch.zeros(cfg["d"], cfg["d"], device=dev.device) for _ in range(cfg["layers"] + 1)]
    ballast = dev.ballast(cfg["leave"])  # the rest of the checkpoint, loaded before
    log.info(
        "memory: allocated %s GiB, %s GiB free for activations and probe features",
        gib(dev.allocated()), gib(dev.free_bytes()),
    )  # fmt: skip
    static = StaticBuffers(cfg, stack, grams) if a.fix == "static-buffers" else None
    tables = routing_tables(cfg)
    kept: list[list[torch.Tensor]] = [[] for _ in grams]
    seen = 0
    for bi in range(cfg["batches"]):
        domain, ids_l = batch_tokens(cfg, bi)
        loads = expert_counts(tables[0], ids_l, cfg["experts"])
        hot = max(range(len(loads)), key=loads.__getitem__)
        log.info(
            "batch %d/%d domain=%s tokens=%d; layer 0 hottest expert %d takes %.1f%%",
            bi + 1, cfg["batches"], domain, len(ids_l), hot, 100.0 * loads[hot] / len(ids_l),
        )  # fmt: skip
        ids = torch.tensor(ids_l, device=dev.device)
        with torch.inference_mode():
            if static is not None:
                static.forward(ids)
            else:
                x = stack.embed[ids]
                kept[0].append(x[:: cfg["every"]].float())
                for i in range(cfg["layers"]):
                    x = stack.layer(i, x, ids)
                    kept[i + 1].append(x[:: cfg["every"]].float())
                del x
                if (bi + 1) % cfg["fold_every"] == 0:
                    for g, ks in zip(grams, kept, strict=True):
                        for k in ks:
                            g.addmm_(k.T, k)
                        ks.clear()
        seen += (len(ids_l) + cfg["every"] - 1) // cfg["every"]
        del ids
        dev.sync()
        log.info(
            "batch %d done: %d probe rows, reserved %s GiB, max allocated %s GiB",
            bi + 1, seen, gib(dev.reserved()),
            gib(0 if dev.dry else torch.cuda.max_memory_allocated()),
        )  # fmt: skip
    if static is not None:
        for layer in range(len(grams)):
            static.fold(layer)
    traces = [float(g.diagonal().sum()) for g in grams]
    log.info(
        "probe Gram traces per layer: %s; ridge solves run offline", [f"{t:.3g}" for t in traces]
    )
    del ballast
    return 0


if __name__ == "__main__":
    sys.exit(main())
