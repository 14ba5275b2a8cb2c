"""The figures each OOM wording gives, read back whole (issue 18, mutation survivors of
``diagnosis/parse.py``): figures no test read (cudaMallocAsync's device limit and device index,
private pools, the BFC ``Limit``/``InUse`` beside a JAX failure, CuPy's "allocated so far",
vLLM's available KV cache memory), the job's own process picked from ``Process <pid>`` lines in a
container (the closest one at or above what PyTorch reserved; none while nothing is reserved),
where a failure's message starts (after the last carriage return before its wording, at most 512
characters before it) and where it ends (a blank line, a traceback, or the end of PyTorch's
wording), TensorFlow tensor shapes up to exactly 2^64 bytes, and which messages are ROCm's.

Inputs are the wording PyTorch, JAX, TensorFlow, CuPy, NCCL and vLLM print (the H200 corpus and the
family fixtures under tests/fixtures/oom), every figure a literal byte count.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.logtext import scan_bytes
from gpu_auditor.diagnosis.model import Figures, OomEvent, OtherProcess
from gpu_auditor.diagnosis.parse import (
    _from_failure,
    _own_process,
    _size_re,
    _tensor_bytes,
    hami_refusal,
    parse_hit,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "oom"

TIP = (
    " If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
    "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)


def event(log: str) -> OomEvent:
    hit = scan_bytes(log.encode()).last
    assert hit is not None
    return parse_hit(hit)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def torch2(procs: str, allocated: str, unallocated: str) -> str:
    """torch 2.2+'s one-line message on an H200 with no "this process" segment (a container)."""
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        f"capacity of 139.80 GiB of which 1.00 GiB is free. {procs}Of the allocated memory "
        f"{allocated} is allocated by PyTorch, and {unallocated} is reserved by PyTorch but "
        f"unallocated.{TIP}\n"
    )


# -- cudaMallocAsync ----------------------------------------------------------------------------


def test_the_h200_cuda_malloc_async_log_gives_every_figure_and_its_backend() -> None:
    got = event(fixture("corpus/async_backend_oom.log"))
    assert got.figures == Figures(
        requested_bytes=214748364800,  # 200.00 GiB
        total_bytes=150109106995,  # Device limit: 139.80 GiB
        free_bytes=32631685,  # 31.12 MiB
        allocated_bytes=0,
        allowed_bytes=None,  # 17179869184.00 GiB: no fraction set
        gpu_index=0,
    )
    assert got.backend == "cudaMallocAsync"
    assert got.message.startswith(
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. "
        "(out of memory) Currently allocated     : 0 bytes Requested               : 200.00 GiB"
    )
    # the diagnosis names the backend the message was printed by, with no alloc conf given
    assert diagnose(fixture("corpus/async_backend_oom.log")).to_json_dict()["backend"] == (
        "cudaMallocAsync"
    )


def test_cuda_malloc_async_reads_the_device_index_from_the_failure_line() -> None:
    log = (
        "torch.OutOfMemoryError: Allocation on device 3 would exceed allowed memory. "
        "(out of memory)\n"
        "Currently allocated     : 40.00 GiB\n"
        "Requested               : 8.00 GiB\n"
        "Device limit            : 79.15 GiB\n"
        "Free (according to CUDA): 38.00 GiB\n"
        "PyTorch limit (set by user-supplied memory fraction)\n"
        "                        : 41.94 GiB\n"
    )
    got = event(log).figures
    assert (got.gpu_index, got.total_bytes, got.allowed_bytes) == (3, 84986665370, 45032732099)


# -- backend and ROCm ---------------------------------------------------------------------------


def test_the_native_allocator_is_named_and_other_stacks_name_none() -> None:
    assert event(fixture("corpus/capacity_batch_too_big_fullgpu.log")).backend == "native"
    assert event(fixture("families/torch_1_8_capacity.log")).backend == "native"
    for name in (
        "corpus/jax_oom.log",
        "corpus/context_oom_gpu_full.log",  # CUDA error: out of memory: no allocator wording
        "families/cupy_oom.log",
        "families/vllm_kv_cache.log",
        "families/host_alloc.log",
    ):
        assert event(fixture(name)).backend is None, name


@pytest.mark.parametrize(
    ("log", "rocm"),
    [
        ("torch.AcceleratorError: HIP error: out of memory\n", True),
        ("RuntimeError: hipMalloc(&ptr, 2147483648) failed: hipErrorOutOfMemory\n", True),
        ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.00 GiB.\n", True),
        ("torch.AcceleratorError: CUDA error: out of memory\n", False),
        ("RuntimeError: cudaMalloc failed: cudaErrorMemoryAllocation: out of memory\n", False),
    ],
)
def test_each_rocm_wording_alone_marks_the_failure_rocm(log: str, rocm: bool) -> None:
    assert event(log).rocm is rocm


# -- PyTorch's native figures -------------------------------------------------------------------


def test_private_pool_memory_is_read() -> None:
    got = event(fixture("families/torch_2_private_pools_capacity.log")).figures
    assert got.private_pool_bytes == 12884901888  # 12.00 GiB in private pools (CUDA Graphs)
    assert (got.allocated_bytes, got.reserved_unallocated_bytes) == (82463372083, 327155712)


