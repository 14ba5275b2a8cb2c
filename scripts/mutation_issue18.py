#!/usr/bin/env python3
"""The survivors issue 18 lists, re-made by hand in today's code and run against the unit tests.

    .venv/bin/python scripts/mutation_issue18.py            # all (about 3 minutes)
    .venv/bin/python scripts/mutation_issue18.py --only classify-room-lt

mutmut (scripts/mutation.py) does not mutate module-level constants (``thresholds.py``, the
``Final`` values beside a rule) nor ``@property`` bodies, and its mutant names change with the
code; the issue's reviewer mutated exactly those. Each mutant here is one textual replacement
in one file of a copy of the tree (``.mutation/issue18/``; the work tree is never touched),
found where main's refactor moved the rule, with the tests that must catch it. A mutant is
killed when pytest exits 1 (a test failed); exit 0 is a survivor; any other exit (a
collection error, no tests) is an error, never counted as a kill. Results:
``bench/results/mutation-issue18.md`` (+ ``.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGE = REPO / ".mutation" / "issue18"
COPIED = ("operator", "node_agent", "tests", "probe", "evaluation/gpu/logs", "examples", "charts",
          "docs")  # fmt: skip
D = "operator/gpu_auditor/diagnosis/"
C = "operator/gpu_auditor/controller/"
T = "tests/unit/"


@dataclass(frozen=True)
class Mutant:
    name: str
    issue: str
    """The survivor as the issue words it."""
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


# fmt: off
MUTANTS = [
    # -- classify ------------------------------------------------------------------------------
    Mutant("classify-room-lt", "classify: `room < r` -> `<=`", D + "classify.py",
           "return room < r <= self.slack + room", "return room <= r <= self.slack + room",
           (T + "diagnosis/test_classify.py",)),
    Mutant("classify-frag-min-20mib", "the 20 MiB minimum of reserved-but-unallocated set to 0",
           D + "thresholds.py", "FRAG_MIN_UNALLOCATED_BYTES: Final = 20 * MIB",
           "FRAG_MIN_UNALLOCATED_BYTES: Final = 0", (T + "diagnosis/test_classify.py",)),
    Mutant("classify-shared-min-1gib", "the 1 GiB floor for other processes set to 1 byte",
           D + "thresholds.py", "GPU_SHARED_MIN_BYTES: Final = 1 * GIB",
           "GPU_SHARED_MIN_BYTES: Final = 1", (T + "diagnosis/test_classify.py",)),
    Mutant("classify-shared-cap", "`shared()` no longer excluding a binding cap",
           D + "classify.py", "return 0 < shortfall <= o and not self.cap_binding()",
           "return 0 < shortfall <= o", (T + "diagnosis/test_classify.py",)),
    Mutant("classify-near-full", "the near-full share 0.05 -> 0.5", D + "thresholds.py",
           "NEAR_FULL_FREE_SHARE: Final = 0.05", "NEAR_FULL_FREE_SHARE: Final = 0.5",
           (T + "diagnosis/test_classify.py",)),
    Mutant("classify-non-pytorch-shortfall", "`non_pytorch()` without `excess >= shortfall`",
           D + "classify.py", "and excess >= shortfall\n", "\n",
           (T + "diagnosis/test_classify.py",)),
    Mutant("classify-cap-only-unallocated", "`cap_only()` ignoring reserved-unallocated",
           D + "classify.py", "return f.free_bytes + self.unallocated >= f.requested_bytes",
           "return f.free_bytes >= f.requested_bytes",
           (T + "diagnosis/test_classify.py",)),
    Mutant("classify-cap-at-total", "a cap >= the GPU's total no longer ignored",
           D + "classify.py",  # the first of two such lines: cap_binding's (cap_short has one too)
           "if f.total_bytes is not None and f.allowed_bytes >= f.total_bytes:\n"
           "            return False\n        return (f.allocated_bytes or 0)",
           "if False:\n            return False\n        return (f.allocated_bytes or 0)",
           (T + "diagnosis/test_classify.py",)),
    Mutant("classify-frag-need-share", "the fragmentation share (its one test built its input "
           "from the production constant)", D + "thresholds.py",
           "FRAG_MAX_NEED_SHARE: Final = 0.40", "FRAG_MAX_NEED_SHARE: Final = 0.45",
           (T + "diagnosis/test_classify.py",)),
    # -- leak ----------------------------------------------------------------------------------
    Mutant("leak-r2", "leak: R^2 0.8 -> 0", D + "leak.py", "LEAK_MIN_R2: Final = 0.8",
           "LEAK_MIN_R2: Final = 0", (T + "diagnosis/test_leak.py",)),
    Mutant("leak-rises", "leak: rising share 0.7 -> 0 (today: at least 3 rises)", D + "leak.py",
           "LEAK_MIN_RISES: Final = 3", "LEAK_MIN_RISES: Final = 0",
           (T + "diagnosis/test_leak.py",)),
    Mutant("leak-falling", "leak: rising share (today: at most a quarter of steps falling)",
           D + "leak.py", "LEAK_MAX_FALLING_SHARE: Final = 0.25",
           "LEAK_MAX_FALLING_SHARE: Final = 1.0", (T + "diagnosis/test_leak.py",)),
    Mutant("leak-min-points", "leak: minimum points 5 -> 2", D + "leak.py",
           "LEAK_MIN_POINTS: Final = 5", "LEAK_MIN_POINTS: Final = 2",
           (T + "diagnosis/test_leak.py",)),
    # -- allocconf, recommend --------------------------------------------------------------------
    Mutant("allocconf-fraction-upper", "allocconf: the upper bound of "
           "`per_process_memory_fraction`", D + "allocconf.py", "not 0.0 <= value <= 1.0",
           "not 0.0 <= value", (T + "diagnosis/test_allocconf.py",)),
    Mutant("allocconf-gc-1", "allocconf: gc threshold accepting 1.0", D + "allocconf.py",
           "not 0.0 < value < 1.0", "not 0.0 < value <= 1.0",
           (T + "diagnosis/test_allocconf.py",)),
    Mutant("allocconf-threads-cap", "allocconf: the register-threads cap", D + "allocconf.py",
           "if value > 128:", "if value > 256:", (T + "diagnosis/test_allocconf.py",)),
    Mutant("allocconf-split-20-on-2-10", "allocconf: `max_split_size_mb:20` rejected on 2.10+",
           D + "allocconf.py", "elif value < 20:", "elif value <= 20:",
           (T + "diagnosis/test_allocconf.py",)),
    Mutant("recommend-split-window", "recommend: the 'already set' window for max_split losing "
           "its upper bound", D + "recommend.py", "if mb is not None and 20 < mb <= MAX_SPLIT_SIZE_MB:",  # noqa: E501
           "if mb is not None and 20 < mb:", (T + "diagnosis/test_recommend.py",)),
    # -- agent -----------------------------------------------------------------------------------
    Mutant("sharing-mps", "sharing: MPS not treated as intended sharing", "node_agent/sharing.py",
           "if kind in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS):",
           "if kind in (SharingStrategy.TIME_SLICING,):",
           (T + "node_agent/test_sharing.py",)),
    Mutant("sharing-mps-allows", "sharing: MPS not treated as intended sharing (the strategy's "
           "property)", "node_agent/model.py",
           "return self.kind in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)",
           "return self.kind in (SharingStrategy.TIME_SLICING,)",
           (T + "node_agent/test_sharing.py",)),
    Mutant("sharing-replicas-clamp", "sharing: replicas not clamped", "node_agent/sharing.py",
           'return min(MAX_REPLICAS, max(1, int(digits or "0")))',
           'return max(1, int(digits or "0"))',
           (T + "node_agent/test_sharing.py",)),
    Mutant("cgroup-pod-boundary", "cgroup: `pod<uid>` without a segment boundary",
           "node_agent/cgroup.py", '_POD = re.compile(rf"(?:^|[/-])pod({_UID})',
           '_POD = re.compile(rf"pod({_UID})',
           (T + "node_agent/test_cgroup.py",)),
    # -- operator --------------------------------------------------------------------------------
    Mutant("annotations-keys-kept", "annotations: no bound on kept keys",
           C + "annotations.py", "while size + _floor_size(floor) > limit:",
           "while False:", (T + "controller/test_annotations.py",)),
    Mutant("annotations-cut", "annotations: `_cut` never truncating (today `value()`, through "
           "`bounded.clip`)", C + "annotations.py",
           "return bounded.clip(text, LIMITS[name])", "return text",
           (T + "controller/test_annotations.py",)),
    Mutant("annotations-stale-recommendation", "annotations: a stale `recommended-alloc-conf` "
           "not cleared", C + "annotations.py",
           "CLEARED = (Annotation.RECOMMENDED_ALLOC_CONF, Annotation.DIAGNOSIS_FAILED)",
           "CLEARED = (Annotation.DIAGNOSIS_FAILED,)",
           (T + "controller/test_annotations.py",)),
    Mutant("annotations-event-key", "annotations: an Event name that ignores the termination "
           "key", C + "annotations.py",
           "event_name=event_name(pod.name, pod.uid, termination.key, reason),",
           "event_name=event_name(pod.name, pod.uid, reason),",
           (T + "controller/test_annotations.py",)),
    Mutant("service-pending-key", "service: `pending()` ignoring `diagnosed-key`",
           C + "oom.py", "if not pod.diagnosed_keys.done(t) and not written.done(t)",
           "if not written.done(t)",
           (T + "controller/test_oom.py",)),
    Mutant("sharing-path-ignore", "the sharing path ignoring the `ignore` label",
           C + "sharing.py", "        if pod.ignored:\n            return\n", "",
           (T + "controller/test_sharing.py",)),
    Mutant("pod-ignore-label", "the pod view reading the ignore label loosely",
           C + "pod.py", '.get(IGNORE_LABEL) == "true"', '.get(IGNORE_LABEL) in ("true", "True")',
           (T + "controller/test_pod.py",)),
]
# fmt: on


def stage() -> None:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for rel in COPIED:
        if (REPO / rel).exists():
            shutil.copytree(REPO / rel, STAGE / rel, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", STAGE / "pyproject.toml")
    shared = (REPO.parent / "shared").resolve()
    if shared.is_dir():  # tests find the shared corpus at <root>/../shared
        (STAGE.parent / "shared").unlink(missing_ok=True)
        (STAGE.parent / "shared").symlink_to(shared)


def pytest(tests: tuple[str, ...]) -> tuple[int, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "unit",
         *tests],
        cwd=STAGE, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    failed = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return proc.returncode, (failed[0] if failed else proc.stdout.strip().splitlines()[-1])


def run(m: Mutant) -> dict[str, object]:
    path = STAGE / m.path
    original = path.read_text()
    if original.count(m.old) != 1:
        return {"name": m.name, "status": "stale", "detail": f"{m.old!r} found "
                f"{original.count(m.old)} times in {m.path}"}  # fmt: skip
    path.write_text(original.replace(m.old, m.new))
    try:
        start = time.monotonic()
        code, detail = pytest(m.tests)
    finally:
        path.write_text(original)
    status = {0: "survived", 1: "killed"}.get(code, f"error (pytest exit {code})")
    return {"name": m.name, "issue": m.issue, "path": m.path, "old": m.old.strip(),
            "new": m.new.strip(), "tests": list(m.tests), "status": status, "detail": detail,
            "seconds": round(time.monotonic() - start, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--out", default="bench/results/mutation-issue18")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    stage()
    code, detail = pytest(tuple(sorted({t for m in chosen for t in m.tests})))
    if code != 0:  # the unmutated tree must pass, or no kill means anything
        print(f"the unmutated tree fails its tests ({detail}): nothing run")
        return 2
    rows = []
    for m in chosen:
        row = run(m)
        rows.append(row)
        print(f"{row['status']:>10}  {m.name}: {row['detail']}", flush=True)
    killed = sum(r["status"] == "killed" for r in rows)
    result = {
        "command": " ".join(["scripts/mutation_issue18.py", *(argv or sys.argv[1:])]),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "killed": killed,
        "mutants": len(rows),
        "rows": rows,
    }
    out = REPO / args.out
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Issue 18's survivors, re-made in today's code",
        "",
        f"`.venv/bin/python {result['command']}` - commit {result['commit']}, {result['date']}: "
        f"**{killed} of {len(rows)} killed**. Each is one replacement in a copy of the tree; "
        "killed = pytest exit 1 on the tests named (the unmutated copy passes them first).",
        "",
        "| mutant | the issue's survivor | file | status | first failure |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        detail = str(r["detail"]).replace("|", "\\|")
        lines.append(f"| {r['name']} | {r.get('issue', '')} | `{r.get('path', '')}` | "
                     f"{r['status']} | {detail} |")  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"{killed}/{len(rows)} killed; {out.with_suffix('.md').relative_to(REPO)}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
