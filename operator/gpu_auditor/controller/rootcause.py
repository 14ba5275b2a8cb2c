"""The root cause of a distributed job's failure: which of its pods failed first, and of what.

Pure: failures in, verdicts out. A failure is one container termination of one pod of the
group, read as an out-of-memory error (`OOM`: OOMKilled, or the diagnosis found one), as the
consequence of another process's end (`CONSEQUENCE`: an NCCL/gloo/store error naming a peer, a
watchdog timeout, a signal from outside), as something else (`OTHER`), or not read
(`UNREAD`: its log was not read, the work on a large job being bounded).

A group's failures fall into incidents: the first failure and all that follow within
`WINDOW` (an NCCL watchdog waits 10 to 30 minutes before it fails a collective); the next
failure after that starts the next incident. In an incident:

- the first failure is the earliest that is not a consequence (a consequence reports another
  process's end, so it is never a cause), unless a consequence or an unread failure came more
  than `TOLERANCE` before it: then that one was first, and its cause is not one we saw;
- when the first failure is an OOM, it is the root cause; the consequences and unread failures
  of the incident point at it; other OOMs are their own (reported, not pointed); failures of
  another kind are left alone;
- when it is not an OOM, the incident gets no OOM diagnosis at all.

Time is the log's own stamp of the failure where the log prints one (milliseconds), else the
container's `finishedAt` (whole seconds): hence `TOLERANCE`, which also covers a launcher that
takes a few seconds to stop the process that failed while its peers' already fail. Equal times
put an OOM first, then the lower index.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

TOLERANCE: Final = dt.timedelta(seconds=10)
WINDOW: Final = dt.timedelta(minutes=30)
LOG_TIME_TRUSTED: Final = dt.timedelta(days=1)
"""A log's stamp further than this from the container's `finishedAt` is not believed."""


class Read(StrEnum):
    OOM = "oom"
    CONSEQUENCE = "consequence"
    OTHER = "other"
    UNREAD = "unread"


@dataclass(frozen=True)
class Failure:
    """One termination of one pod of the group, as read."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    restart_count: int
    finished_at: dt.datetime | None
    read: Read
    how: str
    """In words: the diagnosis kind of an OOM, the consequence kind, or what the termination
    says (`exit code 1`)."""
    log_at: dt.datetime | None = None
    position: str = ""
    index: int | None = None
    remembered: bool = False
    """Known from the job object's annotations (an earlier run of the operator wrote it): the
    pod itself may be gone."""
    key: tuple[str, str] = field(init=False)
    ref: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.pod_uid, f"{self.container}/{self.restart_count}"))
        object.__setattr__(self, "ref", f"{self.namespace}/{self.pod}")

    @property
    def when(self) -> dt.datetime | None:
        finished, logged = self.finished_at, self.log_at
        if logged is not None and (finished is None or abs(logged - finished) <= LOG_TIME_TRUSTED):
            return logged
        return finished


@dataclass(frozen=True)
class Verdict:
    """One incident: its root cause (an OOM), or its first failure when that was not one."""

    failures: tuple[Failure, ...]
    first: Failure | None = None
    """The incident's first failure; None when every failure reads as a consequence of one we
    did not see (undecided)."""
    root: Failure | None = None
    consequences: tuple[Failure, ...] = ()
    oom_too: tuple[Failure, ...] = ()
    others: tuple[Failure, ...] = ()

    def after_root(self, failure: Failure) -> dt.timedelta | None:
        """How long after the root cause `failure` failed (negative within the tolerance)."""
        if self.root is None or self.root.when is None or failure.when is None:
            return None
        return failure.when - self.root.when


def _order(failure: Failure) -> tuple[dt.datetime, bool, int, str]:
    when = failure.when
    assert when is not None
    return when, failure.read is not Read.OOM, 2**31 if failure.index is None else failure.index, \
        failure.ref


def incidents(failures: Iterable[Failure], window: dt.timedelta = WINDOW
              ) -> list[tuple[Failure, ...]]:
    """The failures with a time, split into incidents in time order; one failure per key (a
    remembered one only where no other has its key)."""
    unique: dict[tuple[str, str], Failure] = {}
    for failure in failures:
        if failure.when is None:
            continue
        if failure.key not in unique or unique[failure.key].remembered:
            unique[failure.key] = failure
    ordered = sorted(unique.values(), key=_order)
    out: list[list[Failure]] = []
    for failure in ordered:
        start = out[-1][0].when if out else None
        assert failure.when is not None
        if start is None or failure.when - start > window:
            out.append([failure])
        else:
            out[-1].append(failure)
    return [tuple(group) for group in out]


def decide(incident: Sequence[Failure], tolerance: dt.timedelta = TOLERANCE) -> Verdict:
    """The verdict on one incident (failures in `incidents`' order)."""
    failures = tuple(incident)
    candidates = [f for f in failures if f.read in (Read.OOM, Read.OTHER)]
    if not candidates:
        return Verdict(failures)
    first = candidates[0]
    assert first.when is not None
    early = next((f for f in failures if f.read in (Read.CONSEQUENCE, Read.UNREAD)
                  and f.when is not None and f.when < first.when - tolerance), None)
    if early is not None:
        return Verdict(failures, first=early)
    if first.read is not Read.OOM:
        return Verdict(failures, first=first)
    rest = [f for f in failures if f is not first]
    return Verdict(
        failures, first=first, root=first,
        consequences=tuple(f for f in rest if f.read in (Read.CONSEQUENCE, Read.UNREAD)),
        oom_too=tuple(f for f in rest if f.read is Read.OOM),
        others=tuple(f for f in rest if f.read is Read.OTHER),
    )


def verdicts(failures: Iterable[Failure], *, window: dt.timedelta = WINDOW,
             tolerance: dt.timedelta = TOLERANCE) -> list[Verdict]:
    """Every incident's verdict, the oldest first."""
    return [decide(incident, tolerance) for incident in incidents(failures, window)]
