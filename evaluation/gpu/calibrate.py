#!/usr/bin/env python3
"""The calibration set, scored: does the diagnosis recommend an allocator setting exactly where
the GPU re-runs showed one removes the OOM? (Issue 10; the held-out set is scored apart, by
``score.py``, and set no threshold.)

Rows:

- every point of the calibration sweep whose native run ended in an OOM
  (``evaluation/results/gpu-sweep.json``): the OOM message alone, and the same message with a probe
  record built from the allocator's state the sweep read in-process at the failure (the sweep
  of 2026-12-01 ran with the probe itself off, by a bug in the driver; the state is the same
  ``torch.cuda.memory_snapshot()`` the probe reads);
- every baseline of the proof suite (``evaluation/results/gpu-proof.json``), its log alone and with
  the record the probe wrote when the baseline was run again with it loaded
  (``evaluation/results/gpu-proof-probe.json``, ``evaluation/gpu/logs/probe/``).

A row is "fixed" when the re-run with ``expandable_segments:True`` (or ``max_split_size_mb:128``)
got through. For each tree given, each row's verdict: the kind and the setting recommended.

    python3 evaluation/gpu/calibrate.py --tree /path/to/repo [--tree ...] [--md OUT] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20

_JUDGE = r"""
import json, sys
from gpu_auditor.diagnosis import diagnose
try:
    from gpu_auditor.diagnosis.proberecord import parse_record
except ImportError:
    parse_record = None
rows = json.load(sys.stdin)
out = []
for row in rows:
    kw = {}
    if row.get("record") and parse_record is not None:
        parsed = parse_record(row["record"])
        if parsed.record is None:
            out.append({"error": parsed.reason}); continue
        kw["probe_record"] = parsed.record
    elif row.get("record"):
        out.append({"error": "this tree reads no probe records"}); continue
    if row.get("conf"):
        kw["alloc_conf"] = row["conf"]
    d = diagnose(row["text"], **kw)
    out.append({"kind": d.kind, "contributing": list(d.contributing),
                "alloc_conf": d.recommendation.alloc_conf})
json.dump(out, sys.stdout)
"""


def _record_from_state(message: dict[str, Any], exact: dict[str, Any]) -> str | None:
    """A schema-1 probe record from the sweep's in-process allocator state at the failure."""
    pools = exact.get("pools")
    if not isinstance(pools, dict) or "error" in pools or exact.get("requested") is None:
        return None
    large = exact.get("unallocated_large_pool")
    small = exact.get("unallocated_small_pool")
    body = {
        "probe": "gpu-auditor",
        "v": 1,
        "status": "ok",
        "backend": "native",
        "request_bytes": exact["requested"],
        "device_total_bytes": message.get("total"),
        "device_free_bytes": exact.get("free"),
        "allocated_bytes": exact.get("allocated"),
        "reserved_bytes": exact.get("reserved"),
        "allowed_bytes": exact.get("allowed"),
        "pools": {
            "large": {"free_bytes": large or 0,
                      "largest_free_bytes": (pools.get("large") or {}).get("largest_free", 0)},
            "small": {"free_bytes": small or 0,
                      "largest_free_bytes": (pools.get("small") or {}).get("largest_free", 0)},
        },
    }
    return "gpu-auditor-probe-record " + json.dumps(body)


def sweep_rows() -> list[dict[str, Any]]:
    data = json.loads((REPO / "evaluation/results/gpu-sweep.json").read_text())
    rows = []
    for r in data["rows"]:
        native = (r.get("figures") or {}).get("native") or {}
        message = native.get("message")
        run = (r.get("runs") or {}).get("native") or {}
        if not message or run.get("outcome") != "oom":
            continue
        fixed = r["fixed"]
        base = {
            "row": f"sweep:{r['point']}",
            "text": run["message"],
            "es": fixed["es"]["fixed"],
            "ms": fixed["ms128"]["fixed"],
            "figures": message,
        }
        rows.append({**base, "with": "message"})
        record = _record_from_state(message, native.get("exact") or {})
        if record is not None:
            rows.append({**base, "with": "record", "record": record})
    return rows


