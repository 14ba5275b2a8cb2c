"""Where the operator runs the diagnosis: a thread (the baseline) or a worker process (ours).

The operator is an asyncio program (kopf). The diagnosis core is pure Python and C regexes: a
pathological input holds the GIL, so in a thread it stalls the event loop, and a timeout on the
thread's future only stops waiting while the computation burns on. In a worker process the
event loop runs on and the worker is killed at the budget; the price is the worker's memory and
the pipe. This measures, in one run, for both:

- latency of a normal diagnosis (the corpus logs, and a 1 MiB log): p50 / p99 per call;
- memory: this process's RSS (the thread variant adds nothing) and each worker's RSS / VmHWM;
- a GIL-holding computation past a 1 s budget: the longest the event loop went without a tick
  (a 10 ms ticker), when the caller got its answer, and CPU seconds burnt after it gave up.

The stuck computations: the core's own O(n^2) scan of a long run of digits, as it is on this
branch (issue 11; the core's fix makes it fast, then only the second one stalls), and
`math.factorial`, which holds the GIL in C for seconds.

    .venv/bin/python bench/operator_offloop.py [--repeat 20] [--out bench/results]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import math
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from gpu_auditor.controller.diagnosispool import DiagnosisFailed, DiagnosisPool  # noqa: E402
from gpu_auditor.diagnosis import diagnose  # noqa: E402

CORPUS = [ROOT.parent / "shared" / "corpus" / "oom", ROOT / "tests" / "fixtures" / "oom" / "corpus"]
BUDGET = 1.0
DIGITS = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " + b"1" * 3000 + b"\n"
FACTORIAL = 250_000


def corpus() -> list[bytes]:
    folder = next(f for f in CORPUS if f.is_dir())
    return [p.read_bytes() for p in sorted(folder.glob("*.log"))]


def one_mib_log(logs: list[bytes]) -> bytes:
    filler = b"step 1 loss 2.3456 lr 0.0001 tokens/s 123456 " * 2 + b"\n"
    return filler * ((1 << 20) // len(filler)) + logs[0]


def vm(pid: int | str, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


# -- the two ways ------------------------------------------------------------------------------


class ThreadWay:
    name = "thread (baseline)"

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    async def run(self, fn: Callable[..., Any], arg: Any) -> str:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self.pool, fn, arg), BUDGET)
        except TimeoutError:
            return "timeout"
        return "ok"

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def worker_pids(self) -> list[int]:
        return []


class ProcessWay:
    name = "worker process (ours)"

    def __init__(self) -> None:
        self.pools: dict[str, DiagnosisPool] = {}

    def _pool(self, fn: Callable[..., Any]) -> DiagnosisPool:
        function = f"{fn.__module__}:{fn.__name__}"
        if function == "gpu_auditor.diagnosis.core:diagnose":
            function = "gpu_auditor.diagnosis:diagnose"
        if function not in self.pools:
            self.pools[function] = DiagnosisPool(size=2, budget=BUDGET, function=function)
        return self.pools[function]

    async def run(self, fn: Callable[..., Any], arg: Any) -> str:
        pool = self._pool(fn)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, pool.diagnose, arg)
        except DiagnosisFailed as exc:
            return exc.reason if exc.reason != "error" else "ok"  # factorial returns an int
        return "ok"

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()

    def worker_pids(self) -> list[int]:
        return [pid for pool in self.pools.values() for pid in pool.pids()]


# -- measures ----------------------------------------------------------------------------------


async def latency(way: ThreadWay | ProcessWay, logs: list[bytes], repeat: int) -> dict[str, Any]:
    await way.run(diagnose, logs[0])  # a worker started, imports done
    per_log: list[float] = []
    for _ in range(repeat):
        for log in logs:
            started = time.perf_counter()
            await way.run(diagnose, log)
            per_log.append(time.perf_counter() - started)
    big = one_mib_log(logs)
    per_mib: list[float] = []
    for _ in range(max(repeat // 4, 3)):
        started = time.perf_counter()
        await way.run(diagnose, big)
        per_mib.append(time.perf_counter() - started)
    p50, p99 = percentiles(per_log)
    mib50, mib99 = percentiles(per_mib)
    return {"corpus_p50_ms": p50 * 1e3, "corpus_p99_ms": p99 * 1e3, "calls": len(per_log),
            "mib_p50_ms": mib50 * 1e3, "mib_p99_ms": mib99 * 1e3}


async def stall(way: ThreadWay | ProcessWay, fn: Callable[..., Any], arg: Any) -> dict[str, Any]:
    """The event loop's longest gap between 10 ms ticks while `fn(arg)` runs past the budget."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.1)
    cpu_before = time.process_time()
    started = time.perf_counter()
    outcome = await way.run(fn, arg)
    answered = time.perf_counter() - started
    cpu_at_answer = time.process_time()
    stop.set()
    await tick
    if isinstance(way, ThreadWay):
        way.close()  # waits for the abandoned computation to finish
        way.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    burnt_after = time.process_time() - cpu_at_answer
    return {"outcome": outcome, "answered_s": answered, "max_loop_gap_ms": max(gaps) * 1e3,
            "cpu_after_answer_s": burnt_after, "cpu_before_answer_s": cpu_at_answer - cpu_before}


