"""The streaming log scanner at its edges (issue 18, mutation survivors of
``diagnosis/logtext.py``): docker json-file and CRI records joined exactly (a trailing space, a
record that is not JSON, a partial record at 64 KiB and at the end of the log); a line ending at
``\\r`` and the rank of its newline-ended line (at the log start, after a newline at buffer index
0, 256 KiB back, after the buffer was trimmed); a failure printed from byte 0; a failure line of
8 KiB or more (kept whole: its rank, the lines after it, the text before it, its re-print); a
long line's 64 KiB blocks (a wording at the block edge whatever the chunking, an exception name
back to the line start and at most 128 bytes back, ``$`` at the line's end, a glued word at the
edge); counting once within 16 KiB (exactly 16,384 bytes) and across 1,025 ranks; the richer
re-print replacing the reported failure; and the work done staying linear (bytes searched,
decoded, read per call). Literal numbers and real message wording only."""

from __future__ import annotations

import io
import json
import re
import sys
from typing import Any

import pytest
from diagnosis_helpers import torch_oom

from gpu_auditor.diagnosis import LogScanner, logtext, scan_bytes, scan_stream
from gpu_auditor.diagnosis.logtext import Line, ScanResult, normalize_lines, normalize_text

pytestmark = pytest.mark.unit

OOM_A = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
OOM_B = torch_oom(requested=4, total=79.15, free=1.2, process=77.8, allocated=76.1, unallocated=0.2)
A = OOM_A.rstrip("\n")  # the message without its newline
B = OOM_B.rstrip("\n")
RAW = "RuntimeError: CUDA error: out of memory"


def scan_cut(data: bytes, *cuts: int) -> ScanResult:
    """Feed ``data`` split at the absolute offsets ``cuts``."""
    scanner = LogScanner()
    position = 0
    for cut in cuts:
        scanner.feed(data[position:cut])
        position = cut
    scanner.feed(data[position:])
    return scanner.finish()


def same_however_split(data: bytes, *sizes: int) -> ScanResult:
    """The result of ``data`` in one piece, checked equal for every chunk size in ``sizes``."""
    whole = scan_bytes(data, chunk_bytes=max(1, len(data)))
    for size in sizes:
        assert scan_bytes(data, chunk_bytes=size) == whole, size
    return whole


def cri(tag: str, text: str) -> str:
    return f"2026-11-29T19:00:00.123456789Z stderr {tag} {text}"


def docker(log: str) -> str:
    return json.dumps({"log": log, "stream": "stderr", "time": "2026-11-29T19:00:00.1Z"})


# -- docker json-file and CRI records ----------------------------------------------------------


def test_docker_records_split_at_a_space_join_back_exactly() -> None:
    # docker's json-file driver splits a long line into records without "\n"; here right after
    # "capacity of ": the space is the message's, not padding to strip
    cut = A.index("79.15 GiB")
    records = [docker(A[:cut]), docker(A[cut:] + "\n"), docker("step 2\n")]
    assert A[:cut].endswith("capacity of ")
    assert normalize_lines(records) == [Line(A), Line("step 2")]
    result = scan_bytes("\n".join(records).encode())
    assert result.oom_count == 1
    assert result.last is not None and result.last.line.text == A


def test_a_full_docker_record_is_its_log_without_the_newline() -> None:
    lines = normalize_lines([docker("Initializing JAX\n"), docker("\n"), docker("step 1  \n")])
    assert lines == [Line("Initializing JAX"), Line(""), Line("step 1  ")]


def test_a_docker_record_that_is_not_valid_json_is_a_whole_line_kept_as_written() -> None:
    bad = '{"log":"bad escape \\q here\\n","stream":"stderr"}'
    assert normalize_lines([bad, docker("step 2\n")]) == [Line(bad), Line("step 2")]


def test_a_docker_record_with_an_empty_log_and_oom_words_elsewhere_is_no_failure() -> None:
    # the scan confirms this line (it holds a keyword); its log text is empty (a partial record)
    line = '{"log":"","stream":"stderr","attrs":{"msg":"CUDA error: out of memory"}}'
    assert normalize_lines([line]) == []
    result = scan_bytes(f"{line}\nstep 2\n".encode())
    assert (result.oom_count, result.last) == (0, None)


