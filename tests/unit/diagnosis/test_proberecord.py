"""The record's reader in the pure core: validation of hostile input and the record's verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import proberecord as pr
from gpu_auditor.diagnosis.proberecord import (
    ParsedRecord,
    PoolState,
    ProbeRecord,
    ProbeVerdict,
    find_record,
    find_record_in_lines,
    parse_record,
    record_verdict,
)

pytestmark = pytest.mark.unit


MiB = 1024**2


GiB = 1024**3


def raw(**over: Any) -> dict[str, Any]:
    """A record as the probe writes it: the issue's job, 9.32 GiB reserved but unallocated."""
    rec: dict[str, Any] = {
        "probe": "gpu-auditor",
        "v": 1,
        "status": "ok",
        "torch": "2.11.0+cu130",
        "pid": 7,
        "rank": None,
        "backend": "native",
        "device": 0,
        "oom_count": 1,
        "request_bytes": 2_447_000_000,
        "device_total_bytes": 150_000_000_000,
        "device_free_bytes": 30_000_000,
        "allocated_bytes": 120_000_000_000,
        "reserved_bytes": 130_000_000_000,
        "fraction": None,
        "allowed_bytes": None,
        "expandable_segments": False,
        "alloc_conf": None,
        "private_pool_bytes": 0,
        "pools": {
            "large": {
                "segments": 6,
                "segment_bytes": 130_000_000_000,
                "free_bytes": 10_000_000_000,
                "largest_free_bytes": 2_414_000_000,
                "pending_free_bytes": 0,
                "hist": [0, 0, 0, 0, 0, 6],
            },
            "small": {
                "segments": 0,
                "segment_bytes": 0,
                "free_bytes": 0,
                "largest_free_bytes": 0,
                "pending_free_bytes": 0,
                "hist": [0, 0, 0, 0, 0, 0],
            },
        },
        "live_allocations": 40,
        "top_allocations_bytes": [60_000_000_000, 30_000_000_000],
    }
    for key, value in over.items():
        if key in ("large", "small"):
            rec["pools"][key].update(value)
        else:
            rec[key] = value
    return rec


def record(**over: Any) -> pr.ProbeRecord:
    parsed = parse_record(json.dumps(raw(**over)))
    assert parsed.record is not None, parsed.reason
    return parsed.record


def verdict(**over: Any) -> pr.ProbeVerdict:
    return record_verdict(record(**over))


CAPPED = {
    "request_bytes": 1024 * MiB,
    "allowed_bytes": 7 * GiB,
    "large": {"free_bytes": 1 * MiB, "largest_free_bytes": 1 * MiB},
}


def line(**over: Any) -> str:
    return "gpu-auditor-probe-record " + json.dumps(raw(**over), separators=(",", ":"))


def test_the_issue_job_parses_into_one_typed_value() -> None:
    rec = record()
    assert rec.status == "ok" and rec.version == 1 and rec.torch_version == "2.11.0+cu130"
    assert rec.large == pr.PoolState(
        6, 130_000_000_000, 10_000_000_000, 2_414_000_000, 0, (0, 0, 0, 0, 0, 6)
    )
    assert rec.top_allocations == (60_000_000_000, 30_000_000_000)
    assert rec.expandable_segments is False and rec.fraction is None and rec.cut == ()


def test_the_marker_line_and_bytes_are_accepted() -> None:
    line = ("gpu-auditor-probe-record " + json.dumps(raw()) + "\n").encode()
    parsed = parse_record(line)
    assert parsed.record is not None and parsed.record.request_bytes == 2_447_000_000


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        ("{", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"probe": "other", "v": 1, "status": "ok"}', "not a gpu-auditor probe record"),
        ('{"probe": "gpu-auditor", "v": 2, "status": "ok"}', "unsupported schema version (2)"),
        (
            '{"probe": "gpu-auditor", "v": true, "status": "ok"}',
            "unsupported schema version (bool)",
        ),
        ('{"probe": "gpu-auditor", "v": "1", "status": "ok"}', "unsupported schema version (str)"),
        ('{"probe": "gpu-auditor", "v": 1, "status": "fine"}', "missing or unknown status"),
        ('{"probe": "gpu-auditor", "v": 1}', "missing or unknown status"),
        ('{"probe": "gpu-auditor", "v": 1, "status": "ok", "request_bytes": NaN}', "not JSON"),
        ("[" * 5000 + "]" * 5000, "not JSON"),
        ('{"probe": "gpu-auditor", "v": 1, "status": "ok", "x": ' + "9" * 5000 + "}", "not JSON"),
    ],
)
def test_an_invalid_record_is_none_with_a_reason(data: str | bytes, reason: str) -> None:
    assert parse_record(data) == pr.ParsedRecord(None, reason)


