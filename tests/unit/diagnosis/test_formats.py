"""The OOM message families at their edges (issue 18, mutation survivors of
``diagnosis/formats.py``): a failure printed from the very start of a line is found; the search
window's ends (``pos``, ``endpos``, ``before``) are exact, and a long line's block leaves a
wording past its end to the next block, so a failure printed twice just past a 64 KiB block edge
is counted once; the stack is named from the line (TensorFlow's XLA errors, CuPy's driver and
cuBLAS errors); and the driver family's word-before-code search agrees with its regex at the
200-character gap, at line breaks, at a word glued to the code, far from the line start, and
stays linear on a hostile line. Literal numbers and real message wording only."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpu_auditor.diagnosis import diagnose, formats

pytestmark = pytest.mark.unit

MIB = 1048576

# ``str(e)`` of a torch 2.x OutOfMemoryError, as ``print(e)`` or ``logger.error("%s", e)`` writes
# it: the wording is the first character of the line
TORCH_STR_E = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB "
    "of which 6.56 MiB is free. Including non-PyTorch memory, this process has 79.09 GiB memory "
    "in use. Of the allocated memory 78.20 GiB is allocated by PyTorch, and 402.50 MiB is "
    "reserved by PyTorch but unallocated."
)


def assert_wording(line: str, family: str, wording: str, then: str = "") -> None:
    """``line`` is ``family``'s failure, its wording exactly ``wording``, and a log of it (and
    of ``then``, the lines after it) is an OOM."""
    found = formats.find_failure(line)
    assert found is not None
    assert (found[0], line[found[1] : found[2]]) == (family, wording)
    assert diagnose(f"step 1\n{line}\n{then}").detected


# -- a failure at the start of a line ----------------------------------------------------------


def test_a_torch_message_printed_from_the_line_start_is_the_failure() -> None:
    log = f"epoch 3 step 120 loss 2.31\n{TORCH_STR_E}\n"
    d = diagnose(log)
    assert d.detected
    assert d.framework == "pytorch"
    assert d.figures.requested_bytes == 20 * MIB
    assert formats.match_failure(TORCH_STR_E) == ("torch", TORCH_STR_E[:300])


def test_a_raw_cuda_error_printed_from_the_line_start_is_the_failure() -> None:
    assert formats.find_failure("CUDA error: out of memory") == ("torch-raw", 0, 25)
    assert diagnose("step 7\nCUDA error: out of memory\n").detected


# -- the search window: pos, endpos, before ----------------------------------------------------

RAW = "RuntimeError: CUDA error: out of memory"  # the wording runs from 14 to 39


def test_a_wording_starting_at_before_is_left_to_the_next_block() -> None:
    # ``before`` is exclusive: the scanner reports a failure from the block its wording starts in
    assert formats.find_failure(RAW, 0, before=14) is None
    assert formats.find_failure(RAW, 0, before=15) == ("torch-raw", 14, 39)
    assert formats.find_failure(RAW, 0) == ("torch-raw", 14, 39)


def test_a_wording_cut_by_endpos_is_not_a_failure() -> None:
    assert formats.find_failure(RAW, 0, 38) is None  # "... out of memor"
    assert formats.find_failure(RAW, 0, 39) == ("torch-raw", 14, 39)
    assert formats.find_failure(RAW + " (see above)", 0, 39) == ("torch-raw", 14, 39)


def test_the_text_before_pos_is_seen_by_the_word_boundary() -> None:
    assert formats.find_failure("xCUDA error: out of memory", 1) is None
    assert formats.find_failure(" CUDA error: out of memory", 1) == ("torch-raw", 1, 26)


@pytest.mark.parametrize("past_the_edge", [0, 100, 900, 1000])
def test_one_failure_printed_twice_on_a_long_line_is_counted_once(past_the_edge: int) -> None:
    # a logged then re-raised OOM after a 64 KiB dump on one line: the line is read in 64 KiB
    # blocks, each with 1 KiB of the next; the first copy's wording starts ``past_the_edge``
    # bytes into the second block, where the first block's look-ahead sees only its start
    message = TORCH_STR_E.replace("CUDA", "torch.OutOfMemoryError: CUDA", 1)
    dump = ("[rank0]: tokens=" + "0, " * 30000)[: 65536 + past_the_edge]
    d = diagnose(f"{dump}{message} | {message}\n".encode())
    assert d.detected
    assert d.oom_count == 1
    assert d.figures.requested_bytes == 20 * MIB


def test_two_wordings_on_a_long_line_get_one_diagnosis_wherever_the_block_edge_falls() -> None:
    pair = (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine." + " " * 300 + "RuntimeError: "
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    )
    kinds = {}
    for lead in (60000, 65300, 70000):  # the pair before, across and after the 64 KiB edge
        dump = ("0, " * 30000)[:lead]
        kinds[lead] = diagnose(f"{dump} {pair}{' ' * 3000}\n").kind
    assert kinds == {lead: diagnose(pair + "\n").kind for lead in kinds}
    # and on two lines: PRIORITY decides between lines, and now within one (vLLM's wording)
    split = pair.replace(" " * 300, "\n")
    assert diagnose(split + "\n").kind == diagnose(pair + "\n").kind
    assert diagnose(pair + "\n").framework == "vllm"


# -- match_line (read by bench/scan_throughput.py) ---------------------------------------------


@pytest.mark.parametrize(
    ("line", "family"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "torch"),
        ("RuntimeError: CUDA error: out of memory", "torch-raw"),
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:114] . DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 68719476736 bytes. Error code 12",
            "host-alloc",
        ),
        ("step 10 loss 2.31", None),
        ("Catching out of memory errors and retrying with a smaller batch", None),
    ],
)
def test_match_line_names_the_family_of_a_failure_line_and_none_otherwise(
    line: str, family: str | None
) -> None:
    assert formats.match_line(line) == family


# -- which stack printed it --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "framework"),
    [
        # TensorFlow's XLA kernels print XLA's wording; the path names TensorFlow
        (
            "2026-11-29 19:01:05.000001: W tensorflow/core/framework/op_kernel.cc:1830] "
            "OP_REQUIRES failed at xla_ops.cc:580 : RESOURCE_EXHAUSTED: Out of memory while "
            "trying to allocate 17179869184 bytes.",
            "tensorflow",
        ),
        # the exception's class name alone (a handler printing type(e).__name__ and e)
        (
            "ResourceExhaustedError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
            "17179869184 bytes.",
            "tensorflow",
        ),
        # the same wording from JAX is JAX's
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
            "allocate 17179869184 bytes.",
            "jax",
        ),
    ],
)
def test_xla_wording_is_tensorflows_when_the_line_names_tensorflow(
    line: str, framework: str
) -> None:
    d = diagnose(f"step 12\n{line}\n")
    assert d.detected
    assert d.framework == framework
    assert d.figures.requested_bytes == 17179869184


@pytest.mark.parametrize(
    ("line", "family", "framework"),
    [
        (
            "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out of "
            "memory",
            "cuda-driver",
            "cupy",
        ),
        (
            "cupy_backends.cuda.libs.cublas.CUBLASError: CUBLAS_STATUS_ALLOC_FAILED",
            "cuda-library",
            "cupy",
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`",
            "cuda-library",
            "pytorch",
        ),
    ],
)
def test_a_driver_or_library_code_is_named_after_the_stack_on_its_line(
    line: str, family: str, framework: str
) -> None:
    assert formats.match_line(line) == family
    d = diagnose(f"step 12\n{line}\n")
    assert d.detected
    assert d.framework == framework


# -- the driver family's word-before-code search -----------------------------------------------

DRIVER: Any = dict(formats._FAMILIES)[formats.DRIVER]
CODE = "cudaErrorMemoryAllocation"


def start(text: str, pos: int = 0, endpos: int | None = None) -> int | None:
    """Where the driver family's match starts, checked against its regex."""
    regex = re.compile(DRIVER.pattern)
    found = DRIVER.search(text, pos) if endpos is None else DRIVER.search(text, pos, endpos)
    expected = regex.search(text, pos) if endpos is None else regex.search(text, pos, endpos)
    assert (found and found.start()) == (expected and expected.start())
    return None if found is None else int(found.start())


def test_the_driver_search_starts_at_0_by_default() -> None:
    found = DRIVER.search(f"Error: {CODE}")
    assert found is not None
    assert found.start() == 0


def test_a_driver_code_cut_by_endpos_is_not_matched() -> None:
    text = "INTERNAL: CUDA_ERROR_OUT_OF_MEMORY"  # 34 characters
    assert start(text, 0, 33) is None
    assert start(text, 0, 34) == 0


@pytest.mark.parametrize(("gap", "found"), [(1, 0), (199, 0), (200, 0), (201, None), (204, None)])
def test_the_word_is_at_most_200_characters_before_the_code(gap: int, found: int | None) -> None:
    assert start("Error" + " " * gap + CODE) == found


def test_a_word_too_far_back_does_not_hide_a_closer_one() -> None:
    # "Error" at 0 is 201 characters before the code at 206: the search goes on to "ERROR"
    assert start("Error" + " " * 195 + "ERROR " + CODE) == 200
    # a word cut off by a line break: the search goes on to the word after it
    assert start(f"Error\nINTERNAL: {CODE}") == 6


def test_a_word_glued_to_the_code_by_an_underscore_is_no_word() -> None:
    assert start("Error_" + CODE) is None
    assert start("INTERNAL_CUDA_ERROR_OUT_OF_MEMORY") is None
    assert start("Error " + CODE) == 0


def test_word_and_code_must_be_on_one_line() -> None:
    assert start(f"Error\n{CODE}") is None
    assert start(f"Error: \n {CODE}") is None
    assert start(f"log starts\nError: {CODE}") == 11
    assert start(f"Error: {CODE}\nnext line") == 0
    assert start(f"Error: {CODE}\nError\n{CODE}") == 0