def test_cri_partial_records_join_with_their_spaces_and_crlf_lines_lose_only_the_cr() -> None:
    cut = A.index("79.15 GiB")
    middle = A.index("Of the allocated")
    text = "\n".join(
        [cri("P", A[:cut]), cri("P", A[cut:middle]), cri("F", A[middle:]), "step 2\r", "ok"]
    )
    assert normalize_text(text) == [Line(A), Line("step 2"), Line("ok")]
    assert normalize_text("step 1\r\nusing JAX\r\n") == [
        Line("step 1"),
        Line("using JAX"),
        Line(""),
    ]


def test_a_cri_partial_line_is_flushed_past_64_kib_not_at_64_kib() -> None:
    exact = "0" * 65536
    assert normalize_lines([cri("P", exact), cri("F", "tail")]) == [Line(exact + "tail")]
    over = "0" * 65537
    assert normalize_lines([cri("P", over), cri("F", "tail"), cri("F", "next")]) == [
        Line(over),
        Line("tail"),
        Line("next"),
    ]


def test_a_partial_record_at_the_end_of_the_log_is_a_line() -> None:
    assert normalize_lines([cri("F", "step 1"), cri("P", "last words")]) == [
        Line("step 1"),
        Line("last words"),
    ]
    assert normalize_lines([docker("step 1\n"), docker("last words")]) == [
        Line("step 1"),
        Line("last words"),
    ]


def test_a_cri_split_failure_far_into_the_log_is_reported_whole() -> None:
    # the failure line is a partial record: the reported line is the joined one
    cut = A.index("1.20 GiB")
    log = "step\n" * 2000 + cri("P", "[rank0]: " + A[:cut]) + "\n" + cri("F", A[cut:]) + "\n"
    result = same_however_split(log.encode(), 4096, 10_007)
    assert result.last is not None
    assert result.last.line == Line(A, "0")


# -- a failure printed from byte 0 -------------------------------------------------------------

TF = (
    "OOM when allocating tensor with shape[8,1024,1024] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
)


@pytest.mark.parametrize("lead", ["", " "])
def test_a_failure_at_the_first_byte_of_the_log_is_found(lead: str) -> None:
    result = same_however_split(f"{lead}{TF}\nstep 2\n".encode(), 1, 7, 64)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "tensorflow"


# -- carriage returns: the line and the rank of its newline-ended line -------------------------


def tqdm(n: int) -> str:
    return "".join(f"\rEpoch 0: {i % 100:3d}%|####      | {i}/{n}" for i in range(n))


def test_a_failure_after_a_carriage_return_is_its_own_line_with_the_physical_lines_rank() -> None:
    log = f"[rank0]: starting\n[rank0]: step 0\n[rank1]: {tqdm(20)}\r{RAW}\n[rank1]: next\n"
    result = same_however_split(log.encode(), 1, 13, 100)
    assert result.last is not None
    assert result.last.line == Line(RAW, "1")


def test_a_log_that_starts_with_a_carriage_return_still_splits_there() -> None:
    result = same_however_split(f"{tqdm(20)}\r{RAW}\nnext\n".encode(), 5, 64)
    assert result.last is not None and result.last.line == Line(RAW)


def test_a_newline_at_byte_0_starts_the_physical_line_after_it() -> None:
    result = same_however_split(f"\n[rank1]: Epoch 1\r{RAW}\n".encode(), 3)
    assert result.last is not None and result.last.line == Line(RAW, "1")


def test_a_chunk_ending_at_a_carriage_return_does_not_glue_the_lines() -> None:
    data = f"step 0\n[rank0]: Epoch 1/3 50%\r{A}\nafter\n".encode()
    split = data.index(b"\r") + 1
    assert scan_cut(data, split) == scan_bytes(data)
    result = scan_cut(data, split)
    assert result.last is not None and result.last.line == Line(A, "0")
    # the text before it ends with the bar's segment, kept though it does not end the line
    assert result.last.before == (Line("step 0"), Line("Epoch 1/3 50%", "0"))


def test_two_failures_on_one_physical_line_both_take_its_rank() -> None:
    log = f"step 0\n[rank1]: Epoch 1\r{A}\rEpoch 2\r{B}\n"
    result = same_however_split(log.encode(), 1, 50, 333)
    assert result.oom_count == 2
    assert result.last is not None and result.last.line == Line(B, "1")


def test_a_physical_line_150_kib_into_the_log_gives_its_rank() -> None:
    log = "0, " * 50_000 + f"\n[rank1]: Epoch 1\r{RAW}\n"
    result = same_however_split(log.encode(), 65_536)
    assert result.last is not None and result.last.line == Line(RAW, "1")


