#!/usr/bin/env python3
"""Score the diagnosis on the small-card runs (``run_cards.py``): for every native OOM, the log
as the job printed it on an emulated card of N GiB, its failure message rewritten to what a real
N GiB card prints (``message_as_card``: the card's total, the holder process dropped), diagnosed
by a tree's ``operator/``; truth from the re-runs, not from the rules.

- setting right: an allocator setting is recommended exactly when ``expandable_segments:True``
  or ``max_split_size_mb:128`` let the job finish its steps (a recommended one must be one that
  did); rows whose settings were not re-run (the deadline) are not scored;
- kind right: fragmentation exactly when a setting helped; else capacity; the leaking jobs must
  name leak (primary, or contributing beside a fragmentation a setting fixed).

    python3 evaluation/gpu/cards/score.py [--tree TREE] [--rows ROWS.jsonl] [--logs DIR] [--md OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
ROWS = REPO / "evaluation" / "results" / "cards-2026-12-02" / "rows.jsonl"
SETTINGS = {"es": "expandable_segments:True", "ms128": "max_split_size_mb:128"}
SKIP = ("margin", "first_call", "ctx_check")


def card_log(row: dict[str, Any], logs: Path) -> str:
    text = (logs / row["log"]).read_text(errors="replace")
    raw = row["message"]
    at = text.find(raw[:200])
    if at < 0:
        return text
    return text[:at] + row["message_as_card"] + text[at + len(raw) :]


def judge(tree: Path, rows_path: Path, logs: Path = HERE) -> list[dict[str, Any]]:
    sys.path.insert(0, str(tree / "operator"))
    from gpu_auditor.diagnosis import diagnose

    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    runs = {r["name"]: r for r in rows if r.get("kind") == "run"}
    out = []
    for r in rows:
        if r.get("kind") != "run" or r.get("setting") != "native" or r["job"] in SKIP:
            continue
        if r.get("outcome") != "oom" or not r.get("message_as_card"):
            continue
        tried = {
            key: runs.get(r["name"].replace("__native__", f"__{key}__")) for key in SETTINGS
        }
        helped = {SETTINGS[k] for k, run in tried.items() if run and run["outcome"] == "finished"}
        measured = any(run is not None for run in tried.values())
        d = diagnose(card_log(r, logs))
        conf = d.recommendation.alloc_conf
        leak_job = r["job"].startswith("leak")
        row: dict[str, Any] = {
            "name": r["name"], "card_gib": r["card_gib"], "job": r["job"],
            "oom_step": r["oom_step"], "measured": measured, "helped": sorted(helped),
            "kind": d.kind, "contributing": list(d.contributing), "setting": conf,
        }
        if measured:
            row["setting_ok"] = (conf is None) == (not helped) and (
                conf is None or any(s in conf for s in helped)
            )
            want = "fragmentation" if helped else "capacity"
            if leak_job:
                row["kind_ok"] = d.kind == "leak" or (
                    d.kind == "fragmentation" and bool(helped) and "leak" in d.contributing
                )
            else:
                row["kind_ok"] = d.kind == want
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=REPO)
    ap.add_argument("--rows", type=Path, default=ROWS)
    ap.add_argument("--logs", type=Path, default=HERE, help="the folder holding the rows' logs/")
    ap.add_argument("--md", type=Path)
    a = ap.parse_args()
    rows = judge(a.tree.resolve(), a.rows, a.logs)
    scored = [r for r in rows if r["measured"]]
    recs = [r for r in scored if r["setting"]]
    shown = a.rows.relative_to(REPO) if a.rows.is_relative_to(REPO) else a.rows
    lines = [
        f"Tree: `{a.tree}`; rows: `{shown}`",
        "",
        f"- measured rows: {len(scored)}; kind right {sum(r['kind_ok'] for r in scored)}; "
        f"setting right {sum(r['setting_ok'] for r in scored)}; settings recommended "
        f"{len(recs)}, of which a measured fix {sum(r['setting_ok'] for r in recs)}",
        f"- rows not re-run with a setting (deadline), diagnosed only: {len(rows) - len(scored)}",
        "",
        "| run | OOM at step | settings that let it finish | kind (contributing) | setting "
        "| right? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        right = "-" if not r["measured"] else (
            "yes" if r["kind_ok"] and r["setting_ok"] else "**no**"
        )
        contrib = f" ({', '.join(r['contributing'])})" if r["contributing"] else ""
        helped = ", ".join(r["helped"]) or ("none" if r["measured"] else "not re-run")
        lines.append(
            f"| {r['name']} | {r['oom_step']} | {helped} "
            f"| {r['kind']}{contrib} | {r['setting'] or '-'} | {right} |"
        )
    md = "\n".join(lines) + "\n"
    print(md)
    if a.md:
        a.md.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