@pytest.mark.parametrize(
    ("allocated", "reserved", "unallocated"),
    [
        ("9.71 GiB", "9.71 GiB", 0),  # all of the reservation allocated: nothing cached
        ("9.46 GiB", "9.53 GiB", 75161928),  # 10232759583 - 10157597655
    ],
)
def test_torch_1_x_unallocated_is_reserved_in_total_less_allocated(
    allocated: str, reserved: str, unallocated: int
) -> None:
    log = (
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total "
        f"capacity; {allocated} already allocated; 5.56 MiB free; {reserved} reserved in total by "
        "PyTorch)\n"
    )
    assert event(log).figures.reserved_unallocated_bytes == unallocated


# -- the job's own process among "Process <pid>" lines (a container) ----------------------------


def test_the_own_process_is_the_closest_at_or_above_what_pytorch_reserved() -> None:
    # reserved 8.00 + 1.00 = 9.00 GiB; 8.50 GiB is below it, 9.50 is the closest above
    procs = (
        "Process 4101 has 8.50 GiB memory in use. Process 4102 has 9.50 GiB memory in use. "
        "Process 4103 has 30.00 GiB memory in use. "
    )
    got = event(torch2(procs, "8.00 GiB", "1.00 GiB")).figures
    assert got.process_bytes == 10200547328
    assert got.other_processes == (
        OtherProcess(4101, 9126805504),
        OtherProcess(4103, 32212254720),
    )


def test_a_process_holding_exactly_what_pytorch_reserved_is_the_own_one() -> None:
    procs = "Process 5001 has 9.00 GiB memory in use. Process 5002 has 20.00 GiB memory in use. "
    got = event(torch2(procs, "9.00 GiB", "0 bytes")).figures
    assert got.process_bytes == 9663676416
    assert got.other_processes == (OtherProcess(5002, 21474836480),)


@pytest.mark.parametrize(
    ("allocated", "unallocated", "own"),
    [
        # nothing reserved yet, one process listed: the job's own (it holds a CUDA context, so
        # NVML lists it; in a container PyTorch cannot call it "this process"): public5 v-033
        ("0 bytes", "0 bytes", 135151883387),
        ("1 bytes", "0 bytes", 135151883387),  # the smallest reservation there is
        ("0 bytes", "1 bytes", 135151883387),
    ],
)
def test_a_lone_listed_process_at_or_above_the_reservation_is_the_own_process(
    allocated: str, unallocated: str, own: int | None
) -> None:
    got = event(torch2("Process 872 has 125.87 GiB memory in use. ", allocated, unallocated))
    assert got.figures.process_bytes == own
    others = () if own is not None else (OtherProcess(872, 135151883387),)
    assert got.figures.other_processes == others


def test_no_process_at_or_above_the_reservation_leaves_every_process_another() -> None:
    procs = "Process 872 has 4.00 GiB memory in use. Process 873 has 8.50 GiB memory in use. "
    got = event(torch2(procs, "8.00 GiB", "1.00 GiB")).figures
    assert got.process_bytes is None
    assert got.other_processes == (OtherProcess(872, 4294967296), OtherProcess(873, 9126805504))


def test_a_message_cut_before_its_allocated_figure_takes_a_lone_process_for_the_job() -> None:
    # a message cut by a log shipper's line limit, in a container: no "this process" segment and
    # no "Of the allocated memory". The failing process holds a context, so NVML lists it: a lone
    # process is the job (public7 y-008: 10.95 GiB of a 14.75 GiB T4, the job's own)
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a "
        "total capacity of 139.80 GiB of which 13.42 GiB is free. Process 872 has 125.87 GiB "
        "memory in use.\n"
        "\n"
        "job exited with status 1\n"
    )
    got = event(log).figures
    assert got == Figures(
        requested_bytes=42949672960,
        total_bytes=150109106995,
        free_bytes=14409615278,
        process_bytes=135151883387,
        gpu_index=0,
    )
    # two processes and no reservation to tell them by: both stay others
    two = event(log.replace("memory in use.", "memory in use. Process 873 has 518.00 MiB memory "
                            "in use.", 1)).figures
    assert two.process_bytes is None and len(two.other_processes) == 2


# -- where the message starts -------------------------------------------------------------------


def docker_json(text: str) -> str:
    """One record of Docker's json-file log driver: a carriage return is escaped (``\\r``), so
    the line reaches the parser whole, carriage returns and all."""
    record = {"log": text + "\n", "stream": "stderr", "time": "2026-11-29T19:00:01.1Z"}
    return json.dumps(record) + "\n"


PROGRESS = (
    "Epoch 3:  41%|####1     | 410/1000 [01:02<01:30]\r"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
    "has 77.80 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and "
    "6.90 GiB is reserved by PyTorch but unallocated."
    "\rEpoch 3:  41%|####1     | 411/1000 [01:02<01:29]"
)


@pytest.mark.parametrize("log", [PROGRESS + "\n", docker_json(PROGRESS)], ids=["raw", "docker"])
def test_progress_bars_drawn_around_the_failure_leave_it_whole(log: str) -> None:
    got = event(log)
    assert got.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert (got.figures.requested_bytes, got.figures.free_bytes) == (2147483648, 1288490189)
    assert got.figures.reserved_unallocated_bytes == 7408818586


