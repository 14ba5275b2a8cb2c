#!/usr/bin/env python3
"""Audio-classifier training whose GPU data loader decodes into CuPy memory (JSON-lines logs).

Stands for a speech job whose loader (written against CuPy, as GPU audio/image pipelines often
are) decodes the whole training shard onto the GPU in one CuPy buffer, hands it to PyTorch
through DLPack for log-mel features, then drops the raw audio. CuPy returns the freed buffer to
its own memory pool, not to the driver, so 20 GiB stay held outside PyTorch's allocator; the
first training step (an 8-layer transformer over 64 x 1500 frames) runs out of memory. A frozen
teacher encoder the job keeps on the GPU is a ballast here.

Where CuPy cannot be imported or cannot allocate, the loader's fallback allocates the buffer with
the CUDA driver (cuMemAlloc through ctypes) and keeps freed buffers for reuse the same way; the
log says which one ran.

``--fix free-pool``: release the loader's cached blocks after the feature warm-up
(``cupy.get_default_memory_pool().free_all_blocks()``; cuMemFree in the fallback).
"""

from __future__ import annotations

import ctypes
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, parse_args

SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 80


def log(event: str, **kw) -> None:
    print(json.dumps({"ts": round(time.time(), 3), "event": event, **kw}), flush=True)


