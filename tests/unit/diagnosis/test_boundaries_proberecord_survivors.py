"""The probe record's reader at its edges (issue 18, mutation survivors of
``diagnosis/proberecord.py``): every field is read from its own key, each count's range is
inclusive at both ends, equal figures do not contradict each other, and an ``unknown`` verdict
still says which pool, which request and why. Literal numbers only."""

from __future__ import annotations

import json
from typing import Any

import pytest

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

MiB = 1048576
GiB = 1073741824


def raw(**over: Any) -> dict[str, Any]:
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


def record(**over: Any) -> ProbeRecord:
    parsed = parse_record(json.dumps(raw(**over)))
    assert parsed.record is not None, parsed.reason
    return parsed.record


def test_every_field_is_read_from_its_own_key() -> None:
    assert record() == ProbeRecord(
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
    assert getattr(record(**{field: value}), field) == kept


def test_a_histogram_bucket_count_is_bounded_like_any_count() -> None:
    assert record(large={"hist": [0, 0, 0, 0, 0, 2147483648]}).large == PoolState(
        6, 74088185856, 1048576000, 104857600, 13, (0, 0, 0, 0, 0, 2147483648)
    )
    pool = record(large={"hist": [0, 0, 0, 0, 0, 2147483649]}).large
    assert pool is not None and pool.histogram == ()
    pool = record(large={"hist": [0, 0, 0, 0, 0, -1]}).large
    assert pool is not None and pool.histogram == ()
    pool = record(large={"hist": [0, 0, 0, 0, 0, 0, 0]}).large
    assert pool is not None and pool.histogram == ()


def test_equal_figures_do_not_contradict_each_other() -> None:
    rec = record(
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
    pool = record(large={"segment_bytes": 1000 * MiB, "free_bytes": 1000 * MiB + 1}).large
    assert pool is not None and (pool.free_bytes, pool.largest_free_bytes) == (None, None)
    assert pool.segment_bytes == 1048576000


def test_at_most_eight_cut_keys_are_kept() -> None:
    cut = {name: i for i, name in enumerate("abcdefghij")}
    assert record(cut=cut).cut == tuple((name, i) for i, name in enumerate("abcdefgh"))


def test_the_whole_pools_and_the_lists_may_be_absent_or_of_the_wrong_type() -> None:
    rec = record(pools=[1, 2], top_allocations_bytes={"a": 1}, cut=[["a", 1]])
    assert (rec.large, rec.small, rec.top_allocations, rec.cut) == (None, None, (), ())
    rec = record(pools={"large": [1], "small": None})
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
    rec = record(status=status)
    assert (rec.status, rec.status_detail) == (kind, detail)


def test_a_status_over_200_characters_is_no_status() -> None:
    assert parse_record(json.dumps(raw(status="error: " + "y" * 194))) == ParsedRecord(
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
    assert parse_record(json.dumps(raw(v=version))) == ParsedRecord(None, reason)


def test_a_record_as_a_bytearray_is_read() -> None:
    parsed = parse_record(bytearray(json.dumps(raw()).encode()))
    assert parsed.record is not None and parsed.record.pid == 7


# -- finding the record in text ----------------------------------------------------------------


def line(**over: Any) -> str:
    return "gpu-auditor-probe-record " + json.dumps(raw(**over), separators=(",", ":"))


def test_text_lines_are_searched_like_byte_lines() -> None:
    lines = ["step 1", line(pid=8), "step 2", line(pid=9), "torch.OutOfMemoryError"]
    found = find_record_in_lines(lines)
    assert found is not None and found.record is not None and found.record.pid == 9
    assert find_record_in_lines(["step 1", "step 2"]) is None
    assert find_record_in_lines([]) is None


def test_a_lone_surrogate_in_the_text_does_not_hide_the_record() -> None:
    parsed = find_record("\ud800 oops\n" + line(pid=8))
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 8


def test_trailing_text_after_the_record_is_not_stripped_into_a_record() -> None:
    assert find_record(line() + "X") == ParsedRecord(None, "not JSON")
    parsed = find_record(line() + "\r\nnext")
    assert parsed is not None and parsed.record is not None


def test_the_16_kib_bound_counts_the_line_without_its_carriage_return() -> None:
    body = json.dumps(raw())
    exact = body + " " * (16384 - len(body))
    parsed = find_record("gpu-auditor-probe-record " + exact + "\r\n")
    assert parsed is not None and parsed.record is not None
    # trailing spaces count: one byte over is refused
    parsed = find_record("gpu-auditor-probe-record " + exact + " \r\n")
    assert parsed == ParsedRecord(None, "larger than 16384 bytes")


def test_text_after_a_carriage_return_is_refused_at_any_length() -> None:
    # a "\r" inside the line is not its end: "{...}\rX" is no record, short or 16 KiB long
    # (cut at the bound first and stripped after, the long one used to be read)
    body = json.dumps(raw())
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


# -- the verdict's figures and reasons -------------------------------------------------------


def test_an_unknown_verdict_names_the_pool_and_the_request() -> None:
    overs: list[dict[str, Any]] = [{"large": {"largest_free_bytes": None}}, {"pools": {}}]
    for over in overs:
        assert record_verdict(record(allowed_bytes=None, **over)) == ProbeVerdict(
            "unknown",
            "the record lacks the large pool or the device's free memory",
            "large",
            1048576000,
        )
    assert record_verdict(record(small={"free_bytes": None}, request_bytes=1048576)) == (
        ProbeVerdict(
            "unknown",
            "the record lacks the small pool or the device's free memory",
            "small",
            1048576,
        )
    )
    assert record_verdict(record(allowed_bytes=2 * GiB, reserved_bytes=None)) == ProbeVerdict(
        "unknown",
        "a memory fraction is set but the record lacks the reserved bytes",
        "large",
        1048576000,
    )
    assert record_verdict(record(request_bytes=None)) == ProbeVerdict(
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
    assert record_verdict(record(status=status)) == ProbeVerdict("unknown", reason)


def test_the_fragmentation_verdict_carries_every_figure() -> None:
    # need = 1000 - 600 = 400 MiB = 0.40 of the 1000 MiB cache; no memory fraction
    assert record_verdict(record()) == ProbeVerdict(
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
    assert record(**over).reserved_bytes is None
    assert record_verdict(record(**over)).kind == "fragmentation"
    small = {"free_bytes": 20 * MiB, "largest_free_bytes": 1 * MiB}
    v = record_verdict(
        record(**over, request_bytes=40 * MiB, device_free_bytes=32 * MiB, large=small)
    )
    assert v.kind == "fragmentation"


def test_blocks_and_room_that_exactly_cover_the_request_must_reclaim_all_the_cache() -> None:
    # 400 MiB cache + 600 MiB room = the 1000 MiB request: all 400 MiB must be reclaimed
    v = record_verdict(record(large={"free_bytes": 400 * MiB, "largest_free_bytes": 1 * MiB}))
    assert (v.kind, v.reason) == (
        "capacity-or-leak",
        "capacity-or-leak: 400.00 MiB free in the large pool's blocks + 600.00 MiB room would "
        "cover the 1000.00 MiB request, but 400.00 MiB of the cache must be reclaimed: more than "
        "an allocator setting was measured to recover",
    )


def test_a_fraction_below_what_is_reserved_leaves_no_room() -> None:
    # allowed 1 GiB, reserved 70 GiB: the headroom is 0, not negative, not 1 byte
    few = {"free_bytes": 100 * MiB, "largest_free_bytes": 1 * MiB}
    v = record_verdict(record(allowed_bytes=1 * GiB, device_free_bytes=1000 * MiB, large=few))
    assert (v.kind, v.cap_room_bytes, v.room_bytes, v.allowed_bytes) == ("cap", 0, 0, 1073741824)
    assert v.reason == (
        "cap: the memory fraction allows 1.00 GiB, 70.00 GiB is reserved (0 bytes left) and the "
        "device has 1000.00 MiB free for the 1000.00 MiB request"
    )


def test_under_a_fraction_the_reasons_say_so() -> None:
    capped = {"allowed_bytes": 70 * GiB + 600 * MiB, "device_free_bytes": 2000 * MiB}
    v = record_verdict(record(**capped))
    assert (v.kind, v.cap_room_bytes, v.room_bytes) == ("fragmentation", 629145600, 629145600)
    assert v.reason == (
        "fragmentation: 1000.00 MiB free in the large pool's blocks + 600.00 MiB room under the "
        "memory fraction cover the 1000.00 MiB request, but the largest free block is 100.00 MiB"
    )
    roomy = {"allowed_bytes": 70 * GiB + 1000 * MiB, "device_free_bytes": 2000 * MiB}
    v = record_verdict(record(**roomy))
    assert (v.kind, v.reason) == (
        "unknown",
        "the room under the memory fraction (1000.00 MiB) covers the 1000.00 MiB request: the "
        "record does not explain the failure",
    )
    short = {**capped, "large": {"free_bytes": 100 * MiB, "largest_free_bytes": 1 * MiB}}
    v = record_verdict(record(**short, request_bytes=3000 * MiB))
    assert (v.kind, v.reason) == (
        "capacity-or-leak",
        "capacity-or-leak: 100.00 MiB free in the large pool's blocks + 600.00 MiB room under "
        "the memory fraction fall short of the 2.93 GiB request",
    )


def test_a_largest_block_that_covers_the_request_says_so() -> None:
    v = record_verdict(record(large={"largest_free_bytes": 1000 * MiB}))
    assert (v.kind, v.reason) == (
        "unknown",
        "the largest free block (1000.00 MiB) covers the 1000.00 MiB request: the record does "
        "not explain the failure",
    )


@pytest.mark.parametrize("value", ["true", 1, 0, None, [True]])
def test_expandable_segments_is_a_json_boolean_or_absent(value: Any) -> None:
    assert record(expandable_segments=value).expandable_segments is None
    assert record(expandable_segments=False).expandable_segments is False


def test_the_last_record_line_is_read_when_an_earlier_line_has_one_too() -> None:
    parsed = find_record("step 0\n" + line(pid=8) + "\n" + line(pid=9))
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 9


def test_the_record_ends_at_its_own_line_not_the_last_newline() -> None:
    parsed = find_record(line(pid=8) + "\nstep 1\nstep 2\n")
    assert parsed is not None and parsed.record is not None and parsed.record.pid == 8
