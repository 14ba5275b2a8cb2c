"""The streaming scan: prefixes, counting, windows and bounded memory."""

from __future__ import annotations

import io
import json
import re
import sys
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import (
    LogScanner,
    diagnose,
    diagnose_stream,
    formats,
    logtext,
    scan_bytes,
    scan_stream,
)
from gpu_auditor.diagnosis.logtext import (
    CHUNK_BYTES,
    HEAD_BYTES,
    LOOKAROUND_BYTES,
    MAX_LINE_BYTES,
    PRECONTEXT_BYTES,
    WINDOW_AFTER_BYTES,
    Line,
    ScanResult,
    normalize_lines,
    normalize_text,
    own_text,
)

from .diagnosis_helpers import GIB, PROGRESS, torch_oom

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
    # (after steps that finished: 9 % idle is fragmentation only for a job that progressed)
    log = (
        PROGRESS
        + OOM
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
    from .diagnosis_helpers import FIXTURES, SHARED_CORPUS

    root = FIXTURES.parents[2]
    folders = [FIXTURES, SHARED_CORPUS, root / "evaluation" / "gpu", root / "examples" / "logs"]
    paths = [p for folder in folders if folder.is_dir() for p in sorted(folder.rglob("*.log"))]
    # the first public set (evaluation/public), both halves: its held-out half was scored at
    # 3116c7f and is calibration since; evaluation/public2 is held out and shapes nothing. Where
    # the set is not there (a staged copy of the tree), its lines of the families no other log
    # here has are below.
    public = root / "evaluation" / "public"
    if (public / "split.json").is_file():
        split = json.loads((public / "split.json").read_text())
        ids = sorted(split["calibration"] + split["held-out"])
        paths += [public / "logs" / f"{log_id}.log" for log_id in ids]
    # the second and third public sets, scored blind (2bb226f, 7084003) and calibration since
    paths += sorted((root / "evaluation" / "public2" / "logs").glob("*.log"))
    paths += sorted((root / "evaluation" / "public3" / "logs").glob("*.log"))
    # the fourth to twenty-first, each scored blind once (evaluation/results) and calibration
    # since
    for name in [f"public{n}" for n in range(4, 22)]:
        paths += sorted((root / "evaluation" / name / "logs").glob("*.log"))
    lines: list[str] = []
    for path in paths:
        text = path.read_bytes().decode("utf-8", errors="replace")
        lines += [x.text for x in normalize_text(text.replace("\r", "\n"))]
    return lines + list(_DRIVER_LINES) + list(_MXNET_LINES) + list(_PUBLIC_LINES)


_DRIVER_LINES = (  # no real log here has the driver's wording: as CUDA and its users print it
    "RuntimeError: Error in cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
    "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in "
    "CUDA_ERROR_OUT_OF_MEMORY",
    "terminate called after throwing an instance of 'std::runtime_error' what(): CUDA Error: "
    "cudaErrorMemoryAllocation",
)

_PUBLIC_LINES = (  # as posted, from the first public set (evaluation/public/logs)
    "Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available memory "
    "is only ",  # b-033
    # b-017
    "[E] 1: [defaultAllocator.cpp::allocate::21] Error Code 1: Cuda Runtime (out of memory)",
    "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",  # a-013, b-005
    # b-014
    "Status Message: D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\bfc_arena.cc:376 "
    "onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of "
    "size 643840",
    'Error: Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to '
    'decrease `--max-batch-prefill-tokens`"))',  # b-032
)

_MXNET_LINES = (  # no log here is MXNet's: its storage manager's words, as apache/mxnet#675 shows
    "mxnet.base.MXNetError: [11:18:15] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
    "failed: out of memory",
    "MXNetError: cudaMalloc retry failed: out of memory",
)


def test_every_wording_found_in_the_real_logs_contains_a_keyword() -> None:
    """The scan confirms only lines holding one of ``formats.KEYWORDS`` (its second filter):
    a family whose wording could match without one would be missed in a log. Every wording that
    ``find_failure`` finds on a line of the real logs (the corpora, the GPU runs, the held-out
    sets, the family fixtures) is on a line holding a keyword, from the wording on (DRIVER's
    match is the word before the code: the code is the keyword)."""
    from gpu_auditor.diagnosis import formats

    found: dict[str, int] = {}
    unconfirmed: list[str] = []
    for line in _real_log_lines():
        hit = formats.find_failure(line)
        if hit is None:
            continue
        family, start, end = hit
        found[family] = found.get(family, 0) + 1
        rest = line[start : start + formats.MAX_MATCH_CHARS].encode("utf-8", errors="replace")
        if not any(k in rest for k in formats.KEYWORDS):
            unconfirmed.append(line[start:end])
    # the one known exception, a gap of the scan: Paddle's legacy allocator warns "Cannot allocate
    # X in GPU N, available Y" with no anchor of the scan in it; it is read only where a keyword
    # follows on its line (public4 t-031), and public18 f-010's is found through the "Cannot
    # malloc ... GPU memory" line Paddle prints just before it
    # and the localized shells' "Killed" (public20 n-009, public22 v-004, x-005), read on the
    # log's last line by ``LogScanner.finish`` (tests below)
    localized = [w for w in unconfirmed if re.fullmatch(formats.LOCALIZED_KILLED_PATTERN, w)]
    # and the BFC allocator's summary, read at finish where the scan found no failure, and
    # Python's bare MemoryError, read on the log's last line only (the tenth round's review)
    summaries = [w for w in unconfirmed if w.startswith(formats.BFC_DUMP_TOTAL.decode())]
    bare = [w for w in unconfirmed if re.fullmatch(formats.BARE_MEMORY_ERROR_PATTERN, w)]
    assert bare, "the real logs hold bare MemoryErrors: the exception is not vacuous"
    # and the host's kernel refusing memory, read there too (the eleventh round)
    refused = [w for w in unconfirmed if re.fullmatch(formats.HOST_REFUSED_PATTERN, w)]
    assert refused, "the real logs hold ENOMEM and Windows' commit limit: not vacuous"
    unconfirmed = [
        w for w in unconfirmed
        if w not in localized and w not in summaries and w not in bare and w not in refused
    ]
    assert localized == ["Processus arrêté"], localized  # (public22's are not in these corpora)
    assert summaries, "the real logs hold BFC summaries: the exception is not vacuous"
    assert all(w.startswith("Cannot allocate ") for w in unconfirmed), unconfirmed
    assert len(unconfirmed) <= 1, unconfirmed
    # the real logs hold every family: the check is not vacuous for any of them
    assert set(found) == set(formats.PRIORITY), sorted(set(formats.PRIORITY) - set(found))


# The streaming log scanner at its edges (issue 18, mutation survivors of
# ``diagnosis/logtext.py``): docker json-file and CRI records joined exactly (a trailing space, a
# record that is not JSON, a partial record at 64 KiB and at the end of the log); a line ending at
# ``\r`` and the rank of its newline-ended line (at the log start, after a newline at buffer index
# 0, 256 KiB back, after the buffer was trimmed); a failure printed from byte 0; a failure line of
# 8 KiB or more (kept whole: its rank, the lines after it, the text before it, its re-print); a
# long line's 64 KiB blocks (a wording at the block edge whatever the chunking, an exception name
# back to the line start and at most 128 bytes back, ``$`` at the line's end, a glued word at the
# edge); counting once within 16 KiB (exactly 16,384 bytes) and across 1,025 ranks; the richer re-
# print replacing the reported failure; and the work done staying linear (bytes searched, decoded,
# read per call). Literal numbers and real message wording only.

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


TF = (
    "OOM when allocating tensor with shape[8,1024,1024] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
)


def tqdm(n: int) -> str:
    return "".join(f"\rEpoch 0: {i % 100:3d}%|####      | {i}/{n}" for i in range(n))


NEWLINE_256K = "starting\n[rank1]: " + "x" * (262_144 - 9 - 1) + "\r" + RAW + "\n"
_SEGMENT = "[rank1]: " + "x" * 70_000 + " out of memory handler idle\r"  # a long line, looked up
LOOKED_UP_256K = "starting\n" + _SEGMENT + "y" * (262_144 - len(_SEGMENT) - 1) + "\r" + RAW + "\n"
NEWLINE_256K_PLUS_1 = "starting\n[rank1]: " + "x" * (262_144 - 9) + "\r" + RAW + "\n"
LONG = "step 7 batch " + "0, " * 3000 + A  # 9,000 bytes of batch figures then the message
AFTER_TAIL = "".join(f"after {i} " + "y" * (999 - len(f"after {i} ")) + "\n" for i in range(12))
ASYNC = (
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. "
    "(out of memory)\n"
    "Currently allocated     : 0 bytes\nRequested               : 200.00 GiB\n"
)


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


SEARCHES_PER_BYTE: Final = len(formats.ANCHORS) + 4
"""Each anchor's pass over the data, and a few more for lines and keywords: linear work."""


def counted_scan(data: bytes, chunk: int) -> tuple[ScanResult, int]:
    scanner = LogScanner()
    buffer = CountingBuffer()
    scanner._buf = buffer  # white box: count the searches, the only way to see quadratic work
    for offset in range(0, len(data), chunk):
        scanner.feed(data[offset : offset + chunk])
    return scanner.finish(), buffer.examined


class CountingPattern:
    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.examined = 0

    def search(self, string: Any, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        found = self.pattern.search(string, pos, endpos)
        self.examined += (found.end() if found else min(endpos, len(string))) - pos
        return found


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


@pytest.mark.parametrize("lead", ["", " "])
def test_a_failure_at_the_first_byte_of_the_log_is_found(lead: str) -> None:
    result = same_however_split(f"{lead}{TF}\nstep 2\n".encode(), 1, 7, 64)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "tensorflow"


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


def test_a_failure_exactly_256_kib_after_a_looked_up_line_start_between_gets_its_rank() -> None:
    # a failure looked up in between: the line start is known, and 262,144 bytes is in reach
    between = "[rank1]: " + "x" * 70_000 + "\r" + "z" * 100 + "\r" + RAW + "\r"
    log = "step\n" + between + "y" * (262_144 - len(between) - 1) + "\r" + RAW + " again\n"
    assert log.index(RAW + " again") - 5 == 262_144
    result = scan_bytes(log.encode())
    assert result.oom_count == 2
    assert result.last is not None and result.last.line.rank == "1"


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


def test_the_same_failure_printed_again_reports_the_first_print_and_its_figures() -> None:
    log = ASYNC + "\nDuring handling of the above exception, another exception occurred:\n\n"
    log += ASYNC.splitlines()[0] + "\nTraceback (most recent call last):\n"
    result = same_however_split(log.encode(), 16)
    assert result.oom_count == 1
    assert result.last is not None
    assert result.last.before == ()
    assert result.last.after[0] == Line("Currently allocated     : 0 bytes")
    assert result.last.after[1] == Line("Requested               : 200.00 GiB")


def test_small_chunks_are_searched_once_not_the_whole_buffer_each_time() -> None:
    data = ("step 1 loss 0.1234 cache memory 1.2 GiB\n" * 25_000).encode()  # 1 MB
    result, examined = counted_scan(data, 4096)
    assert result.oom_count == 0
    assert examined <= SEARCHES_PER_BYTE * len(data)


def test_many_failures_on_one_physical_line_look_its_start_up_once() -> None:
    segments = "".join(f"\rEpoch {i}\r{RAW}" for i in range(2000))
    data = f"step 0\n[rank1]: {segments}\n".encode()
    result, examined = counted_scan(data, 4 * 1024 * 1024)
    assert result.oom_count == 1
    assert result.last is not None and result.last.line.rank == "1"
    assert result.last.line.text.startswith(RAW + "\rEpoch 1\r")  # the first print, reported
    assert examined <= SEARCHES_PER_BYTE * len(data)


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
    assert examined <= SEARCHES_PER_BYTE * len(data)


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


# The log's head (its first 64 KiB, read for a release banner) never ends in a word its bound cut:
# ``torch 1.1`` of ``torch 1.13.1`` would read as release 1.1. The same whatever the chunks.

BANNER = b"\nstarting: torch 1.1"
HEAD = b"=" * (65536 - len(BANNER)) + BANNER  # exactly the 64 KiB head
CHUNKS = (1, 7, 4096, 65535, 65536, 65537, 1 << 20)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_word_cut_by_the_bound_is_dropped(chunk: int) -> None:
    head = scan_bytes(HEAD + b"3.1+cu117 on NVIDIA A100\n", chunk_bytes=chunk).head
    assert head.endswith("\nstarting: torch ")
    assert len(head) == 65536 - len("1.1")


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("after", [b" on NVIDIA A100\n", b"\n", b"\r", b"\tx", b""])
def test_a_word_the_bound_did_not_cut_is_kept(chunk: int, after: bytes) -> None:
    # followed by a space, a line end, or nothing at all: the word is whole
    head = scan_bytes(HEAD + after, chunk_bytes=chunk).head
    assert head.endswith("\nstarting: torch 1.1")
    assert len(head) == 65536


def test_a_head_that_is_one_long_word_is_dropped_whole() -> None:
    assert scan_bytes(b"x" * 70000 + b"\n").head == ""


def test_a_short_log_is_its_own_head() -> None:
    assert scan_bytes(b"torch 2.3.1 ready").head == "torch 2.3.1 ready"


# Hostile framing: over-long lines, carriage returns, nested JSON, bytes that are not text.

OOM4 = torch_oom(requested=4, total=79.15, free=1.2, process=77.8, allocated=76.1, unallocated=0.2)


def tqdm_redraws(n: int) -> str:
    """``n`` redraws of a progress bar, carriage-return separated, as tqdm writes them."""
    return "".join(
        f"\rEpoch 0: {i % 100:3d}%|####      | {i}/{n} [00:{i % 60:02d}<00:00]" for i in range(n)
    )


LONG_BAR = (
    "[rank0]: "
    + tqdm_redraws(3000)
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


@pytest.mark.parametrize("length", [65_537, 70_000, 1_000_000, CHUNK_BYTES + 12_345])
def test_a_failure_after_a_line_longer_than_64_kib_is_found(length: int) -> None:
    diagnosis = diagnose("x" * length + " " + OOM)
    assert diagnosis.detected and diagnosis.oom_count == 1
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None
    assert diagnosis.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_a_failure_after_a_progress_bar_on_the_same_line_is_found() -> None:
    bar = tqdm_redraws(6000)
    assert len(bar) > 4 * MAX_LINE_BYTES and "\n" not in bar
    diagnosis = diagnose(bar + "\r" + OOM)
    assert (diagnosis.kind, diagnosis.oom_count) == ("fragmentation", 1)
    assert diagnosis.message is not None
    assert diagnosis.message.startswith("torch.OutOfMemoryError")


def test_a_carriage_return_ends_a_line_for_the_rank_and_the_message() -> None:
    line = "2026-11-29T19:00:00.1Z stderr F [rank1]: " + tqdm_redraws(50) + "\r" + OOM
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


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=150_000), min_size=1, max_size=10))
def test_a_long_line_gives_the_same_result_however_it_is_split(cuts: list[int]) -> None:
    whole = scan_bytes(LONG_BAR)
    scanner = LogScanner()
    position = 0
    for cut in cuts:
        scanner.feed(LONG_BAR[position : position + cut])
        position += cut
    scanner.feed(LONG_BAR[position:])
    pieces = scanner.finish()
    assert (pieces.oom_count, pieces.last) == (whole.oom_count, whole.last)
    assert whole.oom_count == 3


