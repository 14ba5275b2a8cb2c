#!/usr/bin/env python3
"""Run every OOM scenario on a real GPU: baseline, allocator baselines, and each candidate fix.

For each scenario in SCENARIOS:
  1. baseline: the script as written (its own PYTORCH_CUDA_ALLOC_CONF, if any) -> log file;
  2. PyTorch's own hint ``expandable_segments:True`` and the popular ``max_split_size_mb:128``,
     each merged into the scenario's own setting, through the environment;
  3. every code fix the script offers (``--fix NAME``), one run each;
  4. if the gpu-auditor CLI can be imported (``PYTHONPATH=operator``), its diagnosis of the
     baseline log, and one more run with the allocator setting it recommends, when that setting
     was not already run.
Each run is one process; its combined stdout+stderr is the log. OOM or not is recorded for every
run in ``proof.json``; logs and JSON are packed into one tar.gz.

Needs only python3 with torch and a CUDA GPU; gpu_auditor is optional. The GPU must be otherwise
idle: scenarios fill it, and another process would show up in the OOM message.

    python3 evaluation/gpu/run_proof.py --out /tmp/proof [--only NAME,...] [--deadline-s 540]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCEN = HERE / "scenarios"

ES = "expandable_segments:True"
MS = "max_split_size_mb:128"

# intended: the kind a correct diagnosis names; fixes: code fixes the script offers;
# works: what the scenario is built to show (checked by the runs, not assumed).
SCENARIOS: list[dict] = [
    {
        "name": "frag_pinned",
        "script": "frag_pinned.py",
        "args": [],
        "intended": "fragmentation",
        "pattern": (
            "322 x 8 MiB blocks, every other freed (each 20 MiB segment pinned), then 4.2 "
            "GiB; fraction cap 7 GiB"
        ),
        "fixes": ["compact", "empty_cache"],
    },
    {
        "name": "frag_pinned_fullgpu",
        "script": "frag_pinned.py",
        "args": ["--fullgpu"],
        "intended": "fragmentation",
        "pattern": (
            "same pinned-segment pattern on a GPU filled by the job's weights (7 GiB "
            "left), no fraction"
        ),
        "fixes": ["compact", "empty_cache"],
    },
    {
        "name": "frag_varlen",
        "script": "frag_varlen.py",
        "args": [],
        "intended": "fragmentation",
        "pattern": (
            "causal-attention LM, random seq_len 256..2048 for 200 steps, per-length mask "
            "cache, then seq_len 3072"
        ),
        "fixes": ["no-mask-cache", "bucket"],
    },
    {
        "name": "frag_varlen_seed1",
        "script": "frag_varlen.py",
        "args": ["--seed", "1"],
        "intended": "fragmentation",
        "pattern": "frag_varlen with another random length sequence (robustness check)",
        "fixes": [],
    },
    {
        "name": "capacity_batch",
        "script": "capacity_batch.py",
        "args": [],
        "intended": "capacity",
        "pattern": "weights leave 12 GiB; MLP step on 98304 tokens needs ~15 GiB",
        "fixes": ["half-batch", "grad-accum", "amp"],
    },
    {
        "name": "fraction_cap",
        "script": "fraction_cap.py",
        "args": [],
        "intended": "memory-fraction-cap",
        "pattern": (
            "set_per_process_memory_fraction -> 7 GiB allowed; step needs ~11 GiB; device "
            "~139 GiB free"
        ),
        "fixes": ["fraction=0.1", "fraction=0.2", "half-batch"],
    },
    {
        "name": "fraction_cap_async",
        "script": "fraction_cap.py",
        "args": [],
        "base_conf": "backend:cudaMallocAsync",
        "intended": "memory-fraction-cap",
        "pattern": "the fraction_cap job under backend:cudaMallocAsync",
        "fixes": ["fraction=0.1", "fraction=0.2", "half-batch"],
    },
    {
        "name": "gpu_shared",
        "script": "gpu_shared.py",
        "args": [],
        "intended": "gpu-shared",
        "pattern": "second process holds all but 13 GiB; job needs ~20 GiB",
        "fixes": ["isolate"],
    },
    {
        "name": "leak_total_loss",
        "script": "leak_total_loss.py",
        "args": [],
        "intended": "leak",
        "pattern": (
            "val_total += val_loss (graph kept) every step, ~1 GiB/step; weights leave 12 GiB"
        ),
        "fixes": ["item", "detach", "no_grad"],
    },
    {
        "name": "inference_no_grad",
        "script": "inference_no_grad.py",
        "args": [],
        "intended": "capacity",
        "intended_action": "inference_mode / no_grad",
        "pattern": (
            "16-layer MLP inference, 65536 tokens, no inference_mode: ~32 GiB saved; "
            "weights leave 10 GiB"
        ),
        "fixes": ["inference_mode", "no_grad", "half-batch"],
    },
    {
        "name": "async_backend",
        "script": "async_backend.py",
        "args": [],
        "base_conf": "backend:cudaMallocAsync",
        "intended": "capacity",
        "pattern": "capacity_batch under backend:cudaMallocAsync",
        "fixes": ["half-batch", "amp"],
    },
]

OOM_RE = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|would exceed allowed memory"
)


def merge_conf(base: str | None, add: str | None) -> str | None:
    """Merge allocator settings the way a user would: keep base keys, add/override with ``add``."""
    if not base:
        return add
    if not add:
        return base
    keys: dict[str, str] = {}
    for part in (base + "," + add).split(","):
        if part.strip():
            k, _, v = part.partition(":")
            keys[k.strip()] = v.strip()
    return ",".join(f"{k}:{v}" for k, v in keys.items())


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_")


def gpu_apps() -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except Exception as e:
        return [f"nvidia-smi failed: {e}"]
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def wait_gpu_clean(limit_s: float = 15.0) -> list[str]:
    t0 = time.time()
    apps = gpu_apps()
    while apps and time.time() - t0 < limit_s:
        time.sleep(0.5)
        apps = gpu_apps()
    return apps


PROBE_DIR = REPO / "probe"
PROBE = {"on": False}
"""When on (``--probe``), each run loads the OOM probe as a job would (``PYTHONPATH=probe``,
``GPU_AUDITOR_PROBE=1``) and its record, written to a file of the run's own, lands in the run's
entry as ``probe_record``. The probe only observes: the job's own log is unchanged."""


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"):
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def with_probe(env: dict[str, str], record_path: Path) -> None:
    """Load the OOM probe in the job as a job loads it (``--probe``), its record to
    ``record_path`` (removed first, so a stale record is never read)."""
    record_path.unlink(missing_ok=True)
    env["PYTHONPATH"] = str(PROBE_DIR) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env["GPU_AUDITOR_PROBE"] = "1"
    env["GPU_AUDITOR_PROBE_PATH"] = str(record_path)


