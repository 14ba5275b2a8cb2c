"""Gradient accumulation done wrong: one backward() after summing the micro-batch losses.

A GPT-2 medium (transformers, random init) is trained with bf16 autocast on micro-batches of
8 x 1024 tokens, 16 micro-batches per optimizer step (an effective batch of 128 sequences).
The loop adds each micro-batch's loss to a running total and calls ``backward()`` once per
optimizer step, so every micro-batch's autograd graph, with all its saved activations, stays
alive until then: the memory of the whole effective batch (about 15 GiB per micro-batch, some
240 GiB in all) instead of one micro-batch's. It runs out of memory in the forward pass of the
ninth or so micro-batch of the first step.

Fix: ``--fix backward-each`` (call ``(loss / accum).backward()`` per micro-batch, as
accumulation is meant to be done).
"""

from __future__ import annotations

import time

import torch
from _common_ho import allocated, autocast, banner, parse_args, sync
from transformers import GPT2Config, GPT2LMHeadModel

FIXES = ["backward-each"]


def extra(p):
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--accum", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "finetune_gpt2_medium")
    torch.manual_seed(args.seed)
    dev = args.dev
    if args.dry_run_cpu:
        cfg = GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=4,
            n_positions=64,
            vocab_size=1000,
            bos_token_id=0,
            eos_token_id=0,
        )
        micro_bs, seq, accum = 2, 32, 4
    else:
        cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024)
        micro_bs, seq, accum = args.micro_batch, args.seq, args.accum
    with torch.device(dev):
        model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model gpt2-medium-like ({n_params / 1e6:.0f}M params), micro-batch {micro_bs}x{seq}, "
        f"{accum} accumulation steps, effective batch {micro_bs * accum} sequences",
        flush=True,
    )
    each = "backward-each" in args.fixes
    for step in range(1, args.steps + 1):
        t0 = time.time()
        loss_total = torch.zeros((), device=dev)
        for _ in range(accum):
            ids = torch.randint(0, cfg.vocab_size, (micro_bs, seq), device=dev)
            with autocast(args):
                out = model(input_ids=ids, labels=ids)
            loss = out.loss / accum
            if each:
                loss.backward()
                loss_total += loss.detach()
            else:
                loss_total = loss_total + loss  # keeps every micro-batch's graph alive
        if not each:
            loss_total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args)
        dt = time.time() - t0
        print(
            f"step {step} | loss {loss_total.item():.4f} | grad_norm {grad_norm.item():.3f} | "
            f"lr 3.00e-04 | {micro_bs * seq * accum / dt:.0f} tok/s | "
            f"mem {allocated(args) / 2**30:.2f} GiB",
            flush=True,
        )
    print("training done", flush=True)


if __name__ == "__main__":
    main()
