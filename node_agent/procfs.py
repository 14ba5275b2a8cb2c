"""Reads ``/proc/<pid>``: start time, command name and pod, cached per (pid, start time).

The root is a parameter (``--proc-root``): tests and the fake node hand in a directory, and an
agent without ``hostPID`` reads the host's ``/proc`` mounted elsewhere (NVML's pids are the
host's). Nothing here reads the agent's own ``/proc`` or depends on its own pid.

A pid can vanish or be reused between NVML listing it and this read: a failed read gives None
(the caller labels it an unknown pod) and the cache is keyed on the start time from
``/proc/<pid>/stat``, so a reused pid is read afresh.

Every read is bounded and cannot block: only regular files are read (a FIFO or a device planted
in a ``--proc-root`` directory is refused, not waited on), at most ``*_MAX_BYTES`` of each; a
longer file is a failed read. ``comm`` is chosen by the process itself (``prctl``), so it is
cleaned before it can become a label: control and other unprintable characters become ``?``
and it is cut to ``COMM_MAX_CHARS``.
"""

from __future__ import annotations

import os
import stat as st
from collections.abc import Iterable
from pathlib import Path

from node_agent.cgroup import parse_cgroup_file
from node_agent.model import Placement, ProcInfo

STAT_MAX_BYTES = 4096  # a real one is ~300 bytes; comm inside it is at most 64
CGROUP_MAX_BYTES = 65536  # one line per v1 hierarchy, each path well under 4 KiB
COMM_MAX_BYTES = 256  # the kernel keeps 16 (64 for kernel threads)
COMM_MAX_CHARS = 64
_START_TIME_MAX_DIGITS = 20  # an unsigned 64-bit number
_INTERNED_MAX = 4096  # distinct cgroup texts / command names kept for sharing


def parse_start_time(stat: str | bytes) -> int:
    """Field 22 (``starttime``, clock ticks since boot) of ``/proc/<pid>/stat``.

    ``comm`` (field 2) is in parentheses and may itself hold spaces and parentheses, so the
    fields are counted from the last ``)``. Raises ValueError on garbage.
    """
    data = stat.encode() if isinstance(stat, str) else stat
    rest = data[data.rindex(b")") + 2 :].split()
    if len(rest) < 20:
        raise ValueError(f"{len(rest) + 2} fields in stat, not the 22 or more of the kernel's")
    field = rest[19]  # rest[0] is field 3 (state)
    if not (field.isdigit() and len(field) <= _START_TIME_MAX_DIGITS):
        raise ValueError(f"start time is not a number: {field[:32]!r}")
    return int(field)


def clean_comm(raw: bytes) -> str:
    """A command name fit for a label: decoded, unprintable characters as ``?``, cut."""
    text = raw.decode("utf-8", errors="replace").removesuffix("\n")
    return "".join(c if c.isprintable() else "?" for c in text[:COMM_MAX_CHARS])


def read_bounded(path: str, limit: int) -> bytes:
    """The content of a regular file of at most ``limit`` bytes; OSError or ValueError else.

    Opened non-blocking and without following a final symlink, so nothing placed where a
    ``/proc`` file should be (a FIFO, a device, a link to one) can stall or flood the agent.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not st.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"{path}: longer than {limit} bytes")
    finally:
        os.close(fd)


class ProcReader:
    """Reads and caches what ``/proc`` says about GPU processes."""

    def __init__(self, root: Path | str = "/proc") -> None:
        self._root = str(root)
        self._cache: dict[int, ProcInfo] = {}
        # Processes of one container share their cgroup text and usually their name: parse
        # each text once and keep one object for all (thousands of processes, a few pods).
        self._placements: dict[bytes, Placement] = {}
        self._comms: dict[bytes, str] = {}
        self.errors = 0  # failed reads since start (vanished pids, permissions, garbage)

    def read(self, pid: int) -> ProcInfo | None:
        """The process's info, or None when it cannot be read (gone, no permission, garbage)."""
        base = f"{self._root}/{pid}"
        try:
            start = parse_start_time(read_bounded(f"{base}/stat", STAT_MAX_BYTES))
        except (OSError, ValueError, IndexError):
            self._cache.pop(pid, None)
            self.errors += 1
            return None
        cached = self._cache.get(pid)
        if cached is not None and cached.start_time == start:
            return cached
        try:
            cgroup = self._placement(read_bounded(f"{base}/cgroup", CGROUP_MAX_BYTES))
            comm = self._comm(read_bounded(f"{base}/comm", COMM_MAX_BYTES))
        except (OSError, ValueError):
            self._cache.pop(pid, None)
            self.errors += 1
            return None
        info = ProcInfo(pid=pid, start_time=start, comm=comm, cgroup=cgroup)
        self._cache[pid] = info
        return info

    def _placement(self, raw: bytes) -> Placement:
        placement = self._placements.get(raw)
        if placement is None:
            if len(self._placements) >= _INTERNED_MAX:
                self._placements.clear()
            placement = parse_cgroup_file(raw.decode("utf-8", errors="replace"))
            self._placements[raw] = placement
        return placement

    def _comm(self, raw: bytes) -> str:
        comm = self._comms.get(raw)
        if comm is None:
            if len(self._comms) >= _INTERNED_MAX:
                self._comms.clear()
            comm = self._comms[raw] = clean_comm(raw)
        return comm

    def forget_all_but(self, live: Iterable[int]) -> None:
        """Drop cached pids not seen in the last pass, so the cache stays bounded."""
        keep = set(live)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]
