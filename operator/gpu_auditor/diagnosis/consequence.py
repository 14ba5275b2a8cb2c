"""A failed process's last words about another process: the consequence of a peer's death.

When one rank of a distributed job dies (an OOM, a kill), its peers die of that, seconds to
minutes later: an NCCL watchdog timeout, an NCCL remote error, gloo's "Connection closed by
peer", a closed TCPStore connection, torchelastic's SIGTERM when a controller restarts the
group. Their logs name no cause of their own; they point at the process that ended first.

``read_failure`` reads a log for that (pure, bounded: the log's last ``TAIL_CHARS`` only, each
pattern an alternation of literals or a fixed-shape time stamp, so linear) and hands back:

- ``consequence``: the kind of the first line there that reports another process's end
  (``CONSEQUENCE_KINDS``), or None;
- ``at``: the time stamp that line carries itself (an ISO 8601 or Python ``logging`` stamp, a
  glog ``[E1003 18:37:01.833`` prefix whose year is that of ``reference``), else the
  ``time :`` of torchelastic's "Root Cause (first observed failure)" block, else None: a time
  printed elsewhere in the log (a progress line minutes before) says nothing of the failure;
- ``rank``: the rank prefix of that line (``[rank3]:``), else the ``rank :`` of torchelastic's
  block, else None.

The wording is the one PyTorch 2.15 prints (read from its wheel) and the older forms real logs
show (docs/operator.md, "One job, many pods"). An out-of-memory line is the diagnosis core's
(``formats.find_failure``): where a log holds one, the log is not a consequence, and ``at`` and
``rank`` are those of the OOM line.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Final

from . import formats
from .logtext import normalize_text, printable

TAIL_CHARS: Final = 64 * 1024
"""Characters of the log's end read: the failure and what the launcher prints after it."""
MAX_LINE_CHARS: Final = 4096
"""Characters of one line matched (a longer line is cut: its wording starts the line)."""

NCCL_TIMEOUT: Final = "nccl-timeout"
NCCL_PEER_ERROR: Final = "nccl-peer-error"
GLOO_PEER_CLOSED: Final = "gloo-peer-closed"
STORE_CLOSED: Final = "store-closed"
SIGNALLED: Final = "signalled"
CONSEQUENCE_KINDS: Final = (NCCL_TIMEOUT, NCCL_PEER_ERROR, GLOO_PEER_CLOSED, STORE_CLOSED,
                            SIGNALLED)
"""What a consequence reads as (docs/contracts.md): a collective that timed out waiting for a
peer; NCCL reporting a peer or communicator gone; gloo's connection to a peer closed; the
rendezvous store gone; the process stopped by a signal from outside (a controller's restart)."""