def test_the_size_bound_is_16_kib() -> None:
    base = json.dumps(raw())
    pad = " " * (16384 - len(base))
    assert parse_record(base + pad).record is not None  # 16384 bytes
    assert parse_record(base + pad + " ").reason == "larger than 16384 bytes"


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (0, 0),
        (2**60, 2**60),
        (2**60 + 1, None),
        (-1, None),
        (True, None),
        (1.5e9, None),
        ("1000", None),
        (None, None),
        ([1], None),
    ],
)
def test_sizes_outside_0_to_2_pow_60_or_not_integers_are_absent(
    value: Any, kept: int | None
) -> None:
    assert record(allocated_bytes=value, reserved_bytes=2**60).allocated_bytes == kept


@pytest.mark.parametrize(
    ("value", "kept"),
    [(1, 1.0), (0.05, 0.05), (1.0000001, None), (0, None), (-0.5, None), ("0.5", None)],
)
def test_the_fraction_must_be_in_0_exclusive_to_1(value: Any, kept: float | None) -> None:
    assert record(fraction=value).fraction == kept


def test_an_overflowing_number_reads_as_absent() -> None:
    text = json.dumps(raw()).replace('"fraction": null', '"fraction": 1e400')
    text = text.replace('"device_free_bytes": 30000000', '"device_free_bytes": 1e400')
    parsed = parse_record(text)
    assert parsed.record is not None and (
        parsed.record.fraction,
        parsed.record.device_free_bytes,
    ) == (None, None)


@pytest.mark.parametrize(
    ("status", "kind", "detail"),
    [
        ("ok", "ok", None),
        ("no-hooks", "no-hooks", None),
        ("async-backend", "async-backend", None),
        ("error: RuntimeError: boom", "error", "RuntimeError: boom"),
        ("error", "error", None),
        ("error: bell\x07and\nnewline", "error", "bell?and?newline"),
    ],
)
def test_statuses(status: str, kind: str, detail: str | None) -> None:
    rec = record(status=status)
    assert (rec.status, rec.status_detail) == (kind, detail)


def test_contradicting_figures_are_dropped_not_believed() -> None:
    rec = record(
        large={"free_bytes": 100, "largest_free_bytes": 101},
        small={"free_bytes": 10, "largest_free_bytes": 5, "segment_bytes": 9},
        device_free_bytes=150_000_000_001,
        allowed_bytes=150_000_000_001,
        allocated_bytes=5,
        reserved_bytes=4,
    )
    assert rec.large is not None and (rec.large.free_bytes, rec.large.largest_free_bytes) == (
        None,
        None,
    )
    assert rec.small is not None and (rec.small.free_bytes, rec.small.largest_free_bytes) == (
        None,
        None,
    )
    assert (rec.device_free_bytes, rec.allowed_bytes) == (None, None)
    assert (rec.allocated_bytes, rec.reserved_bytes) == (5, None)


def test_text_fields_are_bounded_and_tokens_checked() -> None:
    rec = record(
        torch="2.11.0; rm -rf /",
        backend="x" * 41,
        alloc_conf="a" * 500,
        rank=2**20 + 1,
        device=1024,
    )
    assert (rec.torch_version, rec.backend, rec.rank, rec.device) == (None, None, None, None)
    assert rec.alloc_conf == "a" * 200


def test_lists_are_bounded_and_bad_items_dropped() -> None:
    rec = record(
        top_allocations_bytes=[1, -1, "2", 3, *range(100)],
        cut={"top_allocations_bytes": 3, "BAD KEY": 1},
    )
    assert rec.top_allocations[:3] == (1, 3, 0) and len(rec.top_allocations) == 62
    assert rec.cut == (("top_allocations_bytes", 3),)
    assert record(large={"hist": [1, 2, 3]}).large.histogram == ()  # type: ignore[union-attr]


def test_the_issue_job_is_fragmentation() -> None:
    v = verdict()
    assert v.kind == "fragmentation"
    assert (v.pool, v.request_bytes, v.cache_free_bytes, v.largest_free_bytes, v.room_bytes) == (
        "large", 2_447_000_000, 10_000_000_000, 2_414_000_000, 30_000_000,
    )  # fmt: skip
    assert v.reason.startswith(
        "fragmentation: 9.31 GiB free in the large pool's blocks + 28.61 MiB room"
    )


def test_fragmentation_when_the_room_lacks_at_most_0_40_of_the_cache() -> None:
    # need = 1000 - 600 = 400 MiB; the cache's blocks hold 1000 MiB (0.8 % of 130 GB reserved)
    over = {"request_bytes": 1000 * MiB, "device_free_bytes": 600 * MiB}
    big = {"largest_free_bytes": 600 * MiB - 1}
    assert verdict(**over, large={"free_bytes": 1000 * MiB, **big}).kind == "fragmentation"
    more = verdict(**over, large={"free_bytes": 1000 * MiB - 1, **big})
    assert more.kind == "capacity-or-leak"
    assert more.reason == (
        "capacity-or-leak: 1000.00 MiB free in the large pool's blocks + 600.00 MiB room would "
        "cover the 1000.00 MiB request, but 400.00 MiB of the cache must be reclaimed: more than "
        "an allocator setting was measured to recover"
    )
    short = verdict(**over, large={"free_bytes": 400 * MiB - 1, "largest_free_bytes": 1 * MiB})
    assert short.kind == "capacity-or-leak"
    assert short.reason == (
        "capacity-or-leak: 400.00 MiB free in the large pool's blocks + 600.00 MiB room fall "
        "short of the 1000.00 MiB request"
    )