def test_a_driver_failure_far_into_a_long_log_line_is_found() -> None:
    # glog's prefix and the source path put the code 179 characters into the line
    line = (
        "E0101 12:00:00.123456    4242 cuda_driver.cc:1000] external/xla/xla/stream_executor/"
        "cuda/cuda_driver.cc:1000] INTERNAL: failed to allocate 15.78G (16944988160 bytes) from "
        "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    )
    assert start(line) == 110
    d = diagnose(f"step 3\n{line}\n")
    assert d.detected
    assert d.figures.requested_bytes == 16944988160


@pytest.mark.parametrize(
    ("line", "found"),
    [
        # XLA/JAX on a GPU another process had filled (H200, evaluation/results/library-errors)
        (
            "E1202 10:57:07.512060    1263 platform_util.cc:279] Failed to create stream executor "
            "for device CUDA:0: : CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            52,
        ),
        # TensorFlow's driver wrapper creating its context
        ("failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY", 0),
        # the words alone, or the code in a sentence about it, are no failure
        ("Failed to create stream executor for device CUDA:0", None),
        ("if you see CUDA_ERROR_OUT_OF_MEMORY, lower the memory fraction", None),
        ("a failed call to cuInit, then CUDA_ERROR_OUT_OF_MEMORY", 2),
    ],
)
def test_a_context_that_could_not_be_created_is_a_driver_failure(
    line: str, found: int | None
) -> None:
    assert start(line) == found


class _Counting:
    """A word pattern that counts its searches."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.calls = pattern, 0

    def search(self, string: str, pos: int, endpos: int) -> re.Match[str] | None:
        self.calls += 1
        return self.pattern.search(string, pos, endpos)


def test_each_driver_code_looks_back_once_on_a_hostile_line(monkeypatch: Any) -> None:
    # 100 codes, each with an error word 205 characters before it (too far): each code looks
    # back over its own 209 characters once, never over the words after it, so the work grows
    # with the line, not with its square (a tenant's long line cannot stall the scan)
    searcher = formats._WordBeforeCode()
    counting = _Counting(re.compile(r"(?:Error|ERROR|INTERNAL|Exception)\b"))
    monkeypatch.setattr(searcher, "_word", counting)
    line = ("Error" + " " * 205 + CODE + " ") * 100
    assert searcher.search(line, 0, len(line)) is None
    assert counting.calls <= 200


# -- one line, two wordings: the richest wins, the first in order among equals -----------------


def test_among_wordings_of_equal_rank_on_one_line_the_first_family_in_order_wins() -> None:
    # TensorFlow's and vLLM's wordings rank alike (8): TensorFlow's family comes first
    line = (
        "OOM when allocating tensor with shape[1024,1024] and type float ... "
        "ValueError: No available memory for the cache blocks."
    )
    found = formats.find_failure(line)
    assert found is not None and found[0] == "tensorflow"
    assert found[1] == 0


def test_a_richer_wording_later_in_the_order_is_still_found_past_equal_ones() -> None:
    # NCCL's (5), then CUBLAS's (5, skipped as no richer), then vLLM's (8): vLLM's wins
    line = (
        "NCCL WARN Cuda failure 'out of memory' ... CUBLAS_STATUS_ALLOC_FAILED ... "
        "No available memory for the cache blocks"
    )
    found = formats.find_failure(line)
    assert found is not None and found[0] == "engine-no-cache"
    assert line[found[1] : found[2]] == "No available memory for the cache blocks"


# -- the families and words issue 24 added: each matched as its stack prints it, a near miss not -


@pytest.mark.parametrize(
    ("line", "family", "wording"),
    [
        # PaddlePaddle (public b-012, b-033)
        (
            "Out of memory error on GPU 0. Cannot allocate 6.933594GB memory on GPU 0, available "
            "memory is only 726.750000MB.",
            "paddle",
            "Out of memory error on GPU 0. Cannot allocate",
        ),
        # TensorRT's default allocator (public b-017)
        (
            "[E] 1: [defaultAllocator.cpp::allocate::21] Error Code 1: Cuda Runtime (out of "
            "memory)",
            "tensorrt",
            "Error Code 1: Cuda Runtime (out of memory)",
        ),
        # MXNet's storage manager, first try and retry (apache/mxnet#675)
        (
            "mxnet.base.MXNetError: [11:18:15] src/storage/./pooled_storage_manager.h:157: "
            "cudaMalloc failed: out of memory",
            "mxnet",
            "cudaMalloc failed: out of memory",
        ),
        (
            "MXNetError: cudaMalloc retry failed: out of memory",
            "mxnet",
            "cudaMalloc retry failed: out of memory",
        ),
        # older XLA/JAX
        (
            "Resource exhausted: Out of memory while trying to allocate 17179869184 bytes.",
            "xla",
            "Resource exhausted: Out of memory while trying to allocate",
        ),
        # the driver's code after a lowercase "error" (cuDNN's handle) or TensorFlow's stream
        # executor's "failed to allocate" with no error word before it
        (
            "There was an error before creating cudnn handle (2): cudaErrorMemoryAllocation : out "
            "of memory",
            "cuda-driver",
            "error",  # the driver family's match is the word before the code
        ),
        (
            "I tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 3.77G "
            "(4046333952 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
            "cuda-driver",
            "failed to allocate",
        ),
        # PyTorch's message lower-cased, as pasted into an issue title
        (
            "torch.outofmemoryerror: cuda out of memory. tried to allocate 20.00 mib. gpu 0 has a "
            "total capacity of 14.75 gib of which 3.06 mib is free.",
            "torch",
            "cuda out of memory. tried to allocate 2",
        ),
        # the kernel's OOM killer: a DataLoader worker, one or several pids; the job itself, as
        # the shell reports it (a bare line, after a progress bar's "]", bash's job line)
        (
            "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
            "host-killed",
            "DataLoader worker (pid 19597) is killed by signal: Killed",
        ),
        (
            "RuntimeError: DataLoader worker (pid(s) 19597, 19598) is killed by signal: Killed.",
            "host-killed",
            "DataLoader worker (pid(s) 19597, 19598) is killed by signal: Killed",
        ),
        ("Killed", "host-killed", "Killed"),
        ("  Killed  ", "host-killed", "  Killed  "),
        (
            "Loading checkpoint shards:  38%|###       | 3/8 [00:02<00:03,  1.28it/s]Killed",
            "host-killed",
            "]Killed",
        ),
        (
            "/bin/bash: line 1:  1234 Killed                  python train.py",
            "host-killed",
            "line 1:  1234 Killed",
        ),
    ],
)
def test_each_new_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    found = formats.find_failure(line)
    assert found is not None
    assert (found[0], line[found[1] : found[2]]) == (family, wording)


@pytest.mark.parametrize(
    "line",
    [
        # TensorRT's builder and execution-context reports: a tactic skipped, not the failure
        "[W] [TRT] Error Code 2: OutOfMemory (no further information)",
        "[E] 2: [executionContext.cpp::ExecutionContext::436] Error Code 2: OutOfMemory (no "
        "further information)",
        "[TRT] [W] Requested amount of GPU memory (8589934592 bytes) could not be allocated. "
        "There may not be enough free memory for allocation to succeed.",
        # PaddlePaddle's words without its failure's sentence
        "If you get an Out of memory error on GPU 0, lower the batch size",
        "Out of memory error on GPU 0, cannot allocate",
        # MXNet's cudaMalloc failing for another reason
        "cudaMalloc failed: invalid argument",
        # the older XLA wording lower-cased (never printed so), TensorFlow's own is its own family
        "resource exhausted: out of memory while trying to allocate 1 bytes",
        # "errors" is no error word before a driver code
        "errors: CUDA_ERROR_OUT_OF_MEMORY",
        # lower-cased torch wording without a figure after it
        "how to fix cuda out of memory. tried to allocate more memory",
        # a DataLoader worker killed by another signal is not host memory
        "RuntimeError: DataLoader worker (pid 19597) is killed by signal: Segmentation fault.",
        # "Killed" inside a sentence, or with more on its line
        "Process was Killed by the user",
        "Killed 3 zombie processes",
        "Killed python train.py",
        "worker Killed",
    ],
)
def test_near_misses_of_the_new_wordings_are_no_failure(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


@pytest.mark.parametrize(
    ("line", "framework"),
    [
        ("Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0", "paddle"),
        ("[E] 1: [defaultAllocator.cpp::allocate::21] Error Code 1: Cuda Runtime (out of memory)",
         "tensorrt"),
        ("MXNetError: cudaMalloc retry failed: out of memory", "mxnet"),
        ("Killed", None),
        ("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.", "pytorch"),
    ],
)  # fmt: skip
def test_the_new_families_name_their_stack(line: str, framework: str | None) -> None:
    d = diagnose(f"step 1\n{line}\n")
    assert d.detected
    assert d.framework == framework


def test_killed_is_a_keyword_and_an_anchor_of_the_scan() -> None:
    # the scan searches the whole input only for ANCHORS, then checks the line for KEYWORDS: a
    # bare "Killed" line is found in a log only through both
    assert b"Killed" in formats.KEYWORDS
    assert b"Killed" in formats.ANCHORS
    d = diagnose("epoch 1 loss 2.3\nepoch 2 loss 2.1\nKilled\n")
    assert (d.detected, d.kind, d.oom_count) == (True, "host-oom-killed", 1)


@pytest.mark.parametrize(("word", "gap", "found"), [
    ("error", 200, 0), ("error", 201, None),
    ("failed to allocate", 200, 0), ("failed to allocate", 201, None),
])  # fmt: skip
def test_the_new_driver_words_are_at_most_200_characters_before_the_code(
    word: str, gap: int, found: int | None
) -> None:
    # the look-back reaches the longest word ("failed to allocate", 18 characters) + 200
    assert start(word + " " * gap + CODE) == found
    assert start("x" * 300 + " " + word + " " * gap + CODE) == (None if found is None else 301)


# -- the wordings of issue 24's second round (public3 and public4, calibration since) -----------


@pytest.mark.parametrize(
    ("line", "family", "wording"),
    [
        # llama.cpp (public4 t-012) and AMReX (public3 r-019): their own CUDA_CHECK
        ("CUDA error 2 at ggml-cuda.cu:359: out of memory", "cuda-error",
         "CUDA error 2 at ggml-cuda.cu:359: out of memory"),
        ("amrex::Abort::0::CUDA error 2 in file ../../../../amrex/Src/Base/AMReX_Arena.cpp line "
         "169: out of memory !!!", "cuda-error",
         "CUDA error 2 in file ../../../../amrex/Src/Base/AMReX_Arena.cpp line 169: out of memory"),
        # Caffe (public3 r-043, public4 t-015) and MXNet's mshadow (public4 t-030)
        ("F0228 17:38:20.483613  4104 syncedmem.cpp:64] Check failed: error == cudaSuccess (2 vs. "
         "0)  out of memory", "cuda-error", "cudaSuccess (2 vs. 0)  out of memory"),
        ("Check failed: err == cudaSuccess (2 vs. 0) Name: MapPlanKernel ErrStr:out of memory",
         "cuda-error", "cudaSuccess (2 vs. 0) Name: MapPlanKernel ErrStr:out of memory"),
        # lmdeploy's TurboMind (public4 t-032); XLA's kernel launch (public4 t-018)
        ("RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
         "/lmdeploy/src/turbomind/utils/allocator.h:231", "cuda-error",
         "CUDA runtime error: out of memory"),
        ("RuntimeError: :0: cudaFuncSetAttribute(kernel_entry, "
         "cudaFuncAttributeMaxDynamicSharedMemorySize, x): out of memory", "cuda-error",
         "cudaFuncSetAttribute(kernel_entry, cudaFuncAttributeMaxDynamicSharedMemorySize, x): "
         "out of memory"),
        # Legion's framebuffer memory (public4 t-025)
        ("Failed to allocate 4300800048 bytes on memory 1e00000000000003 (of kind GPU_FB_MEM) for "
         "the temporary allocations", "cuda-error",
         "Failed to allocate 4300800048 bytes on memory 1e00000000000003 (of kind GPU_FB_MEM)"),
        # TensorRT's safe runtime (public3 r-050)
        ("../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)", "tensorrt",
         "Cuda Error in allocate: 2 (out of memory)"),
        # PaddlePaddle's legacy allocator (public4 t-031)
        ("Cannot allocate 195.800781MB in GPU 0, available 5.937500MBtotal 7981694976"
         "GpuMinChunkSize 256.000000BGpuMaxChunkSize 21.694021MBGPU memory used: 324.750000kB",
         "paddle", "Cannot allocate 195.800781MB in GPU 0, available"),
        # ONNX Runtime's arena at its limit (public4 t-023)
        ("onnxruntime::BFCArena::AllocateRawInternal(size_t, bool) Available memory of 0 is "
         "smaller than requested bytes of 135383040", "onnxruntime-limit",
         "Available memory of 0 is smaller than requested bytes"),
        # TensorFlow's BFC failing path prints the rounded size (public4 t-022)
        ("Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.17GiB (rounded to "
         "1251090432). ", "bfc", "ran out of memory trying to allocate 1.17GiB (rounded to "
         "1251090432)"),
        # PyTorch's caching allocator's warning (public3 r-025)
        ("[W831 09:18:45.000000000 CUDACachingAllocator.cpp:4079] memory allocation failed with "
         "OOM on device 0 while trying to allocate 38050725888 bytes (free: 11672748032, total: "
         "25756696576).", "torch-warning", "memory allocation failed with OOM on device 0 while "
         "trying to allocate 38050725888 bytes"),
        # torch's message lower-cased with a comma (public3 r-052); from its 2.x second sentence
        # after the poster's words (public4 s-013)
        ("cuda out of memory, tried to allocate 50MiB(GPU 0; 1.96GiB totalcapacity;", "torch",
         "cuda out of memory, tried to allocate 5"),
        ("key messsage is Tried to allocate 13.20 GiB. GPU 0", "torch",
         "Tried to allocate 13.20 GiB. GPU 0"),
        # as the stacks' sources print them, no log here has them: Thrust's allocator, RAPIDS'
        # RMM pool, llama.cpp's backend buffers, TensorFlow 2's eager ops
        ("terminate called after throwing an instance of 'thrust::system::detail::bad_alloc'  "
         "what():  std::bad_alloc: cudaErrorMemoryAllocation: out of memory", "cuda-error",
         "bad_alloc: cudaErrorMemoryAllocation"),
        ("MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/opt/rmm/mr/device/"
         "pool_memory_resource.hpp:196: Maximum pool size exceeded", "cuda-error",
         "out_of_memory: RMM failure"),
        ("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2147483648",
         "cuda-error", "failed to allocate CUDA0 buffer"),
        ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate "
         "memory [Op:AddV2]", "tensorflow", "ResourceExhaustedError: failed to allocate memory"),
        # ONNX Runtime's CUDA_CALL
        ("E:onnxruntime:Default, cuda_call.cc:119 CudaCall] CUDA failure 2: out of memory ; "
         "GPU=0 ; expr=cudaMalloc((void**)&p, size);", "cuda-error",
         "CUDA failure 2: out of memory"),
        # Open MPI's launcher reporting a SIGKILLed rank (public6 x-001, calibration since)
        ("mpirun noticed that process rank 0 with PID 0 on node dagobert exited on signal 9 "
         "(Killed).", "host-killed", "exited on signal 9 (Killed)"),
        # the engines' budget spent before a KV cache (public4 t-009, t-011)
        ("ValueError: Loaded weights leave no GPU memory for the KV cache under "
         "--mem-fraction-static=0.88.", "engine-no-cache",
         "leave no GPU memory for the KV cache under --mem-fraction-static"),
    ],
)  # fmt: skip
def test_each_second_round_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize(
    "line",
    [
        # a CUDA word and "out of memory" far apart, or no error word between
        "CUDA error 2 " + "x" * 201 + " out of memory",
        "to avoid CUDA out of memory errors, lower the batch size",
        "GPU memory: 3.2 GiB used, no out of memory so far",
        # a CUDA error of another code
        "CUDA error 700 at ggml-cuda.cu:359: an illegal memory access was encountered",
        "Check failed: error == cudaSuccess (700 vs. 0)  an illegal memory access was encountered",
        # TensorFlow's "not a failure" warning has no rounded size
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.19GiB with "
        "freed_by_count=0. The caller indicates that this is not a failure",
        # the 2.x sentence right after torch's own message is the same failure, not a second
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has",
        # a Legion allocation of host memory
        "Failed to allocate 4096 bytes on memory 1e00000000000000 (of kind SYSTEM_MEM)",
        # host memory: std::bad_alloc alone, RMM's host resource
        "terminate called after throwing an instance of 'std::bad_alloc'  what():  std::bad_alloc",
        "llama_model_load: loaded meta data with 19 key-value pairs (CUDA0 buffer size = 3.5 GiB)",
    ],
)
def test_near_misses_of_the_second_round_wordings(line: str) -> None:
    found = formats.find_failure(line)
    assert found is None or found[0] == "torch"
    if found is None:
        assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


@pytest.mark.parametrize(("line", "framework"), [
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc "
     "failed: out of memory", "llama.cpp"),
    ("llama_model_load: error loading model: unable to allocate CUDA0 buffer", "llama.cpp"),
    ("E:onnxruntime:Default, cuda_call.cc:119 CudaCall] CUDA failure 2: out of memory",
     "onnxruntime"),
    ("F0228 syncedmem.cpp:64] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
     "caffe"),
    ("MXNetError: Check failed: err == cudaSuccess (2 vs. 0) ErrStr:out of memory", "mxnet"),
    ("CUDA error 2 at ggml-cuda.cu:359: out of memory", "llama.cpp"),
    # ollama's runner (public7 z-005, public8 m-025: read as MXNet's words before)
    ("Error: llama runner process has terminated: cudaMalloc failed: out of memory", "llama.cpp"),
    ("amrex::Abort::0::CUDA error 2 in file AMReX_Arena.cpp line 169: out of memory", None),
])  # fmt: skip
def test_a_cuda_error_is_named_after_the_stack_on_its_line(
    line: str, framework: str | None
) -> None:
    assert diagnose(f"step 1\n{line}\n").framework == framework


@pytest.mark.parametrize("line", [
    # Ray's memory monitor (public7 z-010, z-011, z-030; calibration since its blind score)
    "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers "
    "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    # its account of one kill, and its reports' last line, alone (public9 n-019, o-011, o-012:
    # calibration since their blind score, where the lines before were cut or hard-wrapped)
    "Memory on the node (IP: 169.254.181.2, ID: 708c7baf966d) where the task (actor ID: "
    "0dab4ab4, name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was running was "
    "12.49GB / 13.15GB (0.95), which exceeds the memory usage threshold of 0.95.",
    "(raylet) Refer to the documentation on how to address the out of memory issue: https://docs.ra",
    "Refer to the documentation on how to address the out of memory issue:",
])  # fmt: skip
def test_rays_memory_monitor_is_a_host_kill(line: str) -> None:
    d = diagnose(f"step 1\n{line}\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert d.summary.startswith("host-oom-killed: Ray's memory monitor killed a worker")
    assert d.recommendation.actions[0].startswith("give Ray's tasks and actors memory")


def test_tgis_total_token_warm_up_and_vllms_negative_cache_are_their_engines_words() -> None:
    tgi = diagnose("step 1\nNot enough memory to handle 16000 total tokens with 2 prefill tokens. "
                   "You need to decrease `--max-batch-total-tokens`\n")  # public7 z-007
    assert (tgi.detected, tgi.framework, tgi.kind) == (True, "tgi", "capacity")
    vllm = diagnose(  # public7 z-017: the log cut before vLLM's error, after its profile
        "step 1\nINFO worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; "
        "PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV "
        "Cache is -1.05GiB.\n"
    )
    assert (vllm.detected, vllm.framework, vllm.kind) == (True, "vllm", "memory-fraction-cap")
    positive = "the rest of the memory reserved for KV Cache is 1.05GiB."
    assert formats.find_failure(positive) is None


@pytest.mark.parametrize("line", [
    "Memory on the node is fine",  # no parenthesis: not the monitor's account
    "Refer to the documentation on how to address the out of memory issue in the FAQ",
])  # fmt: skip
def test_words_like_rays_monitor_are_not_a_kill(line: str) -> None:
    assert not diagnose(f"step 1\n{line}\n").detected


@pytest.mark.parametrize(("line", "framework"), [
    # jaxlib builds TensorFlow's XLA as a bazel dependency (public b-022, public4 t-008)
    ("E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] Execution "
     "of replica 0 failed: Resource exhausted: Out of memory while trying to allocate 8 bytes.",
     "jax"),
    ("jax._src.traceback_util.UnfilteredStackTrace: tensorflow RESOURCE_EXHAUSTED: Out of memory "
     "while trying to allocate 8 bytes.", "jax"),
    # TensorFlow's own sources start at tensorflow/
    ("E tensorflow/compiler/xla/stream_executor/gpu/gpu_driver.cc:1] RESOURCE_EXHAUSTED: Out of "
     "memory while trying to allocate 8 bytes.", "tensorflow"),
    ("ResourceExhaustedError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes.",
     "tensorflow"),
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes.", "jax"),
])  # fmt: skip
def test_xla_s_failure_is_jax_s_where_jaxlib_printed_it(line: str, framework: str) -> None:
    family = formats.match_line(line)
    assert family == formats.XLA
    assert formats.match_line(line) == family
    assert formats.framework_of(family, line) == framework


def test_a_driver_error_under_jaxlib_s_sources_is_jax_s() -> None:
    line = ("E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:1] failed "
            "to allocate 1.0K (1024 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY")
    assert formats.framework_of(formats.DRIVER, line) == "jax"


# -- the fourth round's wordings (public10, calibration since its blind score) -----------------


@pytest.mark.parametrize(("line", "family", "wording"), [
    # torch's message with its period lost in a paste (q-024)
    ("RuntimeError: CUDA out of memory Tried to allocate 28.00 MiB (GPU 0; 10.76 GiB total "
     "capacity; 9.73 GiB already allocated; 11.76 MiB free)", "torch",
     "CUDA out of memory Tried to allocate 28.00 MiB"),
    # cudaMallocAsync's message cut to its first words, as ComfyUI prints it (r-025)
    ("torch.OutOfMemoryError: Allocation on device ", "torch-async",
     "OutOfMemoryError: Allocation on device "),
    ("torch.OutOfMemoryError: Allocation on device 0", "torch-async",
     "OutOfMemoryError: Allocation on device 0"),
    # TensorRT-LLM's executor and its own CUDA check (r-007, r-014)
    ("RuntimeError: Executor creation failed due to insufficient GPU memory.", "tensorrt",
     "Executor creation failed due to insufficient GPU memory"),
    ("RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in error: out of memory "
     "(/src/tensorrt_llm/cpp/tensorrt_llm/runtime/ipcUtils.cpp:48)", "cuda-error",
     "CUDA runtime error in error: out of memory"),
    # the gpuErrchk idiom (s-002) and Thrust's algorithms (s-014)
    ("GPUassert: out of memory pcdet/ops/iou3d_nms/src/iou3d_nms.cpp 103", "cuda-error",
     "GPUassert: out of memory"),
    ("  what():  parallel_for failed: out of memory", "cuda-error",
     "parallel_for failed: out of memory"),
    # CuPy's message without its exception's name, as Chainer's trainer prints it (s-015)
    ("Exception in main training loop: out of memory to allocate 205520896 bytes (total "
     "16068929536 bytes)", "cupy",
     "out of memory to allocate 205520896 bytes (total 16068929536 bytes)"),
    # the host's killers: Slurm's newer wording (q-021), PBS (q-009), earlyoom (r-019)
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=15043231.batch. Some of your "
     "processes may have been killed by the cgroup out-of-memory handler.", "host-killed",
     "Detected 1 oom-kill event(s) in S"),
    ("iterations =>> PBS: job killed: mem 269239236kb exceeded limit 268435456kb", "host-killed",
     "PBS: job killed: mem 269239236kb exceeded limit"),
    ("Aug 04 10:48:44 debian earlyoom[845]: low memory! at or below SIGTERM limits: mem  3.00%, "
     "swap 10.00%", "host-killed", "low memory! at or below SIGTERM limits: mem"),
    # public11 (calibration since its blind score): the kubelet's eviction (t-011, v-030);
    # torch's message with a lower-cased "cuda" (v-009); expandable segments' warning (t-019);
    # vLLM V1's negative KV cache budget (u-021)
    ("This step is in Failed state with this message: The node was low on resource: memory. "
     "Container main was using 1783932Ki, which exceeds its request of 0.", "host-killed",
     "The node was low on resource: memory"),
    ("RUNTIME ERROR: cuda out of memory. Tried to allocate 312.00 MiB (GPU 0; 11.17 GiB total",
     "torch", "cuda out of memory. Tried to allocate 3"),
    ("[W831 10:32:25.255074645 CUDACachingAllocator.cpp:508] expandable_segments: memory mapping "
     "failed with OOM on device 0 while trying to map 20971520 bytes (free: 15663104, total: "
     "33671348224).", "torch-warning", "memory mapping failed with OOM on device 0 while trying "
     "to map 20971520 bytes"),
    ("(EngineCore_0 pid=5839) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: "
     "-2.14 GiB", "engine-no-cache", "Available KV cache memory: -2"),
])  # fmt: skip
def test_each_fourth_round_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize("line", [
    "to avoid CUDA out of memory Tried to allocate less",  # no size after it
    "torch.OutOfMemoryError: Allocation on device 0 would be fine",  # the message goes on
    "the executor creation failed: see insufficient GPU memory notes",
    "CUDA runtime error in cudaMemcpy: an illegal memory access was encountered",
    "GPUassert: an illegal memory access was encountered kernel.cu 42",
    "parallel_for failed: cudaErrorInvalidDeviceFunction: invalid device function",
    "out of memory to allocate 205520896 bytes",  # CuPy's total is part of its wording
    "slurmstepd: error: Detected 0 oom-kill events, all good",  # no step after it
    "PBS: job killed: walltime 86420 exceeded limit 86400",
    "earlyoom[845]: mem avail: 21000 of 30236 MiB (69.45%), swap free: 5000 of 5119 MiB",
    "The node was low on resource: ephemeral-storage.",
    "Available KV cache memory: 12.50 GiB",
    "expandable_segments: memory mapping of 20971520 bytes done",
])  # fmt: skip
def test_near_misses_of_the_fourth_round_wordings(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


def test_tensorrt_llm_s_own_check_names_its_stack() -> None:
    line = ("RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in error: out of memory "
            "(ipcUtils.cpp:48)")
    assert formats.framework_of(formats.CUDA_ERROR, line) == "tensorrt"


@pytest.mark.parametrize(("line", "framework"), [
    ("NCCL WARN Cuda failure 'out of memory'", "nccl"),
    ("jax.errors.XlaRuntimeError: INTERNAL: NCCL WARN Cuda failure 'out of memory'", "jax"),
    ("tensorflow.python.framework.errors_impl.InternalError: NCCL WARN Cuda failure 'out of "
     "memory'", "tensorflow"),
    ("RuntimeError: NCCL WARN Cuda failure 'out of memory' (torch)", "nccl"),
])  # fmt: skip
def test_nccl_s_failure_names_jax_or_tensorflow_when_its_line_does(
    line: str, framework: str
) -> None:
    """Under a stack that reserves the GPU up front, NCCL starved of memory is that
    reservation's (classify.PREALLOCATING): the line must say which stack it ran in."""
    assert formats.match_line(line) == formats.NCCL
    assert formats.framework_of(formats.NCCL, line) == framework


# -- the fifth round: a census of 256 failure lines from 175 repositories (issue 24) -----------
# Each line as a public thread posted it (evaluation/census holds them with their sources);
# the wordings below were missed before it.


@pytest.mark.parametrize(("line", "family", "wording"), [
    # torch 0.x's check before its RuntimeError (levyfan/reid-mgn#9)
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCTensorRandom.cu line=25 error=2 : out of "
     "memory", "torch-raw",
     "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCTensorRandom.cu line=25 error=2 : out of "
     "memory"),
    # CuPy 7 with thousands separators (cupy/cupy#2537); cuFFT's own code (cupy/cupy#1063)
    ("Exception in main training loop: Out of memory allocating 25,600,000 bytes (allocated so "
     "far: 3,635,267,072 bytes).", "cupy",
     "Out of memory allocating 25,600,000 bytes (allocated so far: 3,635,267,072 bytes)"),
    ("cupy.cuda.cufft.CuFftError: CUFFT_ALLOC_FAILED", "cuda-library", "CUFFT_ALLOC_FAILED"),
    # MXNet before 1.0 (apache/mxnet#2913); Paddle Inference uncaught (PaddlePaddle/Paddle#42341)
    ("[19:03:47] src/storage/./pooled_storage_manager.h:62: Memory allocation failed.", "mxnet",
     "storage_manager.h:62: Memory allocation failed."),
    ("terminate called after throwing an instance of 'paddle::memory::allocation::BadAlloc'",
     "paddle",
     "terminate called after throwing an instance of 'paddle::memory::allocation::BadAlloc'"),
    # ONNX Runtime 1.15 on, with the method's signature (triton-inference-server/
    # onnxruntime_backend#249)
    ("/onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:368 void* onnxruntime::BFCArena::"
     "AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::"
     "WaitNotificationFn) Failed to allocate memory for requested buffer of size 15728896",
     "onnxruntime",
     "BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::"
     "WaitNotificationFn) Failed to allocate memory for requested buffer"),
    # llama.cpp's ROCm and Vulkan backends (ggml-org/llama.cpp#16725, #15256)
    ("ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296", "cuda-error",
     "failed to allocate ROCm0 buffer"),
    # torch_memory_saver's cuMemCreate (fzyzcjy/torch_memory_saver#4); cuda-python
    # (NVIDIA/cuda-python#2458); redner's check (BachiLi/redner#167); dlib (davisking/dlib#462)
    ("[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp "
     "func=cu_mem_create line=103 (5)", "cuda-error",
     "[torch_memory_saver.cpp] CUresult error  result=2"),
    ("exception: CUDA_ERROR_OUT_OF_MEMORY: The API call failed because it was unable to "
     "allocate enough memory", "cuda-driver", "exception"),
    ("CUDA Runtime Error: out of memory at E:\\redner\\src\\buffer.h:55", "cuda-error",
     "CUDA Runtime Error: out of memory"),
    ("Error while calling cudaMalloc(&backward_data_workspace, backward_data_workspace_size_in_"
     "bytes) in file dlib/dnn/cudnn_dlibapi.cpp:888. code: 2, reason: out of memory",
     "cuda-error",
     "Error while calling cudaMalloc(&backward_data_workspace, backward_data_workspace_size_in_"
     "bytes) in file dlib/dnn/cudnn_dlibapi.cpp:888. code: 2, reason: out of memory"),
    # OpenCV's CUDA module (opencv/opencv#23392; TomHeaven/AnomalyAnalysisWithOpticalFlow#2)
    ("opencv/modules/core/src/cuda_info.cpp:74: error: (-217:Gpu API call) out of memory in "
     "function 'setDevice'", "cuda-error", "(-217:Gpu API call) out of memory"),
    ("OpenCV Error: Gpu API call (out of memory) in CudaFuncTable::mallocPitch", "cuda-error",
     "Gpu API call (out of memory)"),
    # Faiss (facebookresearch/faiss#1031); XGBoost's gpu_hist (dmlc/xgboost#2874)
    ("Error: 'err == cudaSuccess' failed: failed to cudaMalloc 47064032 bytes (error 2 out of "
     "memory)", "cuda-error", "failed to cudaMalloc 47064032 bytes (error 2 out of memory"),
    # TensorFlow 1.x's BFC failing path, before "(rounded to N)" (public14 n-003, public2 q-025)
    ("2017-10-23 22:07:38.053482: W tensorflow/core/common_runtime/bfc_allocator.cc:273] "
     "Allocator (GPU_0_bfc) ran out of memory trying to allocate 798.06MiB.  Current allocation "
     "summary follow", "bfc",
     "ran out of memory trying to allocate 798.06MiB.  Current allocation summary follow"),
    # Faiss 1.7+ (facebookresearch/faiss benchs/bench_gpu_1bn.py quotes it)
    ("Error: 'err == cudaSuccess' failed: StandardGpuResources: alloc fail type "
     "TemporaryMemoryOverflow dev 0 space Device stream 0x7effcc5f47a0 size 4513349632 bytes "
     "(cudaMalloc error out of memory [2])", "cuda-error",
     "StandardGpuResources: alloc fail type TemporaryMemoryOverflow dev 0 space Device stream "
     "0x7effcc5f47a0 size 4513349632 bytes (cudaMalloc error out of memory [2])"),
    ("terminate called after throwing an instance of 'thrust::system::system_error'  what():  "
     "/src/common/device_helpers.cuh(456): out of memory", "cuda-error",
     "thrust::system::system_error'  what():  /src/common/device_helpers.cuh(456): out of "
     "memory"),
    # TensorFlow 1's Eigen allocator (CharlesShang/FastMaskRCNN#129; its request there was 0
    # bytes, a bug, no out-of-memory failure: the eighth round's test below)
    (": F tensorflow/core/common_runtime/gpu/gpu_device.cc:103] EigenAllocator for GPU ran out "
     "of memory when allocating 1610612736.", "tensorflow",
     "EigenAllocator for GPU ran out of memory when allocating"),
    # the host: ollama's check (ollama/ollama#10920), OpenCV's allocator (lhoyer/DAFormer#89),
    # the kernel (NervanaSystems/deepspeech#48, reportportal/kubernetes#203), Slurm's hyphen
    # without "killed" (lanl/PyBNF#118), PBS and Torque (veg/hyphy#500, dask/dask-jobqueue#178,
    # nf-core/sarek#541), Dask's nanny (modin-project/modin#1643), the kubelet
    # (FederatedAI/KubeFATE#64), Ray (ray-project/ray#3323, OpenRLHF/OpenRLHF#936)
    ("cv2.error: OpenCV(4.4.0) alloc.cpp:73: error: (-4:Insufficient memory) Failed to allocate "
     "6291456 bytes in function 'cv::OutOfMemoryError'", "host-alloc",
     "(-4:Insufficient memory) Failed to allocate 6291456 bytes"),
    ("[ 7063.247407] Memory cgroup out of memory: Killed process 63214 (uwsgi) total-vm:3149468kB",
     "host-killed", "Memory cgroup out of memory: Killed process 63214"),
    ("slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.",
     "host-killed", "Detected 2 oom-kill event(s) in s"),
    ("dask-worker.o1838772:=>> PBS: job killed: mem job total 115343360 kb exceeded limit "
     "115343360 kb", "host-killed", "PBS: job killed: mem job total 115343360 kb exceeded limit"),
    ("ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node", "ray-killed",
     "RayOutOfMemoryError: More than 95% of the memory on node"),
])  # fmt: skip
def test_each_census_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize("line", [
    # a census line that is not a failure of memory, or a line close to a new wording
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=70 error=30 : unknown error",
    "cupy.cuda.cufft.CuFftError: CUFFT_INVALID_PLAN",
    "src/storage/./pooled_storage_manager.h:62: Memory allocation done.",
    "terminate called after throwing an instance of 'paddle::platform::EnforceNotMet'",
    "ggml_vulkan: allocating 4096.00 MiB for the ROCm0 buffer",
    "[torch_memory_saver.cpp] CUresult error  result=1 file=csrc/torch_memory_saver.cpp",
    "exception: CUDA_ERROR_INVALID_VALUE: invalid argument",
    "CUDA Runtime Error: an illegal memory access was encountered at buffer.h:55",
    "Error while calling cudaMalloc(&ws, n) in file cudnn_dlibapi.cpp:888. code: 700, reason: "
    "an illegal memory access was encountered",
    "gpu_mat.cu:116: error: (-217) unknown error in function allocate",
    "com.nvidia.spark.rapids.jni.RetryOOM: task should retry operation",
    "W tensorflow/core/common_runtime/bfc_allocator.cc:239] Allocator (GPU_0_bfc) ran out of "
    "memory trying to allocate 45.53MiB with freed_by_count=0. The caller indicates that this is "
    "not a failure",
    "model requires more system memory than the default, set num_ctx",
    "OpenCV(4.4.0) alloc.cpp:73: error: (-215:Assertion failed) size > 0",
    "Killed process list refreshed",
    "PBS: job killed: walltime 86420 exceeded limit 86400",
    "distributed.nanny - WARNING - Worker process 22204 was killed by unknown signal",
    "The node had condition: [DiskPressure].",
    "WARNING: [TRT]: Requested amount of GPU memory (4294967296 bytes) could not be allocated.",
    # read then dropped on this round's review: a retried task, a worker the nanny restarts, a
    # kernel line about whatever process, virtual memory, an admission refusal, a quoted retry
    "Caused by: com.nvidia.spark.rapids.jni.GpuSplitAndRetryOOM: GPU OutOfMemory: could not "
    "split inputs and retry",
    "distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting",
    "[3017506.736861] Killed process 4321 (node_exporter) total-vm:55518724kB",
    "=>> PBS: job killed: vmem 3372163072 exceeded limit 2147483648",
    "Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted",
    "4m7s  Warning  Evicted  pod/egg-1  The node had condition: [MemoryPressure].",
    "WARNING shard 17 failed (Task was killed due to the node running low on memory.), retrying",
    "Error: 'err == cudaSuccess' failed: Failed to cudaMalloc 1610612736 bytes on device 0 "
    "(error 700 an illegal memory access was encountered",
    "node:2134736 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
    # and on the second review's: Vulkan's pinned-memory fallback prints the same line and goes
    # on; ollama's refusal of one request (or a client quoting it); TensorFlow's pinned host
    # memory, retried smaller
    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
    "Error: model requires more system memory (164.8 GiB) than is available (13.4 GiB)",
    "E tensorflow/stream_executor/cuda/cuda_driver.cc:868] failed to alloc 4294967296 bytes on "
    "host: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=271 error=2 : "
    "out of memory",
    # (the fork's ENOMEM, dropped here by that review, is read again in the eleventh round on
    # the log's last line only: test_logtext's test_the_host_refusing_memory_*)
    "ray.exceptions.RayTaskError(OutOfMemoryError): ray::LLMActor.backload_to_gpu() (pid=11992)",
])  # fmt: skip
def test_near_misses_of_the_census_wordings(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


def test_slurms_hyphenated_line_is_found_by_the_scan_without_killed() -> None:
    """The scan's anchor "kill event" holds both spellings; before, only "oom_kill" was one,
    and the hyphenated line without "killed" was never looked at."""
    assert any(a in b"2 oom-kill event(s)" for a in formats.ANCHORS)
    assert any(a in b"1 oom_kill event" for a in formats.ANCHORS)
    assert len(formats.ANCHORS) == 13
    d = diagnose("step 1\nslurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch "
                 "cgroup.\n")
    assert d.detected and d.kind == "host-oom-killed"


# -- public12's calibration (after its blind score) --------------------------------------------


@pytest.mark.parametrize(("line", "family", "wording"), [
    # torch's message lower-cased with its spaces lost (c-002)
    ("runtimeerror:cuda out of memory.tried to allocate 198.75GiB", "torch",
     "cuda out of memory.tried to allocate 1"),
    # tiny-cuda-nn's check (c-008); kmcuda's binding (e-030)
    ("16:23:18 ERROR    Uncaught exception: Could not allocate memory: tiny-cuda-nn/gpu_memory.h:"
     "112 cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memory",
     "cuda-error",
     "cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memory"),
    ("MemoryError: Failed to allocate memory on GPU", "cuda-error",
     "MemoryError: Failed to allocate memory on GPU"),
    # HAMi-core refusing an allocation past the pod's vGPU memory (f-016)
    ("[HAMI-core ERROR (pid:30 thread=140382094939712 allocator.c:53)]: Device 0 OOM 3171158016 "
     "/ 3145728000", "hami",
     "[HAMI-core ERROR (pid:30 thread=140382094939712 allocator.c:53)]: Device 0 OOM 3171158016 "
     "/ 3145728000"),
])  # fmt: skip
def test_each_public12_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    # HAMi's refusal counts once the job raises it (core._SURFACED)
    raised = ("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
              "RuntimeError: CUDA error: unrecognized error code\n") if family == "hami" else ""
    assert_wording(line, family, wording, then=raised)


@pytest.mark.parametrize("line", [
    "[HAMI-core Msg(30:140387636202368:libvgpu.c:836)]: Initializing.....",
    "cudaMalloc(&p, n) failed with error an illegal memory access was encountered",
    "MemoryError: Failed to allocate memory on host",
    "runtimeerror:cuda out of memory.tried to",
])  # fmt: skip
def test_near_misses_of_the_public12_wordings(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


def test_the_scan_anchors_on_oom_and_a_space() -> None:
    """HAMi's line holds no anchor but "OOM " (the anchor "OOM when" became "OOM ": still 12)."""
    line = b"[HAMI-core ERROR (pid:1 thread=2 allocator.c:53)]: Device 0 OOM 3171158016 / 31457"
    assert [a for a in formats.ANCHORS if a in line] == [b"OOM "]
    assert any(a in b"OOM when allocating tensor" for a in formats.ANCHORS)


def test_the_keyword_pattern_finds_exactly_what_the_keywords_would() -> None:
    """``KEYWORD_PATTERN`` writes common prefixes once (for speed); it must find a keyword in
    exactly the lines where one of ``KEYWORDS`` occurs."""
    flat = re.compile("|".join(re.escape(k.decode()) for k in formats.KEYWORDS))
    shared = re.compile(formats.KEYWORD_PATTERN)
    lines = [k.decode() for k in formats.KEYWORDS]
    lines += [f"x {k.decode()[:-1]} y" for k in formats.KEYWORDS]  # each cut by a character
    lines += [f"{a.decode()[: len(a) // 2]}{b.decode()[len(b) // 2 :]}"
              for a in formats.KEYWORDS for b in formats.KEYWORDS]
    lines += ["step 1 memory: 12.5 GiB", "OOM", "oom_kill event", "killed", "Kil led"]
    for line in lines:
        assert (shared.search(line) is None) == (flat.search(line) is None), line


# -- public13's calibration (after its blind score) --------------------------------------------


@pytest.mark.parametrize(("line", "family", "wording"), [
    # IPython's traceback head (k-007, public9 n-007)
    ("OutOfMemoryError                          Traceback (most recent call last)",
     "exception-name",
     "OutOfMemoryError                          Traceback (most recent call last)"),
    # XLA's unified memory under ColabFold (k-003); TensorFlow's pinned host memory (public12
    # e-006)
    ("E external/org_tensorflow/tensorflow/stream_executor/cuda/cuda_driver.cc:764] failed to "
     "alloc 1997901824 bytes unified memory; result: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
     "cuda-driver", "failed to alloc"),
])  # fmt: skip
def test_each_public13_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize("line", [
    "ray.exceptions.RayTaskError(ValueError): ray::LLMActor.generate()",
    "    OutOfMemoryError                          Traceback (most recent call last)",
    "KeyError                                  Traceback (most recent call last)",
    "failed to alloc 1997901824 bytes unified memory; result: CUDA_ERROR_INVALID_VALUE",
    "OSError: [Errno 28] No space left on device",
])  # fmt: skip
def test_near_misses_of_the_public13_wordings(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


def test_ipythons_bare_name_gives_way_to_any_other_wording_of_the_failure() -> None:
    """The name alone is torch's, CuPy's or Ray's (a host kill): the least telling wording, so
    Ray's kill line after it represents the failure (the second review's c6)."""
    d = diagnose("OutOfMemoryError                          Traceback (most recent call last)\n"
                 "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                 "memory.\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")


@pytest.mark.parametrize("words", [
    ["OOM ", "OOM when allocating", "out of memory", "out of mem", "Killed", "killed"],
    ["a.b", "a+c", "(x)", "[y]", "abc", "abd", "b"],
    ["only"],
    ["abc", "abd"],  # a node of two branches: both kept
])  # fmt: skip
def test_any_of_finds_each_word_and_nothing_else(words: list[str]) -> None:
    """``_any_of`` itself (KEYWORD_PATTERN is built once, at import): each word found, a word
    that another starts with is enough, regex characters are literal, and a line holding none
    is not matched."""
    pattern = re.compile(formats._any_of(words))
    for word in words:
        match = pattern.search(f"-- {word} --")
        assert match is not None and match.group(0) in words
    assert pattern.search("-- none of them here --") is None
    assert pattern.fullmatch(min(words, key=len)) is not None
    if "OOM " in words:
        assert pattern.search("x OOM when allocating").group(0) == "OOM "  # the shorter ends it
    if "a.b" in words:
        assert pattern.search("axc") is None and pattern.search("aac") is None  # "." "+" literal


# -- the sixth round: public14's and public15's calibration (after their blind scores) ---------


@pytest.mark.parametrize(("line", "family", "wording"), [
    # Elixir's EXLA prints XLA's status without its code (public15 v-021)
    ("** (RuntimeError) Out of memory while trying to allocate 117964800 bytes.", "xla",
     "Out of memory while trying to allocate 117964800 bytes."),
    # XGBoost's device allocator (public15 v-010, v-009)
    ("../src/data/../common/device_helpers.cuh:428: Memory allocation error on worker 3: Caching "
     "allocator", "cuda-error", "Memory allocation error on worker 3: Caching allocator"),
    ("Memory allocation error on worker 0: [14:34:02] ../src/data/../common/device_helpers.cuh: "
     "419: out of memory", "cuda-error",
     "Memory allocation error on worker 0: [14:34:02] ../src/data/../common/device_helpers.cuh: "
     "419: out of memory"),
])  # fmt: skip
def test_each_sixth_round_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize("line", [
    # TensorRT skipping a tactic is no failure (public14 n-017); a plugin's scratch space past
    # the builder's workspace limit is that limit, not the GPU (the review: trtexec
    # --memPoolSize=workspace:16 on a roomy card; public15 v-011, v-024 stay misses)
    "    Try decreasing the workspace size with IBuilderConfig::setMemoryPoolLimit().",
    "[W] Skipping tactic 3 due to insufficient memory on requested size of 68719476736 detected",
    "[E] 4: Internal error: plugin node nms requires 20676608 bytes of scratch space, but only "
    "16777216 is available. Try increasing the workspace size with "
    "IBuilderConfig::setMemoryPoolLimit().",
    # XGBoost wraps any pending CUDA error as a memory allocation error (dmlc/xgboost#8493)
    "Memory allocation error on worker 7: parallel_for failed: cudaErrorNoKernelImageForDevice: "
    "no kernel image is available for execution on the device",
    "Memory allocation error on worker 0: cudaErrorLaunchOutOfResources: too many resources "
    "requested for launch",
    # XLA's wording without a byte count, or in prose
    "Out of memory while trying to allocate the KV cache",
    "XGBoost: Memory allocation error handling was improved in 1.7",
])  # fmt: skip
def test_near_misses_of_the_sixth_round_wordings(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


# -- issue 24, seventh round: the eighteenth public set's wordings -----------------------------


@pytest.mark.parametrize(("line", "family", "wording"), [
    # systemd's account of its unit's process the kernel killed (public18 g-009, llama.cpp's
    # server; public12 c-003's syslog), and a unit-less wording of the same line
    ("Mar 02 10:00:01 host systemd[1]: llama.service: A process of this unit has been killed by "
     "the OOM killer.", "host-killed", "A process of this unit has been killed by the OOM killer"),
    ("discord-bot.service: A process has been killed by the OOM killer.", "host-killed",
     "A process has been killed by the OOM killer"),
    # Slurm's accounting killing a job or a step over its limit (public18 h-009, h-011)
    ("slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed",
     "host-killed", "exceeded memory limit (626359956 > 512000000), being killed"),
    # Google's managed training service (public19 l-023, Cloud ML Engine; Vertex AI's pool names)
    ("The replica master 0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL)",
     "host-killed",
     "The replica master 0 ran out-of-memory and exited with a non-zero status of 9"),
    ("The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL)",
     "host-killed",
     "The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of 9"),
    ("slurmstepd: error: StepId=7284712.0 exceeded memory limit (1295467052032 > "
     "1288490188800), being killed", "host-killed",
     "exceeded memory limit (1295467052032 > 1288490188800), being killed"),
    # Ray 2.55+ counts the workers it killed (public18 g-018, a Serve replica's health check)
    ("14 worker(s) were killed due to the node running low on memory. ... 28.64GB used / "
     "30.00GB limit", "ray-killed",
     "14 worker(s) were killed due to the node running low on memory"),
    # CatBoost's device pool, 0.7's figures bare (public18 h-010) and later ones in MB
    ("Application terminated with error: (NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/"
     "memory_pool/stack_like_memory_pool.h:294: Error: Out of memory. Requested 1070.546387; "
     "Free 1010.952393", "cuda-error",
     "Error: Out of memory. Requested 1070.546387; Free 1010.952393"),
    ("catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:308: Error: Out of memory. "
     "Requested 512 MB; Free 100 MB", "cuda-error",
     "Error: Out of memory. Requested 512 MB; Free 100"),
])  # fmt: skip
def test_each_eighteenth_set_wording_is_its_familys(line: str, family: str, wording: str) -> None:
    assert_wording(line, family, wording)


@pytest.mark.parametrize("line", [
    # printed at a step's end when its usage touched the limit, killed or not
    "slurmstepd: error: Exceeded step memory limit at some point.",
    "slurmstepd: error: Exceeded job memory limit at some point.",
    # a unit's main process killed by a signal, not by the OOM killer
    "erigon.service: Main process exited, code=killed, status=9/KILL",
    "llama.service: Failed with result 'signal'.",
    # a host library's malloc (MuPDF's fz_malloc), not CatBoost's pool
    "Fatal Error: Out of memory. Requested 12.00KB memory. Must shutdown app.",
    # Ray's count of killed workers without its reason
    "2 worker(s) were killed.",
])  # fmt: skip
def test_near_misses_of_the_eighteenth_set_wordings_are_no_failure(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\n").detected


def test_catboost_is_named_by_its_pool_s_namespace_or_its_name() -> None:
    line = "(NCudaLib::TOutOfMemoryError) Error: Out of memory. Requested 1.5 MB; Free 1.0 MB"
    assert formats.framework_of(formats.CUDA_ERROR, line) == "catboost"
    assert formats.framework_of(formats.CUDA_ERROR, "catboost: " + line[27:]) == "catboost"


# -- edges mutation found loose at af01f88 (bench/results/mutation-2026-12-03-round7.md) --------


@pytest.mark.parametrize(("words", "pattern"), [
    (["abc"], "abc"),  # one word: no group
    (["abc", "abd"], "ab(?:c|d)"),  # the common prefix written once
    (["ab", "abc"], "ab"),  # a word another starts with ends the branch
    (["b.", "a"], "(?:a|b\\.)"),  # escaped, in sorted order
])  # fmt: skip
def test_keywords_are_one_tree_with_their_prefixes_written_once(
    words: list[str], pattern: str
) -> None:
    # the shape is the point (the scan's speed, see _any_of); KEYWORD_PATTERN is built at
    # import, where mutmut 3 cannot see it, so the shape is pinned here
    assert formats._any_of(words) == pattern


@pytest.mark.parametrize(("family", "line", "framework"), [
    # PyTorch's host allocator names no stack but its own class
    (formats.HOST_ALLOC, "[enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not "
     "enough memory: you tried to allocate 1024 bytes.", "pytorch"),
    # OpenCV's words without its markers (cv2.error, OpenCV(4...) name nothing
    (formats.HOST_ALLOC, "error: (-4:Insufficient memory) Failed to allocate 1024 bytes in "
     "function 'OutOfMemoryError'", None),
    # a family that is a stack's own falls back to it when no marker is on the line
    (formats.TORCH_RAW, "CUDA error: out of memory", "pytorch"),
    (formats.CUDA_LIBRARY, "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
     "pytorch"),
])  # fmt: skip
def test_an_unmarked_line_takes_its_familys_stack(
    family: str, line: str, framework: str | None
) -> None:
    assert formats.match_line(line) == family
    assert formats.framework_of(family, line) == framework


# -- issue 24, eighth round: the twentieth public set's wordings ----------------------------------


@pytest.mark.parametrize(("line", "framework"), [
    # HugeCTR's check (public20 m-010)
    ("Runtime error: out of memory /mnt/HugeCTR/HugeCTR/include/general_buffer.hpp:64",
     "hugectr"),
    # MNN's CUDA backend (public20 o-006; its sources print one line per refused buffer)
    ("Out of memory when gamma is acquired in CudaLayerNorm. ", "mnn"),
    # the RAPIDS Accelerator for Spark aborting the job over a task's last GPU failure
    ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 49 in stage 10.0 "
     "failed 4 times, most recent failure: Lost task 49.3 in stage 10.0 (TID 560) (10.0.0.7 "
     "executor 1): com.nvidia.spark.rapids.jni.GpuSplitAndRetryOOM: GPU OutOfMemory: could not "
     "split inputs and retry", "spark-rapids"),
])  # fmt: skip
def test_each_public20_wording_is_a_gpu_failure_of_its_stack(line: str, framework: str) -> None:
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose(f"step 1\n{line}\n")
    assert (d.detected, d.framework) == (True, framework)


@pytest.mark.parametrize(("line", "framework"), [
    # HugeCTR's log prefix names it; its name in a path beside PyTorch's failure does not
    ("[HCTR][08:01:02.123][ERROR][RK0][main]: Runtime error: out of memory", "hugectr"),
    ("RuntimeError: CUDA error: out of memory (/opt/HugeCTR/tools/convert.py)", "pytorch"),
    ("RuntimeError: CUDA error: out of memory (/opt/hugectr/tools/convert.py)", "pytorch"),
])  # fmt: skip
def test_hugectr_is_named_by_its_own_words_not_its_path(line: str, framework: str) -> None:
    assert formats.framework_of(formats.CUDA_ERROR, line) == framework


@pytest.mark.parametrize("line", [
    # the host's twin of Spark's GPU retry failure, and the GPU's as a task attempt Spark retries
    # (public20 m-009 shows only that)
    "com.nvidia.spark.rapids.jni.CpuSplitAndRetryOOM: CPU OutOfMemory: could not split inputs "
    "and retry",
    "com.nvidia.spark.rapids.jni.SplitAndRetryOOM: GPU OutOfMemory: could not split inputs and "
    "retry",
    # an interpreter's own error with no source file after it
    "Runtime error: out of memory",
    "Runtime error: out of memory in function foo",
])  # fmt: skip
def test_near_misses_of_the_public20_wordings_are_not_gpu_failures(line: str) -> None:
    assert formats.match_line(line) != formats.CUDA_ERROR


@pytest.mark.parametrize("line", [
    # MNN's other backends print the CUDA one's words with their own names (the review:
    # source/backend/cpu/CPULayerNorm.cpp, hexagon, opencl, vulkan)
    "Out of memory when gamma is acquired in CPULayerNorm.",
    "Out of memory when cos is acquired in Hexagon RoPE.",
    # NumPy's refused array quoted in a message: often caught and survived (the eighth round's
    # review); read only as a traceback's last line (the tenth round)
    "WARNING could not cache the volume: Unable to allocate 5.18 GiB for an array with shape "
    "(26, 204, 512, 512) and data type float32",
    "cache miss (_ArrayMemoryError: Unable to allocate 5.18 GiB for an array with shape (26, 204,"
    " 512, 512) and data type float32), reading from disk",
])  # fmt: skip
def test_other_backends_and_numpy_are_no_failure(line: str) -> None:
    assert formats.match_line(line) is None


def test_a_path_through_numpy_does_not_name_a_pytorch_failure_numpy_s() -> None:
    # a one-line structured log record carrying the traceback (the review)
    line = ('  File "/usr/lib/python3.10/dist-packages/numpy/lib/npyio.py", line 1 '
            "RuntimeError: CUDA error: out of memory")
    assert diagnose(f"step 1\n{line}\n").framework == "pytorch"


# -- issue 24, eighth round: the twenty-first and twenty-second public sets' wordings ------------


@pytest.mark.parametrize(("line", "framework"), [
    # PyCUDA (public22 u-001, cryoSPARC); the runtime's error name and string (u-010)
    ("MemoryError: cuMemAlloc failed: out of memory", "pycuda"),
    ("cudaErrorMemoryAllocation: out of memory", None),
    # RELION's check and its allocator (public22 u-003, u-006)
    ("ERROR: out of memory in /emsoft/relion-3.0/src/acc/acc_backprojector_impl.h at line 37 "
     "(error-code 2)", "relion"),
    ("ERROR: CudaCustomAllocator out of memory", "relion"),
    # PennyLane Lightning's CUDA check, cuStateVec (public22 u-007, u-009)
    ("pennylane_lightning_gpu.lightning_gpu_qubit_ops.PLException: [DataBuffer.hpp][Line:37]"
     "[Method:DataBuffer]: Error in PennyLane Lightning: out of memory", "pennylane"),
    ("  what():  [custatevec] %out of memory in addQubitsToState (line 210)", "custatevec"),
])  # fmt: skip
def test_each_public22_wording_is_a_gpu_failure_of_its_stack(
    line: str, framework: str | None
) -> None:
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose(f"step 1\n{line}\n")
    assert (d.detected, d.framework) == (True, framework)


def test_a_path_through_a_stack_does_not_name_another_stacks_failure() -> None:
    line = ('  File "/opt/pennylane/relion/pycuda/x.py", line 1 RuntimeError: CUDA error: out of '
            "memory")
    assert diagnose(f"step 1\n{line}\n").framework == "pytorch"


@pytest.mark.parametrize("line", [
    # public22 x-001 (a TensorFlow bug with empty tensors) and the census's FastMaskRCNN line
    "F tensorflow/core/common_runtime/gpu/gpu_device.cc:104] EigenAllocator for GPU ran out of "
    "memory when allocating 0. See error logs for more detailed info.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 0 bytes. GPU 0 has a total "
    "capacity of 79.19 GiB of which 3.00 GiB is free.",
])  # fmt: skip
def test_a_request_of_nothing_is_no_out_of_memory_failure(line: str) -> None:
    d = diagnose(f"step 1\n{line}\n")
    assert not d.detected
    assert d.summary == (
        "no out-of-memory failure: it asked for 0 bytes, a bug, not memory running out"
    )
    assert d.recommendation.actions[0].startswith("the failure asked for 0 bytes")


# -- issue 24, ninth round -----------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    # torch-directml's allocator (public21 t-022; t-024 with the weight's name before it)
    "Could not allocate tensor with 81544192 bytes. There is not enough GPU video memory "
    "available!",
    "ERROR diffusion_model.output_blocks.1.1.transformer_blocks.2.ff.net.0.proj.weight Could not "
    "allocate tensor with 52428800 bytes. There is not enough GPU video memory available!",
    "RuntimeError: Could not allocate tensor with 2123366400 bytes. There is not enough GPU video "
    "memory available!",
])  # fmt: skip
def test_directml_s_refusal_is_a_gpu_failure_of_its_own_stack(line: str) -> None:
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose(f"step 1\n{line}\n")
    assert (d.detected, d.framework) == (True, "directml")
    assert d.figures.requested_bytes == int(line.split(" with ")[1].split()[0])


@pytest.mark.parametrize("line", [
    "Could not allocate tensor with 81544192 bytes.",  # the reason cut off: not read
    "There is not enough GPU video memory available to run this game",
])  # fmt: skip
def test_directml_s_words_alone_are_not_a_failure(line: str) -> None:
    assert formats.match_line(line) is None


@pytest.mark.parametrize(("line", "framework"), [
    # Omniverse Kit's Vulkan renderer (Isaac Sim: public23 b-018)
    ("2022-09-22 01:17:40 [28,987ms] [Error] [carb.graphics-vulkan.plugin] VkResult: "
     "ERROR_OUT_OF_DEVICE_MEMORY", "omniverse"),
    ("VkResult: ERROR_OUT_OF_DEVICE_MEMORY", "omniverse"),
    # Isaac Gym's PhysX (public23 b-024)
    ("[Error] [carb.gym.plugin] Gym cuda error: out of memory: ../../../source/plugins/carb/gym/"
     "impl/Gym/GymPhysX.cpp: 1721", "isaacgym"),
    # a CUDA check macro (bitsandbytes' ops.cu, public23 z-019); heFFTe's (public23 a-012)
    ("Error out of memory at line 88 in file D:\\a\\bitsandbytes\\csrc\\ops.cu", None),
    ("  what():  cudaMalloc() failed with message: out of memory", None),
])  # fmt: skip
def test_the_twenty_third_sets_wordings_are_gpu_failures(
    line: str, framework: str | None
) -> None:
    assert formats.match_line(line) == formats.CUDA_ERROR
    assert formats.framework_of(formats.CUDA_ERROR, line) == framework
    assert diagnose(f"step 1\n{line}\n").detected


@pytest.mark.parametrize("line", [
    "VkResult: ERROR_OUT_OF_HOST_MEMORY",  # host memory, not the device's
    "Error out of memory at line 88",  # no source file: any program's words
    "cudaMallocHost() failed with message: out of memory",  # pinned host memory
    "if (res == VK_ERROR_OUT_OF_DEVICE_MEMORYX) {",
    # the bare enum: an application may fall back, as llama.cpp's Vulkan backend does
    "vkAllocateMemory returned VK_ERROR_OUT_OF_DEVICE_MEMORY",
])  # fmt: skip
def test_near_misses_of_the_twenty_third_sets_wordings_are_not_gpu_failures(line: str) -> None:
    assert formats.match_line(line) != formats.CUDA_ERROR


@pytest.mark.parametrize(("line", "family", "framework"), [
    # Ascend's torch_npu, torch 1.x's wording (public24 c-002)
    ("RuntimeError: NPU out of memory. Tried to allocate 9.78 GiB (NPU 0; 32.00 GiB total "
     "capacity; 29.80 GiB already allocated; 1.59 GiB free; 50.34 MiB cached)", formats.TORCH,
     "torch-npu"),
    # Theano's allocator, glued to a Keras bar (public24 f-019)
    ("94976/94990 [====>.] - ETA: 0s - loss: 0.2739 - acc.: 0.9235Error allocating 3242496000 "
     "bytes of device memory (out of memory). Driver report 876146688 bytes free and 4294246400 "
     "bytes total", formats.CUDA_ERROR, "theano"),
    # TensorFlow 2.11+ naming the op's function first (public24 f-009)
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
     "__wrapped__Mul_device_/job:localhost/replica:0/task:0/device:GPU:0}} failed to allocate "
     "memory [Op:Mul]", None, "tensorflow"),
    # a DataLoader worker's kill as people retype it (public24 c-006)
    ("RuntimeError:DataLoader worker(pid xxxxx) is killed by signal:killed.",
     formats.HOST_KILLED, "pytorch"),
    # a shell's "Killed" after a bar cut mid-draw (public24 d-020)
    ("collecting calibration activations in model.layers.25:  77%|█████████Killed",
     formats.HOST_KILLED, None),
])  # fmt: skip
def test_the_twenty_fourth_sets_wordings(line: str, family: str | None, framework: str) -> None:
    found = formats.match_line(line)
    assert found is not None
    if family is not None:
        assert found == family
    assert formats.framework_of(found, line) == framework


def test_theano_s_zero_total_is_no_figure() -> None:
    d = diagnose(
        "Error allocating 4194304 bytes of device memory (out of memory). Driver report 0 bytes "
        "free and 0 bytes total\n"
    )
    assert (d.figures.total_bytes, d.figures.free_bytes, d.figures.requested_bytes) == (
        None, None, 4194304
    )


def test_theano_s_figures_are_read() -> None:
    d = diagnose(
        "Error allocating 240008000 bytes of device memory (out of memory). Driver report "
        "95178752 bytes free and 12079136768 bytes total\n"
    )
    f = d.figures
    assert (f.requested_bytes, f.free_bytes, f.total_bytes) == (240008000, 95178752, 12079136768)
    assert (d.kind, d.framework) == ("capacity", "theano")


@pytest.mark.parametrize("line", [
    "step 3 Killed the bad run, starting again",  # not alone on the line
    "a█Killed by the operator",
    "DataLoader worker (pid 12) is killed by signal: Terminated",
])  # fmt: skip
def test_near_misses_of_the_twenty_fourth_sets_wordings(line: str) -> None:
    assert formats.match_line(line) is None


# -- the tenth round: libraries' own allocation statuses ----------------------------------------


@pytest.mark.parametrize(("line", "framework", "library"), [
    # Caffe's check of a cuRAND call (BVLC/caffe#1026); CuPy's class under spaCy (public21 r-009)
    ("F0902 13:30:41.691910  7302 math_functions.cu:359] Check failed: status == "
     "CURAND_STATUS_SUCCESS (102 vs. 0)  CURAND_STATUS_ALLOCATION_FAILED", "caffe", "cuRAND"),
    ("CURANDError: CURAND_STATUS_ALLOCATION_FAILED", "cupy", "cuRAND"),
    # no stack named: not PyTorch's (no cuRAND host API, no OpenCL backend: the review)
    ("curand call failed: CURAND_STATUS_ALLOCATION_FAILED", None, "cuRAND"),
    # Jupyter's pyopencl, its module dropped (the review's case 08)
    ("MemoryError: create_buffer failed: MEM_OBJECT_ALLOCATION_FAILURE", "opencl", "OpenCL"),
    # pyopencl's MemoryError (tinygrad's OpenCL backend: public24 c-023); OpenCL's C name
    ("pyopencl._cl.MemoryError: clEnqueueMapBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE",
     "opencl", "OpenCL"),
    ("clCreateBuffer failed: CL_MEM_OBJECT_ALLOCATION_FAILURE", "opencl", "OpenCL"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
     "pytorch", "cuBLAS"),
    ("cupy.cuda.cufft.CuFftError: CUFFT_ALLOC_FAILED", "cupy", "cuFFT"),
])  # fmt: skip
def test_a_library_s_own_allocation_status_is_read_with_the_library_s_name(
    line: str, framework: str | None, library: str
) -> None:
    assert formats.match_line(line) == formats.CUDA_LIBRARY
    assert formats.library_named(line) == library
    d = diagnose(f"step 12\n{line}\n")
    assert (d.detected, d.kind, d.framework) == (True, "unknown", framework)
    assert d.summary.startswith(f"unknown: {library} could not allocate")


@pytest.mark.parametrize("line", [
    "pyopencl._cl.RuntimeError: clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES",
    "Check failed: status == CURAND_STATUS_SUCCESS (201 vs. 0)  CURAND_STATUS_LAUNCH_FAILURE",
    "XMEM_OBJECT_ALLOCATION_FAILURES",
    "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "MALLOC_ARENA_MAX=2 ALLOCATION_FAILED_COUNT=0",
])  # fmt: skip
def test_near_misses_of_the_libraries_statuses(line: str) -> None:
    assert formats.match_line(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


def test_a_line_that_names_no_library_gets_none() -> None:
    assert formats.library_named("CUDA error: out of memory") is None


@pytest.mark.parametrize(("log", "requested", "framework"), [
    # CPython's own MemoryError, alone on a traceback's last line (public23 a-017, public25 b-012)
    ("Traceback (most recent call last):\n  File \"src/main.py\", line 102, in <module>\n"
     "    mem = ReplayMemory(args.replay_size, args)\nMemoryError\n", None, None),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nMemoryError: \n",
     None, None),
    # NumPy's array allocation, its binary units and its whole number's point (public20 p-027,
    # public25 d-017)
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 5.18 GiB for an array with "
     "shape (26, 204, 512, 512) and data type float32\n", round(5.18 * 2**30), "numpy"),
    ("numpy.core._exceptions.MemoryError: Unable to allocate 502. MiB for an array with shape "
     "(512, 512, 251) and data type float64\n", 502 * 2**20, "numpy"),
])  # fmt: skip
def test_python_s_and_numpy_s_memory_errors_are_host_memory(
    log: str, requested: int | None, framework: str | None
) -> None:
    d = diagnose(log)
    assert (d.detected, d.kind, d.framework) == (True, "host-oom-killed", framework)
    assert d.figures.requested_bytes == requested
    assert d.summary.startswith("host-oom-killed: host (CPU) memory ran out, not GPU memory")


@pytest.mark.parametrize("line", [
    # (IPython's head names any MemoryError's class, a library's too: an OOM whose memory the
    # log does not tell, test_ipython_s_memoryerror_head_is_an_oom_whose_memory_...)
    "    except MemoryError:",
    "    raise MemoryError",
    "MemoryError is raised when the array is too large",
    "out of memory at /pytorch/aten/src/THC/THCCachingHostAllocator.cpp:271",
    "the run went out of memory at /home/u/THC/notes.txt",
])  # fmt: skip
def test_near_misses_of_the_host_memory_errors_and_thc_s_fragment(line: str) -> None:
    assert formats.find_failure(line) is None
    assert not diagnose(f"step 1\n{line}\nstep 2\n").detected


@pytest.mark.parametrize("line", [
    "out of memory at /pytorch/torch/lib/THC/generic/THCStorage.cu:58",
    "out of memory at /opt/conda/condabld/pytorch_1523244252089/work/torch/lib/THC/generic/"
    "THCStorage.cu:58..",
])
def test_thc_s_error_without_its_head_is_torch_s(line: str) -> None:
    assert formats.match_line(line) == formats.TORCH_RAW
    d = diagnose(line + "\n")
    assert (d.detected, d.framework) == (True, "pytorch")


def test_a_check_s_source_line_then_out_of_memory_is_a_cuda_error() -> None:
    line = "RuntimeError: /pytorch/torch/csrc/autograd/profiler_cuda.cpp:23: out of memory"
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose("python gcn_dgl.py --gpu=0\n" + line + "\n")
    assert (d.detected, d.framework) == (True, "pytorch")


@pytest.mark.parametrize("line", [
    "src/pool.cpp:12: out of memory for the host staging buffer, retrying smaller",
    "see notes.txt:3: out of memory",
])  # fmt: skip
def test_near_misses_of_a_check_s_source_line(line: str) -> None:
    assert formats.match_line(line) != formats.CUDA_ERROR


def test_a_relayed_check_line_is_not_read_twice() -> None:
    """ollama relays llama.cpp's check through its own log: one failure, not two."""
    d = diagnose(
        "CUDA error 2 at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/gguf/ggml-cuda.cu:9132:"
        " out of memory\n2024/01/05 10:38:07 llama.go:455: 2 at /go/src/github.com/jmorganca/"
        "ollama/llm/llama.cpp/gguf/ggml-cuda.cu:9132: out of memory\n"
    )
    assert d.oom_count == 1 and d.message.startswith("CUDA error 2 at ")


def test_runcs_container_init_oom_killed_is_a_host_kill() -> None:
    """public26 e-019: the kubelet's event quoting runc at a too-small memory limit."""
    line = ('Warning  Failed  113s   kubelet  Error: container create failed: time="2022-09-14T'
            '11:35:13Z" level=error msg="runc create failed: unable to start container process: '
            'container init was OOM-killed (memory limit too low?)"')
    assert formats.match_line(line) == formats.HOST_KILLED
    d = diagnose(line + "\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert d.recommendation.actions[0].startswith("raise the container's memory limit")


@pytest.mark.parametrize("line", [
    "the sidecar was OOM-killed last week, see the runbook",
    "container init was started",
])  # fmt: skip
def test_near_misses_of_runcs_kill(line: str) -> None:
    assert formats.match_line(line) is None


def test_faiss_s_refusal_broken_before_its_request_line_is_read_there() -> None:
    """public26 h-002: Faiss's message broke across lines; its last holds the request and
    cudaMalloc's error in Faiss's own format."""
    d = diagnose(
        "RuntimeError: Error in virtual void* faiss::gpu::StandardGpuResourcesImpl::allocMemory("
        "const faiss::gpu::AllocRequest&)\n"
        "              at /root/faiss/gpu/StandardGpuResources.cpp:452: \n"
        "              Error: 'err == cudaSuccess' failed: StandardGpuResources: alloc fail type "
        "TemporaryMemoryBuffer \n"
        "              dev 0 space Device \tstream 0x7f7b46ba9a60 size 1610612736 bytes "
        "(cudaMalloc error out of memory [2])\n"
    )
    assert (d.detected, d.framework, d.figures.requested_bytes) == (True, "faiss", 1610612736)
    assert formats.match_line("size 12 bytes (cudaMalloc error invalid value [1])") is None


def test_a_replica_s_oom_re_raised_by_dataparallel_is_pytorch_s() -> None:
    """public26 e-021: nn.DataParallel's wrapper line, the original message cut away."""
    wrapper = "torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0."
    assert formats.match_line(wrapper) == formats.TORCH_RAW
    d = diagnose(wrapper + "\n")
    assert (d.detected, d.framework) == (True, "pytorch")
    # with the original traceback after it, its figures are read, once
    whole = diagnose(
        wrapper + "\nOriginal Traceback (most recent call last):\n  File \"x.py\", line 3\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
        "14.76 GiB total capacity; 12.10 GiB already allocated; 1.02 GiB free; 12.50 GiB "
        "reserved in total by PyTorch)\n"
    )
    assert whole.oom_count == 1 and whole.figures.requested_bytes == 2 * 2**30
    assert formats.match_line("RuntimeError: Caught RuntimeError in replica 0 on device 0.") is None


# -- the tenth round's review: its cases, each read as the library's behaviour says ------------


@pytest.mark.parametrize("log", [
    # a test runner shows one test's MemoryError, then goes on (cases 04, 05)
    "    def test_big():\n>       bytearray(2**62)\nE       MemoryError\n\ntests/t.py:3: "
    "MemoryError\n=========== 1 failed, 411 passed in 12.1s ===========\n",
    # a caught one, printed, and the job went on (case 03)
    "Traceback (most recent call last):\n  File \"loader.py\", line 9, in read\nMemoryError\n"
    "skipping shard 12\nstep 1201 loss 0.93\n",
])  # fmt: skip
def test_a_bare_memory_error_is_read_only_as_the_log_s_last_line(log: str) -> None:
    assert not diagnose(log).detected
    assert diagnose(log.rstrip("\n").rsplit("\n", 1)[0] + "\nMemoryError\n").detected


@pytest.mark.parametrize(("line", "requested"), [
    # NumPy 2's module path (the review's case 07); NumPy 1.16's form, no size (public27 j-007)
    ("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 33.5 GiB for an array with "
     "shape (300000, 30000) and data type float32", round(33.5 * 2**30)),
    ("numpy.core._exceptions.MemoryError: Unable to allocate array with shape (3, 608, 608) and "
     "data type int64", None),
])  # fmt: skip
def test_numpy_s_other_forms_are_host_memory(line: str, requested: int | None) -> None:
    d = diagnose(line + "\n")
    assert (d.detected, d.kind, d.framework) == (True, "host-oom-killed", "numpy")
    assert d.figures.requested_bytes == requested


def test_numpy_s_size_past_tib_is_not_read() -> None:
    """A PiB request is a size computed wrong (the review's case 06), not a limit to raise."""
    line = ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 64.0 PiB for an array "
            "with shape (9007199254740992,) and data type float64")
    assert not diagnose(line + "\n").detected


@pytest.mark.parametrize("line", [
    "kvstore/sqlite_store.cpp:214: out of memory",  # SQLite's (the review's case 17)
    "  src/io/pinned_pool.cpp:57: out of memory",  # a pinned host pool's check (17b)
    "  src/io/cuda_host_alloc.cpp:57: out of memory",
])  # fmt: skip
def test_a_host_allocator_s_check_line_is_not_a_cuda_error(line: str) -> None:
    assert formats.match_line(line) is None
    assert not diagnose(line + "\n").detected


# -- issue 24, eleventh round: wordings posts retyped or cut, and a "Killed" glued to a bar -----


@pytest.mark.parametrize(("line", "family"), [
    # PyTorch 1.x's message cut to its figures' first (public7 z-023), with or without a space
    ("RuntimeError: CUDA out of memory.(GPU 1; 14.76 GiB total capacity;)", formats.TORCH),
    ("RuntimeError: CUDA out of memory. (GPU 0; 7.92 GiB total capacity", formats.TORCH),
    # CTranslate2's check lower-cased (public8 m-031)
    ("cuda failed with error out of memory", formats.TORCH_RAW),
    # Caffe's check retyped without the period (public27 j-018)
    ("Check failed: error == cudaSuccess (2 vs 0) out of memory", formats.CUDA_ERROR),
    # the kernel's kill line with its pid dropped, the name kept (public22 w-017)
    ("Out of memory: Killed process (VLLM::Worker_TP)", formats.HOST_KILLED),
    # ...and a placeholder for the kernel line's pid (public28 z-017)
    ("  Out of memory: Killed process <PID> (python) total-vm:<...> anon-rss:<...>",
     formats.HOST_KILLED),
    # TH's host allocator (public21 r-022, public28 x-015)
    ("RuntimeError: $ Torch: not enough memory: you tried to allocate 2GB. Buy new RAM! at "
     "/pytorch/aten/src/TH/THGeneral.cpp:201", formats.HOST_ALLOC),
    # Julia's CUDA.jl (public28 z-018)
    ("ERROR: Out of GPU memory trying to allocate 256.000 KiB", formats.CUDA_ERROR),
    # LSF's and YARN's memory limits (evaluation/hostprint v-014, v-018)
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", formats.HOST_KILLED),
    # zsh's and bash's reports of a SIGKILLed job (public29 q-016, q-014)
    ("zsh: killed     python export.py", formats.HOST_KILLED),
    ("70361 Killed                  openvino2tensorflow --model_path $input_path",
     formats.HOST_KILLED),
    # TVM's Vulkan runtime (MLC LLM, public29 r-005)
    ("  Check failed: (__e == VK_SUCCESS) is false: Vulkan Error, code=-2: "
     "VK_ERROR_OUT_OF_DEVICE_MEMORY", formats.CUDA_ERROR),
])  # fmt: skip
def test_the_eleventh_rounds_wordings(line: str, family: str) -> None:
    assert formats.match_line(line) == family
    assert diagnose("step 1\n" + line + "\n").detected


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA out of memory.(see the FAQ)",  # no figures after it
    "Check failed: error == cudaSuccess (20 vs 0) out of memory",  # not code 2
    "Out of memory: Killed process ()",
    "Out of memory: Killed process (a b)",  # a sentence, not a process name
    "loss: 2.1371Killed",  # no bar: no count, no rate
    "3/10 done, worker Killed",  # a count but no rate nor ETA
    "Epoch 3/10 [====] - ETA: 3s - loss: 0.2 Killed by the user",  # more words after it
    "Torch: not enough memory",  # no request
    "Out of GPU memory",
    "TERM_MEMLIMIT",  # LSF's code alone
    "Container killed by YARN",  # not for memory
    # YARN's memory kill: Spark retries the task and may finish (the round's review)
    "ExecutorLostFailure (executor 6 exited caused by one of the running tasks) Reason: "
    "Container killed by YARN for exceeding memory limits. 8.2 GB of 8 GB physical memory used.",
    # a shell's Killed glued to a bar is read on the log's last line only (test_logtext)
    "165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed",
    "zsh: killed",  # no command after it
    "echo 'zsh: killed     python export.py'",  # quoted, not at the line's start
    "3 Killed workers were restarted",  # a sentence, one space
    "Check failed: (__e == VK_SUCCESS) is false: Vulkan Error, code=-4: VK_ERROR_DEVICE_LOST",
])  # fmt: skip
def test_near_misses_of_the_eleventh_rounds_wordings(line: str) -> None:
    assert formats.match_line(line) is None


