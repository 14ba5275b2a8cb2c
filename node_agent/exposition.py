"""The Prometheus text exposition format (0.0.4), written by the agent itself.

Not prometheus_client: docs/dependencies.md has the measured reasons (RSS once imported, and a
scrape that rebuilds and re-encodes every family). This module is the whole of what /metrics
needs:

- ``Family``: one metric family (name, help, type, label names, samples);
- ``render``: families → the text format, with label values and help escaped as the format
  says, integers written exactly (byte figures are exact up to 2**63-1, not rounded to a float);
- ``process_families``: the standard ``process_*`` metrics of this process (as every Prometheus
  client library names them), read from ``/proc/self`` on each scrape; ``process_text`` the
  same already rendered, with fewer system calls and no Family objects (what /metrics serves);
- ``Exposition``: the body of /metrics, rendered once per sampling pass (every scrape between two
  passes would render the same bytes) plus the live ``process_*`` families per scrape, gzip
  when the scraper accepts it.

The text format is what every Prometheus (and OpenMetrics-capable scraper) accepts; the agent
serves nothing else and does not negotiate OpenMetrics.
"""

from __future__ import annotations

import math
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGE, COUNTER = "gauge", "counter"


@dataclass(slots=True)
class Family:
    """A metric family. ``name`` is the exposed name (a counter's ends with ``_total``)."""

    name: str
    doc: str
    type: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[Sequence[str], float]] = field(default_factory=list)

    def add(self, values: Sequence[str], value: float) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name}: {len(values)} label values for "
                             f"{len(self.labels)} labels")
        self.samples.append((values, value))


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: integers exactly, floats as Python's shortest repr, NaN and +-Inf as
    the format spells them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Family]) -> bytes:
    """The text format; labels in name order (as prometheus_client wrote them before)."""
    out: list[str] = []
    for f in families:
        out.append(f"# HELP {f.name} {escape_help(f.doc)}\n# TYPE {f.name} {f.type}\n")
        order = sorted(range(len(f.labels)), key=f.labels.__getitem__)
        names = [f.labels[i] for i in order]
        for values, value in f.samples:
            if f.labels:
                labels = ",".join(f'{k}="{escape_label(values[i])}"'
                                  for k, i in zip(names, order, strict=True))
                out.append(f"{f.name}{{{labels}}} {number(value)}\n")
            else:
                out.append(f"{f.name} {number(value)}\n")
    return "".join(out).encode("utf-8")


# ---- process_* metrics of this process ----------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_boot_time: float | None = None


def _btime(proc: str) -> float:
    global _boot_time
    if _boot_time is None:
        with open(f"{proc}/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    _boot_time = float(line.split()[1])
                    break
            else:
                raise OSError("no btime in /proc/stat")
    return _boot_time


_STAT_FDS: dict[str, int] = {}  # proc root -> its self/stat, kept open


def _read_stat(proc: str) -> bytes:
    """``<proc>/self/stat``, read with one ``pread`` on a descriptor kept open (procfs renders
    it afresh on every read from offset 0): one system call a scrape instead of three."""
    fd = _STAT_FDS.get(proc)
    if fd is None:
        fd = os.open(f"{proc}/self/stat", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if _STAT_FDS.setdefault(proc, fd) != fd:  # another thread opened it meanwhile
            os.close(fd)
            fd = _STAT_FDS[proc]
    try:
        return os.pread(fd, 4096, 0)
    except OSError:
        if _STAT_FDS.get(proc) == fd:
            del _STAT_FDS[proc]
            os.close(fd)
        raise


_FD_COUNT_BY_SIZE: dict[str, bool] = {}  # proc root -> stat's size of self/fd is the count


def _open_fds(proc: str) -> int:
    """Open descriptors. Linux 6.2+ gives their number as the size of ``/proc/self/fd``: one
    ``stat`` (older kernels say 0); else the directory is listed (one system call per entry,
    its own descriptor counted, as prometheus_client counts). Which one is found out once."""
    path = f"{proc}/self/fd"
    by_size = _FD_COUNT_BY_SIZE.get(proc)
    if by_size:
        return os.stat(path).st_size
    listed = len(os.listdir(path))
    if by_size is None:
        size = os.stat(path).st_size
        # the listing counted its own descriptor; a descriptor opened or closed meanwhile by
        # another thread makes them differ: listed, as before, and asked again next time
        if size and size == listed - 1:
            _FD_COUNT_BY_SIZE[proc] = True
            return size
        if size == 0:
            _FD_COUNT_BY_SIZE[proc] = False
    return listed


_PROCESS = (
    ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", COUNTER),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes.", GAUGE),
    ("process_resident_memory_bytes", "Resident memory size in bytes.", GAUGE),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
     GAUGE),
    ("process_open_fds", "Number of open file descriptors.", GAUGE),
    ("process_max_fds", "Maximum number of open file descriptors.", GAUGE),
)
# each family's HELP and TYPE lines and its sample's name, rendered once
_PROCESS_TEXT = tuple(f"# HELP {name} {escape_help(doc)}\n# TYPE {name} {kind}\n{name} "
                      for name, doc, kind in _PROCESS)


