"""Score one tree's diagnose() on the blind aftermath set: right when ``detected`` equals the
label's ``died_of_oom`` (was the OOM what ended the job?).

    python evaluation/aftermath_score.py TREE        # TREE: a checkout whose operator/ is imported

Run it on a `git worktree add --detach` of each commit to compare rules before and after a
change; evaluation/results/aftermath-blind-score.md has the figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "oom" / "aftermath"


def main() -> int:
    sys.path.insert(0, str(Path(sys.argv[1]) / "operator"))
    from gpu_auditor.diagnosis import diagnose

    labels = json.loads((FOLDER / "labels.json").read_text())
    right = 0
    for name, label in sorted(labels.items()):
        d = diagnose((FOLDER / name).read_bytes())
        ok = d.detected == label["died_of_oom"]
        right += ok
        later = dict(d.extra).get("later_failure") or ""
        print(f"{'ok ' if ok else 'BAD'} truth={label['died_of_oom']!s:5} "
              f"detected={d.detected!s:5} kind={d.kind:20} {name}  {later}")  # fmt: skip
    print(f"{right}/{len(labels)} right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
