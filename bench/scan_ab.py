"""Log-scan throughput, this branch against the core before it, interleaved in one process.

``scan_throughput.py`` runs one core at a time; on a machine shared with other work two such runs
minutes apart differ by 20% from load alone. Here both cores scan the same page-cached logs
(``scan_throughput.make_log``: 100 MB of CRI training output, with and without one OOM at the
end) in alternation (old first on even rounds, new first on odd ones), ``--repeat`` times, so
load hits both alike. Best and median MB/s of each, by wall time and by the process's CPU time
(``time.process_time``: what the scan itself cost, without time spent waiting for a CPU).

    .venv/bin/python bench/scan_ab.py [--size-mb 100] [--repeat 9] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import scan_throughput  # noqa: E402
from baseline_core import extract_core, merge_base  # noqa: E402


def load(package_dir: Path, name: str) -> ModuleType:
    """Import ``package_dir`` (a gpu_auditor tree) under another top-level name."""
    spec = importlib.util.spec_from_file_location(
        name, package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.diagnosis")


def run_meta(script: str, rev: str, repeat: int) -> dict[str, Any]:
    """What an A/B run records beside its rows: its command, the baseline, the machine."""
    return {
        "command": f"python bench/{script} " + " ".join(sys.argv[1:]),
        "baseline_rev": rev,
        "python": platform.python_version(),
        "cpu": scan_throughput.cpu_model(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeat": repeat,
    }


def write_results(out: Path, stem: str, meta: dict[str, Any], rows: list[dict[str, Any]],
                  title: str, method: str, table: list[str]) -> None:
    """``<stem>.json`` and ``<stem>.md`` under ``out``: the command, the machine, how the run
    went (``method``, after "Previous core: <rev>.") and the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    (out / f"{stem}.md").write_text(
        f"# {title}\n\n"
        f"Command: `{meta['command'].strip()}` (from the repository root, `.venv/bin/python`)  \n"
        f"Machine: {meta['cpu']}, {meta['cpus']} CPUs (shared with other work), Python "
        f"{meta['python']}, {meta['date']}  \n"
        f"Previous core: {meta['baseline_rev'][:12]}. {method}\n\n" + "\n".join(table) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    rev = args.baseline_rev or merge_base()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu-auditor-ab-") as tmp:
        cores = {
            "previous": load(extract_core(rev, Path(tmp)) / "gpu_auditor", "gpu_auditor_previous"),
            "this branch": load(ROOT / "operator" / "gpu_auditor", "gpu_auditor_branch"),
        }
        for name, with_oom in (("one OOM at the end", True), ("no OOM", False)):
            path = Path(tmp) / f"log-{with_oom}.log"
            scan_throughput.make_log(path, args.size_mb, with_oom=with_oom)
            path.read_bytes()  # into the page cache
            mb = path.stat().st_size / 1e6
            wall: dict[str, list[float]] = {label: [] for label in cores}
            cpu: dict[str, list[float]] = {label: [] for label in cores}
            for round_ in range(args.repeat):
                order = list(cores.items())
                for label, core in order if round_ % 2 == 0 else order[::-1]:
                    with path.open("rb") as stream:
                        start, start_cpu = time.perf_counter(), time.process_time()
                        count = core.scan_stream(stream).oom_count
                        wall[label].append(time.perf_counter() - start)
                        cpu[label].append(time.process_time() - start_cpu)
                    assert count == (1 if with_oom else 0), (label, count)
            for clock, times in (("wall", wall), ("cpu", cpu)):
                row: dict[str, Any] = {"log": name, "clock": clock, "bytes": path.stat().st_size}
                for label, seconds in times.items():
                    row[label] = {
                        "best_mb_per_s": round(mb / min(seconds), 1),
                        "median_mb_per_s": round(mb / statistics.median(seconds), 1),
                    }
                row["ratio_best"] = round(
                    row["this branch"]["best_mb_per_s"] / row["previous"]["best_mb_per_s"], 3
                )
                row["ratio_median"] = round(
                    row["this branch"]["median_mb_per_s"] / row["previous"]["median_mb_per_s"], 3
                )
                rows.append(row)
    meta = run_meta("scan_ab.py", rev, args.repeat)
    table = [
        "| log | clock | previous best MB/s | this branch best MB/s | ratio | previous median MB/s "
        "| this branch median MB/s | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {r['log']} | {r['clock']} | {r['previous']['best_mb_per_s']} "
        f"| {r['this branch']['best_mb_per_s']} "
        f"| {r['ratio_best']} | {r['previous']['median_mb_per_s']} "
        f"| {r['this branch']['median_mb_per_s']} | {r['ratio_median']} |"
        for r in rows
    ]
    write_results(
        args.out, "scan_ab", meta, rows,
        "Log-scan throughput: this branch against the previous core, interleaved",
        f"Each core scanned each log {args.repeat} times, alternating, from the page cache "
        "(`scan_stream`, 4 MiB chunks). Ratio: this branch over the previous core (1.0 = the "
        "same speed).",
        table,
    )
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
