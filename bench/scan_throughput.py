"""Log-scan throughput: gpu_auditor's bounded streaming scan against a naive per-line regex scan.

Builds two ~100 MB container logs (CRI-prefixed training output: step lines with memory figures,
INFO/WARNING lines, one line in 20 with the word "memory" and a few that mention out-of-memory
handling, so the prefilter has false hits to check and reject): one with a single PyTorch OOM
at its very end, one without. Each is scanned, from the page cache, by

- ``scan_stream``: ``gpu_auditor.diagnosis.scan_stream`` (4 MiB chunks, keyword prefilter with
  ``bytes.find``, family regexes only on hit lines), and ``diagnose_stream`` (scan + diagnosis);
- the naive baseline (the target's): read the file line by line as text and run one combined
  regex of the same failure families on every line;
- a stronger per-line baseline, for honesty: a keyword regex on every line, the family regexes
  only on its hits (still a Python loop over every line).

Both must agree on the number of OOMs. Best of ``--repeat`` runs is reported.

    .venv/bin/python bench/scan_throughput.py [--size-mb 100] [--repeat 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from gpu_auditor.diagnosis import diagnose_stream, scan_stream  # noqa: E402
from gpu_auditor.diagnosis.formats import _FAMILIES, KEYWORDS, match_line  # noqa: E402

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
    "has 77.80 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and "
    "6.90 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html)"
)
BASELINE_RE = re.compile("|".join(f"(?:{p.pattern})" for _, p in _FAMILIES))
KEYWORD_RE = re.compile("|".join(re.escape(k.decode()) for k in KEYWORDS))


def make_log(path: Path, size_mb: int, *, with_oom: bool, seed: int = 7) -> None:
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    templates = [
        "{ts} stdout F [rank0]: step {step} | loss {loss:.4f} | lr {lr:.2e} | mem {mem:.2f} GiB | "
        "tok/s {tps}",
        "{ts} stderr F [rank0]: INFO dataloader: fetched batch {step} in {ms} ms "
        "from shard {shard}",
        "{ts} stdout F [rank0]: Epoch {epoch}:  {pct}%|#####     | {step}/50000 [{ms}s<{ms}s, "
        "{loss:.2f}it/s]",
        "{ts} stderr F [rank0]: WARNING torch.distributed: NCCL_ASYNC_ERROR_HANDLING is deprecated",
        "{ts} stdout F [rank0]: eval step {step}: accuracy {loss:.4f} allocated: {tps} MB",
    ]
    memory = "{ts} stderr F [rank0]: INFO memory: reserved {mem:.2f} GiB, peak memory {mem:.2f} GiB"
    rare = "{ts} stderr F [rank0]: INFO trainer: out of memory handler armed (batch {step})"
    with path.open("w", encoding="utf-8") as out:
        written, step = 0, 0
        while written < target:
            step += 1
            minute, second = (step // 60000) % 60, (step // 1000) % 60
            ts = f"2026-11-29T19:{minute:02d}:{second:02d}.{step % 1000:03d}Z"
            if step % 50_000 == 0:
                template = rare
            elif step % 20 == 0:
                template = memory
            else:
                template = rng.choice(templates)
            line = (
                template.format(
                    ts=ts,
                    step=step,
                    loss=rng.random() * 3,
                    lr=rng.random() / 1000,
                    mem=40 + rng.random(),
                    tps=rng.randint(1000, 99999),
                    ms=rng.randint(1, 999),
                    shard=rng.randint(0, 1023),
                    epoch=step // 10000,
                    pct=rng.randint(0, 99),
                )
                + "\n"
            )
            out.write(line)
            written += len(line)
        if with_oom:
            out.write(f"2026-11-29T20:00:00.000Z stderr F [rank0]: {OOM}\n")


def baseline(path: Path) -> int:
    """Naive: every line, as text, through the combined family regex."""
    count = 0
    with path.open("r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if BASELINE_RE.search(line):
                count += 1
    return count


def baseline_keywords(path: Path) -> int:
    """Naive but cheaper: a keyword regex on every line, the family regexes on its hits."""
    count = 0
    with path.open("r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if KEYWORD_RE.search(line) and match_line(line):
                count += 1
    return count


def ours(path: Path) -> int:
    with path.open("rb") as stream:
        return scan_stream(stream).oom_count


def ours_full(path: Path) -> int:
    with path.open("rb") as stream:
        return diagnose_stream(stream).oom_count


def best(fn: Callable[[Path], int], path: Path, repeat: int) -> tuple[float, int]:
    times, result = [], -1
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(path)
        times.append(time.perf_counter() - start)
    return min(times), result


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-auditor-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, with_oom in (("one OOM at the end", True), ("no OOM", False)):
        path = workdir / f"log-{'oom' if with_oom else 'clean'}-{args.size_mb}mb.log"
        make_log(path, args.size_mb, with_oom=with_oom)
        size = path.stat().st_size
        path.read_bytes()  # warm the page cache
        t_scan, n_scan = best(ours, path, args.repeat)
        t_full, n_full = best(ours_full, path, args.repeat)
        t_base, n_base = best(baseline, path, max(1, args.repeat - 1))
        t_kw, n_kw = best(baseline_keywords, path, max(1, args.repeat - 1))
        want = 1 if with_oom else 0
        assert n_scan == n_full == n_base == n_kw == want, (n_scan, n_full, n_base, n_kw)
        mb = size / 1e6
        rows.append(
            {
                "log": name,
                "bytes": size,
                "ooms": n_scan,
                "scan_seconds": round(t_scan, 4),
                "scan_mb_per_s": round(mb / t_scan, 1),
                "diagnose_seconds": round(t_full, 4),
                "diagnose_mb_per_s": round(mb / t_full, 1),
                "baseline_seconds": round(t_base, 4),
                "baseline_mb_per_s": round(mb / t_base, 1),
                "speedup_vs_baseline": round(t_base / t_scan, 1),
                "keyword_baseline_seconds": round(t_kw, 4),
                "keyword_baseline_mb_per_s": round(mb / t_kw, 1),
                "speedup_vs_keyword_baseline": round(t_kw / t_scan, 1),
            }
        )
        os.unlink(path)
    command = "python bench/scan_throughput.py " + " ".join(sys.argv[1:])
    meta = {
        "command": command.strip(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeat": args.repeat,
        "target": ">= 100 MB/s and >= 5x the baseline",
    }
    table = [
        "| log | size | OOMs | scan_stream MB/s | diagnose_stream MB/s | naive baseline MB/s "
        "| speedup | keyword per-line baseline MB/s | speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {r['log']} | {r['bytes'] / 1e6:.0f} MB | {r['ooms']} | {r['scan_mb_per_s']} | "
        f"{r['diagnose_mb_per_s']} | {r['baseline_mb_per_s']} | {r['speedup_vs_baseline']}x | "
        f"{r['keyword_baseline_mb_per_s']} | {r['speedup_vs_keyword_baseline']}x |"
        for r in rows
    ]
    print("\n".join(table))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scan_throughput.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    (args.out / "scan_throughput.md").write_text(
        "# Log-scan throughput\n\n"
        f"Command: `{meta['command']}` (from the repository root, `.venv/bin/python`)  \n"
        f"Machine: {meta['cpu']}, {meta['cpus']} CPUs, Python {meta['python']}, {meta['date']}  \n"
        f"Best of {args.repeat} runs (baselines: best of {max(1, args.repeat - 1)}), "
        "file in the page cache. "
        "Naive baseline: the file read line by line as text, one combined regex of the same "
        "failure families on every line. Keyword per-line baseline: a keyword regex on every "
        "line, the family regexes on its hits. Target: >= 100 MB/s and >= 5x the naive "
        "baseline. `diagnose_stream` adds parsing, classification and recommendation.\n\n"
        + "\n".join(table)
        + "\n"
    )
    ok = all(r["scan_mb_per_s"] >= 100 and r["speedup_vs_baseline"] >= 5 for r in rows)
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
