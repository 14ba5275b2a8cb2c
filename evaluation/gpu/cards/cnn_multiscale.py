#!/usr/bin/env python3
"""CNN training on multi-scale images: the input resolution changes at every batch.

A ResNet-18-style network (BatchNorm, ReLU, 1000 classes) trained with SGD + momentum under bf16
autocast, detection-style multi-scale training: each batch of 32 images is resized to one of
0.5, 0.625, 0.75, 0.875 or 1.0 of the base size (seeded draw; the full size comes at least once,
late), so every activation changes size between batches. ``--scale`` multiplies the pixels of the
full size (1.0: the job's own estimate of its peak is the card).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
from _job import GiB, Job, parse_args, round_to
from torch import nn


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)), inplace=True)
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)), inplace=True)


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(
            nn.Conv2d(3, w, 7, 2, 3, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        chans = [w, 2 * w, 4 * w, 8 * w]
        layers, cin = [], w
        for i, c in enumerate(chans):
            layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
            cin = c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=12, warmup=2)
    job = Job("cnn_multiscale", args, varying=True)
    bsz, width = 32, 64
    static = 11.7e6 * 12  # fp32 weights, grads, momentum
    per_pixel = 480.0  # bytes of saved activations per input pixel (bf16), with the backward's
    area = job.spare(static) / (bsz * per_pixel)  # pixels of the full size
    n = args.warmup + args.steps
    rng = random.Random(args.seed)
    ratios = [rng.choice([0.5, 0.625, 0.75, 0.875]) for _ in range(n)]
    ratios[min(n - 1, int(0.7 * n))] = 1.0
    ratios[min(n - 1, int(0.3 * n))] = 1.0
    sizes = []  # (height, width): the width rounded so that the area follows the scale closely
    for r in ratios:
        h = round_to(r * area**0.5, 8, 64)
        sizes.append((h, round_to(r * r * area / h, 8, 64)))
    need = [static + bsz * h * w * per_pixel for h, w in sizes]
    base = sizes[ratios.index(1.0)]
    if job.dry:
        bsz, width = 2, 8
        run_sizes = [(max(32, h // 16), max(32, w // 16)) for h, w in sizes]
    else:
        run_sizes = sizes
    dev = job.device
    print(
        f"ResNet-18, batch {bsz}, multi-scale training, full size {base[0]}x{base[1]} "
        f"(card {args.card_gib:g} GiB, scale {args.scale:g})",
        flush=True,
    )

    def train() -> None:
        with torch.device(dev):
            model = ResNet18(width)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        for i in range(n):
            job.step, job.phase = i + 1, "data"
            h, w = run_sizes[i]
            job.need(need[i])
            t0 = time.time()
            imgs = torch.randn(bsz, 3, h, w, device=dev, generator=gen)
            labels = torch.randint(0, 1000, (bsz,), device=dev, generator=gen)
            job.phase = "forward"
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(imgs), labels)
            job.phase = "backward"
            loss.backward()
            job.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            lv = loss.item()
            del imgs, labels, loss
            if i == args.warmup:
                job.steady()
            print(
                f"Epoch [1][{i + 1}/{n}]  lr: 1.000e-02  size: {h}x{w}  loss: {lv:.4f}  "
                f"memory: {job.mem()}  time: {time.time() - t0:.3f}",
                flush=True,
            )
        print(
            f"done: {args.steps} steps, peak allocated "
            f"{job.stats().get('max_memory_allocated', 0) / GiB:.2f} GiB",
            flush=True,
        )

    job.run(train)


if __name__ == "__main__":
    main()
