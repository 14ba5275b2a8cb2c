"""Log text: container-log prefixes, and a bounded streaming scan for OOM failures.

The scan never parses every line. It searches each chunk for five byte strings
(``formats.ANCHORS``, each a C-speed ``bytes.find``), checks the lines they hit for a keyword
(``formats.KEYWORDS``), confirms only those lines with the family regexes, and keeps a bounded
window of text around the last failure. Memory stays bounded whatever the input: at most
``PRECONTEXT_BYTES`` + one chunk + ``MAX_LINE_BYTES`` + ``LOOKAROUND_BYTES`` of log, one window,
``HEAD_BYTES`` of the log's start and ``MAX_OPEN_RANKS`` offsets.

A line ends at ``\\n`` or at ``\\r``: progress bars (tqdm) redraw themselves with carriage
returns, so a whole training run can be one "line" of megabytes, and the failure printed after
the last redraw must still be found. Every byte is read, however long its line: a line longer
than ``MAX_LINE_BYTES`` is read in blocks of that size, each with ``LOOKAROUND_BYTES`` of the
next block, so a message across a block edge is seen whole; a failure is reported by the block
its wording starts in, so once. Each step is linear in the bytes it reads: no search goes back
over text it has already read, whatever the input.

Constants:

- ``CHUNK_BYTES`` (4 MiB): read size for files and slices of in-memory input; big chunks keep the
  per-chunk overhead (one ``find`` per keyword) small against the C search itself.
- ``MAX_LINE_BYTES`` (64 KiB): the longest line confirmed whole (decoded, unwrapped, matched);
  a longer one is read in blocks. Container runtimes split lines at 16 KiB anyway.
- ``LOOKAROUND_BYTES`` (1 KiB): read past a block's end, more than the longest text a family's
  pattern matches (``formats.MAX_MATCH_CHARS`` characters of up to 4 bytes).
- ``PRECONTEXT_BYTES`` (256 KiB): text kept before the reported failure, read for the release the
  job printed and for the memory figures it printed while running (the ``leak`` series).
- ``WINDOW_BEFORE_LINES`` (40) / ``WINDOW_AFTER_BYTES`` (8 KiB, counted from the failure
  line's end whatever its length) and ``WINDOW_AFTER_LINES`` (16): the failure's own lines
  (the cudaMallocAsync block spans 7 lines; TensorFlow's hint follows).
- ``DEDUPE_WINDOW_BYTES`` (16 KiB): a failure line of the same rank within this distance of the
  previous one, of another family or with the very same message, is the same failure printed
  again (a logged then re-raised exception, NCCL's warning then ``DistBackendError``, figures
  then ``terminate called ... CUDA error: out of memory``): counted once. Two messages of one
  family with different figures are two failures however close.
- ``HEAD_BYTES`` (64 KiB): the log's start, for a release banner printed at start-up.
- ``TAIL_BYTES`` (32 KiB): the log's end, read for what the job printed after the reported
  failure (a later, unrelated error means the failure was handled: ``aftermath.py``); the
  buffer always holds it, as it holds the ``PRECONTEXT_BYTES`` before the scan position.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Final

from . import formats
from .progress import made_progress

CHUNK_BYTES: Final = 4 * 1024 * 1024
MAX_LINE_BYTES: Final = 64 * 1024
LOOKAROUND_BYTES: Final = 1024
PRECONTEXT_BYTES: Final = 256 * 1024
WINDOW_BEFORE_LINES: Final = 40
WINDOW_AFTER_BYTES: Final = 8 * 1024
WINDOW_AFTER_LINES: Final = 16
DEDUPE_WINDOW_BYTES: Final = 16 * 1024
HEAD_BYTES: Final = 64 * 1024
TAIL_BYTES: Final = 32 * 1024
LAST_LINE_BYTES: Final = 1024  # the log's end read for a localized "Killed" (``_read_last_line``)
MAX_OPEN_RANKS: Final = 1024
_TRIM_SLACK: Final = 1024 * 1024
_PREFIX_BYTES: Final = 256  # a line's start read for its container and rank prefixes
_CONTEXT_BYTES: Final = 16  # read before a block, for the patterns' look-behinds (``\\b``)
_WORD_BACK_BYTES: Final = 128  # how far a failure's start goes back over its exception's name
_NEWLINE: Final = ord("\n")
_WORD_BYTES: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")

_KEYWORD_RE: Final = re.compile(formats.KEYWORD_PATTERN.encode("ascii"))
_LOCALIZED_KILLED_RE: Final = re.compile(formats.LOCALIZED_KILLED_PATTERN)
_BARE_MEMORY_ERROR_RE: Final = re.compile(formats.BARE_MEMORY_ERROR_PATTERN)
_HOST_REFUSED_RE: Final = re.compile(formats.HOST_REFUSED_PATTERN)
_KILLED_AFTER_BAR_RE: Final = re.compile(formats.KILLED_AFTER_BAR_PATTERN)
_CRI_RE: Final = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) ([FP]) ?(.*)$")
_DOCKER_JSON_RE: Final = re.compile(r'\{"log":\s{0,8}"((?:[^"\\]++|\\.)*+)"')
"""docker's json-file record (``{"log":"...\\n","stream":...}``): only its leading ``log`` string
is read, by a linear pattern and a decode of that one string literal, never a parse of the whole
record (nested input could recurse without bound)."""
_RANK_RES: Final = (
    re.compile(r"^\[(?:rank|default)(\d{1,6})\]:\s?"),  # torchrun --tee / elastic agent
    re.compile(r"^\[1,(\d{1,6})\]<std(?:out|err)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\[pod/[^\]]*/([^\]/]+)\]\s"),  # kubectl logs --prefix (container name)
    re.compile(r"^(\d{1,5}): (?=\S)"),  # srun --label
    # Ray's worker prefix, and vLLM's multiprocess workers' (their logger's level, time and
    # source follow it: "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [file.py:470] ")
    re.compile(
        r"^\((?:[A-Za-z_][\w.:-]{0,63} )?(?:rank=\d{1,6} )?pid=(\d{1,9})"
        r"(?:, ip=[0-9A-Fa-f.:]{1,45})?\) ?"
        r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? "
        r"\[[^\]\n]{1,128}\] ?)?"
    ),
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
    record = _DOCKER_JSON_RE.match(raw) if raw.startswith('{"log":') else None
    if record is not None:
        try:
            log = json.loads(f'"{record.group(1)}"')
        except ValueError:
            return raw, False
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


def printable(text: str) -> str:
    """The tenant's text with every non-printable character as ``?`` (it is printed to
    terminals and written in JSON)."""
    return "".join(c if c.isprintable() else "?" for c in text)


QUOTED_CHARS: Final = 200
"""How much of a tenant's line a diagnosis quotes as its evidence (``killed_by_signal``,
``address_space_call``, ``allocation_limit``, ``handled_refusal``, ``skipped_batch``)."""


def quoted(text: str) -> str:
    """A tenant's line as a diagnosis quotes it: stripped, cut to ``QUOTED_CHARS``, every
    non-printable character as ``?`` (``printable``)."""
    return printable(text.strip()[:QUOTED_CHARS])


def own_text(text: str, rank: str | None) -> str:
    """``text``'s lines of one rank (every line when ``rank`` is None), their container and rank
    prefixes removed: a traceback as its process printed it (``[rank0]:   File ...`` frames are
    read as frames)."""
    return "\n".join(
        line.text for line in normalize_text(text) if rank is None or line.rank == rank
    )


def _whole_words(head: bytearray, next_byte: int | None) -> bytes:
    """The head without a word its bound cut (``next_byte``: the log's byte just after the head,
    None when the log ends there): a banner cut mid-word (``torch 1.1`` of ``torch 1.13.1``)
    would read as another release."""
    if next_byte is None or next_byte in _SPACES:
        return bytes(head)
    cut = max(head.rfind(bytes((space,))) for space in _SPACES)
    return bytes(head[: cut + 1])


_SPACES: Final = b" \t\n\r"


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
    tail: str = ""  # what follows the reported failure (without one, the log's end), at most
    # the log's last TAIL_BYTES


@dataclass
class _Event:
    start: int  # absolute offset of the failure line (in a long line: of the failure's wording)
    family: str
    priority: int
    rank: str | None
    line: Line | None = None  # the failure line as read, when ``after`` cannot hold it whole
    after_from: int | None = None  # where ``after`` starts when ``line`` is given
    after_bytes: int = WINDOW_AFTER_BYTES  # how much ``after`` keeps (with the line: more)
    precontext: bytes | None = None  # copied only when the buffer is cut, or at the end
    after: bytes | None = None
    end: int = 0  # absolute offset where the failure's line (or wording) ends


@dataclass
class _LongLine:
    """A line longer than ``MAX_LINE_BYTES`` that the scan is inside of, read in blocks."""

    start: int  # absolute offset of its first byte (blocks are counted from here)
    rank: str | None
    resume: int = 0  # absolute offset where the last failure's wording ended: look after it


def _text(data: bytes | bytearray) -> str:
    """Bytes to text keeping every byte (``surrogateescape``), so offsets map back exactly."""
    return bytes(data).decode("utf-8", errors="surrogateescape")


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogateescape"))


def _last_break(buf: bytes | bytearray, start: int, end: int) -> int:
    """Offset of the last ``\\n`` or ``\\r`` in ``buf[start:end]``, or -1."""
    return max(buf.rfind(b"\n", start, end), buf.rfind(b"\r", start, end))


class LogScanner:
    """Feed bytes in any pieces, then ``finish()``: counts failures, keeps the last one's window.

    A line after a carriage return takes its rank from the start of its newline-ended line when
    that is at most ``PRECONTEXT_BYTES`` before it (always in the buffer: see ``_trim``), so the
    result is the same however the input is split."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # absolute offset of _buf[0]
        self._pos = 0  # absolute offset scanned up to (a line start, or a block of _long)
        self._long: _LongLine | None = None  # the over-long line _pos is inside of
        # (absolute line start looked up last, the absolute start of its newline-ended line)
        self._physical_seen: tuple[int, int | None] = (0, 0)
        self._head = bytearray()
        self._after_head: int | None = None  # the log's byte just after the head, if any
        self._count = 0
        # per rank: (end offset, family, key) of its last failure line
        self._open: OrderedDict[str | None, tuple[int, str, str]] = OrderedDict()
        self._event: _Event | None = None
        self._finished: ScanResult | None = None

    @property
    def retained_bytes(self) -> int:
        """Bytes of log held right now (bounded; see the module docstring)."""
        event = self._event
        held = 0
        if event is not None:
            held = len(event.precontext or b"") + len(event.after or b"")
            held += len(event.line.text) if event.line is not None else 0
        return len(self._buf) + len(self._head) + held

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._finished is not None:
            raise ValueError("feed() after finish()")
        room = max(0, HEAD_BYTES - len(self._head))
        if room:
            self._head += bytes(data[:room])
        if self._after_head is None and len(data) > room:  # the head is full: what follows it
            self._after_head = data[room]
        fresh = len(self._buf)
        self._buf += data
        start = self._pos - self._base
        # bytes before ``fresh`` are the unfinished line of the last feed: no break in them
        last = _last_break(self._buf, max(start, fresh), len(self._buf))
        end = last + 1 if last >= 0 else start
        self._scan(start, end)
        self._read_tail(end)
        self._capture_after(final=False)
        self._trim()

    def finish(self) -> ScanResult:
        if self._finished is None:
            start = self._pos - self._base
            self._scan(start, len(self._buf))
            self._read_last_line()
            if self._event is None:
                self._read_tail_wordings()
            self._pos = self._base + len(self._buf)
            self._capture_after(final=True)
            self._keep_precontext()
            total = self._base + len(self._buf)
            self._finished = ScanResult(
                self._count,
                self._hit(),
                decode(_whole_words(self._head, self._after_head)),
                total,
                self._after_failure(total),
            )
            self._buf = bytearray()
        return self._finished

    def _scan(self, start: int, end: int) -> None:
        """Read ``buf[start:end]``, whose last line is complete."""
        if start >= end:
            return
        if self._long is not None:  # the rest of the long line the last feed stopped inside
            newline = self._buf.find(b"\n", start, end)
            stop = self._buf.find(b"\r", start, newline if newline >= 0 else end)
            stop = stop if stop >= 0 else (newline if newline >= 0 else end)
            self._read_long(self._long, start, stop, complete=True)
            self._long = None
            start = stop + 1
        if start < end:
            self._scan_lines(start, end)

    def _read_last_line(self) -> None:
        """The log's last line, when it is a shell's "Killed" in another language
        (``formats.LOCALIZED_KILLED``), Python's bare ``MemoryError``
        (``formats.BARE_MEMORY_ERROR_PATTERN``) or the host's kernel refusing memory
        (``formats.HOST_REFUSED_PATTERN``): no keyword of the scan finds those words anywhere
        else; or a shell's "Killed" (in any of its languages) glued to a progress bar
        (``formats.KILLED_AFTER_BAR_PATTERN``), of which the word alone is confirmed, as its
        bare line would be (its rank, if any, is the bar line's).
        Only the log's last ``LAST_LINE_BYTES`` are looked at (a bounded cost per log)."""
        buf = self._buf
        offset = max(0, len(buf) - LAST_LINE_BYTES)
        tail = bytes(buf[offset:]).rstrip(b" \t\r\n")
        start = _last_break(tail, 0, len(tail)) + 1
        if start == 0 and (offset > 0 or self._base > 0):  # the line began before the tail
            return
        if start == len(tail):
            return
        lines = normalize_lines([decode(tail[start:])])  # a container runtime's prefix off
        if not lines:
            return
        if (
            _LOCALIZED_KILLED_RE.search(lines[0].text)
            or _BARE_MEMORY_ERROR_RE.match(lines[0].text)
            or _HOST_REFUSED_RE.search(lines[0].text)
        ):
            self._confirm_line(offset + start, offset + len(tail))
            return
        glued = _KILLED_AFTER_BAR_RE.search(lines[0].text)
        if glued is not None:  # the shell's word alone, read as its bare line is
            word = len(glued.group(1).encode())
            self._confirm_line(offset + len(tail) - word, offset + len(tail))

    def _read_tail_wordings(self) -> None:
        """The last failure worded as ``formats.TAIL_WORDINGS`` (a BFC allocator's summary cut
        from its error, DALI's allocators) in the log's last ``TAIL_BYTES``."""
        buf = self._buf
        floor = max(0, len(buf) - TAIL_BYTES)
        found = sorted(
            (at for words in formats.TAIL_WORDINGS if (at := buf.rfind(words, floor)) >= 0),
            reverse=True,
        )
        for at in found:
            back = max(0, at - _PREFIX_BYTES)
            start = _last_break(buf, back, at) + 1
            if start == 0 and back > 0:  # a line longer than any of these stacks prints
                continue
            newline = buf.find(b"\n", at)
            end = newline if newline >= 0 else len(buf)
            if made_progress(decode(buf[end:])):  # the job went on: a failure it caught
                continue
            self._confirm_line(start, end)
            if self._event is not None:
                return

    def _read_tail(self, end: int) -> None:
        """The unfinished line after ``end``: left for the next feed, or read in blocks when it is
        already longer than ``MAX_LINE_BYTES`` (so the buffer stays bounded)."""
        buf = self._buf
        if self._long is None:
            if len(buf) - end <= MAX_LINE_BYTES:
                self._pos = self._base + end
                return
            self._long = self._long_line(end, len(buf))
        self._pos = self._base + self._read_long(self._long, end, len(buf), complete=False)

    def _scan_lines(self, start: int, end: int) -> None:
        buf = self._buf
        carriage = buf.find(b"\r", start, end) >= 0  # most logs have none: skip those searches
        lines: dict[int, int] = {}  # start -> end of each line with a keyword
        for anchor in formats.ANCHORS:
            floor = start  # just after the last line end seen: no search goes back past it
            newline = -1  # the next newline at or after the current hit (``end`` when none)
            i = buf.find(anchor, start, end)
            while i >= 0:
                line_start = buf.rfind(b"\n", floor, i) + 1 or floor
                if newline < i:
                    newline = buf.find(b"\n", i, end)
                    if newline < 0:
                        newline = end
                line_end = newline
                if carriage:
                    line_start = buf.rfind(b"\r", line_start, i) + 1 or line_start
                    line_end = buf.find(b"\r", i, newline)
                    if line_end < 0:
                        line_end = newline
                if line_start not in lines and _KEYWORD_RE.search(buf, line_start, line_end):
                    lines[line_start] = line_end
                floor = line_end + 1
                i = buf.find(anchor, floor, end) if floor < end else -1
        for line_start in sorted(lines):
            line_end = lines[line_start]
            if line_end - line_start > MAX_LINE_BYTES:
                long = self._long_line(line_start, line_end)
                self._read_long(long, line_start, line_end, complete=True)
            else:
                self._confirm_line(line_start, line_end)

    def _physical(self, start: int) -> int | None:
        """Where the newline-ended line around the line at ``start`` begins (``start`` itself
        after a newline), if at most ``PRECONTEXT_BYTES`` before; else None. Searches only
        bytes not searched for an earlier line, so a line of many carriage returns stays
        linear."""
        buf, base = self._buf, self._base
        # a line starting PRECONTEXT_BYTES before has its newline one byte further back
        low = max(0, start - PRECONTEXT_BYTES - 1)
        seen, known = self._physical_seen
        low_searched = max(low, seen - base)
        newline = buf.rfind(b"\n", low_searched, start)
        found: int | None = None
        if newline >= 0:
            found = base + newline + 1
        elif low_searched > low and known is not None:
            found = known  # no newline since the last line looked up: the same line
        if found is None and base + low == 0:
            found = 0
        if found is not None and base + start - found > PRECONTEXT_BYTES:
            found = None
        self._physical_seen = (base + start, found)
        return None if found is None else found - base

    def _rank_at(self, start: int, end: int) -> str | None:
        """The rank prefix of the newline-ended line that the line at ``start`` is part of."""
        physical = self._physical(start)
        if physical is None:
            return None
        raw = decode(self._buf[physical : min(max(end, start), physical + _PREFIX_BYTES)])
        return split_rank(_unwrap(raw)[0]).rank

    def _long_line(self, start: int, end: int) -> _LongLine:
        base = self._base
        return _LongLine(base + start, self._rank_at(start, end), base + start)

    def _confirm_line(self, start: int, end: int) -> None:
        lines = normalize_lines([decode(self._buf[start:end])])
        line = lines[0] if lines else Line("")
        found = formats.match_failure(line.text)
        if found is None:
            return
        rank = line.rank
        if rank is None and start > 0 and self._buf[start - 1] != _NEWLINE:
            rank = self._rank_at(start, end)  # after a carriage return: its line's prefix
        family, key = found
        base = self._base
        if end - start < WINDOW_AFTER_BYTES:  # ``after`` holds the line: read it from there
            # the line, its line break, then the window after it as for a longer line
            after_bytes = end - start + 1 + WINDOW_AFTER_BYTES
            self._on_failure(base + start, base + end, family, key, rank, after_bytes=after_bytes)
        else:
            kept = Line(line.text, rank)
            self._on_failure(base + start, base + end, family, key, rank, kept, base + end + 1)

    def _read_long(self, long: _LongLine, begin: int, stop: int, *, complete: bool) -> int:
        """Read the blocks of ``long`` from ``begin`` (a block start) up to ``stop``; with
        ``complete=False`` only blocks whose look-around is in the buffer. Returns where the next
        block starts."""
        block = begin
        while block < stop:
            if not complete and block + MAX_LINE_BYTES + LOOKAROUND_BYTES > stop:
                break
            block_end = min(block + MAX_LINE_BYTES, stop)
            look = min(block_end + LOOKAROUND_BYTES, stop)
            if _KEYWORD_RE.search(self._buf, block, look) is not None:
                self._confirm_block(long, block, block_end, look, cut=look < stop or not complete)
            block = block_end
        return block

    def _confirm_block(
        self, long: _LongLine, block: int, end: int, look: int, *, cut: bool
    ) -> None:
        """The failure whose wording starts in ``buf[block:end]`` (read up to ``look``), after
        the wording of the last one found on this line."""
        buf, base = self._buf, self._base
        begin = max(block, long.resume - base)
        if begin >= end:
            return
        floor = max(0, long.start - base)
        context = max(floor, begin - _CONTEXT_BYTES)
        before, own = _text(buf[context:begin]), _text(buf[begin:end])
        # a sentinel where the line goes on, so that ``$`` cannot match at a block's edge
        text = before + own + _text(buf[end:look]) + ("\x00" if cut else "")
        found = formats.find_failure(text, len(before), before=len(before) + len(own))
        if found is None:
            return
        family, at, stop = found
        key = text[at : at + formats.KEY_CHARS]
        wording = begin + _byte_len(text[len(before) : at])
        long.resume = base + wording + _byte_len(text[at:stop])
        first = wording
        while first > max(floor, wording - _WORD_BACK_BYTES) and buf[first - 1] in _WORD_BYTES:
            first -= 1  # back over the exception's name: ``torch.OutOfMemoryError``
        self._on_failure(base + first, base + wording + _byte_len(key), family, key, long.rank)

    def _on_failure(
        self,
        start: int,
        end: int,
        family: str,
        key: str,
        rank: str | None,
        line: Line | None = None,
        after_from: int | None = None,
        after_bytes: int = WINDOW_AFTER_BYTES,
    ) -> None:
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
                self._event = _Event(
                    start, family, priority, rank, line, after_from, after_bytes, end=end
                )
            return
        self._count += 1
        self._event = _Event(start, family, priority, rank, line, after_from, after_bytes, end=end)

    def _keep_precontext(self) -> None:
        """Copy the text before the reported failure, once, before the buffer loses it (a copy
        per failure would make a log of many failures quadratic)."""
        event = self._event
        if event is not None and event.precontext is None:
            rel = event.start - self._base
            event.precontext = bytes(self._buf[max(0, rel - PRECONTEXT_BYTES) : rel])

    def _capture_after(self, *, final: bool) -> None:
        event = self._event
        if event is None or event.after is not None:
            return
        rel = (event.after_from if event.after_from is not None else event.start) - self._base
        if final or len(self._buf) - rel >= event.after_bytes:
            event.after = bytes(self._buf[rel : rel + event.after_bytes])

    def _trim(self) -> None:
        keep_from = self._pos - PRECONTEXT_BYTES - 1  # and the newline before (``_physical``)
        event = self._event
        if event is not None and event.after is None:
            keep_from = min(keep_from, event.start)
        cut = keep_from - self._base
        if cut > _TRIM_SLACK:
            self._keep_precontext()
            del self._buf[:cut]
            self._base += cut

    def _after_failure(self, total: int) -> str:
        """The text after the reported failure's line (or wording), from the log's last
        ``TAIL_BYTES`` only; without a failure, the log's last ``TAIL_BYTES``."""
        event = self._event
        # the buffer holds the log's end: _trim keeps PRECONTEXT_BYTES (> TAIL_BYTES) before
        # the scan position, which is at most the buffer's end
        tail = self._buf[-TAIL_BYTES:]
        if event is None:
            return decode(tail)
        skip = event.end - (total - len(tail))  # bytes of the tail up to the failure's end
        return decode(tail[max(0, skip) :])

    def _hit(self) -> Hit | None:
        event = self._event
        if event is None:
            return None
        after_lines = normalize_text(decode(event.after or b""))
        if event.line is not None:
            line = event.line
        elif after_lines:
            line = Line(after_lines.pop(0).text, event.rank)
        else:
            return None
        same_rank = [x for x in after_lines if line.rank is None or x.rank == line.rank]
        precontext = decode(event.precontext or b"")
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
