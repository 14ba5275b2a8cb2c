"""A retry loop (accelerate's find_executable_batch_size) shrinks the batch to zero and gives up.

A long-context evaluation harness scores 16384-token documents with a Llama-style model
(transformers, random init, bf16) loaded with ``attn_implementation="eager"``, inside
``accelerate.utils.find_executable_batch_size`` starting at batch 64: on an out-of-memory error
the decorator frees the cache and retries with 90% of the batch. Eager attention materialises
bf16 and float32 score matrices of 16 x 16384 x 16384 per sequence per layer (about 40 GiB for
one sequence), more than the 24 GiB the other resident models leave, so every batch size fails
down to zero. The decorator swallows the OOM errors; the log ends with "No executable batch
size found, reached zero." and no CUDA message at all.

Fixes: ``--fix sdpa`` (``attn_implementation="sdpa"``: memory-efficient attention; the retry
loop then settles on a batch that fits); ``--fix max-len=N`` (score the documents in windows
of N tokens, e.g. 4096).
"""

from __future__ import annotations

import math
import time

import torch
from _common_ho import GiB, allocated, banner, hold, parse_args, sync
from accelerate.utils import find_executable_batch_size
from transformers import LlamaConfig, LlamaForCausalLM

FIXES = ["sdpa", "max-len"]


def extra(p):
    p.add_argument("--leave-gib", type=float, default=24.0)
    p.add_argument("--docs", type=int, default=32)
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--start-batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "longctx_eval")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    seq = 256 if dry else args.seq
    window = int(args.fixes["max-len"] or 4096) if "max-len" in args.fixes else seq
    if dry:
        window = min(window, 64)
    attn = "sdpa" if "sdpa" in args.fixes else "eager"
    cfg = LlamaConfig(
        hidden_size=64 if dry else 1024,
        intermediate_size=128 if dry else 4096,
        num_attention_heads=4 if dry else 16,
        num_key_value_heads=4 if dry else 16,
        num_hidden_layers=2 if dry else 8,
        vocab_size=1000 if dry else 32000,
        max_position_embeddings=max(seq, 4096),
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    held = hold(args, args.leave_gib, "reference and reward models resident")
    with torch.device(dev):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.bfloat16)
    model.eval()
    g = torch.Generator().manual_seed(args.seed)
    docs = torch.randint(0, cfg.vocab_size, (args.docs, seq), generator=g)
    print(
        f"scoring {args.docs} documents of {seq} tokens in windows of {window}; "
        f"attn_implementation={model.config._attn_implementation}",
        flush=True,
    )

    @find_executable_batch_size(starting_batch_size=args.start_batch)
    def evaluate(batch_size: int) -> float:
        print(f"evaluating with batch_size={batch_size}", flush=True)
        t0 = time.time()
        nll, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, args.docs, batch_size):
                for w in range(0, seq, window):
                    ids = docs[i : i + batch_size, w : w + window].to(dev)
                    loss = model(input_ids=ids, labels=ids).loss
                    nll += loss.item() * ids.numel()
                    count += ids.numel()
        sync(args)
        print(
            f"batch_size={batch_size}: {count / (time.time() - t0):.0f} tok/s, "
            f"mem {allocated(args) / GiB:.1f} GiB",
            flush=True,
        )
        return math.exp(nll / count)

    ppl = evaluate()
    print(f"perplexity {ppl:.2f}", flush=True)
    del held


if __name__ == "__main__":
    main()
