#!/usr/bin/env python3
"""What the GPU libraries print when the device is full: the words an OOM has when it is not
the caching allocator's own message (cuBLAS and cuDNN handles, cuDNN workspaces, XLA's
autotuning, CuPy), and two failures of the same libraries that are not memory at all.

Each case runs in a fresh process: it creates its CUDA context and puts its few tensors on the
GPU, fills the device itself (JAX: a holder process fills it) until ``--free-mib`` MiB are left,
then makes its library's first call.
The process's stderr is kept as the job's log would show it (the traceback, the library's own
lines), with the return code and the free memory just before the call. Nothing here is
classified: ``evaluation/gpu/library_errors_score.py`` (CPU) runs the diagnosis on the logs.

    python3 evaluation/gpu/library_errors.py --out $OUT/library-errors.json [--only NAME,...]

Runs only on a GPU (the device tool); about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MIB = 1024**2

# The child's body: ``fill`` leaves F MiB free on the device with tensors of its own, then
# ``call`` makes the library's first call. Printed lines are the job's own progress prints; the
# holder's first line ("filled: ...") tells the parent the device is full.
_FILL = r"""
import os, sys, torch
F = int(os.environ["FREE_MIB"]) * 1024**2
torch.cuda.init(); torch.empty(1, device="cuda")
held = []
step = 1024**3
while True:
    free, total = torch.cuda.mem_get_info()
    if free <= F + 2 * 1024**2:
        break
    want = min(step, free - F)
    want -= want % (2 * 1024**2)
    if want < 2 * 1024**2:
        break
    try:
        held.append(torch.empty(want, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        step //= 2
        if step < 2 * 1024**2:
            break
free, total = torch.cuda.mem_get_info()
print(f"filled: {free / 2**20:.2f} MiB free of {total / 2**30:.2f} GiB", flush=True)
"""

_CASES: dict[str, tuple[str, str]] = {
    # (what the job puts on the GPU before it is full, the library's first call after)
    "torch-matmul": ("a = torch.randn(256, 256, device='cuda')",
                     "b = a @ a; torch.cuda.synchronize()"),
    "torch-conv": (
        "torch.backends.cudnn.benchmark = False\n"
        "m = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()\n"
        "x = torch.randn(8, 64, 56, 56, device='cuda')",
        "y = m(x); torch.cuda.synchronize()",
    ),
    "torch-conv-benchmark": (
        "torch.backends.cudnn.benchmark = True\n"
        "m = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()\n"
        "x = torch.randn(8, 64, 56, 56, device='cuda')",
        "y = m(x); torch.cuda.synchronize()",
    ),
    "torch-lstm": (
        "m = torch.nn.LSTM(128, 256, num_layers=2).cuda()\n"
        "x = torch.randn(50, 8, 128, device='cuda')",
        "y = m(x); torch.cuda.synchronize()",
    ),
    "torch-sdpa": (
        "q = torch.randn(4, 8, 512, 64, dtype=torch.float16, device='cuda')",
        "y = torch.nn.functional.scaled_dot_product_attention(q, q, q); "
        "torch.cuda.synchronize()",
    ),
    "cupy-matmul": (
        "import cupy as cp\na = cp.ones((256, 256), dtype=cp.float32)",
        "b = a @ a; cp.cuda.Device().synchronize()",
    ),
}

# JAX in the same process as the torch fill would fight over the context; it runs beside a
# holder process instead, with its preallocation off (what people set when sharing a GPU).
_JAX = r"""
import os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax, jax.numpy as jnp
x = jnp.ones((8, 56, 56, 64), jnp.float32)
k = jnp.ones((3, 3, 64, 64), jnp.float32)
y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
z = (jnp.ones((1024, 1024)) @ jnp.ones((1024, 1024))).block_until_ready()
y.block_until_ready()
print("jax ok", flush=True)
"""

# the holder fills the device as a job's fill does, then keeps it full for the JAX job
_HOLDER = _FILL + r"""
import time
time.sleep(float(os.environ.get("HOLD_S", "60")))
"""

# Not memory: an index out of range in an embedding, then a matmul (the assert surfaces at the
# next library call); a cuDNN call on a tensor freed under it is not reproducible safely, so one
# negative of each library kind is the embedding's.
_NEGATIVES: dict[str, str] = {
    "neg-embedding-index": (
        "import torch\n"
        "e = torch.nn.Embedding(10, 256).cuda()\n"
        "i = torch.tensor([3, 12], device='cuda')\n"
        "y = e(i) @ torch.randn(256, 256, device='cuda')\n"
        "torch.cuda.synchronize()\n"
    ),
    "neg-ce-label": (
        "import torch\n"
        "x = torch.randn(4, 5, device='cuda', requires_grad=True)\n"
        "t = torch.tensor([0, 1, 7, 2], device='cuda')\n"
        "l = torch.nn.functional.cross_entropy(x, t); l.backward()\n"
        "torch.cuda.synchronize()\n"
    ),
}


def _run(code: str, env: dict[str, str], timeout: float) -> dict[str, object]:
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -999, str(e.stdout or ""), str(e.stderr or "") + "\n[timeout]"
    return {"rc": rc, "seconds": round(time.time() - t0, 1),
            "log": (out + err)[-12000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--free-mib", default="0,16,64,256")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    frees = [int(s) for s in args.free_mib.split(",")]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    rows: list[dict[str, object]] = []
    for name, (setup, call) in _CASES.items():
        if only and name not in only:
            continue
        for f in frees:
            code = "import torch\n" + setup + "\n" + _FILL + "\n" + call + "\nprint('ok')\n"
            r = _run(code, dict(env, FREE_MIB=str(f)), 120)
            rows.append({"case": name, "free_mib": f, **r})
            print(name, f, r["rc"], str(r["log"]).strip().splitlines()[-1:], flush=True)
    for prealloc in ("false", "true"):
        name = "jax-conv" if prealloc == "false" else "jax-conv-prealloc"
        if only and name not in only:
            continue
        for f in frees:
            holder = subprocess.Popen([sys.executable, "-c", _HOLDER],
                                      env=dict(env, FREE_MIB=str(f), HOLD_S="90"),
                                      stdout=subprocess.PIPE, text=True)
            ready = holder.stdout.readline() if holder.stdout else ""
            jenv = dict(env, FREE_MIB=str(f), XLA_PYTHON_CLIENT_PREALLOCATE=prealloc)
            r = _run(_JAX, jenv, 120)
            holder.kill()
            holder.wait()
            rows.append({"case": name, "free_mib": f, "holder": ready.strip(), **r})
            print(name, f, r["rc"], str(r["log"]).strip().splitlines()[-1:], flush=True)
    for name, code in _NEGATIVES.items():
        if only and name not in only:
            continue
        r = _run(code, env, 120)
        rows.append({"case": name, "free_mib": None, **r})
        print(name, r["rc"], str(r["log"]).strip().splitlines()[-1:], flush=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
