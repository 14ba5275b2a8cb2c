"""The torch side of one sweep point: build its slack, run its steps, capture the OOM as it is.

Everything a point allocates is a plain ``torch.empty`` of uint8 (the allocator sees exactly
the sizes the design names; no kernel runs, so nothing but the allocator's bookkeeping costs
time), except the ``mlp`` jobs, which train a real Linear+GELU stack with AdamW.

An out-of-memory failure is recorded where it happens, while everything the job holds is still
alive: the exception text (the OOM line a log would hold), the traceback, the step and which
allocation failed, ``torch.cuda.memory_stats()`` extracts, ``mem_get_info()`` and a summary of
``memory_snapshot()`` per pool.
"""

from __future__ import annotations

import gc
import os
import traceback
from typing import Any

import torch
from points import GiB, Mlp, Pattern, Point

DEVICE = "cuda"
"""Where jobs allocate; the CPU test harness points it elsewhere."""

STAT_KEYS = [
    f"{metric}.{pool}.current"
    for metric in (
        "allocated_bytes",
        "reserved_bytes",
        "inactive_split_bytes",
        "requested_bytes",
        "active_bytes",
        "segment",
        "inactive_split",
    )
    for pool in ("all", "small_pool", "large_pool")
] + [
    "num_alloc_retries",
    "num_ooms",
    "num_device_alloc",
    "num_device_free",
    "max_split_size",
    "oversize_segments.current",
    "oversize_allocations.current",
]


