"""The trial of a recommended allocator setting, as its owner's annotations record it (issue 28).

When the operator recommends an allocator setting on a workload (a Job, a Deployment, a JobSet,
a PyTorchJob...), the workload's next pods are a trial of it: a pod that starts with the setting
and completes, or runs past the point where the failed attempt ended, says it helped (`fixed`);
one that runs out of memory again with it says it did not (`not-fixed`, and the setting is never
recommended again for that owner); a next pod without it was not a trial (`not-applied`).

The trial lives on the owner, beside `recommended-alloc-conf`: `recommendation-trial` (compact
JSON, camelCase like the other values) and `recommendation-outcome` (the outcome's word). An
operator restart reads it back; the admission webhook reads it too, before it puts the setting
into a next pod (never one whose outcome was not-fixed). One definition here for both, standard
library and the diagnosis core's allocator grammar only.

The owner's annotations are writable by whoever may edit the owner: every field is parsed as
hostile text (types checked, sizes bounded, a setting only of keys torch has), and what does
not fit reads as absent.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from gpu_auditor.base.contract import Annotation
from gpu_auditor.base.timestamps import parse_time, stamp
from gpu_auditor.diagnosis import allocconf
from gpu_auditor.diagnosis.torchversion import UNKNOWN, TorchRange, parse_torch_version

TRIAL_LIMIT: Final = 2048
"""Bytes of the `recommendation-trial` value at most."""
OUTCOME_LIMIT: Final = 16
APPLIED_LIMIT: Final = 512
"""Bytes of a pod's `recommendation-applied` value at most."""
SETTING_LIMIT: Final = 256
"""Characters of a setting (the keys a recommendation sets): two or three keys fit in 80."""
VALUE_LIMIT: Final = 1024
"""Characters of a whole recommended value (as `recommended-alloc-conf`)."""
MAX_REJECTED: Final = 8
"""Settings remembered as not having helped one owner (the core recommends two at most)."""
MAX_TEXT: Final = 320
"""Characters of a pod reference or a container name in the record."""
_HINT = re.compile(r"(>=|<=)?([0-9]{1,3}\.[0-9]{1,3})(?:-([0-9]{1,3}\.[0-9]{1,3}))?")
"""A release hint as `Diagnosis.torch_version_hint` writes one."""


class Outcome(StrEnum):
    """What a recommendation's trial showed (`recommendation-outcome`, the metric's `outcome`)."""

    FIXED = "fixed"
    """A pod with the setting completed, or ran past the point where the failed attempt ended,
    without running out of memory."""
    NOT_FIXED = "not-fixed"
    """A pod with the setting ran out of memory again: never recommended again for the owner."""
    NOT_APPLIED = "not-applied"
    """A next pod ran without the setting (changed or removed): no trial; the setting stays
    recommended, and a later pod with it still decides."""


FINAL: Final = frozenset({Outcome.FIXED, Outcome.NOT_FIXED})


@dataclass(frozen=True)
class Trial:
    """One recommendation's trial on its owner."""

    setting: str
    """The keys the recommendation sets, `key:value` sorted by key (`expandable_segments:True`):
    what is applied to a next pod, merged into its own setting, and the metric's `setting`."""
    value: str
    """The whole recommended value (the failed container's own valid keys merged in)."""
    kind: str
    """The diagnosis kind it answers (the metric's `kind`)."""
    container: str
    """The container it was recommended for."""
    failed_pod: str
    """`namespace/name` of the pod whose failure it answers."""
    failed_uid: str = ""
    failed_at: dt.datetime | None = None
    """When that pod's container failed: pods created before are not next pods."""
    ran_seconds: float | None = None
    """How long the failed run lasted: a next pod with the setting that runs longer (with a
    margin, `outcome.PAST_MARGIN`) is fixed."""
    release: str | None = None
    """The torch releases the diagnosis settled on (its hint: `2.11`, `>=2.4`), for checking
    the setting against a next pod whose spec names none (`release_range`)."""
    outcome: Outcome | None = None
    judged_pod: str = ""
    """`namespace/name` of the pod that decided the outcome."""
    counted: tuple[Outcome, ...] = ()
    """Outcomes of this trial already counted in the metric (each at most once)."""
    rejected: tuple[str, ...] = field(default=())
    """Settings that did not help this owner (earlier trials included): never again."""

    @property
    def final(self) -> bool:
        return self.outcome in FINAL

    @property
    def open(self) -> bool:
        """Still waiting for a pod with the setting to decide."""
        return not self.final

    def applicable(self) -> bool:
        """The setting may be put into a next pod: the trial is open and the setting is not one
        that did not help this owner."""
        return self.open and not rejects(self.rejected, self.setting)


# -- the allocator grammar, for settings ---------------------------------------------------------

def entries(value: str | None) -> dict[str, str]:
    """A setting's entries as torch reads them (the last of one key wins); {} for None."""
    if not value:
        return {}
    return {e.key: e.value for e in allocconf.check(value[:VALUE_LIMIT]).entries}


def render(pairs: Mapping[str, str]) -> str:
    """`key:value` pairs sorted by key, comma-separated."""
    return ",".join(f"{k}:{v}" for k, v in sorted(pairs.items()))