@pytest.mark.parametrize("chunk", [1000, 65_536, 65_537, 200_000])
def test_a_long_line_gives_the_same_result_for_any_chunk_size(chunk: int) -> None:
    assert scan_bytes(LONG_BAR, chunk_bytes=chunk) == scan_bytes(LONG_BAR)


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
    record = json.dumps({"log": tqdm_redraws(200) + "\r" + OOM, "stream": "stderr"})
    diagnosis = diagnose(record + "\n")
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None and diagnosis.message.startswith("torch.OutOfMemory")


@pytest.mark.parametrize(
    ("line", "rank", "text"),
    [
        ("(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "
         '"/x.py", line 1, in f', "1090", '  File "/x.py", line 1, in f'),
        ("(RayWorkerWrapper pid=2211, ip=10.0.0.7) INFO 01-02 03:04:05 [worker.py:9] loaded",
         "2211", "loaded"),
        ("(pid=77) RuntimeError: CUDA error: out of memory", "77",
         "RuntimeError: CUDA error: out of memory"),
        ("(ActorModelRayActor pid=348952)   File \"/a.py\", line 2, in g", "348952",
         '  File "/a.py", line 2, in g'),
        # not a worker's prefix: a tuple printed by the job, a pid without its parenthesis
        ("(1090, 3) ERROR x", None, "(1090, 3) ERROR x"),
        ("pid=1090) ERROR x", None, "pid=1090) ERROR x"),
    ],
)
def test_ray_and_vllm_worker_prefixes_are_split_off_with_the_pid(
    line: str, rank: str | None, text: str
) -> None:
    (found,) = normalize_text(line)
    assert (found.rank, found.text) == (rank, text)


