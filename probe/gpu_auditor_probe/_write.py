"""Where the record goes: one marker line, bounded, to the termination-message path and stderr.

The line is ``gpu-auditor-probe-record {compact JSON}\\n``. Kubernetes copies at most 4 KiB of
the termination-message file into the pod's status, so the line is cut to fit the bound
(default 4000 bytes, at least 1024): the list of the largest live allocations goes first, then
the settings string, then the histograms; ``cut`` says what went.

The file is replaced atomically (a temporary file beside it, then ``rename``) where the path
allows. ``/dev/termination-log`` is a file kubelet bind-mounts into the container, and nothing
can be renamed over a mount point: there, and wherever the rename fails, the file is truncated
and written in place under an exclusive ``flock`` (ranks of one pod share the file).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from . import ENV_MAX_BYTES, ENV_PATH, ENV_STDERR

MARKER = "gpu-auditor-probe-record "
DEFAULT_PATH = "/dev/termination-log"
DEFAULT_MAX_BYTES = 4000
MIN_MAX_BYTES = 1024  # Kubernetes splits 12 KiB among a pod's containers: 1 KiB for 12
KUBERNETES_MAX_BYTES = 4096
ESSENTIAL = (
    "probe", "v", "status", "torch", "pid", "rank", "backend", "device", "oom_count",
    "request_bytes", "device_total_bytes", "device_free_bytes", "allocated_bytes",
    "reserved_bytes", "fraction", "allowed_bytes", "expandable_segments",
)  # fmt: skip


def publish(record: dict[str, Any]) -> None:
    line = encode(record, max_bytes())
    path = target_path()
    if path:
        with contextlib.suppress(OSError):
            write_file(path, line)
    if os.environ.get(ENV_STDERR, "1") != "0":
        with contextlib.suppress(OSError):
            _write_all(2, line)


def max_bytes() -> int:
    raw = os.environ.get(ENV_MAX_BYTES, "")
    value = int(raw) if raw.isdigit() and len(raw) < 6 else DEFAULT_MAX_BYTES
    return min(max(value, MIN_MAX_BYTES), KUBERNETES_MAX_BYTES)


def target_path() -> str | None:
    """``$GPU_AUDITOR_PROBE_PATH`` (empty: none); else the kubelet's file if it exists."""
    explicit = os.environ.get(ENV_PATH)
    if explicit is not None:
        return explicit or None
    return DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None


def line_of(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return (MARKER + text + "\n").encode("ascii")


def encode(record: dict[str, Any], limit: int) -> bytes:
    """The marker line, at most ``limit`` bytes: cut the least useful parts first."""
    rec = dict(record)
    line = line_of(rec)
    if len(line) <= limit:
        return line
    cut: dict[str, int] = {}
    rec["cut"] = cut
    top = list(rec.get("top_allocations_bytes") or ())
    while top and len(line) > limit:
        top.pop()
        rec["top_allocations_bytes"] = top
        cut["top_allocations_bytes"] = cut.get("top_allocations_bytes", 0) + 1
        line = line_of(rec)
    for key in ("alloc_conf", "hist"):
        if len(line) <= limit:
            return line
        _drop(rec, key, cut)
        line = line_of(rec)
    if len(line) <= limit:
        return line
    short = {k: rec[k] for k in ESSENTIAL if k in rec}
    short["status"] = str(short.get("status", ""))[:40]
    pools = rec.get("pools")
    if isinstance(pools, dict):  # what the verdict needs from each pool
        keep = ("free_bytes", "largest_free_bytes")
        short["pools"] = {n: {k: p.get(k) for k in keep} for n, p in pools.items()}
    short["cut"] = {"all_but_essential": 1}
    line = line_of(short)
    if len(line) <= limit:
        return line
    return line_of({"probe": rec.get("probe"), "v": rec.get("v"), "status": "error: too big"})


def _drop(rec: dict[str, Any], key: str, cut: dict[str, int]) -> None:
    if key == "hist":
        pools = rec.get("pools")
        if isinstance(pools, dict):
            rec["pools"] = {
                n: {k: v for k, v in p.items() if k != "hist"} for n, p in pools.items()
            }
            cut["hist"] = len(pools)
    elif rec.get(key) is not None:
        rec[key] = None
        cut[key] = 1


def write_file(path: str, data: bytes) -> None:
    """Replace ``path`` atomically where possible, else truncate and write it in place."""
    if _in_place_only(path):
        _overwrite(path, data)
        return
    try:
        _replace(path, data)
    except OSError:
        _overwrite(path, data)


def _in_place_only(path: str) -> bool:
    """A mount point, a link or anything but a regular file cannot be renamed over."""
    try:
        if os.path.islink(path) or os.path.ismount(path):
            return True
        return os.path.exists(path) and not os.path.isfile(path)
    except OSError:
        return True


def _replace(path: str, data: bytes) -> None:
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.probe-{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _overwrite(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        with contextlib.suppress(OSError):  # a character device: nothing to truncate
            os.ftruncate(fd, 0)
        _write_all(fd, data)
    finally:
        os.close(fd)  # closing releases the lock


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
