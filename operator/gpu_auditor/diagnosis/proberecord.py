"""The probe's record (``probe/gpu_auditor_probe``): parsed once, and the verdict it gives alone.

The tenant's container writes the record, so it is hostile input: any bytes, any size, wrong
types, absurd numbers, deep nesting. ``parse_record`` never raises; it returns a frozen
``ProbeRecord`` or None with the reason. A size outside 0..2^60 bytes, a count outside its
range, a wrong type or a figure that contradicts another (a largest free block above the free
total, more free than total on the device) is read as absent, and a verdict that needs it is
``unknown``.

``record_verdict`` (names: R the request, C the free bytes in the cache's blocks of the pool R
uses, B the largest of those blocks, F device free, room = F, or min(F, allowed - reserved)
under a memory fraction):

- ``unknown`` when the status is not ``ok`` or a figure it needs is absent; also when B >= R
  (the cache had a block for it: another stream's, or an oversize block) or room >= R (the
  device had room): the record does not explain that failure.
- ``fragmentation`` when C + room >= R - the cache's free blocks would have covered the request
  had they been one block - and an allocator setting is measured to reclaim enough of them:
  C is material (``FRAG_MIN_UNALLOCATED_BYTES``, ``FRAG_MIN_SHARE_OF_RESERVED`` of reserved)
  and the part of R the room lacks is at most ``FRAG_MAX_NEED_SHARE`` of C (``thresholds.py``,
  with the measured rows). Covering blocks that fail this are ``capacity-or-leak``, and the
  reason says the blocks would cover it but too much must be reclaimed.
- ``cap`` when a memory fraction is set and F >= R: the device had the room the cap withheld.
- ``capacity-or-leak`` otherwise: even packed, the memory was not there.

At the failure PyTorch has already returned every wholly free segment to CUDA, so C is only
memory in segments that also hold live blocks: exactly what ``expandable_segments`` reclaims.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .sizes import format_size as fs
from .thresholds import FRAG_MAX_NEED_SHARE, FRAG_MIN_SHARE_OF_RESERVED, FRAG_MIN_UNALLOCATED_BYTES

MARKER: Final = "gpu-auditor-probe-record "
"""What starts the record's line in a termination message or a log (the probe's ``MARKER``)."""

PROBE_ID: Final = "gpu-auditor"
SCHEMA_VERSION: Final = 1
MAX_RECORD_BYTES: Final = 16384
"""The probe writes at most 4096 bytes; anything over four times that is not a record."""

MAX_FIGURE_BYTES: Final = 2**60
SMALL_POOL_REQUEST_MAX_BYTES: Final = 2 * 1024**2
"""A small-pool request (<= 1 MiB) makes the allocator try for one 2 MiB segment; large-pool
requests try for 20 MiB or more (``request_bytes`` is that size)."""

STATUSES: Final = ("ok", "no-hooks", "async-backend", "error")
VERDICTS: Final = ("fragmentation", "capacity-or-leak", "cap", "unknown")
POOLS: Final = ("large", "small")
HIST_BUCKETS: Final = 6

_TOKEN = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}")
_PRINTABLE = re.compile(r"[\x20-\x7e]*")
_CUT_KEY = re.compile(r"[a-z_]{1,40}")


@dataclass(frozen=True)
class PoolState:
    """One pool (segment type) of the default memory pool at the failure; bytes or counts."""

    segments: int | None
    segment_bytes: int | None
    free_bytes: int | None
    largest_free_bytes: int | None
    pending_free_bytes: int | None
    histogram: tuple[int, ...] = ()


@dataclass(frozen=True)
class ProbeRecord:
    """A validated record (schema 1). Sizes in bytes; None where absent or not believable."""

    version: int
    status: str  # one of STATUSES
    status_detail: str | None
    torch_version: str | None
    pid: int | None
    rank: int | None
    backend: str | None
    device: int | None
    oom_count: int | None
    request_bytes: int | None
    device_total_bytes: int | None
    device_free_bytes: int | None
    allocated_bytes: int | None
    reserved_bytes: int | None
    fraction: float | None
    allowed_bytes: int | None
    expandable_segments: bool | None
    alloc_conf: str | None
    private_pool_bytes: int | None
    large: PoolState | None
    small: PoolState | None
    live_allocations: int | None
    top_allocations: tuple[int, ...]
    cut: tuple[tuple[str, int], ...]

    def pool(self, name: str) -> PoolState | None:
        return self.small if name == "small" else self.large


@dataclass(frozen=True)
class ParsedRecord:
    """``record`` when valid, else None and ``reason``."""

    record: ProbeRecord | None
    reason: str | None = None


@dataclass(frozen=True)
class ProbeVerdict:
    """The record's own verdict and the figures it used (bytes; None where not used)."""

    kind: str  # one of VERDICTS
    reason: str
    pool: str | None = None
    request_bytes: int | None = None
    cache_free_bytes: int | None = None
    largest_free_bytes: int | None = None
    device_free_bytes: int | None = None
    allowed_bytes: int | None = None
    reserved_bytes: int | None = None
    cap_room_bytes: int | None = None
    room_bytes: int | None = None
    expandable_segments: bool | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _reject(reason: str) -> ParsedRecord:
    return ParsedRecord(None, reason)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def parse_record(data: str | bytes | bytearray) -> ParsedRecord:
    """A record from its JSON (with or without the marker in front). Never raises."""
    if len(data) > MAX_RECORD_BYTES:
        return _reject(f"larger than {MAX_RECORD_BYTES} bytes")
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return _reject("not UTF-8")
    else:
        text = data
    text = text.strip()
    if text.startswith(MARKER.strip()):
        text = text[len(MARKER.strip()) :].strip()
    try:
        raw = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError, TypeError):
        return _reject("not JSON")
    if not isinstance(raw, dict):
        return _reject("not a JSON object")
    if raw.get("probe") != PROBE_ID:
        return _reject("not a gpu-auditor probe record")
    version = raw.get("v")
    if type(version) is not int or version != SCHEMA_VERSION:
        shown = (
            str(version)
            if type(version) is int and abs(version) < 10**9
            else type(version).__name__
        )
        return _reject(f"unsupported schema version ({shown})")
    status = _status(raw.get("status"))
    if status is None:
        return _reject("missing or unknown status")
    return ParsedRecord(_record(raw, *status))