def test_a_killed_after_a_bar_s_bracket_keeps_its_wording() -> None:
    """After a "]" the older alternative reads it: its span starts at the bracket."""
    line = "Loading checkpoint shards:  38%|###       | 3/8 [00:02<00:03,  1.28it/s]Killed"
    found = formats.find_failure(line)
    assert found is not None and line[found[1] : found[2]] == "]Killed"


@pytest.mark.parametrize(("line", "framework"), [
    # TH is PyTorch's and Lua Torch7's: the line's own markers decide (the round's review)
    ("RuntimeError: $ Torch: not enough memory: you tried to allocate 2GB. Buy new RAM! at "
     "/pytorch/aten/src/TH/THGeneral.cpp:201", "pytorch"),
    ("$ Torch: not enough memory: you tried to allocate 3GB. Buy new RAM! at THGeneral.c:270",
     None),
    ("ERROR: Out of GPU memory trying to allocate 256.000 KiB", "julia"),
])  # fmt: skip
def test_the_eleventh_rounds_stacks(line: str, framework: str | None) -> None:
    assert diagnose(line + "\n").framework == framework


@pytest.mark.parametrize(("device", "allocator", "family"), [
    ("CPU:0", "cpu", formats.HOST_ALLOC),  # TensorFlow's own host allocator (public12 e-026)
    ("CPU:0", "mklcpu", formats.HOST_ALLOC),
    ("GPU:0", "GPU_0_bfc", formats.TENSORFLOW),
    ("CPU:0", "gpu_host_bfc", formats.TENSORFLOW),  # pinned memory for the GPU's copies
])  # fmt: skip
def test_tensorflow_s_oom_on_its_cpu_allocator_is_host_memory(
    device: str, allocator: str, family: str
) -> None:
    line = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
            "tensor with shape[32,52,52,256] and type float on /job:localhost/replica:0/task:0/"
            f"device:{device} by allocator {allocator}")
    assert formats.match_line(line) == family
    d = diagnose(line + "\n")
    assert d.detected
    assert (d.kind == "host-oom-killed") == (family == formats.HOST_ALLOC)


