#!/usr/bin/env python3
"""Mutation testing with mutmut 3: the rules that decide a verdict or a write; score per module.

    .venv/bin/python scripts/mutation.py --modules classify --max-children 1
    .venv/bin/python scripts/mutation.py --modules node_agent.sharing,controller.annotations
    .venv/bin/python scripts/mutation.py                     # every module (make mutation)
    .venv/bin/python scripts/mutation.py --changed-vs main   # CI: the modules a change touched

Modules: the diagnosis core by its bare name (``classify``, ``leak``, ...), the agent's
``node_agent.sharing``/``cgroup``/``collector`` and the operator's ``controller.annotations``/
``pod`` (the pod view)/``service``/``sharing``. Each module is its own mutmut run, against its
own unit tests (``GROUPS``); the results file keeps the rows of modules not run this time (each
row says its own commit, date and seconds), so a module's figures are replaced only by a newer
run of it.

mutmut 3 mutates code found under ./, src/ or source/ and imports it under the path-derived
module name; ``operator/`` is a source folder, never a package (``import operator`` must stay
Python's own module), so the run happens in a staged copy of the tree, ``.mutation/``, where
``operator/gpu_auditor`` is ``src/gpu_auditor`` and pytest's ``pythonpath`` says so. Nothing in
the work tree is mutated. The config is ``[tool.mutmut]`` in ``pyproject.toml`` (staged paths);
this script sets ``source_paths``, ``only_mutate`` and the test selection per group.

What mutmut 3 does not mutate, by design: module-level code (the thresholds in
``thresholds.py``, the ``Final`` constants beside the rules) and decorated functions
(``@property``). Those are covered by the boundary tables in each module's tests
(tests/unit/<package>/test_<module>.py), which pin every threshold from both sides with literal
numbers.

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
RULES = (
    "aftermath", "allocconf", "classify", "core", "formats", "killed", "leak", "model", "parse",
    "phase", "proberecord", "recommend", "sizes", "torchversion", "wrapped", "addressspace",
    "impossible",
    "node_agent.sharing", "node_agent.cgroup", "node_agent.collector",
    "controller.annotations", "controller.pod", "controller.service", "controller.sharing",
)  # fmt: skip
"""The modules whose rules decide a verdict, a recommendation or a write, and the core's entry
points, parsing and JSON contract: ``--fail-under`` gates these (the others are reported)."""
CORE = Path("operator/gpu_auditor/diagnosis")
_CORPORA = [  # the real logs: every rule of the core meets them
    "diagnosis/test_oom_corpus.py",
    "diagnosis/test_oom_fixtures.py",
    "diagnosis/test_h200_proof_logs.py",
    "diagnosis/test_heldout_logs.py",
    "diagnosis/test_public_logs.py",  # the public threads' logs pin the stacks' own actions
]
_OPERATOR = [  # the operator's paths through Services, with the in-memory API
    "controller/test_service.py",
    "controller/test_oom.py",
    "controller/test_sharing.py",
    "controller/test_owners.py",
]
GROUPS: dict[str, dict[str, Any]] = {
    # group -> where its modules are in the tree, where mutmut sees them staged, and per module
    # the unit tests (under tests/unit/, tests/unit/<package>/test_<module>.py first) run
    # against its mutants (a pytest node id selects one test; "-<test id>": a test left out of
    # the selection, for a bound on a huge input that would time every mutant); a module not
    # named runs against [tool.mutmut] pytest_add_cli_args_test_selection in pyproject.toml
    # (all of the core's tests)
    "diagnosis": {
        "tree": CORE,
        "staged": "src/gpu_auditor/diagnosis",
        "tests": {
            "classify": ["diagnosis/test_classify.py", *_CORPORA],
            "leak": ["diagnosis/test_leak.py", *_CORPORA],
            "allocconf": [
                "diagnosis/test_allocconf.py",
                "diagnosis/test_recommend.py",  # the settings it recommends, checked
                "diagnosis/test_allocconf_real_torch.py",
                "admission/test_findings.py",  # the issue kinds the admission checks read
                "gpu_auditor/test_checkmanifest.py",
            ],
            "recommend": ["diagnosis/test_recommend.py", *_CORPORA],
            "phase": ["diagnosis/test_phase.py", *_CORPORA],
            "killed": ["diagnosis/test_killed.py"],
            "wrapped": ["diagnosis/test_wrapped.py"],
            "addressspace": ["diagnosis/test_addressspace.py"],
            "allocationlimit": ["diagnosis/test_allocationlimit.py"],
            "xlacompile": ["diagnosis/test_xlacompile.py"],
            "impossible": ["diagnosis/test_impossible.py"],
            "sizes": [
                "diagnosis/test_sizes.py",
                "diagnosis/test_torchversion.py",  # a banner's huge release number
                "diagnosis/test_leak.py",  # a series of huge figures
                "diagnosis/test_hostile_regex.py",
            ],
            "torchversion": [
                "diagnosis/test_torchversion.py",
                "diagnosis/test_sizes.py",
                "diagnosis/test_hostile_regex.py",
                "diagnosis/test_allocconf.py",
                "diagnosis/test_recommend.py",
            ],
            "logtext": [
                # the scanner's own tests and the real family fixtures: the scanner's loops make
                # many mutants hang, and each hang costs 4x its tests' CPU time, so the selection
                # is kept to these (~6 s) rather than every corpus (~20 s)
                "diagnosis/test_logtext.py",
                "diagnosis/test_oom_fixtures.py",
                "diagnosis/test_aftermath.py",  # the tail after the failure
                # memory bounds on 200 MB / 10 s inputs, not rules: they would time every mutant
                "-diagnosis/test_logtext.py::test_memory_stays_bounded_on_a_large_stream",
                "-diagnosis/test_logtext.py::"
                "test_a_long_line_of_failure_keywords_stays_bounded_and_the_real_one_is_found",
            ],
            "aftermath": [
                "diagnosis/test_aftermath.py",
                # the properties over diagnose() (not the hostile-input ones beside them)
                *(f"diagnosis/test_properties.py::{t}" for t in (
                    "test_arbitrary_bytes_never_raise",
                    "test_oom_shaped_garbage_never_raises",
                    "test_an_oom_between_any_text_is_found",
                    "test_validator_never_raises",
                    "test_a_large_log_with_one_oom_at_the_end_is_diagnosed",
                )),
                *_CORPORA,
            ],
            "proberecord": [
                "diagnosis/test_proberecord.py",
                "probe/test_write.py",  # what the probe writes, the reader reads
                "commands/test_diagnose.py",  # --probe-record through the CLI
                "diagnosis/test_classify.py",
            ],
        },
    },
    "node_agent": {
        "tree": Path("node_agent"),
        "staged": "node_agent",
        "modules": ("sharing", "cgroup", "collector"),
        "tests": {
            "sharing": ["node_agent/test_sharing.py", "node_agent/test_series.py"],
            "cgroup": [
                "node_agent/test_cgroup.py",
                "node_agent/test_procfs.py",
                "node_agent/test_cli.py",  # hostile --proc-root content, through the agent
            ],
            "collector": [
                "node_agent/test_collector.py",
                "node_agent/test_exposition.py",
                "node_agent/test_series.py",
            ],
        },
    },
    "controller": {
        "tree": Path("operator/gpu_auditor/controller"),
        "staged": "src/gpu_auditor/controller",
        "modules": ("annotations", "outcome", "pod", "service", "sharing"),
        "tests": {
            "annotations": ["controller/test_annotations.py"],
            # a recommendation's trial judged (issue 28): its own table, then the operator's
            # shell that writes what it decides
            "outcome": ["controller/test_outcome.py", "controller/test_trials.py"],
            "pod": [
                "controller/test_pod.py",
                "controller/test_annotations.py",
                *_OPERATOR,
            ],
            "service": _OPERATOR,
            "sharing": _OPERATOR,
        },
    },
}
EQUIVALENTS = REPO / "bench" / "results" / "mutation-equivalents.toml"
# the unit tests read real logs and measured rows from all of evaluation/ (the public sets, the
# cards' rows and logs, the GPU runs): 9 MB, copied whole
COPIED = ("node_agent", "probe", "tests", "evaluation", "examples", "charts", "docs")
KILLED = {"killed", "timeout", "caught by type check"}
UNCHECKED = {"not checked", "check was interrupted by user"}


def group_of(module: str) -> str:
    """``classify`` -> diagnosis, ``node_agent.sharing`` -> node_agent."""
    return module.split(".")[0] if "." in module else "diagnosis"


def stem_of(module: str) -> str:
    return module.rpartition(".")[2]


def source_of(module: str) -> Path:
    return GROUPS[group_of(module)]["tree"] / f"{stem_of(module)}.py"


def staged_of(module: str) -> str:
    return f"{GROUPS[group_of(module)]['staged']}/{stem_of(module)}.py"


def modules_all() -> list[str]:
    core = sorted(p.stem for p in (REPO / CORE).glob("*.py") if p.stem != "__init__")
    others = [f"{g}.{m}" for g, spec in GROUPS.items() for m in spec.get("modules", ())]
    return core + others


def modules_changed(ref: str) -> list[str] | None:
    """Core modules whose source differs from the merge base with ``ref`` (committed or not);
    None when ``ref`` cannot be resolved (a shallow clone has no parent commit)."""
    found = subprocess.run(
        ["git", "merge-base", ref, "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    if found.returncode != 0:
        return None
    base = found.stdout.strip()
    names = set(
        subprocess.run(
            ["git", "diff", "--name-only", base, "--", *(str(g["tree"]) for g in GROUPS.values())],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
    return [m for m in modules_all() if str(source_of(m)) in names]


def stage(modules: list[str]) -> None:
    """A copy of the tree with operator/gpu_auditor as src/gpu_auditor (see the module doc);
    ``modules`` are of one group."""
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
    spec = GROUPS[group_of(modules[0])]
    only = ", ".join(f'"{staged_of(m)}"' for m in modules)
    head = f"[tool.mutmut]\nonly_mutate = [{only}]\n"
    staged = re.sub(r"(?m)^source_paths = .*$", f'source_paths = ["{spec["staged"]}/"]', staged)
    named = [t for m in modules for t in spec["tests"].get(stem_of(m), [])]
    # "-<test id>": a test left out of the selection (see GROUPS)
    tests = sorted({f"tests/unit/{t}" for t in named if not t.startswith("-")})
    tests += sorted({f"--deselect=tests/unit/{t[1:]}" for t in named if t.startswith("-")})
    if tests:
        staged = re.sub(
            r"(?ms)^pytest_add_cli_args_test_selection = \[.*?^\]$",
            "pytest_add_cli_args_test_selection = " + json.dumps(tests),
            staged,
        )
    staged = staged.replace("[tool.mutmut]\n", head, 1)
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


# mutmut makes its mutants in a fork Pool (2 s here for one module); a Pool whose worker dies
# (the OOM killer, a fork taken while its spinner thread held stdout's lock) waits forever
# (boxed/mutmut#412 is the same stall), and CI's run on 6c7f46c spent its whole time box at
# "Generating mutants", not one mutant scored. A run that has not finished
# making its mutants by then is stopped and started again from a fresh stage.
GENERATION_SECONDS = 120.0
GENERATION_TRIES = 3


def generation_stalled(log: str, seconds: float, limit: float) -> bool:
    """Whether mutmut is still making its mutants ``seconds`` after it started, past ``limit``:
    it prints "done in" when they are made."""
    return seconds > limit and "done in" not in log


def run_mutmut(max_children: int, max_seconds: float | None) -> tuple[int, float, bool, bool]:
    """mutmut's exit code, the seconds it ran, whether the time box stopped it, and whether it
    stalled making its mutants; a run stopped for either has exit code 0."""
    start = time.monotonic()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    log_path = STAGE / "mutmut-run.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [mutmut_bin(), "run", "--max-children", str(max_children)],
            cwd=STAGE,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the time box stops its workers too
        )
        boxed = stalled = False
        while (code := proc.poll()) is None:
            seconds = time.monotonic() - start
            if max_seconds is not None and seconds >= max_seconds:
                boxed = True
            elif generation_stalled(log_path.read_text(errors="replace"), seconds, GENERATION_SECONDS):
                stalled = True
            else:
                time.sleep(1.0)
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = 0
            break
    return code, time.monotonic() - start, boxed, stalled


def results(modules: list[str]) -> dict[str, str]:
    """mutant name -> status, from mutmut's per-file records."""
    from mutmut.stats import status_by_exit_code  # the tool's own reading of exit codes

    out: dict[str, str] = {}
    for module in modules:
        meta = STAGE / "mutants" / f"{staged_of(module)}.meta"
        if not meta.exists():
            continue
        data = json.loads(meta.read_text())
        for name, code in data["exit_code_by_key"].items():
            out[name] = status_by_exit_code[code]
    return out


