"""Property tests: whatever a tenant writes, the reader returns a value or a reason, never raises,
and every figure it keeps is within bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import proberecord as pr

pytestmark = pytest.mark.unit

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
