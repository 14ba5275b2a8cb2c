#!/usr/bin/env python3
"""Mutation testing of the diagnosis core with mutmut 3; the score per module, the survivors.

    .venv/bin/python scripts/mutation.py                     # every module (make mutation)
    .venv/bin/python scripts/mutation.py --modules classify,leak
    .venv/bin/python scripts/mutation.py --changed-vs main   # CI: the modules a change touched

mutmut 3 mutates code found under ./, src/ or source/ and imports it under the path-derived
module name; ``operator/`` is a source folder, never a package (``import operator`` must stay
Python's own module), so the run happens in a staged copy of the tree, ``.mutation/``, where
``operator/gpu_auditor`` is ``src/gpu_auditor`` and pytest's ``pythonpath`` says so. Nothing in
the work tree is mutated. The config is ``[tool.mutmut]`` in ``pyproject.toml`` (staged paths).

What mutmut 3 does not mutate, by design: module-level code (the thresholds in
``thresholds.py``, the ``Final`` constants beside the rules) and decorated functions
(``@property``). Those are covered by the boundary tables (tests/unit/diagnosis/
test_boundaries_*.py), which pin every threshold from both sides with literal numbers.

A survivor is either killed by a test or listed with the reason it is equivalent in
``bench/results/mutation-equivalents.toml`` (keyed by mutant name and the mutated line, so a
justification goes stale, and is reported as such, when the code under it changes).
Results: ``<out>.md`` and ``<out>.json`` (default ``bench/results/mutation``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAGE = REPO / ".mutation" / "tree"
RULES = ("allocconf", "classify", "leak", "phase", "proberecord", "recommend")
"""The modules whose rules decide a verdict or a recommendation: ``--fail-under`` gates these
(the others are reported; their code is being hardened for hostile input elsewhere)."""
CORE = Path("operator/gpu_auditor/diagnosis")
EQUIVALENTS = REPO / "bench" / "results" / "mutation-equivalents.toml"
COPIED = ("node_agent", "probe", "tests", "bench/gpu/logs", "examples")
KILLED = {"killed", "timeout", "caught by type check"}
UNCHECKED = {"not checked", "check was interrupted by user"}


def modules_all() -> list[str]:
    return sorted(p.stem for p in (REPO / CORE).glob("*.py") if p.stem != "__init__")


def modules_changed(ref: str) -> list[str] | None:
    """Core modules whose source differs from the merge base with ``ref`` (committed or not);
    None when ``ref`` cannot be resolved (a shallow clone has no parent commit)."""
    found = subprocess.run(
        ["git", "merge-base", ref, "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    if found.returncode != 0:
        return None
    base = found.stdout.strip()
    names = subprocess.run(
        ["git", "diff", "--name-only", base, "--", str(CORE)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wanted = set(modules_all())
    return sorted({Path(n).stem for n in names} & wanted)


def stage(modules: list[str]) -> None:
    """A copy of the tree with operator/gpu_auditor as src/gpu_auditor (see the module doc)."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    shutil.copytree(REPO / "operator" / "gpu_auditor", STAGE / "src" / "gpu_auditor", ignore=ignore)
    for rel in COPIED:
        if (REPO / rel).exists():
            shutil.copytree(REPO / rel, STAGE / rel, ignore=ignore)
    text = (REPO / "pyproject.toml").read_text()
    staged = text.replace('pythonpath = ["operator", "."]', 'pythonpath = ["src", "."]')
    if staged == text:
        raise SystemExit('pyproject.toml: pytest\'s pythonpath is no longer ["operator", "."]')
    only = ", ".join(f'"src/gpu_auditor/diagnosis/{m}.py"' for m in modules)
    staged = staged.replace("[tool.mutmut]\n", f"[tool.mutmut]\nonly_mutate = [{only}]\n", 1)
    (STAGE / "pyproject.toml").write_text(staged)
    # the tests find the shared corpus at <root>/../shared; under .mutation/mutants/ that is
    # .mutation/shared
    shared = (REPO.parent / "shared").resolve()
    if shared.is_dir():
        (STAGE / "shared").symlink_to(shared)


def mutmut_bin() -> str:
    found = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")
    if found is None:
        raise SystemExit("mutmut is not installed: pip install -e '.[mutation]'")
    return found


