#!/usr/bin/env python3
"""Video analytics: a TensorRT-style detector engine plus a PyTorch re-ID tracker in one process.

The detector comes as a prebuilt engine loaded through its own runtime library (here a small
ctypes binding to the CUDA driver standing for it): the engine's weights (2 GiB) and, at
execution-context creation, the workspace of its largest optimization profile (40 % of the GPU,
about 56 GiB) are allocated with ``cuMemAlloc``, outside PyTorch's allocator, and held for the
process's life. The tracker is PyTorch: a re-ID MLP embeds each detection's crop and associates
it softly with a 262144-track gallery (a float32 similarity and softmax over the gallery, about
33 GiB for a 256-frame chunk). PyTorch has the rest of the GPU but 18 GiB to itself taken by
the other models of the pipeline (an in-process ballast), so the tracker's first chunk runs out
of memory while a third of the GPU sits in the engine's idle workspace.

``--fix torch-workspace``: the execution context is created with user-managed device memory
(as TensorRT's ``ExecutionContextAllocationStrategy.USER_MANAGED``) and its workspace is a
PyTorch tensor taken for each detector call and dropped after it, so the tracker reuses the
same memory through PyTorch's cache.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hd import Device, GiB, MiB, gib, parse_args

GPU = {"engine_weights": 2 * GiB, "workspace_frac": 0.40, "leave": 18 * GiB, "frames": 256,
       "dets": 64, "crop": 3 * 128 * 64, "gallery": 262144, "emb": 512, "chunks": 3}  # fmt: skip
CPU = {"engine_weights": 4 * MiB, "workspace_frac": 0.0, "leave": 0, "frames": 4,
       "dets": 4, "crop": 3 * 8 * 4, "gallery": 64, "emb": 16, "chunks": 2}  # fmt: skip


def trt_log(sev: str, msg: str) -> None:
    print(f"[{time.strftime('%m/%d/%Y-%H:%M:%S')}] [TRT] [{sev}] {msg}", flush=True)


def event(**kw: object) -> None:
    print(json.dumps({"ts": round(time.time(), 3), "logger": "pipeline", **kw}), flush=True)


class Driver:
    """The few CUDA driver calls an engine runtime makes for its own memory."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:  # use the primary context that PyTorch uses
            self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
            self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    @staticmethod
    def _check(res: int, what: str) -> None:
        if res != 0:
            raise RuntimeError(f"{what} failed: CUresult {res}")

    def alloc(self, n: int) -> int:
        p = ctypes.c_uint64()
        res = self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
        if res == 2:
            raise MemoryError(f"cuMemAlloc of {n} bytes: CUDA_ERROR_OUT_OF_MEMORY")
        self._check(res, "cuMemAlloc_v2")
        return p.value

    def memset(self, ptr: int, n: int) -> None:
        self._check(self.lib.cuMemsetD8_v2(ctypes.c_uint64(ptr), 0, ctypes.c_size_t(n)), "memset")

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ctypes.c_uint64(ptr))


