"""Hostile framing: over-long lines, carriage returns, nested JSON, bytes that are not text.

Issue 11: after 64 KiB without a newline the rest of the chunk was never scanned, so an OOM
printed after a long progress bar (tqdm redraws with ``\\r``: one "line" of megabytes) was missed;
a docker-json line wrapping deeply nested JSON raised RecursionError.
"""

from __future__ import annotations

import json

import pytest
from diagnosis_helpers import GIB, torch_oom
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import LogScanner, diagnose, scan_bytes
from gpu_auditor.diagnosis.logtext import (
    CHUNK_BYTES,
    HEAD_BYTES,
    LOOKAROUND_BYTES,
    MAX_LINE_BYTES,
    PRECONTEXT_BYTES,
    WINDOW_AFTER_BYTES,
)

pytestmark = pytest.mark.unit

OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
OOM4 = torch_oom(requested=4, total=79.15, free=1.2, process=77.8, allocated=76.1, unallocated=0.2)


def tqdm(n: int) -> str:
    """``n`` redraws of a progress bar, carriage-return separated, as tqdm writes them."""
    return "".join(
        f"\rEpoch 0: {i % 100:3d}%|####      | {i}/{n} [00:{i % 60:02d}<00:00]" for i in range(n)
    )


@pytest.mark.parametrize("length", [65_537, 70_000, 1_000_000, CHUNK_BYTES + 12_345])
def test_a_failure_after_a_line_longer_than_64_kib_is_found(length: int) -> None:
    diagnosis = diagnose("x" * length + " " + OOM)
    assert diagnosis.detected and diagnosis.oom_count == 1
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None
    assert diagnosis.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_a_failure_after_a_progress_bar_on_the_same_line_is_found() -> None:
    bar = tqdm(6000)
    assert len(bar) > 4 * MAX_LINE_BYTES and "\n" not in bar
    diagnosis = diagnose(bar + "\r" + OOM)
    assert (diagnosis.kind, diagnosis.oom_count) == ("fragmentation", 1)
    assert diagnosis.message is not None
    assert diagnosis.message.startswith("torch.OutOfMemoryError")


def test_a_carriage_return_ends_a_line_for_the_rank_and_the_message() -> None:
    line = "2026-11-29T19:00:00.1Z stderr F [rank1]: " + tqdm(50) + "\r" + OOM
    diagnosis = diagnose(line)
    assert diagnosis.to_json_dict()["rank"] == "1"  # the prefix of the line the bar is on
    assert diagnosis.message is not None and diagnosis.message.startswith("torch.OutOfMemory")


def test_a_crlf_log_keeps_its_multi_line_message() -> None:
    log = (
        "step 1\r\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
        "total capacity; 70.10 GiB already allocated;\r\n 1.20 GiB free; 77.00 GiB reserved in "
        "total by PyTorch)\r\nstep 2\r\n"
    )
    diagnosis = diagnose(log)
    assert diagnosis.figures.free_bytes == round(1.2 * GIB)
    assert diagnosis.figures.reserved_unallocated_bytes == round(6.9 * GIB)


@pytest.mark.parametrize("edge", [-400, -30, -1, 0, 1, 7, 25, 60, 150, 299, 2000])
def test_a_failure_across_a_block_edge_of_a_long_line_is_found_once(edge: int) -> None:
    # the 64 KiB block edge falls ``edge`` bytes into the message (before it when negative)
    filler = "y" * (MAX_LINE_BYTES - edge - 1) + " "
    diagnosis = diagnose(filler + OOM.rstrip("\n") + " " + "z" * MAX_LINE_BYTES + "\n")
    assert diagnosis.oom_count == 1
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None and diagnosis.message.startswith("torch.OutOfMemory")


def test_two_failures_on_one_long_line_are_two_and_the_last_is_reported() -> None:
    line = "x" * 100_000 + " " + OOM.rstrip("\n") + " " + "x" * 100_000 + " " + OOM4
    diagnosis = diagnose(line)
    assert diagnosis.oom_count == 2
    assert diagnosis.figures.requested_bytes == 4 * GIB


def test_one_failure_printed_twice_on_a_long_line_is_counted_once() -> None:
    line = "x" * 100_000 + " " + OOM.rstrip("\n") + " | " + OOM.rstrip("\n") + " " + "x" * 50
    assert diagnose(line + "\n").oom_count == 1


