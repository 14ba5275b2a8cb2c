#!/usr/bin/env python3
"""A notebook exported to a script, run under a notebook platform's GPU-sharing shim.

The platform image starts every kernel through a shim (here, the top of this file) that reads
the pod's ``GPUSHARE_TENANTS`` (4: the node's GPU is sold in quarter slots) and calls
``torch.cuda.set_per_process_memory_fraction(1/4)`` before the user's code runs. The user's code
fine-tunes a 1.3B-parameter model with the HF-Trainer habits it was written with (bf16 weights,
AdamW, 16 x 2048-token batches, progress as printed dicts): frozen embeddings and the rest of
the model (an in-process ballast, 12 % of the GPU) plus the trainable blocks, their gradients,
optimizer state and activations come to about 45 GiB. A quarter slot of an H200 is 35 GiB; the
GPU has over 100 GiB free.

``--fix fraction-0.5``: the notebook asks for a half slot (``GPUSHARE_TENANTS=2``): 70 GiB.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, gib, parse_args


def gpushare_shim(dev: Device) -> None:
    """The platform's part: one fraction of the GPU per notebook kernel."""
    tenants = int(os.environ.get("GPUSHARE_TENANTS", "4"))
    frac = 1.0 / tenants
    if dev.dry:
        print(
            f"[gpushare] dry run: would cap this kernel at {frac:.2f} of the GPU", file=sys.stderr
        )
        return
    torch.cuda.set_per_process_memory_fraction(frac, 0)
    print(
        f"[gpushare] GPU 0 ({dev.name}) is shared by {tenants} notebook kernels: this kernel may "
        f"use {frac:.0%} ({gib(frac * dev.total_bytes())} GiB) of {gib(dev.total_bytes())} GiB",
        file=sys.stderr,
        flush=True,
    )


def user_code(dev: Device) -> None:
    """The notebook's cells, as exported."""
    dry = dev.dry
    d, f, blocks, batch, seq = (64, 256, 2, 2, 16) if dry else (2048, 8192, 12, 16, 2048)
    torch.manual_seed(0)
    frozen = None if dry else dev.held(int(0.12 * dev.total_bytes()))  # embeddings + lower layers
    bf = torch.bfloat16

    def p(*shape: int) -> torch.nn.Parameter:
        return torch.nn.Parameter(torch.empty(*shape, dtype=bf, device=dev.device).normal_(0, 0.02))

    params = []
    for _ in range(blocks):
        params += [p(d, 3 * d), p(d, d), p(d, f), p(f, d)]
    opt = torch.optim.AdamW(params, lr=2e-5)
    n_params = sum(x.numel() for x in params)
    print(
        f"trainable params: {n_params:,} || all params: {1_300_000_000 if not dry else n_params:,}"
    )
    print("***** Running training *****\n  Num examples = 4,096")
    print(f"  Instantaneous batch size per device = {batch}\n  Total optimization steps = 3")
    t0 = time.time()
    for step in range(1, 4):
        h = torch.randn(batch, seq, d, dtype=bf, device=dev.device)
        for k in range(blocks):
            wqkv, wo, w1, w2 = params[4 * k : 4 * k + 4]
            q, kk, v = (h @ wqkv).view(batch, seq, 3, 16 if not dry else 4, -1).unbind(2)
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            h = h + a.transpose(1, 2).reshape(batch, seq, d) @ wo
            h = h + F.gelu(h @ w1) @ w2
        loss = h.float().pow(2).mean().log1p()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dev.sync()
        print(
            {
                "loss": round(float(loss.detach()), 4),
                "grad_norm": 1.0,
                "learning_rate": 2e-5,
                "epoch": round(step * batch / 4096, 4),
            },
            flush=True,
        )
    print(
        {
            "train_runtime": round(time.time() - t0, 3),
            "train_samples_per_second": round(3 * batch / (time.time() - t0), 3),
            "train_loss": round(float(loss.detach()), 4),
            "epoch": round(3 * batch / 4096, 4),
        },
        flush=True,
    )
    del frozen


def main() -> int:
    a = parse_args(__doc__.splitlines()[1], ["fraction-0.5"])
    if a.fix == "fraction-0.5":
        os.environ["GPUSHARE_TENANTS"] = "2"
    dev = Device(a.dry_run_cpu)
    gpushare_shim(dev)
    user_code(dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