def is_oom(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or a raw CUDA/cuBLAS allocation failure raised as another type."""
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and (
        "out of memory" in text or "_ALLOC_FAILED" in text or "would exceed allowed memory" in text
    )


def empty(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)


# Named functions so that the traceback a failure records says which allocation it was.
def forward_activations(nbytes: int) -> torch.Tensor:
    return empty(nbytes)


def kept_outputs(nbytes: int) -> torch.Tensor:
    return empty(nbytes)


def optimizer_state(nbytes: int) -> torch.Tensor:
    return empty(nbytes)


def build_pattern(p: Pattern) -> list[torch.Tensor]:
    """The tensors the pattern keeps alive (see ``points.Pattern`` for each kind)."""
    if p.kind == "split":
        first = [empty(p.first) for _ in range(p.count)]
        del first  # every segment cached, none split yet
        return [empty(p.size) for _ in range(p.count)]
    if p.kind in ("pinned", "small"):
        blocks = [empty(p.size) for _ in range(p.count * p.per_segment())]
        keep = p.per_segment() if p.kind == "pinned" else p.keep_every
        return blocks[::keep]
    if p.kind == "round":
        return [empty(p.size) for _ in range(p.count)]
    return []


def memory_state(detail: bool = True) -> dict[str, Any]:
    free, total = torch.cuda.mem_get_info()
    out: dict[str, Any] = {
        "free": int(free),
        "total": int(total),
        "allocated": int(torch.cuda.memory_allocated()),
        "reserved": int(torch.cuda.memory_reserved()),
    }
    if not detail:
        return out
    try:
        stats = torch.cuda.memory_stats()
        out["stats"] = {k: int(stats[k]) for k in STAT_KEYS if k in stats}
    except Exception as e:  # the async backend reports fewer stats; never lose the record
        out["stats_error"] = repr(e)
    out["pools"] = pool_summary()
    return out


def pool_summary() -> dict[str, Any]:
    """Per pool: segments, bytes, expandable or not, and the free blocks' count and largest."""
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception as e:
        return {"error": repr(e)}
    pools: dict[str, dict[str, int]] = {}
    for seg in segments:
        pool = pools.setdefault(
            str(seg.get("segment_type", "?")),
            {
                "segments": 0,
                "expandable": 0,
                "total": 0,
                "allocated": 0,
                "free_blocks": 0,
                "largest_free": 0,
            },
        )
        pool["segments"] += 1
        pool["expandable"] += int(bool(seg.get("is_expandable", False)))
        pool["total"] += int(seg.get("total_size", 0))
        pool["allocated"] += int(seg.get("allocated_size", 0))
        for block in seg.get("blocks", ()):
            if block.get("state") == "inactive":
                pool["free_blocks"] += 1
                pool["largest_free"] = max(pool["largest_free"], int(block.get("size", 0)))
    return pools


def failure(step: int, where: str, requested: int, e: BaseException) -> dict[str, Any]:
    """Call inside the ``except`` block, while the job's tensors are alive."""
    return {
        "outcome": "oom",
        "step": step,
        "where": where,
        "request_bytes": requested,
        "exception": type(e).__name__,
        "message": str(e),
        "traceback": traceback.format_exc(),
        "at_oom": memory_state(),
        "probe_record": probe_record(),
    }


def probe_record() -> str | None:
    """The OOM probe's record for this failure, when the probe is loaded (GPU_AUDITOR_PROBE=1
    and PYTHONPATH=probe): the probe writes it from the allocator's OOM observer, before the
    exception reaches Python. Read and removed, so the next point cannot see a stale one."""
    path = os.environ.get("GPU_AUDITOR_PROBE_PATH")
    if not path or os.environ.get("GPU_AUDITOR_PROBE") != "1":
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(8192)
        os.unlink(path)
    except OSError:
        return None
    return text


def error(step: int, where: str, e: BaseException) -> dict[str, Any]:
    return {
        "outcome": "error",
        "step": step,
        "where": where,
        "exception": type(e).__name__,
        "message": str(e)[:4000],
        "traceback": traceback.format_exc()[-6000:],
    }


def mem_line(step: int, loss: float | None = None) -> str:
    """What a training loop prints every step."""
    lossp = f" loss {loss:.4f}" if loss is not None else ""
    return f"step {step}{lossp} mem {torch.cuda.memory_allocated() / GiB:.2f} GiB"


def alloc_steps(pt: Point, printed: list[str]) -> dict[str, Any]:
    """The synthetic job: each step a transient request R; a leak keeps ``grow`` every step;
    ``state`` jobs create ``grow`` of optimizer-like state at the end of step 1."""
    kept: list[torch.Tensor] = []
    state: list[torch.Tensor] = []
    for step in range(1, pt.steps + 1):
        where, size = "", 0
        try:
            if pt.dynamics == "leak":
                where, size = "kept", pt.grow
                kept.append(kept_outputs(pt.grow))
            where, size = "activations", pt.request
            work = forward_activations(pt.request)
            del work
            if pt.dynamics == "state" and step == 1:
                where, size = "optimizer-state", pt.grow
                state.append(optimizer_state(pt.grow))
        except Exception as e:
            if is_oom(e):
                return failure(step, where, size, e)
            return error(step, where, e)
        printed.append(mem_line(step))
    return {"outcome": "ok", "steps_done": pt.steps}


def mlp_model(m: Mlp) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for _ in range(m.depth):
        layers += [torch.nn.Linear(m.width, m.width, device=DEVICE), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def mlp_steps(m: Mlp, printed: list[str]) -> dict[str, Any]:
    """A real training loop: forward, backward, AdamW step (its state is created at step 1)."""
    torch.manual_seed(0)
    step, where = 0, "model"
    try:
        model = mlp_model(m)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for step, tokens in enumerate(m.tokens, 1):
            where = "forward"
            x = torch.randn(tokens, m.width, device=DEVICE)
            loss = model(x).pow(2).mean()
            where = "backward"
            loss.backward()
            where = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            where = "loss.item"
            value = loss.item()
            del x, loss
            printed.append(mem_line(step, value))
    except Exception as e:
        if is_oom(e):
            return failure(step, where, 0, e)
        return error(step, where, e)
    return {"outcome": "ok", "steps_done": len(m.tokens)}


def probe_mlp(m: Mlp) -> dict[str, int]:
    """Peak allocated / reserved of an unconstrained run, above what was held before it."""
    settle()
    base_alloc, base_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    out = mlp_steps(m, [])
    peak_alloc = torch.cuda.max_memory_allocated() - base_alloc
    peak_res = torch.cuda.max_memory_reserved() - base_res
    result = {"peak_allocated": int(peak_alloc), "peak_reserved": int(peak_res)}
    if out["outcome"] != "ok":
        result["probe_outcome"] = out["outcome"]  # type: ignore[assignment]
    settle()
    return result


def warm_up() -> None:
    """Load every kernel the points use, so lazily loaded modules do not move free memory
    between points (CUDA loads kernels on first use, into device memory)."""
    a = torch.randn(1024, 1024, device=DEVICE)
    (a @ a).sum().item()
    mlp_steps(Mlp(width=1024, depth=2, tokens=(512, 256)), [])
    del a
    settle()


def settle() -> dict[str, int]:
    """Free what the last point left: objects, cuBLAS workspaces, the cache; reset peaks."""
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return memory_state(detail=False)
