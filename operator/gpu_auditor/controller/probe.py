"""The OOM probe's record in a container's termination message, read once (pure).

The probe (`probe/`, opt-in) writes one line, `gpu-auditor-probe-record {JSON}`, to the
container's termination-message path when an allocation fails; Kubernetes copies it into the
pod's status (4 KiB at most), which the operator reads first. The record is the tenant's text:
`gpu_auditor.diagnosis.proberecord` validates it (never raises, bounded: a line over 16 KiB is
not a record). Only the last `MAX_MESSAGE_SCAN` characters of a message are searched, so a
forged status holding megabytes costs no more than a real one.

What the diagnosis did with a record is in its `probe` extra (present only when the record was
used: it must describe the same request as the OOM message); `ProbeUse` says it for the
evidence and the metrics, with where the record came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from gpu_auditor.diagnosis import Diagnosis
from gpu_auditor.diagnosis.proberecord import MARKER, ProbeRecord, find_record

MAX_MESSAGE_SCAN: Final = 64 * 1024
"""Characters at the end of a termination message searched for a record (Kubernetes keeps 4 KiB
of it; anything longer was not written by the kubelet)."""
TERMINATION_MESSAGE: Final = "termination-message"
LOG: Final = "log"


@dataclass(frozen=True)
class MessageRecord:
    """A record line found in a termination message: `record` when valid, else `problem`."""

    record: ProbeRecord | None
    problem: str | None = None


def record_in_message(message: str) -> MessageRecord | None:
    """The probe's record in a termination message; None when the message holds no record
    line."""
    tail = message[-MAX_MESSAGE_SCAN:]
    if MARKER.strip() not in tail:
        return None
    parsed = find_record(tail)
    if parsed is None:
        return None
    if parsed.record is None:
        return MessageRecord(None, parsed.reason or "not a record")
    return MessageRecord(parsed.record)


@dataclass(frozen=True)
class ProbeUse:
    """What became of a probe record in one diagnosis."""

    source: str
    """`termination-message` or `log` (a record line the job printed before the failure)."""
    used: bool
    status: str | None = None
    verdict: str | None = None
    """The record's own verdict (`fragmentation`, `cap`, `capacity-or-leak`, `unknown`)."""
    inference_kind: str | None = None
    """What the OOM message alone gave."""
    disagrees: bool = False
    """The diagnosis with the record differs from the message alone (the record won)."""
    ignored: str | None = None
    """Why a record was not used."""

    def evidence(self) -> dict[str, Any]:
        """The `probe` object of the `evidence` annotation (camelCase)."""
        if not self.used:
            return {"source": self.source, "used": False, "ignored": self.ignored}
        return {"source": self.source, "used": True, "status": self.status,
                "verdict": self.verdict, "inferenceKind": self.inference_kind,
                "disagrees": self.disagrees}


def probe_use(diagnosis: Diagnosis, found: MessageRecord | None) -> ProbeUse | None:
    """What the diagnosis did with the termination message's record (`found`), or with a
    record line of the log; None when there was neither."""
    extra = dict(diagnosis.extra).get("probe")
    if isinstance(extra, dict):
        verdict = extra.get("verdict")
        return ProbeUse(
            source=TERMINATION_MESSAGE if found is not None and found.record else LOG,
            used=True, status=str(extra.get("status")),
            verdict=str(verdict.get("kind")) if isinstance(verdict, dict) else None,
            inference_kind=str(extra.get("inference_kind")),
            disagrees=extra.get("disagrees") is True,
        )
    if found is None:
        return None
    if found.record is None:
        return ProbeUse(TERMINATION_MESSAGE, used=False, ignored=f"invalid: {found.problem}")
    why = ("another failure: its request differs from the OOM message's"
           if diagnosis.detected else "no out-of-memory failure found to apply it to")
    return ProbeUse(TERMINATION_MESSAGE, used=False, ignored=why)