def run_mutmut(max_children: int, max_seconds: float | None) -> tuple[int, float, bool]:
    """mutmut's exit code, the seconds it ran, and whether the time box stopped it."""
    start = time.monotonic()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    with (STAGE / "mutmut-run.log").open("w") as log:
        proc = subprocess.Popen(
            [mutmut_bin(), "run", "--max-children", str(max_children)],
            cwd=STAGE,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the time box stops its workers too
        )
        try:
            code = proc.wait(timeout=max_seconds)
            boxed = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code, boxed = 0, True
    return code, time.monotonic() - start, boxed


def results() -> dict[str, str]:
    """mutant name -> status, from mutmut's per-file records."""
    from mutmut.stats import status_by_exit_code  # the tool's own reading of exit codes

    out: dict[str, str] = {}
    for meta in sorted((STAGE / "mutants" / "src" / "gpu_auditor" / "diagnosis").glob("*.meta")):
        data = json.loads(meta.read_text())
        for name, code in data["exit_code_by_key"].items():
            out[name] = status_by_exit_code[code]
    return out


_DIFFS = """
import json, sys
from pathlib import Path
from mutmut.mutation.diff_apply import get_diff_for_mutant
out = {}
for name in json.loads(sys.stdin.read()):
    path = Path("src/gpu_auditor/diagnosis") / (name.split(".")[2] + ".py")
    out[name] = get_diff_for_mutant(name, path=path)
print(json.dumps(out))
"""


def diffs(names: list[str]) -> dict[str, str]:
    """Each mutant's diff, as ``mutmut show`` prints it (one process for all)."""
    if not names:
        return {}
    python = Path(mutmut_bin()).parent / "python"
    proc = subprocess.run(
        [str(python if python.exists() else sys.executable), "-c", _DIFFS],
        cwd=STAGE,
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, str] = json.loads(proc.stdout)
    return found


def changed_line(diff: str) -> str:
    plus = [
        ln[1:].strip()
        for ln in diff.splitlines()
        if ln.startswith("+") and not ln.startswith("+++")
    ]
    return plus[0] if plus else ""


def module_of(name: str) -> str:
    # gpu_auditor.diagnosis.<module>.x_<function>__mutmut_<n> (methods: x\u01c1Class\u01c1method)
    return name.split(".")[2]


def load_equivalents() -> dict[str, dict[str, str]]:
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text())
    return {e["mutant"]: e for e in data.get("equivalent", [])}