def find_record(text: str | bytes | bytearray) -> ParsedRecord | None:
    """The last record line in a termination message or log text; None when there is none."""
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else bytes(text)
    marker = MARKER.encode("ascii")
    at = data.rfind(marker)
    if at < 0:
        return None
    line_start = data.rfind(b"\n", 0, at) + 1
    at = data.find(marker, line_start)  # the record follows the line's first marker
    end = data.find(b"\n", at)
    end = len(data) if end < 0 else end
    start = at + len(marker)
    # the line's own end (CRLF, or a CR redraw) is dropped before the 16 KiB bound, so a record
    # is judged by its own length: one byte over is refused whatever follows it. (Cut at the
    # bound first and stripped after, a record with "\rX" past byte 16384 was read while a
    # shorter one with the same tail was not.) The copy is one line of an input already held.
    return parse_record(data[start:end].rstrip(b"\r"))


def find_record_in_lines(lines: Iterable[str | bytes]) -> ParsedRecord | None:
    """``find_record`` over lines read one at a time (memory: one line)."""
    last: str | bytes | None = None
    marker = MARKER.encode("ascii")
    for line in lines:
        found = MARKER in line if isinstance(line, str) else marker in line
        if found:
            last = line
    return None if last is None else find_record(last)


def record_verdict(record: ProbeRecord) -> ProbeVerdict:
    """fragmentation, cap, capacity-or-leak or unknown, from the record alone (module doc)."""
    if record.status != "ok":
        detail = f": {record.status_detail}" if record.status_detail else ""
        why = f"the probe could not read the allocator ({record.status}{detail})"
        return ProbeVerdict("unknown", why)
    request = record.request_bytes
    if not request:
        return ProbeVerdict("unknown", "the record has no request size")
    name = "small" if request <= SMALL_POOL_REQUEST_MAX_BYTES else "large"
    pool = record.pool(name)
    free = record.device_free_bytes
    if pool is None or free is None or pool.free_bytes is None or pool.largest_free_bytes is None:
        why = f"the record lacks the {name} pool or the device's free memory"
        return ProbeVerdict("unknown", why, name, request)
    cap_room = None
    room = free
    if record.allowed_bytes is not None:
        if record.reserved_bytes is None:
            why = "a memory fraction is set but the record lacks the reserved bytes"
            return ProbeVerdict("unknown", why, name, request)
        cap_room = max(0, record.allowed_bytes - record.reserved_bytes)
        room = min(free, cap_room)
    base = ProbeVerdict(
        "unknown",
        "",
        pool=name,
        request_bytes=request,
        cache_free_bytes=pool.free_bytes,
        largest_free_bytes=pool.largest_free_bytes,
        device_free_bytes=free,
        allowed_bytes=record.allowed_bytes,
        reserved_bytes=record.reserved_bytes,
        cap_room_bytes=cap_room,
        room_bytes=room,
        expandable_segments=record.expandable_segments,
    )
    big, cache = pool.largest_free_bytes, pool.free_bytes
    under = " under the memory fraction" if cap_room is not None else ""
    unexplained = "the record does not explain the failure"
    if big >= request:
        why = f"the largest free block ({fs(big)}) covers the {fs(request)} request: {unexplained}"
        return replace(base, reason=why)
    if room >= request:
        why = f"the room{under} ({fs(room)}) covers the {fs(request)} request: {unexplained}"
        return replace(base, reason=why)
    need = request - room
    material = cache >= FRAG_MIN_UNALLOCATED_BYTES and (
        record.reserved_bytes is None or cache >= FRAG_MIN_SHARE_OF_RESERVED * record.reserved_bytes
    )
    if cache + room >= request and not (material and need <= FRAG_MAX_NEED_SHARE * cache):
        why = (
            f"capacity-or-leak: {fs(cache)} free in the {name} pool's blocks + {fs(room)} room"
            f"{under} would cover the {fs(request)} request, but {fs(need)} of the cache must be"
            " reclaimed: more than an allocator setting was measured to recover"
        )
        return replace(base, kind="capacity-or-leak", reason=why)
    if cache + room >= request:
        why = (
            f"fragmentation: {fs(cache)} free in the {name} pool's blocks + {fs(room)} room"
            f"{under} cover the {fs(request)} request, but the largest free block is {fs(big)}"
        )
        return replace(base, kind="fragmentation", reason=why)
    if cap_room is not None and free >= request:
        why = (
            f"cap: the memory fraction allows {fs(record.allowed_bytes)}, "
            f"{fs(record.reserved_bytes)} is reserved ({fs(cap_room)} left) and the device "
            f"has {fs(free)} free for the {fs(request)} request"
        )
        return replace(base, kind="cap", reason=why)
    why = (
        f"capacity-or-leak: {fs(cache)} free in the {name} pool's blocks + {fs(room)} room{under}"
        f" fall short of the {fs(request)} request"
    )
    return replace(base, kind="capacity-or-leak", reason=why)


