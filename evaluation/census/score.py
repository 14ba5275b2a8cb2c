#!/usr/bin/env python3
"""Score the scan on the census: one failure line (or block) per entry of ``lines.jsonl``, each
as a public thread posted it, from 175 repositories and some 40 stacks, collected by a helper who
read no rule (its prompt: README.md here).

    python evaluation/census/score.py [--tree TREE] [--list] [--md OUT.md]

Each entry's text (its ``block`` where the message spans lines, else its ``line``) is given to
``diagnose`` alone, as ``gpu-auditor diagnose`` would read a log of just that. Scores: OOM lines
detected, of the OOM lines; lines that are not an OOM failure (``is_oom`` false: lookalikes,
warnings that did not fail the job) called an OOM. Per stack group with ``--list``. A line alone
is harder than a log (no traceback, no later line that says the job went on), so a warning the
job survived counts as a miss only when the collector marked it an OOM.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=HERE.parents[1])
    ap.add_argument("--list", action="store_true", help="print every miss and false alarm")
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve() / "operator"))
    from gpu_auditor.diagnosis import diagnose

    rows = [json.loads(line) for line in (HERE / "lines.jsonl").read_text().splitlines() if line]
    count: collections.Counter[tuple[bool, bool]] = collections.Counter()
    wrong: list[tuple[int, dict[str, Any], str]] = []
    for i, row in enumerate(rows):
        found = diagnose((row.get("block") or row["line"]).encode()).detected
        count[(bool(row["is_oom"]), found)] += 1
        if found != bool(row["is_oom"]):
            wrong.append((i, row, "false alarm" if found else "missed"))
    oom = count[(True, True)] + count[(True, False)]
    neg = count[(False, True)] + count[(False, False)]
    lines = [
        f"OOM lines detected: {count[(True, True)]}/{oom}",
        f"not-OOM lines called an OOM: {count[(False, True)]}/{neg}",
    ]
    if args.list:
        lines += [f"{what} {i}: {row['stack']}: {(row.get('block') or row['line'])[:160]!r}"
                  for i, row, what in wrong]
    print("\n".join(lines))
    if args.md:
        args.md.write_text("\n\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
