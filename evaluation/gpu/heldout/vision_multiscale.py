"""Vision training with progressive resizing: the images grow, the batch size does not.

A ResNet-50 (torchvision, random init, no download) trains with SGD + momentum at batch 128
on synthetic images whose resolution rises in phases (progressive resizing: 224, 320, 448,
640, 896), each step drawing an aspect-ratio bucket around the phase's resolution. Activation
memory grows with the pixels in a batch: about 82 GiB at 640, about 160 GiB at 896, more than
the GPU has. Nothing is held besides the job's own model and batches.

Fixes: ``--fix amp`` (bf16 autocast: about half the activation memory); ``--fix pixel-budget``
(the batch size shrinks so that no batch has more pixels than a 640x640 batch of 128).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
import torchvision
from _common_ho import allocated, autocast, banner, parse_args, sync

FIXES = ["amp", "pixel-budget"]

PHASES = [224, 320, 448, 640, 896]
DRY_PHASES = [32, 48, 64]


def extra(p):
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps-per-phase", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)


def buckets(res: int) -> list[tuple[int, int]]:
    """Aspect-ratio buckets of about res x res pixels, sides multiples of 32."""

    def r32(v: float) -> int:
        return max(32, round(v / 32) * 32)

    return [(res, res), (r32(res * 7 / 8), r32(res * 8 / 7)), (r32(res * 8 / 7), r32(res * 7 / 8))]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "train_resnet50_progressive")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    dev = args.dev
    phases = DRY_PHASES if args.dry_run_cpu else PHASES
    batch = 4 if args.dry_run_cpu else args.batch
    budget_px = batch * phases[-2] * phases[-2]
    amp = "amp" in args.fixes

    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model resnet50 ({n_params / 1e6:.1f}M params), SGD momentum 0.9, batch {batch}, "
        f"progressive resizing {phases}, amp={amp}",
        flush=True,
    )
    model.train()
    total = len(phases) * args.steps_per_phase
    step = 0
    for pi, res in enumerate(phases, 1):
        print(f"phase {pi}/{len(phases)}: resolution {res}", flush=True)
        for _ in range(args.steps_per_phase):
            step += 1
            h, w = rng.choice(buckets(res))
            bs = batch
            if "pixel-budget" in args.fixes:
                bs = max(1, min(batch, budget_px // (h * w)))
            t0 = time.time()
            images = torch.randn(bs, 3, h, w, device=dev)
            labels = torch.randint(0, 1000, (bs,), device=dev)
            with autocast(args, enabled=amp):
                logits = model(images)
                loss = F.cross_entropy(logits.float(), labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync(args)
            dt = time.time() - t0
            if step % 2 == 0 or step == total:
                print(
                    f"epoch 0 | phase {pi} res {res} | step {step}/{total} | bucket {h}x{w} | "
                    f"batch {bs} | loss {loss.item():.4f} | {bs / dt:.1f} img/s | "
                    f"mem {allocated(args) / 2**30:.1f} GiB",
                    flush=True,
                )
    print("training done", flush=True)


if __name__ == "__main__":
    main()