def run_logged(
    cmd: list[str], env: dict[str, str], log: Path, timeout_s: float, who: str = "driver"
) -> tuple[int, str, float]:
    """Run a job from the repository root with stdout and stderr together, as a container log
    holds them, and write its log: (exit status, output, seconds). A job past ``timeout_s`` is
    124 with what it printed and a ``[who] TIMEOUT`` line."""
    t0 = time.time()
    try:
        p = subprocess.run(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s,
            cwd=REPO,
        )  # fmt: skip
        rc, out = p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode("utf-8", "replace") + f"\n[{who}] TIMEOUT\n"
    wall = time.time() - t0
    log.write_text(out)
    return rc, out, wall


def run_one(
    scn: dict, variant: str, conf: str | None, extra_args: list[str], logdir: Path, timeout_s: float
) -> dict:
    env = base_env()
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    cmd = [sys.executable, str(SCEN / scn["script"]), *scn["args"], *extra_args]
    log = logdir / f"{scn['name']}__{slug(variant)}.log"
    record_path = logdir / f"{scn['name']}__{slug(variant)}.probe"
    if PROBE["on"]:
        with_probe(env, record_path)
    rc, out, wall = run_logged(cmd, env, log, timeout_s)
    oom_lines = [ln for ln in out.splitlines() if OOM_RE.search(ln)]
    outcome = "ok" if rc == 0 else ("oom" if oom_lines else "error")
    leftovers = wait_gpu_clean()
    shown = f"PYTORCH_CUDA_ALLOC_CONF={conf} " if conf else ""
    rec = {
        "scenario": scn["name"],
        "variant": variant,
        "alloc_conf": conf,
        "args": scn["args"] + extra_args,
        "command": shown
        + "python3 "
        + " ".join([str((SCEN / scn["script"]).relative_to(REPO)), *scn["args"], *extra_args]),
        "rc": rc,
        "outcome": outcome,
        "oom": outcome == "oom",
        "wall_s": round(wall, 2),
        "log": log.name,
        "oom_line": oom_lines[-1][:600] if oom_lines else None,
        "last_lines": out.splitlines()[-3:],
        "gpu_apps_after": leftovers,
        "probe_record": record_path.read_text(errors="replace")[:8192]
        if PROBE["on"] and record_path.exists()
        else None,
    }
    print(
        f"[{time.strftime('%H:%M:%S')}] {scn['name']:<20} {variant:<40} rc={rc:<3} "
        f"{outcome:<5} {wall:6.1f}s",
        flush=True,
    )
    return rec


def cli_available() -> bool:
    return (REPO / "operator" / "gpu_auditor" / "cli.py").exists()


