"""GPU shared: another process holds most of the GPU's memory.

The scenario first starts a second process (``_holder.py``, standing for another pod's job that
landed on the same GPU) that takes all free memory but 13 GiB, then runs a training job that
needs about 20 GiB. The OOM message lists the other process and its memory. The holder is
stopped when the job ends, whatever happens.

Fix: ``--fix isolate`` (no second process on the GPU). No allocator setting can help.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from _common import banner, mlp, parse_args

FIXES = ["isolate"]
HERE = os.path.dirname(os.path.abspath(__file__))


def extra(p):
    p.add_argument("--leave-gib", type=float, default=13.0)
    p.add_argument("--tokens", type=int, default=131072)


def start_holder(leave_gib: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_holder.py"), "--leave-gib", str(leave_gib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = holder.stdout.readline()
    if not line.startswith("READY"):
        holder.kill()
        raise SystemExit(f"holder failed to start: {line!r}")
    return holder


def stop_holder(holder: subprocess.Popen) -> None:
    try:
        holder.stdin.close()
        holder.wait(timeout=20)
    except Exception:
        holder.kill()
        holder.wait()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    holder = None if "isolate" in args.fixes else start_holder(args.leave_gib)
    try:
        banner()
        width = 4096
        model = mlp(width, 4)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        print("model loaded", flush=True)
        for step in range(1, 3):
            x = torch.randn(args.tokens, width, device="cuda")
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        print("training done", flush=True)
    finally:
        if holder is not None:
            stop_holder(holder)


if __name__ == "__main__":
    main()
