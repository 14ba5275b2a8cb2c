"""Fuzz ``diagnose()``: a million generated logs, no crash, no stall, every figure in bounds.

Inputs are mutations of the real logs (``tests/fixtures/oom``, ``../shared/corpus/oom``,
``examples/logs``: bytes flipped, slices cut or repeated, numbers replaced by runs of digits,
failure wording, carriage returns, NULs and container prefixes spliced in, whole logs re-framed
as CRI or docker-json) and the hostile classes of issue 11 (runs of digits in every message
family from ``tests/fixtures/hostile/digit_slots.json``, deeply nested docker-json, lines far
longer than 64 KiB, progress bars, random bytes). Most inputs are small, as real logs around a
failure are; about one in 200 is between 64 KiB and 1 MiB.

For every input: ``diagnose()`` must return, its kind must be a known kind, every figure must be
None or in [0, 2^64], and its JSON must round-trip. A crash is any exception or a failed check;
the input is saved under ``bench/results/fuzz_crashes/``. The slowest input is reported with its
size, time and a short repr: the ``RETIMED`` slowest of each worker are timed again (best of 5)
after the run, because on a shared machine one timing can include seconds of waiting for a CPU.

Baseline, same run: the diagnosis core before this branch (``--baseline-rev``, default the
merge-base with ``main``) on the first ``--baseline-inputs`` inputs of the same stream, in a
child process under ``--baseline-budget`` seconds (its stalls cannot be interrupted in-process).

    .venv/bin/python bench/fuzz_diagnose.py [--inputs 1000000] [--workers 2] [--seed 1]
        [--baseline-inputs 20000] [--baseline-rev REV] [--baseline-budget 600]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import json
import math
import multiprocessing
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from baseline_core import extract_core, merge_base  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MAX_FIGURE = 2**64
CORPUS_DIRS = (
    ROOT / "tests" / "fixtures" / "oom",
    ROOT.parent / "shared" / "corpus" / "oom",
    ROOT / "examples" / "logs",
)
SLOTS_FILE = ROOT / "tests" / "fixtures" / "hostile" / "digit_slots.json"
TOKENS = (
    b"\n",
    b"\r",
    b"\r\n",
    b"\x00",
    b"\xff\xfe",
    b"\xed\xa0\x80",
    b"out of memory",
    b"CUDA out of memory. Tried to allocate ",
    b"torch.OutOfMemoryError: ",
    b"OOM when allocating tensor with shape[",
    b"RESOURCE_EXHAUSTED: Out of memory while trying to allocate ",
    b"Cuda failure 'out of memory'",
    b"CUDA_ERROR_OUT_OF_MEMORY",
    b"INTERNAL: ",
    b"Error ",
    b"DefaultCPUAllocator: can't allocate memory",
    b"would exceed allowed memory. (out of memory)",
    b"Process 12 has ",
    b" GiB total capacity; ",
    b" is free. ",
    b" allowed; ",
    b"17179869184.00 GiB",
    b"Limit:        ",
    b"InUse:        ",
    b"malloc ",
    b" bytes",
    b"[rank3]: ",
    b"2026-11-29T19:00:00.000Z stderr P ",
    b"2026-11-29T19:00:00.000Z stdout F ",
    b'{"log":"',
    b'{"log":[[[[[[[[',
    b"\\u0000",
    b"mem 12.5 GiB ",
    b"torch 2.11.0+cu130 ",
    b"reserved in total by PyTorch)",
    b"total capacity; ",
    b"cached)",
)
NUMBER = re.compile(rb"\d+(?:\.\d+)?")
RETIMED = 8


# --- the stream of inputs (deterministic for a seed) ------------------------------------------


def corpus() -> list[bytes]:
    logs = []
    for directory in CORPUS_DIRS:
        if directory.is_dir():
            logs += [p.read_bytes() for p in sorted(directory.rglob("*.log"))]
    return logs


def slots() -> list[str]:
    data = json.loads(SLOTS_FILE.read_text())
    return [slot["log"] for name, slot in sorted(data.items()) if not name.startswith("_")]


class Inputs:
    """Generated inputs, ``(kind, bytes)``, from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.logs = corpus()
        self.slots = slots()
        self.kinds: list[tuple[str, float, Callable[[], bytes]]] = [
            ("mutated-log", 0.52, self.mutated_log),
            ("spliced-logs", 0.08, self.spliced_logs),
            ("reframed-log", 0.07, self.reframed_log),
            ("digit-slot", 0.12, self.digit_slot),
            ("deep-json", 0.04, self.deep_json),
            ("long-line", 0.07, self.long_line),
            ("random-bytes", 0.10, self.random_bytes),
        ]
        self.weights = [weight for _, weight, _ in self.kinds]

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        while True:
            name, _, make = self.rng.choices(self.kinds, self.weights)[0]
            yield name, make()

    def length(self, small: int = 2000, large: int = 1_000_000) -> int:
        """Mostly small (log-uniform up to ``small``), one in 200 up to ``large``."""
        if self.rng.random() < 0.005:
            return self.rng.randint(65_536, large)
        return int(math.exp(self.rng.uniform(0, math.log(small))))

    def digits(self) -> bytes:
        n = self.length(small=6000, large=200_000)
        style = self.rng.randrange(4)
        if style == 0:
            return b"9" * n
        if style == 1:
            return b",".join([b"999"] * max(1, n // 4))
        if style == 2:
            return b"1." + b"5" * n
        return bytes(self.rng.choice(b"0123456789") for _ in range(min(n, 64)))

    def mutate(self, data: bytes, rounds: int | None = None) -> bytes:
        rng = self.rng
        out = bytearray(data)
        for _ in range(rounds or rng.randint(1, 4)):
            at = rng.randint(0, len(out))
            op = rng.randrange(7)
            if op == 0 and out:  # flip bytes
                for _ in range(rng.randint(1, 8)):
                    out[rng.randrange(len(out))] = rng.randrange(256)
            elif op == 1:  # a token
                out[at:at] = rng.choice(TOKENS)
            elif op == 2:  # cut a slice
                del out[at : at + rng.randint(1, 200)]
            elif op == 3:  # repeat a slice
                piece = bytes(out[at : at + rng.randint(1, 120)])
                out[at:at] = piece * rng.randint(1, max(1, self.length(small=60) // 4))
            elif op == 4:  # a number becomes a run of digits
                numbers = list(NUMBER.finditer(out))
                if numbers:
                    m = rng.choice(numbers)
                    out[m.start() : m.end()] = self.digits()
            elif op == 5:  # newlines become carriage returns
                out = out.replace(b"\n", b"\r", rng.randint(1, 20))
            else:  # truncate
                del out[at:]
        return bytes(out[:1_200_000])

    def mutated_log(self) -> bytes:
        return self.mutate(self.rng.choice(self.logs))

    def spliced_logs(self) -> bytes:
        a, b = self.rng.choice(self.logs), self.rng.choice(self.logs)
        return self.mutate(a[: self.rng.randint(0, len(a))] + b[self.rng.randint(0, len(b)) :])

    def reframed_log(self) -> bytes:
        lines = self.rng.choice(self.logs).split(b"\n")
        how = self.rng.randrange(3)
        if how == 0:
            framed = [b"2026-11-29T19:00:00.000Z stderr F " + line for line in lines]
        elif how == 1:
            framed = []
            for line in lines:
                cut = self.rng.randint(0, len(line))
                framed += [b"2026-11-29T19:00:00Z stderr P " + line[:cut]]
                framed += [b"2026-11-29T19:00:00Z stderr F " + line[cut:]]
        else:
            framed = [
                json.dumps({"log": line.decode("utf-8", "replace") + "\n"}).encode()
                for line in lines
            ]
        return self.mutate(b"\n".join(framed), rounds=self.rng.randint(0, 2) or None)

    def digit_slot(self) -> bytes:
        template = self.rng.choice(self.slots).encode()
        return self.mutate(template.replace(b"{D}", self.digits()), rounds=1)

    def deep_json(self) -> bytes:
        depth = self.length(small=5000, large=300_000)
        bracket = self.rng.choice([b"[", b"{", b'["', b'{"a":'])
        tail = self.rng.choice([b"", b"\n", b'"', b"\r", self.rng.choice(self.logs)])
        return b'{"log":' + bracket * depth + tail

    def long_line(self) -> bytes:
        unit = self.rng.choice(
            [
                b"x",
                b"9",
                b"\rEpoch 1:  42%|####      | 420/1000 [00:42<00:58, 9.99it/s]",
                b"mem 12.5 GiB ",
                b"Error ",
                b"out of memory? ",
                b"RESOURCE_EXHAUSTED: ",
                b"\x00\xff",
            ]
        )
        n = self.length(small=20_000, large=1_000_000) // len(unit) + 1
        tail = self.rng.choice([b"", b"\r", b"\n", b" "]) + self.rng.choice(self.logs)
        return (unit * n)[:1_000_000] + tail

    def random_bytes(self) -> bytes:
        data = self.rng.randbytes(self.length(small=4096, large=200_000))
        return self.mutate(data, rounds=self.rng.randint(1, 6))


# --- one diagnosis, checked -------------------------------------------------------------------


def check(diagnosis: Any, kinds: tuple[str, ...]) -> str | None:
    """What is wrong with ``diagnosis``, or None."""
    if diagnosis.kind not in kinds:
        return f"unknown kind {diagnosis.kind!r}"
    f = diagnosis.figures
    values = [
        f.requested_bytes,
        f.total_bytes,
        f.free_bytes,
        f.process_bytes,
        f.allocated_bytes,
        f.reserved_unallocated_bytes,
        f.allowed_bytes,
        *(p.bytes for p in f.other_processes),
    ]
    for value in values:
        if value is not None and not 0 <= value <= MAX_FIGURE:
            return f"figure out of bounds: {value}"
    as_dict = diagnosis.to_json_dict()
    if json.loads(json.dumps(as_dict, allow_nan=False)) != as_dict:
        return "JSON does not round-trip"
    return None


def short(data: bytes, limit: int = 160) -> str:
    text = repr(data[:limit])
    return text + (f" ... ({len(data)} bytes)" if len(data) > limit else "")


def fuzz(seed: int, count: int, save_crashes: bool, budget: float | None = None) -> dict[str, Any]:
    """Run ``count`` inputs of the stream ``seed``; stop early past ``budget`` seconds."""
    from gpu_auditor.diagnosis import KINDS, diagnose

    kinds_seen: dict[str, list[float]] = {}  # kind -> [count, total seconds, max seconds]
    crashes: dict[str, dict[str, Any]] = {}
    slow: list[tuple[float, int, str, bytes]] = []  # heap of the slowest: (seconds, n, kind, data)
    done, total_bytes = 0, 0
    started = time.perf_counter()
    for kind, data in Inputs(seed):
        if done >= count or (budget is not None and time.perf_counter() - started > budget):
            break
        t0 = time.perf_counter()
        try:
            problem = check(diagnose(data), KINDS)
        except Exception as exc:  # every exception is a finding
            problem = f"{type(exc).__name__}: {str(exc)[:120]}"
        seconds = time.perf_counter() - t0
        done += 1
        total_bytes += len(data)
        stats = kinds_seen.setdefault(kind, [0, 0.0, 0.0])
        stats[0] += 1
        stats[1] += seconds
        stats[2] = max(stats[2], seconds)
        if len(slow) < RETIMED or seconds > slow[0][0]:
            (heapq.heappush if len(slow) < RETIMED else heapq.heapreplace)(
                slow, (seconds, done, kind, data)
            )
        if problem is not None:
            key = problem.split(":")[0]
            entry = crashes.setdefault(key, {"count": 0, "first": problem, "input": short(data)})
            entry["count"] += 1
            if save_crashes and entry["count"] == 1:
                digest = hashlib.sha256(data).hexdigest()[:16]
                folder = RESULTS / "fuzz_crashes"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{digest}.bin").write_bytes(data)
                entry["saved"] = f"bench/results/fuzz_crashes/{digest}.bin"
        if done % 100_000 == 0:
            print(f"  seed {seed}: {done} inputs, {len(crashes)} crash kinds", file=sys.stderr)
    seconds_total = time.perf_counter() - started
    return {
        "seed": seed,
        "inputs": done,
        "bytes": total_bytes,
        "seconds": seconds_total,
        "crashes": crashes,
        "slowest": retime(slow, diagnose, budget),
        "kinds": kinds_seen,
    }


def retime(
    slow: list[tuple[float, int, str, bytes]],
    diagnose: Callable[[bytes], Any],
    budget: float | None,
) -> dict[str, Any]:
    """The slowest input after timing the first-slowest again, best of 5 (the baseline's are not
    timed again: its stalls are real and can last minutes)."""
    best: dict[str, Any] = {"seconds": 0.0}
    for first, index, kind, data in slow:
        times = [first]
        for _ in range(0 if budget is not None else 4):
            t0 = time.perf_counter()
            with contextlib.suppress(Exception):
                diagnose(data)
            times.append(time.perf_counter() - t0)
        if min(times) > best["seconds"]:
            best = {
                "seconds": min(times),
                "first_seconds": first,
                "index": index,
                "bytes": len(data),
                "kind": kind,
                "repr": short(data),
            }
    best["first_timing_of_the_slowest"] = max((s[0] for s in slow), default=0.0)
    return best


def _worker(args: tuple[int, int]) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "operator"))
    return fuzz(args[0], args[1], save_crashes=True)


# --- the baseline: the core before this branch, in a child process ----------------------------


def baseline(rev: str, count: int, seed: int, budget: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpu-auditor-baseline-") as tmp:
        core = extract_core(rev, Path(tmp))
        out = Path(tmp) / "result.json"
        env = dict(os.environ, PYTHONPATH=str(core))
        command = [sys.executable, __file__, "--baseline-child", str(out), str(count), str(seed)]
        command += [str(budget)]
        with contextlib.suppress(subprocess.TimeoutExpired):  # a result file is written as it goes
            subprocess.run(command, env=env, timeout=budget + 300, check=False)
        if not out.exists():
            return {"rev": rev, "error": "the baseline child wrote no result (killed?)"}
        result: dict[str, Any] = json.loads(out.read_text())
        result["rev"] = rev
        return result


def _baseline_child(out: str, count: int, seed: int, budget: float) -> None:
    import gpu_auditor

    assert not str(gpu_auditor.__file__).startswith(str(ROOT)), gpu_auditor.__file__
    result = fuzz(seed, count, save_crashes=False, budget=budget)
    result["budget_seconds"] = budget
    result["finished"] = result["inputs"] >= count
    Path(out).write_text(json.dumps(result))


def baseline_rev() -> str:
    return merge_base() or "HEAD~1"


# --- report -----------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    crashes: dict[str, dict[str, Any]] = {}
    kinds: dict[str, list[float]] = {}
    for part in parts:
        for key, entry in part["crashes"].items():
            merged = crashes.setdefault(key, dict(entry, count=0))
            merged["count"] += entry["count"]
        for kind, (n, total, worst) in part["kinds"].items():
            into = kinds.setdefault(kind, [0, 0.0, 0.0])
            into[0] += n
            into[1] += total
            into[2] = max(into[2], worst)
    slowest = max((p["slowest"] for p in parts), key=lambda s: s["seconds"])
    first_max = max(p["slowest"]["first_timing_of_the_slowest"] for p in parts)
    return {
        "inputs": sum(p["inputs"] for p in parts),
        "bytes": sum(p["bytes"] for p in parts),
        "cpu_seconds": sum(p["seconds"] for p in parts),
        "crashes": crashes,
        "crash_count": sum(c["count"] for c in crashes.values()),
        "slowest": slowest,
        "first_timing_max": first_max,
        "kinds": {
            kind: {"inputs": n, "mean_ms": round(total / n * 1e3, 3), "max_ms": round(w * 1e3, 1)}
            for kind, (n, total, w) in sorted(kinds.items())
        },
    }


def markdown(meta: dict[str, Any], ours: dict[str, Any], base: dict[str, Any] | None) -> str:
    slow = ours["slowest"]
    lines = [
        "# Fuzzing diagnose()",
        "",
        f"Command: `{meta['command']}` (from the repository root, `.venv/bin/python`)  ",
        f"Machine: {meta['cpu']}, {meta['cpus']} CPUs (shared with other work), "
        f"Python {meta['python']}, {meta['date']}  ",
        f"Workers: {meta['workers']}, seeds {meta['seeds']}.",
        "",
        "| | this branch | previous core (baseline) |",
        "|---|---|---|",
    ]
    b_inputs = base.get("inputs", 0) if base else 0
    b_crashes = sum(c["count"] for c in base.get("crashes", {}).values()) if base else 0
    b_slow = base.get("slowest", {}) if base else {}
    lines += [
        f"| inputs | {ours['inputs']:,} | {b_inputs:,} (first of seed {meta['seeds'][0]}) |",
        f"| wall time | {meta['wall_seconds']:.0f} s | "
        f"{base.get('seconds', 0):.0f} s of a {base.get('budget_seconds', 0):.0f} s budget |"
        if base
        else f"| wall time | {meta['wall_seconds']:.0f} s | - |",
        f"| inputs/s | {ours['inputs'] / meta['wall_seconds']:,.0f} (all workers) | "
        + (f"{b_inputs / base['seconds']:,.0f} (one process) |" if base and b_inputs else "- |"),
        f"| crashes | **{ours['crash_count']}** | {b_crashes} |",
        f"| slowest input (timed again) | {slow['seconds'] * 1e3:.1f} ms, {slow['bytes']:,} bytes "
        f"({slow['kind']}) | "
        + (
            f"{b_slow.get('seconds', 0):.2f} s, {b_slow.get('bytes', 0):,} bytes "
            f"({b_slow.get('kind', '?')}) |"
            if b_slow
            else "- |"
        ),
        "",
        f"Slowest input here: `{slow['repr']}` (input {slow['index']:,} of its seed; "
        f"first timing {slow['first_seconds'] * 1e3:.1f} ms). The slowest single timing of the "
        f"run was {meta['first_timing_max'] * 1e3:.0f} ms: each worker's {RETIMED} slowest "
        "inputs were timed again, best of 5, and the slowest of those is the row above (one "
        "timing on this shared machine can include waiting for a CPU).",
        "",
    ]
    if b_slow:
        lines += [f"Slowest input of the baseline: `{b_slow.get('repr', '')}`", ""]
    lines += ["## Crashes (this branch)", ""]
    if not ours["crashes"]:
        lines += ["None.", ""]
    for entry in ours["crashes"].values():
        lines += [f"- {entry['count']} x {entry['first']}: `{entry['input']}`"]
    if base:
        lines += ["", f"## Crashes of the baseline ({base.get('rev', '?')[:12]})", ""]
        lines += [
            f"- {e['count']} x {e['first']}: `{e['input'][:200]}`"
            for e in base.get("crashes", {}).values()
        ] or ["None."]
        if not base.get("finished", True):
            lines += ["", "The baseline did not finish its inputs within its budget."]
    lines += ["", "## Inputs by kind (this branch)", "", "| kind | inputs | mean ms | max ms |"]
    lines += ["|---|---|---|---|"]
    lines += [
        f"| {kind} | {s['inputs']:,} | {s['mean_ms']} | {s['max_ms']} |"
        for kind, s in ours["kinds"].items()
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--baseline-child":
        _baseline_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline-inputs", type=int, default=20_000)
    parser.add_argument("--baseline-rev", default=None)
    parser.add_argument("--baseline-budget", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    seeds = [args.seed + i for i in range(args.workers)]
    shares = [
        args.inputs // args.workers + (i < args.inputs % args.workers) for i in range(args.workers)
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        parts = pool.map(_worker, list(zip(seeds, shares, strict=True)))
    wall = time.perf_counter() - started
    ours = combine(parts)
    base = None
    if args.baseline_inputs > 0:
        rev = args.baseline_rev or baseline_rev()
        base = baseline(rev, args.baseline_inputs, seeds[0], args.baseline_budget)
    meta = {
        "command": "python bench/fuzz_diagnose.py " + " ".join(sys.argv[1:]),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "workers": args.workers,
        "seeds": seeds,
        "wall_seconds": round(wall, 1),
        "first_timing_max": ours["first_timing_max"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "ours": ours, "baseline": base}
    (args.out / "fuzz_diagnose.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(meta, ours, base)
    (args.out / "fuzz_diagnose.md").write_text(text)
    print(text)
    return 0 if ours["crash_count"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
