"""What the record says: the allocator's state at the failed allocation, as plain JSON data.

Schema version 1 (all sizes in bytes, all counts plain integers; ``null`` when not known):

  probe               "gpu-auditor" (identifies the record)
  v                   1
  status              "ok" | "no-hooks" | "async-backend" | "error: <short text>"
  torch               torch.__version__
  pid, rank           the process id; $RANK when it is a number (torchrun), else null
  backend             "native" | "cudaMallocAsync" | another allocator's name | null
  device              CUDA device index of the failed allocation
  oom_count           out-of-memory events this process has seen (a caught-and-retried OOM
                      overwrites the previous record with the next count)
  request_bytes       the size the allocator tried to get (the "Tried to allocate" figure:
                      2 MiB for a small-pool request, 20 MiB below 10 MiB, else rounded to 2 MiB)
  device_total_bytes, device_free_bytes   cudaMemGetInfo after the failure
  allocated_bytes, reserved_bytes         the caching allocator's current totals (all pools)
  fraction, allowed_bytes                 the per-process memory fraction and the bytes it
                                          allows; null when no fraction below 1 is set
  expandable_segments true | false | null (from the allocator's own settings)
  alloc_conf          the allocator settings string the allocator read (at most 200 chars)
  private_pool_bytes  reserved in private pools (CUDA graphs), not usable by other requests
  pools               {"large": P, "small": P}, the default pool's segments by segment type:
                      P = {segments, segment_bytes, free_bytes, largest_free_bytes,
                           pending_free_bytes, hist}
                      free = blocks "inactive"; pending = freed, awaiting another stream;
                      hist = segment counts by size: <=2 MiB, <=20 MiB, <=128 MiB, <=1 GiB,
                      <=8 GiB, larger
  live_allocations    number of live blocks in the default pool
  top_allocations_bytes  the largest live block sizes, largest first (cut first to fit 4 KiB)
  cut                 {field: items dropped} when the record was cut to fit; absent otherwise

At the failure the allocator has already returned every wholly free segment to CUDA, so the
free blocks left in ``pools`` sit in segments that also hold live blocks: the fragmentation.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable
from typing import Any

PROBE_ID = "gpu-auditor"
SCHEMA_VERSION = 1
TOP_ALLOCATIONS = 24
ALLOC_CONF_CHARS = 200
HIST_EDGES = (2 << 20, 20 << 20, 128 << 20, 1 << 30, 8 << 30)
"""Upper edges of the segment-size histogram (bytes); one more bucket for larger."""


def allocator_backend(torch: Any) -> str | None:
    try:
        name = torch.cuda.get_allocator_backend()
    except Exception:
        return None
    return name if isinstance(name, str) else None


def identity(torch: Any, state: Any) -> dict[str, Any]:
    rank = os.environ.get("RANK", "")
    return {
        "probe": PROBE_ID,
        "v": SCHEMA_VERSION,
        "status": state.status,
        "torch": str(getattr(torch, "__version__", ""))[:40] or None,
        "pid": os.getpid(),
        "rank": int(rank) if rank.isdigit() and len(rank) < 7 else None,
        "backend": state.backend,
        "oom_count": state.oom_count,
    }


def at_oom(
    torch: Any, state: Any, device: int, alloc: int, device_alloc: int, device_free: int
) -> dict[str, Any]:
    """The record for one failed allocation, from inside the allocator's observer."""
    record = identity(torch, state)
    record.update(device=int(device), request_bytes=int(alloc), device_free_bytes=int(device_free))
    total = _quiet(lambda: int(torch.cuda.mem_get_info(device)[1]))
    record["device_total_bytes"] = total
    allowed = int(device_alloc) if total is not None and 0 < device_alloc < total else None
    record.update(memory_fraction(torch, device, allowed, total))
    try:
        record.update(allocator_totals(torch, device))
        if state.backend in (None, "native"):
            snapshot = torch.cuda.memory._snapshot()
            record.update(settings(snapshot.get("allocator_settings")))
            record.update(summarize_segments(snapshot.get("segments", ()), int(device)))
        else:
            record.update(settings(None))
    except Exception as exc:
        record["status"] = "error: " + f"{type(exc).__name__}: {exc}".replace("\n", " ")[:80]
    return record


