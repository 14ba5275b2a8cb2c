#!/usr/bin/env python3
"""An embedding service that CUDA-graphs its encoder once per request shape, and never forgets.

A latency-tuned text-embedding server (8-layer encoder, d=2048, bf16, batches of 64) replays a
CUDA graph per input shape. Requests are padded only to a multiple of 16 tokens, so nearly every
new length (64-1024 tokens) captures a new graph; each capture gets its own private memory pool
(``torch.cuda.graph`` without ``pool=``), which keeps its activations' high-water mark (0.3-2.7
GiB) reserved for as long as the graph is cached, and the cache has no bound. Reserved memory
climbs with every new shape (the server logs it) until a capture runs out, in the 24 GiB the
server has (the reranker it also serves is an in-process ballast). The server logs the
exception, as an ASGI server does, and shuts down with exit status 1.

``--fix length-buckets``: pad to 4 length buckets (128/256/512/1024), capture the 4 graphs at
start-up, largest first, into one shared pool (``pool=torch.cuda.graph_pool_handle()``).
"""

from __future__ import annotations

import logging
import os
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, GiB, gib, parse_args


class _UvicornFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname + ':':<9} {super().format(record)}"


_handler = logging.StreamHandler(sys.stdout)
_handler.setFormatter(_UvicornFormat("%(message)s"))
logging.basicConfig(level=logging.INFO, handlers=[_handler])
log = logging.getLogger("uvicorn.error")
access = logging.getLogger("uvicorn.access")

GPU = {"d": 2048, "heads": 16, "layers": 8, "batch": 64, "min_len": 64, "max_len": 1024,
       "pad": 16, "buckets": [128, 256, 512, 1024], "requests": 48, "leave": 24 * GiB}  # fmt: skip
CPU = {"d": 64, "heads": 4, "layers": 2, "batch": 4, "min_len": 4, "max_len": 64,
       "pad": 4, "buckets": [16, 32, 64], "requests": 12, "leave": 0}  # fmt: skip


class Encoder(torch.nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        d, n = cfg["d"], cfg["layers"]
        self.heads = cfg["heads"]
        self.embed = torch.nn.Embedding(30522, d)
        self.qkv = torch.nn.ModuleList([torch.nn.Linear(d, 3 * d) for _ in range(n)])
        self.proj = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(n)])
        self.ff1 = torch.nn.ModuleList([torch.nn.Linear(d, 4 * d) for _ in range(n)])
        self.ff2 = torch.nn.ModuleList([torch.nn.Linear(4 * d, d) for _ in range(n)])
        self.ln = torch.nn.ModuleList([torch.nn.LayerNorm(d) for _ in range(2 * n)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        b, n, d = h.shape
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.ln[2 * i](h)).view(b, n, 3, self.heads, -1).unbind(2)
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
            h = h + self.proj[i](a.transpose(1, 2).reshape(b, n, d))
            h = h + self.ff2[i](F.gelu(self.ff1[i](self.ln[2 * i + 1](h))))
        return F.normalize(h.mean(1), dim=-1)


class Graphed:
    """One captured forward for one input shape (eager on the CPU dry run)."""

    def __init__(self, model: Encoder, shape: tuple[int, int], dev: Device, pool=None) -> None:
        self.model, self.dry = model, dev.dry
        self.static_in = torch.zeros(shape, dtype=torch.long, device=dev.device)
        if self.dry:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up, as the CUDA graphs notes advise
                model(self.static_in)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.static_out = model(self.static_in)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.static_in.copy_(ids)
        if self.dry:
            return self.model(self.static_in)
        self.graph.replay()
        return self.static_out


class Server:
    def __init__(self, cfg: dict, dev: Device, buckets: bool) -> None:
        self.cfg, self.dev, self.buckets = cfg, dev, buckets
        torch.manual_seed(0)
        with dev.device:  # parameters created and initialized on the GPU
            self.model = Encoder(cfg).to(torch.bfloat16).eval()
        self.graphs: dict[tuple[int, int], Graphed] = {}
        self.pool = None

    def padded(self, n: int) -> int:
        if self.buckets:
            return next(b for b in self.cfg["buckets"] if b >= n)
        p = self.cfg["pad"]
        return -(-n // p) * p

    def capture(self, shape: tuple[int, int]) -> Graphed:
        g = Graphed(self.model, shape, self.dev, self.pool)
        self.graphs[shape] = g
        log.info(
            "[embed] captured CUDA graph for batch=%d len=%d (graphs cached: %d, torch "
            "allocated %s GiB, reserved %s GiB)", shape[0], shape[1], len(self.graphs),
            gib(self.dev.allocated()), gib(self.dev.reserved()),
        )  # fmt: skip
        return g

    def startup(self) -> None:
        if self.buckets:
            if not self.dev.dry:
                self.pool = torch.cuda.graph_pool_handle()
            for b in sorted(self.cfg["buckets"], reverse=True):
                self.capture((self.cfg["batch"], b))

    def embed(self, lengths: list[int]) -> torch.Tensor:
        n = self.padded(max(lengths))
        ids = torch.zeros(len(lengths), n, dtype=torch.long)
        for i, m in enumerate(lengths):
            ids[i, :m] = torch.randint(1, 30522, (m,))
        shape = (len(lengths), n)
        g = self.graphs.get(shape) or self.capture(shape)
        with torch.inference_mode():
            return g(ids.to(self.dev.device, non_blocking=True)).float().cpu()


def main() -> int:
    a = parse_args(__doc__.splitlines()[1], ["length-buckets"])
    dev = Device(a.dry_run_cpu)
    cfg = CPU if dev.dry else GPU
    pid = os.getpid()
    log.info("Started server process [%d]", pid)
    log.info("Waiting for application startup.")
    server = Server(cfg, dev, buckets=a.fix == "length-buckets")
    ballast = dev.ballast(cfg["leave"])  # the reranker served from the same process
    log.info("[embed] encoder loaded on %s; %s GiB free for graphs and activations", dev.name,
             gib(dev.free_bytes()))  # fmt: skip
    with torch.inference_mode():
        server.startup()
    log.info("Application startup complete.")
    log.info("Uvicorn running on http://0.0.0.0:8080 (Press CTRL+C to quit)")
    rng = random.Random(42)
    try:
        for r in range(cfg["requests"]):
            lengths = [
                rng.randint(cfg["min_len"], cfg["max_len"] // 2) for _ in range(cfg["batch"])
            ]
            lengths[rng.randrange(cfg["batch"])] = rng.randint(cfg["min_len"], cfg["max_len"])
            with torch.inference_mode():
                out = server.embed(lengths)
            assert out.shape == (cfg["batch"], cfg["d"])
            access.info(
                '10.12.%d.%d:%d - "POST /v1/embeddings HTTP/1.1" 200 OK',
                r % 7, 10 + r % 23, 40000 + 37 * r,
            )  # fmt: skip
    except Exception:
        log.exception("Exception in ASGI application")
        access.info('10.12.0.7:53110 - "POST /v1/embeddings HTTP/1.1" 500 Internal Server Error')
        log.error("[embed] CUDA error in the model worker; marking unhealthy and shutting down")
        log.info("Shutting down")
        log.info("Finished server process [%d]", pid)
        return 1
    log.info("Shutting down")
    log.info("Finished server process [%d]", pid)
    del ballast
    return 0


if __name__ == "__main__":
    sys.exit(main())