def test_own_text_keeps_one_ranks_lines_without_their_prefixes() -> None:
    text = "[rank0]: a\n[rank1]: b\n[rank0]:   c\nlauncher\n"
    assert own_text(text, "0") == "a\n  c"
    assert own_text(text, None) == "a\nb\n  c\nlauncher\n"


def test_a_torchrun_prefixed_traceback_is_read_for_the_phase() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/torch/optim/adamw.py", line 10, in step\n'
        "    x = y\n"
    )
    log = "".join(f"[rank0]: {line}\n" for line in tb.splitlines()) + "[rank0]: " + OOM
    other = "".join(f"[rank1]: {line}\n" for line in tb.splitlines())
    assert diagnose(log).to_json_dict()["phase"] == "optimizer-step"
    # another rank's traceback is not this failure's
    assert diagnose(other + "[rank0]: " + OOM).to_json_dict().get("phase") is None


# -- issue 24, ninth round: a shell's "Killed" in another language ----------------------------


@pytest.mark.parametrize("tail", [
    "已杀死\n",  # public22 x-005, v-004 (zh_CN)
    "Processus arrêté",  # public20 n-009 (fr), with no newline after it
    "Getötet\n\n  \n",  # blank lines after it
    "強制終了\r\n",
])  # fmt: skip
def test_a_localized_killed_on_the_last_line_is_a_host_kill(tail: str) -> None:
    data = ("Caching all 373 images.\n" * 3000 + tail).encode()
    result = same_however_split(data, 1, 7, 4096, CHUNK_BYTES)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "host-killed"
    assert diagnose(data).kind == "host-oom-killed"