def test_the_rank_reaches_back_256_kib_and_no_further() -> None:
    # failure A 200,000 bytes into its physical line: its rank; failure B 300,000 bytes in: none
    log = f"step 0\n[rank1]: {'a' * 200_000}\r{A}\r{'b' * 100_000}\r{B}\n"
    result = same_however_split(log.encode(), 65_536)
    assert result.oom_count == 2
    assert result.last is not None and result.last.line == Line(B, None)
    first = scan_bytes(f"step 0\n[rank1]: {'a' * 200_000}\r{A}\n".encode())
    assert first.last is not None and first.last.line.rank == "1"


def test_a_failure_exactly_256_kib_after_the_log_start_gets_the_rank_printed_there() -> None:
    head = "[rank1]: " + "x" * (262_144 - 9 - 1) + "\r"
    assert len(head) == 262_144
    result = scan_bytes((head + RAW + "\n").encode())
    assert result.last is not None and result.last.line == Line(RAW, "1")
    late = scan_bytes(("[rank1]: " + "x" * (262_144 - 9) + "\r" + RAW + "\n").encode())
    assert late.last is not None and late.last.line == Line(RAW, None)


NEWLINE_256K = "starting\n[rank1]: " + "x" * (262_144 - 9 - 1) + "\r" + RAW + "\n"
_SEGMENT = "[rank1]: " + "x" * 70_000 + " out of memory handler idle\r"  # a long line, looked up
LOOKED_UP_256K = "starting\n" + _SEGMENT + "y" * (262_144 - len(_SEGMENT) - 1) + "\r" + RAW + "\n"


def test_a_failure_exactly_256_kib_after_a_looked_up_line_start_between_gets_its_rank() -> None:
    # a failure looked up in between: the line start is known, and 262,144 bytes is in reach
    between = "[rank1]: " + "x" * 70_000 + "\r" + "z" * 100 + "\r" + RAW + "\r"
    log = "step\n" + between + "y" * (262_144 - len(between) - 1) + "\r" + RAW + " again\n"
    assert log.index(RAW + " again") - 5 == 262_144
    result = scan_bytes(log.encode())
    assert result.oom_count == 2
    assert result.last is not None and result.last.line.rank == "1"


NEWLINE_256K_PLUS_1 = "starting\n[rank1]: " + "x" * (262_144 - 9) + "\r" + RAW + "\n"


@pytest.mark.parametrize("log", [NEWLINE_256K, LOOKED_UP_256K], ids=["newline", "looked-up"])
def test_a_failure_exactly_256_kib_after_a_newline_gets_the_rank_printed_there(log: str) -> None:
    # the physical line starts 262,144 bytes before the failure; its newline is one byte further
    assert log.index(RAW) - len("starting\n") == 262_144
    result = same_however_split(log.encode(), 1_000, 65_536, 262_152, 262_153)
    assert result.last is not None and result.last.line == Line(RAW, "1")


def test_a_failure_262_145_bytes_after_a_newline_has_no_rank() -> None:
    log = NEWLINE_256K_PLUS_1
    assert log.index(RAW) - len("starting\n") == 262_145
    result = same_however_split(log.encode(), 1_000, 65_536, 262_152, 262_153)
    assert result.last is not None and result.last.line == Line(RAW, None)


def test_carriage_return_ranks_after_the_buffer_was_trimmed() -> None:
    filler = "step 1 loss 0.1234\n" * 80_000  # 1.5 MB: the buffer is trimmed on the way
    log = filler + f"[rank0]: Epoch 1\r{A}\n[rank1]: Epoch 1\r{B}\n[rank1]: done\n"
    result = same_however_split(log.encode(), 65_536, 300_007)
    assert result.oom_count == 2
    assert result.last is not None and result.last.line == Line(B, "1")


def test_a_rank_prefix_after_a_carriage_return_is_the_lines_own() -> None:
    log = f"[rank0]: Epoch 1/3 50%\r[rank1]: {A}\n"
    result = scan_bytes(log.encode())
    assert result.last is not None and result.last.line == Line(A, "1")


# -- a failure line of 8 KiB or more: kept whole -----------------------------------------------

LONG = "step 7 batch " + "0, " * 3000 + A  # 9,000 bytes of batch figures then the message


