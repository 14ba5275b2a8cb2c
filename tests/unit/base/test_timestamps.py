"""base/timestamps: one reading of the API server's times, one way of writing ours."""

from __future__ import annotations

import datetime as dt

import pytest

from gpu_auditor.base.timestamps import MAX_CHARS, parse_time, stamp

pytestmark = pytest.mark.unit

UTC = dt.UTC


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("2026-12-02T05:54:31Z", dt.datetime(2026, 12, 2, 5, 54, 31, tzinfo=UTC)),
        ("2026-12-02T05:54:31.123456Z", dt.datetime(2026, 12, 2, 5, 54, 31, 123456, tzinfo=UTC)),
        ("2026-12-02T06:54:31+01:00", dt.datetime(2026, 12, 2, 5, 54, 31, tzinfo=UTC)),
        ("2026-12-02T05:54:31", dt.datetime(2026, 12, 2, 5, 54, 31, tzinfo=UTC)),  # no offset: UTC
    ],
)
def test_an_api_servers_time_is_read_timezone_aware(text: str, when: dt.datetime) -> None:
    found = parse_time(text)
    assert found == when and found is not None and found.tzinfo is not None


@pytest.mark.parametrize(
    "value", [None, 5, 1.5, ["2026-12-02T05:54:31Z"], "", "yesterday", "2026-13-40T00:00:00Z"]
)
def test_anything_else_is_no_time(value: object) -> None:
    assert parse_time(value) is None


def test_text_longer_than_a_stamp_can_be_is_not_parsed() -> None:
    padded = "2026-12-02T05:54:31" + "0" * (MAX_CHARS - 19)  # fractional digits past 64 chars
    assert len(padded) == MAX_CHARS
    assert parse_time(padded + "0") is None


def test_our_stamp_is_utc_to_the_second_and_reads_back() -> None:
    when = dt.datetime(2026, 12, 2, 6, 54, 31, 999999, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert stamp(when) == "2026-12-02T05:54:31Z"
    assert parse_time(stamp(when)) == when.replace(microsecond=0)
