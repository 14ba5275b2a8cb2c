#!/usr/bin/env python3
"""Contrastive sentence-encoder pre-training with an activation monitor built on forward hooks.

Stands for a training job whose authors added an "activation monitor": a forward hook on every
encoder layer that appends the layer's output to a list, to plot per-layer activation norms at
the end of the epoch. The hook keeps the output tensors themselves (on the GPU, still attached
to the autograd graph), two forward passes per step (two views of the batch) and eight layers,
so every step leaves 128 MiB more behind until the job runs out of memory. Progress is a tqdm
bar on stderr; nothing prints memory.

``--fix item``: the hook keeps ``output.detach().float().norm(dim=-1).mean().item()`` (a Python
float) instead of the output tensor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, parse_args

try:
    from tqdm import tqdm
except ImportError:  # a plain counter where tqdm is not installed

    def tqdm(it, **kw):
        total = kw.get("total") or len(it)
        for i, x in enumerate(it):
            if i % 10 == 0:
                print(f"{kw.get('desc', '')}: {i}/{total}", file=sys.stderr, flush=True)
            yield x


class Encoder(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.proj = nn.Linear(d, 256)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(ids))
        return F.normalize(self.proj(h.mean(dim=1)), dim=-1)


class ActivationMonitor:
    """Collects each encoder layer's output every forward pass; summarised at epoch end."""

    def __init__(self, layers: nn.ModuleList, keep_scalar: bool) -> None:
        self.records: dict[int, list] = {i: [] for i in range(len(layers))}
        self.keep_scalar = keep_scalar
        for i, layer in enumerate(layers):
            layer.register_forward_hook(self._hook(i))

    def _hook(self, i: int):
        def hook(module, inputs, output):
            if self.keep_scalar:
                self.records[i].append(output.detach().float().norm(dim=-1).mean().item())
            else:
                self.records[i].append(output)

        return hook

    def summary(self) -> str:
        parts = []
        for i, rec in self.records.items():
            vals = [
                r if isinstance(r, float) else r.detach().float().norm(dim=-1).mean().item()
                for r in rec
            ]
            parts.append(f"L{i}={sum(vals) / max(len(vals), 1):.2f}")
        return " ".join(parts)


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["item"])
    dev = Device(a.dry_run_cpu)
    if dev.dry:
        vocab, d, layers, heads, batch, seq, steps, spare = 100, 32, 2, 4, 8, 16, 12, 0
        dtype = torch.float32
    else:
        vocab, d, layers, heads, batch, seq, steps, spare = 30522, 1024, 8, 16, 64, 64, 80, 10
        dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(dev.device):
        model = Encoder(vocab, d, layers, heads).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    monitor = ActivationMonitor(model.encoder.layers, keep_scalar=a.fix == "item")
    resident = dev.ballast(spare * GiB)  # the frozen teacher / data cache this job also keeps
    print(
        f"model {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, {dtype}, "
        f"batch {batch}x{seq}, {steps} steps/epoch",
        flush=True,
    )

    model.train()
    for epoch in range(1):
        bar = tqdm(range(steps), desc=f"epoch {epoch}", total=steps, mininterval=0.5)
        for _step in bar:
            ids = torch.randint(vocab, (batch, seq), device=dev.device)
            noisy = torch.where(torch.rand(batch, seq, device=dev.device) < 0.15, 0, ids)
            z1, z2 = model(ids), model(noisy)
            logits = (z1 @ z2.T).float() / 0.05
            loss = F.cross_entropy(logits, torch.arange(batch, device=dev.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss.item():.3f}")
        print(f"epoch {epoch} done; activation norms: {monitor.summary()}", flush=True)
    del resident
    return 0


if __name__ == "__main__":
    sys.exit(main())
