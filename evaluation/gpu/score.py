#!/usr/bin/env python3
"""Score a diagnosis against what the GPU re-runs measured, for any run file of run_proof.py's
shape (the proof suite, the held-out set).

For every scenario the baseline log is diagnosed by the gpu-auditor CLI of a given source tree
(``--tree``: the repository whose ``operator/`` to import; run it once with the tree as it was
before a rule change and once after, to report accuracy before and after on the same logs).

Truth comes from the runs, not from our rules:

- ``setting_helps``: the scenario's own allocator setting merged with ``expandable_segments:True``
  or ``max_split_size_mb:128`` removed the OOM;
- ``kind``: the kind the scenario's author intended (``retry-exhausted``: ``capacity`` in the
  ``retry-exhausted`` phase), checked against the runs: an intended
  ``fragmentation`` that no allocator setting fixed, or another kind that one did, is reported as
  ``contradicted`` (kept in the set and scored against the measurement: fragmentation exactly
  when a setting fixed it).

A diagnosis is right when its kind is the truth's kind and it recommends an allocator setting
exactly when one helps (and, when it recommends one, that one is among those measured to fix it).

    python3 evaluation/gpu/score.py RUNS.json LOGDIR --tree /path/to/repo [--json OUT] [--md OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ES = "expandable_segments:True"
MS = "max_split_size_mb:128"


def _runs_by(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["scenario"], r["variant"]): r for r in result["runs"]}


def diagnose(tree: Path, log: Path, conf: str | None) -> dict[str, Any] | None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "operator")
    cmd = [sys.executable, "-m", "gpu_auditor.cli", "diagnose", "--json"]
    if conf:
        cmd += ["--alloc-conf", conf]
        if "cudaMallocAsync" in conf:
            cmd += ["--backend", "cudaMallocAsync"]
    cmd.append(str(log))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tree)
    if p.returncode not in (0, 1):
        return {"error": p.stderr[-500:]}
    try:
        out = json.loads(p.stdout)
    except ValueError:
        return {"error": p.stdout[-500:]}
    return out[0] if isinstance(out, list) else out


def truth(scn: dict[str, Any], runs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    name = scn["name"]
    fixed: dict[str, bool | None] = {}
    for variant, r in runs.items():
        if variant[0] != name or variant[1] == "baseline":
            continue
        fixed[variant[1]] = None if r.get("outcome") not in ("ok", "oom") else r["outcome"] == "ok"
    base = runs.get((name, "baseline"), {})
    es, ms = fixed.get(f"alloc:{ES}"), fixed.get(f"alloc:{MS}")
    helps = bool(es) or bool(ms)
    intended = scn.get("intended")
    kind = intended
    contradicted = False
    if intended == "fragmentation" and es is not None and not helps:
        kind, contradicted = "not-fragmentation", True
    elif intended != "fragmentation" and helps:
        kind, contradicted = "fragmentation", True
    return {
        "baseline": base.get("outcome"),
        "intended": intended,
        "kind": kind,
        "contradicted": contradicted,
        "setting_helps": helps,
        "es_fixed": es,
        "ms_fixed": ms,
        "fixed": fixed,
    }


def judge(t: dict[str, Any], d: dict[str, Any] | None) -> dict[str, Any]:
    if not d or "error" in d:
        return {"kind": None, "alloc_conf": None, "kind_ok": False, "setting_ok": False,
                "ok": False}
    kind = d.get("kind")
    conf = (d.get("recommendation") or {}).get("alloc_conf")
    not_frag = t["kind"] == "not-fragmentation"
    if t["kind"] == "retry-exhausted":
        # not a kind of ours: a capacity failure whose job already shrank its batch, read as
        # the phase that replaces "a smaller batch" with per-sample reductions
        kind = f"{kind} ({d.get('phase')})"
        kind_ok = kind == "capacity (retry-exhausted)"
    else:
        kind_ok = kind != "fragmentation" if not_frag else kind == t["kind"]
    if conf is None:
        setting_ok = not t["setting_helps"]
    else:
        works = (t["es_fixed"] and "expandable_segments:True" in conf) or (
            t["ms_fixed"] and "max_split_size_mb" in conf
        )
        setting_ok = bool(works)
    return {
        "kind": kind,
        "contributing": d.get("contributing"),
        "alloc_conf": conf,
        "first_action": ((d.get("recommendation") or {}).get("actions") or [None])[0],
        "summary": d.get("summary"),
        "kind_ok": kind_ok,
        "setting_ok": setting_ok,
        "ok": kind_ok and setting_ok,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="the runs JSON (proof.json shape)")
    ap.add_argument("logdir", type=Path, help="the folder holding the runs' logs")
    ap.add_argument("--tree", type=Path, action="append", required=True,
                    help="source tree(s) to score; repeat for before/after")
    ap.add_argument("--label", action="append", help="a name per --tree (default: its path)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args()
    a.logdir = a.logdir.resolve()
    a.tree = [t.resolve() for t in a.tree]
    result = json.loads(a.runs.read_text())
    runs = _runs_by(result)
    labels = a.label or [str(t) for t in a.tree]
    rows: list[dict[str, Any]] = []
    for scn in result["scenarios"]:
        base = runs.get((scn["name"], "baseline"))
        if base is None or base.get("outcome") != "oom":
            outcome = base and base.get("outcome")
            rows.append({"scenario": scn["name"], "skipped": f"baseline {outcome}"})
            continue
        t = truth(scn, runs)
        row: dict[str, Any] = {"scenario": scn["name"], "truth": t}
        for label, tree in zip(labels, a.tree, strict=True):
            row[label] = judge(t, diagnose(tree, a.logdir / base["log"], scn.get("base_conf")))
        rows.append(row)
    scored = [r for r in rows if "truth" in r]
    summary = {
        label: {
            "scenarios": len(scored),
            "right": sum(r[label]["ok"] for r in scored),
            "kind_right": sum(r[label]["kind_ok"] for r in scored),
            "setting_right": sum(r[label]["setting_ok"] for r in scored),
        }
        for label in labels
    }
    out = {"summary": summary, "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    md = ["| scenario | truth | setting helps? | "
          + " | ".join(f"{lb}: kind / setting" for lb in labels) + " |",
          "|---|---|---|" + "---|" * len(labels)]
    for r in rows:
        if "truth" not in r:
            md.append(f"| {r['scenario']} | {r['skipped']} | |" + " |" * len(labels))
            continue
        t = r["truth"]
        tk = t["kind"] + (f" (intended {t['intended']})" if t["contradicted"] else "")
        cells = []
        for lb in labels:
            j = r[lb]
            mark = "right" if j["ok"] else "WRONG"
            cells.append(f"{j['kind']} / {j['alloc_conf'] or 'none'} ({mark})")
        md.append(f"| {r['scenario']} | {tk} | {'yes' if t['setting_helps'] else 'no'} | "
                  + " | ".join(cells) + " |")
    md.append("")
    for lb, s in summary.items():
        md.append(f"- {lb}: {s['right']} of {s['scenarios']} right "
                  f"(kind {s['kind_right']}, setting {s['setting_right']})")
    text = "\n".join(md) + "\n"
    if a.md:
        a.md.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
