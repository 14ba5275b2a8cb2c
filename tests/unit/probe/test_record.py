"""The record the observer builds, from snapshot segments and allocator figures (fake torch)."""

from __future__ import annotations

import pytest
from gpu_auditor_probe import _record

from .probe_helpers import GiB, MiB, fake_torch, pinned_segments, segment, state

pytestmark = pytest.mark.unit


def test_pinned_segments_leave_free_memory_only_in_small_pieces() -> None:
    out = _record.summarize_segments(pinned_segments(161), device=0)
    large = out["pools"]["large"]
    assert large["segments"] == 161
    assert large["segment_bytes"] == 161 * 20 * MiB
    assert large["free_bytes"] == 161 * 12 * MiB
    assert large["largest_free_bytes"] == 12 * MiB
    assert large["hist"] == [0, 161, 0, 0, 0, 0]  # 20 MiB segments: the "<= 20 MiB" bucket
    assert out["live_allocations"] == 161
    assert out["top_allocations_bytes"] == [8 * MiB] * 24
    assert out["pools"]["small"]["segments"] == 0


def test_histogram_edges_are_inclusive() -> None:
    sizes = [2 * MiB, 2 * MiB + 1, 20 * MiB, 128 * MiB, 1 * GiB, 8 * GiB, 8 * GiB + 1]
    segs = [segment([(s, "active_allocated")]) for s in sizes]
    assert _record.summarize_segments(segs, 0)["pools"]["large"]["hist"] == [1, 2, 1, 1, 1, 1]


def test_private_pools_other_devices_and_pending_blocks_are_kept_apart() -> None:
    segs = [
        segment([(64 * MiB, "active_allocated"), (64 * MiB, "inactive")], pool_id=(1, 3)),
        segment([(2 * GiB, "inactive")], device=1),
        segment(
            [(512 * 1024, "active_allocated"), (1536 * 1024, "inactive")], segment_type="small"
        ),
        segment([(30 * MiB, "active_pending_free"), (10 * MiB, "inactive")]),
    ]
    out = _record.summarize_segments(segs, device=0)
    assert out["private_pool_bytes"] == 128 * MiB
    small, large = out["pools"]["small"], out["pools"]["large"]
    assert (small["free_bytes"], small["largest_free_bytes"]) == (1536 * 1024, 1536 * 1024)
    assert (large["free_bytes"], large["pending_free_bytes"]) == (10 * MiB, 30 * MiB)
    assert out["top_allocations_bytes"] == [512 * 1024]


def test_a_fraction_below_one_is_recorded_with_the_bytes_the_allocator_allows() -> None:
    torch = fake_torch(
        pinned_segments(2), total=140 * GiB, allocated=1 * GiB, reserved=3 * GiB, fraction=0.05
    )
    allowed = 7 * GiB
    rec = _record.at_oom(torch, state(), 0, int(4.2 * GiB), allowed, 136 * GiB)
    assert (rec["fraction"], rec["allowed_bytes"]) == (0.05, allowed)
    assert (rec["allocated_bytes"], rec["reserved_bytes"]) == (1 * GiB, 3 * GiB)
    assert (rec["request_bytes"], rec["device_free_bytes"]) == (int(4.2 * GiB), 136 * GiB)
    assert rec["device_total_bytes"] == 140 * GiB and rec["status"] == "ok"


def test_without_a_fraction_the_allocator_passes_the_device_total() -> None:
    torch = fake_torch(pinned_segments(2), total=140 * GiB)
    rec = _record.at_oom(torch, state(), 0, 2 * GiB, 140 * GiB, 1 * GiB)
    assert (rec["fraction"], rec["allowed_bytes"]) == (None, None)


def test_a_release_without_the_fraction_getter_derives_it_from_the_allowed_bytes() -> None:
    torch = fake_torch([], total=100 * GiB, fraction=None)
    rec = _record.at_oom(torch, state(), 0, 2 * GiB, 25 * GiB, 1 * GiB)
    assert (rec["fraction"], rec["allowed_bytes"]) == (0.25, 25 * GiB)


def test_expandable_segments_and_the_settings_come_from_the_allocator() -> None:
    settings = {"expandable_segments": True, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    rec = _record.at_oom(fake_torch([], settings=settings), state(), 0, 2 * GiB, 140 * GiB, 0)
    assert (rec["expandable_segments"], rec["alloc_conf"]) == (True, "expandable_segments:True")


def test_without_allocator_settings_the_environment_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,expandable_segments:False"
    )
    rec = _record.at_oom(fake_torch([]), state(), 0, 2 * GiB, 140 * GiB, 0)
    assert rec["expandable_segments"] is False  # the last one wins, as in the allocator
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "x" * 500)
    rec = _record.at_oom(fake_torch([]), state(), 0, 2 * GiB, 140 * GiB, 0)
    assert rec["alloc_conf"] == "x" * 200 and rec["expandable_segments"] is None


def test_under_cudamallocasync_the_snapshot_is_not_read() -> None:
    torch = fake_torch(
        [], snapshot_error=AssertionError("must not be called"), backend="cudaMallocAsync"
    )
    rec = _record.at_oom(torch, state("cudaMallocAsync", "async-backend"), 0, 2 * GiB, 140 * GiB, 0)
    assert rec["status"] == "async-backend" and "pools" not in rec
    assert rec["allocated_bytes"] == 0


def test_a_failing_snapshot_gives_an_error_status_and_keeps_the_figures_read_before() -> None:
    torch = fake_torch(
        [], allocated=3 * GiB, reserved=4 * GiB, snapshot_error=RuntimeError("boom\nmore")
    )
    rec = _record.at_oom(torch, state(), 0, 2 * GiB, 140 * GiB, 5)
    assert rec["status"] == "error: RuntimeError: boom more"
    assert (rec["allocated_bytes"], rec["device_free_bytes"]) == (3 * GiB, 5)