def test_a_carriage_return_inside_the_wording_does_not_cut_it() -> None:
    # XLA's wording is RESOURCE_EXHAUSTED, up to 80 characters, then "Out of memory"
    got = event(
        docker_json(
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: \rOut of memory while trying to "
            "allocate 17179869184 bytes."
        )
    )
    assert got.family == "xla"
    assert got.message.startswith("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED:")
    assert got.figures.requested_bytes == 17179869184


def test_at_most_512_characters_before_the_wording_are_kept() -> None:
    lead = "".join(f"step={i:04d},loss=2.3456;" for i in range(30))  # 600 characters, no CR
    got = event(lead + torch2("", "8.00 GiB", "1.00 GiB"))
    assert got.message.index("OutOfMemoryError: CUDA out of memory") == 512
    assert got.message.startswith(lead[-506:] + "torch.OutOfMemoryError")
    short = "step=0001,loss=2.3456;" + torch2("", "8.00 GiB", "1.00 GiB")
    assert event(short).message.startswith("step=0001,loss=2.3456;torch.OutOfMemoryError")


# -- where the message ends ---------------------------------------------------------------------


def test_a_complete_message_takes_no_line_after_it() -> None:
    log = fixture("corpus/capacity_batch_too_big_fullgpu.log") + "job exited with status 1\n"
    got = event(log)
    assert got.message.endswith("#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
    jax = fixture("corpus/jax_oom.log") + "job exited with status 1\n"
    assert event(jax).message == (
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "200.00GiB with allocator GPU_0_bfc on device 0. [tf-allocator-allocation-error=''] "
        "[executable_name='jit_broadcast_in_dim']"
    )


WRAPPED = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total\n"
    "capacity of 79.15 GiB of which 1.20 GiB is free.\n"
)


def test_a_wrapped_message_ends_at_a_blank_line() -> None:
    got = event(WRAPPED + "\nsaving checkpoint to /ckpt/step-410\n")
    assert got.message == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 1.20 GiB is free."
    )
    assert got.figures.total_bytes == 84986665370


@pytest.mark.parametrize(
    "next_line",
    [
        "Traceback (most recent call last):",
        "During handling of the above exception, another exception occurred:",
    ],
)
def test_a_message_ends_where_the_next_traceback_starts(next_line: str) -> None:
    # log shippers that drop empty lines put the chained traceback right after the message
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 1.20 GiB is free.\n"
        f"{next_line}\n"
        '  File "/app/train.py", line 131, in <module>\n'
        "RuntimeError: step failed with 6.90 GiB is reserved by PyTorch but unallocated.\n"
    )
    got = event(log)
    assert got.message == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 1.20 GiB is free."
    )
    assert got.figures.reserved_unallocated_bytes is None


# -- TensorFlow tensor shapes -------------------------------------------------------------------


def tf_oom(shape: str, dtype: str) -> str:
    return (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        f"tensor with shape[{shape}] and type {dtype} on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc [Op:MatMul]\n"
    )


@pytest.mark.parametrize(
    ("shape", "dtype", "requested"),
    [
        ("64,512,8192", "float", 1073741824),
        ("64, 512, 8192", "float", 1073741824),  # spaces after the commas
        ("64,  512", "bfloat16", 65536),
        ("4294967296,4294967296", "uint8", 18446744073709551616),  # 2^64 bytes: still a size
        ("2147483648,2147483648", "float", 18446744073709551616),
        ("4294967296,4294967297", "uint8", None),  # one row above 2^64 bytes
        ("65536,65536", "string", None),  # no fixed item size
        ("65536,65536", "variant", None),
    ],
)
def test_tensor_shape_and_type_give_the_request(
    shape: str, dtype: str, requested: int | None
) -> None:
    assert event(tf_oom(shape, dtype)).figures.requested_bytes == requested


def test_tensor_bytes_up_to_exactly_two_to_the_64() -> None:
    assert _tensor_bytes("4294967296,4294967296", "uint8") == 18446744073709551616
    assert _tensor_bytes("4294967296,4294967296", "int16") is None
    assert _tensor_bytes("65536,65536", "qint8") is None
    assert _tensor_bytes("1024, 1024", "float16") == 2097152


def test_a_scalar_tensor_request_is_its_type_size() -> None:
    assert event(tf_oom("", "float")).figures.requested_bytes == 4


# -- JAX/XLA, CuPy and vLLM figures -------------------------------------------------------------


def test_jax_reads_the_bfc_limit_and_in_use_printed_before_the_failure() -> None:
    log = (
        "W1129 18:41:56.765939     981 bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out of "
        "memory trying to allocate 16.00GiB (rounded to 17179869184)requested by op \n"
        "I1129 18:41:56.766001     981 bfc_allocator.cc:1044] Stats: \n"
        "Limit:                     63771508736\n"
        "InUse:                     51539607552\n"
        "MaxInUse:                  51539607552\n"
        "NumAllocs:                          12\n"
        "MaxAllocSize:              17179869184\n"
        "Traceback (most recent call last):\n"
        '  File "/app/train_jax.py", line 6, in <module>\n'
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        "17179869184 bytes.\n"
    )
    assert event(log).figures == Figures(
        requested_bytes=17179869184, allowed_bytes=63771508736, allocated_bytes=51539607552
    )


