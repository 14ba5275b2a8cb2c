"""An LLM server with a paged KV cache sized by gpu_memory_utilization; a long prefill does not fit.

A hand-written vLLM-style engine: a single-rank NCCL process group (tensor parallel size 1),
bf16 weights about 40% of the GPU (4 decoder layers computed for real), a profiling prefill of
``max_num_batched_tokens`` (4096) to measure peak activation memory, then a paged KV cache of
16-token blocks that brings weights + activations + cache to ``gpu_memory_utilization`` (0.9)
of the GPU, and decode CUDA graphs for batch sizes 32..1 sharing one pool. It serves a batch of
short chats, then admits 3 documents of 8192 tokens together: the scheduler caps sequences but
not tokens, so the prefill (24576 tokens) is 6x what was profiled, and, like a plain Hugging
Face forward, it computes float logits and log-probabilities for every prompt position (about
30 GiB). What is left beside the cache is about 20 GiB.

Fixes: ``--fix last-token-logits`` (logits only at each prompt's last position, as serving
engines do); ``--fix gpu-util=F`` (a smaller KV cache, e.g. 0.7).
Option ``--dist-backend gloo`` replaces NCCL if NCCL cannot start on the machine.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from _common_ho import GiB, banner, hold_bytes, parse_args, sync, total_bytes

FIXES = ["last-token-logits", "gpu-util"]

HIDDEN, INTER, HEADS, VOCAB, LAYERS, BLOCK = 5120, 13824, 40, 128256, 4, 16
GRAPH_SIZES = [32, 16, 8, 4, 2, 1]


def extra(p):
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--weights-fraction", type=float, default=0.40)
    p.add_argument("--max-num-batched-tokens", type=int, default=4096)
    p.add_argument("--long-requests", type=int, default=3)
    p.add_argument("--long-prompt", type=int, default=8192)
    p.add_argument("--dist-backend", default="nccl")
    p.add_argument("--seed", type=int, default=0)


class Model(torch.nn.Module):
    def __init__(self, hidden: int, inter: int, heads: int, vocab: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.embed = torch.nn.Embedding(vocab, hidden)
        lin = torch.nn.Linear
        self.qkv = torch.nn.ModuleList(lin(hidden, 3 * hidden, bias=False) for _ in range(LAYERS))
        self.o = torch.nn.ModuleList(lin(hidden, hidden, bias=False) for _ in range(LAYERS))
        self.gu = torch.nn.ModuleList(lin(hidden, 2 * inter, bias=False) for _ in range(LAYERS))
        self.down = torch.nn.ModuleList(lin(inter, hidden, bias=False) for _ in range(LAYERS))
        self.norm = torch.nn.RMSNorm(hidden)
        self.lm_head = lin(hidden, vocab, bias=False)

    def mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gu[i](F.rms_norm(x, (x.shape[-1],))).chunk(2, dim=-1)
        return x + self.down[i](F.silu(gate) * up)

    def prefill(
        self,
        ids: torch.Tensor,
        kv: torch.Tensor | None,
        blocks: torch.Tensor | None,
        last_only: bool,
    ) -> torch.Tensor:
        """ids [n, L] -> log-probs [n, L, vocab] (or [n, vocab]); K/V written into ``blocks``."""
        n, length = ids.shape
        x = self.embed(ids)
        for i in range(LAYERS):
            qkv = self.qkv[i](F.rms_norm(x, (x.shape[-1],))).view(n, length, 3, self.heads, self.hd)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # [n, heads, L, hd]
            if kv is not None and blocks is not None:
                kv[blocks, i, 0] = k.transpose(1, 2).reshape(-1, BLOCK, self.heads, self.hd)
                kv[blocks, i, 1] = v.transpose(1, 2).reshape(-1, BLOCK, self.heads, self.hd)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o[i](att.transpose(1, 2).reshape(n, length, -1))
            x = self.mlp(i, x)
        if last_only:
            x = x[:, -1]
        logits = self.lm_head(self.norm(x))
        return torch.log_softmax(logits.float(), dim=-1)

    def decode(
        self, ids: torch.Tensor, kv: torch.Tensor, table: torch.Tensor, slot: torch.Tensor
    ) -> torch.Tensor:
        """One token per sequence; attends over the sequence's blocks in ``table`` [b, nblk]."""
        b = ids.shape[0]
        x = self.embed(ids)
        for i in range(LAYERS):
            q, k, v = (
                self.qkv[i](F.rms_norm(x, (x.shape[-1],))).view(b, 3, self.heads, self.hd).unbind(1)
            )
            kv[slot[:, 0], i, 0, slot[:, 1]] = k
            kv[slot[:, 0], i, 1, slot[:, 1]] = v
            keys = kv[table, i, 0].flatten(1, 2).transpose(1, 2)  # [b, heads, ctx, hd]
            values = kv[table, i, 1].flatten(1, 2).transpose(1, 2)
            att = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values)
            x = x + self.o[i](att.reshape(b, -1))
            x = self.mlp(i, x)
        return self.lm_head(self.norm(x)).argmax(dim=-1)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "llm_server")
    torch.manual_seed(args.seed)
    dev, dry = args.dev, args.dry_run_cpu
    util = float(args.fixes.get("gpu-util") or args.gpu_memory_utilization)
    last_only = "last-token-logits" in args.fixes
    hidden, inter, heads, vocab = (64, 128, 4, 1000) if dry else (HIDDEN, INTER, HEADS, VOCAB)
    max_tokens = 256 if dry else args.max_num_batched_tokens
    long_prompt = 128 if dry else args.long_prompt
    total = total_bytes(args)

    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    backend = "gloo" if dry else args.dist_backend
    dist.init_process_group(backend, store=store, rank=0, world_size=1)
    dist.all_reduce(torch.ones(1, device=dev))
    print(f"initialized process group: backend {backend}, tensor parallel size 1", flush=True)

    weights = hold_bytes(args, int(args.weights_fraction * total), "loading weights (bf16)")
    model = Model(hidden, inter, heads, vocab).to(dev, torch.bfloat16).eval()

    with torch.inference_mode():
        if not dry:
            torch.cuda.reset_peak_memory_stats()
        model.prefill(torch.zeros(1, max_tokens, dtype=torch.long, device=dev), None, None, False)
        sync(args)
    block_bytes = LAYERS * 2 * BLOCK * heads * (hidden // heads) * 2
    if dry:
        n_blocks = 256
    else:
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        non_torch = (total - free) - torch.cuda.memory_reserved()
        n_blocks = int((util * total - peak - non_torch) // block_bytes)
        print(
            f"memory profiling: {max_tokens} tokens, peak torch memory {peak / GiB:.2f} GiB, "
            f"non-torch memory {non_torch / GiB:.2f} GiB",
            flush=True,
        )
    if n_blocks < 64:
        raise SystemExit(f"No available memory for the cache blocks ({n_blocks} blocks)")
    kv = torch.zeros(
        n_blocks, LAYERS, 2, BLOCK, heads, hidden // heads, dtype=torch.bfloat16, device=dev
    )
    print(
        f"# GPU blocks: {n_blocks}, KV cache {kv.numel() * 2 / GiB:.2f} GiB, "
        f"{n_blocks * BLOCK} tokens (gpu_memory_utilization={util})",
        flush=True,
    )
    free_blocks = list(range(n_blocks))

    def take(n: int) -> torch.Tensor:
        out = [free_blocks.pop() for _ in range(n)]
        return torch.tensor(out, dtype=torch.long, device=dev)

    ctx_blocks = 512 // BLOCK if not dry else 4
    graphs: dict[int, tuple] = {}
    with torch.inference_mode():
        static_table = take(ctx_blocks * GRAPH_SIZES[0]).view(GRAPH_SIZES[0], ctx_blocks)
        static_slot = torch.zeros(GRAPH_SIZES[0], 2, dtype=torch.long, device=dev)
        static_ids = torch.zeros(GRAPH_SIZES[0], dtype=torch.long, device=dev)
        if not dry:
            t0 = time.time()
            pool = None
            side = torch.cuda.Stream()
            for bs in GRAPH_SIZES:
                args_bs = (static_ids[:bs], kv, static_table[:bs], static_slot[:bs])
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    model.decode(*args_bs)
                torch.cuda.current_stream().wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    out = model.decode(*args_bs)
                pool = g.pool()
                graphs[bs] = (g, out)
            print(f"captured {len(graphs)} decode graphs in {time.time() - t0:.1f} s", flush=True)

        def decode(bs: int) -> torch.Tensor:
            static_ids[:bs].random_(0, vocab)
            if bs in graphs:
                graphs[bs][0].replay()
                return graphs[bs][1]
            return model.decode(static_ids[:bs], kv, static_table[:bs], static_slot[:bs])

        def serve(n_req: int, prompt: int, gen: int, label: str) -> None:
            t0 = time.time()
            ids = torch.randint(0, vocab, (n_req, prompt), device=dev)
            blocks = take(n_req * prompt // BLOCK)
            logprobs = model.prefill(ids, kv, blocks, last_only)
            first = logprobs[:, -1].argmax(-1) if not last_only else logprobs.argmax(-1)
            sync(args)
            t1 = time.time()
            for _ in range(gen):
                decode(min(n_req, GRAPH_SIZES[0]))
            sync(args)
            t2 = time.time()
            used = 1 - len(free_blocks) / n_blocks
            print(
                f"{label}: {n_req} requests | prompt throughput {n_req * prompt / (t1 - t0):.0f} "
                f"tokens/s | generation throughput {n_req * gen / max(t2 - t1, 1e-6):.0f} "
                f"tokens/s | GPU KV cache usage {100 * used:.1f}% | first token {int(first[0])}",
                flush=True,
            )
            free_blocks.extend(blocks.tolist())

        serve(8, max_tokens // 8, 16, "chat batch")
        serve(8, max_tokens // 8, 16, "chat batch")
        print(
            f"admitting {args.long_requests} document requests of {long_prompt} tokens "
            f"({args.long_requests * long_prompt} prefill tokens)",
            flush=True,
        )
        serve(args.long_requests, long_prompt, 16, "document batch")
    print("server shutting down", flush=True)
    dist.destroy_process_group()
    del weights


if __name__ == "__main__":
    main()
