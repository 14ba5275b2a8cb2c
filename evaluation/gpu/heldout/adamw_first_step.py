"""Full fine-tune under bf16 autocast with fp32 master weights: AdamW's first step tips it over.

A Llama-style causal LM (transformers LlamaForCausalLM, random init, built on the GPU) with
fp32 weights is fine-tuned under bf16 autocast with AdamW. The number of layers is chosen so
the fp32 weights are about 30% of the GPU: weights + gradients (about 60%) and the forward and
backward pass fit; AdamW then creates its two fp32 state tensors per parameter lazily, inside
the first ``optimizer.step()``, which needs another 60% of the GPU. The OOM is raised from the
optimizer's state initialisation on step 1.

Fixes: ``--fix adafactor`` (torch.optim.Adafactor, factored second moment, no first moment;
``foreach=False`` so no full-size temporary); ``--fix bf16-params`` (bf16 weights, so bf16
gradients and optimizer state); ``--fix freeze-base`` (train only the last 2 layers, the final
norm and the LM head).
"""

from __future__ import annotations

import time

import torch
from _common_ho import GiB, allocated, autocast, banner, parse_args, sync, total_bytes
from transformers import LlamaConfig, LlamaForCausalLM

FIXES = ["adafactor", "bf16-params", "freeze-base"]

HIDDEN, INTER, HEADS, KV_HEADS, VOCAB = 5120, 13824, 40, 8, 32000


def extra(p):
    p.add_argument("--weights-fraction", type=float, default=0.30)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)


def layers_for(weight_bytes: float) -> int:
    """Decoder layers whose fp32 weights (plus embeddings and head) come to ``weight_bytes``."""
    head_dim = HIDDEN // HEADS
    per_layer = (
        2 * HIDDEN * HIDDEN  # q, o
        + 2 * HIDDEN * KV_HEADS * head_dim  # k, v
        + 3 * HIDDEN * INTER  # gate, up, down
        + 2 * HIDDEN  # norms
    )
    fixed = 2 * VOCAB * HIDDEN + HIDDEN
    return max(1, int((weight_bytes / 4 - fixed) // per_layer))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "full_finetune_llama")
    torch.manual_seed(args.seed)
    dev = args.dev
    if args.dry_run_cpu:
        cfg = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=3,
            vocab_size=1000,
        )
        batch, seq = 2, 16
    else:
        n_layers = layers_for(args.weights_fraction * total_bytes(args))
        cfg = LlamaConfig(
            hidden_size=HIDDEN,
            intermediate_size=INTER,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            num_hidden_layers=n_layers,
            vocab_size=VOCAB,
            max_position_embeddings=4096,
        )
        batch, seq = args.batch, args.seq
    print(f"building llama-style model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}")
    with torch.device(dev):
        model = LlamaForCausalLM(cfg)
    if "bf16-params" in args.fixes:
        model.to(torch.bfloat16)
    if "freeze-base" in args.fixes:
        model.requires_grad_(False)
        for mod in (*model.model.layers[-2:], model.model.norm, model.lm_head):
            mod.requires_grad_(True)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in trainable)
    n_all = sum(p.numel() for p in model.parameters())
    print(
        f"trainable params: {n_train:,} || all params: {n_all:,} || "
        f"trainable%: {100 * n_train / n_all:.4f}",
        flush=True,
    )
    dtype = next(model.parameters()).dtype
    print(f"weights {dtype}, {allocated(args) / GiB:.1f} GiB on the GPU after loading", flush=True)
    if "adafactor" in args.fixes:
        opt: torch.optim.Optimizer = torch.optim.Adafactor(trainable, lr=1e-2, foreach=False)
    else:
        opt = torch.optim.AdamW(trainable, lr=2e-5, weight_decay=0.0)
    print(f"optimizer {type(opt).__name__}; batch {batch}x{seq} tokens; bf16 autocast", flush=True)
    for step in range(1, args.steps + 1):
        t0 = time.time()
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        with autocast(args):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args)
        print(
            f"{{'loss': {loss.item():.4f}, 'grad_norm': {grad_norm.item():.4f}, "
            f"'learning_rate': 2e-05, 'step': {step}, 'step_time_s': {time.time() - t0:.2f}}}",
            flush=True,
        )
    print("training done", flush=True)


if __name__ == "__main__":
    main()