@pytest.mark.parametrize(
    ("so_far", "allocated"),
    [("0", 0), ("1,073,741,824", 1073741824)],
)
def test_cupy_reads_what_was_allocated_so_far(so_far: str, allocated: int) -> None:
    log = (
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 214,748,364,800 bytes "
        f"(allocated so far: {so_far} bytes).\n"
    )
    assert event(log).figures == Figures(requested_bytes=214748364800, allocated_bytes=allocated)


def test_vllm_reads_the_kv_cache_needed_and_available() -> None:
    assert event(fixture("families/vllm_kv_cache.log")).figures == Figures(
        requested_bytes=4294967296, free_bytes=2684354560
    )


# -- requests printed on a line just before the failure -----------------------------------------

NCCL_BEFORE = [
    "node-3:1234:1301 [0] include/alloc.h:48 NCCL WARN Failed to CUDA calloc 6291456 bytes",
    "node-3:1234:1301 [0] NCCL INFO init.cc:1204 -> 1",
    "node-3:1234:1301 [0] NCCL INFO group.cc:64 -> 1 [Async thread]",
    "node-3:1234:1301 [0] NCCL INFO group.cc:418 -> 1",
]


@pytest.mark.parametrize(
    ("before", "requested"),
    [
        (NCCL_BEFORE, None),  # the calloc four lines up is another step's, not read
        (NCCL_BEFORE[1:2] + NCCL_BEFORE[:1] + NCCL_BEFORE[2:], 6291456),  # three lines up
        (NCCL_BEFORE[1:] + NCCL_BEFORE[:1], 6291456),  # the line right before
    ],
)
def test_only_the_three_lines_before_a_driver_failure_give_its_request(
    before: list[str], requested: int | None
) -> None:
    failure = "node-3:1234:1301 [0] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'"
    log = "\n".join([*before, failure, ""])
    assert event(log).figures.requested_bytes == requested


# -- the size patterns --------------------------------------------------------------------------


def test_a_size_template_captures_the_size_where_it_says_s() -> None:
    pattern = _size_re(r"Tried to allocate {S}")
    found = pattern.search("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has")
    assert found is not None and found.group(1) == "2.00 GiB"
    either = _size_re(r"total capaci?ty of {S}|{S} total capacity")
    one = either.search("GPU 0; 10.76 GiB total capacity; 9.46 GiB already allocated")
    assert one is not None and next(g for g in one.groups() if g is not None) == "10.76 GiB"


# -- issue 24: the figures of the new families, and PyTorch's message lower-cased ---------------


@pytest.mark.parametrize(
    ("line", "requested", "free"),
    [
        # PaddlePaddle's KB/MB/GB are powers of 1024 (HumanReadableSize): 1.53125 GiB, not
        # 1.53125e9 bytes; the free figure wrapped onto the next line (public b-033)
        (
            "Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available "
            "memory is only \n                   416.625000MB.\n\n   Please check whether there "
            "is any other process using GPU 0.\n",
            1644167168,  # 1.53125 x 2^30
            436862976,  # 416.625 x 2^20
        ),
        (
            "Out of memory error on GPU 0. Cannot allocate 6.933594GB memory on GPU 0, available "
            "memory is only 726.750000MB.\n",
            7444889868,  # round(6.933594 x 2^30)
            762052608,  # 726.75 x 2^20
        ),
        (
            "Out of memory error on GPU 0. Cannot allocate 512.000000KB memory on GPU 0, available "
            "memory is only 2.000000KB.\n",
            524288,
            2048,
        ),
    ],
)
def test_paddles_sizes_are_binary_and_its_free_figure_may_wrap(
    line: str, requested: int, free: int
) -> None:
    d = diagnose(line)
    assert (d.framework, d.kind) == ("paddle", "capacity")
    assert (d.figures.requested_bytes, d.figures.free_bytes) == (requested, free)


def test_paddles_plain_bytes_are_bytes() -> None:
    # the smallest unit of HumanReadableSize is "B": no binary prefix to map, read as it is
    d = diagnose(
        "Out of memory error on GPU 0. Cannot allocate 256.000000B memory on GPU 0, available "
        "memory is only 0.000000B.\n"
    )
    assert (d.figures.requested_bytes, d.figures.free_bytes) == (256, 0)


def test_a_paddle_free_figure_two_lines_down_is_not_read() -> None:
    d = diagnose(
        "Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available "
        "memory is only \n\n416.625000MB.\n"
    )
    assert (d.figures.requested_bytes, d.figures.free_bytes) == (None, None)


TRT_FAILURE = (
    "[E] 1: [defaultAllocator.cpp::allocate::21] Error Code 1: Cuda Runtime (out of memory)\n"
)
TRT_REQUEST = (
    "[W] Requested amount of GPU memory (20401098752 bytes) could not be allocated. There may not "
    "be enough free memory for allocation to succeed.\n"
)


