#!/usr/bin/env python3
"""Fine-tuning launcher that starts an asynchronous evaluator on the same GPU, then trains.

Stands for a training entry point whose launcher, to overlap evaluation with training, starts a
second process, the "evaluator": it loads its own copy of the model in fp32 and waits for
checkpoints to score. Both processes are given the same GPU (a one-GPU pod), so the trainer has
what the evaluator leaves. The trainer (a frozen backbone resident, a ballast here, then 24
trainable MLP blocks on 32k tokens per step) runs out of memory in its first step. Both shares
are fractions of the GPU's total memory (evaluator 40 %, frozen backbone 45 %).

The evaluator is a real process with its own CUDA context. It exits when the launcher's pipe to
its stdin closes (the launcher ended, however it ended); on Linux it also asks for SIGTERM when
its parent dies; the launcher stops it in a ``finally`` and waits for it.

``--fix no-sidecar``: do not start the evaluator; evaluate in-process after training.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, MiB, parse_args

# fractions of the GPU's total memory, so the job behaves the same on any large GPU
EVALUATOR_SHARE = 0.40  # the evaluator's fp32 model copy and eval buffers
TRAINER_RESIDENT_SHARE = 0.45  # the trainer's frozen backbone


def extra_args(p) -> None:
    p.add_argument("--role", choices=["launcher", "evaluator"], default="launcher")
    p.add_argument("--ready-fd", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--hold-bytes", type=int, default=0, help=argparse.SUPPRESS)


def ask_parent_death_signal() -> None:
    """SIGTERM this process when its parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass  # the stdin EOF below still ends the evaluator


def evaluator(a) -> int:
    ask_parent_death_signal()
    log = logging.getLogger("evaluator")
    dev = Device(a.dry_run_cpu)
    n = a.hold_bytes
    if dev.dry:
        weights = torch.empty(n, dtype=torch.uint8)
    else:
        weights = torch.empty(n, dtype=torch.uint8, device=dev.device)
    log.info(
        "pid %d: model copy loaded on %s (%.1f GiB); waiting for checkpoints",
        os.getpid(),
        dev.name,
        n / GiB,
    )
    try:
        os.write(a.ready_fd, b"ready\n")
        os.close(a.ready_fd)
    except BrokenPipeError:
        log.info("launcher gone before evaluator was ready; exiting")
        return 1
    sys.stdin.read()  # returns when the launcher closes the pipe or dies
    log.info("launcher gone; evaluator exiting")
    del weights
    return 0


def start_evaluator(hold: int, dry: bool, log: logging.Logger) -> subprocess.Popen:
    r, w = os.pipe()
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--role",
        "evaluator",
        "--ready-fd",
        str(w),
        "--hold-bytes",
        str(hold),
    ] + (["--dry-run-cpu"] if dry else [])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, pass_fds=(w,))
    os.close(w)
    log.info("started evaluator pid %d on the same GPU", proc.pid)
    try:
        ready, _, _ = select.select([r], [], [], 120)
        if not ready or os.read(r, 16) != b"ready\n":
            stop_evaluator(proc, log)
            raise RuntimeError(f"evaluator pid {proc.pid} did not become ready")
    finally:
        os.close(r)
    return proc


def stop_evaluator(proc: subprocess.Popen | None, log: logging.Logger) -> None:
    if proc is None:
        return
    with contextlib.suppress(Exception):
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.info("evaluator pid %d stopped (rc %s)", proc.pid, proc.returncode)


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


def train(dev: Device, dims: dict, log: logging.Logger) -> nn.Module:
    d, n_blocks, batch, seq = dims["d"], dims["blocks"], dims["batch"], dims["seq"]
    dtype = torch.float32 if dev.dry else torch.bfloat16
    with torch.device(dev.device):  # initialise on the GPU, not on the host
        model = nn.Sequential(*[Block(d) for _ in range(n_blocks)]).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("trainable params %.0fM; batch %d x %d tokens, d %d", n_params / 1e6, batch, seq, d)
    for step in range(1, dims["steps"] + 1):
        x = torch.randn(batch, seq, d, device=dev.device, dtype=dtype)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.info(
            "step %d/%d loss %.4f mem_alloc %.1fGiB",
            step,
            dims["steps"],
            loss.item(),
            dev.allocated() / GiB,
        )
    return model


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["no-sidecar"], extra_args)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s | %(name)-9s | %(levelname)-5s | %(message)s",
    )
    if a.role == "evaluator":
        return evaluator(a)

    log = logging.getLogger("launcher")
    dev = Device(a.dry_run_cpu)
    total = dev.total_bytes()
    dims = (
        dict(d=64, blocks=2, batch=2, seq=16, steps=3)
        if dev.dry
        else dict(d=2048, blocks=24, batch=16, seq=2048, steps=3)
    )
    log.info(
        "torch %s, %s, %.1f GiB total; async evaluation %s",
        torch.__version__,
        dev.name,
        total / GiB,
        "off (in-process at the end)" if a.fix else "on",
    )
    proc = None
    try:
        if a.fix != "no-sidecar":
            hold = 1 * MiB if dev.dry else int(EVALUATOR_SHARE * total) // (2 * MiB) * (2 * MiB)
            proc = start_evaluator(hold, dev.dry, log)
        tlog = logging.getLogger("trainer")
        resident = None
        if not dev.dry:
            n = int(TRAINER_RESIDENT_SHARE * total) // (2 * MiB) * (2 * MiB)
            resident = torch.empty(n, dtype=torch.uint8, device=dev.device)
            tlog.info("frozen backbone resident: %.1f GiB", n / GiB)
        model = train(dev, dims, tlog)
        if proc is None:
            with torch.no_grad():
                x = torch.randn(
                    2, 16, dims["d"], device=dev.device, dtype=next(model.parameters()).dtype
                )
                tlog.info("in-process eval loss %.4f", model(x).float().pow(2).mean().item())
        del resident
    finally:
        stop_evaluator(proc, log)
    log.info("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