def test_lsf_s_kill_is_the_scheduler_s() -> None:
    line = "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit."
    assert diagnose(line + "\n").summary == (
        "host-oom-killed: the batch scheduler (Slurm, PBS, LSF) killed the job over its "
        "memory limit: host (CPU) memory, not GPU memory"
    )


# -- issue 24, twelfth round: Metal's refusal, RMM's older pool error, Faiss 1.3's assertion -----


@pytest.mark.parametrize(("line", "framework"), [
    # MLX (public31 a-002) and llama.cpp's Metal backend (public31 d-021)
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] "
     "Command buffer execution failed: Insufficient Memory "
     "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "mlx"),
    ("error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
     "metal"),
    # RMM's pool at its limit before RMM named its out_of_memory type (public7 z-016)
    ("MemoryError: std::bad_alloc: RMM failure at:/env/include/rmm/mr/device/"
     "pool_memory_resource.hpp:182: Maximum pool size exceeded", None),
    # Faiss 1.3's assertion, the error not printed (public31 c-029; the census's Faiss 1.3)
    ("Faiss assertion 'cudaMalloc(p, size) == cudaSuccess' failed in void "
     "faiss::gpu::allocMemorySpace(faiss::gpu::MemorySpace, void**, size_t) at "
     "utils/MemorySpace.cpp:20; details: Failed to cudaMalloc 4294967296 bytes", "faiss"),
])  # fmt: skip
def test_the_twelfth_rounds_wordings(line: str, framework: str | None) -> None:
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose("step 1\n" + line + "\n")
    assert d.detected and d.framework == framework


