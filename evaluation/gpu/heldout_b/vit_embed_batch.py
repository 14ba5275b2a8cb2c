#!/usr/bin/env python3
"""Image-embedding inference with a ViT-B/16 at 384 px, run at a batch size that does not fit.

The job: an offline indexing job embeds a shard of preprocessed images with a ViT-B/16-384
(timm layout, eager attention: ``attn = (q * scale) @ k.transpose(-2, -1)``), fp16, under
``torch.inference_mode()``, at ``batch_size=2048`` because a larger batch "is faster". Nothing
leaks and nothing is kept: one block's attention scores for 2048 images ([2048, 12, 577, 577]
fp16, ~15 GiB) plus the block's inputs are more than the GPU has left next to the weights
already loaded, so the first block's attention fails in the forward pass.

Fix (``--fix micro-batch``): run the same batch through the model in chunks of 256 images.
"""

from __future__ import annotations

import time

import torch
from _hb import GiB, Run, parse_args
from torch import nn

FIXES = ["micro-batch"]


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (d // heads) ** -0.5
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, d)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img: int, patch: int, d: int, heads: int, depth: int) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.randn(1, (img // patch) ** 2 + 1, d) * 0.02)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(d, eps=1e-6)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return x[:, 0]  # the CLS embedding


# image size, patch, d_model, heads, depth, images in the shard, batch size, micro-batch
GPU_DIMS = (384, 16, 768, 12, 12, 2048, 2048, 256)
CPU_DIMS = (32, 8, 32, 4, 2, 12, 6, 2)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES)
    run = Run(args.dry_run_cpu)
    job(run, args.fixes, CPU_DIMS if run.dry else GPU_DIMS)


def job(run: Run, fixes: dict, dims: tuple[int, ...]) -> None:
    img, patch, d, heads, depth, n_images, batch, micro = dims
    dev = run.device
    dtype = torch.float32 if run.dry else torch.float16
    torch.manual_seed(0)
    model = VisionTransformer(img, patch, d, heads, depth).to(dev, dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model vit_base_patch16_{img}: {n_params / 1e6:.1f}M params, {dtype}", flush=True)
    # The GPU also holds the text tower and a re-ranker; this job has 16 GiB of its own.
    ballast = run.ballast(16 * GiB, "text encoder and re-ranker loaded")  # noqa: F841
    chunk = micro if "micro-batch" in fixes else batch
    print(
        f"embedding {n_images} images at {img}px, batch_size={batch}"
        + (f", micro-batches of {chunk}" if chunk != batch else ""),
        flush=True,
    )
    out = []
    t0 = time.time()
    with torch.inference_mode():
        for i, start in enumerate(range(0, n_images, batch)):
            n = min(batch, n_images - start)
            # stands for the dataloader's preprocessed, normalised batch
            pixels = torch.randn(n, 3, img, img, device=dev, dtype=dtype)
            emb = torch.cat([model(p) for p in pixels.split(chunk)])
            out.append(torch.nn.functional.normalize(emb.float(), dim=-1).cpu())
            run.sync()
            print(
                f"batch {i + 1}/{-(-n_images // batch)}: {n} images, "
                f"{(start + n) / (time.time() - t0):.0f} img/s",
                flush=True,
            )
    emb_all = torch.cat(out)
    print(f"done: {tuple(emb_all.shape)} embeddings, norm {emb_all.norm(dim=-1).mean():.3f}")


if __name__ == "__main__":
    main()