class _CudaArray:
    """A device pointer PyTorch can wrap without copying (``__cuda_array_interface__``)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


class DecodeBuffers:
    """The loader's GPU decode buffers: CuPy's pool, or cuMemAlloc with a free list."""

    def __init__(self, dry: bool) -> None:
        self.backend, self.cp, self.lib = "cpu", None, None
        self.cached: list[tuple[int, int]] = []  # fallback: freed (ptr, bytes) kept for reuse
        self.live: dict[int, tuple[int, int]] = {}
        if dry:
            return
        try:
            import cupy

            cupy.cuda.Device(0).use()
            probe = cupy.empty(1 << 20, dtype=cupy.float32)
            del probe
            self.cp, self.backend = cupy, f"cupy {cupy.__version__}"
        except Exception as e:  # no cupy, or one built for another CUDA
            log("loader_backend_fallback", reason=f"{type(e).__name__}: {e}"[:300])
            self._driver()

    def _driver(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        ctx = ctypes.c_void_p()
        lib.cuCtxGetCurrent(ctypes.byref(ctx))
        if not ctx.value:
            dev = ctypes.c_int()
            lib.cuDeviceGet(ctypes.byref(dev), 0)
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
            lib.cuCtxSetCurrent(ctx)
        self.lib, self.backend = lib, "cuda-driver (cuMemAlloc)"

    def empty(self, n: int, device: torch.device) -> tuple[object, torch.Tensor]:
        """A float32 buffer of n samples and a PyTorch view of it."""
        if self.cp is not None:
            arr = self.cp.empty(n, dtype=self.cp.float32)
            try:
                return arr, torch.from_dlpack(arr)
            except Exception:  # an older CuPy's DLPack: its __cuda_array_interface__ instead
                return arr, torch.as_tensor(arr, device=device)
        if self.lib is not None:
            nbytes = 4 * n
            fit = [c for c in self.cached if c[1] >= nbytes]
            if fit:
                ptr, size = min(fit, key=lambda c: c[1])
                self.cached.remove((ptr, size))
            else:
                p = ctypes.c_uint64()
                rc = self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes))
                if rc != 0:
                    raise RuntimeError(f"cuMemAlloc_v2 failed with CUresult {rc}")
                ptr, size = p.value, nbytes
            self.live[ptr] = (ptr, size)
            holder = _CudaArray(ptr, n)
            return ptr, torch.as_tensor(holder, device=device)
        t = torch.empty(n, dtype=torch.float32)
        return t, t

    def free(self, handle: object) -> None:
        if self.lib is not None and isinstance(handle, int):
            self.cached.append(self.live.pop(handle))

    def held_bytes(self) -> int:
        if self.cp is not None:
            return int(self.cp.get_default_memory_pool().total_bytes())
        return sum(s for _, s in self.cached) + sum(s for _, s in self.live.values())

    def release_cached(self) -> None:
        if self.cp is not None:
            self.cp.get_default_memory_pool().free_all_blocks()
        elif self.lib is not None:
            for ptr, _ in self.cached:
                self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))
            self.cached = []


def mel_filterbank(device: torch.device) -> torch.Tensor:
    """Triangular mel filters, [N_FFT // 2 + 1, N_MELS]."""

    def hz_to_mel(f):
        return 2595 * math.log10(1 + f / 700)

    mels = torch.linspace(hz_to_mel(0), hz_to_mel(SR / 2), N_MELS + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    bins = torch.linspace(0, SR / 2, N_FFT // 2 + 1)
    fb = torch.zeros(N_FFT // 2 + 1, N_MELS)
    for m in range(N_MELS):
        lo, c, hi = hz[m], hz[m + 1], hz[m + 2]
        fb[:, m] = torch.clamp(torch.minimum((bins - lo) / (c - lo), (hi - bins) / (hi - c)), 0)
    return fb.to(device)


class AudioClassifier(nn.Module):
    def __init__(self, d: int, layers: int, classes: int) -> None:
        super().__init__()
        self.subsample = nn.Conv1d(N_MELS, d, kernel_size=3, stride=2, padding=1)
        layer = nn.TransformerEncoderLayer(d, d // 64, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:  # [B, N_MELS, frames]
        x = F.gelu(self.subsample(feats)).transpose(1, 2)
        return self.head(self.encoder(x).mean(dim=1))


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["free-pool"])
    dev = Device(a.dry_run_cpu)
    if dev.dry:
        clips, clip_s, chunk, d, layers, batch, steps, spare = 16, 1, 4, 64, 2, 4, 3, 0
        dtype = torch.float32
    else:
        clips, clip_s, chunk, d, layers, batch, steps, spare = 14540, 30, 256, 768, 8, 64, 3, 47
        dtype = torch.bfloat16
    torch.manual_seed(0)
    x = torch.zeros(1, device=dev.device)  # CUDA context before the loader starts
    teacher = dev.ballast(spare * GiB)  # frozen teacher encoder, resident for the whole run
    buffers = DecodeBuffers(dev.dry)
    log(
        "start",
        torch=torch.__version__,
        device=dev.name,
        loader=buffers.backend,
        clips=clips,
        clip_seconds=clip_s,
    )

    samples = clip_s * SR
    handle, audio = buffers.empty(clips * samples, dev.device)
    audio = audio.view(clips, samples)
    audio.normal_(0, 0.1)  # stands for the decoder writing PCM into the buffer
    log("decoded", raw_audio_gib=round(audio.numel() * 4 / GiB, 2))

    frames = samples // HOP
    feats = torch.empty(clips, N_MELS, frames, dtype=dtype, device=dev.device)
    fb = mel_filterbank(dev.device)
    window = torch.hann_window(N_FFT, device=dev.device)
    for i in range(0, clips, chunk):
        spec = torch.stft(audio[i : i + chunk], N_FFT, HOP, window=window, return_complex=True)
        power = spec.abs().pow(2)[..., :frames]
        feats[i : i + chunk] = torch.log(torch.einsum("bft,fm->bmt", power, fb) + 1e-6).to(dtype)
        del spec, power
    del audio
    buffers.free(handle)
    del handle
    dev.sync()
    log(
        "features_ready",
        shape=list(feats.shape),
        loader_held_gib=round(buffers.held_bytes() / GiB, 2),
        torch_allocated_gib=round(dev.allocated() / GiB, 2),
    )
    if a.fix == "free-pool":
        buffers.release_cached()
        log("loader_pool_released", loader_held_gib=round(buffers.held_bytes() / GiB, 2))

    with torch.device(dev.device):
        model = AudioClassifier(d, layers, classes=500).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    labels = torch.randint(500, (clips,), device=dev.device)
    for step in range(1, steps + 1):
        idx = torch.randint(clips, (batch,), device=dev.device)
        loss = F.cross_entropy(model(feats[idx]).float(), labels[idx])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log("train", step=step, loss=round(loss.item(), 4))
    del teacher, x
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