def test_a_cache_below_half_a_percent_of_reserved_is_not_fragmentation() -> None:
    # 0.5 % of 130,000,000,000 reserved = 650,000,000 bytes; need 1 byte
    over = {"request_bytes": 1000 * MiB, "device_free_bytes": 1000 * MiB - 1}
    inside = verdict(**over, large={"free_bytes": 650_000_000, "largest_free_bytes": MiB})
    outside = verdict(**over, large={"free_bytes": 649_999_999, "largest_free_bytes": MiB})
    assert (inside.kind, outside.kind) == ("fragmentation", "capacity-or-leak")


def test_a_cache_under_one_large_segment_is_not_fragmentation() -> None:
    # reserved 1 GiB: its 0.5 % (5.4 MB) is below the 20 MiB floor, which decides
    over = {"request_bytes": 64 * MiB, "device_free_bytes": 64 * MiB - 1, "reserved_bytes": GiB}
    inside = verdict(**over, large={"free_bytes": 20 * MiB, "largest_free_bytes": MiB})
    outside = verdict(**over, large={"free_bytes": 20 * MiB - 1, "largest_free_bytes": MiB})
    assert (inside.kind, outside.kind) == ("fragmentation", "capacity-or-leak")


def test_a_largest_block_that_covers_the_request_is_not_explained() -> None:
    over = {"request_bytes": 1000 * MiB, "device_free_bytes": 700 * MiB}
    assert (
        verdict(**over, large={"free_bytes": 2000 * MiB, "largest_free_bytes": 1000 * MiB - 1}).kind
        == "fragmentation"
    )
    v = verdict(**over, large={"free_bytes": 2000 * MiB, "largest_free_bytes": 1000 * MiB})
    assert v.kind == "unknown" and "covers the 1000.00 MiB request" in v.reason


def test_device_room_that_covers_the_request_is_not_explained() -> None:
    over = {
        "request_bytes": 1000 * MiB,
        "large": {"free_bytes": 1000 * MiB, "largest_free_bytes": 1 * MiB},
    }
    assert verdict(**over, device_free_bytes=1000 * MiB - 1).kind == "fragmentation"
    v = verdict(**over, device_free_bytes=1000 * MiB)
    assert v.kind == "unknown" and v.reason == (
        "the room (1000.00 MiB) covers the 1000.00 MiB request: the record does not explain "
        "the failure"
    )


def test_small_requests_read_the_small_pool() -> None:
    small = {"free_bytes": 64 * MiB, "largest_free_bytes": 1 * MiB, "segment_bytes": 128 * MiB}
    v = verdict(request_bytes=2 * MiB, device_free_bytes=0, reserved_bytes=2 * GiB, small=small)
    assert (v.kind, v.pool, v.cache_free_bytes) == ("fragmentation", "small", 64 * MiB)
    v = verdict(
        request_bytes=2 * MiB + 1,
        device_free_bytes=0,
        reserved_bytes=2 * GiB,
        small=small,
        large={"free_bytes": 0, "largest_free_bytes": 0},
    )
    assert (v.kind, v.pool) == ("capacity-or-leak", "large")


def test_cap_when_the_device_has_the_room_the_fraction_withholds() -> None:
    over = {**CAPPED, "allocated_bytes": 6 * GiB, "reserved_bytes": 7 * GiB - 10 * MiB}
    v = verdict(**over, device_free_bytes=1024 * MiB)
    assert (v.kind, v.cap_room_bytes, v.room_bytes) == ("cap", 10 * MiB, 10 * MiB)
    assert verdict(**over, device_free_bytes=1024 * MiB - 1).kind == "capacity-or-leak"


def test_under_a_cap_the_room_is_the_cap_headroom_not_the_device() -> None:
    # frag_pinned on the H200: 7 GiB allowed, 3.14 GiB reserved, 1.89 GiB free in 12 MiB pieces
    over = {
        "request_bytes": 4_509_715_456,
        "allowed_bytes": 7_516_192_768,
        "allocated_bytes": 1_350_565_888,
        "reserved_bytes": 3_376_414_720,
        "device_free_bytes": 146_179_883_008,
        "large": {
            "free_bytes": 2_025_848_832,
            "largest_free_bytes": 12_582_912,
            "segment_bytes": 3_376_414_720,
        },
    }
    v = verdict(**over)
    assert (v.kind, v.cap_room_bytes, v.room_bytes) == (
        "fragmentation",
        4_139_778_048,
        4_139_778_048,
    )
    over["reserved_bytes"] = 3_376_414_720 + 1_655_926_785  # cache + headroom now one byte short
    assert verdict(**over).kind == "cap"


