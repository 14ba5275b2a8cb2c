"""The point catalogue's design arithmetic and coverage (pure, no torch).

python -m pytest evaluation/gpu/sweep/test_points.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import points
from points import MiB, Pattern, Point

pytestmark = pytest.mark.unit


def split(count: int, first_mib: int, size_mib: int) -> Pattern:
    return Pattern("split", count=count, first=first_mib * MiB, size=size_mib * MiB)


def test_the_catalogue_is_sound() -> None:
    assert points.validate(points.POINTS) == []


def test_split_pattern_slack_and_live() -> None:
    p = split(7, 32, 20)
    assert (p.live, p.slack, p.largest_piece) == (140 * MiB, 84 * MiB, 12 * MiB)


def test_pinned_8_mib_keeps_one_block_per_20_mib_segment() -> None:
    p = Pattern("pinned", count=161, size=8 * MiB)
    # frag_pinned.py's own figures: 1.26 GiB allocated, 1.89 GiB reserved but unallocated
    assert (p.live, p.slack, p.allocations) == (1288 * MiB, 1932 * MiB, 322)


def test_small_pool_slack() -> None:
    p = Pattern("small", count=1024, size=512 * 1024, keep_every=4)
    assert (p.live, p.slack, p.largest_piece) == (512 * MiB, 1536 * MiB, 0)


def test_rounding_slack_is_counted_as_allocated() -> None:
    p = Pattern("round", count=512, size=11 * MiB)
    assert (p.live, p.slack, p.hidden) == (512 * 12 * MiB, 0, 512 * MiB)


def test_free_memory_at_the_request_is_r_plus_h_minus_u() -> None:
    pt = Point("x", "A", "", "full", split(7, 32, 20), request=64 * MiB, headroom=24 * MiB)
    assert pt.native_free_at_request() == 4 * MiB
    assert pt.budget() == (140 + 64 + 24) * MiB
    assert pt.expect_native_oom()


def test_a_pattern_that_cannot_be_built_is_refused() -> None:
    # U 84 MiB, R 64 MiB: headroom below 20 MiB would need negative free memory
    pt = Point("x", "A", "", "full", split(7, 32, 20), request=64 * MiB, headroom=19 * MiB)
    assert any("cannot be built" in p for p in pt.problems())
    ok = Point("x", "A", "", "full", split(7, 32, 20), request=64 * MiB, headroom=20 * MiB)
    assert ok.problems() == []


def test_a_request_that_fits_a_slack_piece_is_refused() -> None:
    pt = Point("x", "A", "", "full", split(4, 64, 20), request=44 * MiB, headroom=200 * MiB)
    assert any("fits a slack piece" in p for p in pt.problems())


def test_a_leak_must_reach_its_failing_step() -> None:
    # U 1536 MiB, H 640 MiB: a leak of 512 MiB/step runs out one step early (512 + 640 < 1536)
    u = split(64, 64, 40)
    early = Point("x", "I", "", "full", u, 1024 * MiB, 640 * MiB, "leak", 512 * MiB, 6)
    assert any("before step 6" in p for p in early.problems())
    ok = Point("x", "I", "", "full", u, 1024 * MiB, 640 * MiB, "leak", 1024 * MiB, 6)
    assert ok.problems() == []


def test_the_catalogue_spans_the_rule_boundaries() -> None:
    alloc = [p for p in points.POINTS if p.job == "alloc"]
    slack = [p.pattern.slack for p in alloc if p.pattern.slack]
    assert min(slack) <= 12 * MiB and max(slack) >= 4 * 1024 * MiB
    heads = [p.headroom for p in alloc]
    assert min(heads) < 0 and max(heads) >= 3 * 1024 * MiB
    assert any(0 <= p.headroom <= 64 * MiB for p in alloc)
    ratios = [p.pattern.slack / p.request for p in alloc if p.pattern.slack]
    assert min(ratios) < 0.25 < max(ratios)  # both sides of today's U >= 0.25 R rule
    assert {p.pattern.kind for p in alloc} == set(points.PATTERNS)
    assert {p.dynamics for p in alloc} == set(points.DYNAMICS)
    assert {p.mode for p in points.POINTS} == set(points.MODES)
    assert any(p.job == "mlp" for p in points.POINTS)
    assert not any(p.expect_native_oom() for p in alloc if p.name.endswith("noOOM"))


def test_select_by_group_and_name_and_run_order() -> None:
    got = points.select("J-cap-u84-h24,A")
    assert got[0].name == "J-cap-u84-h24" and all(p.group == "A" for p in got[1:])
    ordered = points.run_order(got)
    assert ordered[-1].name == "J-cap-u84-h24"
    with pytest.raises(ValueError, match="no point or group"):
        points.select("Z")