_DIFFS = """
import json, sys
from pathlib import Path
from mutmut.mutation.diff_apply import get_diff_for_mutant
out = {}
for name, path in json.loads(sys.stdin.read()).items():
    out[name] = get_diff_for_mutant(name, path=Path(path))
print(json.dumps(out))
"""


def diffs(names: list[str]) -> dict[str, str]:
    """Each mutant's diff, as ``mutmut show`` prints it (one process for all)."""
    if not names:
        return {}
    paths = {n: staged_of(module_of(n)) for n in names}
    python = Path(mutmut_bin()).parent / "python"
    proc = subprocess.run(
        [str(python if python.exists() else sys.executable), "-c", _DIFFS],
        cwd=STAGE,
        input=json.dumps(paths),
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
    """The module key of a mutant: ``gpu_auditor.diagnosis.<m>.x_<function>__mutmut_<n>`` ->
    ``<m>``; ``node_agent.<m>.…`` -> ``node_agent.<m>``; ``gpu_auditor.controller.<m>.…`` ->
    ``controller.<m>`` (methods: ``x\u01c1Class\u01c1method``)."""
    parts = name.split(".")
    if parts[0] == "node_agent":
        return f"node_agent.{parts[1]}"
    if parts[1] == "controller":
        return f"controller.{parts[2]}"
    return parts[2]


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
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(
        _git("status", "--porcelain", "--", *(str(source_of(m)) for m in modules), "tests")
    )
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
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
                "commit": commit + ("+" if dirty else ""),
                "date": date,
                "seconds": round(seconds, 1),
                "command": command,
                "time_boxed": boxed,
            }
        )
    result = merged(out, modules, rows, survivors)
    result.update(tool=f"mutmut {_version('mutmut')}", cpus=os.cpu_count())
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return {"modules": rows, "survivors": survivors}