def report(
    modules: list[str],
    statuses: dict[str, str],
    seconds: float,
    command: str,
    out: Path,
    boxed: bool = False,
) -> dict[str, Any]:
    equivalents = load_equivalents()
    per: dict[str, Counter[str]] = {m: Counter() for m in modules}
    survivors: list[dict[str, str]] = []
    shown = diffs(
        [
            n
            for n, st in statuses.items()
            if st not in KILLED and st not in UNCHECKED and module_of(n) in per
        ]
    )
    for name, status in sorted(statuses.items()):
        module = module_of(name)
        if module not in per:
            continue
        per[module][status] += 1
        if status in KILLED or status in UNCHECKED:
            continue
        diff = shown.get(name, "")
        line = changed_line(diff)
        eq = equivalents.get(name)
        verdict = "unjustified"
        why = ""
        if eq is not None:
            if eq.get("line", "").strip() == line:
                verdict, why = "equivalent", eq["why"]
                per[module]["equivalent"] += 1
            else:
                verdict, why = "stale justification", eq["why"]
        survivors.append(
            {
                "mutant": name,
                "status": status,
                "line": line,
                "verdict": verdict,
                "why": why,
                "diff": diff,
            }
        )
    rows = []
    for module in modules:
        c = per[module]
        total = sum(v for k, v in c.items() if k != "equivalent" and k not in UNCHECKED)
        unchecked = sum(c[k] for k in UNCHECKED)
        killed = sum(c[k] for k in KILLED)
        eq = c["equivalent"]
        raw = killed / total if total else None
        adjusted = killed / (total - eq) if total - eq > 0 else None
        rows.append(
            {
                "module": module,
                "mutants": total,
                "killed": killed,
                "survived": c["survived"],
                "no_tests": c["no tests"],
                "timeout": c["timeout"],
                "suspicious": c["suspicious"],
                "equivalent": eq,
                "not_checked": unchecked,
                "score": raw,
                "score_without_equivalents": adjusted,
            }
        )
    result = {
        "tool": f"mutmut {_version('mutmut')}",
        "command": command,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--", str(CORE), "tests")),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(seconds, 1),
        "time_boxed": boxed,
        "cpus": os.cpu_count(),
        "modules": rows,
        "survivors": survivors,
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Mutation score of the diagnosis core",
        "",
        f"`{r['command']}` - {r['tool']}, commit {r['commit']}"
        + (" (with uncommitted changes)" if r["dirty"] else "")
        + f", {r['date']}, {r['seconds']} s on {r['cpus']} CPUs (shared, loaded)"
        + (": stopped by the time box, unchecked mutants left out" if r["time_boxed"] else "")
        + ".",
        "",
        "Score = killed / mutants; a survivor either gets a test that kills it or is listed as",
        "equivalent (no input can tell it from the original) in",
        "`bench/results/mutation-equivalents.toml`, with the reason; the second score leaves",
        "those out. mutmut 3 does not mutate module-level constants or `@property` bodies: the",
        "boundary tables (`tests/unit/diagnosis/test_boundaries_*.py`) pin those thresholds.",
        "",
        "| module | mutants | killed | survived | no tests | timeout | equivalent | score "
        "| score without equivalents |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in r["modules"]:
        lines.append(
            f"| {m['module']} | {m['mutants']} | {m['killed']} | {m['survived']} | "
            f"{m['no_tests']} | {m['timeout']} | {m['equivalent']} | {_pct(m['score'])} | "
            f"{_pct(m['score_without_equivalents'])} |"
        )
    groups: dict[str, list[dict[str, str]]] = {}
    for s in r["survivors"]:
        groups.setdefault(s["verdict"], []).append(s)
    for verdict in ("unjustified", "stale justification", "equivalent"):
        items = groups.get(verdict, [])
        if not items:
            continue
        lines += ["", f"## Survivors: {verdict} ({len(items)})", ""]
        for s in items:
            why = f" - {s['why']}" if s["why"] else ""
            lines.append(f"- `{s['mutant']}` ({s['status']}): `{s['line']}`{why}")
    return "\n".join(lines) + "\n"


def _version(pkg: str) -> str:
    from importlib.metadata import version

    try:
        return version(pkg)
    except Exception:
        return "?"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--modules", help="comma-separated core modules (default: all)")
    ap.add_argument("--changed-vs", metavar="REF", help="only the modules changed since REF")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", default="bench/results/mutation", help="results path, no suffix")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="re-read the last run in .mutation/ (after editing the equivalents)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="stop mutmut after this long; unchecked mutants are left out of the scores",
    )
    ap.add_argument(
        "--fail-under",
        type=float,
        default=None,
        help="exit 1 when a rule module's score without equivalents is below this (0-100)",
    )
    args = ap.parse_args(argv)
    if args.changed_vs:
        changed = modules_changed(args.changed_vs)
        if changed is None:
            print(f"mutation: cannot resolve {args.changed_vs} (a shallow clone?): not run")
            return 0
        modules = changed
        if not modules:
            print(f"mutation: no diagnosis module changed since {args.changed_vs}: nothing to run")
            return 0
    elif args.modules:
        modules = [m.strip() for m in args.modules.split(",") if m.strip()]
        unknown = set(modules) - set(modules_all())
        if unknown:
            raise SystemExit(f"unknown modules: {sorted(unknown)}")
    else:
        modules = modules_all()
    command = " ".join(["scripts/mutation.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"mutation: {', '.join(modules)} (staged in {STAGE.relative_to(REPO)}/)", flush=True)
    if args.report_only:
        last = json.loads((STAGE / "run.json").read_text())
        code, seconds, command, boxed = 0, last["seconds"], last["command"], last["boxed"]
    else:
        stage(modules)
        code, seconds, boxed = run_mutmut(args.max_children, args.max_seconds)
        run = {"seconds": seconds, "exit": code, "command": command, "boxed": boxed}
        (STAGE / "run.json").write_text(json.dumps(run))
    statuses = results()
    if code != 0 or not statuses:
        tail = (STAGE / "mutmut-run.log").read_text()[-4000:]
        print(re.sub(r"[\u2800-\u28ff]\s*\w[^\n]*?(?=[\u2800-\u28ff]|\n)", "", tail))
        raise SystemExit(f"mutmut run failed (exit {code}); see {STAGE}/mutmut-run.log")
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    result = report(modules, statuses, seconds, command.strip(), out, boxed)
    print(out.with_suffix(".md").read_text())
    if args.fail_under is not None:
        low = [
            m["module"]
            for m in result["modules"]
            if m["module"] in RULES
            and m["score_without_equivalents"] is not None
            and 100 * m["score_without_equivalents"] < args.fail_under
        ]
        if low:
            print(f"mutation: below {args.fail_under} %: {', '.join(low)}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
