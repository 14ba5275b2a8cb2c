"""A torch.compile'd training step that does not fit: the OOM is raised inside compiled code.

A small GPT (2 decoder blocks, width 2048, SDPA attention) is wrapped in ``torch.compile``
(default mode, Inductor) and trained under bf16 autocast on a frozen-backbone budget: the
backbone's weights (a block held by the job) leave 16 GiB. One step on 320 x 1024 tokens needs
about 65 GiB in eager mode and still well over 16 GiB after Inductor's fusion and
recomputation, so the first compiled forward runs out of memory in an Inductor-generated
buffer allocation.

Fixes: ``--fix grad-accum[=N]`` (N micro-batches per step, default 8, gradients accumulated;
the compiled graph is recompiled once for the smaller shape).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _common_ho import GiB, allocated, autocast, banner, hold, parse_args, sync

FIXES = ["grad-accum"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=16.0)
    p.add_argument("--batch", type=int, default=320)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d, bias=False)
        self.out = torch.nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, depth: int, seq: int) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(depth))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "train_gpt_compiled")
    torch.manual_seed(args.seed)
    dev = args.dev
    dry = args.dry_run_cpu
    vocab, d, heads, depth = (512, 64, 4, 2) if dry else (8192, 2048, 16, 2)
    batch, seq = (8, 32) if dry else (args.batch, args.seq)
    micro = int(args.fixes.get("grad-accum") or 8) if "grad-accum" in args.fixes else 1
    torch.set_float32_matmul_precision("high")
    backbone = hold(args, args.leave_gib, "frozen backbone loaded")
    model = GPT(vocab, d, heads, depth, seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"trainable model {n_params / 1e6:.0f}M params; compiling (inductor, default mode)")
    cmodel = torch.compile(model)
    print(
        f"batch {batch}x{seq} tokens, {micro} micro-batch(es) per step, bf16 autocast", flush=True
    )
    for step in range(1, args.steps + 1):
        t0 = time.time()
        for _ in range(micro):
            ids = torch.randint(0, vocab, (batch // micro, seq), device=dev)
            with autocast(args):
                loss = cmodel(ids, torch.roll(ids, -1, dims=1)) / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args)
        dt = time.time() - t0
        print(
            f"step {step:4d} | loss {loss.item() * micro:.4f} | dt {dt * 1000:.0f} ms | "
            f"tok/s {batch * seq / dt:.0f} | mem {allocated(args) / GiB:.1f} GiB",
            flush=True,
        )
    print("training done", flush=True)
    del backbone


if __name__ == "__main__":
    main()