@pytest.mark.parametrize(("line", "family", "framework", "kind"), [
    # fairseq's trainer and Boltz's predictor skipping a batch PyTorch could not fit (public32
    # f-021, f-027; public11 v-022)
    ("| WARNING: ran out of memory, skipping batch", formats.SKIPPED, "pytorch", "unknown"),
    # torch 1.x's exception cut at its first sentence (public32 f-014, g-005)
    ("RuntimeError: CUDA out of memory", formats.TORCH, "pytorch", "unknown"),
    # a CUDA check that prints its source file before the line (public32 f-022)
    ("Error out of memory at /src/fftdock/cuda_grid_lig.cu:174  in generating ligand grids",
     formats.CUDA_ERROR, None, "unknown"),
])  # fmt: skip
def test_the_twelfth_rounds_wordings_from_public32(
    line: str, family: str, framework: str | None, kind: str
) -> None:
    assert formats.match_line(line) == family
    d = diagnose("step 1\n" + line + "\n")
    assert (d.detected, d.framework, d.kind) == (True, framework, kind)


@pytest.mark.parametrize("line", [
    "kIOGPUCommandBufferCallbackErrorOutOfMemory",  # the code alone, no refusal
    "Insufficient Memory (00000004:kIOGPUCommandBufferCallbackErrorTimeout)",
    "[METAL] Command buffer execution failed: Internal Error "
    "(0000000e:Internal Error)",
    # Java's wrapper in a Spark task: Spark retries the task (public31 c-015 stays unread)
    "java.lang.OutOfMemoryError: Could not allocate native memory: std::bad_alloc: RMM failure "
    "at:/x/arena.hpp:382: Maximum pool size exceeded",
    "MemoryError: std::bad_alloc: RMM failure at:/x/cuda_memory_resource.hpp:70: "
    "cudaErrorIllegalAddress an illegal memory access was encountered",
    "Faiss assertion 'err == cudaSuccess' failed in void faiss::gpu::runL2Norm at L2Norm.cu:20",
    "Faiss assertion 'cudaMalloc(p, size) == cudaSuccess' failed in void "
    "faiss::gpu::allocMemorySpace(faiss::gpu::MemorySpace, void**, size_t)",  # no details
    "ran out of memory, skipping batch",  # a poster's fragment, not the trainer's warning
    "WARNING: ran out of memory, skipping batches is disabled",
    "RuntimeError: CUDA out of memory handler failed to start",  # words after it
    "raise RuntimeError: CUDA out of memory was expected",
    "Error out of memory at /src/pinned_host.cpp:174",  # not a CUDA source
])  # fmt: skip
def test_near_misses_of_the_twelfth_rounds_wordings(line: str) -> None:
    assert formats.match_line(line) is None