@pytest.mark.parametrize("prefix", ["", "[rank1]: "])
def test_a_failure_line_over_8_kib_keeps_its_rank_the_lines_after_and_the_text_before(
    prefix: str,
) -> None:
    before = "epoch 1\nepoch 2\n"
    log = f"{before}{prefix}{LONG}\n{prefix}after 1\n{prefix}after 2\n"
    result = same_however_split(log.encode(), 4096)
    rank = "1" if prefix else None
    assert result.oom_count == 1
    assert result.last is not None
    assert result.last.line == Line(LONG, rank)
    assert result.last.after[:2] == (Line("after 1", rank), Line("after 2", rank))
    assert result.last.precontext == before
    assert result.last.before == (Line("epoch 1"), Line("epoch 2"))


def test_a_failure_line_over_8_kib_printed_again_is_counted_once() -> None:
    log = f"[rank1]: {LONG}\n[rank1]: {A}\n"
    result = same_however_split(log.encode(), 4096)
    assert result.oom_count == 1
    assert result.last is not None and result.last.line == Line(LONG, "1")


def test_a_failure_line_of_exactly_8192_bytes_keeps_the_lines_after_it() -> None:
    line = "x" * (8192 - len(A) - 1) + " " + A
    assert len(line) == 8192
    result = scan_bytes(f"{line}\nafter 1\nafter 2\n".encode())
    assert result.last is not None and result.last.line == Line(line)
    assert result.last.after[:2] == (Line("after 1"), Line("after 2"))


AFTER_TAIL = "".join(f"after {i} " + "y" * (999 - len(f"after {i} ")) + "\n" for i in range(12))


@pytest.mark.parametrize("length", [len(A), 8000, 8190, 8191, 8192, 9000])
def test_the_after_window_is_8_kib_from_the_failure_lines_end_whatever_its_length(
    length: int,
) -> None:
    # 8,192 bytes after the line break: eight lines of 1,000 bytes, then 192 bytes of the ninth
    line = A if length == len(A) else "x" * (length - len(A) - 1) + " " + A
    assert len(line) == length
    result = same_however_split(f"{line}\n{AFTER_TAIL}".encode(), 4096, 8193)
    assert result.last is not None and result.last.line == Line(line)
    after = [x.text for x in result.last.after]
    assert after[:8] == AFTER_TAIL.splitlines()[:8]
    assert after[8:] == [AFTER_TAIL.splitlines()[8][:192]]



