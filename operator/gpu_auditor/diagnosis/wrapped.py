"""A failure whose wording was broken across two lines: read it joined.

Something between the process and the reader can break a long line where it likes: Rich's
tracebacks and log handler wrap at the console width (80 columns when a container's output is
not a terminal), a terminal or a notebook wraps at its own, a paste into an issue keeps either.
The scan confirms one line at a time, so a break inside the very words that identify a failure
("Resource exhausted: Out" / "of memory while trying to allocate ...", public b-022) leaves the
log with no failure. Only then, and only in the log's last ``TAIL_BYTES`` (a job prints its
failure at its end), each pair of neighbouring lines of one rank is read joined, as the break
may have been made: in a word (a column wrap: ``a + b``) or between two words (a word wrap,
whose spaces at the break may be kept or dropped: ``a.rstrip() + " " + b.lstrip()``). A pair is
joined only where one of the scan's keywords lies near the break, a family's wording starts
before the break without being whole before it, and the break fell in that wording's words:
where the family's pattern allows a gap (a CUDA check's "CUDA error ... out of memory", XLA's
"RESOURCE_EXHAUSTED: ... Out of memory"), two lines that merely follow each other would match
across it, and are not joined (so a break in such a gap is not read either: public11 t-018's
"cuDevicePrimary" / "CtxRetain: CUDA_ERROR_OUT_OF_MEMORY" stays a miss). The rejoined end is
scanned alone: what the log printed before its last 32 KiB (its memory series) is not read.

A tail in which no anchor of the scan occurs even with its breaks removed is left at that
(a few C searches); otherwise each pair costs up to two keyword searches and four family
searches over at most ``2 * _REACH`` characters (``bench/diagnose_ab.py`` times a log with no
failure; 32 KiB of lines built to pass every filter took up to about 160 ms here).
"""

from __future__ import annotations

import re
from typing import Final

from . import formats
from .logtext import Line, normalize_text

_KEYWORD_RE: Final = re.compile(formats.KEYWORD_PATTERN)
_ANCHORS: Final = tuple(a.decode() for a in formats.ANCHORS)
_SENTINEL: Final = "\x00"
_REACH: Final = formats.MAX_MATCH_CHARS
"""A failure's wording that spans the break starts and ends within this many characters of it."""


def _near(text: str, at: int) -> bool:
    """Whether a keyword of ``text`` lies within ``_REACH`` characters of ``at``."""
    return _KEYWORD_RE.search(text, max(0, at - _REACH), at + _REACH) is not None


def _joined(first: str, second: str) -> str | None:
    """``first`` and ``second`` read as one line, where a failure's wording spans the break."""
    for head, tail in ((first, second), (first.rstrip() + " ", second.lstrip())):
        text = head + tail
        at = len(head)
        if not _near(text, at):
            continue
        low = max(0, at - _REACH)
        found = formats.find_failure(text, low, at + _REACH)
        # it starts before the break and is not whole before it (a match's reported end may
        # stop short of its wording's: the driver family reports the word before the code)
        if found is None or found[1] >= at or formats.find_failure(text, low, at) is not None:
            continue
        # ...and the break fell in its words, not in a gap its pattern allows (a CUDA check's
        # "CUDA error ... out of memory" spans any 200 characters): with a character no
        # wording holds put in the break, nothing may start before it
        bridged = formats.find_failure(head + _SENTINEL + tail, low, at + 1 + _REACH)
        if bridged is None or bridged[1] >= at:
            return text
    return None


_TORCHRUN_RANK_DIGITS: Final = 6


def _raw(line: Line) -> str:
    """``line`` with a prefix ``split_rank`` reads back as its rank: torchrun's for a number it
    takes, ``kubectl logs --prefix``'s for any other (a container's name, a 7-digit pid)."""
    if line.rank is None:
        return line.text
    rank = line.rank
    if rank.isascii() and rank.isdigit() and len(rank) <= _TORCHRUN_RANK_DIGITS:
        return f"[rank{line.rank}]: {line.text}"
    return f"[pod/rejoined/{line.rank}] {line.text}"


def _may_hold_one(tail: str) -> bool:
    """Whether ``tail`` read with its breaks made in a word or between words holds one of the
    scan's anchors (every keyword holds one): a C search, where most logs end."""
    glued = tail.replace("\n", "")
    if any(a in glued for a in _ANCHORS):
        return True
    spaced = " ".join(line.strip() for line in tail.split("\n"))
    return any(a in spaced for a in _ANCHORS)


def rejoin(tail: str) -> str | None:
    """``tail`` with the last break inside a failure's wording removed (its other lines as
    read, rank prefixes in torchrun's form); None where no failure's wording was broken."""
    if not _may_hold_one(tail):
        return None
    lines = normalize_text(tail)
    for i in range(len(lines) - 2, -1, -1):
        first, second = lines[i], lines[i + 1]
        if first.rank != second.rank or not first.text.strip() or not second.text.strip():
            continue
        text = _joined(first.text, second.text)
        if text is not None:
            kept = [*lines[:i], Line(text, first.rank), *lines[i + 2 :]]
            return "\n".join(_raw(line) for line in kept)
    return None