@pytest.mark.parametrize("text", [
    "已杀死\nstep 2 loss 0.1\n",  # not the last line: the scan has no anchor for it
    "Processus arrêté trop tôt\n",  # more words on the line
    "Le processus arrêté\n",
    "Morto\u00a0x\n",
    # after a "]": several of these are common words (the round's review: a game's log)
    "[GAME] Morto\n",
    "100%|##########| 10/10 [00:01<00:00]強制終了\n",
])  # fmt: skip
def test_a_localized_killed_elsewhere_or_in_a_sentence_is_not_read(text: str) -> None:
    result = scan_bytes(("step 1\n" + text).encode())
    assert result.oom_count == 0


@pytest.mark.parametrize("tail", [
    "1%|█▏ | 21/1423 [00:02<02:09, 10.81it/s]已杀死\n",  # public27 j-005
    "[>>>>>>>>>> ] 1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621s已杀死\n",  # y-011
    "120/300 [=====>....] - ETA: 36s - loss: 0.7Getötet",
    "165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed",  # v-027
])  # fmt: skip
def test_a_localized_killed_glued_to_a_progress_bar_on_the_last_line_is_a_host_kill(
    tail: str,
) -> None:
    assert _last_line_family(tail) == "host-killed"


@pytest.mark.parametrize("text", [
    # a bar, then the job's next line: not the log's end
    "1%| | 21/1423 [00:02<02:09, 10.81it/s]已杀死\nstep 2\n",
    "[GAME] 3/10 Morto\n",  # a count, but no rate nor ETA
    "10/10 [00:01<00:00, 9.1it/s] Morto trop tôt\n",  # more words after it
    # the line's own words after a space or a colon (the round's review)
    "[GAME] 12/40 players, 3.2 ana.s/s: Morto\n",
    " 40%|####      | 4/10 [00:41<01:02, 10.31s/it] | Status: Morto\n",
    "episode 3/100, 2.1 ep/s, esito: Ucciso\n",
    "ETA: 12s 4/9 done - Processus arrêté\n",
    # glued, but not the log's last line
    "165376/296960 [====>....] - ETA: 365s - loss: 2.1371Killed\nEpoch 2/2\n",
])  # fmt: skip
def test_a_localized_killed_after_a_bar_elsewhere_is_not_read(text: str) -> None:
    assert scan_bytes(("step 1\n" + text).encode()).oom_count == 0