def test_a_cap_with_no_reserved_figure_is_unknown() -> None:
    v = verdict(**CAPPED, reserved_bytes=None, device_free_bytes=0)
    assert (
        v.kind == "unknown"
        and v.reason == "a memory fraction is set but the record lacks the reserved bytes"
    )


@pytest.mark.parametrize("status", ["no-hooks", "async-backend", "error: RuntimeError: x"])
def test_a_status_other_than_ok_is_unknown(status: str) -> None:
    v = verdict(status=status)
    assert v.kind == "unknown" and v.reason.startswith("the probe could not read the allocator (")


@pytest.mark.parametrize(
    "over",
    [
        {"request_bytes": None},
        {"request_bytes": 0},
        {"device_free_bytes": None},
        {"large": {"free_bytes": None}},
    ],
)
def test_missing_figures_give_unknown(over: dict[str, Any]) -> None:
    assert verdict(**over).kind == "unknown"


def test_the_verdict_serialises_with_its_figures() -> None:
    out = verdict().to_json_dict()
    assert out["kind"] == "fragmentation" and out["largest_free_bytes"] == 2_414_000_000
    assert set(out) >= {"reason", "pool", "cache_free_bytes", "room_bytes", "cap_room_bytes"}


def test_the_last_record_in_a_cri_log_is_found() -> None:
    log = "\n".join(
        [
            "2026-01-01T00:00:00.1Z stderr F " + line(oom_count=1),
            "2026-01-01T00:00:00.2Z stdout F step 3",
            "2026-01-01T00:00:00.3Z stderr F " + line(oom_count=2),
            "2026-01-01T00:00:00.4Z stderr F torch.OutOfMemoryError: CUDA out of memory.",
        ]
    )
    parsed = find_record(log)
    assert parsed is not None and parsed.record is not None and parsed.record.oom_count == 2
    lines = iter(log.encode().split(b"\n"))
    again = find_record_in_lines(lines)
    assert again is not None and again.record == parsed.record


def test_no_marker_is_none_and_a_broken_last_record_is_not_replaced_by_an_older_one() -> None:
    assert find_record("CUDA out of memory") is None
    parsed = find_record(line() + "\ngpu-auditor-probe-record {broken\n")
    assert parsed == pr.ParsedRecord(None, "not JSON")


def test_a_marker_inside_the_settings_text_does_not_hide_the_record() -> None:
    parsed = find_record(line(alloc_conf="gpu-auditor-probe-record {x}"))
    assert parsed is not None and parsed.record is not None
    assert parsed.record.alloc_conf == "gpu-auditor-probe-record {x}"


def test_a_huge_line_after_the_marker_is_refused_without_reading_it_all() -> None:
    parsed = find_record("gpu-auditor-probe-record " + "x" * 10_000_000)
    assert parsed == pr.ParsedRecord(None, "larger than 16384 bytes")


# Property tests: whatever a tenant writes, the reader returns a value or a reason, never raises,
# and every figure it keeps is within bounds.

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5)
    ),
    max_leaves=30,
)


FIELDS = [
    "status", "torch", "pid", "rank", "backend", "device", "oom_count", "request_bytes",
    "device_total_bytes", "device_free_bytes", "allocated_bytes", "reserved_bytes", "fraction",
    "allowed_bytes", "expandable_segments", "alloc_conf", "private_pool_bytes", "pools",
    "live_allocations", "top_allocations_bytes", "cut",
]  # fmt: skip


POOL_FIELDS = [
    "segments",
    "segment_bytes",
    "free_bytes",
    "largest_free_bytes",
    "pending_free_bytes",
    "hist",
]


def check(parsed: pr.ParsedRecord) -> None:
    assert (parsed.record is None) != (parsed.reason is None)
    rec = parsed.record
    if rec is None:
        return
    for name in ("request_bytes", "device_total_bytes", "device_free_bytes", "allocated_bytes",
                 "reserved_bytes", "allowed_bytes", "private_pool_bytes"):  # fmt: skip
        value = getattr(rec, name)
        assert value is None or (type(value) is int and 0 <= value <= 2**60)
    assert rec.fraction is None or 0 < rec.fraction <= 1
    for pool in (rec.large, rec.small):
        if pool is not None and pool.free_bytes is not None and pool.largest_free_bytes is not None:
            assert pool.largest_free_bytes <= pool.free_bytes
    v = pr.record_verdict(rec)
    assert v.kind in pr.VERDICTS and v.reason
    json.dumps(v.to_json_dict())


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    check(pr.parse_record(data))
    found = pr.find_record(b"gpu-auditor-probe-record " + data)
    assert found is not None
    check(found)
    assert pr.find_record(data) is None or isinstance(pr.find_record(data), pr.ParsedRecord)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=500))