def setting_of(recommended: str, current: str | None) -> str:
    """The keys `recommended` sets that `current` does not have with the same value: what the
    recommendation adds to the job's own setting."""
    have = entries(current)
    return render({k: v for k, v in entries(recommended).items() if have.get(k) != v})


def has_setting(value: str | None, setting: str) -> bool:
    """Whether a container whose allocator setting is `value` runs with every key of
    `setting`, each with its value."""
    wanted = entries(setting)
    have = entries(value)
    return bool(wanted) and all(have.get(k) == v for k, v in wanted.items())


def rejects(rejected: tuple[str, ...], setting: str) -> bool:
    """Whether `setting` is, or holds every key of, a setting that did not help."""
    return any(has_setting(setting, old) for old in rejected)


def valid_setting(text: object) -> str | None:
    """`text` when it is a setting of keys torch has, rendered as `setting_of` renders one."""
    if not isinstance(text, str) or not 0 < len(text) <= SETTING_LIMIT:
        return None
    found = entries(text)
    if not found or any(k not in allocconf.KEYS for k in found):
        return None
    return render(found)


# -- the annotations -----------------------------------------------------------------------------

def trial_annotations(trial: Trial, prefix: str) -> dict[str, str | None]:
    """The owner's `recommendation-trial` and `recommendation-outcome` (None: removed)."""
    fields: dict[str, Any] = {
        "setting": trial.setting, "value": trial.value, "kind": trial.kind,
        "container": trial.container, "failedPod": trial.failed_pod,
        "failedPodUID": trial.failed_uid,
        "failedAt": stamp(trial.failed_at) if trial.failed_at else None,
        "ranSeconds": round(trial.ran_seconds, 3) if trial.ran_seconds is not None else None,
        "release": trial.release, "judgedPod": trial.judged_pod,
        "counted": [str(o) for o in trial.counted], "rejected": list(trial.rejected),
    }
    text = _dumps(fields)
    if len(text) > TRIAL_LIMIT:  # the whole value is `recommended-alloc-conf`'s too
        fields["value"] = trial.setting
        text = _dumps(fields)
    while len(text) > TRIAL_LIMIT and fields["rejected"]:  # then the oldest rejections
        fields["rejected"] = fields["rejected"][1:]
        text = _dumps(fields)
    return {f"{prefix}{Annotation.RECOMMENDATION_TRIAL}": text,
            f"{prefix}{Annotation.RECOMMENDATION_OUTCOME}":
                str(trial.outcome) if trial.outcome else None}


def parse_trial(annotations: Mapping[str, Any], prefix: str) -> Trial | None:
    """The trial an owner's annotations record, or None (absent, or not of the shape)."""
    raw = annotations.get(f"{prefix}{Annotation.RECOMMENDATION_TRIAL}")
    if not isinstance(raw, str) or len(raw) > TRIAL_LIMIT:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    setting = valid_setting(data.get("setting"))
    value = data.get("value")
    if setting is None or not isinstance(value, str) or len(value) > VALUE_LIMIT:
        return None
    outcome = annotations.get(f"{prefix}{Annotation.RECOMMENDATION_OUTCOME}")
    ran = data.get("ranSeconds")
    rejected = data.get("rejected")
    counted = data.get("counted")
    return Trial(
        setting=setting, value=value if entries(value) else setting,
        kind=_text(data.get("kind"), 64), container=_text(data.get("container"), MAX_TEXT),
        failed_pod=_text(data.get("failedPod"), MAX_TEXT),
        failed_uid=_text(data.get("failedPodUID"), 64),
        failed_at=parse_time(data.get("failedAt")),
        ran_seconds=float(ran) if isinstance(ran, int | float) and not isinstance(ran, bool)
        and 0 <= ran < 10**9 else None,
        release=_release(data.get("release")),
        outcome=Outcome(outcome) if outcome in set(Outcome) else None,
        judged_pod=_text(data.get("judgedPod"), MAX_TEXT),
        counted=tuple(Outcome(o) for o in (counted if isinstance(counted, list) else [])[:3]
                      if o in set(Outcome)),
        rejected=tuple(dict.fromkeys(
            s for s in (valid_setting(r) for r in (
                rejected if isinstance(rejected, list) else [])[:MAX_REJECTED]) if s)),
    )


def with_rejected(trial: Trial, setting: str) -> Trial:
    """`trial` remembering that `setting` did not help (the newest kept, MAX_REJECTED)."""
    kept = tuple(s for s in trial.rejected if s != setting)
    return replace(trial, rejected=(*kept, setting)[-MAX_REJECTED:])


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _text(value: object, limit: int) -> str:
    return value if isinstance(value, str) and len(value) <= limit else ""


def release_range(hint: str | None) -> TorchRange:
    """The releases a diagnosis's release hint allows (`2.11`, `>=2.4`, `<=1.9`,
    `1.10-2.0`); UNKNOWN for None or anything else."""
    match = _HINT.fullmatch(hint) if hint else None
    if match is None:
        return UNKNOWN
    op, first, second = match.groups()
    low = parse_torch_version(first)
    high = parse_torch_version(second) if second else low
    if op == ">=":
        return TorchRange(low, None)
    if op == "<=":
        return TorchRange(None, low)
    return TorchRange(low, high)


def _release(value: object) -> str | None:
    return value if isinstance(value, str) and _HINT.fullmatch(value) else None