@pytest.mark.parametrize(
    ("log", "requested"),
    [
        (TRT_FAILURE + TRT_REQUEST, 20401098752),  # the line after (public b-017)
        (TRT_FAILURE + "a\nb\n" + TRT_REQUEST, 20401098752),  # 3 lines after
        (TRT_FAILURE + "a\nb\nc\n" + TRT_REQUEST, None),  # 4: not read
        (TRT_REQUEST + "a\nb\n" + TRT_FAILURE, 20401098752),  # 3 lines before
        (TRT_REQUEST + "a\nb\nc\n" + TRT_FAILURE, None),  # 4: not read
    ],
)
def test_tensorrts_request_is_read_within_3_lines_of_its_failure(
    log: str, requested: int | None
) -> None:
    d = diagnose(log)
    assert d.framework == "tensorrt"
    assert d.figures.requested_bytes == requested
    assert d.kind == ("capacity" if requested else "unknown")
    if requested:
        assert d.summary == "capacity: tensorrt could not get the 19.00 GiB it requested"


def test_tensorrts_request_line_cut_after_its_figure_still_gives_the_request() -> None:
    # public14 r-006: Triton's log, the post cut at "could not be alloca"; a 20 GB MIG slice
    d = diagnose(
        'E0915 15:27:00.910199 134 logging.cc:40] "[defaultAllocator.cpp::allocateAsync::44] '
        'Error Code 1: Cuda Runtime (out of memory)"\n'
        'W0915 15:27:00.910234 134 logging.cc:43] "Requested amount of GPU memory (22649242112 '
        "bytes) could not be alloca\n"
    )
    assert (d.kind, d.figures.requested_bytes) == ("capacity", 22649242112)


_UNSEEN = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which {free} is free. Including non-PyTorch memory, this process "
    "has {process} memory in use. Of the allocated memory 36.46 GiB is allocated by PyTorch, and "
    "20.98 MiB is reserved by PyTorch but unallocated.\n"
)


@pytest.mark.parametrize(("free", "process", "kind", "process_bytes"), [
    # public14 m-018 (SGLang in a container; the thread: 40 GB of each card was free to it)
    ("2.27 GiB", "0 bytes", "gpu-shared", None),
    # a figure NVML saw is kept (and read: memory in the process outside PyTorch)
    ("2.27 GiB", "76.90 GiB", "non-pytorch-memory", 82570746266),
    # what NVML could not see, the rest of the card is free: the figures show room
    ("42.27 GiB", "0 bytes", "unknown", None),
    # PyTorch named "this process", so NVML's pids are the job's: one listed beside it is
    # another process (the review), not the job under another pid
    ("2.27 GiB", "0 bytes memory in use. Process 4242 has 39.00 GiB", "gpu-shared", None),
])  # fmt: skip
def test_a_process_figure_of_0_beside_what_pytorch_holds_is_no_figure(
    free: str, process: str, kind: str, process_bytes: int | None
) -> None:
    d = diagnose(_UNSEEN.format(free=free, process=process))
    assert (d.kind, d.figures.process_bytes) == (kind, process_bytes)


def test_xgboost_s_two_lines_under_its_failure_give_request_and_free() -> None:
    # the census's XGBoost 1.7 line (its driver wording) and public15 v-010's (its own)
    for head in (
        "device_helpers.cuh:431: Memory allocation error on worker 0: std::bad_alloc: "
        "cudaErrorMemoryAllocation: out of memory",
        "device_helpers.cuh:428: Memory allocation error on worker 3: Caching allocator",
    ):
        d = diagnose(f"{head}\n- Free memory: 8126464\n- Requested memory: 33554432\n")
        f = d.figures
        assert (d.framework, f.requested_bytes, f.free_bytes) == ("xgboost", 33554432, 8126464)
        assert d.summary == "capacity: the 32.00 MiB request exceeds the 7.75 MiB free"
    # lines further down, or another stack's, are not XGBoost's
    d = diagnose(
        "device_helpers.cuh:428: Memory allocation error on worker 3: Caching allocator\n"
        "a\nb\n- Free memory: 8126464\n- Requested memory: 33554432\n"
    )
    assert (d.figures.requested_bytes, d.figures.free_bytes) == (None, None)


def test_pytorchs_message_lower_cased_gives_every_figure() -> None:
    # as pasted into an issue title: every field read without case
    d = diagnose(
        "torch.outofmemoryerror: cuda out of memory. tried to allocate 20.00 mib. gpu 0 has a "
        "total capacity of 14.75 gib of which 3.06 mib is free. including non-pytorch memory, "
        "this process has 14.74 gib memory in use. of the allocated memory 14.55 gib is "
        "allocated by pytorch, and 71.28 mib is reserved by pytorch but unallocated.\n"
    )
    f = d.figures
    assert (f.requested_bytes, f.total_bytes, f.free_bytes) == (20971520, 15837691904, 3208643)
    assert (f.process_bytes, f.allocated_bytes, f.reserved_unallocated_bytes) == (
        15826954486, 15622943539, 74742497,
    )  # fmt: skip
    assert (d.framework, d.kind, f.gpu_index) == ("pytorch", "capacity", 0)


def test_pytorch_1_x_message_lower_cased_gives_every_figure() -> None:
    d = diagnose(
        "runtimeerror: cuda out of memory. tried to allocate 20.00 mib (gpu 1; 14.76 gib total "
        "capacity; 13.20 gib already allocated; 3.75 mib free; 13.61 gib reserved in total by "
        "pytorch)\n"
    )
    f = d.figures
    assert (f.requested_bytes, f.total_bytes, f.free_bytes, f.gpu_index) == (
        20971520, 15848429322, 3932160, 1,
    )  # fmt: skip
    assert (f.allocated_bytes, f.reserved_unallocated_bytes) == (14173392077, 440234148)


