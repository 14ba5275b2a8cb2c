#!/usr/bin/env python3
"""RLHF scoring: move a float32 reward model onto a GPU that already holds the policy.

The job: the policy model is already on the GPU. The job then builds a 3.4B-parameter reward
model (on the meta device, as ``from_pretrained(low_cpu_mem_usage=True)`` does), loads its
checkpoint into it on the CPU (``load_state_dict(assign=True)``, float32 as saved) and calls
``reward_model.to("cuda")``. Its float32 weights (~12.6 GiB) are more than the GPU has left next
to the policy, so the out-of-memory error comes from ``Module.to`` while the weights are being
copied, before any forward pass.

Fix (``--fix bf16``): load the checkpoint in bfloat16 (``torch_dtype=torch.bfloat16``), half the
bytes, and move that.
"""

from __future__ import annotations

import time

import torch
from _hb import GiB, Run, parse_args
from torch import nn

FIXES = ["bf16"]


class Layer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)


class RewardModel(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)  # kept from the SFT checkpoint
        self.score = nn.Linear(d, 1, bias=False)


def read_checkpoint(model: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors on the CPU, in ``dtype``.

    Stands for reading the safetensors shards (this stand-in holds no trained weights): every
    layer's tensors come from one set of host buffers, so reading costs one layer of host memory
    and seconds, not 13 GB; ``load_state_dict(assign=True)`` still gives every layer parameters
    of its own, and ``Module.to`` copies each of them to the GPU.
    """
    per_layer: dict[str, torch.Tensor] = {}
    sd: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        parts = name.split(".")
        key = ".".join(parts[2:]) if parts[0] == "layers" else name
        if key not in per_layer:
            t = torch.zeros(p.shape, dtype=dtype)
            if t.numel() <= 1 << 22:
                t.normal_(0, 0.02)
            per_layer[key] = t
        sd[name] = per_layer[key]
    return sd


# vocab, d_model, layers; the job's own free GPU memory next to the policy
GPU_DIMS = (32000, 3072, 28)
CPU_DIMS = (101, 32, 3)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    job(run, args.fixes, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fixes: dict, dims: tuple[int, ...]) -> None:
    vocab, d, layers = dims
    dtype = torch.bfloat16 if "bf16" in fixes else torch.float32
    torch.manual_seed(0)
    ballast = run.ballast(9 * GiB, "policy model loaded on cuda:0")  # noqa: F841
    with torch.device("meta"):
        rm = RewardModel(vocab, d, layers)
    n_params = sum(p.numel() for p in rm.parameters())
    size = n_params * torch.finfo(dtype).bits // 8
    print(
        f"loading reward model checkpoint: {n_params / 1e9:.2f}B params, {dtype}, "
        f"{size / 1e9:.1f} GB",
        flush=True,
    )
    t0 = time.time()
    sd = read_checkpoint(rm, dtype)
    rm.load_state_dict(sd, assign=True)
    print(f"checkpoint loaded in {time.time() - t0:.1f}s; moving reward model to {run.device}")
    t0 = time.time()
    rm.to(run.device)
    run.sync()
    print(f"reward model on {run.device} in {time.time() - t0:.1f}s", flush=True)
    ids = torch.randint(0, vocab, (4, 64), device=run.device)
    with torch.inference_mode():
        h = rm.norm(rm.embed(ids))
        rewards = rm.score(h[:, -1]).float().squeeze(-1)
    print(f"scored {ids.shape[0]} responses: rewards {[round(r, 3) for r in rewards.tolist()]}")


if __name__ == "__main__":
    main()
