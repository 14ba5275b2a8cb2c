#!/usr/bin/env python3
"""Diagnose the captured baseline logs with gpu-auditor and score the proof (runs anywhere).

Reads ``evaluation/results/gpu-proof.json`` (written by run_proof.py on the GPU machine) and the
logs in ``evaluation/gpu/logs/``; runs ``python -m gpu_auditor.cli diagnose --json`` on each
baseline log (with ``--alloc-conf`` / ``--backend`` when the job ran with its own setting), and
on each log of a run that still failed under an allocator setting (to see whether we would
recommend that same setting again); maps the actions we name to the code-fix runs; prints a
JSON summary.

    PYTHONPATH=operator python3 evaluation/gpu/report.py >
    evaluation/results/gpu-proof-diagnosis.json
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LOGS = HERE / "logs"
PROOF = REPO / "evaluation" / "results" / "gpu-proof.json"

# code fix flag -> words that show an action names it
ACTION_WORDS: dict[str, list[str]] = {
    "half-batch": ["smaller batch"],
    "grad-accum": ["gradient accumulation"],
    "amp": ["mixed precision", "autocast"],
    "inference_mode": ["inference_mode"],
    "no_grad": ["no_grad"],
    "item": [".item()"],
    "detach": [".detach()"],
    "isolate": ["isolate the gpu"],
    "empty_cache": ["empty_cache"],
    "compact": ["contiguous", "compact"],
    "bucket": ["bucket", "pad "],
    "no-mask-cache": ["mask"],
}


def diagnose(log: Path, conf: str | None) -> dict:
    cmd = [sys.executable, "-m", "gpu_auditor.cli", "diagnose", "--json"]
    if conf:
        cmd += ["--alloc-conf", conf]
        if "cudaMallocAsync" in conf:
            cmd += ["--backend", "cudaMallocAsync"]
    cmd.append(str(log.relative_to(REPO)))
    env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    shown = "PYTHONPATH=operator python3 " + " ".join(cmd[1:])
    if p.returncode != 0:
        return {"command": shown, "rc": p.returncode, "error": p.stderr[-1000:]}
    return {"command": shown, "rc": 0, **json.loads(p.stdout)}


def named_fixes(actions: list[str], fixes: list[str]) -> list[str]:
    text = " ".join(actions).lower()
    named = []
    for f in fixes:
        key = f.split("=")[0]
        if key == "fraction":
            m = re.search(r"fraction to at least ([0-9.]+)", text)
            if m and f == f"fraction={float(m.group(1)):g}":
                named.append(f)
            continue
        if any(w.lower() in text for w in ACTION_WORDS.get(key, [])):
            named.append(f)
    return named


def main() -> int:
    proof = json.loads(PROOF.read_text())
    runs = {(r["scenario"], r["variant"]): r for r in proof["runs"]}
    out = []
    for scn in proof["scenarios"]:
        name, base = scn["name"], scn.get("base_conf")
        b = runs.get((name, "baseline"))
        if not b:
            continue
        d = diagnose(LOGS / b["log"], base)
        rec = d.get("recommendation") or {}
        conf = rec.get("alloc_conf")
        row = {
            "scenario": name,
            "intended": scn["intended"],
            "intended_action": scn.get("intended_action"),
            "baseline_outcome": b["outcome"],
            "our_kind": d.get("kind"),
            "contributing": d.get("contributing"),
            "summary": d.get("summary"),
            "our_alloc_conf": conf,
            "actions": rec.get("actions"),
            "diagnose_command": d["command"],
            "es": runs.get((name, "alloc:expandable_segments:True"), {}).get("outcome"),
            "ms": runs.get((name, "alloc:max_split_size_mb:128"), {}).get("outcome"),
            "fix_runs": {
                v.split(":", 1)[1]: r["outcome"]
                for (s, v), r in runs.items()
                if s == name and v.startswith("fix:")
            },
        }
        if conf:
            r = runs.get((name, f"ours:{conf}")) or next(
                (
                    r
                    for (s, v), r in runs.items()
                    if s == name and v.startswith("alloc:") and r.get("alloc_conf") == conf
                ),
                None,
            )
            row["our_alloc_conf_outcome"] = r["outcome"] if r else "not run"
        row["named_fixes"] = named_fixes(rec.get("actions") or [], scn.get("fixes") or [])
        row["named_fix_outcomes"] = {f: row["fix_runs"].get(f) for f in row["named_fixes"]}
        # re-diagnose logs of runs that still failed under an allocator setting
        again = {}
        for (s, v), r in runs.items():
            if s == name and v.startswith(("alloc:", "ours:")) and r["outcome"] == "oom":
                d2 = diagnose(LOGS / r["log"], r["alloc_conf"])
                again[v] = {
                    "kind": d2.get("kind"),
                    "alloc_conf": (d2.get("recommendation") or {}).get("alloc_conf"),
                }
        row["rediagnosis_of_failed_allocator_runs"] = again
        out.append(row)
    json.dump({"source": str(PROOF.relative_to(REPO)), "rows": out}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