# -- the figures of issue 24's second-round wordings (public3, public4) ---------------------------

MIB = 1024 * 1024


def test_paddles_legacy_allocator_gives_request_free_total_and_what_paddle_holds() -> None:
    # public4 t-031: its sizes run into the next word; "GPU memory used" is this process's Paddle
    f = event(
        "F0725 17:13:27.698644 175955 legacy_allocator.cc:201] Cannot allocate 195.800781MB in "
        "GPU 0, available 5.937500MBtotal 7981694976GpuMinChunkSize 256.000000BGpuMaxChunkSize "
        "21.694021MBGPU memory used: 324.750000kB\n"
    ).figures
    assert f.requested_bytes == round(195.800781 * MIB)
    assert (f.free_bytes, f.total_bytes) == (int(5.9375 * MIB), 7981694976)
    assert (f.allocated_bytes, f.reserved_unallocated_bytes) == (int(324.75 * 1024), 0)
    d = diagnose("step 1\nCannot allocate 195.800781MB in GPU 0, available 5.937500MBtotal "
                 "7981694976GpuMinChunkSize 256.000000BGPU memory used: 324.750000kB\n")
    assert d.kind == "gpu-shared" and "this process's Paddle" in d.summary


def test_paddle_2_says_what_its_allocator_holds_before_the_free_figure() -> None:
    # public4 t-006
    f = event(
        "Out of memory error on GPU 0. Cannot allocate 80.000000MB memory on GPU 0, "
        "10.647278GB memory has been allocated and available memory is only 108.750000MB.\n"
    ).figures
    assert (f.requested_bytes, f.free_bytes) == (80 * MIB, int(108.75 * MIB))
    assert f.allocated_bytes == round(10.647278 * 1024 * MIB)


def test_torchs_allocator_warning_gives_request_free_and_total() -> None:
    # public3 r-025: a 35 GiB request on a 24 GiB card
    d = diagnose(
        "[W831 09:18:45.000000000 CUDACachingAllocator.cpp:4079] memory allocation failed with "
        "OOM on device 0 while trying to allocate 38050725888 bytes (free: 11672748032, total: "
        "25756696576).\n"
    )
    f = d.figures
    assert (f.requested_bytes, f.free_bytes, f.total_bytes) == (
        38050725888, 11672748032, 25756696576)
    assert (d.framework, d.kind) == ("pytorch", "capacity")


def test_faiss_s_resources_give_the_request_and_name_faiss() -> None:
    # Faiss 1.7+ raised through SWIG as a RuntimeError (its benchs/bench_gpu_1bn.py quotes it)
    d = diagnose(
        "RuntimeError: Error in virtual void* faiss::gpu::StandardGpuResourcesImpl::allocMemory("
        "const faiss::gpu::AllocRequest&) at faiss/gpu/StandardGpuResources.cpp:452: Error: "
        "'err == cudaSuccess' failed: StandardGpuResources: alloc fail type "
        "TemporaryMemoryOverflow dev 0 space Device stream 0x7effcc5f47a0 size 4513349632 bytes "
        "(cudaMalloc error out of memory [2])\n"
    )
    assert (d.detected, d.framework, d.figures.requested_bytes) == (True, "faiss", 4513349632)


