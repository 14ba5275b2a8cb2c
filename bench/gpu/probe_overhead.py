#!/usr/bin/env python3
"""What the probe costs a job: interpreter start-up and training steps/s, with and without it.

Every measurement is a fresh process, because the probe arrives at interpreter start
(``PYTHONPATH=probe``, ``GPU_AUDITOR_PROBE=1``). Variants run interleaved (A, B, C, A, B, C...)
so drift hits all alike; medians are reported beside the baseline of the same run.

- start-up, torch never imported: ``python -c pass`` with no probe (baseline), with the probe's
  folder on PYTHONPATH but switched off (only the ``sitecustomize`` chain), and switched on.
- start-up to ``import torch`` (the post-import hook and the queued attach run here).
- training (GPU only): a small transformer encoder (4 layers, d_model 512, batch 32 x 256
  tokens, AdamW, bf16 autocast), warm-up steps then timed steps with ``cuda.synchronize``; with
  the probe the child also asserts that the observer is attached, so a silent no-op cannot pass
  for zero overhead.

    python3 bench/gpu/probe_overhead.py --out /tmp/probe-overhead.json            # on the GPU
    python3 bench/gpu/probe_overhead.py --startup-only --out bench/results/x.json  # anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
PROBE = REPO / "probe"

TRAIN = r"""
import json, sys, time, torch
probe = sys.argv[1] == "probe"
if probe:
    from gpu_auditor_probe import _hook
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 4).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, 256, 512, device="cuda")
if probe:
    assert _hook.STATE.attached and _hook.STATE.status == "ok", _hook.STATE.status

def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

for _ in range(int(sys.argv[2])):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(int(sys.argv[3])):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(json.dumps({"steps_per_s": int(sys.argv[3]) / dt, "attached": probe}))
"""


def env_for(variant: str) -> dict[str, str]:
    """baseline: no probe; chain: the folder on PYTHONPATH, switched off; probe: switched on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AUDITOR_")}
    env.pop("PYTHONPATH", None)
    if variant in ("chain", "probe"):
        env["PYTHONPATH"] = str(PROBE)
    if variant == "probe":
        env.update(GPU_AUDITOR_PROBE="1", GPU_AUDITOR_PROBE_PATH="")
    return env


def wall(python: str, code: list[str], variant: str, cpu: list[float] | None = None) -> float:
    """Wall seconds of one child; its CPU seconds (user + system) appended to ``cpu``, which a
    loaded machine disturbs less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([python, *code], env=env_for(variant), check=True, capture_output=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return elapsed


def summary(values: list[float], scale: float = 1.0) -> dict[str, Any]:
    scaled = [v * scale for v in values]
    deciles = statistics.quantiles(scaled, n=10) if len(scaled) > 1 else scaled * 9
    return {
        "n": len(scaled),
        "median": round(statistics.median(scaled), 3),
        "p10": round(deciles[0], 3),
        "p90": round(deciles[8], 3),
    }


def startup(python: str, repeats: int, torch_repeats: int) -> dict[str, Any]:
    variants = ["baseline", "chain", "probe"]
    bare: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(3):  # warm the page cache
        for v in variants:
            wall(python, ["-c", "pass"], v)
    for _ in range(repeats):
        for v in variants:
            bare[v].append(wall(python, ["-c", "pass"], v, cpu[v]))
    out: dict[str, Any] = {
        "python_c_pass_wall_ms": {v: summary(bare[v], 1000) for v in variants},
        "python_c_pass_cpu_ms": {v: summary(cpu[v], 1000) for v in variants},
    }
    for name, series in (("wall", bare), ("cpu", cpu)):
        base = statistics.median(series["baseline"]) * 1000
        out[f"python_c_pass_{name}_delta_ms"] = {
            v: round(statistics.median(series[v]) * 1000 - base, 3) for v in ("chain", "probe")
        }
    if torch_repeats:
        code = ["-W", "ignore", "-c", "import torch"]
        with_torch: dict[str, list[float]] = {v: [] for v in ("baseline", "probe")}
        torch_cpu: dict[str, list[float]] = {v: [] for v in with_torch}
        wall(python, code, "baseline")
        for _ in range(torch_repeats):
            for v in with_torch:
                with_torch[v].append(wall(python, code, v, torch_cpu[v]))
        for name, series in (("wall", with_torch), ("cpu", torch_cpu)):
            out[f"import_torch_{name}_ms"] = {v: summary(series[v], 1000) for v in series}
            out[f"import_torch_{name}_delta_ms"] = round(
                (statistics.median(series["probe"]) - statistics.median(series["baseline"])) * 1000,
                3,
            )
    return out


def training(python: str, repeats: int, warmup: int, steps: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"baseline": [], "probe": []}
    for _ in range(repeats):
        for v in runs:
            proc = subprocess.run(
                [python, "-c", TRAIN, v, str(warmup), str(steps)],
                env=env_for(v),
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0:
                raise SystemExit(f"training child ({v}) failed:\n{proc.stderr[-3000:]}")
            runs[v].append(json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_s"])
    base, probe = (statistics.median(runs[v]) for v in ("baseline", "probe"))
    return {
        "model": "TransformerEncoder 4 x (d_model 512, 8 heads, ff 2048), batch 32 x 256, AdamW, "
        "bf16 autocast",
        "warmup_steps": warmup,
        "timed_steps": steps,
        "steps_per_s": {v: [round(x, 2) for x in runs[v]] for v in runs},
        "median_steps_per_s": {"baseline": round(base, 2), "probe": round(probe, 2)},
        "probe_over_baseline": round(probe / base, 4),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--python", default=sys.executable, help="the interpreter a job would use")
    p.add_argument("--startup-only", action="store_true", help="no GPU needed")
    p.add_argument("--startup-repeats", type=int, default=40)
    p.add_argument("--torch-repeats", type=int, default=6, help="0: skip the import-torch timing")
    p.add_argument("--train-repeats", type=int, default=4)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    t0 = time.time()
    info = "import sys, torch; print(torch.__version__, sys.version.split()[0])"
    probe_info = subprocess.run(
        [args.python, "-W", "ignore", "-c", info], capture_output=True, text=True
    ).stdout.strip()
    report: dict[str, Any] = {
        "command": "python3 bench/gpu/probe_overhead.py " + " ".join(sys.argv[1:]),
        "torch_python": probe_info,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}",
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "startup": startup(args.python, args.startup_repeats, args.torch_repeats),
    }
    if not args.startup_only:
        report["training"] = training(args.python, args.train_repeats, args.warmup, args.steps)
    report["seconds"] = round(time.time() - t0, 1)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
