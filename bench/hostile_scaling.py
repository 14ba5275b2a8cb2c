"""Time against input size for each hostile input class of issue 11, this branch and the core
before it, in the same run.

Each class builds a log of hostile size n (a run of digits, a line of words, a progress bar, a
nesting depth, a count of failures); ``diagnose()`` of it is timed in a child process, best of
five when under half a second (the previous core can stall for minutes, which no in-process
timer can interrupt), with ``--timeout`` seconds per child. The growth exponent between two
sizes, log(t2 / t1) / log(n2 / n1), is about 1 for linear time and 2 for quadratic; it is shown
when both times are at least 5 ms (below that, timer and allocator noise dominate). "found" says
whether the diagnosis has the planted failure's figures (2.00 GiB requested).

    .venv/bin/python bench/hostile_scaling.py [--baseline-rev REV] [--timeout 120] [--classes A,B]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from baseline_core import extract_core, merge_base  # noqa: E402

GIB = 2**30
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
    "has 77.80 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and "
    "6.90 GiB is reserved by PyTorch but unallocated.\n"
)
TF_OOM = (
    "W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at matmul_op.cc:123 : "
    "RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[65536,8192] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
)


def tqdm(size: int) -> str:
    bar = "\rEpoch 1:  42%|####      | 420/1000 [00:42<00:58, 9.99it/s]"
    return (bar * (size // len(bar) + 1))[:size]


CLASSES: dict[str, tuple[str, list[int], Callable[[int], tuple[str, str | None]]]] = {
    "digits-in-a-torch-message": (
        "a run of n digits where torch prints its total capacity (the message keeps 4000 chars)",
        [250, 500, 1000, 2000, 4000],
        lambda n: (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
            + "9" * n
            + " GiB total capacity; 70.10 GiB already allocated; 1.20 GiB free; 76.00 GiB "
            "reserved in total by PyTorch)\n",
            None,
        ),
    ),
    "digits-before-the-failure-on-its-line": (
        "n digits, then a torch OOM message on the same line",
        [1000, 4000, 16_000, 64_000],
        lambda n: ("9" * n + " " + OOM, None),
    ),
    "digits-in-a-tensorflow-limit": (
        "a BFC 'Limit:' line of n digits before a TensorFlow OOM",
        [1000, 4000, 16_000, 64_000],
        lambda n: ("Limit:        " + "9" * n + "\nInUse:        5\n" + TF_OOM, None),
    ),
    "error-words-on-a-failure-line": (
        "a line of n bytes of 'INTERNAL ' words ending 'CUDA_ERROR_OUT_OF_MEMORY'",
        [4000, 16_000, 64_000, 256_000, 1_024_000],
        lambda n: ("INTERNAL " * (n // 9) + "CUDA_ERROR_OUT_OF_MEMORY\n", None),
    ),
    "progress-bar-then-the-failure": (
        "n bytes of tqdm redraws (\\r), then the OOM after the last one, no newline between",
        [16_000, 64_000, 256_000, 1_024_000, 4_096_000],
        lambda n: (tqdm(n) + "\r" + OOM, "found"),
    ),
    "long-line-then-the-failure": (
        "n bytes without a line break, then the OOM on the same line",
        [16_000, 64_000, 256_000, 1_024_000, 4_096_000, 16_384_000],
        lambda n: ("x" * n + " " + OOM, "found"),
    ),
    "nested-docker-json": (
        "a docker-json line '{\"log\":' + n '[' , then the OOM on the next line",
        [1000, 10_000, 100_000, 1_000_000],
        lambda n: ('{"log":' + "[" * n + "\n" + OOM, "found"),
    ),
    "many-failures": (
        "n distinct 'CUDA error: out of memory' lines (every one a failure)",
        [1000, 4000, 16_000, 64_000],
        lambda n: (
            "".join(f"RuntimeError: CUDA error: out of memory ({i})\n" for i in range(n)),
            None,
        ),
    ),
    "memory-words-before-the-failure": (
        "n bytes of 'mem ' words before the OOM (leak.py's series, bounded at 256 KiB)",
        [16_000, 64_000, 256_000],
        lambda n: ("mem " * (n // 4) + "\n" + OOM, "found"),
    ),
    "retry-words-before-the-failure": (
        "n bytes of 4 KB lines 'out of memory, batch batch ... batch' (no size) before the OOM: "
        "phase.py's retry reading (the 256 KiB before the failure)",
        [16_000, 64_000, 256_000, 1_024_000],
        lambda n: (
            ("out of memory, " + "batch " * 680 + "\n") * (n // 4096) + "\n" + OOM,
            "found",
        ),
    ),
    "blank-lines-in-a-traceback": (
        "'Traceback (most recent call last):' then n blank lines, then the OOM: phase.py's frame "
        "reading (the 64 KiB before the failure); ``^\\s*`` under MULTILINE read the run of blank "
        "lines again from each line start",
        [4_096, 16_384, 65_536, 262_144],
        lambda n: ("Traceback (most recent call last):\n" + "\n" * n + OOM, "found"),
    ),
}


def child(core: str, name: str, n: int) -> None:
    """In a child process: time diagnose() of class ``name`` at size ``n``; print JSON."""
    sys.path.insert(0, core)
    from gpu_auditor.diagnosis import diagnose

    text, _ = CLASSES[name][2](n)
    data = text.encode()
    times: list[float] = []
    result: dict[str, Any] = {}
    while len(times) < 5:
        start = time.perf_counter()
        try:
            diagnosis = diagnose(data)
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
            break
        times.append(time.perf_counter() - start)
        result["requested_bytes"] = diagnosis.figures.requested_bytes
        if times[-1] > 0.5:
            break
    if times:
        result["seconds"] = min(times)
    print(json.dumps(result))


def measure(core: Path, name: str, n: int, timeout: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(core), name, str(n)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1][:120]}
    return dict(json.loads(done.stdout))


def cell(result: dict[str, Any]) -> str:
    if "timeout" in result:
        return f"> {result['timeout']:.0f} s (killed)"
    if "error" in result:
        return f"raises {result['error'].split(':')[0]}"
    return f"{result['seconds'] * 1e3:.1f} ms"


def exponent(a: dict[str, Any], b: dict[str, Any], n1: int, n2: int) -> str:
    if "seconds" not in a or "seconds" not in b or min(a["seconds"], b["seconds"]) < 0.005:
        return ""
    return f"{math.log(b['seconds'] / a['seconds']) / math.log(n2 / n1):.2f}"


def found(result: dict[str, Any]) -> str:
    return "yes" if result.get("requested_bytes") == 2 * GIB else "no"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--classes",
        default=None,
        help="comma-separated classes to run (default: all); results go to "
        "hostile_scaling-<classes>.md/.json so the full table is kept",
    )
    args = parser.parse_args()
    chosen = [c.strip() for c in args.classes.split(",")] if args.classes else list(CLASSES)
    unknown = sorted(set(chosen) - set(CLASSES))
    if unknown:
        parser.error(f"unknown classes {unknown}; known: {sorted(CLASSES)}")
    stem = "hostile_scaling" + ("-" + "-".join(chosen) if args.classes else "")
    rev = args.baseline_rev or merge_base()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu-auditor-baseline-") as tmp:
        cores = {"ours": ROOT / "operator", "baseline": extract_core(rev, Path(tmp))}
        for name in chosen:
            for n in CLASSES[name][1]:
                row: dict[str, Any] = {"class": name, "n": n}
                for label, core in cores.items():
                    row[label] = measure(core, name, n, args.timeout)
                rows.append(row)
                print(name, n, cell(row["ours"]), "|", cell(row["baseline"]), flush=True)
    meta = {
        "command": "python bench/hostile_scaling.py " + " ".join(sys.argv[1:]),
        "baseline_rev": rev,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "timeout_seconds": args.timeout,
    }
    md = [
        "# Hostile inputs: time against size",
        "",
        f"Command: `{meta['command'].strip()}` (from the repository root, `.venv/bin/python`)  ",
        f"Machine: {meta['cpu']}, {meta['cpus']} CPUs (shared with other work), "
        f"Python {meta['python']}, {meta['date']}  ",
        f"Baseline: the diagnosis core at {rev[:12]} (before this branch), same run, same inputs. "
        "Each cell is diagnose() of the whole log in a child process, best of 5 under 0.5 s. "
        "Exponent: log(t2/t1)/log(n2/n1) from the row above (1 = linear, 2 = quadratic), shown "
        f"when both times are >= 5 ms. Child timeout {args.timeout:.0f} s.",
        "",
    ]
    for name in chosen:
        about, _, build = CLASSES[name]
        checks_found = build(1)[1] == "found"
        md += [f"## {name}", "", about, ""]
        head = "| n | this branch | exponent | previous core | exponent |"
        line = "|---|---|---|---|---|"
        if checks_found:
            head += " found here | found before |"
            line += "---|---|"
        md += [head, line]
        mine = [r for r in rows if r["class"] == name]
        for i, row in enumerate(mine):
            prev = mine[i - 1] if i else None
            e_ours = exponent(prev["ours"], row["ours"], prev["n"], row["n"]) if prev else ""
            e_base = (
                exponent(prev["baseline"], row["baseline"], prev["n"], row["n"]) if prev else ""
            )
            text = (
                f"| {row['n']:,} | {cell(row['ours'])} | {e_ours} | {cell(row['baseline'])} "
                f"| {e_base} |"
            )
            if checks_found:
                text += f" {found(row['ours'])} | {found(row['baseline'])} |"
            md.append(text)
        md.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    (args.out / f"{stem}.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