def test_arbitrary_text_never_raises(text: str) -> None:
    check(pr.parse_record(text))
    found = pr.find_record("noise\n" + text + "\ngpu-auditor-probe-record " + text)
    assert found is not None
    check(found)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=12),
    st.dictionaries(st.sampled_from(POOL_FIELDS), JSON),
)
def test_any_value_in_any_field_is_read_or_dropped(
    fields: dict[str, Any], pool: dict[str, Any]
) -> None:
    body: dict[str, Any] = {
        "probe": "gpu-auditor",
        "v": 1,
        "status": "ok",
        "pools": {"large": pool},
    }
    body.update(fields)
    check(pr.parse_record(json.dumps(body)))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62),
    st.integers(-(2**62), 2**62), st.one_of(st.none(), st.integers(-(2**62), 2**62)),
    st.integers(-(2**62), 2**62),
)  # fmt: skip
def test_absurd_numbers_give_a_verdict_or_unknown(
    request: int, free: int, cache: int, largest: int, allowed: int | None, reserved: int
) -> None:
    body = {
        "probe": "gpu-auditor", "v": 1, "status": "ok", "request_bytes": request,
        "device_free_bytes": free, "allowed_bytes": allowed, "reserved_bytes": reserved,
        "pools": {"large": {"free_bytes": cache, "largest_free_bytes": largest}},
    }  # fmt: skip
    parsed = pr.parse_record(json.dumps(body))
    check(parsed)
    assert parsed.record is not None
    v = pr.record_verdict(parsed.record)
    if v.kind in ("fragmentation", "capacity-or-leak", "cap"):
        assert 0 < request <= 2**60 and 0 <= largest < request and 0 <= free <= 2**60


def test_deep_nesting_in_a_field_is_dropped() -> None:
    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    body = {
        "probe": "gpu-auditor",
        "v": 1,
        "status": "ok",
        "pools": deep,
        "top_allocations_bytes": deep,
    }
    parsed = pr.parse_record(json.dumps(body))
    assert (
        parsed.record is not None
        and parsed.record.large is None
        and parsed.record.top_allocations == ()
    )


# The probe record's reader at its edges (issue 18, mutation survivors of
# ``diagnosis/proberecord.py``): every field is read from its own key, each count's range is
# inclusive at both ends, equal figures do not contradict each other, and an ``unknown`` verdict
# still says which pool, which request and why. Literal numbers only.

def distinct_raw(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "probe": "gpu-auditor",
        "v": 1,
        "status": "ok",
        "torch": "2.11.0+cu130",
        "pid": 7,
        "rank": 3,
        "backend": "native",
        "device": 5,
        "oom_count": 2,
        "request_bytes": 1000 * MiB,
        "device_total_bytes": 80 * GiB,
        "device_free_bytes": 600 * MiB,
        "allocated_bytes": 60 * GiB,
        "reserved_bytes": 70 * GiB,
        "fraction": 0.5,
        "allowed_bytes": None,
        "expandable_segments": True,
        "alloc_conf": "max_split_size_mb:512",
        "private_pool_bytes": 11,
        "pools": {
            "large": {
                "segments": 6,
                "segment_bytes": 69 * GiB,
                "free_bytes": 1000 * MiB,
                "largest_free_bytes": 100 * MiB,
                "pending_free_bytes": 13,
                "hist": [1, 2, 3, 4, 5, 6],
            },
            "small": {
                "segments": 4,
                "segment_bytes": 8 * MiB,
                "free_bytes": 3 * MiB,
                "largest_free_bytes": 1 * MiB,
                "pending_free_bytes": 17,
                "hist": [6, 5, 4, 3, 2, 1],
            },
        },
        "live_allocations": 40,
        "top_allocations_bytes": [30 * GiB, 20 * GiB],
        "cut": {"top_allocations_bytes": 3},
    }
    for key, value in over.items():
        if key in ("large", "small"):
            rec["pools"][key].update(value)
        else:
            rec[key] = value
    return rec


def distinct_record(**over: Any) -> ProbeRecord:
    parsed = parse_record(json.dumps(distinct_raw(**over)))
    assert parsed.record is not None, parsed.reason
    return parsed.record


def distinct_line(**over: Any) -> str:
    return "gpu-auditor-probe-record " + json.dumps(distinct_raw(**over), separators=(",", ":"))


def test_every_field_is_read_from_its_own_key() -> None:
    assert distinct_record() == ProbeRecord(
        version=1,
        status="ok",
        status_detail=None,
        torch_version="2.11.0+cu130",
        pid=7,
        rank=3,
        backend="native",
        device=5,
        oom_count=2,
        request_bytes=1048576000,
        device_total_bytes=85899345920,
        device_free_bytes=629145600,
        allocated_bytes=64424509440,
        reserved_bytes=75161927680,
        fraction=0.5,
        allowed_bytes=None,
        expandable_segments=True,
        alloc_conf="max_split_size_mb:512",
        private_pool_bytes=11,
        large=PoolState(6, 74088185856, 1048576000, 104857600, 13, (1, 2, 3, 4, 5, 6)),
        small=PoolState(4, 8388608, 3145728, 1048576, 17, (6, 5, 4, 3, 2, 1)),
        live_allocations=40,
        top_allocations=(32212254720, 21474836480),
        cut=(("top_allocations_bytes", 3),),
    )