@pytest.mark.parametrize("lead", [1, 20_001], ids=["after-1-byte", "after-20-kb"])
def test_the_after_window_is_counted_from_the_line_not_from_the_log_start(lead: int) -> None:
    # the failure line starts ``lead`` bytes into the log: the window is still 8,192 bytes from
    # its end (a window counted from offset 0 would hold ``lead`` bytes more)
    head = "".join("z" * 99 + "\n" for _ in range(lead // 100)) + "w" * (lead % 100 - 1) + "\n"
    assert len(head) == lead
    log = f"{head}{A}\n{AFTER_TAIL}"
    result = same_however_split(log.encode(), 4096, 30_000)
    assert result.last is not None and result.last.line == Line(A)
    after = [x.text for x in result.last.after]
    assert after[:8] == AFTER_TAIL.splitlines()[:8]
    assert after[8:] == [AFTER_TAIL.splitlines()[8][:192]]


def test_a_richer_reprint_keeps_the_after_window_of_its_own_line() -> None:
    # the raw CUDA error, then PyTorch's message for the same failure (within 16 KiB, another
    # family): the message is reported, and its window is 8,192 bytes from its own line's end
    line = "x" * (4000 - len(A) - 1) + " " + A
    log = f"{RAW}\n{line}\n{AFTER_TAIL}"
    result = same_however_split(log.encode(), 4096)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "torch"
    assert result.last.line == Line(line)
    after = [x.text for x in result.last.after]
    assert after[:8] == AFTER_TAIL.splitlines()[:8]
    assert after[8:] == [AFTER_TAIL.splitlines()[8][:192]]


@pytest.mark.parametrize("length", [8191, 8192])
def test_a_failure_segment_before_a_carriage_return_at_8_kib(length: int) -> None:
    """Under 8,192 bytes the failure is read from its window, up to its newline (the segments
    after its carriage return stay on its line, as for the long lines above); from 8,192 bytes it
    is kept as read, one segment, and the next segment is the first line after it."""
    line = "x" * (length - len(A) - 1) + " " + A
    log = f"{line}\rEpoch 2:  10%\nafter 1\n"
    result = same_however_split(log.encode(), 4096)
    assert result.last is not None
    if length < 8192:
        assert result.last.line == Line(line + "\rEpoch 2:  10%")
        assert result.last.after[:1] == (Line("after 1"),)
    else:
        assert result.last.line == Line(line)
        assert result.last.after[:2] == (Line("Epoch 2:  10%"), Line("after 1"))

# -- a long line's 64 KiB blocks ---------------------------------------------------------------


def test_a_failure_at_the_64_kib_block_edge_is_found_however_the_input_is_split() -> None:
    data = ("x" * 65_500 + " " + RAW + " ok\n").encode()  # the wording runs 65515..65540
    whole = scan_bytes(data)
    assert whole.oom_count == 1
    cuts = [*range(65_500, 65_600, 3), 65_536 + 1024 - 1, 65_536 + 1024, 65_536 + 1025]
    for cut in cuts:
        assert scan_cut(data, cut) == whole, cut


def test_a_long_first_line_reports_the_exception_name_from_byte_0() -> None:
    data = (A + " " + "0, " * 25_000 + "\nnext\n").encode()
    result = same_however_split(data, 65_536, 70_001)
    assert result.last is not None
    assert result.last.line.text.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_the_exception_name_is_read_back_whole_and_at_most_128_bytes() -> None:
    message = A.replace("torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError")
    spaced = scan_bytes(("x" * 70_000 + " " + message + "\n").encode())
    assert spaced.last is not None and spaced.last.line.text == message
    glued = scan_bytes(("[rank0]: input_ids=" + "1234567890" * 7000 + message + "\n").encode())
    digits = ("1234567890" * 7000)[-117:]
    assert glued.last is not None
    assert glued.last.line == Line(digits + message, "0")


def test_a_wording_glued_to_the_word_before_it_is_no_failure_at_the_block_edge_either() -> None:
    for at in (65_530, 65_536):  # "CUDA" off the edge, then exactly at block 2's first byte
        data = ("y" * (at - 6) + "_USER_CUDA error: out of memory\n").encode()
        assert data.index(b"CUDA") == at
        assert scan_bytes(data).oom_count == 0, at


def test_a_bare_message_ending_a_long_line_is_a_failure() -> None:
    data = ("x" * 70_000 + " RuntimeError: CUDA out of memory.\nstep 2\n").encode()
    result = same_however_split(data, 4096, 65_536)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "torch"


@pytest.mark.parametrize("past_the_edge", [800, 1000])
def test_a_failure_starting_in_the_next_blocks_lookahead_printed_twice_is_counted_once(
    past_the_edge: int,
) -> None:
    dump = ("[rank0]: tokens=" + "0, " * 30_000)[: 65_536 + past_the_edge]
    data = f"{dump}{A} | {A}\n".encode()
    result = same_however_split(data, 65_536, 100_000)
    assert result.oom_count == 1


def test_two_wordings_starting_in_one_block_are_one_failure_as_on_a_short_line() -> None:
    head = "[rank0]: " + RAW + " (first) "
    text = head + "y" * (65_530 - len(head) - 1) + " CUDA error: out of memory, again\n"
    assert text.index("CUDA error: out of memory, again") == 65_530
    assert scan_bytes(text.encode()).oom_count == 1
    assert scan_bytes(f"[rank0]: {RAW} (first) CUDA error: out of memory\n".encode()).oom_count == 1


def test_two_different_failures_in_neighbouring_blocks_are_two() -> None:
    text = "x" * 65_000 + " " + A + " " + "y" * 200 + " " + B + "\n"
    assert text.index(A) < 65_536 < text.index(B)  # in two blocks, 16 KiB apart at most
    result = same_however_split(text.encode(), 65_536)
    assert result.oom_count == 2


# -- counting once: 16 KiB, 1,025 ranks --------------------------------------------------------


@pytest.mark.parametrize(("gap", "count"), [(16_384, 1), (16_385, 2)])
def test_a_reprint_16_kib_after_a_short_failure_line_is_the_same_failure(
    gap: int, count: int
) -> None:
    # from the end of the first line (its newline) to the start of the second
    between = "\n" + "f" * (gap - 2) + "\n"
    log = A + between + A + "\n"
    assert log.index(A, 1) - len(A) == gap
    assert same_however_split(log.encode(), 4096).oom_count == count


@pytest.mark.parametrize(("gap", "count"), [(16_384, 1), (16_385, 2)])
def test_a_reprint_16_kib_after_a_failure_on_a_long_line_is_the_same_failure(
    gap: int, count: int
) -> None:
    # a failure found in a long line's block ends 300 characters after its wording
    line = "x" * 70_000 + " " + A
    end = line.index("OutOfMemoryError") + 300
    between = "\n" + "f" * (gap - (len(line) - end) - 2) + "\n"
    log = line + between + A + "\n"
    assert log.index(A, len(line)) - end == gap
    assert same_however_split(log.encode(), 65_536).oom_count == count


def test_a_rank_printing_again_after_1024_other_ranks_is_still_counted_once() -> None:
    lines = [f"{rank}: {RAW}\n" for rank in range(1025)]
    log = "".join(lines) + f"1024: {RAW}\n"
    assert scan_bytes(log.encode()).oom_count == 1025


# -- the richer re-print replaces the reported failure -----------------------------------------


def test_nccls_warning_then_torchs_message_then_terminate_report_torchs() -> None:
    log = (
        "[rank0]: node1:12:34 [0] NCCL WARN Cuda failure 'out of memory'\n"
        f"[rank0]: {A}\n"
        "[rank0]: terminate called after throwing an instance of 'c10::Error' "
        "what(): CUDA error: out of memory\n"
    )
    result = same_however_split(log.encode(), 7, 100)
    assert result.oom_count == 1
    assert result.last is not None
    assert (result.last.family, result.last.line) == ("torch", Line(A, "0"))


def test_a_raw_error_then_a_long_torch_line_reports_the_long_line_and_what_follows() -> None:
    log = f"[rank1]: {RAW}\n[rank1]: {LONG}\n[rank1]: after 1\n"
    result = same_however_split(log.encode(), 4096)
    assert result.oom_count == 1
    assert result.last is not None
    assert result.last.line == Line(LONG, "1")
    assert result.last.after == (Line("after 1", "1"),)


ASYNC = (
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. "
    "(out of memory)\n"
    "Currently allocated     : 0 bytes\nRequested               : 200.00 GiB\n"
)


def test_the_same_failure_printed_again_reports_the_first_print_and_its_figures() -> None:
    log = ASYNC + "\nDuring handling of the above exception, another exception occurred:\n\n"
    log += ASYNC.splitlines()[0] + "\nTraceback (most recent call last):\n"
    result = same_however_split(log.encode(), 16)
    assert result.oom_count == 1
    assert result.last is not None
    assert result.last.before == ()
    assert result.last.after[0] == Line("Currently allocated     : 0 bytes")
    assert result.last.after[1] == Line("Requested               : 200.00 GiB")


# -- the work stays linear ---------------------------------------------------------------------


class CountingBuffer(bytearray):
    """The scanner's buffer, counting the bytes its searches examine."""

    examined = 0

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:
        low, high, _ = slice(start, end).indices(len(self))
        found = super().find(sub, start, end)
        self.examined += found + len(sub) - low if found >= 0 else max(0, high - low)
        return found

    def rfind(self, sub: Any, start: Any = None, end: Any = None) -> int:
        low, high, _ = slice(start, end).indices(len(self))
        found = super().rfind(sub, start, end)
        self.examined += high - found if found >= 0 else max(0, high - low)
        return found


def counted_scan(data: bytes, chunk: int) -> tuple[ScanResult, int]:
    scanner = LogScanner()
    buffer = CountingBuffer()
    scanner._buf = buffer  # white box: count the searches, the only way to see quadratic work
    for offset in range(0, len(data), chunk):
        scanner.feed(data[offset : offset + chunk])
    return scanner.finish(), buffer.examined


def test_small_chunks_are_searched_once_not_the_whole_buffer_each_time() -> None:
    data = ("step 1 loss 0.1234 cache memory 1.2 GiB\n" * 25_000).encode()  # 1 MB
    result, examined = counted_scan(data, 4096)
    assert result.oom_count == 0
    assert examined <= 16 * len(data)


def test_many_failures_on_one_physical_line_look_its_start_up_once() -> None:
    segments = "".join(f"\rEpoch {i}\r{RAW}" for i in range(2000))
    data = f"step 0\n[rank1]: {segments}\n".encode()
    result, examined = counted_scan(data, 4 * 1024 * 1024)
    assert result.oom_count == 1
    assert result.last is not None and result.last.line.rank == "1"
    assert result.last.line.text.startswith(RAW + "\rEpoch 1\r")  # the first print, reported
    assert examined <= 16 * len(data)


class CountingPattern:
    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.examined = 0

    def search(self, string: Any, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        found = self.pattern.search(string, pos, endpos)
        self.examined += (found.end() if found else min(endpos, len(string))) - pos
        return found


def test_a_long_line_is_prefiltered_block_by_block(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingPattern(logtext._KEYWORD_RE)
    monkeypatch.setattr(logtext, "_KEYWORD_RE", counter)
    # 2 MB of one line, a keyword only at its end: the line is read in 32 blocks
    data = b"cache memory 12345 " * 110_000 + b"out of memory handler idle\n"
    assert scan_bytes(data).oom_count == 0
    assert counter.examined <= 3 * len(data)


def test_a_long_line_is_decoded_block_by_block(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = [0]
    original = logtext._text

    def counting(data: bytes | bytearray) -> str:
        decoded[0] += len(data)
        return original(data)

    monkeypatch.setattr(logtext, "_text", counting)
    data = b"out of memory handler idle " * 80_000 + b"\nstep 2\n"  # 2 MB, keywords, no failure
    assert scan_bytes(data).oom_count == 0
    assert decoded[0] <= 2 * len(data)


def test_a_stream_is_read_in_chunks_of_the_size_asked() -> None:
    class Recording(io.BytesIO):
        sizes: list[int | None]

        def read(self, size: int | None = -1) -> bytes:
            self.sizes.append(size)
            return super().read(size)

    stream = Recording(("step 1\n" * 1000 + OOM_A).encode())
    stream.sizes = []
    assert scan_stream(stream, chunk_bytes=1000).oom_count == 1
    assert stream.sizes and all(size == 1000 for size in stream.sizes)


def test_an_unfinished_line_fed_in_small_pieces_is_searched_once() -> None:
    data = b"0, " * 20_000 + b"\n" + OOM_A.encode()  # a 60,000-byte line, then a failure
    result, examined = counted_scan(data, 100)
    assert result.oom_count == 1
    assert examined <= 16 * len(data)


def test_the_buffer_is_trimmed_to_256_kib_plus_1_mib_of_slack_on_a_3_mb_log() -> None:
    scanner = LogScanner()
    scanner.feed(OOM_A.encode())
    filler = b"step 1 loss 0.1234 lr 3e-4 grad_norm 0.98\n" * 1560  # 64 KiB-ish pieces
    peak = 0
    for _ in range(48):  # 3 MB
        scanner.feed(filler)
        peak = max(peak, scanner.retained_bytes)
    assert scanner.finish().oom_count == 1
    # 256 KiB of precontext, 1 MiB of slack, one piece, the 64 KiB head, the 8 KiB window
    assert peak <= 262_144 + 1_048_576 + len(filler) + 65_536 + 8_192
    assert peak > 1_048_576  # the slack is used: the bound is not met by never keeping anything


# -- lines across feeds: a long line's rest, the tail, the last line -------------------------


@pytest.mark.parametrize("ending", ["\nnext\n", "\r" + "Epoch 2\r\ndone\n", ""])
def test_a_long_line_across_feeds_then_its_carriage_return_segments(ending: str) -> None:
    # the long line's rest ends at the first \r or \n, then the next line is read whole
    log = f"starting\n{A}\n{'x' * 70_000}\r[rank1]: {RAW}{ending}"
    result = same_however_split(log.encode(), 4096, 65_536, 70_011)
    assert result.oom_count == 2
    assert result.last is not None and result.last.line.text.startswith(RAW)


def test_a_progress_bar_over_64_kib_without_a_newline_splits_at_each_carriage_return() -> None:
    # the job was killed mid-bar: no final newline; the failure is one \r segment of the bar
    log = f"{tqdm(1500)}\r{RAW}{tqdm(1500)}"
    assert len(log) > 65_536
    result = same_however_split(log.encode(), 4096, 65_536)
    assert result.oom_count == 1
    assert result.last is not None and result.last.line.text.startswith(RAW + "\rEpoch 0:")


def test_a_failure_line_of_exactly_64_kib_is_read_whole_however_it_is_split() -> None:
    line = "x" * (65_536 - len(A) - 1) + " " + A
    assert len(line) == 65_536
    data = f"{line}\nafter\n".encode()
    whole = scan_bytes(data)
    assert whole.last is not None and whole.last.line == Line(line)
    for cut in (65_535, 65_536, 65_537):
        assert scan_cut(data, cut) == whole, cut


def test_a_long_line_after_a_newline_at_byte_0_takes_the_rank_of_its_own_start() -> None:
    data = f"\n[rank1]: {'x' * 70_000} {RAW}\n".encode()
    result = same_however_split(data, 70_000, 4096)
    assert result.last is not None and result.last.line.rank == "1"


def test_the_lines_after_a_failure_are_kept_whatever_the_chunk_size() -> None:
    log = f"step 1\n{A}\nafter 1\nafter 2\nafter 3\n"
    result = same_however_split(log.encode(), 1, 64, 1000)
    assert result.last is not None
    assert result.last.after == (Line("after 1"), Line("after 2"), Line("after 3"), Line(""))


def test_the_lines_after_are_those_of_the_failures_rank_or_all_without_a_rank() -> None:
    ranked = scan_bytes(f"[rank1]: {A}\n[rank0]: step 5\n[rank1]: after 1\n".encode())
    assert ranked.last is not None and ranked.last.after == (Line("after 1", "1"),)
    plain = scan_bytes(f"{A}\n[rank0]: step 5\nafter\n".encode())
    assert plain.last is not None
    assert plain.last.after == (Line("step 5", "0"), Line("after"), Line(""))


def test_a_long_failure_line_ending_the_log_has_nothing_after_it() -> None:
    result = scan_bytes(f"step\n{LONG}".encode())
    assert result.last is not None
    assert result.last.line == Line(LONG)
    assert [line.text for line in result.last.after] in ([], [""])  # no text after it


def test_a_last_line_without_a_newline_is_read_and_every_byte_counted() -> None:
    data = ("step 1 loss 0.1234\n" * 160_000 + A).encode()  # 3 MB: trimmed twice on the way
    result = same_however_split(data, 65_536)
    assert (result.oom_count, result.bytes_scanned) == (1, len(data))
    assert result.last is not None and result.last.line == Line(A)
    assert result.last.precontext == ("step 1 loss 0.1234\n" * 160_000)[-262_144:]


def test_anchor_lines_without_a_keyword_are_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingPattern(logtext._KEYWORD_RE)
    monkeypatch.setattr(logtext, "_KEYWORD_RE", counter)
    data = b"step 1 cache memory 1.2 GiB\n" * 3000
    assert scan_bytes(data).oom_count == 0
    assert counter.examined <= 2 * len(data)


def test_feed_after_finish_says_so_and_finish_keeps_only_the_head() -> None:
    scanner = LogScanner()
    scanner.feed(b"step 1 loss 0.1234\n" * 10_000)
    assert scanner.finish().oom_count == 0
    assert scanner.retained_bytes == 65_536
    with pytest.raises(ValueError, match=r"^feed\(\) after finish\(\)$"):
        scanner.feed(b"x")


@pytest.mark.parametrize(
    "rest",
    [
        f"\n[rank1]: {RAW}\rdone\n",  # the long line ends at \n; a \r only on the next line
        f" {RAW}",  # the log ends inside the long line
    ],
    ids=["newline-then-cr", "log-ends-inside"],
)
def test_a_long_lines_rest_ends_at_its_own_break_and_earlier_lines_are_not_read_again(
    rest: str,
) -> None:
    log = f"starting\n[rank1]: {A}\n[rank1]: {B}\n{'x' * 70_000}{rest}"
    result = same_however_split(log.encode(), 4096, 65_536)
    assert result.oom_count == 3
    if rest.startswith("\n"):
        assert result.last is not None
        assert result.last.line == Line(RAW + "\rdone", "1")  # its own line, read whole


def test_a_failure_segment_ends_at_its_own_carriage_return_far_from_the_next_one() -> None:
    log = f"[rank1]: Epoch 1\r{RAW}\n" + "step 1\n" * 12_000 + "Epoch 2\r\n"
    result = same_however_split(log.encode(), 65_536)
    assert result.last is not None and result.last.line == Line(RAW, "1")
    tail = scan_bytes(("step 1\n" * 20_000 + f"[rank1]: {RAW}\nafter\n").encode())
    assert tail.last is not None and tail.last.line == Line(RAW, "1")
