#!/usr/bin/env python3
"""Calibrate scenarios/frag_varlen.py: the smallest free memory at which it passes, per allocator.

Bisects ``--leave-gib`` over a 0.5 GiB grid for the native allocator and for
expandable_segments:True (assumes pass/fail is monotone in free memory), and prints one
``--mem-report`` run of each with ample memory. A good default lies between the two minima.

    python3 evaluation/gpu/calibrate_varlen.py --out calib.json [--extra "--final-len 3072"]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "scenarios" / "frag_varlen.py"


def run(leave: float, conf: str | None, extra: list[str], report: bool = False) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    cmd = [sys.executable, str(SCRIPT), "--leave-gib", str(leave), *extra]
    if report:
        cmd.append("--mem-report")
    t0 = time.time()
    p = subprocess.run(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180
    )
    out = p.stdout
    r = {
        "leave": leave,
        "conf": conf,
        "rc": p.returncode,
        "wall_s": round(time.time() - t0, 1),
        "oom": "out of memory" in out or "OutOfMemoryError" in out,
        "tail": out.splitlines()[-12:] if report else out.splitlines()[-2:],
    }
    print(
        f"leave={leave:5.1f} conf={conf or 'native':<26} rc={p.returncode} {r['wall_s']}s "
        f"{r['tail'][-1][:300] if r['tail'] else ''}",
        flush=True,
    )
    if report:
        print("\n".join(out.splitlines()[-14:]), flush=True)
    return r


def bisect(conf: str | None, extra: list[str], lo: float, hi: float, runs: list) -> float | None:
    # find smallest leave on the 0.5 grid in [lo, hi] that passes
    r = run(hi, conf, extra)
    runs.append(r)
    if r["rc"] != 0:
        return None
    a, b = lo, hi  # b passes
    while b - a > 0.5:
        m = round(((a + b) / 2) * 2) / 2
        if m in (a, b):
            break
        r = run(m, conf, extra)
        runs.append(r)
        if r["rc"] == 0:
            b = m
        else:
            a = m
    return b


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra", default="")
    ap.add_argument("--lo", type=float, default=3.0)
    ap.add_argument("--hi", type=float, default=16.0)
    a = ap.parse_args()
    extra = shlex.split(a.extra)
    runs: list = []
    rep = [run(40.0, None, extra, True), run(40.0, "expandable_segments:True", extra, True)]
    mins = {
        "native": bisect(None, extra, a.lo, a.hi, runs),
        "expandable_segments:True": bisect("expandable_segments:True", extra, a.lo, a.hi, runs),
    }
    print("min passing leave-gib:", mins, flush=True)
    Path(a.out).write_text(
        json.dumps({"extra": extra, "min_leave_gib": mins, "reports": rep, "runs": runs}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