def at_exit(torch: Any, state: Any) -> dict[str, Any]:
    """A short record from ``sys.excepthook`` where no observer ran (status says why)."""
    record = identity(torch, state)
    if record["status"] == "ok":
        record["status"] = "no-hooks"
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not _quiet(cuda.is_initialized):
        return record
    device = _quiet(cuda.current_device)
    record["device"] = device
    if device is None:
        return record
    info = _quiet(lambda: cuda.mem_get_info(device))
    if info is not None:
        record.update(device_free_bytes=int(info[0]), device_total_bytes=int(info[1]))
    fraction = _quiet(lambda: float(torch._C._cuda_getMemoryFraction(device)))
    total = record.get("device_total_bytes")
    if fraction is not None and 0 < fraction < 1 and total:
        record.update(fraction=round(fraction, 6), allowed_bytes=int(fraction * total))
    totals = _quiet(lambda: allocator_totals(torch, device))
    if totals:
        record.update(totals)
    record.update(settings(None))
    return record


def memory_fraction(
    torch: Any, device: int, allowed: int | None, total: int | None
) -> dict[str, Any]:
    """The fraction the allocator enforces: its own figure where the release exposes it."""
    if allowed is None or not total:
        return {"fraction": None, "allowed_bytes": None}
    fraction = _quiet(lambda: float(torch._C._cuda_getMemoryFraction(device)))
    if fraction is None or not 0 < fraction < 1:
        fraction = allowed / total
    return {"fraction": round(fraction, 6), "allowed_bytes": allowed}


def allocator_totals(torch: Any, device: int) -> dict[str, Any]:
    stats = torch.cuda.memory_stats(device)
    return {
        "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
    }


def settings(allocator_settings: Any) -> dict[str, Any]:
    """``expandable_segments`` and the settings string, from the snapshot or the environment."""
    expandable = None
    conf = None
    if isinstance(allocator_settings, dict):
        value = allocator_settings.get("expandable_segments")
        expandable = value if isinstance(value, bool) else None
        text = allocator_settings.get("PYTORCH_CUDA_ALLOC_CONF")
        conf = text if isinstance(text, str) and text else None
    if conf is None:
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    if expandable is None and conf:
        expandable = _expandable_from_conf(conf)
    return {
        "expandable_segments": expandable,
        "alloc_conf": conf[:ALLOC_CONF_CHARS] if conf else None,
    }


def _expandable_from_conf(conf: str) -> bool | None:
    """The value in ``key:value,...`` text (the last one wins, as in the allocator)."""
    found = None
    for part in conf.split(","):
        key, _, value = part.partition(":")
        if key.strip() == "expandable_segments":
            found = value.strip() == "True"
    return found


def summarize_segments(segments: Iterable[Any], device: int) -> dict[str, Any]:
    """Per pool: segments, their sizes, free and largest free block; the largest live blocks."""
    pools = {"large": _empty_pool(), "small": _empty_pool()}
    private = 0
    live: list[int] = []
    for segment in segments:
        if segment.get("device", device) != device:
            continue
        size = int(segment.get("total_size", 0))
        pool_id = segment.get("segment_pool_id")
        if pool_id is not None and tuple(pool_id) != (0, 0):
            private += size
            continue
        pool = pools["small" if segment.get("segment_type") == "small" else "large"]
        pool["segments"] += 1
        pool["segment_bytes"] += size
        pool["hist"][_bucket(size)] += 1
        for block in segment.get("blocks", ()):
            state = block.get("state")
            block_size = int(block.get("size", 0))
            if state == "inactive":
                pool["free_bytes"] += block_size
                pool["largest_free_bytes"] = max(pool["largest_free_bytes"], block_size)
            elif state == "active_allocated":
                live.append(block_size)
            elif isinstance(state, str) and ("pending" in state or "awaiting" in state):
                pool["pending_free_bytes"] += block_size
    return {
        "private_pool_bytes": private,
        "pools": pools,
        "live_allocations": len(live),
        "top_allocations_bytes": heapq.nlargest(TOP_ALLOCATIONS, live),
    }


def _empty_pool() -> dict[str, Any]:
    return {
        "segments": 0,
        "segment_bytes": 0,
        "free_bytes": 0,
        "largest_free_bytes": 0,
        "pending_free_bytes": 0,
        "hist": [0] * (len(HIST_EDGES) + 1),
    }


def _bucket(size: int) -> int:
    for i, edge in enumerate(HIST_EDGES):
        if size <= edge:
            return i
    return len(HIST_EDGES)


def _quiet(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None