@pytest.mark.parametrize(
    ("field", "value", "kept"),
    [
        ("pid", 0, 0),
        ("pid", 2147483648, 2147483648),  # 2^31
        ("pid", 2147483649, None),
        ("pid", -1, None),
        ("oom_count", 2147483648, 2147483648),
        ("oom_count", 2147483649, None),
        ("live_allocations", 2147483648, 2147483648),
        ("live_allocations", 2147483649, None),
        ("rank", 0, 0),
        ("rank", 1048576, 1048576),  # 2^20
        ("rank", 1048577, None),
        ("device", 0, 0),
        ("device", 1023, 1023),
        ("device", 1024, None),
        ("device", True, None),
    ],
)
def test_counts_are_inclusive_at_both_ends(field: str, value: Any, kept: int | None) -> None:
    assert getattr(distinct_record(**{field: value}), field) == kept


def test_a_histogram_bucket_count_is_bounded_like_any_count() -> None:
    assert distinct_record(large={"hist": [0, 0, 0, 0, 0, 2147483648]}).large == PoolState(
        6, 74088185856, 1048576000, 104857600, 13, (0, 0, 0, 0, 0, 2147483648)
    )
    pool = distinct_record(large={"hist": [0, 0, 0, 0, 0, 2147483649]}).large
    assert pool is not None and pool.histogram == ()
    pool = distinct_record(large={"hist": [0, 0, 0, 0, 0, -1]}).large
    assert pool is not None and pool.histogram == ()
    pool = distinct_record(large={"hist": [0, 0, 0, 0, 0, 0, 0]}).large
    assert pool is not None and pool.histogram == ()


def test_equal_figures_do_not_contradict_each_other() -> None:
    rec = distinct_record(
        device_total_bytes=80 * GiB,
        device_free_bytes=80 * GiB,
        allowed_bytes=80 * GiB,
        allocated_bytes=70 * GiB,
        reserved_bytes=70 * GiB,
        large={
            "segment_bytes": 1000 * MiB,
            "free_bytes": 1000 * MiB,
            "largest_free_bytes": 1000 * MiB,
        },
    )
    assert (rec.device_free_bytes, rec.allowed_bytes) == (85899345920, 85899345920)
    assert (rec.allocated_bytes, rec.reserved_bytes) == (75161927680, 75161927680)
    assert rec.large is not None
    assert (rec.large.free_bytes, rec.large.largest_free_bytes) == (1048576000, 1048576000)


def test_a_free_total_above_the_segments_drops_both_pool_figures() -> None:
    pool = distinct_record(large={"segment_bytes": 1000 * MiB, "free_bytes": 1000 * MiB + 1}).large
    assert pool is not None and (pool.free_bytes, pool.largest_free_bytes) == (None, None)
    assert pool.segment_bytes == 1048576000


def test_at_most_eight_cut_keys_are_kept() -> None:
    cut = {name: i for i, name in enumerate("abcdefghij")}
    assert distinct_record(cut=cut).cut == tuple((name, i) for i, name in enumerate("abcdefgh"))


def test_the_whole_pools_and_the_lists_may_be_absent_or_of_the_wrong_type() -> None:
    rec = distinct_record(pools=[1, 2], top_allocations_bytes={"a": 1}, cut=[["a", 1]])
    assert (rec.large, rec.small, rec.top_allocations, rec.cut) == (None, None, (), ())
    rec = distinct_record(pools={"large": [1], "small": None})
    assert (rec.large, rec.small) == (None, None)


@pytest.mark.parametrize(
    ("status", "kind", "detail"),
    [
        ("error:RuntimeError: boom", "error", "RuntimeError: boom"),
        ("error:x", "error", "x"),
        ("error: " + "y" * 193, "error", "y" * 120),  # 200 characters: read, detail cut
        ("error: " + "y" * 121, "error", "y" * 120),
        ("error: " + "y" * 120, "error", "y" * 120),
    ],
)
def test_error_details(status: str, kind: str, detail: str) -> None:
    rec = distinct_record(status=status)
    assert (rec.status, rec.status_detail) == (kind, detail)


def test_a_status_over_200_characters_is_no_status() -> None:
    assert parse_record(json.dumps(distinct_raw(status="error: " + "y" * 194))) == ParsedRecord(
        None, "missing or unknown status"
    )


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        (999999999, "unsupported schema version (999999999)"),
        (-999999999, "unsupported schema version (-999999999)"),
        (1000000000, "unsupported schema version (int)"),
        (-1000000000, "unsupported schema version (int)"),
        (0, "unsupported schema version (0)"),
        (1.0, "unsupported schema version (float)"),
        (None, "unsupported schema version (NoneType)"),
    ],
)
def test_the_schema_version_shown_is_bounded(version: Any, reason: str) -> None:
    assert parse_record(json.dumps(distinct_raw(v=version))) == ParsedRecord(None, reason)