@pytest.mark.parametrize("tail", [
    "    self.pid = os.fork()\nOSError: [Errno 12] Cannot allocate memory\n",  # public13 g-026
    "OSError: [WinError 1455] The paging file is too small for this operation to complete. "
    "Error loading \"E:\\x\\torch\\lib\\caffe2_detectron_ops_gpu.dll\"\n",  # public12 c-021
    "ImportError: DLL load failed while importing _pywrap_tensorflow_internal: Die "
    "Auslagerungsdatei ist zu klein, um diesen Vorgang durchzuf\u00fchren.",  # public28 x-011
])  # fmt: skip
def test_the_host_refusing_memory_on_the_last_line_is_host_memory(tail: str) -> None:
    assert _last_line_family(tail) == "host-alloc"


def _last_line_family(tail: str) -> str:
    """The family ``tail``, a long log's last line, is read as (however the log is split), once
    its diagnosis is checked to be host memory."""
    data = ("Caching all 373 images.\n" * 3000 + tail).encode()
    result = same_however_split(data, 1, 7, 4096, CHUNK_BYTES)
    assert result.last is not None
    assert diagnose(data).kind == "host-oom-killed"
    return result.last.family


@pytest.mark.parametrize("text", [
    # caught: the job's own lines after it
    "OSError: [Errno 12] Cannot allocate memory\nretrying with 2 workers\nstep 2\n",
    "OSError: [WinError 1455] The paging file is too small\nstep 2\n",
    "OSError: [Errno 28] No space left on device\n",  # another errno
    "print('[Errno 12] Cannot allocate memory')\n",  # not at the line's start
])  # fmt: skip
def test_the_host_refusing_memory_elsewhere_is_not_read(text: str) -> None:
    assert scan_bytes(("step 1\n" + text).encode()).oom_count == 0