# -- validation of the raw JSON ---------------------------------------------------------------


def _status(value: Any) -> tuple[str, str | None] | None:
    if not isinstance(value, str) or len(value) > 200:
        return None
    if value in STATUSES[:3]:
        return value, None
    if value == "error" or value.startswith("error:"):
        detail = _printable(value[6:].strip(), 120)
        return "error", detail or None
    return None


def _size(value: Any) -> int | None:
    """Bytes: an integer in 0..2^60 (not a bool, not a float), else None."""
    if type(value) is not int or not 0 <= value <= MAX_FIGURE_BYTES:
        return None
    return value


def _count(value: Any, high: int = 2**31) -> int | None:
    if type(value) is not int or not 0 <= value <= high:
        return None
    return value


def _fraction(value: Any) -> float | None:
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 < value <= 1:
        return None
    return float(value)


def _token(value: Any) -> str | None:
    return value if isinstance(value, str) and _TOKEN.fullmatch(value) else None


def _printable(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    value = value[:limit]
    return value if _PRINTABLE.fullmatch(value) else re.sub(r"[^\x20-\x7e]", "?", value)


def _pool(value: Any) -> PoolState | None:
    if not isinstance(value, Mapping):
        return None
    free = _size(value.get("free_bytes"))
    largest = _size(value.get("largest_free_bytes"))
    total = _size(value.get("segment_bytes"))
    if free is not None and largest is not None and largest > free:
        free = largest = None  # contradicts itself: neither figure can be trusted
    if total is not None and free is not None and free > total:
        free = largest = None
    hist = value.get("hist")
    histogram: tuple[int, ...] = ()
    if isinstance(hist, list) and len(hist) == HIST_BUCKETS:
        counts = [_count(h) for h in hist]
        histogram = tuple(c for c in counts if c is not None) if None not in counts else ()
    return PoolState(
        segments=_count(value.get("segments")),
        segment_bytes=total,
        free_bytes=free,
        largest_free_bytes=largest,
        pending_free_bytes=_size(value.get("pending_free_bytes")),
        histogram=histogram,
    )


def _record(raw: dict[str, Any], status: str, detail: str | None) -> ProbeRecord:
    total = _size(raw.get("device_total_bytes"))
    free = _size(raw.get("device_free_bytes"))
    if total is not None and free is not None and free > total:
        free = None
    allowed = _size(raw.get("allowed_bytes"))
    if total is not None and allowed is not None and allowed > total:
        allowed = None
    allocated = _size(raw.get("allocated_bytes"))
    reserved = _size(raw.get("reserved_bytes"))
    if allocated is not None and reserved is not None and allocated > reserved:
        reserved = None
    pools = raw.get("pools")
    pools = pools if isinstance(pools, Mapping) else {}
    top = raw.get("top_allocations_bytes")
    sizes = [_size(v) for v in top[:64]] if isinstance(top, list) else []
    cut_raw = raw.get("cut")
    cut = (
        tuple(
            (k, v)
            for k, v in list(cut_raw.items())[:8]
            if isinstance(k, str) and _CUT_KEY.fullmatch(k) and _count(v) is not None
        )
        if isinstance(cut_raw, dict)
        else ()
    )
    expandable = raw.get("expandable_segments")
    return ProbeRecord(
        version=SCHEMA_VERSION,
        status=status,
        status_detail=detail,
        torch_version=_token(raw.get("torch")),
        pid=_count(raw.get("pid")),
        rank=_count(raw.get("rank"), 2**20),
        backend=_token(raw.get("backend")),
        device=_count(raw.get("device"), 1023),
        oom_count=_count(raw.get("oom_count")),
        request_bytes=_size(raw.get("request_bytes")),
        device_total_bytes=total,
        device_free_bytes=free,
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        fraction=_fraction(raw.get("fraction")),
        allowed_bytes=allowed,
        expandable_segments=expandable if isinstance(expandable, bool) else None,
        alloc_conf=_printable(raw.get("alloc_conf"), 200),
        private_pool_bytes=_size(raw.get("private_pool_bytes")),
        large=_pool(pools.get("large")),
        small=_pool(pools.get("small")),
        live_allocations=_count(raw.get("live_allocations")),
        top_allocations=tuple(s for s in sizes if s is not None),
        cut=cut,
    )
