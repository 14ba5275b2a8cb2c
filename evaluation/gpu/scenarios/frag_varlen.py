"""Fragmentation, pattern (b): variable-length sequences in transformer training.

A small causal-attention model trains on batches whose sequence length changes every step (no
padding to a fixed length), and, like much hand-written attention code, caches one causal mask
per sequence length it has seen. Each new mask is carved out of a free piece of some segment
that held the previous steps' attention scores, and as it lives forever it pins that segment.
The native caching allocator can only return whole free segments to CUDA, so after a few
hundred steps the reserved memory is a patchwork of pinned segments, none big enough for the
attention scores of the long batch at the end of the epoch: OOM with several GiB reserved but
unallocated.

The GPU is filled by the job's own weights (a ballast) to leave ``--leave-gib`` free.

Fixes: allocator ``expandable_segments:True`` (environment); code ``--fix no-mask-cache``
(build the mask every step instead of caching it); ``--fix bucket`` (pad lengths up to a
multiple of 1024, so only a few shapes occur).
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from _common import GiB, banner, fill_gpu, parse_args

FIXES = ["no-mask-cache", "bucket"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=8.0)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--final-len", type=int, default=3072)
    p.add_argument("--len-step", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--mem-report", action="store_true", help="print allocator figures (calibration)"
    )


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ff1 = torch.nn.Linear(d, 4 * d)
        self.ff2 = torch.nn.Linear(4 * d, d)
        self.ln1 = torch.nn.LayerNorm(d)
        self.ln2 = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask_fn) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (
            self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        )
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d // self.heads))
        att = att + mask_fn(n)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class TinyLM(torch.nn.Module):
    def __init__(
        self, d: int = 512, heads: int = 8, depth: int = 2, cache_masks: bool = True
    ) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(depth))
        self.cache_masks = cache_masks
        self._masks: dict[int, torch.Tensor] = {}

    def causal_mask(self, n: int) -> torch.Tensor:
        m = self._masks.get(n)
        if m is None:
            m = torch.full((n, n), float("-inf"), device="cuda").triu(1)
            if self.cache_masks:
                self._masks[n] = m
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x, self.causal_mask)
        return x


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner()
    ballast = fill_gpu(args.leave_gib)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    d, batch = 512, 4
    model = TinyLM(d=d, cache_masks="no-mask-cache" not in args.fixes).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [
        rng.randrange(args.min_len, args.max_len + 1, args.len_step) for _ in range(args.steps)
    ]
    lengths.append(args.final_len)  # the long tail of the length distribution
    for step, n in enumerate(lengths, 1):
        if "bucket" in args.fixes:
            n = -(-n // 1024) * 1024
        x = torch.randn(batch, n, d, device="cuda")
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == len(lengths):
            print(f"step {step} seq_len {n} loss {loss.item():.4f}", flush=True)
        if args.mem_report and (step % 50 == 0 or step >= len(lengths) - 1):
            s = torch.cuda.memory_stats()
            bb = ballast.numel()  # figures below exclude the ballast
            print(
                f"  [mem] alloc {(s['allocated_bytes.all.current'] - bb) / GiB:.2f} GiB"
                f" reserved {(s['reserved_bytes.all.current'] - bb) / GiB:.2f} GiB"
                f" peak_alloc {(s['allocated_bytes.all.peak'] - bb) / GiB:.2f} GiB"
                f" peak_reserved {(s['reserved_bytes.all.peak'] - bb) / GiB:.2f} GiB"
                f" segments {s['segment.all.current']} masks {len(model._masks)}",
                flush=True,
            )
    print("epoch done", flush=True)
    del ballast


if __name__ == "__main__":
    main()