def merged(
    out: Path, modules: list[str], rows: list[dict[str, Any]], survivors: list[dict[str, str]]
) -> dict[str, Any]:
    """This run's rows and survivors beside the earlier runs' of the modules not run now."""
    old: dict[str, Any] = {"modules": [], "survivors": []}
    if out.with_suffix(".json").exists():
        old = json.loads(out.with_suffix(".json").read_text())
    kept = [r for r in old.get("modules", []) if r["module"] not in modules and "commit" in r]
    order = {m: i for i, m in enumerate(modules_all())}
    all_rows = sorted([*kept, *rows], key=lambda r: (order.get(r["module"], 999), r["module"]))
    all_survivors = [s for s in old.get("survivors", []) if module_of(s["mutant"]) not in modules]
    all_survivors = sorted([*all_survivors, *survivors], key=lambda s: s["mutant"])
    return {"modules": all_rows, "survivors": all_survivors}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Mutation score of the rules that decide a verdict or a write",
        "",
        f"{r['tool']}, one run per module (`scripts/mutation.py --modules <module>`); each row",
        "names the commit it ran on (`+`: with uncommitted changes), when, and how long it took",
        f"on {r['cpus']} CPUs shared with other engineers (loaded: not a benchmark).",
        "",
        "Score = killed / mutants; a survivor either gets a test that kills it or is listed as",
        "equivalent (no input can tell it from the original) in",
        "`bench/results/mutation-equivalents.toml`, with the reason; the second score leaves",
        "those out. mutmut 3 does not mutate module-level constants or `@property` bodies: the",
        "boundary tables in each module's tests (`tests/unit/<package>/test_<module>.py`) pin",
        "those thresholds, and the",
        "survivors issue 18 lists (many of them such constants) are re-made by hand and run in",
        "`scripts/mutation_issue18.py`: `bench/results/mutation-issue18.md`.",
        "",
        "| module | mutants | killed | survived | no tests | timeout | equivalent | score "
        "| score without equivalents | commit | date | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for m in r["modules"]:
        boxed = " (time-boxed)" if m.get("time_boxed") else ""
        lines.append(
            f"| {m['module']} | {m['mutants']} | {m['killed']} | {m['survived']} | "
            f"{m['no_tests']} | {m['timeout']} | {m['equivalent']} | {_pct(m['score'])} | "
            f"{_pct(m['score_without_equivalents'])} | {m['commit']} | {m['date']} | "
            f"{m['seconds']}{boxed} |"
        )
    commands = sorted({m["command"] for m in r["modules"]})
    lines += ["", "Commands:", "", *(f"    .venv/bin/python {c}" for c in commands)]
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
    ap.add_argument(
        "--modules", help="comma-separated modules, e.g. classify,node_agent.sharing (default: all)"
    )
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
        help="stop each module's mutmut run after this long; unchecked mutants are left out of "
        "the scores",
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
            print(f"mutation: no mutated module changed since {args.changed_vs}: nothing to run")
            return 0
    elif args.modules:
        modules = [m.strip() for m in args.modules.split(",") if m.strip()]
        unknown = set(modules) - set(modules_all())
        if unknown:
            raise SystemExit(f"unknown modules: {sorted(unknown)}")
    else:
        modules = modules_all()
    command = " ".join(["scripts/mutation.py", *(argv if argv is not None else sys.argv[1:])])
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = [[m] for m in modules]  # one module per mutmut run: its own stats, its own row
    if args.report_only:
        last = json.loads((STAGE / "run.json").read_text())
        runs = [last["modules"]]
    low: list[str] = []
    for group_modules in runs:
        print(f"mutation: {', '.join(group_modules)} (staged in {STAGE.relative_to(REPO)}/)",
              flush=True)  # fmt: skip
        if args.report_only:
            code, seconds, command, boxed = 0, last["seconds"], last["command"], last["boxed"]
        else:
            # each module has the whole box: CI on 59a6230 shared one 600 s box among classify,
            # model and parse, and parse (377 s alone) was stopped before one mutant was scored
            left = args.max_seconds
            for attempt in range(1, GENERATION_TRIES + 1):
                stage(group_modules)
                code, seconds, boxed, stalled = run_mutmut(args.max_children, left)
                if not stalled:
                    break
                print(f"mutation: mutmut made no mutants in {GENERATION_SECONDS:.0f} s "
                      f"(try {attempt} of {GENERATION_TRIES}): stopped", flush=True)  # fmt: skip
                if left is not None:
                    left -= seconds
            if stalled:
                raise SystemExit(f"mutmut made no mutants in {GENERATION_TRIES} tries; "
                                 f"see {STAGE}/mutmut-run.log")  # fmt: skip
            run = {"seconds": seconds, "exit": code, "command": command, "boxed": boxed,
                   "modules": group_modules}  # fmt: skip
            (STAGE / "run.json").write_text(json.dumps(run))
        statuses = results(group_modules)
        if boxed and not statuses:
            raise SystemExit(f"mutation: the time box ended before mutmut scored a mutant of "
                             f"{', '.join(group_modules)}; see {STAGE}/mutmut-run.log")  # fmt: skip
        if code != 0 or not statuses:
            tail = (STAGE / "mutmut-run.log").read_text()[-4000:]
            print(re.sub(r"[\u2800-\u28ff]\s*\w[^\n]*?(?=[\u2800-\u28ff]|\n)", "", tail))
            raise SystemExit(f"mutmut run failed (exit {code}); see {STAGE}/mutmut-run.log")
        result = report(group_modules, statuses, seconds, command.strip(), out, boxed)
        for m in result["modules"]:
            pct = m["score_without_equivalents"]
            print(f"mutation: {m['module']}: {m['killed']}/{m['mutants']} killed, "
                  f"{m['equivalent']} equivalent, score without equivalents "
                  f"{_pct(pct)}", flush=True)  # fmt: skip
            if (
                args.fail_under is not None
                and m["module"] in RULES
                and pct is not None
                and (100 * pct < args.fail_under)
            ):
                low.append(m["module"])
        for s in result["survivors"]:
            if s["verdict"] != "equivalent":
                print(f"  {s['verdict']}: {s['mutant']}: {s['line']}")
    shown = out if not out.is_relative_to(REPO) else out.relative_to(REPO)
    print(f"mutation: results in {shown.with_suffix('.md')} (+ .json)")
    if low:
        print(f"mutation: below {args.fail_under} %: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
