"""The record line: bounded under 4 KiB, cut in a stated order, written whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gpu_auditor_probe import _hook, _record, _write

from gpu_auditor.diagnosis import proberecord as pr
from gpu_auditor.diagnosis.proberecord import find_record

from .probe_helpers import GiB, MiB, fake_torch, pinned_segments

pytestmark = pytest.mark.unit


def full_record() -> dict:
    s = _hook.ProbeState()
    s.backend, s.oom_count = "native", 1
    torch = fake_torch(pinned_segments(161), allocated=1 * GiB, reserved=3 * GiB, fraction=0.05)
    rec = _record.at_oom(torch, s, 0, int(4.2 * GiB), 7 * GiB, 136 * GiB)
    rec["alloc_conf"] = "max_split_size_mb:128," + "garbage_collection_threshold:0.8," * 5
    return rec


def test_a_full_record_fits_the_default_bound_uncut() -> None:
    line = _write.encode(full_record(), 4000)
    assert len(line) < 1400 and line.startswith(b"gpu-auditor-probe-record {")
    assert b'"cut"' not in line and line.endswith(b"}\n") and line.count(b"\n") == 1


def test_the_largest_allocations_are_cut_first_and_the_cut_is_stated() -> None:
    rec = full_record()
    uncut = len(_write.encode(rec, 4000))
    line = _write.encode(rec, uncut - 30)
    body = json.loads(line.split(b" ", 1)[1])
    assert len(line) <= uncut - 30
    # each "8388608," is 8 bytes and ',"cut":{"top_allocations_bytes":8}' adds 34: shedding 30
    # bytes takes (30 + 34) / 8 = 8 sizes
    assert body["cut"] == {"top_allocations_bytes": 8}
    assert len(body["top_allocations_bytes"]) == 16 and body["alloc_conf"] == rec["alloc_conf"]


def test_settings_then_histograms_go_only_once_all_sizes_are_cut() -> None:
    rec = full_record()
    for limit in range(1100, 400, -25):
        line = _write.encode(rec, limit)
        assert len(line) <= limit
        body = json.loads(line.split(b" ", 1)[1])
        cut = body.get("cut", {})
        if "alloc_conf" in cut:
            assert body["top_allocations_bytes"] == [] and cut["top_allocations_bytes"] == 24
        if "hist" in cut:
            assert cut["alloc_conf"] == 1 and body["alloc_conf"] is None


@pytest.mark.parametrize("limit", [1024, 700, 600])
def test_what_the_verdict_needs_survives_every_cut(limit: int) -> None:
    line = _write.encode(full_record(), limit)
    assert len(line) <= limit
    parsed = find_record(line)
    assert parsed is not None and parsed.record is not None
    record = parsed.record
    assert record.request_bytes == int(4.2 * GiB) and record.allowed_bytes == 7 * GiB
    assert record.large is not None and record.large.free_bytes == 161 * 12 * MiB
    assert record.large.largest_free_bytes == 12 * MiB


def test_a_record_that_cannot_fit_says_so() -> None:
    rec = {"probe": "gpu-auditor", "v": 1, "status": "ok", "torch": "t" * 5000}
    line = _write.encode(rec, 1024)
    assert len(line) <= 1024
    assert json.loads(line.split(b" ", 1)[1])["status"] == "error: too big"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", 4000), ("1023", 1024), ("1025", 1025), ("4096", 4096), ("4097", 4096), ("4k", 4000)],
)
def test_the_bound_is_clamped(monkeypatch: pytest.MonkeyPatch, raw: str, expected: int) -> None:
    monkeypatch.setenv("GPU_AUDITOR_PROBE_MAX_BYTES", raw)
    assert _write.max_bytes() == expected


def test_a_plain_file_is_replaced_whole_with_no_temporary_left(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    target.write_bytes(b"old content " * 1000)
    _write.write_file(str(target), b"new\n")
    assert target.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["termination-log"]


def test_a_link_is_written_through_in_place_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"x" * 100)
    link = tmp_path / "link"
    link.symlink_to(real)
    _write.write_file(str(link), b"record\n")
    assert link.is_symlink() and real.read_bytes() == b"record\n"


def test_when_rename_fails_the_file_is_truncated_and_written_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "termination-log"
    target.write_bytes(b"y" * 5000)

    def busy(src: str, dst: str) -> None:
        raise OSError(16, "Device or resource busy")  # renaming over kubelet's bind mount

    monkeypatch.setattr(os, "replace", busy)
    _write.write_file(str(target), b"record\n")
    assert target.read_bytes() == b"record\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["termination-log"]


def test_the_default_path_is_used_only_where_kubelet_created_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPU_AUDITOR_PROBE_PATH", raising=False)
    monkeypatch.setattr(_write, "DEFAULT_PATH", str(tmp_path / "termination-log"))
    assert _write.target_path() is None
    (tmp_path / "termination-log").write_bytes(b"")
    assert _write.target_path() == str(tmp_path / "termination-log")
    monkeypatch.setenv("GPU_AUDITOR_PROBE_PATH", "")
    assert _write.target_path() is None


def test_publish_swallows_an_unwritable_path(monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    monkeypatch.setenv("GPU_AUDITOR_PROBE_PATH", "/nonexistent-dir/record")
    _write.publish({"probe": "gpu-auditor", "v": 1, "status": "ok", "request_bytes": 20 * MiB})
    err = capfd.readouterr().err
    assert err.startswith("gpu-auditor-probe-record {") and err.endswith("}\n")


def test_the_probe_and_the_reader_agree_on_the_contract() -> None:
    from gpu_auditor_probe import _record, _write

    assert _write.MARKER == pr.MARKER
    assert (_record.PROBE_ID, _record.SCHEMA_VERSION) == (pr.PROBE_ID, pr.SCHEMA_VERSION)
    assert len(_record.HIST_EDGES) + 1 == pr.HIST_BUCKETS