class DetectorEngine:
    """A deserialized engine and one execution context (its kernels are a memset here)."""

    def __init__(self, dev: Device, cfg: dict, user_managed: bool) -> None:
        self.dev, self.cfg = dev, cfg
        self.drv = None if dev.dry else Driver()
        self.ws_bytes = int(cfg["workspace_frac"] * dev.total_bytes()) // (2 * MiB) * (2 * MiB)
        self.ptrs: list[int] = []
        self.ws_tensor: torch.Tensor | None = None
        self.ws_ptr = 0
        trt_log("I", f"Loaded engine size: {cfg['engine_weights'] // MiB} MiB")
        if self.drv is not None:
            self.ptrs.append(self.drv.alloc(cfg["engine_weights"]))
        w_mib = cfg["engine_weights"] // MiB
        trt_log(
            "I",
            "[MemUsageChange] TensorRT-managed allocation in engine deserialization: CPU +0, "
            f"GPU +{w_mib}, now: CPU 0, GPU {w_mib} (MiB)",
        )
        self.user_managed = user_managed
        if not user_managed and self.drv is not None:
            self.ws_ptr = self.drv.alloc(self.ws_bytes)
            self.ptrs.append(self.ws_ptr)
        managed = 0 if user_managed else self.ws_bytes // MiB
        trt_log(
            "I",
            "[MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: CPU +0, "
            f"GPU +{managed}, now: CPU 0, GPU {cfg['engine_weights'] // MiB + managed} (MiB)",
        )
        if user_managed:
            trt_log(
                "I", f"execution context device memory: user-managed, {self.ws_bytes // MiB} MiB"
            )

    def set_device_memory(self, t: torch.Tensor | None) -> None:
        self.ws_tensor = t
        self.ws_ptr = 0 if t is None else t.data_ptr()

    def infer(self, frames: torch.Tensor) -> torch.Tensor:
        if self.drv is not None:
            if self.user_managed and self.ws_tensor is None:
                raise RuntimeError("user-managed context has no device memory set")
            torch.cuda.synchronize()
            self.drv.memset(self.ws_ptr, self.ws_bytes)  # the engine's layers use the workspace
        n = frames.shape[0] * self.cfg["dets"]
        boxes = torch.rand(n, 4, device=frames.device)
        return boxes

    def close(self) -> None:
        if self.drv is not None:
            for p in self.ptrs:
                self.drv.free(p)
        self.ptrs.clear()


class ReID(torch.nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(cfg["crop"], 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, cfg["emb"]),
        )  # fmt: skip

    def forward(self, crops: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(self.net(crops), dim=-1)


def track_chunk(
    chunk: int, engine: DetectorEngine, reid: ReID, gallery: torch.Tensor, dev: Device, cfg: dict
) -> None:
    """Detect on one chunk of frames, embed the crops, associate them with the gallery."""
    t0 = time.time()
    frames = torch.rand(cfg["frames"], 3, 8, 8, device=dev.device)
    if engine.user_managed and engine.ws_tensor is None and not dev.dry:
        engine.set_device_memory(dev.held(engine.ws_bytes))
    boxes = engine.infer(frames)
    if engine.user_managed:
        engine.set_device_memory(None)  # back to PyTorch's cache for the tracker
    with torch.inference_mode():
        crops = torch.randn(boxes.shape[0], cfg["crop"], device=dev.device, dtype=torch.bfloat16)
        emb = reid(crops)
        sim = (emb @ gallery.T).float()
        assign = sim.mul_(20.0).softmax(dim=-1)
        best = assign.argmax(-1)
    dev.sync()
    event(
        msg="chunk done", chunk=chunk, frames=cfg["frames"], detections=int(boxes.shape[0]),
        tracks_matched=int(best.unique().numel()), seconds=round(time.time() - t0, 3),
    )  # fmt: skip


def main() -> int:
    a = parse_args(__doc__.splitlines()[1], ["torch-workspace"])
    dev = Device(a.dry_run_cpu)
    cfg = CPU if dev.dry else GPU
    if not dev.dry:
        torch.cuda.init()
        torch.empty(1, device=dev.device)
    event(msg="pipeline start", device=dev.name, total_gib=float(gib(dev.total_bytes())), fix=a.fix)
    engine = DetectorEngine(dev, cfg, user_managed=a.fix == "torch-workspace")
    if engine.user_managed and not dev.dry:  # taken now so that the models load beside it
        engine.set_device_memory(dev.held(engine.ws_bytes))
    try:
        torch.manual_seed(0)
        with dev.device:
            reid = ReID(cfg).to(torch.bfloat16).eval()
        gallery = torch.nn.functional.normalize(
            torch.randn(cfg["gallery"], cfg["emb"], device=dev.device), dim=-1
        ).to(torch.bfloat16)
        ballast = dev.ballast(cfg["leave"])  # the pipeline's other models
        event(
            msg="models loaded", torch_allocated_gib=float(gib(dev.allocated())),
            free_gib=float(gib(dev.free_bytes())), gallery_tracks=cfg["gallery"],
        )  # fmt: skip
        for chunk in range(cfg["chunks"]):
            track_chunk(chunk, engine, reid, gallery, dev, cfg)
        del ballast
    finally:
        engine.close()
    event(msg="pipeline finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
