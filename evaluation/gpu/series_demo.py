#!/usr/bin/env python3
"""A job that leaks and prints nothing about memory, sampled by the agent's own code: is it a leak?

Issue 10: a leaking job that prints no memory figures left the diagnosis only the OOM message,
which shows a full GPU (capacity). The node agent samples each process's GPU memory through NVML
and publishes each container's series in its GPUNodeReport (`pods[].memorySeries`); the operator
passes that series to the diagnosis. This script runs that path on a real GPU, without a kubelet:

1. a torch training job (a child process) that keeps every step's output on the GPU (the bug)
   and prints only `step N loss X` until the CUDA out-of-memory error ends it (``leak``);
   and a control job whose memory stays flat until one too-large request (``flat``);
2. meanwhile the agent's NVML source (``node_agent.nvml_source.NvmlSource``) and its container
   series store (``node_agent.history.MemorySeriesBook``) sample the child, keyed by its pid
   (no pod: there is no kubelet), every ``--interval`` seconds;
3. the series goes through the report contract as the agent writes it and the operator reads it
   (``node_agent.report.build_spec`` → JSON → ``gpu_auditor.base.nodereport.parse_report`` →
   ``gpu_auditor.controller.memoryseries.samples_for``, cut at the job's start and end);
4. the diagnosis core on the job's log, with those samples and without them.

Expected: leak job with samples → ``leak``; without → not ``leak``; flat job with samples → not
``leak``. Writes ``OUT/series_demo.json`` (the verdicts, the series, the raw NVML samples) and
``OUT/<job>.log``. Exit status 0 when all three hold, 1 when one does not, 2 when a job could not
be run or sampled. About 40-60 s on an H200 (both jobs fill the GPU).

Needs python3 with torch (the child) and nvidia-ml-py (this process imports no torch and makes
no CUDA context); run from the repository root:

    PYTHONPATH=.:operator python3 evaluation/gpu/series_demo.py --out /tmp/series-demo

``--fake`` runs the same pipeline on any machine: the child prints a real H200 OOM log
(evaluation/gpu/logs/capacity_batch__baseline.log) and a fake NVML source reports its pid's memory
(rising, or flat with ``--fake-flat``); the unit test runs it so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.memoryseries import samples_for, series_of
from gpu_auditor.diagnosis import diagnose
from node_agent.history import MemorySeriesBook
from node_agent.model import (
    Allocated,
    ContainerUsage,
    GpuSample,
    GpuUsage,
    NodeSharing,
    NvmlReading,
    PodRef,
    ProcessSample,
    Snapshot,
)
from node_agent.report import build_body, build_spec

ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-node-demo"
NAMESPACE = "demo"
CONTAINER = "job"
FAKE_LOG = ROOT / "evaluation/gpu/logs/capacity_batch__baseline.log"

JOB = r"""
import sys, time, torch
mode, step_mib = sys.argv[1], int(sys.argv[2])
pause, seconds = float(sys.argv[3]), float(sys.argv[4])
torch.manual_seed(0)
width = 1024
rows = step_mib * 2**20 // (width * 4)
model = torch.nn.Linear(width, width, device="cuda")
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
kept = []
if mode == "flat":
    free, total = torch.cuda.mem_get_info()
    working_set = torch.empty(int(free * 0.5) // 4, dtype=torch.float32, device="cuda")
started = time.monotonic()
step = 0
while True:
    x = torch.randn(rows, width, device="cuda")
    out = model(x)
    loss = out.pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if mode == "leak":
        kept.append(out.detach())  # the bug: every step's output stays on the GPU
    step += 1
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    if mode == "flat" and time.monotonic() - started > seconds:
        free, total = torch.cuda.mem_get_info()
        print(f"step {step} evaluating", flush=True)
        big = torch.empty(int(free * 1.5) // 4, dtype=torch.float32, device="cuda")
    time.sleep(pause)
"""

FAKE_JOB = r"""
import sys, time
log, seconds = sys.argv[1], float(sys.argv[2])
for step in range(1, 6):
    print(f"step {step * 10} loss {1.0 / step:.4f}", flush=True)
    time.sleep(seconds / 5)
lines = open(log, encoding="utf-8").read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith("Traceback"))
sys.stderr.write("\n".join(lines[start:]) + "\n")
sys.exit(1)
"""


class GpuSource(Protocol):
    def sample(self) -> NvmlReading: ...


@dataclass
class Sampled:
    """What the sampling thread saw of one job."""

    gpu_uuid: str = ""
    gpu_model: str = ""
    gpu_total_bytes: int = 0
    matched_by: str = ""
    raw: list[tuple[float, int]] = field(default_factory=list)
    series: tuple[tuple[float, int], ...] = ()
    passes: int = 0
    errors: int = 0


def sample_job(cmd: list[str], log_path: Path, source: GpuSource, interval: float,
               deadline_s: float) -> tuple[int, float, float, Sampled]:
    """Run ``cmd`` (stdout and stderr to ``log_path``) while sampling its pid's GPU memory every
    ``interval`` s into a MemorySeriesBook; (exit status, start, end wall-clock seconds,
    what was sampled). The job is killed at ``deadline_s``."""
    book = MemorySeriesBook()
    seen = Sampled()
    stop = threading.Event()
    with log_path.open("wb") as log:
        started = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        key = (f"pid-{proc.pid}", CONTAINER, "")

        def loop() -> None:
            nonlocal key
            while not stop.is_set():
                t = time.time()
                reading = source.sample()
                seen.passes += 1
                seen.errors += reading.errors
                for gpu in reading.gpus:
                    mine = [p for p in gpu.processes if p.pid == proc.pid]
                    how = "pid"
                    if (not mine and len(gpu.processes) == 1
                            and seen.matched_by in ("", "only-process")):
                        mine, how = list(gpu.processes), "only-process"  # another pid namespace
                    if not mine or mine[0].used_bytes is None:
                        continue
                    if not seen.gpu_uuid:
                        seen.gpu_uuid, seen.gpu_model = gpu.uuid, gpu.model
                        seen.gpu_total_bytes, seen.matched_by = gpu.total_bytes, how
                        key = (key[0], CONTAINER, gpu.uuid)
                    if gpu.uuid != seen.gpu_uuid:
                        continue
                    used = sum(p.used_bytes or 0 for p in mine)
                    seen.raw.append((round(t, 3), used))
                    seen.series = book.observe(key, t, used)
                stop.wait(max(0.0, interval - (time.time() - t)))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            rc = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        ended = time.time()
        stop.set()
        thread.join(timeout=interval + 5)
    return rc, started, ended, seen


def through_the_report(seen: Sampled, ident: int, started: float,
                       ended: float) -> tuple[list[Any], dict[str, Any]]:
    """The series as the agent publishes it and the operator reads it: (samples, entry)."""
    uid = f"00000000-0000-4000-8000-{ident:012d}"
    pod = PodRef(NAMESPACE, f"job-{ident}", uid, CONTAINER)
    last = seen.series[-1][1] if seen.series else 0
    usage = ContainerUsage(pod=pod, allocated=Allocated.TRUE, used_bytes=last, pids=(ident,),
                           growth_bytes_per_second=None, memory_series=seen.series)
    gpu = GpuSample(gpu="0", index=0, uuid=seen.gpu_uuid or "GPU-unknown",
                    model=seen.gpu_model, total_bytes=seen.gpu_total_bytes, used_bytes=last,
                    free_bytes=max(0, seen.gpu_total_bytes - last), reserved_bytes=0)
    snapshot = Snapshot(node=NODE, taken_at=ended, duration_seconds=0.0, nvml_up=True,
                        kubelet_up=False, strategy=NodeSharing(),
                        gpus=(GpuUsage(gpu=gpu, processes=(), containers=(usage,)),),
                        findings=(), errors={})
    wire = json.loads(json.dumps(build_body(build_spec(snapshot))))
    report = parse_report(wire)
    found = series_of(report).get((uid, CONTAINER))
    samples = samples_for(found, NODE,
                          started_at=dt.datetime.fromtimestamp(started, dt.UTC),
                          finished_at=dt.datetime.fromtimestamp(ended, dt.UTC), previous=False)
    entry = wire["spec"]["gpus"][0]["pods"][0]
    return list(samples), {"memorySeries": entry.get("memorySeries"),
                           "dropped": dict(report.dropped)}


def verdict(log_text: str, samples: list[Any]) -> dict[str, Any]:
    d = diagnose(log_text, samples=samples)
    return {"kind": d.kind, "contributing": list(d.contributing), "summary": d.summary,
            "growth": d.growth.to_json_dict() if d.growth else None, "detected": d.detected}


def run_one(name: str, cmd: list[str], out: Path, source: GpuSource, interval: float,
            deadline_s: float) -> dict[str, Any]:
    log_path = out / f"{name}.log"
    rc, started, ended, seen = sample_job(cmd, log_path, source, interval, deadline_s)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    samples, wire = through_the_report(seen, os.getpid(), started, ended)
    return {
        "job": name, "rc": rc, "seconds": round(ended - started, 2),
        "oom_in_log": "OutOfMemoryError" in text or "out of memory" in text,
        "memory_words_in_log_before_oom": _memory_words_before_oom(text),
        "gpu": {"uuid": seen.gpu_uuid, "model": seen.gpu_model,
                "total_bytes": seen.gpu_total_bytes},
        "matched_by": seen.matched_by, "sampling_passes": seen.passes, "nvml_errors": seen.errors,
        "raw_samples": len(seen.raw), "raw": seen.raw,
        "report_entry": wire, "samples_used": len(samples),
        "with_samples": verdict(text, samples),
        "without_samples": verdict(text, []),
        "log": log_path.name,
    }


def _memory_words_before_oom(text: str) -> list[str]:
    """Lines before the traceback that mention memory (the job should print none)."""
    head = text.split("Traceback", 1)[0]
    words = ("mem", "alloc", "reserved", "gib", "mib", "gb ")
    return [line for line in head.splitlines() if any(w in line.lower() for w in words)][:5]


class FakeNvml:
    """A stand-in for NvmlSource: one H200 on which the pid of the running child (found as the
    only child of this process) rises by ``step`` bytes a pass, or stays flat."""

    def __init__(self, rising: bool, step: int = 2 * 2**30) -> None:
        self.rising = rising
        self.step = step
        self.passes = 0

    def sample(self) -> NvmlReading:
        self.passes += 1
        pids = _children()
        used = 4 * 2**30 + (self.step * self.passes if self.rising else 0)
        gpu = GpuSample(gpu="0", index=0, uuid="GPU-fake-h200", model="NVIDIA H200 (fake)",
                        total_bytes=150_109_880_320, used_bytes=used, free_bytes=0,
                        reserved_bytes=0,
                        processes=tuple(ProcessSample(pid, used) for pid in pids[:1]))
        return NvmlReading(up=True, gpus=(gpu,))


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me:
                found.append(int(entry))
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--interval", type=float, default=0.25, help="seconds between passes")
    p.add_argument("--step-mib", type=int, default=1024, help="MiB the leak keeps per step")
    p.add_argument("--pause", type=float, default=0.05, help="seconds between steps")
    p.add_argument("--flat-seconds", type=float, default=6.0,
                   help="seconds the flat job runs before its too-large request")
    p.add_argument("--deadline-s", type=float, default=40.0, help="per job")
    p.add_argument("--fake", action="store_true", help="no GPU: a fake NVML and a canned log")
    p.add_argument("--only", choices=("leak", "flat"), help="run one job")
    p.add_argument("--script", action="append", default=[], metavar="PATH:EXPECT",
                   help="instead of the built-in jobs, sample this job script (run with "
                   "python3, no arguments) and check its verdict with the series: EXPECT is "
                   "'leak' or 'not-leak' (repeatable; e.g. a held-out set's jobs)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    if a.script:
        return _scripts(a, began)
    jobs = [j for j in ("leak", "flat") if a.only in (None, j)]
    results = []
    for job in jobs:
        if a.fake:
            source: GpuSource = FakeNvml(rising=job == "leak")
            cmd = [sys.executable, "-c", FAKE_JOB, str(FAKE_LOG), str(a.flat_seconds)]
        else:
            from node_agent.nvml_source import NvmlSource

            source = NvmlSource()
            cmd = [sys.executable, "-c", JOB, job, str(a.step_mib), str(a.pause),
                   str(a.flat_seconds)]
        results.append(run_one(job, cmd, a.out, source, a.interval, a.deadline_s))
    checks = {}
    by_job = {r["job"]: r for r in results}
    if "leak" in by_job:
        r = by_job["leak"]
        checks["leak_with_samples_is_leak"] = r["with_samples"]["kind"] == "leak"
        checks["leak_without_samples_is_not_leak"] = r["without_samples"]["kind"] != "leak"
    if "flat" in by_job:
        checks["flat_with_samples_is_not_leak"] = by_job["flat"]["with_samples"]["kind"] != "leak"
    command = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    return _finish(a.out, results, checks, began, command, {"fake": a.fake})


def _scripts(a: argparse.Namespace, began: float) -> int:
    """``--script PATH:EXPECT``: each job script sampled by the real NVML source, its verdict
    with the series checked against EXPECT (without the series, for comparison)."""
    from node_agent.nvml_source import NvmlSource

    results, checks = [], {}
    for spec in a.script:
        path, _, expect = spec.rpartition(":")
        if expect not in ("leak", "not-leak") or not path:
            raise SystemExit(f"--script {spec!r}: PATH:leak or PATH:not-leak")
        name = Path(path).stem
        r = run_one(name, [sys.executable, path], a.out, NvmlSource(), a.interval, a.deadline_s)
        r["expect"] = expect
        results.append(r)
        is_leak = r["with_samples"]["kind"] == "leak"
        checks[f"{name}_with_samples_{expect}"] = is_leak == (expect == "leak")
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    return _finish(a.out, results, checks, began, command, {})


def _finish(out: Path, results: list[dict[str, Any]], checks: dict[str, bool], began: float,
            command: str, extra: dict[str, Any]) -> int:
    """Write ``series_demo.json``, print a line per job; 0 when every check holds, 1 when one
    does not, 2 when a job could not be run or sampled."""
    ran = all(r["oom_in_log"] and r["samples_used"] >= 1 for r in results)
    summary = {
        "command": command, **extra,
        "started": dt.datetime.fromtimestamp(began, dt.UTC).isoformat(),
        "elapsed_s": round(time.time() - began, 1), "python": sys.version.split()[0],
        "checks": checks, "all_ok": ran and all(checks.values()), "jobs_ran": ran,
        "results": results,
    }
    (out / "series_demo.json").write_text(json.dumps(summary, indent=1) + "\n")
    for r in results:
        expect = f" (expect {r['expect']})" if "expect" in r else ""
        print(f"{r['job']}: rc={r['rc']} {r['seconds']} s, {r['raw_samples']} NVML samples, "
              f"{r['samples_used']} series points -> with samples: {r['with_samples']['kind']}"
              f", without: {r['without_samples']['kind']}{expect}")
    print(json.dumps(checks), "elapsed", summary["elapsed_s"], "s")
    if not ran:
        return 2
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