def test_the_bfc_failing_path_gives_the_rounded_request() -> None:
    f = event(
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.17GiB (rounded to "
        "1251090432). \n"
    ).figures
    assert f.requested_bytes == 1251090432


def test_onnxruntimes_arena_limit_is_the_cap_with_the_request() -> None:
    d = diagnose(
        "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool) Available memory of 0 is "
        "smaller than requested bytes of 135383040\n"
    )
    assert (d.framework, d.kind, d.figures.requested_bytes) == (
        "onnxruntime", "memory-fraction-cap", 135383040)
    assert "gpu_mem_limit" in d.summary and "gpu_mem_limit" in d.recommendation.actions[0]


def test_of_two_listed_processes_with_nothing_reserved_neither_is_taken_for_the_own() -> None:
    procs = "Process 871 has 518.00 MiB memory in use. Process 872 has 125.87 GiB memory in use. "
    got = event(torch2(procs, "0 bytes", "0 bytes")).figures
    assert got.process_bytes is None and len(got.other_processes) == 2


def test_an_in_process_stack_beside_pytorch_is_non_pytorch_memory() -> None:
    # public5 v-033: TensorRT-LLM's buffers in the job's own process, PyTorch holding nothing
    d = diagnose(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a "
        "total capacity of 22.19 GiB of which 1.50 MiB is free. Process 885415 has 22.18 GiB "
        "memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )
    assert d.kind == "non-pytorch-memory"
    assert d.figures.process_bytes == round(22.18 * 1024**3)


def test_a_lone_process_holding_exactly_the_reservation_is_the_own_process() -> None:
    got = event(torch2("Process 872 has 9.00 GiB memory in use. ", "8.00 GiB", "1.00 GiB"))
    assert got.figures.process_bytes == 9 * 1024**3 and got.figures.other_processes == ()


def test_of_two_processes_a_one_byte_reservation_still_finds_the_own_by_the_closest() -> None:
    procs = "Process 871 has 518.00 MiB memory in use. Process 872 has 125.87 GiB memory in use. "
    got = event(torch2(procs, "1 bytes", "0 bytes")).figures
    assert got.process_bytes == 518 * 1024**2
    assert got.other_processes == (OtherProcess(872, 135151883387),)


def test_the_bfc_failing_path_without_a_rounded_size_reads_the_request_of_the_op() -> None:
    f = event(
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.17GiB requested by op "
        "MatMul\n"
    ).figures
    assert f.requested_bytes == round(1.17 * 1024**3)


def test_an_arena_limit_line_cut_before_its_byte_count_has_no_request() -> None:
    d = diagnose("step 1\nAvailable memory of 0 is smaller than requested bytes\n")
    assert (d.detected, d.kind, d.figures.requested_bytes) == (True, "memory-fraction-cap", None)


def test_paddles_legacy_line_cut_before_what_paddle_uses_keeps_that_unknown() -> None:
    # found through the warning line before it; the legacy line's free and total still read
    f = event(
        "W0725 system_allocator.cc:121] Cannot malloc 195.801 MB GPU memory. Please shrink "
        "FLAGS_fraction_of_gpu_memory_to_use\n"
        "F0725 legacy_allocator.cc:201] Cannot allocate 195.800781MB in GPU 0, available "
        "5.937500MBtotal 7981694976GpuMinChunkSize 256.000000B\n"
    ).figures
    assert (f.free_bytes, f.total_bytes) == (round(5.9375 * 1024**2), 7981694976)
    assert (f.allocated_bytes, f.reserved_unallocated_bytes) == (None, None)


def test_a_free_figure_above_the_total_is_dropped() -> None:
    # public9 o-009: HIP on a 512 MiB AMD iGPU printed an impossible free figure; read as room it
    # said "the figures show room"; without it the request against what PyTorch holds decides
    log = (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 72.00 MiB. GPU 0 has a total "
        "capacity of 512.00 MiB of which 17179869183.96 GiB is free. Of the allocated memory "
        "292.04 MiB is allocated by PyTorch, and 137.96 MiB is reserved by PyTorch but "
        "unallocated.\n"
    )
    d = diagnose(log)
    assert (d.figures.total_bytes, d.figures.free_bytes) == (512 * 1024**2, None)
    assert d.kind == "capacity"
    # a free figure equal to the total is possible (an idle device) and kept
    same = diagnose(log.replace("17179869183.96 GiB is free", "512.00 MiB is free"))
    assert same.figures.free_bytes == 512 * 1024**2


@pytest.mark.parametrize(("text", "requested"), [
    # Rich's log handler at 80 columns (tests/unit/diagnosis/test_wrapped.py's RICH_XLA)
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n  5520758552 bytes.\n",
     5520758552),
    ("onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer"
     "\nof size 1073741824\n", 1073741824),
    # a new record is not the sentence going on
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n2019-06-13 01:17:08: 8 bytes\n",
     None),
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate\nTrying 4 bytes\n", None),
    # the line holds its figure: the next one is not read
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.00GiB.\n(8 bytes)\n",
     2 * 1024**3),
])  # fmt: skip
def test_a_figure_a_console_wrapped_onto_the_next_line_is_read(
    text: str, requested: int | None
) -> None:
    hit = scan_bytes(text.encode()).last
    assert hit is not None
    assert parse_hit(hit).figures.requested_bytes == requested


def test_a_wrapped_line_with_no_next_line_keeps_its_message() -> None:
    hit = scan_bytes(b"RESOURCE_EXHAUSTED: Out of memory while trying to allocate").last
    assert hit is not None
    assert parse_hit(hit).figures.requested_bytes is None


@pytest.mark.parametrize(("text", "requested"), [
    # ollama's server log (public9 o-008) and Jan's llama.cpp router (public9 o-022)
    ("ollama[4173706]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2508.00 MiB on "
     "device 0: cudaMalloc failed: out of memory\n"
     "ollama[4173706]: ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size "
     "2629828608\n", 2508 * 1024**2),
    # the runner's own report first, the allocator's line after it (public7 z-005)
    ("Error: llama runner process has terminated: cudaMalloc failed: out of memory\n"
     "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 882903040\n", 882903040),
    ("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 882903040\n"
     "Error: llama runner process has terminated: cudaMalloc failed: out of memory\n", 882903040),
    # MXNet's own words carry no request, and no llama.cpp line is read for one
    ("mxnet.base.MXNetError: [10:11:12] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
     "failed: out of memory\nfailed to allocate CUDA0 buffer of size 882903040\n", None),
    ("Error: llama runner process has terminated: cudaMalloc failed: out of memory\n", None),
])  # fmt: skip
def test_llama_cpp_s_request_is_read_from_its_buffer_lines(
    text: str, requested: int | None
) -> None:
    hit = scan_bytes(text.encode()).last
    assert hit is not None
    assert parse_hit(hit).figures.requested_bytes == requested


@pytest.mark.parametrize("text", [
    "Error: llama runner process has terminated: cudaMalloc failed: out of memory\n"
    "a\nb\nggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 882903040\n",
    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 882903040\na\nb\n"
    "Error: llama runner process has terminated: cudaMalloc failed: out of memory\n",
])  # fmt: skip
def test_llama_cpp_s_buffer_line_is_read_only_beside_the_failure(text: str) -> None:
    """Two lines after the failure, two before: a buffer further away is another allocation."""
    hit = scan_bytes(text.encode()).last
    assert hit is not None and hit.line.text.startswith("Error: llama runner")
    assert parse_hit(hit).figures.requested_bytes is None