@pytest.mark.parametrize("gap", [10, 10_000])  # within the same-failure window, and past it
def test_a_localized_killed_after_a_failure_reads_as_the_english_one(gap: int) -> None:
    def scan(killed: str) -> ScanResult:
        return same_however_split((OOM + "\n" + "x\n" * gap + killed + "\n").encode(), 3, 4096)

    english, chinese = scan("Killed"), scan("已杀死")
    assert english.oom_count == chinese.oom_count == (1 if gap == 10 else 2)
    assert english.last is not None and chinese.last is not None
    assert english.last.family == chinese.last.family


# -- a BFC allocator's summary whose failure lines a post cut away ------------------------------

SUMMARY = (
    "2019-04-23 14:44:49.134231: I tensorflow/core/common_runtime/bfc_allocator.cc:641] 5 Chunks "
    "of size 201326592 totalling 960.00MiB\n"
    "2019-04-23 14:44:49.148331: I tensorflow/core/common_runtime/bfc_allocator.cc:645] Sum Total "
    "of in-use chunks: 4.56GiB\n"
    "2019-04-23 14:44:49.151895: I tensorflow/core/common_runtime/bfc_allocator.cc:647] Stats:\n"
    "Limit:                  4949881651\n"
    "InUse:                  4894695424\n"
    "MaxInUse:               4895090944\n"
)  # public22 x-023


@pytest.mark.parametrize("after", ["", "step\n" * 100, "x" * 1000 + "\n"])
def test_a_cut_bfc_summary_near_the_end_is_the_failure(after: str) -> None:
    data = ("Epoch 1/10\n" * 5000 + SUMMARY + after).encode()
    result = same_however_split(data, 1, 97, 4096)
    assert result.oom_count == 1
    assert result.last is not None and result.last.family == "bfc"
    assert result.last.line.text.endswith("Sum Total of in-use chunks: 4.56GiB")
    d = diagnose(data)
    assert (d.detected, d.kind, d.framework) == (True, "unknown", "tensorflow")
    assert (d.figures.allocated_bytes, d.figures.allowed_bytes) == (4894695424, 4949881651)
    assert "4.56 GiB in use of its 4.61 GiB limit" in d.summary


