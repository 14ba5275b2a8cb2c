"""JAX in the same process preallocates 75% of the GPU; PyTorch then cannot load its model.

An RL fine-tuning job scores rollouts with a reward function written in JAX (a jitted
normaliser) and trains the policy in PyTorch. JAX's first computation makes XLA preallocate
75% of the GPU's memory for its own allocator (``XLA_PYTHON_CLIENT_PREALLOCATE`` defaults to
true), of which it uses almost nothing. PyTorch then loads the policy's bf16 weights (40% of
the GPU) shard by shard and runs out of memory part way: the OOM message shows most of the
process's memory as non-PyTorch memory.

Fixes: ``--fix no-prealloc`` (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before JAX starts);
``--fix mem-fraction[=F]`` (``XLA_PYTHON_CLIENT_MEM_FRACTION=F``, default 0.15).
"""

from __future__ import annotations

import os
import time

import torch
from _common_ho import GiB, allocated, banner, parse_args, sync, total_bytes

FIXES = ["no-prealloc", "mem-fraction"]


def extra(p):
    p.add_argument("--weights-fraction", type=float, default=0.40)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)


def load_policy(args, nbytes: int, shards: int) -> list[torch.Tensor]:
    """Load the policy's weights shard by shard, one tensor per layer (as safetensors does)."""
    dev = args.dev
    per_shard = nbytes // shards
    layer = 512 * 2**20 if not args.dry_run_cpu else 2**20
    tensors: list[torch.Tensor] = []
    for s in range(1, shards + 1):
        left = per_shard
        while left > 0:
            n = min(layer, left)
            tensors.append(torch.empty(n // 2, dtype=torch.bfloat16, device=dev).normal_())
            left -= n
        print(f"Loading checkpoint shards: {s}/{shards}", flush=True)
    return tensors


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    if "no-prealloc" in args.fixes:
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if "mem-fraction" in args.fixes:
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = args.fixes["mem-fraction"] or "0.15"
    banner(args, "rlhf_policy_train")
    torch.manual_seed(args.seed)
    import jax
    import jax.numpy as jnp

    if args.dry_run_cpu:
        jax.config.update("jax_platforms", "cpu")

    @jax.jit
    def normalise_rewards(r):
        return (r - r.mean()) / (r.std() + 1e-6)

    rewards = normalise_rewards(jnp.arange(4096, dtype=jnp.float32))
    rewards.block_until_ready()
    dev0 = jax.devices()[0]
    stats = dev0.memory_stats() or {}
    print(
        f"jax {jax.__version__} on {dev0}: reward normaliser ready; "
        f"bytes_limit {stats.get('bytes_limit', 0) / GiB:.1f} GiB, "
        f"bytes_in_use {stats.get('bytes_in_use', 0) / 2**20:.1f} MiB",
        flush=True,
    )
    nbytes = int(args.weights_fraction * total_bytes(args)) if not args.dry_run_cpu else 2**24
    t0 = time.time()
    weights = load_policy(args, nbytes, args.shards)
    sync(args)
    print(
        f"policy loaded: {nbytes / GiB:.1f} GiB in {time.time() - t0:.1f} s; "
        f"torch allocated {allocated(args) / GiB:.1f} GiB",
        flush=True,
    )
    # One policy-gradient step on the loaded weights' first layers.
    k = 256 if args.dry_run_cpu else 4096
    w = [t.view(-1)[: k * k].view(k, k) for t in weights[:4]]
    x = torch.randn(8192, k, device=args.dev, dtype=torch.bfloat16)
    for wi in w:
        x = torch.tanh(x @ wi)
    adv = torch.from_dlpack(rewards)
    loss = -(x.float().mean(dim=1)[: adv.shape[0]] * adv.to(args.dev)).mean()
    sync(args)
    print(f"update 1: loss {loss.item():.4f}", flush=True)
    print("training done", flush=True)


if __name__ == "__main__":
    main()