def test_a_record_as_a_bytearray_is_read() -> None:
    parsed = parse_record(bytearray(json.dumps(distinct_raw()).encode()))
    assert parsed.record is not None and parsed.record.pid == 7


def test_text_lines_are_searched_like_byte_lines() -> None:
    lines = ["step 1", distinct_line(pid=8), "step 2", distinct_line(pid=9),
             "torch.OutOfMemoryError"]
    found = find_record_in_lines(lines)
    assert found is not None and found.record is not None and found.record.pid == 9
    assert find_record_in_lines(["step 1", "step 2"]) is None
    assert find_record_in_lines([]) is None


def test_a_lone_surrogate_in_the_text_does_not_hide_the_record() -> None:
    parsed = find_record("\ud800 oops\n" + distinct_line(pid=8))
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 8


def test_trailing_text_after_the_record_is_not_stripped_into_a_record() -> None:
    assert find_record(distinct_line() + "X") == ParsedRecord(None, "not JSON")
    parsed = find_record(distinct_line() + "\r\nnext")
    assert parsed is not None and parsed.record is not None


def test_the_16_kib_bound_counts_the_line_without_its_carriage_return() -> None:
    body = json.dumps(distinct_raw())
    exact = body + " " * (16384 - len(body))
    parsed = find_record("gpu-auditor-probe-record " + exact + "\r\n")
    assert parsed is not None and parsed.record is not None
    # trailing spaces count: one byte over is refused
    parsed = find_record("gpu-auditor-probe-record " + exact + " \r\n")
    assert parsed == ParsedRecord(None, "larger than 16384 bytes")


def test_text_after_a_carriage_return_is_refused_at_any_length() -> None:
    # a "\r" inside the line is not its end: "{...}\rX" is no record, short or 16 KiB long
    # (cut at the bound first and stripped after, the long one used to be read)
    body = json.dumps(distinct_raw())
    short = find_record("gpu-auditor-probe-record " + body + "\rX\n")
    assert short == ParsedRecord(None, "not JSON")
    exact = body + " " * (16384 - len(body))
    long = find_record("gpu-auditor-probe-record " + exact + "\rX\n")
    assert long is not None and long.record is None
    # the same 16 KiB record ending its line with CRs (CRLF, or a redraw) is read
    for end in ("\r", "\r\r\r\n"):
        parsed = find_record("gpu-auditor-probe-record " + exact + end)
        assert parsed is not None and parsed.record is not None, repr(end)
    # a line of carriage returns only is an empty record, not a crash
    assert find_record("gpu-auditor-probe-record \r\r\n") == ParsedRecord(None, "not JSON")


def test_an_unknown_verdict_names_the_pool_and_the_request() -> None:
    overs: list[dict[str, Any]] = [{"large": {"largest_free_bytes": None}}, {"pools": {}}]
    for over in overs:
        assert record_verdict(distinct_record(allowed_bytes=None, **over)) == ProbeVerdict(
            "unknown",
            "the record lacks the large pool or the device's free memory",
            "large",
            1048576000,
        )
    assert record_verdict(distinct_record(small={"free_bytes": None}, request_bytes=1048576)) == (
        ProbeVerdict(
            "unknown",
            "the record lacks the small pool or the device's free memory",
            "small",
            1048576,
        )
    )
    capped = distinct_record(allowed_bytes=2 * GiB, reserved_bytes=None)
    assert record_verdict(capped) == ProbeVerdict(
        "unknown",
        "a memory fraction is set but the record lacks the reserved bytes",
        "large",
        1048576000,
    )
    assert record_verdict(distinct_record(request_bytes=None)) == ProbeVerdict(
        "unknown", "the record has no request size"
    )


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("no-hooks", "the probe could not read the allocator (no-hooks)"),
        ("async-backend", "the probe could not read the allocator (async-backend)"),
        ("error", "the probe could not read the allocator (error)"),
        ("error: boom", "the probe could not read the allocator (error: boom)"),
    ],
)
def test_a_status_other_than_ok_says_which(status: str, reason: str) -> None:
    assert record_verdict(distinct_record(status=status)) == ProbeVerdict("unknown", reason)


def test_the_fragmentation_verdict_carries_every_figure() -> None:
    # need = 1000 - 600 = 400 MiB = 0.40 of the 1000 MiB cache; no memory fraction
    assert record_verdict(distinct_record()) == ProbeVerdict(
        kind="fragmentation",
        reason=(
            "fragmentation: 1000.00 MiB free in the large pool's blocks + 600.00 MiB room cover "
            "the 1000.00 MiB request, but the largest free block is 100.00 MiB"
        ),
        pool="large",
        request_bytes=1048576000,
        cache_free_bytes=1048576000,
        largest_free_bytes=104857600,
        device_free_bytes=629145600,
        allowed_bytes=None,
        reserved_bytes=75161927680,
        cap_room_bytes=None,
        room_bytes=629145600,
        expandable_segments=True,
    )


