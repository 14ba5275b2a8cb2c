#!/usr/bin/env python3
"""A torchrun-style launcher starts two data-parallel LoRA ranks on a pod that has one GPU.

The job spec says ``nproc_per_node=2`` (it was written for a two-GPU node); the pod was given
one GPU, so the launcher's ``CUDA_VISIBLE_DEVICES`` names one device and each rank picks
``local_rank % device_count()``: both ranks land on cuda:0, as two processes with two CUDA
contexts. Each rank holds the frozen base model (a third of the GPU: 16 real frozen MLP blocks,
the rest of the base as an in-process ballast sized from the total) and trains LoRA adapters on
32768 tokens a micro-batch (about a quarter of the GPU in saved activations). One rank alone
fits; two do not, and the first step of one of them runs out of memory. The launcher then stops
the other rank and prints its failure summary, as torchrun does.

``--fix one-rank``: the launcher starts one rank per visible GPU (here one) and the rank
accumulates gradients over 2 micro-batches, so the global batch is the same.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NPROC_PER_NODE = 2  # from the job spec
GLOBAL_MICRO_BATCHES = 2


def _stamp(level: str) -> str:
    t = time.time()
    lt = time.localtime(t)
    return (
        f"{level}{time.strftime('%m%d %H:%M:%S', lt)}.{int(t % 1 * 1e6):06d} {os.getpid()} "
        "launch.py"
    )


def _say(level: str, line: int, msg: str) -> None:
    print(f"{_stamp(level)}:{line}] {msg}", flush=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher dies (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)


def _stop(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _failure_summary(
    first: tuple[int, int, int, float], others: list[tuple[int, int, int, float]]
) -> None:
    rank, pid, rc, when = first
    bar = "=" * 60
    lines = [
        "Traceback (most recent call last):",
        '  File "launch.py", line 212, in <module>',
        "    sys.exit(main())",
        '  File "launch.py", line 198, in main',
        "    raise ChildFailedError(name=entrypoint, failures=failures)",
        "launch.errors.ChildFailedError: ",
        bar,
        f"{Path(__file__).name} FAILED",
        "-" * 60,
        "Failures:",
    ]
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    for i, (r, p, c, w) in enumerate(others, 1):
        lines += [
            f"[{i}]:",
            f"  time      : {time.strftime('%Y-%m-%d_%H:%M:%S', time.localtime(w))}",
            f"  host      : {socket.gethostname()}",
            f"  rank      : {r} (local_rank: {r})",
            f"  exitcode  : {c} (pid: {p})",
            "  error_file: <N/A>",
        ]
    lines += [
        "-" * 60,
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {time.strftime('%Y-%m-%d_%H:%M:%S', time.localtime(when))}",
        f"  host      : {socket.gethostname()}",
        f"  rank      : {rank} (local_rank: {rank})",
        f"  exitcode  : {rc} (pid: {pid})",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        bar,
    ]
    print("\n".join(lines), file=sys.stderr, flush=True)


def launch(a: argparse.Namespace) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    nproc = 1 if a.fix == "one-rank" else NPROC_PER_NODE
    accum = GLOBAL_MICRO_BATCHES // nproc
    _say("W", 766, "")
    _say("W", 766, "*****************************************")
    _say(
        "W",
        766,
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.",
    )
    _say("W", 766, "*****************************************")
    _say(
        "I",
        142,
        f"starting {nproc} worker(s): nproc_per_node={nproc} nnodes=1 "
        f"CUDA_VISIBLE_DEVICES={visible} backend=gloo grad_accum={accum}",
    )
    with socket.socket() as s:  # a free port for the rendezvous (a TCP store, no files)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs: list[subprocess.Popen] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(signum: int, _frame: object) -> None:
        _stop(procs, grace_s=3.0)
        raise SystemExit(128 + signum)

    for s in old:
        signal.signal(s, on_signal)
    try:
        for rank in range(nproc):
            env = dict(os.environ)
            env.update(
                CUDA_VISIBLE_DEVICES=visible,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc),
                GRAD_ACCUM=str(accum),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS="1",
                GLOO_SOCKET_IFNAME="lo",
                PYTHONUNBUFFERED="1",
            )
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
            cmd += ["--dry-run-cpu"] if a.dry_run_cpu else []
            # workers share the launcher's output and die with it (SIGKILL included)
            procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent))
        failures: list[tuple[int, int, int, float]] = []
        while True:
            done = [(r, p) for r, p in enumerate(procs) if p.poll() is not None]
            for r, p in done:
                if p.returncode != 0 and all(f[0] != r for f in failures):
                    failures.append((r, p.pid, p.returncode, time.time()))
            if failures:
                for p in procs:
                    if p.poll() is None:
                        _say("W", 919, f"Sending process {p.pid} closing signal SIGTERM")
                _stop(procs)
                for r, p in enumerate(procs):
                    if p.returncode != 0 and all(f[0] != r for f in failures):
                        failures.append((r, p.pid, p.returncode, time.time()))
                _say(
                    "E",
                    869,
                    f"failed (exitcode: {failures[0][2]}) local_rank: {failures[0][0]} "
                    f"(pid: {failures[0][1]}) of binary: {sys.executable}",
                )
                _failure_summary(failures[0], failures[1:])
                return 1
            if len(done) == len(procs):
                _say("I", 160, "all workers finished")
                return 0
            time.sleep(0.2)
    finally:
        _stop(procs, grace_s=3.0)
        for s, h in old.items():
            signal.signal(s, h)


def worker(dry: bool) -> int:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(HERE))
    from _hd import Device, gib

    def say(msg: str) -> None:  # one write per line: the ranks share the launcher's stdout
        sys.stdout.write(f"[rank{os.environ['RANK']}]: {msg}\n")
        sys.stdout.flush()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    accum = int(os.environ["GRAD_ACCUM"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    dev = Device(dry)
    if not dry:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        dev.device = torch.device("cuda", torch.cuda.current_device())
    d, f, blocks, r = (64, 224, 4, 4) if dry else (4096, 14336, 16, 16)
    tokens = 256 if dry else 32768
    total = dev.total_bytes()
    n_vis = 0 if dry else torch.cuda.device_count()
    say(
        f"rank {rank}/{world} on {dev.device} ({dev.name}), {n_vis} visible device(s), "
        f"{gib(total)} GiB total, LoRA r={r} on {blocks} blocks, {tokens} tokens a micro-batch"
    )
    bf = torch.bfloat16
    w_in = [torch.empty(d, f, dtype=bf, device=dev.device).normal_(0, 0.02) for _ in range(blocks)]
    w_out = [torch.empty(f, d, dtype=bf, device=dev.device).normal_(0, 0.02) for _ in range(blocks)]
    base_real = sum(t.numel() * 2 for t in w_in + w_out)
    rest = dev.held(int(0.33 * total) - base_real) if not dry else None  # rest of the base
    lora = []
    for _ in range(blocks):
        for n_in, n_out in ((d, f), (f, d)):
            a_ = torch.nn.Parameter(torch.randn(n_in, r, device=dev.device, dtype=bf) * 0.01)
            b_ = torch.nn.Parameter(torch.zeros(r, n_out, device=dev.device, dtype=bf))
            lora += [a_, b_]
    opt = torch.optim.AdamW(lora, lr=2e-4)
    say(
        f"frozen base loaded: {gib(dev.allocated())} GiB allocated on {dev.device}; "
        f"{sum(p.numel() for p in lora) / 1e6:.1f}M trainable LoRA parameters"
    )
    dist.barrier()
    for step in range(1, 3):
        t0 = time.time()
        total_loss = 0.0
        for _ in range(accum):
            x = torch.randn(tokens, d, dtype=bf, device=dev.device)
            h = x
            for k in range(blocks):
                a1, b1, a2, b2 = lora[4 * k : 4 * k + 4]
                u = h @ w_in[k] + (h @ a1) @ b1
                u = torch.nn.functional.gelu(u)
                h = h + u @ w_out[k] + (u @ a2) @ b2
            loss = h.float().pow(2).mean().log1p() / accum
            loss.backward()
            total_loss += float(loss.detach())
            del x, h, u, loss
        flat = torch.cat([p.grad.flatten().float().cpu() for p in lora])
        dist.all_reduce(flat)
        off = 0
        for p in lora:
            n = p.numel()
            p.grad.copy_(flat[off : off + n].view_as(p.grad) / world)
            off += n
        opt.step()
        opt.zero_grad(set_to_none=True)
        dev.sync()
        say(
            f"step {step} loss {total_loss:.4f} ({time.time() - t0:.2f}s, "
            f"max mem {gib(0 if dry else torch.cuda.max_memory_allocated())} GiB)"
        )
    dist.barrier()
    dist.destroy_process_group()
    del rest
    say("training done")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--fix", choices=["one-rank"], default=None, help="apply one code fix")
    p.add_argument("--dry-run-cpu", action="store_true", help="tiny sizes on the CPU")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.dry_run_cpu)
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
