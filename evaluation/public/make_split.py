#!/usr/bin/env python3
"""Split the public set in two halves, once, before any rule is changed: ``split.json``.

Stratified so both halves see every cause and card size: the logs are grouped by (is an OOM,
cause, card bucket), ordered within a group by the SHA-256 of their id (no choice of ours), and
dealt alternately, each group starting with the half that has fewer logs so far.

    python evaluation/public/make_split.py       # writes split.json; refuses to overwrite it
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def bucket(gib: float | None) -> str:
    if gib is None:
        return "?"
    return "<=12" if gib <= 12 else "12-32" if gib <= 32 else "32-64" if gib <= 64 else ">64"


def split(labels: list[dict]) -> dict[str, list[str]]:
    groups: dict[tuple, list[str]] = {}
    for label in labels:
        key = (label["is_oom"], label["cause"], bucket(label.get("card_total_gib")))
        groups.setdefault(key, []).append(label["id"])
    halves: dict[str, list[str]] = {"calibration": [], "held-out": []}
    for key in sorted(groups, key=str):
        ids = sorted(groups[key], key=lambda i: hashlib.sha256(i.encode()).hexdigest())
        first = min(halves, key=lambda h: (len(halves[h]), h))
        order = [first, next(h for h in halves if h != first)]
        for n, i in enumerate(ids):
            halves[order[n % 2]].append(i)
    return {h: sorted(ids) for h, ids in halves.items()}


def main() -> int:
    out = HERE / "split.json"
    if out.exists():
        print(f"{out} exists: the split is made once", file=sys.stderr)
        return 1
    labels = json.loads((HERE / "labels.json").read_text())
    halves = split(labels)
    out.write_text(json.dumps(halves, indent=1) + "\n")
    print({h: len(ids) for h, ids in halves.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
