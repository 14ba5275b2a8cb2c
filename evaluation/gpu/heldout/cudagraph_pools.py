"""An LLM decode server capturing one CUDA graph per batch size, each in its own memory pool.

A hand-written serving engine (bf16 weights about 45% of the GPU; 4 of its decoder layers are
computed for real) profiles one decode step, then sizes a static KV cache so that weights,
activations and cache use ``gpu_memory_utilization`` (0.95) of the GPU, as vLLM does. It then
captures a CUDA graph of the decode step (forward, float logits, log-softmax, greedy token) for
each batch size 1, 2, 4, 8, 16, ..., 512 (vLLM's list), in ascending order, each with
``torch.cuda.graph(g)`` and no ``pool=``: every graph gets a private memory pool that keeps the
peak memory of its capture. The pools add up (about 20 GiB) where one shared pool would need
the largest graph's (well under 1 GiB); capture runs out of memory part way.

Fixes: ``--fix shared-pool`` (capture the largest batch size first and let every graph share its
pool, as vLLM does: smaller graphs reuse the largest one's blocks); ``--fix eager`` (no CUDA
graphs); ``--fix gpu-util=F`` (a smaller KV cache; 0.9 is vLLM's default).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from _common_ho import GiB, banner, hold_bytes, parse_args, sync, total_bytes

FIXES = ["shared-pool", "eager", "gpu-util"]

HIDDEN, INTER, HEADS, HEAD_DIM, VOCAB, LAYERS = 5120, 13824, 40, 128, 128256, 4
CAPTURE_SIZES = [1, 2, 4, *range(8, 513, 8)]


def extra(p):
    p.add_argument("--gpu-memory-utilization", type=float, default=0.95)
    p.add_argument("--weights-fraction", type=float, default=0.45)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)


class Decoder(torch.nn.Module):
    """Decoder-only LM, one token per sequence per step, attending over a static KV cache."""

    def __init__(self, hidden: int, inter: int, heads: int, vocab: int, layers: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.qkv = torch.nn.ModuleList(
            torch.nn.Linear(hidden, 3 * hidden, bias=False) for _ in range(layers)
        )
        self.o = torch.nn.ModuleList(
            torch.nn.Linear(hidden, hidden, bias=False) for _ in range(layers)
        )
        self.gate_up = torch.nn.ModuleList(
            torch.nn.Linear(hidden, 2 * inter, bias=False) for _ in range(layers)
        )
        self.down = torch.nn.ModuleList(
            torch.nn.Linear(inter, hidden, bias=False) for _ in range(layers)
        )
        self.norm = torch.nn.RMSNorm(hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids: torch.Tensor, cache: torch.Tensor | None, ctx: int) -> tuple:
        b = ids.shape[0]
        x = self.embed(ids)  # [b, hidden]
        for i in range(len(self.qkv)):
            q, k, v = (
                self.qkv[i](F.rms_norm(x, (x.shape[-1],))).view(b, 3, self.heads, 1, -1).unbind(1)
            )
            if cache is None:  # profiling run: no cache yet, attend to the new token only
                keys, values = k, v
            else:
                cache[i, 0, :b, :, ctx - 1 : ctx].copy_(k)
                cache[i, 1, :b, :, ctx - 1 : ctx].copy_(v)
                keys, values = cache[i, 0, :b, :, :ctx], cache[i, 1, :b, :, :ctx]
            att = F.scaled_dot_product_attention(q, keys, values)  # [b, heads, 1, head_dim]
            x = x + self.o[i](att.reshape(b, -1))
            gate, up = self.gate_up[i](F.rms_norm(x, (x.shape[-1],))).chunk(2, dim=-1)
            x = x + self.down[i](F.silu(gate) * up)
        logits = self.lm_head(self.norm(x))
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        token_logprob, next_token = logprobs.max(dim=-1)
        return next_token, token_logprob


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "llm_decode_server")
    torch.manual_seed(args.seed)
    dev = args.dev
    util = float(args.fixes.get("gpu-util") or args.gpu_memory_utilization)
    dry = args.dry_run_cpu
    hidden, inter, heads, vocab = (64, 128, 4, 1000) if dry else (HIDDEN, INTER, HEADS, VOCAB)
    sizes = [1, 2, 4, 8] if dry else CAPTURE_SIZES
    max_batch = sizes[-1]
    total = total_bytes(args)

    weights = hold_bytes(args, int(args.weights_fraction * total), "loaded frozen weights (bf16)")
    model = Decoder(hidden, inter, heads, vocab, LAYERS).to(dev, torch.bfloat16).eval()
    n_live = sum(p.numel() for p in model.parameters())
    print(f"decoder layers computed here: {LAYERS} ({n_live / 1e9:.2f}B params)", flush=True)

    # Profile one decode step at the largest batch (vLLM: determine_num_available_blocks).
    with torch.inference_mode():
        if not dry:
            torch.cuda.reset_peak_memory_stats()
        model(torch.zeros(max_batch, dtype=torch.long, device=dev), None, 1)
        sync(args)
    if dry:
        kv_bytes = 64 * 2**20
        free = total
    else:
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        non_torch = (total - free) - torch.cuda.memory_reserved()
        kv_bytes = int(util * total - peak - non_torch)
        print(
            f"memory profiling: peak torch memory {peak / GiB:.2f} GiB, non-torch "
            f"{non_torch / GiB:.2f} GiB, gpu_memory_utilization {util}",
            flush=True,
        )
    per_pos = LAYERS * 2 * max_batch * heads * (hidden // heads) * 2
    max_ctx = kv_bytes // per_pos
    ctx = min(args.context, max_ctx)
    if ctx < 2:
        raise SystemExit(f"no room for the KV cache ({kv_bytes / GiB:.2f} GiB)")
    cache = torch.zeros(
        LAYERS, 2, max_batch, heads, max_ctx, hidden // heads, dtype=torch.bfloat16, device=dev
    )
    print(
        f"KV cache: {cache.numel() * 2 / GiB:.2f} GiB, {max_ctx} tokens x {max_batch} sequences; "
        f"decoding with context {ctx}",
        flush=True,
    )

    graphs: dict[int, tuple] = {}
    if "eager" not in args.fixes and not dry:
        t0 = time.time()
        print(
            f"capturing CUDA graphs for batch sizes {sizes[0]}..{sizes[-1]} ({len(sizes)} graphs)"
        )
        pool = None
        side = torch.cuda.Stream()
        shared = "shared-pool" in args.fixes
        order = sorted(sizes, reverse=shared)
        with torch.inference_mode():
            for n, bs in enumerate(order, 1):
                ids = torch.zeros(bs, dtype=torch.long, device=dev)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        model(ids, cache, ctx)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    out = model(ids, cache, ctx)
                if shared and pool is None:
                    pool = g.pool()
                graphs[bs] = (g, ids, out)
                if n % 8 == 0 or n == len(sizes):
                    used = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
                    print(
                        f"captured {n}/{len(sizes)} graphs (bs={bs}), "
                        f"reserved {torch.cuda.memory_reserved() / GiB:.2f} GiB, "
                        f"cached {used / GiB:.2f} GiB",
                        flush=True,
                    )
        print(f"graph capturing finished in {time.time() - t0:.1f} s", flush=True)

    # Serve: a few decode iterations at varying batch sizes.
    with torch.inference_mode():
        for it, bs in enumerate([sizes[-1], sizes[len(sizes) // 2], sizes[3]] * 3, 1):
            t0 = time.time()
            if bs in graphs:
                g, ids, out = graphs[bs]
                ids.random_(0, vocab)
                g.replay()
                tokens = out[0]
            else:
                ids = torch.randint(0, vocab, (bs,), device=dev)
                tokens = model(ids, cache, ctx)[0]
            sync(args)
            print(
                f"decode iteration {it}: batch {bs}, {bs / (time.time() - t0):.0f} tok/s, "
                f"first token {int(tokens[0])}",
                flush=True,
            )
    print("server shutting down", flush=True)
    del weights


if __name__ == "__main__":
    main()