# -- issue 24, twelfth round, after public33's blind score: two stacks' own failures -----------


NVML = (
    'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/'
    'CUDACachingAllocator.cpp":838, please report a bug to PyTorch.'
)


@pytest.mark.parametrize("text", [
    f"step 1\n{NVML}\n",
    # its file and line broken onto the next line (public33 j-001)
    'Traceback (most recent call last):\nRuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED '
    'at\n"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1165\n',
])  # fmt: skip
def test_pytorch_s_oom_lost_to_its_nvml_assert_is_an_oom(text: str) -> None:
    """The assert sits in the one function that lists the GPU's processes for PyTorch's OOM
    message (NVML refuses on a MIG slice, a Jetson, an unprivileged container)."""
    d = diagnose(text)
    assert (d.detected, d.framework, d.kind) == (True, "pytorch", "unknown")
    assert d.summary.startswith("unknown: PyTorch ran out of GPU memory and its message was lost")


@pytest.mark.parametrize("text", [
    f"step 1 loss 2.0\n{NVML}\nstep 2 loss 1.9\nstep 3 loss 1.8\n",  # the job went on
    # another assert of PyTorch's, not the one listing processes
    "RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at "
    '"../c10/cuda/CUDACachingAllocator.cpp":1123\n',
    "RuntimeError: CUDA_SUCCESS == r INTERNAL ASSERT FAILED at foo.cpp:12\n",
])  # fmt: skip
def test_near_misses_of_the_nvml_assert(text: str) -> None:
    assert not diagnose(text).detected