async def measure(way: ThreadWay | ProcessWay, logs: list[bytes], repeat: int) -> dict[str, Any]:
    result: dict[str, Any] = {"way": way.name}
    result["latency"] = await latency(way, logs, repeat)
    result["rss_self_mib"] = vm("self", "VmRSS")
    pids = way.worker_pids()
    result["workers"] = len(pids)
    result["worker_rss_mib"] = [round(vm(pid, "VmRSS"), 1) for pid in pids]
    result["worker_hwm_mib"] = [round(vm(pid, "VmHWM"), 1) for pid in pids]
    result["stall_digits"] = await stall(way, diagnose, DIGITS)
    result["stall_factorial"] = await stall(way, math.factorial, FACTORIAL)
    way.close()
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| way | corpus p50 / p99 (ms) | 1 MiB log p50 / p99 (ms) | operator RSS (MiB) | "
        "worker RSS / VmHWM (MiB) | digits line: answered (s) / max loop gap (ms) / CPU after "
        "(s) | factorial: answered (s) / max loop gap (ms) / CPU after (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lat, d, f = r["latency"], r["stall_digits"], r["stall_factorial"]
        workers = (", ".join(f"{a} / {b}" for a, b in zip(r["worker_rss_mib"],
                                                          r["worker_hwm_mib"], strict=True))
                   or "none (in process)")
        rows.append(
            f"| {r['way']} | {lat['corpus_p50_ms']:.2f} / {lat['corpus_p99_ms']:.2f} | "
            f"{lat['mib_p50_ms']:.0f} / {lat['mib_p99_ms']:.0f} | {r['rss_self_mib']:.1f} | "
            f"{workers} | {d['outcome']} {d['answered_s']:.2f} / {d['max_loop_gap_ms']:.0f} / "
            f"{d['cpu_after_answer_s']:.2f} | {f['outcome']} {f['answered_s']:.2f} / "
            f"{f['max_loop_gap_ms']:.0f} / {f['cpu_after_answer_s']:.2f} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="write .md and .json here")
    args = parser.parse_args()
    logs = corpus()
    results = [asyncio.run(measure(ThreadWay(), logs, args.repeat)),
               asyncio.run(measure(ProcessWay(), logs, args.repeat))]
    load = Path("/proc/loadavg").read_text().split()[:3]
    header = (f"Command: `.venv/bin/python bench/operator_offloop.py --repeat {args.repeat}` "
              f"(from the repository root)  \nMachine: {platform.processor() or platform.machine()}"
              f", Python {platform.python_version()}, load average {' '.join(load)}, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}  \n"
              f"Budget {BUDGET:g} s; {len(logs)} corpus logs x {args.repeat}; two threads or two "
              f"workers. Peak RSS of this process: "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB.")
    notes = ("\"answered\": when the caller got its outcome (timeout, or ok when the computation "
             "finished first); \"max loop gap\": the event loop's longest time between 10 ms "
             "ticks; \"CPU after\": CPU seconds this process burnt after the answer (a "
             "thread's computation goes on; a worker is SIGKILLed at the budget, so its CPU "
             "stops there). Digits line: the core's O(n^2) scan of 3,000 digits as on this "
             "branch; factorial: math.factorial(250,000), GIL held in C.")
    text = f"# Diagnosis off the event loop: thread or worker process\n\n{header}\n\n" \
           f"{table(results)}\n\n{notes}\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "operator_offloop.md").write_text(text)
        (args.out / "operator_offloop.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
