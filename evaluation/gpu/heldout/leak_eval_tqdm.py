"""An evaluation loop keeps every batch's logits on the GPU; the tqdm bar's postfix shows it.

A language-model evaluation (embedding, 4 residual MLP blocks, a 32000-token head; bf16
autocast; ``torch.no_grad()``) appends each batch's logits (8 x 1024 x 32000 bf16, 500 MiB)
to a list on the GPU, to compute accuracy and calibration once the epoch is done. The only
memory figure the job prints is the tqdm progress bar's postfix (``mem=3.1G``), which tqdm
rewrites in place with carriage returns; the run dies part way through the epoch (the
training state, held in one block, leaves 12 GiB).

Fixes: ``--fix argmax`` (keep the predicted token ids only); ``--fix cpu`` (move each batch's
logits to host memory).
"""

from __future__ import annotations

import torch
from _common_ho import allocated, autocast, banner, hold, parse_args
from tqdm import tqdm

FIXES = ["argmax", "cpu"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=12.0)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)


class LM(torch.nn.Module):
    def __init__(self, vocab: int, d: int, depth: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.LayerNorm(d),
                torch.nn.Linear(d, 4 * d),
                torch.nn.GELU(),
                torch.nn.Linear(4 * d, d),
            )
            for _ in range(depth)
        )
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for blk in self.blocks:
            x = x + blk(x)
        return self.head(x)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "eval_lm")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    vocab, d, batch, seq = (500, 64, 2, 32) if dry else (32000, 2048, 8, 1024)
    state = hold(args, args.leave_gib, "training state loaded (weights, optimizer, EMA)")
    model = LM(vocab, d, 4).to(dev).eval()
    g = torch.Generator().manual_seed(args.seed)
    kept: list[torch.Tensor] = []
    targets: list[torch.Tensor] = []
    loss_sum = 0.0
    with torch.no_grad():
        bar = tqdm(range(args.batches), desc="eval", unit="batch")
        for i in bar:
            ids = torch.randint(0, vocab, (batch, seq + 1), generator=g).to(dev)
            with autocast(args):
                logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.float().flatten(0, 1), ids[:, 1:].flatten()
            )
            loss_sum += loss.item()
            if "argmax" in args.fixes:
                kept.append(logits.argmax(-1))
            elif "cpu" in args.fixes:
                kept.append(logits.cpu())
            else:
                kept.append(logits)
            targets.append(ids[:, 1:])
            bar.set_postfix(loss=f"{loss_sum / (i + 1):.3f}", mem=f"{allocated(args) / 2**30:.1f}G")
    correct = 0
    for k, t in zip(kept, targets, strict=True):
        pred = k.to(dev) if k.dim() == 2 else k.to(dev).argmax(-1)
        correct += int((pred == t).sum())
    acc = correct / sum(t.numel() for t in targets)
    print(f"eval done: loss {loss_sum / args.batches:.4f} accuracy {acc:.4f}", flush=True)
    del state


if __name__ == "__main__":
    main()