@pytest.mark.parametrize(("line", "asked"), [
    # llama.cpp's CPU backend (public33 i-003, i-004, i-026)
    ("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504",
     137438953504),
    ("ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 139183763104", 139183763104),
])  # fmt: skip
def test_llama_cpp_s_cpu_buffer_is_host_memory(line: str, asked: int) -> None:
    assert formats.match_line(line) == formats.HOST_ALLOC
    d = diagnose(f"llama_kv_cache_init: kv_size = 1048576\n{line}\n")
    assert (d.detected, d.kind, d.framework) == (True, "host-oom-killed", "llama.cpp")
    assert d.figures.requested_bytes == asked


@pytest.mark.parametrize("line", [
    "ggml_cuda_host_malloc: warning: failed to allocate 231424.00 MiB of pinned memory",
    "failed to allocate CPU buffer",  # no size
    "unable to allocate CUDA_Host buffer",  # pinned host memory llama.cpp falls back from
    # a client quoting the server's error: the host that ran out is the server's (the review;
    # ollama/ollama#16968)
    "Error: 500 Internal Server Error: llama-server startup failed: "
    "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504",
    "ollama._types.ResponseError: llama runner process has terminated: ggml_gallocr_reserve_n: "
    "failed to allocate CPU buffer of size 139183763104 (status code: 500)",
])  # fmt: skip
def test_near_misses_of_llama_cpp_s_cpu_buffer(line: str) -> None:
    assert formats.match_line(line) != formats.HOST_ALLOC


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA driver error: out of memory",
    "[ERROR] CUDA driver error: out of memory",  # a trainer's logger (public33 k-010)
])  # fmt: skip
def test_pytorch_s_driver_check_is_an_oom(line: str) -> None:
    """C10_CUDA_DRIVER_CHECK's words for CUDA_ERROR_OUT_OF_MEMORY from a driver-API call."""
    assert formats.match_line(line) == formats.TORCH
    d = diagnose(f"step 1\n{line}\n")
    assert (d.detected, d.framework, d.kind) == (True, "pytorch", "unknown")
    assert d.recommendation.actions[0].startswith(
        "a driver call of PyTorch's allocator failed (cuMemCreate/cuMemMap, the path of "
        "expandable_segments:True): on WSL2 and Jetson"
    )


