"""A DataLoader (workers, pinned memory) pads each batch to its longest document; one is huge.

A document classifier (a 12-layer Transformer encoder, width 768, bf16 autocast, AdamW) is
fine-tuned on a synthetic corpus served by a ``torch.utils.data.DataLoader`` with 4 worker
processes and ``pin_memory=True``; the collate function pads every batch of 16 to its longest
document. Nearly all documents are under 512 tokens, but the tokenizer was run without
truncation and a few scraped documents are 24-28k tokens long. The first batch that holds one
is padded to 16 x ~25k tokens: its activations need far more than the 24 GiB the rest of the
job leaves (the job's other weights are held in one block), and the forward pass runs out of
memory. Host memory and the pinned staging buffers are small; the OOM is the GPU's.

Fixes: ``--fix truncate`` (truncate documents to 512 tokens in the dataset, as the tokenizer
should have); ``--fix token-budget`` (a batch sampler that fills each batch up to 8192 padded
tokens instead of a fixed 16 documents, so the long document travels alone).
Option ``--num-workers 0`` if worker processes cannot start on the machine.
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
from _common_ho import GiB, allocated, autocast, banner, hold, parse_args, sync
from torch.utils.data import DataLoader, Dataset, Sampler

FIXES = ["truncate", "token-budget"]
MAX_LEN, VOCAB, CLASSES = 512, 30522, 20


def extra(p):
    p.add_argument("--leave-gib", type=float, default=24.0)
    p.add_argument("--docs", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)


class Docs(Dataset):
    """Token ids of synthetic documents; lengths are log-normal, with a few huge outliers."""

    def __init__(self, n: int, seed: int, truncate: int | None, scale: int = 1) -> None:
        rng = random.Random(seed)
        self.lengths = []
        for i in range(n):
            length = min(MAX_LEN, 32 + int(rng.lognormvariate(5.3, 0.6)))
            if i % 397 == 123:  # a scraped PDF dump that was never split
                length = 24576 + (i % 7) * 512
            if truncate:
                length = min(length, truncate)
            self.lengths.append(max(1, length // scale))

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        return torch.randint(1, VOCAB, (self.lengths[i],), generator=g), i % CLASSES


class TokenBudgetSampler(Sampler[list[int]]):
    """Shuffled batches of at most ``budget`` padded tokens (and at most ``max_batch`` docs)."""

    def __init__(self, lengths: list[int], budget: int, max_batch: int, seed: int) -> None:
        self.lengths, self.budget, self.max_batch, self.seed = lengths, budget, max_batch, seed

    def __iter__(self):
        order = torch.randperm(
            len(self.lengths), generator=torch.Generator().manual_seed(self.seed)
        )
        batch: list[int] = []
        longest = 0
        for i in order.tolist():
            n = self.lengths[i]
            full = len(batch) == self.max_batch or max(longest, n) * (len(batch) + 1) > self.budget
            if batch and full:
                yield batch
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            yield batch

    def __len__(self) -> int:
        return sum(1 for _ in self.__iter__())


def collate(
    items: list[tuple[torch.Tensor, int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    longest = max(t.numel() for t, _ in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    pad = torch.ones(len(items), longest, dtype=torch.bool)
    for row, (t, _) in enumerate(items):
        ids[row, : t.numel()] = t
        pad[row, : t.numel()] = False
    return ids, pad, torch.tensor([y for _, y in items])


class Classifier(torch.nn.Module):
    def __init__(self, d: int, heads: int, layers: int, max_pos: int) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Embedding(max_pos, d)
        layer = torch.nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, CLASSES)

    def forward(self, ids: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "finetune_doc_classifier")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    scale = 64 if dry else 1
    d, heads, layers = (64, 4, 2) if dry else (768, 12, 12)
    ds = Docs(args.docs, args.seed, MAX_LEN if "truncate" in args.fixes else None, scale)
    held = hold(args, args.leave_gib, "teacher and reference weights loaded")
    loader_kw = dict(
        num_workers=args.num_workers,
        pin_memory=not dry,
        collate_fn=collate,
        persistent_workers=False,
    )
    if "token-budget" in args.fixes:
        sampler = TokenBudgetSampler(ds.lengths, 8192 // scale, args.batch, args.seed)
        loader = DataLoader(ds, batch_sampler=sampler, **loader_kw)
    else:
        gen = torch.Generator().manual_seed(args.seed)
        loader = DataLoader(ds, batch_size=args.batch, shuffle=True, generator=gen, **loader_kw)
    model = Classifier(d, heads, layers, max(ds.lengths)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    print(
        f"{len(ds)} documents, longest {max(ds.lengths)} tokens; {len(loader)} batches; "
        f"{args.num_workers} workers, pin_memory={not dry}",
        flush=True,
    )
    model.train()
    t_wait = 0.0
    tokens = 0
    t_start = time.time()
    t_last = time.time()
    for step, (ids, pad, labels) in enumerate(loader, 1):
        t_wait += time.time() - t_last
        ids = ids.to(dev, non_blocking=True)
        pad = pad.to(dev, non_blocking=True)
        labels = labels.to(dev, non_blocking=True)
        tokens += ids.numel()
        with autocast(args):
            loss = F.cross_entropy(model(ids, pad).float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            sync(args)
            print(
                f"step {step}/{len(loader)} | loss {loss.item():.4f} | batch "
                f"{ids.shape[0]}x{ids.shape[1]} | {tokens / (time.time() - t_start):.0f} tok/s | "
                f"data wait {1000 * t_wait / step:.1f} ms/step | "
                f"mem {allocated(args) / GiB:.1f} GiB",
                flush=True,
            )
        t_last = time.time()
    print("epoch done", flush=True)
    del held


if __name__ == "__main__":
    main()
