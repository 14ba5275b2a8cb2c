#!/usr/bin/env python3
"""Run held-out set B on a real GPU: each job as baseline, with expandable_segments, with its fix.

Fifteen runs (five jobs x three variants), one process each, in this order so that a deadline
cuts the least useful runs: every baseline, then every ``expandable_segments:True`` run, then
every fix. Each run's combined stdout+stderr is its log, ``logs/<scenario>__<variant>.log``; OOM
or not is recorded in ``heldout_b.json`` (the shape of ``run_proof.py``'s ``proof.json``:
``scenarios`` and ``runs`` with scenario, variant, outcome, log). A job that crashes for another
reason is recorded as ``error``, one that runs out of time as ``timeout``, one never started
because of ``--deadline-s`` as ``skipped``; the runner goes on. Everything is packed into
``gpu-heldout-b.tar.gz``.

Needs python3 with torch and an otherwise idle CUDA GPU (about 20 GiB free at least; the jobs
fill the rest with a ballast). gpu_auditor is not needed there.

    python3 evaluation/gpu/heldout_b/run.py --out DIR [--deadline-s 150] [--only a,b]
    python3 evaluation/gpu/heldout_b/run.py --out DIR --dry-run-cpu   # tiny sizes, no GPU

Another held-out set reuses this runner with its own folder and scenario list through
``main(Suite(...))`` (``evaluation/gpu/heldout_c/run.py``). A scenario may carry ``alloc_conf``,
its own
``PYTORCH_CUDA_ALLOC_CONF``: every variant runs with it, and the ``expandable_segments`` variant
merges ``expandable_segments:True`` into it (``run_proof.merge_conf``). Set B has none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from run_proof import OOM_RE, base_env, gpu_apps, merge_conf, run_logged, slug  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402

ES = "expandable_segments:True"
MIN_RUN_S = 10.0  # a run is not started with less time than this left before the deadline


@dataclass(frozen=True)
class Suite:
    """One held-out set: its name (``DIR/<name>.json``), the folder of its jobs, its scenarios."""

    name: str
    folder: Path
    scenarios: list[dict]
    deadline_s: float = 150.0

    @property
    def tar(self) -> str:
        return "gpu-" + self.name.replace("_", "-") + ".tar.gz"


SET_B = Suite("heldout_b", HERE, SCENARIOS)


def plan(scenarios: list[dict]) -> list[tuple[dict, str, str | None, list[str]]]:
    """(scenario, variant, PYTORCH_CUDA_ALLOC_CONF, extra args), variant-major."""
    runs: list[tuple[dict, str, str | None, list[str]]] = []
    runs += [(s, "baseline", s.get("alloc_conf"), []) for s in scenarios]
    runs += [(s, f"alloc:{ES}", merge_conf(s.get("alloc_conf"), ES), []) for s in scenarios]
    runs += [
        (s, f"fix:{f}", s.get("alloc_conf"), ["--fix", f]) for s in scenarios for f in s["fixes"]
    ]
    return runs


def expected_oom(scn: dict, variant: str) -> bool:
    """What the job is built to show: its fix removes the OOM; the allocator setting removes it
    only for fragmentation."""
    if variant == "baseline":
        return True
    if variant.startswith("alloc:"):
        return scn["intended"] != "fragmentation"
    return False


def run_one(
    scn: dict,
    variant: str,
    conf: str | None,
    extra: list[str],
    logdir: Path,
    timeout_s: float,
    dry: bool,
    folder: Path = HERE,
) -> dict:
    env = base_env()
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    script = folder / scn["script"]
    args = [*scn["args"], *extra, *(["--dry-run-cpu"] if dry else [])]
    log = logdir / f"{scn['name']}__{slug(variant)}.log"
    rc, out, wall = run_logged([sys.executable, str(script), *args], env, log, timeout_s, "run.py")
    oom_lines = [ln for ln in out.splitlines() if OOM_RE.search(ln)]
    if rc == 124:
        outcome = "timeout"
    elif rc == 0:
        outcome = "ok"
    else:
        outcome = "oom" if oom_lines else "error"
    shown = f"PYTORCH_CUDA_ALLOC_CONF={conf} " if conf else ""
    rec = {
        "scenario": scn["name"],
        "variant": variant,
        "alloc_conf": conf,
        "args": args,
        "command": shown + "python3 " + " ".join([os.path.relpath(script, REPO), *args]),
        "rc": rc,
        "outcome": outcome,
        "oom": outcome == "oom",
        "expected_oom": expected_oom(scn, variant),
        "wall_s": round(wall, 2),
        "log": log.name,
        "oom_line": oom_lines[-1][:600] if oom_lines else None,
        "last_lines": out.splitlines()[-3:],
    }
    if not dry:
        rec["gpu_apps_after"] = wait_gpu_clean(5.0)
    print(
        f"[{time.strftime('%H:%M:%S')}] {scn['name']:<20} {variant:<32} rc={rc:<4} "
        f"{outcome:<7} {wall:6.1f}s",
        flush=True,
    )
    return rec


def wait_gpu_clean(limit_s: float) -> list[str]:
    t0 = time.time()
    apps = gpu_apps()
    while apps and time.time() - t0 < limit_s:
        time.sleep(0.5)
        apps = gpu_apps()
    return apps


def smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        ).stdout.strip()
    except Exception as e:
        return repr(e)


def summary(result: dict) -> list[str]:
    lines = (
        ["dry run on CPU: no job can run out of GPU memory here"]
        if result["meta"]["dry_run_cpu"]
        else []
    )
    for s in result["scenarios"]:
        runs = [r for r in result["runs"] if r["scenario"] == s["name"]]
        cells = []
        as_built = True
        for r in runs:
            cells.append(f"{r['variant']}={r['outcome']}")
            if r["outcome"] not in ("ok", "oom") or r["oom"] != r.get("expected_oom"):
                as_built = False
        lines.append(
            f"{s['name']:<20} {s['intended']:<20} {'as built' if as_built else 'NOT AS BUILT'}: "
            + ", ".join(cells)
        )
    return lines


def main(suite: Suite = SET_B) -> int:
    ap = argparse.ArgumentParser(
        description=f"Run held-out set {suite.name} on a real GPU: each job as baseline, with "
        "expandable_segments, with its fix."
    )
    ap.add_argument("--out", required=True, help=f"folder for logs, {suite.name}.json, the tar.gz")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=suite.deadline_s,
        help="no run starts, and a running one is stopped, after this many seconds",
    )
    ap.add_argument("--run-timeout-s", type=float, default=60.0)
    ap.add_argument("--dry-run-cpu", action="store_true", help="every run at tiny sizes on CPU")
    ap.add_argument("--tar", default=suite.tar)
    a = ap.parse_args()

    out = Path(a.out)
    logdir = out / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    only = [s for s in a.only.split(",") if s]
    unknown = sorted(set(only) - {s["name"] for s in suite.scenarios})
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}")
    scenarios = [s for s in suite.scenarios if not only or s["name"] in only]
    result: dict = {
        "meta": {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "set": suite.name,
            "dry_run_cpu": a.dry_run_cpu,
            "python": sys.version.split()[0],
            "nvidia_smi": None if a.dry_run_cpu else smi(),
            "gpu_apps_at_start": [] if a.dry_run_cpu else gpu_apps(),
            "deadline_s": a.deadline_s,
        },
        "scenarios": [
            {
                k: s.get(k)
                for k in (
                    "name",
                    "script",
                    "args",
                    "intended",
                    "intended_action",
                    "pattern",
                    "fixes",
                    "est_s",
                )
            }
            | ({"alloc_conf": s["alloc_conf"]} if "alloc_conf" in s else {})
            for s in scenarios
        ],
        "runs": [],
    }
    print(json.dumps(result["meta"]), flush=True)
    jpath = out / f"{suite.name}.json"
    for scn, variant, conf, extra in plan(scenarios):
        left = a.deadline_s - (time.time() - t_start)
        if left < MIN_RUN_S:
            result["runs"].append(
                {
                    "scenario": scn["name"],
                    "variant": variant,
                    "outcome": "skipped",
                    "oom": False,
                    "expected_oom": expected_oom(scn, variant),
                    "reason": "deadline",
                    "log": None,
                }
            )
            print(f"skipped {scn['name']} {variant}: deadline", flush=True)
        else:
            timeout = min(a.run_timeout_s, left)
            result["runs"].append(
                run_one(scn, variant, conf, extra, logdir, timeout, a.dry_run_cpu, suite.folder)
            )
        jpath.write_text(json.dumps(result, indent=1))

    result["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["meta"]["elapsed_s"] = round(time.time() - t_start, 1)
    result["summary"] = summary(result)
    jpath.write_text(json.dumps(result, indent=1))
    with tarfile.open(out / a.tar, "w:gz") as tf:
        tf.add(jpath, arcname=jpath.name)
        tf.add(logdir, arcname="logs")
    print("\n".join(result["summary"]), flush=True)
    print(f"elapsed {result['meta']['elapsed_s']} s; wrote {out / a.tar}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