def test_without_a_reserved_figure_the_20_mib_floor_alone_decides() -> None:
    # allocated above reserved: reserved is dropped, and no share of it can be asked for
    over = {"allocated_bytes": 71 * GiB, "reserved_bytes": 70 * GiB}
    assert distinct_record(**over).reserved_bytes is None
    assert record_verdict(distinct_record(**over)).kind == "fragmentation"
    small = {"free_bytes": 20 * MiB, "largest_free_bytes": 1 * MiB}
    v = record_verdict(
        distinct_record(**over, request_bytes=40 * MiB, device_free_bytes=32 * MiB, large=small)
    )
    assert v.kind == "fragmentation"


def test_blocks_and_room_that_exactly_cover_the_request_must_reclaim_all_the_cache() -> None:
    # 400 MiB cache + 600 MiB room = the 1000 MiB request: all 400 MiB must be reclaimed
    v = record_verdict(distinct_record(
        large={"free_bytes": 400 * MiB, "largest_free_bytes": 1 * MiB}))
    assert (v.kind, v.reason) == (
        "capacity-or-leak",
        "capacity-or-leak: 400.00 MiB free in the large pool's blocks + 600.00 MiB room would "
        "cover the 1000.00 MiB request, but 400.00 MiB of the cache must be reclaimed: more than "
        "an allocator setting was measured to recover",
    )


def test_a_fraction_below_what_is_reserved_leaves_no_room() -> None:
    # allowed 1 GiB, reserved 70 GiB: the headroom is 0, not negative, not 1 byte
    few = {"free_bytes": 100 * MiB, "largest_free_bytes": 1 * MiB}
    v = record_verdict(distinct_record(allowed_bytes=1 * GiB, device_free_bytes=1000 * MiB,
                                       large=few))
    assert (v.kind, v.cap_room_bytes, v.room_bytes, v.allowed_bytes) == ("cap", 0, 0, 1073741824)
    assert v.reason == (
        "cap: the memory fraction allows 1.00 GiB, 70.00 GiB is reserved (0 bytes left) and the "
        "device has 1000.00 MiB free for the 1000.00 MiB request"
    )


def test_under_a_fraction_the_reasons_say_so() -> None:
    capped = {"allowed_bytes": 70 * GiB + 600 * MiB, "device_free_bytes": 2000 * MiB}
    v = record_verdict(distinct_record(**capped))
    assert (v.kind, v.cap_room_bytes, v.room_bytes) == ("fragmentation", 629145600, 629145600)
    assert v.reason == (
        "fragmentation: 1000.00 MiB free in the large pool's blocks + 600.00 MiB room under the "
        "memory fraction cover the 1000.00 MiB request, but the largest free block is 100.00 MiB"
    )
    roomy = {"allowed_bytes": 70 * GiB + 1000 * MiB, "device_free_bytes": 2000 * MiB}
    v = record_verdict(distinct_record(**roomy))
    assert (v.kind, v.reason) == (
        "unknown",
        "the room under the memory fraction (1000.00 MiB) covers the 1000.00 MiB request: the "
        "record does not explain the failure",
    )
    short = {**capped, "large": {"free_bytes": 100 * MiB, "largest_free_bytes": 1 * MiB}}
    v = record_verdict(distinct_record(**short, request_bytes=3000 * MiB))
    assert (v.kind, v.reason) == (
        "capacity-or-leak",
        "capacity-or-leak: 100.00 MiB free in the large pool's blocks + 600.00 MiB room under "
        "the memory fraction fall short of the 2.93 GiB request",
    )


def test_a_largest_block_that_covers_the_request_says_so() -> None:
    v = record_verdict(distinct_record(large={"largest_free_bytes": 1000 * MiB}))
    assert (v.kind, v.reason) == (
        "unknown",
        "the largest free block (1000.00 MiB) covers the 1000.00 MiB request: the record does "
        "not explain the failure",
    )


@pytest.mark.parametrize("value", ["true", 1, 0, None, [True]])
def test_expandable_segments_is_a_json_boolean_or_absent(value: Any) -> None:
    assert distinct_record(expandable_segments=value).expandable_segments is None
    assert distinct_record(expandable_segments=False).expandable_segments is False


def test_the_last_record_line_is_read_when_an_earlier_line_has_one_too() -> None:
    parsed = find_record("step 0\n" + distinct_line(pid=8) + "\n" + distinct_line(pid=9))
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 9


def test_the_record_ends_at_its_own_line_not_the_last_newline() -> None:
    parsed = find_record(distinct_line(pid=8) + "\nstep 1\nstep 2\n")
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 8
