"""One diagnosis's cost (scan, parse, classify, recommend), this branch against the core before
it, interleaved in one process.

``scan_ab.py`` times the scan of 100 MB; this times the work done once per failure on what the
scan keeps of a log (its last 256 KiB before the failure, the tail after it): a training log of
step lines ending in a torch OOM, with no prefix and under torchrun's ``[rank0]: `` (the failure's
own traceback is read under its prefix since issue 24's third round), and a log with no OOM.
Both cores diagnose the same bytes in alternation, ``--repeat`` times; best and median
milliseconds of each, by wall time.

    .venv/bin/python bench/diagnose_ab.py [--repeat 41] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from baseline_core import extract_core, merge_base  # noqa: E402
from scan_ab import load, run_meta, write_results  # noqa: E402

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
    "has 77.80 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and "
    "6.90 GiB is reserved by PyTorch but unallocated.\n"
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in <module>\n'
    "    loss.backward()\n"
    '  File "/usr/lib/python3/site-packages/torch/autograd/__init__.py", line 266, in backward\n'
    "    _engine_run_backward(\n"
)


def make_log(prefix: str, with_oom: bool, lines: int = 6000) -> bytes:
    body = "".join(
        f"{prefix}step {i} loss 0.{i % 10000:04d} lr 1e-4 grad_norm 1.0\n" for i in range(lines)
    )
    if with_oom:
        body += "".join(prefix + line + "\n" for line in (TRACEBACK + OOM).splitlines())
    return body.encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    rev = args.baseline_rev or merge_base()
    logs = {  # name: (the log, whether it ends in an OOM)
        "OOM after 6,000 step lines": (make_log("", True), True),
        "the same under torchrun's [rank0]: prefix": (make_log("[rank0]: ", True), True),
        "6,000 step lines, no OOM": (make_log("", False), False),
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu-auditor-dab-") as tmp:
        cores = {
            "previous": load(extract_core(rev, Path(tmp)) / "gpu_auditor", "gpu_auditor_previous"),
            "this branch": load(ROOT / "operator" / "gpu_auditor", "gpu_auditor_branch"),
        }
        for name, (data, oom) in logs.items():
            times: dict[str, list[float]] = {label: [] for label in cores}
            for round_ in range(args.repeat):
                order = list(cores.items())
                for label, core in order if round_ % 2 == 0 else order[::-1]:
                    start = time.perf_counter()
                    found = core.diagnose(data)
                    times[label].append(time.perf_counter() - start)
                    assert found.detected is oom, (label, name)
            row: dict[str, Any] = {"log": name, "bytes": len(data)}
            for label, seconds in times.items():
                row[label] = {"best_ms": round(1000 * min(seconds), 1),
                              "median_ms": round(1000 * statistics.median(seconds), 1)}
            row["ratio_median"] = round(
                row["this branch"]["median_ms"] / row["previous"]["median_ms"], 3)
            rows.append(row)
    meta = run_meta("diagnose_ab.py", rev, args.repeat)
    table = [
        "| log | KiB | previous best ms | this branch best ms | previous median ms "
        "| this branch median ms | ratio (median, this / previous) |",
        "|---|---|---|---|---|---|---|",
    ] + [
        f"| {r['log']} | {r['bytes'] // 1024} | {r['previous']['best_ms']} "
        f"| {r['this branch']['best_ms']} | {r['previous']['median_ms']} "
        f"| {r['this branch']['median_ms']} | {r['ratio_median']} |"
        for r in rows
    ]
    write_results(
        args.out, "diagnose_ab", meta, rows,
        "One diagnosis's cost: this branch against the previous core, interleaved",
        f"Each core diagnosed each log {args.repeat} times, alternating (`diagnose(bytes)`: "
        "scan, parse, classify, recommend). Ratio above 1: this branch is slower.",
        table,
    )
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