def proof_rows() -> list[dict[str, Any]]:
    proof = json.loads((REPO / "evaluation/results/gpu-proof.json").read_text())
    runs = {(r["scenario"], r["variant"]): r for r in proof["runs"]}
    probe = REPO / "evaluation/results/gpu-proof-probe.json"
    probed = (
        {r["scenario"]: r for r in json.loads(probe.read_text())["runs"]} if probe.exists() else {}
    )
    rows = []
    for s in proof["scenarios"]:
        base = runs.get((s["name"], "baseline"))
        if not base or base.get("outcome") != "oom":
            continue
        es = runs.get((s["name"], "alloc:expandable_segments:True"), {}).get("outcome")
        ms = runs.get((s["name"], "alloc:max_split_size_mb:128"), {}).get("outcome")
        row = {
            "row": f"proof:{s['name']}",
            "text": (REPO / "evaluation/gpu/logs" / base["log"]).read_text(errors="replace"),
            "conf": s.get("base_conf"),
            "es": es == "ok" if es in ("ok", "oom") else None,
            "ms": ms == "ok" if ms in ("ok", "oom") else None,
        }
        rows.append({**row, "with": "message"})
        again = probed.get(s["name"])
        if again and again.get("probe_record") and again.get("outcome") == "oom":
            text = (REPO / "evaluation/gpu/logs/probe" / again["log"]).read_text(errors="replace")
            rows.append({**row, "with": "record", "text": text, "record": again["probe_record"]})
    return rows


def judge(tree: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "operator"))
    payload = [{"text": r["text"], "record": r.get("record"), "conf": r.get("conf")} for r in rows]
    p = subprocess.run([sys.executable, "-c", _JUDGE], input=json.dumps(payload), env=env,
                       capture_output=True, text=True, timeout=600, check=True)
    result: list[dict[str, Any]] = json.loads(p.stdout)
    return result


def confusion(rows: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"recommended, fixed": [], "recommended, NOT fixed": [],
                                 "none, a setting would fix": [], "none, none fixes": []}
    for row, v in zip(rows, verdicts, strict=True):
        conf = v.get("alloc_conf")
        helps = bool(row["es"]) or bool(row["ms"])
        if conf:
            works = (row["es"] and "expandable_segments:True" in conf) or (
                row["ms"] and "max_split_size_mb" in conf)
            out["recommended, fixed" if works else "recommended, NOT fixed"].append(row["row"])
        else:
            out["none, a setting would fix" if helps else "none, none fixes"].append(row["row"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, action="append", required=True)
    ap.add_argument("--label", action="append")
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    labels = a.label or [str(t) for t in a.tree]
    rows = sweep_rows() + proof_rows()
    report: dict[str, Any] = {"rows": [{k: r[k] for k in ("row", "with", "es", "ms")}
                                       for r in rows]}
    md = ["# Calibration set: allocator settings recommended vs what the re-runs showed", "",
          "Command: `python3 evaluation/gpu/calibrate.py " + " ".join(
              f"--tree {t} --label {lb}" for t, lb in zip(a.tree, labels, strict=True)) + "`", ""]
    for label, tree in zip(labels, a.tree, strict=True):
        verdicts = judge(tree, rows)
        report[label] = verdicts
        for with_ in ("message", "record"):
            picked = [(r, v) for r, v in zip(rows, verdicts, strict=True) if r["with"] == with_]
            if not picked or all("error" in v for _, v in picked):
                continue
            table = confusion([r for r, _ in picked], [v for _, v in picked])
            md.append(f"## {label}, from the {with_} ({len(picked)} rows)")
            for key, names in table.items():
                md.append(f"- {key}: {len(names)}" + (f" ({', '.join(names)})" if names else ""))
            md.append("")
        md.append(f"| row | with | fixed by a setting? | {label}: kind (contributing) -> setting |")
        md.append("|---|---|---|---|")
        for r, v in zip(rows, verdicts, strict=True):
            helps = "yes" if (r["es"] or r["ms"]) else "no"
            if "error" in v:
                md.append(f"| {r['row']} | {r['with']} | {helps} | {v['error']} |")
                continue
            contrib = f" ({', '.join(v['contributing'])})" if v["contributing"] else ""
            md.append(f"| {r['row']} | {r['with']} | {helps} | {v['kind']}{contrib} -> "
                      f"{v['alloc_conf'] or 'none'} |")
        md.append("")
    text = "\n".join(md) + "\n"
    if a.md:
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    print(text if not a.md else f"wrote {a.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