def test_a_bfc_summary_far_from_the_end_or_beside_a_failure_is_not_read_again() -> None:
    # the job went on past it for more than the tail: not where the log ends
    far = (SUMMARY + "Epoch 2/10 loss 0.1\n" * 4000).encode()
    assert len(far) - far.index(b"Sum Total") > logtext.TAIL_BYTES
    assert scan_bytes(far).oom_count == 0
    # the framework's own error follows it: that one failure, reported as itself
    whole = SUMMARY + (
        "W tensorflow/core/framework/op_kernel.cc:1401] OP_REQUIRES failed at conv_ops.cc:486 : "
        "Resource exhausted: OOM when allocating tensor with shape[64,256,56,56] and type float "
        "on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    )
    result = scan_bytes(whole.encode())
    assert result.oom_count == 1
    assert result.last is not None and result.last.family != "bfc"


def test_a_bfc_summary_the_job_went_on_past_is_not_read() -> None:
    """A caught failure (a trial skipped, a batch halved): the job printed progress after it
    (the round's review)."""
    text = SUMMARY + "trial 3 skipped\n" + "".join(
        f"Epoch {i}/40 - loss: 0.{i:02d}\n" for i in range(1, 40)
    )
    assert scan_bytes(text.encode()).oom_count == 0


def test_the_summary_words_inside_a_sentence_are_not_read() -> None:
    text = "docs: the line Sum Total of in-use chunks: is printed on failure\n"
    assert scan_bytes(text.encode()).oom_count == 0


# -- DALI's allocators, read from the tail like the BFC summary -------------------------------


@pytest.mark.parametrize(("tail", "framework"), [
    # public24 f-008, f-007, f-004 (DALI's own words end its "Critical error in pipeline")
    ("RuntimeError: Critical error in pipeline:\nError in GPU operator "
     "`nvidia.dali.ops.CropMirrorNormalize`:\nCan't allocate 202375168 bytes on device 0.\n", None),
    ("RuntimeError: Critical error in pipeline:\nError when executing Mixed operator "
     "ImageDecoder encountered:\nCUDA allocation failed\n", None),
    # as C++ reports the uncaught exception (the second review)
    ("terminate called after throwing an instance of 'dali::CUDABadAlloc'\n"
     "  what():  CUDA allocation failed\n", None),
    ('Error in thread 1: [/opt/dali/dali/operators/decoder/nvjpeg/decoupled_api/'
     'nvjpeg_decoder_decoupled_api.h:809] NVJPEG error "5" : NVJPEG_STATUS_ALLOCATOR_FAILURE '
     "n02130308/ILSVRC2012_val_00033687.JPEG\n", "dali"),
])  # fmt: skip
def test_dali_s_allocator_failures_at_the_end_are_read(tail: str, framework: str | None) -> None:
    data = ("epoch 1 iter 5\n" * 3000 + tail).encode()
    result = same_however_split(data, 1, 97, 4096)
    assert result.oom_count == 1
    d = diagnose(data)
    assert (d.detected, d.framework) == (True, framework)


def test_of_two_tail_wordings_the_last_is_the_failure() -> None:
    text = SUMMARY + "Limit: 1\n" + "Can't allocate 1024 bytes on device 0.\n"
    result = scan_bytes(text.encode())
    assert result.oom_count == 1
    assert result.last is not None and result.last.line.text.startswith("Can't allocate")


@pytest.mark.parametrize("text", [
    "Can't allocate 1024 bytes on device 0. Retrying on the host.\nCUDA allocation failed later\n",
    "I Can't allocate anything\n",
    "the docs say: CUDA allocation failed is printed when\n",
])  # fmt: skip
def test_tail_wordings_inside_other_sentences_are_not_read(text: str) -> None:
    assert scan_bytes(("step 1\n" + text).encode()).oom_count == 0
