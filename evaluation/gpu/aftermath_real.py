#!/usr/bin/env python3
"""Real logs for aftermath.py: jobs that handle an OOM and die of something else, and jobs that
die of the OOM with real noise after it (torchrun's summary, DataLoader workers, a chained
error), run on the GPU so every line after the OOM is what torch and Python really print.

    python3 evaluation/gpu/aftermath_real.py --out DIR     # on the GPU: DIR/logs/*.log,
    DIR/truth.json
    python3 evaluation/gpu/aftermath_real.py --case NAME   # one job (what the driver runs)

Truth is how each job is written (``died_of_oom``), checked by its exit: every job exits
non-zero. Nothing here reads gpu-auditor; the logs are scored here afterwards with
``gpu-auditor diagnose --json`` (evaluation/results/aftermath-real.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("train")


def _too_big():  # a request larger than any GPU: an OOM at once, whatever is free
    import torch

    return torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")


def _steps(n: int, every: int = 10) -> None:
    import torch

    x = torch.randn(1024, 1024, device="cuda")
    for step in range(n):
        x = (x @ x).tanh()
        if step % every == 0:
            print(f"step {step} loss {float(x.mean()):.4f}", flush=True)


def case_caught_then_keyerror() -> None:
    try:
        _too_big()
    except Exception as exc:
        log.warning("OOM at batch 64, retrying at 32: %s", exc)
    _steps(60)
    cfg: dict[str, float] = {"learning_rate": 1e-4}
    print(cfg["lr"])


def case_logged_then_reraised() -> None:
    try:
        _too_big()
    except Exception:
        log.exception("out of memory in the forward pass")
        raise


def case_uncaught_with_loader_workers() -> None:
    import torch

    data = torch.utils.data.TensorDataset(torch.randn(4096, 64))
    loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=2)
    for i, (batch,) in enumerate(loader):
        batch.cuda()
        if i == 5:
            _too_big()


def case_chained_checkpoint_error() -> None:
    try:
        _too_big()
    except Exception:
        with open("/nonexistent/ckpt/emergency.pt", "wb") as f:  # the emergency save fails
            f.write(b"")


def case_caught_then_nan_check() -> None:
    try:
        _too_big()
    except Exception as exc:
        print(f"skipping batch 17: {exc}", flush=True)
    _steps(40)
    raise ValueError("loss is NaN at step 2604; aborting")


def _ddp(handled: bool) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        if handled:
            try:
                _too_big()
            except Exception as exc:
                log.warning("rank 1 skipped a batch: %s", exc)
        else:
            _too_big()
    for step in range(30):
        dist.all_reduce(t)
        if rank == 0 and step % 10 == 0:
            print(f"step {step}", flush=True)
        time.sleep(0.02)
    if handled:
        raise FileNotFoundError(f"/mnt/ckpt/step_30/rank{rank}.pt")
    dist.destroy_process_group()


def case_ddp_rank_oom() -> None:
    _ddp(handled=False)


def case_ddp_handled_then_checkpoint_error() -> None:
    _ddp(handled=True)


CASES = {  # name -> (died of the OOM?, launched with torchrun?)
    "caught_then_keyerror": (False, False),
    "logged_then_reraised": (True, False),
    "uncaught_with_loader_workers": (True, False),
    "chained_checkpoint_error": (True, False),
    "caught_then_nan_check": (False, False),
    "ddp_rank_oom": (True, True),
    "ddp_handled_then_checkpoint_error": (False, True),
}


def drive(out: Path) -> int:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    truth = {}
    for name, (died, torchrun) in CASES.items():
        cmd = [sys.executable, str(Path(__file__).resolve()), "--case", name]
        if torchrun:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node=2", *cmd[1:]]  # fmt: skip
        started = time.time()
        with open(logs / f"{name}.log", "wb") as f:
            try:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=120).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        truth[f"{name}.log"] = {"died_of_oom": died, "exit": rc,
                                "seconds": round(time.time() - started, 1)}  # fmt: skip
        print(f"{name:40} died_of_oom={died!s:5} exit={rc}", flush=True)
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return 0 if all(t["exit"] not in (0, 124) for t in truth.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--case", choices=sorted(CASES))
    args = ap.parse_args()
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt)
    if args.case:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        globals()[f"case_{args.case}"]()
        return 0
    if args.out is None:
        ap.error("--out or --case")
    return drive(args.out)


if __name__ == "__main__":
    sys.exit(main())
