"""The streaming scan: prefixes, counting, windows and bounded memory."""

from __future__ import annotations

import io

import pytest
from diagnosis_helpers import torch_oom
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import LogScanner, diagnose, diagnose_stream, scan_bytes, scan_stream
from gpu_auditor.diagnosis.logtext import (
    CHUNK_BYTES,
    HEAD_BYTES,
    MAX_LINE_BYTES,
    PRECONTEXT_BYTES,
    WINDOW_AFTER_BYTES,
    normalize_text,
)

pytestmark = pytest.mark.unit

OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
OOM2 = torch_oom(requested=4, total=79.15, free=1.2, process=77.8, allocated=76.1, unallocated=0.2)


def test_cri_prefix_rank_prefix_and_partial_lines_are_unwrapped() -> None:
    text = (
        "2026-11-29T19:00:00.1Z stderr P [rank3]: torch.OutOfMemoryError: CUDA out of me\n"
        "2026-11-29T19:00:00.2Z stderr F mory. Tried to allocate 2.00 GiB.\n"
        "[default0]:hello\n"
    )
    lines = normalize_text(text)
    assert lines[0].rank == "3"
    assert (
        lines[0].text == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    )
    assert (lines[1].rank, lines[1].text) == ("0", "hello")


def test_several_ooms_are_all_counted_and_the_last_one_reported() -> None:
    diagnosis = diagnose("noise\n" + OOM + "x\n" * 10 + OOM2 + "end\n")
    assert diagnosis.oom_count == 2
    assert diagnosis.figures.requested_bytes == 4 * 2**30


def test_the_same_failure_printed_again_is_counted_once() -> None:
    log = (
        OOM
        + "During handling...\n"
        + OOM
        + "terminate called: RuntimeError: CUDA error: out of memory\n"
    )
    diagnosis = diagnose(log)
    assert diagnosis.oom_count == 1
    assert diagnosis.kind == "fragmentation"


def test_ooms_of_different_ranks_are_different_failures() -> None:
    log = "[rank0]: " + OOM + "[rank1]: " + OOM
    diagnosis = diagnose(log)
    assert diagnosis.oom_count == 2
    assert diagnosis.to_json_dict()["rank"] == "1"


def test_cuda_malloc_async_block_after_the_failure_line_is_parsed_across_chunks() -> None:
    block = (
        b"torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. "
        b"(out of memory)\n"
        b"Currently allocated     : 0 bytes\nRequested               : 200.00 GiB\n"
        b"Device limit            : 139.80 GiB\nFree (according to CUDA): 31.12 MiB\n"
        b"PyTorch limit (set by user-supplied memory fraction)\n"
        b"                        : 17179869184.00 GiB\n"
    )
    data = b"x" * (CHUNK_BYTES - 40) + b"\n" + block
    result = scan_bytes(data, chunk_bytes=CHUNK_BYTES)
    assert result.last is not None and len(result.last.after) >= 6
    diagnosis = diagnose(data)
    assert diagnosis.figures.requested_bytes == 200 * 2**30
    assert diagnosis.figures.allowed_bytes is None  # 2^64 = no limit


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=8))
def test_result_does_not_depend_on_how_the_input_is_split(cuts: list[int]) -> None:
    data = ("step 1\n" * 300 + OOM + "tail\n" * 50 + OOM2 + "done\n").encode()
    whole = scan_bytes(data)
    scanner = LogScanner()
    position = 0
    for cut in cuts:
        scanner.feed(data[position : position + cut])
        position += cut
    scanner.feed(data[position:])
    pieces = scanner.finish()
    assert (pieces.oom_count, pieces.last) == (whole.oom_count, whole.last)


def test_memory_stays_bounded_on_a_large_stream() -> None:
    bound = (
        PRECONTEXT_BYTES + CHUNK_BYTES + MAX_LINE_BYTES + HEAD_BYTES + 2**20 + WINDOW_AFTER_BYTES
    )
    line = b"2026-11-29T19:00:00.000Z stdout F step 1 loss 0.1234 out of memory handler idle\n"
    scanner = LogScanner()
    chunk = line * (CHUNK_BYTES // len(line))
    peak = 0
    for _ in range(12):  # ~48 MiB
        scanner.feed(chunk)
        peak = max(peak, scanner.retained_bytes)
    scanner.feed(OOM.encode())
    result = scanner.finish()
    assert peak <= bound + len(chunk)
    assert result.oom_count == 1


def test_a_huge_line_without_newlines_stays_bounded() -> None:
    scanner = LogScanner()
    for _ in range(40):
        scanner.feed(b"\x00\xff" * (2**19))
        assert scanner.retained_bytes <= PRECONTEXT_BYTES + 2 * 2**20 + MAX_LINE_BYTES + HEAD_BYTES
    assert scanner.finish().oom_count == 0


def test_stream_and_bytes_give_the_same_diagnosis() -> None:
    data = ("starting torch 2.5.1\n" + OOM).encode()
    assert diagnose_stream(io.BytesIO(data)) == diagnose(data)
    assert scan_stream(io.BytesIO(data), chunk_bytes=7).oom_count == 1


def test_feed_after_finish_is_an_error() -> None:
    scanner = LogScanner()
    scanner.finish()
    with pytest.raises(ValueError):
        scanner.feed(b"x")


def test_every_keyword_contains_an_anchor_so_the_prefilter_misses_no_family() -> None:
    from gpu_auditor.diagnosis import formats

    for keyword in formats.KEYWORDS:
        assert any(anchor in keyword for anchor in formats.ANCHORS), keyword


def _real_log_lines() -> list[str]:
    from diagnosis_helpers import FIXTURES, SHARED_CORPUS

    root = FIXTURES.parents[2]
    folders = [FIXTURES, SHARED_CORPUS, root / "evaluation" / "gpu", root / "examples" / "logs"]
    lines: list[str] = []
    for folder in folders:
        for path in sorted(folder.rglob("*.log")) if folder.is_dir() else ():
            text = path.read_bytes().decode("utf-8", errors="replace")
            lines += [x.text for x in normalize_text(text.replace("\r", "\n"))]
    return lines + list(_DRIVER_LINES)


_DRIVER_LINES = (  # no real log here has the driver's wording: as CUDA and its users print it
    "RuntimeError: Error in cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
    "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
    "CUDA_ERROR_OUT_OF_MEMORY",
    "terminate called after throwing an instance of 'std::runtime_error' what(): CUDA Error: "
    "cudaErrorMemoryAllocation",
)


def test_every_wording_found_in_the_real_logs_contains_a_keyword() -> None:
    """The scan confirms only lines holding one of ``formats.KEYWORDS`` (its second filter):
    a family whose wording could match without one would be missed in a log. Every wording that
    ``find_failure`` finds on a line of the real logs (the corpora, the GPU runs, the held-out
    sets, the family fixtures) is on a line holding a keyword, from the wording on (DRIVER's
    match is the word before the code: the code is the keyword)."""
    from gpu_auditor.diagnosis import formats

    found: dict[str, int] = {}
    for line in _real_log_lines():
        hit = formats.find_failure(line)
        if hit is None:
            continue
        family, start, end = hit
        found[family] = found.get(family, 0) + 1
        rest = line[start : start + formats.MAX_MATCH_CHARS].encode("utf-8", errors="replace")
        assert any(k in rest for k in formats.KEYWORDS), (family, line[start:end])
    # the real logs hold every family: the check is not vacuous for any of them
    assert set(found) == set(formats.PRIORITY), sorted(set(formats.PRIORITY) - set(found))