def diagnose(log: Path, conf: str | None) -> dict | None:
    env = base_env()
    env["PYTHONPATH"] = str(REPO / "operator") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "gpu_auditor.cli", "diagnose", "--json"]
    if conf:
        cmd += ["--alloc-conf", conf]
        if "cudaMallocAsync" in conf:
            cmd += ["--backend", "cudaMallocAsync"]
    cmd.append(str(log))
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
        return {
            "rc": p.returncode,
            "json": json.loads(p.stdout) if p.returncode == 0 else None,
            "stderr": p.stderr[-2000:],
            "command": " ".join(cmd[1:]),
        }
    except Exception as e:
        return {"rc": None, "json": None, "stderr": repr(e), "command": " ".join(cmd[1:])}


def meta() -> dict:
    m: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        m["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except Exception as e:
        m["nvidia_smi"] = repr(e)
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch,json;print(json.dumps({'torch':torch.__version__,"
            "'cuda':torch.version.cuda,'gpu':torch.cuda.get_device_name(0),"
            "'total_bytes':torch.cuda.get_device_properties(0).total_memory}))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=base_env(),
    )
    try:
        m.update(json.loads(p.stdout.strip().splitlines()[-1]))
    except Exception:
        m["torch_probe_error"] = p.stderr[-2000:]
    m["python"] = sys.version.split()[0]
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for logs, proof.json and the tar.gz")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=540.0,
        help="skip remaining runs after this many seconds",
    )
    ap.add_argument("--run-timeout-s", type=float, default=150.0)
    ap.add_argument("--no-variants", action="store_true", help="baselines only")
    ap.add_argument("--tar", default="gpu-proof.tar.gz")
    ap.add_argument("--probe", action="store_true", help="load the OOM probe in every run")
    ap.add_argument(
        "--resume",
        help="proof.json of an earlier call: runs recorded there are "
        "not repeated (their records are copied, marked with from_earlier_call)",
    )
    a = ap.parse_args()
    PROBE["on"] = a.probe
    done: dict[tuple[str, str], dict] = {}
    if a.resume and Path(a.resume).exists():
        for r in json.loads(Path(a.resume).read_text())["runs"]:
            if r.get("outcome") in ("ok", "oom", "error"):
                done[(r["scenario"], r["variant"])] = dict(r, from_earlier_call=True)

    out = Path(a.out)
    logdir = out / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    only = {s for s in a.only.split(",") if s}
    scenarios = [s for s in SCENARIOS if not only or s["name"] in only]
    result: dict = {"meta": meta(), "scenarios": [], "runs": []}
    result["meta"]["gpu_apps_at_start"] = gpu_apps()
    use_cli = cli_available()
    result["meta"]["cli_available"] = use_cli
    print(json.dumps(result["meta"]), flush=True)

    def time_left() -> bool:
        return time.time() - t_start < a.deadline_s

    for scn in scenarios:
        base = scn.get("base_conf")
        entry = {
            k: scn.get(k)
            for k in (
                "name",
                "script",
                "args",
                "intended",
                "intended_action",
                "pattern",
                "base_conf",
                "fixes",
            )
        }
        result["scenarios"].append(entry)
        plan: list[tuple[str, str | None, list[str]]] = [("baseline", base, [])]
        if not a.no_variants:
            plan.append((f"alloc:{ES}", merge_conf(base, ES), []))
            plan.append((f"alloc:{MS}", merge_conf(base, MS), []))
            plan += [(f"fix:{f}", base, ["--fix", f]) for f in scn["fixes"]]
        tried_confs = {c for _, c, _ in plan}
        for i, (variant, conf, extra) in enumerate(plan):
            if (scn["name"], variant) in done:
                result["runs"].append(done[(scn["name"], variant)])
                continue
            if not time_left():
                result["runs"].append(
                    {
                        "scenario": scn["name"],
                        "variant": variant,
                        "outcome": "skipped",
                        "reason": "deadline",
                    }
                )
                continue
            rec = run_one(scn, variant, conf, extra, logdir, a.run_timeout_s)
            result["runs"].append(rec)
            if i == 0 and use_cli:
                d = diagnose(logdir / rec["log"], base)
                entry["diagnosis"] = d
                rec_conf = (((d or {}).get("json") or {}).get("recommendation") or {}).get(
                    "alloc_conf"
                )
                if rec_conf and rec_conf not in tried_confs and not a.no_variants:
                    plan.append((f"ours:{rec_conf}", rec_conf, []))
                    tried_confs.add(rec_conf)
        (out / "proof.json").write_text(json.dumps(result, indent=1))

    result["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["meta"]["elapsed_s"] = round(time.time() - t_start, 1)
    (out / "proof.json").write_text(json.dumps(result, indent=1))
    with tarfile.open(out / a.tar, "w:gz") as tf:
        tf.add(out / "proof.json", arcname="proof.json")
        tf.add(logdir, arcname="logs")
    print(f"wrote {out / a.tar}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
