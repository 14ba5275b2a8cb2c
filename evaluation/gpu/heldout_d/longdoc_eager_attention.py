#!/usr/bin/env python3
"""Long-document classification eval with an encoder whose attention is written out by hand.

An in-house legal-document classifier (6 encoder layers, d=1024, 16 heads, bf16) ported from an
older codebase computes attention "eagerly": the (heads, L, L) score matrix, a float32 softmax
over it, then the weighted sum. The eval set is sorted by length (one document a batch, no
padding): 2k, 4k and 8k-token documents pass (the 8k ones peak at about 8 GiB); the first
16384-token document needs a 8 GiB score matrix, a 16 GiB float32 softmax and its 8 GiB bf16
copy at once, about 32 GiB, where the job has 20 GiB (the other members of the ensemble are an
in-process ballast). The batch is already one document: a smaller batch cannot help.

``--fix sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (a fused kernel that never
materializes the score matrix).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, GiB, gib, parse_args

GPU = {"d": 1024, "heads": 16, "layers": 6, "classes": 41, "leave": 20 * GiB,
       "lengths": [2048] * 3 + [4096] * 3 + [8192] * 3 + [16384] * 3}  # fmt: skip
CPU = {"d": 64, "heads": 4, "layers": 2, "classes": 5, "leave": 0,
       "lengths": [16] * 2 + [32] * 2 + [64] * 2}  # fmt: skip


class Bar:
    """A tqdm-like bar on stderr: carriage returns between updates, as tqdm writes to a log."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n, self.t0 = total, desc, 0, time.time()
        self.post = ""
        self._draw()

    def _draw(self) -> None:
        frac = self.n / self.total
        fill = int(frac * 10)
        el = time.time() - self.t0
        rate = self.n / el if el > 0 and self.n else 0.0
        left = (self.total - self.n) / rate if rate else 0.0
        bar = "█" * fill + " " * (10 - fill)
        rate_s = f"{rate:.2f}doc/s" if rate else "?doc/s"
        sys.stderr.write(
            f"\r{self.desc}: {frac:4.0%}|{bar}| {self.n}/{self.total} "
            f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{int(left) // 60:02d}:{int(left) % 60:02d}, "
            f"{rate_s}{', ' + self.post if self.post else ''}]"
        )
        sys.stderr.flush()

    def set_postfix(self, text: str) -> None:
        self.post = text
        self._draw()

    def update(self) -> None:
        self.n += 1
        self._draw()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class Encoder(torch.nn.Module):
    def __init__(self, cfg: dict, sdpa: bool) -> None:
        super().__init__()
        d = cfg["d"]
        self.heads, self.sdpa = cfg["heads"], sdpa
        self.embed = torch.nn.Embedding(50000, d)
        self.qkv = torch.nn.ModuleList([torch.nn.Linear(d, 3 * d) for _ in range(cfg["layers"])])
        self.proj = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(cfg["layers"])])
        self.ff1 = torch.nn.ModuleList([torch.nn.Linear(d, 4 * d) for _ in range(cfg["layers"])])
        self.ff2 = torch.nn.ModuleList([torch.nn.Linear(4 * d, d) for _ in range(cfg["layers"])])
        self.ln = torch.nn.ModuleList([torch.nn.LayerNorm(d) for _ in range(2 * cfg["layers"])])
        self.head = torch.nn.Linear(d, cfg["classes"])

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
        del scores
        return probs @ v

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        b, n, d = h.shape
        for i in range(len(self.qkv)):
            x = self.ln[2 * i](h)
            q, k, v = self.qkv[i](x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
            a = self.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            h = h + self.proj[i](a.transpose(1, 2).reshape(b, n, d))
            h = h + self.ff2[i](F.gelu(self.ff1[i](self.ln[2 * i + 1](h))))
        return self.head(h.mean(1))


def main() -> int:
    a = parse_args(__doc__.splitlines()[1], ["sdpa"])
    dev = Device(a.dry_run_cpu)
    cfg = CPU if dev.dry else GPU
    torch.manual_seed(0)
    with dev.device:  # parameters created and initialized on the GPU
        model = Encoder(cfg, sdpa=a.fix == "sdpa").to(torch.bfloat16).eval()
    print(f"loaded classifier on {dev.name}; attention: {'sdpa' if a.fix else 'eager'}", flush=True)
    ballast = dev.ballast(cfg["leave"])  # the ensemble's other members
    print(f"{gib(dev.free_bytes())} GiB free for evaluation", flush=True)
    lengths = cfg["lengths"]
    bar = Bar(len(lengths), "eval")
    correct = 0
    with torch.inference_mode():
        for i, n in enumerate(lengths):
            bar.set_postfix(f"len={n}")
            ids = torch.randint(0, 50000, (1, n), device=dev.device)
            label = i % cfg["classes"]
            pred = int(model(ids).argmax(-1))
            correct += int(pred == label)
            bar.update()
    bar.close()
    print(f"accuracy {correct / len(lengths):.3f} on {len(lengths)} documents", flush=True)
    del ballast
    return 0


if __name__ == "__main__":
    sys.exit(main())
