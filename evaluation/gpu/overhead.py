#!/usr/bin/env python3
"""GPU memory a process holds outside PyTorch's caching allocator, stage by stage (NVML).

non-PyTorch = NVML's used memory for this process (``nvmlDeviceGetComputeRunningProcesses``)
minus ``torch.cuda.memory_reserved()``. Also recorded at every stage: the device's NVML
used/total, the device-level growth since before CUDA init (a second measure that does not
need NVML to match our pid), ``torch.cuda.mem_get_info()``, allocated/reserved, the bytes in
CUDA-graph private pools (PyTorch memory, reported apart: ``memory_snapshot`` segments of a
non-default pool), and every other process on the GPU (compile workers, if any, show there).

Stages: ``context`` (CUDA init), ``cublas_fp32`` / ``cublas_bf16`` / ``cublas_tf32`` (first
matmul of each kind), ``cudnn`` (conv forward+backward, ``cudnn.benchmark`` on), ``nccl``
(single-rank process group + one all_reduce), ``cuda_graph`` (capture + replay of a small
MLP), ``compile`` (``torch.compile`` of a small MLP, forward+backward, Triton),
``compile_cudagraphs`` (``mode="reduce-overhead"`` inference: CUDA-graph trees).

Runs, each a fresh process: ``cumulative`` (every stage in turn, nothing freed), a few stages
alone after the context where they may interact, and ``serving`` (bf16 matmul, NCCL,
reduce-overhead compile and a captured graph together).

    python3 evaluation/gpu/overhead.py --out-json gpu-overhead.json --out-md gpu-overhead.md
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 1024**2
GiB = 1024**3

RUNS: dict[str, list[str]] = {
    "cumulative": [
        "context",
        "cublas_fp32",
        "cublas_bf16",
        "cublas_tf32",
        "cudnn",
        "nccl",
        "cuda_graph",
        "compile",
    ],
    "nccl_alone": ["context", "nccl"],
    "cuda_graph_alone": ["context", "cuda_graph"],
    "cudnn_alone": ["context", "cudnn"],
    "compile_alone": ["context", "compile"],
    "serving": ["context", "cublas_bf16", "nccl", "compile_cudagraphs", "cuda_graph"],
}
RUN_TIMEOUT_S = {"cumulative": 240.0, "serving": 200.0}
DEFAULT_RUN_TIMEOUT_S = 120.0


# -- NVML (pynvml / nvidia-ml-py) ---------------------------------------------------------------
class Nvml:
    def __init__(self) -> None:
        import pynvml

        self.n = pynvml
        pynvml.nvmlInit()
        self.h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("OVERHEAD_GPU", "0")))

    def device(self) -> dict[str, Any]:
        info = self.n.nvmlDeviceGetMemoryInfo(self.h)
        out = {"used": int(info.used), "total": int(info.total), "free": int(info.free)}
        try:  # v2 also says what the driver reserves
            v2 = self.n.nvmlDeviceGetMemoryInfo(self.h, version=self.n.nvmlMemory_v2)
            out["reserved_by_driver"] = int(v2.reserved)
            out["used_v2"] = int(v2.used)
        except Exception:
            pass
        return out

    def processes(self) -> list[dict[str, Any]]:
        procs = self.n.nvmlDeviceGetComputeRunningProcesses(self.h)
        return [
            {"pid": int(p.pid), "used": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
            for p in procs
        ]


# -- stages: each leaves what it made alive in ``keep`` ------------------------------------------
def _sync(torch: Any) -> None:
    torch.cuda.synchronize()


def st_context(torch: Any, keep: dict[str, Any]) -> None:
    torch.cuda.init()
    torch.cuda.mem_get_info()  # needs (creates) the primary context


def _matmul(torch: Any, dtype: Any) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=dtype)
    (a @ a).sum().item()


def st_cublas_fp32(torch: Any, keep: dict[str, Any]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    _matmul(torch, torch.float32)


def st_cublas_bf16(torch: Any, keep: dict[str, Any]) -> None:
    _matmul(torch, torch.bfloat16)


def st_cublas_tf32(torch: Any, keep: dict[str, Any]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    _matmul(torch, torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False


def st_cudnn(torch: Any, keep: dict[str, Any]) -> None:
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, device="cuda")
    x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
    conv(x).sum().backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        conv(x).float().sum().backward()
    _sync(torch)
    keep["conv"] = conv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def st_nccl(torch: Any, keep: dict[str, Any]) -> None:
    import datetime

    import torch.distributed as dist

    kwargs: dict[str, Any] = dict(
        backend="nccl",
        init_method=f"tcp://127.0.0.1:{_free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        dist.init_process_group(**kwargs, device_id=torch.device("cuda", 0))
    except TypeError:  # a release without device_id
        dist.init_process_group(**kwargs)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    _sync(torch)
    keep["dist"] = dist


def _mlp(torch: Any, width: int = 1024, depth: int = 4, dtype: Any = None) -> Any:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width, device="cuda", dtype=dtype), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def st_cuda_graph(torch: Any, keep: dict[str, Any]) -> None:
    model = _mlp(torch)
    static_in = torch.randn(256, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: a CUDA call from another thread (NCCL's watchdog, in the runs with a
    # process group) must not invalidate this capture
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static_out = model(static_in)
    static_in.copy_(torch.randn(256, 1024, device="cuda"))
    graph.replay()
    _sync(torch)
    keep["graph"] = (graph, model, static_in, static_out)


def st_compile(torch: Any, keep: dict[str, Any]) -> None:
    model = _mlp(torch)
    compiled = torch.compile(model)
    for _ in range(2):
        x = torch.randn(256, 1024, device="cuda")
        compiled(x).sum().backward()
    _sync(torch)
    keep["compiled"] = (model, compiled)


def st_compile_cudagraphs(torch: Any, keep: dict[str, Any]) -> None:
    model = _mlp(torch, dtype=torch.bfloat16)
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(4):
            x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
            compiled(x).float().sum().item()
    _sync(torch)
    keep["compiled_cg"] = (model, compiled)


STAGES: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "context": st_context,
    "cublas_fp32": st_cublas_fp32,
    "cublas_bf16": st_cublas_bf16,
    "cublas_tf32": st_cublas_tf32,
    "cudnn": st_cudnn,
    "nccl": st_nccl,
    "cuda_graph": st_cuda_graph,
    "compile": st_compile,
    "compile_cudagraphs": st_compile_cudagraphs,
}


# -- measuring -----------------------------------------------------------------------------------
def private_pool_bytes(torch: Any) -> int | None:
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception:
        return None
    return sum(
        int(s.get("total_size", 0))
        for s in segments
        if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)
    )


def measure(torch: Any, nvml: Nvml | None, device_before: int | None) -> dict[str, Any]:
    gc.collect()
    _sync(torch)
    pid = os.getpid()
    procs = nvml.processes() if nvml is not None else []
    own = [p for p in procs if p["pid"] == pid]
    dev = nvml.device() if nvml is not None else {}
    free, total = torch.cuda.mem_get_info()
    reserved = int(torch.cuda.memory_reserved())
    out: dict[str, Any] = {
        "nvml_process_used": own[0]["used"] if own else None,
        "nvml_pid_matched": bool(own),
        "other_processes": [p for p in procs if p["pid"] != pid],
        "nvml_device": dev,
        "device_used_growth": (
            dev["used"] - device_before if dev and device_before is not None else None
        ),
        "torch_reserved": reserved,
        "torch_allocated": int(torch.cuda.memory_allocated()),
        "torch_max_reserved": int(torch.cuda.max_memory_reserved()),
        "mem_get_info": {"free": int(free), "total": int(total)},
        "private_pool_bytes": private_pool_bytes(torch),
    }
    if out["nvml_process_used"] is not None:
        out["non_pytorch"] = out["nvml_process_used"] - reserved
    if out["device_used_growth"] is not None:
        out["non_pytorch_by_device_growth"] = out["device_used_growth"] - reserved
    return out


def child(run: str, out_path: Path) -> int:
    """One run in this (fresh) process; writes its records to ``out_path``."""
    result: dict[str, Any] = {"run": run, "pid": os.getpid(), "stages": []}
    nvml: Nvml | None = None
    before: dict[str, Any] = {}
    try:
        nvml = Nvml()
        before = nvml.device()
        result["processes_before"] = nvml.processes()
    except Exception as e:  # no NVML: torch-side figures only, said so in the record
        result["nvml_error"] = f"{type(e).__name__}: {e}"
    result["device_before_cuda_init"] = before
    import torch

    result["torch"] = torch.__version__
    result["cuda"] = torch.version.cuda
    keep: dict[str, Any] = {}
    for name in RUNS[run]:
        t0 = time.time()
        rec: dict[str, Any] = {"stage": name}
        try:
            STAGES[name](torch, keep)
            rec["ok"] = True
        except Exception as e:
            rec.update(
                ok=False,
                error=f"{type(e).__name__}: {e}"[:2000],
                traceback=traceback.format_exc()[-4000:],
            )
        rec["wall_s"] = round(time.time() - t0, 2)
        try:
            rec.update(measure(torch, nvml, before.get("used")))
        except Exception as e:
            rec["measure_error"] = f"{type(e).__name__}: {e}"
        result["stages"].append(rec)
        out_path.write_text(json.dumps(result, indent=1))  # what we have, if a later stage hangs
        np_ = rec.get("non_pytorch")
        print(
            f"[{run}] {name:20} ok={rec['ok']!s:5} {rec['wall_s']:6.1f}s non-PyTorch "
            f"{'?' if np_ is None else f'{np_ / MiB:.0f} MiB'}",
            flush=True,
        )
    try:
        result["gpu"] = torch.cuda.get_device_name(0)
    except Exception as e:
        result["gpu_error"] = f"{type(e).__name__}: {e}"
    out_path.write_text(json.dumps(result, indent=1))
    dist = keep.get("dist")
    if dist is not None:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return 0


# -- the parent: runs, then JSON and markdown ------------------------------------------------------
def run_all(runs: list[str], deadline_s: float) -> dict[str, Any]:
    t0 = time.time()
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "runs": [],
    }
    for run in runs:
        if time.time() - t0 > deadline_s:
            out["runs"].append({"run": run, "skipped": "deadline"})
            continue
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = Path(f.name)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            run,
            "--child-out",
            str(path),
        ]
        timeout = RUN_TIMEOUT_S.get(run, DEFAULT_RUN_TIMEOUT_S)
        rc: int | None
        try:
            rc = subprocess.run(cmd, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = None
        try:
            rec = json.loads(path.read_text())
        except ValueError:
            rec = {"run": run, "stages": []}
        rec["rc"] = rc if rc is not None else "timeout"
        out["runs"].append(rec)
        path.unlink(missing_ok=True)
    out["elapsed_s"] = round(time.time() - t0, 1)
    return out


def _mib(v: Any) -> str:
    return "—" if v is None else f"{v / MiB:.0f}"


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Non-PyTorch GPU memory per process, stage by stage",
        "",
        f"Command: `{data.get('command', '')}`; started {data.get('started')}; "
        f"{data.get('elapsed_s')} s.",
        "non-PyTorch = NVML process used - torch.cuda.memory_reserved(); private pools "
        "(CUDA graphs) are PyTorch memory, inside reserved, shown apart. MiB.",
    ]
    for run in data["runs"]:
        lines += ["", f"## {run['run']}"]
        if "skipped" in run:
            lines.append(f"skipped: {run['skipped']}")
            continue
        lines.append(
            f"torch {run.get('torch')} (CUDA {run.get('cuda')}), {run.get('gpu')}, "
            f"rc {run.get('rc')}"
        )
        lines += [
            "",
            "| stage | ok | s | NVML process | reserved | non-PyTorch | Δ non-PyTorch "
            "| device growth - reserved | private pools | mem_get_info free GiB "
            "| NVML used/total GiB | other processes |",
            "|" + "---|" * 12,
        ]
        prev = None
        for st in run.get("stages", []):
            npm = st.get("non_pytorch")
            delta = "—" if npm is None or prev is None else _mib(npm - prev)
            prev = npm if npm is not None else prev
            dev = st.get("nvml_device") or {}
            mgi = st.get("mem_get_info") or {}
            others = ", ".join(
                f"{p['pid']}: {_mib(p['used'])}" for p in st.get("other_processes", [])
            )
            lines.append(
                "| "
                + " | ".join(
                    [
                        st["stage"],
                        "yes" if st.get("ok") else "**no**",
                        f"{st.get('wall_s', 0):.1f}",
                        _mib(st.get("nvml_process_used")),
                        _mib(st.get("torch_reserved")),
                        _mib(npm),
                        delta,
                        _mib(st.get("non_pytorch_by_device_growth")),
                        _mib(st.get("private_pool_bytes")),
                        "—" if not mgi else f"{mgi['free'] / GiB:.2f}",
                        "—" if not dev else f"{dev['used'] / GiB:.2f} / {dev['total'] / GiB:.2f}",
                        others or "—",
                    ]
                )
                + " |"
            )
        errors = [f"- {s['stage']}: {s['error']}" for s in run.get("stages", []) if s.get("error")]
        if errors:
            lines += ["", "Errors:", *errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-json")
    ap.add_argument("--out-md")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated: " + ", ".join(RUNS))
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=300.0,
        help="start no further run after this many seconds",
    )
    ap.add_argument("--child", choices=sorted(RUNS), help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true", help="print the runs and stages; no CUDA")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child, Path(a.child_out))
    runs = [r for r in a.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        ap.error(f"unknown runs {unknown}; choose from {list(RUNS)}")
    if a.dry_run:
        for r in runs:
            print(
                f"{r:18} timeout {RUN_TIMEOUT_S.get(r, DEFAULT_RUN_TIMEOUT_S):4.0f} s: "
                + " -> ".join(RUNS[r])
            )
        return 0
    data = run_all(runs, a.deadline_s)
    md = markdown(data)
    if a.out_json:
        Path(a.out_json).write_text(json.dumps(data, indent=1) + "\n")
    if a.out_md:
        Path(a.out_md).write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
