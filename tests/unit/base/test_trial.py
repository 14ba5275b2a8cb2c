"""The trial's record on its owner: settings as keys, the annotations read back, hostile text."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from gpu_auditor.base.trial import (
    MAX_REJECTED,
    TRIAL_LIMIT,
    Outcome,
    Trial,
    has_setting,
    parse_trial,
    rejects,
    release_range,
    setting_of,
    trial_annotations,
    valid_setting,
    with_rejected,
)
from gpu_auditor.diagnosis.torchversion import UNKNOWN, TorchRange

pytestmark = pytest.mark.unit

P = "gpu-auditor.io/"
ES = "expandable_segments:True"
WHEN = dt.datetime(2026, 5, 1, 10, 0, 5, tzinfo=dt.UTC)


def trial(**fields: object) -> Trial:
    base: dict[str, object] = dict(setting=ES, value=ES, kind="fragmentation", container="main",
                                   failed_pod="ml/train-a", failed_uid="uid-a", failed_at=WHEN,
                                   ran_seconds=42.5, release="2.11")
    base.update(fields)
    return Trial(**base)  # type: ignore[arg-type]


# -- settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("recommended", "current", "setting"), [
    (ES, None, ES),
    ("garbage_collection_threshold:0.6,expandable_segments:True",
     "garbage_collection_threshold:0.6", ES),
    (f"{ES},max_split_size_mb:512", "max_split_size_mb:256", f"{ES},max_split_size_mb:512"),
    (ES, "expandable_segments:False", ES),
    (ES, ES, ""),
])
def test_the_setting_is_the_keys_the_recommendation_adds(recommended: str, current: str | None,
                                                        setting: str) -> None:
    assert setting_of(recommended, current) == setting


@pytest.mark.parametrize(("value", "carries"), [
    (ES, True), (f"max_split_size_mb:256,{ES}", True), (" expandable_segments : True ", True),
    ("expandable_segments:False", False), (f"{ES},expandable_segments:False", False),
    (None, False), ("", False), ("expandable_segments:true", False),
])
def test_a_container_carries_the_setting_when_torch_would_read_every_key(
        value: str | None, carries: bool) -> None:
    assert has_setting(value, ES) is carries


def test_a_setting_that_did_not_help_is_rejected_alone_or_within_a_larger_one() -> None:
    assert rejects((ES,), ES)
    assert rejects((ES,), f"{ES},max_split_size_mb:512")
    assert not rejects((ES,), "max_split_size_mb:512")
    assert not rejects((), ES)


@pytest.mark.parametrize(("text", "valid"), [
    (ES, ES), ("max_split_size_mb:512, expandable_segments:True",
               "expandable_segments:True,max_split_size_mb:512"),
    ("expandable_segment:True", None), ("", None), (7, None), ("x" * 300, None),
    ("rm -rf /", None),
])
def test_only_a_setting_of_keys_torch_has_is_valid(text: object, valid: str | None) -> None:
    assert valid_setting(text) == valid


@pytest.mark.parametrize(("hint", "found"), [
    ("2.11", TorchRange((2, 11), (2, 11))), (">=2.4", TorchRange((2, 4), None)),
    ("<=1.9", TorchRange(None, (1, 9))), ("1.10-2.0", TorchRange((1, 10), (2, 0))),
    (None, UNKNOWN), ("2", UNKNOWN), ("2.11; drop", UNKNOWN),
])
def test_a_release_hint_reads_as_the_range_it_names(hint: str | None, found: TorchRange) -> None:
    assert release_range(hint) == found


# -- the annotations ---------------------------------------------------------------------------

def test_a_trial_round_trips_through_its_annotations() -> None:
    t = trial(outcome=Outcome.NOT_APPLIED, judged_pod="ml/train-b",
              counted=(Outcome.NOT_APPLIED,), rejected=("max_split_size_mb:512",))
    notes = trial_annotations(t, P)
    assert notes[f"{P}recommendation-outcome"] == "not-applied"
    assert json.loads(notes[f"{P}recommendation-trial"] or "")["failedAt"] == \
        "2026-05-01T10:00:05Z"
    assert parse_trial(notes, P) == t


def test_an_open_trial_removes_the_outcome_annotation() -> None:
    assert trial_annotations(trial(), P)[f"{P}recommendation-outcome"] is None


def test_a_trial_never_passes_its_limit_and_drops_the_oldest_rejections_first() -> None:
    many = tuple(f"max_split_size_mb:{100 + i}" for i in range(MAX_REJECTED))
    t = trial(value="garbage_collection_threshold:0.6," * 60 + ES, rejected=many,
              failed_pod="ml/" + "p" * 300)
    text = trial_annotations(t, P)[f"{P}recommendation-trial"] or ""
    assert len(text) <= TRIAL_LIMIT
    back = parse_trial({f"{P}recommendation-trial": text}, P)
    assert back is not None and back.setting == ES and back.rejected[-1] == many[-1]


@pytest.mark.parametrize("raw", [
    None, "", "not json", "[]", '{"setting": 1}', '{"setting": "expandable_segment:True", '
    '"value": "x"}', '{"setting": "expandable_segments:True"}', "[" * 5000, "{" + " " * 3000 + "}",
])
def test_a_record_not_of_the_shape_reads_as_no_trial(raw: str | None) -> None:
    assert parse_trial({f"{P}recommendation-trial": raw}, P) is None


def test_hostile_fields_read_as_absent_not_as_text() -> None:
    raw = json.dumps({"setting": ES, "value": ES, "kind": ["x"], "container": "c" * 400,
                      "failedAt": "yesterday", "ranSeconds": True, "release": "2.11\n",
                      "counted": ["fixed", "won", 3], "rejected": ["garbage", ES, 7] * 5})
    t = parse_trial({f"{P}recommendation-trial": raw,
                     f"{P}recommendation-outcome": "maybe"}, P)
    assert t == Trial(setting=ES, value=ES, kind="", container="", failed_pod="",
                      counted=(Outcome.FIXED,), rejected=(ES,))


def test_the_owner_remembers_the_newest_settings_that_did_not_help() -> None:
    t = trial()
    for i in range(MAX_REJECTED + 2):
        t = with_rejected(t, f"max_split_size_mb:{100 + i}")
    t = with_rejected(t, "max_split_size_mb:105")
    assert len(t.rejected) == MAX_REJECTED and t.rejected[-1] == "max_split_size_mb:105"


@pytest.mark.parametrize(("outcome", "applicable"), [
    (None, True), (Outcome.NOT_APPLIED, True), (Outcome.FIXED, False),
    (Outcome.NOT_FIXED, False),
])
def test_only_an_open_trial_may_be_applied(outcome: Outcome | None, applicable: bool) -> None:
    assert trial(outcome=outcome).applicable() is applicable
    assert not trial(rejected=(ES,)).applicable()
