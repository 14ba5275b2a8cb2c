#!/usr/bin/env python3
"""Run the held-out OOM jobs on a GPU: baseline, two allocator settings, each code fix.

For each job in scenarios.HELDOUT, one process per variant, its stdout+stderr the log:
  1. baseline: the job as written (its own PYTORCH_CUDA_ALLOC_CONF, if any);
  2. ``expandable_segments:True`` and ``max_split_size_mb:128``, merged into the job's own
     setting, through the environment only;
  3. every code fix in ``fixes`` (``--fix NAME``; with ``--all-fixes`` also ``extra_fixes``);
  4. with ``--diagnose`` and operator/gpu_auditor present, gpu-auditor's diagnosis of the
     baseline log and a run with the setting it recommends, if not already run.
Records OOM or not, where the job was (the last progress line and its step), and the time,
per run in ``heldout.json``; logs as ``logs/<job>__<variant>.log``; both packed in one tar.gz.
A job that fails for another reason is recorded as ``error`` and the run goes on; a job with
``fallback_args`` whose baseline fails that way is run again with them.

Helpers come from evaluation/gpu/run_proof.py (not edited). Needs python3 with torch and an
otherwise idle CUDA GPU (plus transformers, accelerate, tqdm, cupy, jax for some jobs).

    python3 evaluation/gpu/heldout/run_heldout.py --out /tmp/heldout [--only a,b] [--deadline-s 560]
    python3 evaluation/gpu/heldout/run_heldout.py --dry-run-cpu     # every job and fix, tiny, on
    CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rp = _load("run_proof", HERE.parent / "run_proof.py")
HELDOUT: list[dict] = _load("heldout_scenarios", HERE / "scenarios.py").HELDOUT

ES, MS = rp.ES, rp.MS
OOM_RE = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|would exceed allowed memory"
    r"|RESOURCE_EXHAUSTED: Out of memory|Out of memory allocating|CUBLAS_STATUS_ALLOC_FAILED"
    r"|No executable batch size found"
)
STEP_RES = [
    re.compile(p)
    for p in (
        r'"step":\s*(\d+)',
        r"\bit=(\d+)",
        r"\bstep\s+(\d+)",
        r"\bturn\s+(\d+)",
        r"\biteration\s+(\d+)",
        r"\bbatch_size=(\d+)",
        r"\bshards:\s*(\d+)/",
        r"\|\s*(\d+)/\d+\s*\[",
        r"\bcaptured\s+(\d+)/",
    )
]
XLA_ENV = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def oom_source(line: str) -> str:
    if "No executable batch size found" in line:
        return "accelerate-retry-exhausted"
    if "RESOURCE_EXHAUSTED" in line:
        return "jax"
    if "cupy" in line or "Out of memory allocating" in line:
        return "cupy"
    if "CUDA error: out of memory" in line:
        return "cuda-runtime"
    if "CUBLAS_STATUS_ALLOC_FAILED" in line:
        return "cublas"
    return "pytorch"


def progress(out: str) -> tuple[str | None, int | None]:
    """The last progress line the job printed before its traceback, and the step in it."""
    head = out.split("Traceback (most recent call last)")[0]
    lines = [seg.strip() for ln in head.splitlines() for seg in ln.split("\r") if seg.strip()]
    for line in reversed(lines):
        for rx in STEP_RES:
            m = rx.search(line)
            if m:
                return line[:300], int(m.group(1))
    return (lines[-1][:300] if lines else None), None


def job_env(conf: str | None) -> dict[str, str]:
    env = rp.base_env()
    for k in XLA_ENV:
        env.pop(k, None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return env


def run_one(
    scn: dict, variant: str, conf: str | None, extra: list[str], logdir: Path, timeout_s: float
) -> dict:
    script = HERE / scn["script"]
    argv = [*scn["args"], *extra]
    cmd = [sys.executable, str(script), *argv]
    log = logdir / f"{scn['name']}__{rp.slug(variant)}.log"
    env = job_env(conf)
    record_path = logdir / f"{scn['name']}__{rp.slug(variant)}.probe"
    if rp.PROBE["on"]:  # the OOM probe, loaded as a job loads it (run_proof.py --probe)
        rp.with_probe(env, record_path)
    rc, out, wall = rp.run_logged(cmd, env, log, timeout_s)
    oom_lines = [seg for ln in out.splitlines() for seg in ln.split("\r") if OOM_RE.search(seg)]
    if rc == 0:
        outcome = "ok"
    elif rc == 124:
        outcome = "timeout"
    else:
        outcome = "oom" if oom_lines else "error"
    last, step = progress(out)
    leftovers = rp.wait_gpu_clean()
    shown = f"PYTORCH_CUDA_ALLOC_CONF={conf} " if conf else ""
    rec = {
        "scenario": scn["name"],
        "variant": variant,
        "alloc_conf": conf,
        "args": argv,
        "command": shown + "python3 " + " ".join([str(script.relative_to(REPO)), *argv]),
        "rc": rc,
        "outcome": outcome,
        "oom": outcome == "oom",
        "oom_source": oom_source(oom_lines[-1]) if oom_lines else None,
        "oom_line": oom_lines[-1][:600] if oom_lines else None,
        "last_progress": last,
        "step": step,
        "wall_s": round(wall, 2),
        "log": log.name,
        "last_lines": out.splitlines()[-3:],
        "gpu_apps_after": leftovers,
        "probe_record": record_path.read_text(errors="replace")[:8192]
        if rp.PROBE["on"] and record_path.exists()
        else None,
    }
    print(
        f"[{time.strftime('%H:%M:%S')}] {scn['name']:<20} {variant:<36} rc={rc:<3} "
        f"{outcome:<7} step={step!s:<5} {wall:6.1f}s",
        flush=True,
    )
    return rec


def plan_for(
    scn: dict, all_fixes: bool, no_variants: bool, lean: bool = False
) -> list[tuple[str, str | None, list]]:
    base = scn.get("base_conf")
    plan: list[tuple[str, str | None, list]] = [("baseline", base, [])]
    if no_variants:
        return plan
    plan.append((f"alloc:{ES}", rp.merge_conf(base, ES), []))
    if lean:  # GPU time is short: the setting PyTorch's hint names and the first code fix only
        return plan + [(f"fix:{f}", base, ["--fix", f]) for f in scn["fixes"][:1]]
    plan.append((f"alloc:{MS}", rp.merge_conf(base, MS), []))
    fixes = scn["fixes"] + (scn.get("extra_fixes", []) if all_fixes else [])
    plan += [(f"fix:{f}", base, ["--fix", f]) for f in fixes]
    return plan


def dry_run_cpu(scenarios: list[dict]) -> int:
    """Every job, baseline and each fix, tiny and on the CPU: API and shape check only."""
    failed = []
    for scn in scenarios:
        fixes = scn["fixes"] + scn.get("extra_fixes", [])
        for extra in [[], *(["--fix", f] for f in fixes)]:
            cmd = [sys.executable, str(HERE / scn["script"]), *scn["args"], *extra, "--dry-run-cpu"]
            t0 = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=job_env(None))
            ok = p.returncode == 0
            tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
            print(
                f"{'ok  ' if ok else 'FAIL'} {scn['name']:<20} {' '.join(extra):<28} "
                f"{time.time() - t0:5.1f}s  {tail[0][:90]}",
                flush=True,
            )
            if not ok:
                failed.append((scn["name"], extra, (p.stdout + p.stderr)[-3000:]))
    for name, extra, text in failed:
        print(f"\n=== {name} {extra}\n{text}", file=sys.stderr)
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for logs, heldout.json and the tar.gz")
    ap.add_argument("--only", default="", help="comma-separated job names")
    ap.add_argument("--deadline-s", type=float, default=560.0, help="skip runs after this")
    ap.add_argument("--run-timeout-s", type=float, default=180.0)
    ap.add_argument("--no-variants", action="store_true", help="baselines only")
    ap.add_argument("--all-fixes", action="store_true", help="also run each job's extra_fixes")
    ap.add_argument("--with-extra", action="store_true", help="also run the jobs marked extra")
    ap.add_argument("--diagnose", action="store_true", help="gpu-auditor on each baseline")
    ap.add_argument("--tar", default="gpu-heldout.tar.gz")
    ap.add_argument("--probe", action="store_true", help="load the OOM probe in every run")
    ap.add_argument("--lean", action="store_true",
                    help="per job: baseline, expandable_segments:True and its first fix only")
    ap.add_argument("--resume", help="heldout.json of an earlier call: its runs are not repeated")
    ap.add_argument("--dry-run-cpu", action="store_true", help="check every job on the CPU")
    a = ap.parse_args()
    rp.PROBE["on"] = a.probe
    only = {s for s in a.only.split(",") if s}
    unknown = only - {s["name"] for s in HELDOUT}
    if unknown:
        ap.error(f"unknown job(s): {sorted(unknown)}")
    if only:
        order = [n for n in a.only.split(",") if n]  # in the order asked: first things first
        scenarios = sorted((s for s in HELDOUT if s["name"] in only),
                           key=lambda s: order.index(s["name"]))
    else:
        scenarios = [s for s in HELDOUT if a.with_extra or not s.get("extra")]
    if a.dry_run_cpu:
        return dry_run_cpu(scenarios)
    if not a.out:
        ap.error("--out is required (except with --dry-run-cpu)")

    done: dict[tuple[str, str], dict] = {}
    if a.resume and Path(a.resume).exists():
        for r in json.loads(Path(a.resume).read_text())["runs"]:
            if r.get("outcome") in ("ok", "oom", "error", "timeout"):
                done[(r["scenario"], r["variant"])] = dict(r, from_earlier_call=True)

    plans = {s["name"]: plan_for(s, a.all_fixes, a.no_variants, a.lean) for s in scenarios}
    est = sum(
        s["est_s"] + 1.0
        for s in scenarios
        for v, _, _ in plans[s["name"]]
        if (s["name"], v) not in done
    )
    n_runs = sum(len(p) for p in plans.values())
    print(
        f"{len(scenarios)} jobs, {n_runs} runs; estimated {est:.0f} s ({est / 60:.1f} min) on an "
        f"H200; deadline {a.deadline_s:.0f} s",
        flush=True,
    )

    out = Path(a.out)
    logdir = out / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    result: dict = {"meta": rp.meta(), "scenarios": [], "runs": []}
    result["meta"]["gpu_apps_at_start"] = rp.gpu_apps()
    result["meta"]["estimated_s"] = round(est)
    use_cli = a.diagnose and rp.cli_available()
    print(json.dumps(result["meta"]), flush=True)

    for scn in scenarios:
        entry = {k: v for k, v in scn.items() if k != "est_s"}
        result["scenarios"].append(entry)
        plan = plans[scn["name"]]
        tried = {c for _, c, _ in plan}
        fallback: list[str] = []
        i = 0
        while i < len(plan):
            variant, conf, extra = plan[i]
            i += 1
            if (scn["name"], variant) in done:
                result["runs"].append(done[(scn["name"], variant)])
                continue
            if time.time() - t_start > a.deadline_s:
                result["runs"].append(
                    {"scenario": scn["name"], "variant": variant, "outcome": "skipped"}
                )
                continue
            rec = run_one(scn, variant, conf, [*fallback, *extra], logdir, a.run_timeout_s)
            if variant == "baseline" and rec["outcome"] == "error" and scn.get("fallback_args"):
                fallback = list(scn["fallback_args"])
                entry["fallback_used"] = fallback
                rec["superseded_by_fallback"] = True
                kept = logdir / f"{scn['name']}__baseline-before-fallback.log"
                (logdir / rec["log"]).rename(kept)
                rec["log"] = kept.name
                result["runs"].append(rec)
                rec = run_one(scn, "baseline", conf, fallback, logdir, a.run_timeout_s)
            result["runs"].append(rec)
            if variant == "baseline" and use_cli:
                d = rp.diagnose(logdir / rec["log"], scn.get("base_conf"))
                entry["diagnosis"] = d
                rec_conf = (((d or {}).get("json") or {}).get("recommendation") or {}).get(
                    "alloc_conf"
                )
                if rec_conf and rec_conf not in tried and not a.no_variants:
                    plan.append((f"ours:{rec_conf}", rec_conf, []))
                    tried.add(rec_conf)
            (out / "heldout.json").write_text(json.dumps(result, indent=1))

    result["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["meta"]["elapsed_s"] = round(time.time() - t_start, 1)
    (out / "heldout.json").write_text(json.dumps(result, indent=1))
    with tarfile.open(out / a.tar, "w:gz") as tf:
        tf.add(out / "heldout.json", arcname="heldout.json")
        tf.add(logdir, arcname="logs")
    by = {}
    for r in result["runs"]:
        by.setdefault(r["outcome"], 0)
        by[r["outcome"]] += 1
    print(f"wrote {out / a.tar}; outcomes {by}; {result['meta']['elapsed_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