def test_a_long_line_takes_its_rank_from_its_start() -> None:
    line = "[rank2]: " + "x" * 200_000 + " " + OOM
    assert diagnose(line).to_json_dict()["rank"] == "2"


def test_invalid_utf8_and_nuls_around_a_failure_on_one_line() -> None:
    data = b"\x00\xff\xfe" * 40_000 + b" \xc3" + OOM.encode() + b"\x00\xed\xa0\x80" * 10
    diagnosis = diagnose(data)
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert json.loads(json.dumps(diagnosis.to_json_dict())) == diagnosis.to_json_dict()


def test_a_long_line_of_failure_keywords_stays_bounded_and_the_real_one_is_found() -> None:
    scanner = LogScanner()
    chunk = b"out of memory? CUDA_ERROR " * (CHUNK_BYTES // 26)
    bound = (
        PRECONTEXT_BYTES + CHUNK_BYTES + MAX_LINE_BYTES + LOOKAROUND_BYTES + HEAD_BYTES + 2**20
    ) + WINDOW_AFTER_BYTES
    for _ in range(8):  # 32 MiB on one line
        scanner.feed(chunk)
        assert scanner.retained_bytes <= bound + len(chunk)
    scanner.feed(b"\r" + OOM.encode())
    result = scanner.finish()
    assert result.oom_count == 1
    assert result.last is not None and "Tried to allocate 2.00 GiB" in result.last.line.text


LONG = (
    "[rank0]: "
    + tqdm(3000)
    + "\r"
    + OOM.rstrip("\n")
    + " "
    + "x" * 90_000
    + " "
    + OOM4.rstrip("\n")
    + "\n"
    + "y" * 70_000
    + " RuntimeError: CUDA error: out of memory "
    + "z" * 5000
    + "\n"
).encode()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=150_000), min_size=1, max_size=10))
def test_a_long_line_gives_the_same_result_however_it_is_split(cuts: list[int]) -> None:
    whole = scan_bytes(LONG)
    scanner = LogScanner()
    position = 0
    for cut in cuts:
        scanner.feed(LONG[position : position + cut])
        position += cut
    scanner.feed(LONG[position:])
    pieces = scanner.finish()
    assert (pieces.oom_count, pieces.last) == (whole.oom_count, whole.last)
    assert whole.oom_count == 3


@pytest.mark.parametrize("chunk", [1000, 65_536, 65_537, 200_000])
def test_a_long_line_gives_the_same_result_for_any_chunk_size(chunk: int) -> None:
    assert scan_bytes(LONG, chunk_bytes=chunk) == scan_bytes(LONG)


def test_a_docker_json_line_around_deeply_nested_json_does_not_recurse() -> None:
    nested = '{"log":' + "[" * 100_000 + "\n"
    diagnosis = diagnose(nested + OOM)
    assert diagnosis.detected and diagnosis.figures.requested_bytes == 2 * GIB
    inline = '{"log":' + "{" * 100_000 + OOM  # the failure on the same, undecodable, line
    assert diagnose(inline).figures.requested_bytes == 2 * GIB
    short = '{"log":' + "[" * 5_000 + OOM  # under 64 KiB: the line is unwrapped, then matched
    assert diagnose(short).figures.requested_bytes == 2 * GIB


def test_a_docker_json_record_is_unwrapped_escapes_and_all() -> None:
    record = json.dumps({"log": "[rank2]: é\t" + OOM, "stream": "stderr", "time": "2026-01-01"})
    diagnosis = diagnose(record + "\n")
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.to_json_dict()["rank"] == "2"


def test_a_docker_json_record_with_a_bad_escape_is_read_as_plain_text() -> None:
    record = '{"log":"\\q ' + OOM.rstrip("\n") + '\\n","stream":"stderr"}\n'
    assert diagnose(record).figures.requested_bytes == 2 * GIB


def test_a_docker_json_progress_bar_keeps_the_failure_in_the_message() -> None:
    record = json.dumps({"log": tqdm(200) + "\r" + OOM, "stream": "stderr"})
    diagnosis = diagnose(record + "\n")
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None and diagnosis.message.startswith("torch.OutOfMemory")
