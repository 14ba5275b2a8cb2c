"""Log text: container-log prefixes, and a bounded streaming scan for OOM failures.

The scan never parses every line. It searches each chunk for five byte strings
(``formats.ANCHORS``, each a C-speed ``bytes.find``), checks the lines they hit for a keyword
(``formats.KEYWORDS``), confirms only those lines with the family regexes, and keeps a bounded
window of text around the last failure. Memory stays bounded whatever the input: at most
``PRECONTEXT_BYTES`` + one chunk + ``MAX_LINE_BYTES`` of log, one window, ``HEAD_BYTES`` of the
log's start and ``MAX_OPEN_RANKS`` offsets.

Constants:

- ``CHUNK_BYTES`` (4 MiB): read size for files and slices of in-memory input; big chunks keep the
  per-chunk overhead (one ``find`` per keyword) small against the C search itself.
- ``MAX_LINE_BYTES`` (64 KiB): a "line" with no newline for this long is cut, so binary input or a
  single huge line cannot grow the buffer. Container runtimes split lines at 16 KiB anyway.
- ``PRECONTEXT_BYTES`` (256 KiB): text kept before the reported failure, read for the release the
  job printed and for the memory figures it printed while running (the ``leak`` series).
- ``WINDOW_BEFORE_LINES`` (40) / ``WINDOW_AFTER_BYTES`` (8 KiB) and ``WINDOW_AFTER_LINES`` (16):
  the failure's own lines (the cudaMallocAsync block spans 7 lines; TensorFlow's hint follows).
- ``DEDUPE_WINDOW_BYTES`` (16 KiB): a failure line of the same rank within this distance of the
  previous one, of another family or with the very same message, is the same failure printed
  again (a logged then re-raised exception, NCCL's warning then ``DistBackendError``, figures
  then ``terminate called ... CUDA error: out of memory``): counted once. Two messages of one
  family with different figures are two failures however close.
- ``HEAD_BYTES`` (64 KiB): the log's start, for a release banner printed at start-up.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Final

from . import formats

CHUNK_BYTES: Final = 4 * 1024 * 1024
MAX_LINE_BYTES: Final = 64 * 1024
PRECONTEXT_BYTES: Final = 256 * 1024
WINDOW_BEFORE_LINES: Final = 40
WINDOW_AFTER_BYTES: Final = 8 * 1024
WINDOW_AFTER_LINES: Final = 16
DEDUPE_WINDOW_BYTES: Final = 16 * 1024
HEAD_BYTES: Final = 64 * 1024
MAX_OPEN_RANKS: Final = 1024
_TRIM_SLACK: Final = 1024 * 1024

_KEYWORD_RE: Final = re.compile(b"|".join(re.escape(k) for k in formats.KEYWORDS))
_CRI_RE: Final = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) ([FP]) ?(.*)$")
_RANK_RES: Final = (
    re.compile(r"^\[(?:rank|default)(\d+)\]:\s?"),  # torchrun --tee / elastic agent
    re.compile(r"^\[1,(\d+)\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\[pod/[^\]]*/([^\]/]+)\]\s"),  # kubectl logs --prefix (container name)
    re.compile(r"^(\d{1,5}): (?=\S)"),  # srun --label
)


@dataclass(frozen=True)
class Line:
    """One log line with container-runtime and launcher prefixes removed."""

    text: str
    rank: str | None = None


def _unwrap(raw: str) -> tuple[str, bool]:
    """Strip a CRI (``<ts> stdout F ``) or docker json-file wrapper; True when partial (``P``)."""
    match = _CRI_RE.match(raw)
    if match is not None:
        return match.group(2), match.group(1) == "P"
    if raw.startswith('{"log":'):
        try:
            record = json.loads(raw)
        except ValueError:
            return raw, False
        if isinstance(record, dict) and isinstance(record.get("log"), str):
            log = record["log"]
            return log.rstrip("\n"), not log.endswith("\n")
    return raw, False


def split_rank(text: str) -> Line:
    """``[rank3]: torch.OutOfMemoryError...`` -> Line(text, rank="3")."""
    for pattern in _RANK_RES:
        match = pattern.match(text)
        if match is not None:
            return Line(text[match.end() :], match.group(1))
    return Line(text)


def normalize_lines(raw_lines: Iterable[str]) -> list[Line]:
    """Unwrap container-log records (joining CRI partial lines) and split off rank prefixes."""
    out: list[Line] = []
    partial = ""
    for raw in raw_lines:
        text, is_partial = _unwrap(raw.rstrip("\r"))
        if is_partial:
            partial += text
            if len(partial) > MAX_LINE_BYTES:
                out.append(split_rank(partial))
                partial = ""
            continue
        out.append(split_rank(partial + text))
        partial = ""
    if partial:
        out.append(split_rank(partial))
    return out


def normalize_text(text: str) -> list[Line]:
    return normalize_lines(text.split("\n"))


def decode(data: bytes | bytearray | memoryview) -> str:
    """Bytes to text; undecodable bytes become U+FFFD, never an error."""
    return bytes(data).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Hit:
    """The reported (last) failure: its line and what surrounds it, already normalized."""

    family: str
    line: Line
    before: tuple[Line, ...]
    after: tuple[Line, ...]  # lines after the failure line (same rank when ranks are known)
    precontext: str  # raw text before the failure (bounded), for banners and progress figures


@dataclass(frozen=True)
class ScanResult:
    oom_count: int
    last: Hit | None
    head: str
    bytes_scanned: int


@dataclass
class _Event:
    start: int  # absolute offset of the failure line
    family: str
    priority: int
    rank: str | None
    precontext: bytes
    after: bytes | None = None


class LogScanner:
    """Feed bytes in any pieces, then ``finish()``: counts failures, keeps the last one's window."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # absolute offset of _buf[0]
        self._pos = 0  # absolute offset scanned up to (a line start)
        self._head = bytearray()
        self._count = 0
        # per rank: (end offset, family, key) of its last failure line
        self._open: OrderedDict[str | None, tuple[int, str, str]] = OrderedDict()
        self._event: _Event | None = None
        self._finished: ScanResult | None = None

    @property
    def retained_bytes(self) -> int:
        """Bytes of log held right now (bounded; see the module docstring)."""
        event = self._event
        held = len(event.precontext) + len(event.after or b"") if event else 0
        return len(self._buf) + len(self._head) + held

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._finished is not None:
            raise ValueError("feed() after finish()")
        if len(self._head) < HEAD_BYTES:
            self._head += bytes(data[: HEAD_BYTES - len(self._head)])
        self._buf += data
        start = self._pos - self._base
        newline = self._buf.rfind(b"\n", start)
        if newline >= 0:
            end = newline + 1
        elif len(self._buf) - start > MAX_LINE_BYTES:
            end = len(self._buf)
        else:
            return
        self._scan(start, end)
        self._pos = self._base + end
        self._capture_after(final=False)
        self._trim()

    def finish(self) -> ScanResult:
        if self._finished is None:
            start = self._pos - self._base
            self._scan(start, len(self._buf))
            self._pos = self._base + len(self._buf)
            self._capture_after(final=True)
            self._finished = ScanResult(
                self._count, self._hit(), decode(self._head), self._base + len(self._buf)
            )
            self._buf = bytearray()
        return self._finished

    def _scan(self, start: int, end: int) -> None:
        buf = self._buf
        starts: set[int] = set()
        for anchor in formats.ANCHORS:
            i = buf.find(anchor, start, end)
            while i >= 0:
                line_start = buf.rfind(b"\n", start, i) + 1 or start
                line_end = buf.find(b"\n", i, end)
                if line_end < 0:
                    line_end = end
                if _KEYWORD_RE.search(buf, line_start, line_end) is not None:
                    starts.add(line_start)
                i = buf.find(anchor, line_end, end)
        for line_start in sorted(starts):
            line_end = buf.find(b"\n", line_start, end)
            if line_end < 0:
                line_end = end
            raw = decode(buf[line_start : min(line_end, line_start + MAX_LINE_BYTES)])
            lines = normalize_lines([raw])
            line = lines[0] if lines else Line("")
            found = formats.match_failure(line.text)
            if found is not None:
                family, key = found
                self._on_failure(
                    self._base + line_start, self._base + line_end, family, key, line.rank
                )

    def _on_failure(self, start: int, end: int, family: str, key: str, rank: str | None) -> None:
        priority = formats.PRIORITY[family]
        previous = self._open.pop(rank, None)
        self._open[rank] = (end, family, key)
        if len(self._open) > MAX_OPEN_RANKS:
            self._open.popitem(last=False)
        same_failure = (
            previous is not None
            and start - previous[0] <= DEDUPE_WINDOW_BYTES
            and (family != previous[1] or key == previous[2])
        )
        event = self._event
        if same_failure and event is not None:
            if event.rank == rank and priority > event.priority:
                self._event = _Event(start, family, priority, rank, self._precontext(start))
            return
        self._count += 1
        self._event = _Event(start, family, priority, rank, self._precontext(start))

    def _precontext(self, start: int) -> bytes:
        rel = start - self._base
        return bytes(self._buf[max(0, rel - PRECONTEXT_BYTES) : rel])

    def _capture_after(self, *, final: bool) -> None:
        event = self._event
        if event is None or event.after is not None:
            return
        rel = event.start - self._base
        if final or len(self._buf) - rel >= WINDOW_AFTER_BYTES:
            event.after = bytes(self._buf[rel : rel + WINDOW_AFTER_BYTES])

    def _trim(self) -> None:
        keep_from = self._pos - PRECONTEXT_BYTES
        event = self._event
        if event is not None and event.after is None:
            keep_from = min(keep_from, event.start)
        cut = keep_from - self._base
        if cut > _TRIM_SLACK:
            del self._buf[:cut]
            self._base += cut

    def _hit(self) -> Hit | None:
        event = self._event
        if event is None:
            return None
        after_lines = normalize_text(decode(event.after or b""))
        if not after_lines:
            return None
        line = after_lines[0]
        same_rank = [x for x in after_lines[1:] if line.rank is None or x.rank == line.rank]
        precontext = decode(event.precontext)
        before = normalize_text(precontext)
        if before and before[-1].text == "":
            before.pop()
        return Hit(
            family=event.family,
            line=line,
            before=tuple(before[-WINDOW_BEFORE_LINES:]),
            after=tuple(same_rank[:WINDOW_AFTER_LINES]),
            precontext=precontext,
        )


def scan_bytes(data: bytes | bytearray | memoryview, chunk_bytes: int = CHUNK_BYTES) -> ScanResult:
    """Scan in-memory log bytes in ``chunk_bytes`` slices (no copy of the whole input)."""
    scanner = LogScanner()
    view = memoryview(data)
    for offset in range(0, len(view), chunk_bytes):
        scanner.feed(view[offset : offset + chunk_bytes])
    return scanner.finish()


def scan_stream(stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> ScanResult:
    """Scan a binary file object chunk by chunk; memory stays bounded for any size."""
    scanner = LogScanner()
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            break
        scanner.feed(chunk)
    return scanner.finish()
