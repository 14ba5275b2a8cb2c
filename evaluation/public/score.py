#!/usr/bin/env python3
"""Score the diagnosis on the public set: real OOM logs from public issue threads, labelled from
each thread before the tool was run on them (``labels.json``, hash in ``labels.sha256``).

    python evaluation/public/score.py [--tree TREE] [--half calibration|held-out|all]
                                      [--set FOLDER] [--md OUT.md] [--json OUT.json]

``TREE`` is a checkout whose ``operator/`` is imported (default: this one): run it on a
``git worktree add --detach`` of another commit to score the rules as they were there.
The logs are read as a new user would give them: ``gpu-auditor diagnose LOG``, no torch version,
no allocator setting, no node report.

``--set`` scores another folder of the same shape (``evaluation/public2``: a second set,
collected after the first one's held-out half was spent; without a ``split.json`` every log is
held out).

Scores, per half (``split.json``, made before any rule changed):
- detection: OOM logs detected as an OOM; negatives (``is_oom`` false) called an OOM; logs
  whose thread never told (``is_oom`` null) are counted apart, with how many were called an OOM;
- kind: the primary kind equals the thread's cause, on the OOM logs whose cause the log shows
  (``cause_shown_by_log`` and a cause other than ``unknown``);
- setting precision: of the logs where an allocator setting is recommended, those whose thread
  says an allocator setting made the job run (and none of the ones it says failed is the one
  recommended); a thread that never settled its fix counts as not agreeing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load(tree: Path) -> Any:
    sys.path.insert(0, str(tree / "operator"))
    from gpu_auditor.diagnosis import diagnose

    return diagnose


def judge(label: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    rec = (out.get("recommendation") or {}).get("alloc_conf")
    row: dict[str, Any] = {
        "id": label["id"],
        "card_gib": label.get("card_total_gib"),
        "framework": label.get("framework"),
        "cause": label["cause"],
        "is_oom": label["is_oom"],
        "shown": bool(label.get("cause_shown_by_log")),
        "detected": out["detected"],
        "kind": out.get("kind") if out["detected"] else None,
        "setting": rec,
        "fixed_by": label.get("alloc_setting_fixed"),
        "fix_kind": label.get("fix_kind"),
    }
    # a thread that never told whether memory ran out (``is_oom`` null) is neither an OOM nor a
    # negative: it is counted apart (``undetermined``)
    undetermined = label["is_oom"] is None
    row["detect_ok"] = None if undetermined else out["detected"] == bool(label["is_oom"])
    judged = label["is_oom"] and row["shown"] and label["cause"] not in ("unknown", "not-oom")
    row["kind_judged"] = judged
    row["kind_ok"] = (row["kind"] == label["cause"]) if judged else None
    if rec is not None:
        failed = {s.replace(" ", "") for s in label.get("alloc_settings_failed") or []}
        keys = {part.split(":")[0] for part in rec.split(",")}
        fixed = (label.get("alloc_setting_fixed") or "").split(",")
        fixed_keys = {part.split(":")[0] for part in fixed if part}
        row["setting_ok"] = bool(fixed_keys) and rec.replace(" ", "") not in failed
        row["setting_same_key"] = bool(keys & fixed_keys)
    else:
        row["setting_ok"] = None
        row["setting_same_key"] = None
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ooms = [r for r in rows if r["is_oom"]]
    negs = [r for r in rows if r["is_oom"] is False]
    undetermined = [r for r in rows if r["is_oom"] is None]
    judged = [r for r in rows if r["kind_judged"]]
    recs = [r for r in rows if r["setting"] is not None]
    return {
        "logs": len(rows),
        "oom_logs": len(ooms),
        "oom_detected": sum(r["detected"] for r in ooms),
        "negatives": len(negs),
        "negatives_called_oom": sum(r["detected"] for r in negs),
        "undetermined": len(undetermined),
        "undetermined_called_oom": sum(r["detected"] for r in undetermined),
        "kind_judged": len(judged),
        "kind_right": sum(bool(r["kind_ok"]) for r in judged),
        "settings_recommended": len(recs),
        "settings_agreeing": sum(bool(r["setting_ok"]) for r in recs),
        "settings_same_key": sum(bool(r["setting_same_key"]) for r in recs),
        "threads_fixed_by_a_setting": sum(bool(r["fixed_by"]) for r in rows),
    }


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "0/0"


def markdown(tree: Path, halves: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    lines = [f"Tree: `{tree}`", "", "| half | OOMs detected | negatives called OOM | kind right "
             "| settings agreeing with the thread | same key |", "|---|---|---|---|---|---|"]
    for name, s in halves.items():
        lines.append(
            f"| {name} | {pct(s['oom_detected'], s['oom_logs'])} "
            f"| {s['negatives_called_oom']}/{s['negatives']} "
            f"| {pct(s['kind_right'], s['kind_judged'])} "
            f"| {pct(s['settings_agreeing'], s['settings_recommended'])} "
            f"| {s['settings_same_key']}/{s['settings_recommended']} |"
        )
    for name, s in halves.items():
        if s["undetermined"]:
            lines.append(
                f"{name}: {s['undetermined']} threads never told whether memory ran out; "
                f"{s['undetermined_called_oom']} of them called an OOM"
            )
    lines += ["", "| id | half | card GiB | cause (thread) | shown | kind (tool) | setting (tool) "
              "| thread's setting | fix |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["kind_ok"] is None else (" ok" if r["kind_ok"] else " **wrong**")
        if r["detect_ok"] is False:
            mark = " **missed**" if r["is_oom"] else " **false OOM**"
        setting = r["setting"] or ""
        if r["setting_ok"] is False:
            setting += " **disagrees**"
        lines.append(
            f"| {r['id']} | {r['half']} | {r['card_gib'] or ''} | {r['cause']} "
            f"| {'yes' if r['shown'] else 'no'} | {r['kind'] or '-'}{mark} | {setting} "
            f"| {r['fixed_by'] or ''} | {r['fix_kind'] or ''} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HERE.parents[1])
    ap.add_argument("--half", choices=("calibration", "held-out", "all"), default="all")
    ap.add_argument("--set", type=Path, default=HERE, help="the folder of labels.json and logs/")
    ap.add_argument("--md", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    diagnose = load(args.tree.resolve())
    folder = args.set.resolve()
    labels = json.loads((folder / "labels.json").read_text())
    split_file = folder / "split.json"
    if split_file.is_file():
        split = json.loads(split_file.read_text())
    else:
        split = {"held-out": [label["id"] for label in labels]}
    half_of = {i: name for name, ids in split.items() for i in ids}
    rows = []
    for label in labels:
        half = half_of[label["id"]]
        if args.half != "all" and half != args.half:
            continue
        text = (folder / "logs" / f"{label['id']}.log").read_bytes()
        row = judge(label, diagnose(text).to_json_dict())
        row["half"] = half
        rows.append(row)
    halves = {
        name: summarize([r for r in rows if r["half"] == name])
        for name in ("calibration", "held-out")
        if any(r["half"] == name for r in rows)
    }
    md = markdown(args.tree, halves, rows)
    print(md.split("\n\n")[1])
    if args.md:
        args.md.write_text(md)
    if args.json:
        args.json.write_text(json.dumps({"halves": halves, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