def _process_values(proc: str) -> list[float] | None:
    """The ``_PROCESS`` figures in order (``process_max_fds`` where the platform has it), or
    None where ``/proc`` cannot be read."""
    try:
        parts = _read_stat(proc).rsplit(b")", 1)[-1].split()
        utime, stime = int(parts[11]), int(parts[12])
        start, vsize, rss = int(parts[19]), int(parts[20]), int(parts[21])
        start_seconds = _btime(proc) + start / _TICKS
        fds = _open_fds(proc)
    except (OSError, IndexError, ValueError):
        return None
    values: list[float] = [(utime + stime) / _TICKS, vsize, rss * _PAGE, start_seconds, fds]
    if _NOFILE is not None:
        soft = _NOFILE()
        values.append(math.inf if soft < 0 else soft)
    return values


def process_families(proc: str = "/proc") -> list[Family]:
    """``process_*`` of this process, as Prometheus client libraries name them; empty where
    ``/proc`` cannot be read (never an exception: a scrape must not fail for it)."""
    values = _process_values(proc)
    if values is None:
        return []
    return [Family(name, doc, kind, (), [((), value)])
            for (name, doc, kind), value in zip(_PROCESS, values, strict=False)]


def process_text(proc: str = "/proc") -> bytes:
    """``render(process_families(proc))``, as cheaply as a scrape allows: the figures read with
    two system calls (``pread`` of ``stat``, ``stat`` of ``fd``; and ``getrlimit``) into lines
    whose HELP and TYPE are written once."""
    values = _process_values(proc)
    if values is None:
        return b""
    return "".join([text + number(value) + "\n"
                    for text, value in zip(_PROCESS_TEXT, values, strict=False)]).encode()


def _nofile() -> Callable[[], int] | None:
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    return lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0]


_NOFILE = _nofile()


# ---- /metrics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rendered:
    """One pass's families as text, and (once a scraper has asked for gzip) compressed: the
    compressor's state after the text, copied per scrape to add the live families and end the
    stream. One gzip member per body, the pass's text compressed once."""

    snapshot: object
    text: bytes
    gzip_head: bytes | None = None
    gzip_state: Any = None  # a zlib compress object, never finished


class Exposition:
    """The /metrics body: the snapshot's families rendered once per pass (``prime``, on the
    sampling thread), shared by every scrape until the next pass, then the live families.
    gzip (level ``GZIP_LEVEL``) when the scraper accepts it: the pass's text is compressed once
    (in ``prime`` from the first gzip scrape on), each scrape compresses only the live part."""

    def __init__(self, families: Callable[[], Iterable[Family]],
                 live: Callable[[], Iterable[Family] | bytes] | None = None) -> None:
        self._families = families
        self._live = live
        self._lock = threading.Lock()
        self._rendered: _Rendered | None = None
        self._gzip_wanted = False  # a scraper asked for gzip: prime() compresses too

    def cached(self, snapshot: object, gzip: bool = False) -> bool:
        """True when this snapshot is rendered (and compressed, for ``gzip``) already: a scrape
        is then a lookup plus the live families, cheap enough for the HTTP loop itself."""
        with self._lock:
            r = self._rendered
        return r is not None and r.snapshot is snapshot and (not gzip or r.gzip_state is not None)

    def prime(self, snapshot: object) -> None:
        """Render the families of this snapshot (the sampling thread, after each pass)."""
        self._render(snapshot, self._gzip_wanted)

    def _render(self, snapshot: object, gzip: bool) -> _Rendered:
        text = render(self._families())
        rendered = _Rendered(snapshot, text)
        if gzip:
            rendered = _compressed(rendered)
        with self._lock:
            self._rendered = rendered
        return rendered

    def _current(self, snapshot: object, gzip: bool) -> _Rendered:
        with self._lock:
            r = self._rendered
        if r is None or r.snapshot is not snapshot:
            return self._render(snapshot, gzip)
        if gzip and r.gzip_state is None:
            r = _compressed(r)
            with self._lock:
                if self._rendered is not None and self._rendered.snapshot is snapshot:
                    self._rendered = r
        return r

    def body(self, gzip: bool, snapshot: object) -> tuple[list[bytes], str, str | None]:
        """The body in pieces (the pass's rendering is one object shared by every scrape, not
        copied per request), its content type and its Content-Encoding."""
        if gzip:
            self._gzip_wanted = True
        r = self._current(snapshot, gzip)
        live = self._live() if self._live is not None else b""
        if not isinstance(live, bytes):
            live = render(live)
        if not gzip:
            return ([r.text, live] if live else [r.text]), CONTENT_TYPE, None
        assert r.gzip_head is not None
        state = r.gzip_state.copy()
        return [r.gzip_head, state.compress(live) + state.flush()], CONTENT_TYPE, "gzip"

    def render(self, snapshot: object, gzip: bool = False) -> bytes:
        """The whole /metrics body (for tests and ``--once``)."""
        return b"".join(self.body(gzip, snapshot)[0])


GZIP_LEVEL = 1  # bench/results/agent_gzip.md: level 1 against 6 on the 2,048-series body


def _compressed(r: _Rendered) -> _Rendered:
    state = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    head = state.compress(r.text)
    return _Rendered(r.snapshot, r.text, head, state)
