#!/usr/bin/env python3
"""Colocated RLHF: a vLLM-style rollout engine and the policy trainer share one process and GPU.

The engine starts first with ``gpu_memory_utilization=0.85``: as vLLM does, it takes 85 % of the
GPU's total memory, less what is already in use (the policy weights), less a profiled activation
reserve, and allocates all of it as a paged KV cache (one tensor per layer, through PyTorch).
Rollouts are generated into it. Then the trainer runs a PPO-style policy update on the rollouts
(64 sequences x 512 tokens through the 8 trainable SwiGLU blocks, bf16, AdamW): about 40 GiB of
activations, gradients and optimizer state, in the ~22 GiB the engine left. The policy's frozen
part is an in-process ballast (a tenth of the GPU).

``--fix lower-utilization``: the engine starts with ``gpu_memory_utilization=0.55``; its KV
cache is smaller (still about 58 GiB, far more than the rollouts use) and the update fits in the
~64 GiB left.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, GiB, MiB, gib, parse_args

logging.basicConfig(
    level=logging.INFO,
    format="%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
    datefmt="%m-%d %H:%M:%S",
    stream=sys.stdout,
)
log = logging.getLogger("rollout")

GPU = {"d": 4096, "f": 14336, "blocks": 8, "layers": 32, "kv_heads": 8, "head_dim": 128,
       "block_tokens": 16, "seqs": 64, "seq_len": 512, "prompt": 128}  # fmt: skip
CPU = {"d": 64, "f": 224, "blocks": 2, "layers": 4, "kv_heads": 2, "head_dim": 8,
       "block_tokens": 4, "seqs": 4, "seq_len": 32, "prompt": 8}  # fmt: skip


class RolloutEngine:
    """The engine's memory plan, as vLLM's worker makes it, and a paged KV cache."""

    def __init__(self, dev: Device, cfg: dict, util: float) -> None:
        self.cfg = cfg
        total, free = dev.total_bytes(), dev.free_bytes()
        used = total - free
        reserve = 1 * GiB if not dev.dry else 0  # profiled activation peak of a forward
        per_token = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * 2
        budget = int(util * total) - used - reserve
        if dev.dry:
            budget = 64 * per_token * cfg["block_tokens"]
        block_bytes = per_token * cfg["block_tokens"]
        self.num_blocks = max(1, budget // block_bytes)
        log.info(
            "Memory profiling: total %s GiB, gpu_memory_utilization=%.2f, in use %s GiB, "
            "activation reserve %s GiB", gib(total), util, gib(used), gib(reserve),
        )  # fmt: skip
        log.info("Available KV cache memory: %s GiB", gib(self.num_blocks * block_bytes))
        log.info(
            "# GPU blocks: %d, # KV cache tokens: %d; maximum concurrency for %d tokens per "
            "request: %.2fx", self.num_blocks, self.num_blocks * cfg["block_tokens"],
            cfg["seq_len"], self.num_blocks * cfg["block_tokens"] / cfg["seq_len"],
        )  # fmt: skip
        shape = (2, self.num_blocks, cfg["block_tokens"], cfg["kv_heads"], cfg["head_dim"])
        self.kv = [
            torch.empty(shape, dtype=torch.bfloat16, device=dev.device)
            for _ in range(cfg["layers"])
        ]
        log.info("KV cache allocated: %d layers x %s MiB", cfg["layers"],
                 f"{self.kv[0].numel() * 2 / MiB:.0f}")  # fmt: skip

    def generate(self, prompts: torch.Tensor, policy: Policy) -> torch.Tensor:
        """Decode into the paged cache (a stand-in for the engine's kernels: the cache blocks of
        each sequence are written step by step), then return the token ids."""
        cfg = self.cfg
        n, steps = prompts.shape[0], cfg["seq_len"] - cfg["prompt"]
        per_seq = math.ceil(cfg["seq_len"] / cfg["block_tokens"])
        t0 = time.time()
        with torch.inference_mode():
            h = policy.embed[prompts[:, -1]]
            out = [prompts]
            for s in range(0, steps, 64):
                blk = s // cfg["block_tokens"]
                for kv in self.kv[:4]:
                    kv[:, blk : blk + n * per_seq : per_seq].normal_()
                logits = h @ policy.embed.T
                tok = logits.argmax(-1, keepdim=True)
                out.append(tok.expand(n, min(64, steps - s)))
                h = policy.embed[tok[:, 0]]
        ids = torch.cat(out, dim=1)
        dt = max(time.time() - t0, 1e-3)
        print(
            f"Processed prompts: 100%|{'█' * 10}| {n}/{n} [00:{int(dt):02d}<00:00, "
            f"{n / dt:.2f}it/s, est. speed input: {n * cfg['prompt'] / dt:.2f} toks/s, "
            f"output: {n * steps / dt:.2f} toks/s]",
            flush=True,
        )
        return ids


class Policy(torch.nn.Module):
    """The trainable top of the policy: 8 SwiGLU blocks over a tied embedding."""

    def __init__(self, cfg: dict, dev: torch.device) -> None:
        super().__init__()
        d, f = cfg["d"], cfg["f"]

        def p(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(
                torch.empty(*shape, dtype=torch.bfloat16, device=dev).normal_(0, 0.02)
            )

        self.embed = torch.empty(32000, d, dtype=torch.bfloat16, device=dev).normal_(0, 0.02)
        self.w1 = torch.nn.ParameterList([p(d, f) for _ in range(cfg["blocks"])])
        self.w3 = torch.nn.ParameterList([p(d, f) for _ in range(cfg["blocks"])])
        self.w2 = torch.nn.ParameterList([p(f, d) for _ in range(cfg["blocks"])])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed[ids]
        for w1, w3, w2 in zip(self.w1, self.w3, self.w2, strict=True):
            h = h + (F.silu(h @ w1) * (h @ w3)) @ w2
        return h


def main() -> int:
    a = parse_args(__doc__.splitlines()[1], ["lower-utilization"])
    dev = Device(a.dry_run_cpu)
    cfg = CPU if dev.dry else GPU
    util = 0.55 if a.fix == "lower-utilization" else 0.85
    log.info("Initializing colocated actor on %s (%s GiB), fix=%s", dev.name,
             gib(dev.total_bytes()), a.fix)  # fmt: skip
    torch.manual_seed(0)
    policy = Policy(cfg, dev.device)
    frozen = None if dev.dry else dev.held(int(0.10 * dev.total_bytes()))  # frozen layers
    log.info("Loading policy weights took %s GiB", gib(dev.allocated()))
    engine = RolloutEngine(dev, cfg, util)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    for it in range(1, 3):
        prompts = torch.randint(0, 32000, (cfg["seqs"], cfg["prompt"]), device=dev.device)
        ids = engine.generate(prompts, policy)
        rewards = torch.randn(cfg["seqs"], device=dev.device)
        t0 = time.time()
        h = policy(ids)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        loss = -(h.float().mean(dim=(1, 2)) * adv).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dev.sync()
        log.info(
            "[trainer] iter %d: policy loss %.4f, %d tokens, %.2fs, max allocated %s GiB",
            it, float(loss.detach()), ids.numel(), time.time() - t0,
            gib(0 if dev.dry else torch.cuda.max_memory_allocated()),
        )  # fmt: skip
        del h, loss, ids
    del frozen
    log.info("[trainer] done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