_WORDING: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (NCCL_TIMEOUT, re.compile(
        r"Watchdog caught collective operation timeout|Timeout at NCCL work"
        r"|failure detected by watchdog at work|detected by watchdog at work"
        r"|due to a collective timeout|Observed flight recorder dump signal from another rank"
        r"|watchdog got stuck for|NCCL watchdog thread terminated"
        r"|Process group watchdog thread terminated")),
    (NCCL_PEER_ERROR, re.compile(
        r"ncclRemoteError|remote process exiting prematurely|Connection closed by remote peer"
        r"|NCCL communicator was aborted|Net : Connection closed by remote peer")),
    (GLOO_PEER_CLOSED, re.compile(
        r"Connection closed by peer|Connection reset by peer"
        r"|typically caused by a remote worker")),
    (STORE_CLOSED, re.compile(
        r"Connection was likely closed\. Did the remote server shutdown or crash"
        r"|TCP client failed to connect/validate to host|DistStoreError")),
    (SIGNALLED, re.compile(
        r"Received (?:15|Signals\.SIGTERM|2|Signals\.SIGINT) death signal"
        r"|SignalException: Process \d{1,10} got signal: (?:15|2)\b")),
)
_ISO: Final = re.compile(
    r"(?<!\d)(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
_GLOG: Final = re.compile(r"\[[EIWF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")
_ROOT_TIME: Final = re.compile(r"^\s{0,16}time\s{0,8}:\s{0,8}(.{10,40})$")
_ROOT_RANK: Final = re.compile(r"^\s{0,16}rank\s{0,8}:\s{0,8}(\d{1,7})\b")
_ROOT_CAUSE: Final = "Root Cause (first observed failure)"


@dataclass(frozen=True)
class FailureReading:
    """What a failed container's log says about how and when it failed."""

    consequence: str | None = None
    """A ``CONSEQUENCE_KINDS`` value, or None (an OOM, another error, nothing readable)."""
    line: str | None = None
    """The line read as the failure (an OOM's or a consequence's), at most 200 characters
    with control characters as ``?``."""
    at: dt.datetime | None = None
    """When the log says it failed (UTC; a stamp without a zone is read as UTC)."""
    rank: int | None = None
    """The rank the log names on the failure line (or in torchelastic's root cause)."""


def read_failure(text: bytes | str, reference: dt.datetime | None = None) -> FailureReading:
    """How the log ``text`` failed (module doc); ``reference``: the container's ``finishedAt``,
    whose year dates a glog stamp."""
    data = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    lines = normalize_text(data[-TAIL_CHARS:])
    oom = next((i for i in range(len(lines) - 1, -1, -1)
                if formats.find_failure(lines[i].text[:MAX_LINE_CHARS]) is not None), None)
    found: tuple[int, str | None] | None = (oom, None) if oom is not None else None
    if found is None:
        found = next(((i, kind) for i, line in enumerate(lines)
                      for kind, pattern in _WORDING
                      if pattern.search(line.text[:MAX_LINE_CHARS])), None)
    if found is None:
        return FailureReading()
    index, kind = found
    line = lines[index]
    block = _root_cause_block([x.text for x in lines[index:]])
    at = _stamp(line.text[:MAX_LINE_CHARS], reference) or block[0]
    rank = int(line.rank) if line.rank is not None and line.rank.isdigit() else block[1]
    return FailureReading(consequence=kind, line=printable(line.text[:200]), at=at, rank=rank)


def _root_cause_block(lines: list[str]) -> tuple[dt.datetime | None, int | None]:
    """(time, rank) of the first torchelastic root-cause block in ``lines``, if any."""
    start = next((i for i, text in enumerate(lines) if _ROOT_CAUSE in text), None)
    if start is None:
        return None, None
    at: dt.datetime | None = None
    rank: int | None = None
    for text in lines[start + 1 : start + 12]:
        if at is None and (match := _ROOT_TIME.match(text)):
            at = _stamp(match.group(1), None)
        if rank is None and (match := _ROOT_RANK.match(text)):
            rank = int(match.group(1))
    return at, rank


def _stamp(text: str, reference: dt.datetime | None) -> dt.datetime | None:
    """The first time stamp in ``text``: ISO 8601 / ``logging`` (``2026-11-29 10:00:03,123``,
    torchelastic's ``2026-11-29_10:00:03``), or glog's (dated with ``reference``'s year)."""
    if match := _ISO.search(text):
        year, month, day, hour, minute, second, fraction, zone = match.groups()
        return _datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                         fraction, zone)
    if reference is not None and (match := _GLOG.search(text)):
        month, day, hour, minute, second, fraction = match.groups()
        found = _datetime(reference.year, int(month), int(day), int(hour), int(minute),
                          int(second), fraction, None)
        if found is not None and found - reference > dt.timedelta(days=1):  # December's log
            found = _datetime(reference.year - 1, int(month), int(day), int(hour),
                              int(minute), int(second), fraction, None)
        return found
    return None


def _datetime(year: int, month: int, day: int, hour: int, minute: int, second: int,
              fraction: str | None, zone: str | None) -> dt.datetime | None:
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    tz = dt.UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz).astimezone(
            dt.UTC)
    except (ValueError, OverflowError):
        return None