@pytest.mark.parametrize("line", [
    # SGLang's warning, in parentheses: it goes on without the feature
    "multimem all-gather disabled (CUDA driver error: out of memory)",
    "CUDA driver error: out of memory, retrying with a smaller pool",
])  # fmt: skip
def test_near_misses_of_pytorch_s_driver_check(line: str) -> None:
    assert formats.match_line(line) is None


# -- the thirteenth round: public34's stacks ------------------------------------------------------


def test_numpy_s_words_printed_by_an_application_are_host_memory_on_the_last_line() -> None:
    # public34 l-018 (noScribe): the application printed the error without its exception's name
    line = ("ERROR: Unable to allocate 3.60 GiB for an array with shape (1, 1200623, 201) and data "
            "type complex128")
    d = diagnose(f"Transkription...\nERROR: Fehler im 3. Schritt - Transkription\n{line}\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert d.figures.requested_bytes == round(3.60 * 2**30)
    # the same words with the job's own lines after them: a caught one, not read
    assert not diagnose(f"{line}\nretrying with a shorter chunk\nchunk 2 done\n").detected
    # more than two words before them: another message that quotes NumPy's
    assert not diagnose(f"worker 3 said: chunk failed: {line}\n").detected


def test_th_s_realloc_is_host_memory() -> None:
    # public34 m-002 (Lua Torch7's neural-style): THRealloc's words beside THAlloc's
    line = ("/home/u/torch/install/share/lua/5.1/nn/THNN.lua:109: $ Torch: not enough memory: you "
            "tried to reallocate 36GB. Buy new RAM! at /home/u/torch/pkg/torch/lib/TH/"
            "THGeneral.c:251")
    assert formats.match_line(line) == formats.HOST_ALLOC
    assert diagnose(line + "\n").kind == "host-oom-killed"


def test_miopen_s_buffer_past_the_free_memory_is_its_own_allocation() -> None:
    # public34 m-023 (Keras on TensorFlow-ROCm); MIOpen's Handle::Create throws it when the
    # buffer is larger than hipMemGetInfo's free memory
    line = ("    MIOpen Error: /data/repo/MIOpen/src/hip/handlehip.cpp:68: Memory not available to "
            "allocate buffer: 528515072")
    assert formats.match_line(line) == formats.CUDA_LIBRARY
    assert formats.library_named(line) == "MIOpen"
    d = diagnose(line + "\n")
    assert (d.detected, d.kind, d.framework) == (True, "unknown", None)  # any ROCm stack's
    assert d.summary.startswith("unknown: MIOpen could not allocate its own memory")
    # the same words from another program's allocator (a packet driver's malloc) are not MIOpen's
    assert formats.match_line("ERROR: memory not available to allocate buffer for Rx") is None


def test_nd4j_s_device_allocation_is_a_gpu_failure() -> None:
    # public34 m-011 (Deeplearning4j's benchmark; deeplearning4j#8253 prints the same)
    line = ("Suppressed: java.lang.RuntimeException: Failed to allocate 1283331072 bytes from "
            "DEVICE [0] memory")
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose(line + "\n")
    assert d.detected and d.figures.requested_bytes == 1283331072
    # its host twin is not read: nd4j#2140's "400 bytes from HOST memory" was a bug
    assert formats.match_line("Failed to allocate 400 bytes from HOST memory") is None


def test_xla_s_constant_on_the_device_is_an_oom() -> None:
    # public35 n-010 (scenic's OWL-ViT in Colab): XLA's GPU executable allocates a compiled
    # program's constants on the device, outside the pool JAX preallocated
    line = "XlaRuntimeError: INTERNAL: Failed to allocate 7077888 bytes for new constant"
    assert formats.match_line(line) == formats.XLA
    d = diagnose(line + "\n")
    assert (d.detected, d.framework) == (True, "jax")
    # XLA's other INTERNAL errors are not
    other = "XlaRuntimeError: INTERNAL: Memcpy to device address 0x7f failed"
    assert formats.match_line(other) is None


def test_stable_diffusion_s_split_attention_refusing_is_capacity_with_its_own_lever() -> None:
    # public35 o-029 (AUTOMATIC1111 + AnimateDiff): split_cross_attention_forward's check
    line = ("RuntimeError: Not enough memory, use lower resolution (max approx. 1472x1472). Need: "
            "3.7GB free, Have:3.1GB free, A: 9.59 GB, R: 9.71 GB, Sys: 5.9/11.9844 GB (49.6%)")
    assert formats.match_line(line) == formats.CUDA_ERROR
    d = diagnose(line + "\n")
    assert (d.detected, d.kind) == (True, "capacity")
    assert (d.figures.requested_bytes, d.figures.free_bytes) == (
        round(3.7 * 2**30), round(3.1 * 2**30)
    )
    assert d.recommendation.actions[0].startswith("the split attention refused to run")
    # InvokeAI's copy prints a space before "GB"
    spaced = ("RuntimeError: Not enough memory, use lower resolution (max approx. 640x640). Need: "
              "0.5 GB free, Have:0.2 GB free")
    assert diagnose(spaced + "\n").figures.free_bytes == round(0.2 * 2**30)
    # the words a front end prints to its user, without the check's figures, are not the check
    told = "Not enough memory, use lower resolution or disable full precision"
    assert formats.match_line(told) is None


# -- the thirteenth round, after public36's blind score: its stacks' own lines ------------------


def test_torch_memory_saver_s_later_wording_is_its_cumemcreate_failing() -> None:
    # public36 s-002 (slime: SGLang's weights released and resumed through torch_memory_saver)
    line = ("[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=csrc/utils.h "
            "func=cu_mem_create line=187")
    assert formats.match_line(line) == formats.CUDA_ERROR
    # another CUresult is not memory
    assert formats.match_line("[torch_memory_saver.cpp] CUresult error: 1 (invalid value)") is None


def test_physx_s_gpu_allocator_failing_is_the_simulator_s_memory() -> None:
    # public36 r-024 (Isaac Sim), r-017 and public19 k-003 (Isaac Gym): Result = 2 is
    # cudaErrorMemoryAllocation
    line = "PxgCudaDeviceMemoryAllocator fail to allocate memory 2147483648 bytes!! Result = 2"
    d = diagnose(line + "\n")
    assert (d.detected, d.framework) == (True, "physx")
    assert d.figures.requested_bytes == 2 * 2**30
    assert d.recommendation.actions[0].startswith("a simulator's GPU memory grows with its scene")
    # another CUDA error from it, or its fixed buffers overflowing, is not memory running out
    assert formats.match_line(
        "PxgCudaDeviceMemoryAllocator fail to allocate memory 2147483648 bytes!! Result = 700"
    ) is None
    assert formats.match_line(
        "PhysX error: Patch buffer overflow detected, please increase its size to at least 224549"
    ) is None


def test_a_padded_killed_line_is_the_shell_s_kill() -> None:
    # public36 s-016: a terminal padded the line after a progress bar
    log = "  0%|          | 0/16 [00:00<?, ?it/s]\nKilled" + " " * 49 + "\n"
    d = diagnose(log)
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert not diagnose("Killed" + " " * 201 + "x\n").detected  # not a line of its own


# -- the thirteenth round's review: its cases -----------------------------------------------------


def test_split_attention_s_zero_figures_are_not_read_as_a_zero_request() -> None:
    # it raises only when the need is past the free memory; "0.0" is one decimal of GiB
    line = ("RuntimeError: Not enough memory, use lower resolution (max approx. 64x64). Need: "
            "0.0GB free, Have:0.0GB free")
    d = diagnose(line + "\n")
    assert d.detected  # not "asked for 0 bytes, a bug"
    assert d.figures.requested_bytes is None and d.figures.free_bytes is None
    have_zero = line.replace("Need: 0.0GB", "Need: 0.1GB")
    assert diagnose(have_zero + "\n").figures.free_bytes is None  # not "0 bytes free"


@pytest.mark.parametrize("line", [
    "[Errno 12] Cannot allocate memory: Failed to allocate hugepage-backed RX ring, using regular "
    "pages",
    "Failed to allocate large-page buffer ([WinError 1455] The paging file is too small for this "
    "operation to complete), using normal pages",
])  # fmt: skip
def test_a_line_with_failed_to_allocate_mid_log_is_no_keyword_line(line: str) -> None:
    # words read only at a log's end stay there: "Failed to allocate" alone is no keyword
    assert not diagnose(f"step 1\n{line}\nstep 2 loss 0.9\nsaved checkpoint\n").detected


@pytest.mark.parametrize("line", [
    "INFO: Unable to allocate 3.60 GiB for an array with shape (483183820,) and data type "
    "float64; falling back to memory-mapped arrays",
    "Warning: Unable to allocate 3.60 GiB for an array with shape (483183820,) and data type "
    "float64",
])  # fmt: skip
def test_numpy_s_words_after_a_lower_level_or_with_more_after_them_are_not_read(line: str) -> None:
    assert not diagnose(f"loading\n{line}\n").detected


def test_xla_s_constant_names_the_preallocation_lever() -> None:
    d = diagnose("XlaRuntimeError: INTERNAL: Failed to allocate 209715200 bytes for new constant\n")
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in d.recommendation.actions[0]


def test_nd4j_s_failure_gets_no_pytorch_levers() -> None:
    d = diagnose("java.lang.RuntimeException: Failed to allocate 1283331072 bytes from DEVICE [0] "
                 "memory\n")
    assert d.framework == "nd4j"
    assert not any("torch" in a for a in d.recommendation.actions)


# -- the fourteenth round, from public37's calibration half: other stacks' own lines ------------


def test_the_kernel_s_kill_line_reprinted_without_its_space_is_still_the_oom_killer() -> None:
    # public37 t-018 (Scaffold-GS): a platform's "Kill reason", full-width punctuation
    line = ("Out of memory:Killed process 217423\uff08python\uff09total-vm:112518872kB\uff0c  "
            "anon-rs:30204444kB\uff0cfile-rss:kB shmem-rss:3072kB")
    d = diagnose(line + "\nSetting up [LPIPS] perceptual loss\nfound tf board\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert formats.match_line("Out of memory:Killed process") is None  # no pid, no name


def test_the_cuda_samples_cutil_check_is_a_cuda_call_s_out_of_memory() -> None:
    # public37 t-026 (InfiniTAM's ORUtils copied the CUDA SDK's cudaSafeCall)
    line = ("saving scene to model ... /x/ORUtils/MemoryBlock.h(257) : cudaSafeCall() Runtime API "
            "error : out of memory.")
    assert formats.match_line(line) == formats.CUDA_ERROR
    assert formats.match_line("m.cu(12) : cudaSafeCall() Runtime API error 2: out of memory.") == (
        formats.CUDA_ERROR)
    assert formats.match_line(
        "m.cu(12) : cudaSafeCall() Runtime API error : invalid device function.") is None


def test_pytorch_s_oom_re_raised_with_the_job_s_own_words_after_it() -> None:
    # public37 u-022 (GPL's query generation re-raises PyTorch's OOM in its own words)
    line = ("RuntimeError: CUDA out of memory during query generation (queries_per_passage: 1, "
            "batch_size_generation: 1). Please try smaller `queries_per_passage` and/or "
            "`batch_size_generation`.")
    d = diagnose(line + "\n")
    assert (d.detected, d.framework, d.kind) == (True, "pytorch", "unknown")
    # vLLM's warm-up keeps its own family and reading
    warmup = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
              "requests.")
    assert formats.match_line(warmup) == formats.ENGINE_WARMUP


def test_gfortran_s_failed_allocate_is_host_memory() -> None:
    # public37 v-007 (GAP's gap_fit): libgfortran's os_error with ENOMEM, then its backtrace
    log = ("Number of descriptors:                        640000\n\n"
           "Operating system error: Cannot allocate memory\n"
           "Allocation would exceed memory limit\n\nError termination. Backtrace:\n"
           "#0  0x2b467a29b8da\n#1  0x2b467a29c395\n")
    d = diagnose(log)
    assert (d.detected, d.kind, d.framework) == (True, "host-oom-killed", "gfortran")
    assert not any("DataLoader" in a for a in d.recommendation.actions)  # no PyTorch lever


def test_ipython_s_memoryerror_head_is_an_oom_whose_memory_the_log_does_not_tell() -> None:
    # public37 u-029 (BERTopic in Jupyter, cut before the message); RMM's, CuPy's and pyopencl's
    # pools raise MemoryError too (public11 v-025, public4 t-017, public14 r-014): not read as
    # host memory
    log = ("---------------------------------------------------------------------------\n"
           "MemoryError                               Traceback (most recent call last)\n"
           "/tmp/ipykernel_159881/2313223528.py in <module>\n"
           "----> 3 topic_model = topic_model.fit(docs, embeddings)\n")
    d = diagnose(log)
    assert (d.detected, d.kind) == (True, "unknown")
    assert d.summary.startswith("unknown: a MemoryError ended the job")
    assert d.recommendation.actions[0].startswith("find the MemoryError's message")
    # the name in a sentence, or a longer one ending in it, is not IPython's head
    assert formats.match_line("MemoryError   Traceback x") is None
    assert formats.match_line("CudaMemoryError                   Traceback (most recent call "
                              "last)") is None