def test_expandable_segments_map_warning_gives_request_free_and_total() -> None:
    line = ("[W831 10:32:25.255 CUDACachingAllocator.cpp:508] expandable_segments: memory mapping "
            "failed with OOM on device 0 while trying to map 20971520 bytes (free: 15663104, "
            "total: 33671348224).")
    hit = scan_bytes(line.encode()).last
    assert hit is not None
    f = parse_hit(hit).figures
    assert (f.requested_bytes, f.free_bytes, f.total_bytes) == (20971520, 15663104, 33671348224)


def test_llama_cpp_s_buffer_line_alone_gives_its_request() -> None:
    hit = scan_bytes(b"ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size "
                     b"2629828608\n").last
    assert hit is not None and hit.family == "cuda-error"
    assert parse_hit(hit).figures.requested_bytes == 2629828608


def test_catboost_s_request_is_read_in_its_mb_and_its_pool_s_free_is_not() -> None:
    # public18 h-010 (0.7, bare figures) and the later wording with " MB"; CatBoost's MB is
    # 1024 * 1024 bytes, its "Free" what is left of its own pool (gpu_ram_part of the card)
    for line in (
        "(NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool"
        ".h:294: Error: Out of memory. Requested 1070.546387; Free 1010.952393",
        "catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:308: Error: Out of memory. "
        "Requested 1070.546387 MB; Free 1010.952393 MB",
    ):
        d = diagnose(line + "\n")
        f = d.figures
        assert (d.framework, d.kind) == ("catboost", "capacity")
        assert (f.requested_bytes, f.free_bytes) == (int(1070.546387 * 2**20), None)
        assert d.summary == "capacity: catboost could not get the 1.05 GiB it requested"


# -- edges mutation found loose at af01f88 (bench/results/mutation-2026-12-03-round7.md) --------


def test_a_size_template_keeps_the_flags_it_is_given() -> None:
    # the field templates are compiled at import, before mutmut 3 turns a mutant on: the
    # lower-cased message tests above cover them in a plain run, this one in a mutation run
    lower = "tried to allocate 20.00 mib"
    assert _size_re(r"Tried to allocate {S}", re.IGNORECASE).search(lower) is not None
    assert _size_re(r"Tried to allocate {S}").search(lower) is None


def test_a_carriage_return_opening_the_text_goes_with_the_progress_before_it() -> None:
    text = "\rCUDA out of memory. Tried to allocate 2.00 GiB"
    assert _from_failure(text, ("CUDA out of memory", 1, 19)) == text[1:]


def test_a_lone_process_at_0_bytes_beside_nothing_reserved_is_the_job() -> None:
    # the job's first allocation failed in a container NVML cannot see into: no other process
    # is listed at 0 bytes
    job = OtherProcess(7, 0)
    assert _own_process([job], 0) == (job, [])


@pytest.mark.parametrize(("gib", "process_bytes"), [
    ("1048575.00", 1048575 * 2**30),  # a figure no machine has yet, but under 1 PiB
    ("1048576.00", None),  # 2^50 bytes exactly: impossible.IMPOSSIBLE_REQUEST_BYTES
])  # fmt: skip
def test_this_process_figure_is_dropped_from_exactly_one_pib(
    gib: str, process_bytes: int | None
) -> None:
    msg = torch2("", "8.00 GiB", "1.00 GiB").replace(
        "Of the allocated", f"Including non-PyTorch memory, this process has {gib} GiB memory "
        "in use. Of the allocated"
    )
    assert event(msg).figures.process_bytes == process_bytes


def test_a_hami_line_with_a_figure_past_any_size_is_no_refusal() -> None:
    head = "[HAMI-core ERROR (pid:1 thread=2 allocator.c:53)]: Device 0 OOM "
    assert hami_refusal(head + "3171158016 / 3145728000\n") == (3171158016, 3145728000)
    assert hami_refusal(head + "99999999999999999999 / 3145728000\n") is None
    assert hami_refusal(head + "3171158016 / 99999999999999999999\n") is None


def test_onnxruntimes_arena_line_cut_before_its_buffer_size_has_no_request() -> None:
    f = event(
        "step 1\n[E:onnxruntime:, sequential_executor.cc:494 ExecuteKernel] "
        "BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer\n"
    ).figures
    assert f.requested_bytes is None


def test_an_mps_figure_past_any_size_leaves_the_process_figure_unread() -> None:
    f = event(
        "MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: "
        "99999999999999999999 GB, max allowed: 9.07 GB). Tried to allocate 25.00 MB on private "
        "pool.\n"
    ).figures
    assert (f.allocated_bytes, f.process_bytes) == (8 * 2**30, None)
    f = event(
        "MPS backend out of memory (MPS allocated: 99999999999999999999 GB, other allocations: "
        "1.00 GB, max allowed: 9.07 GB). Tried to allocate 25.00 MB on private pool.\n"
    ).figures
    assert (f.allocated_bytes, f.process_bytes) == (None, None)
