"""A request more than any machine has is a size computed wrong, not an OOM (impossible.py):
PyTorch's "more than 1EB" after an NCCL timeout (NVIDIA/nccl#1284) and ONNX Runtime's arena
asked for about 4 EiB (both from the census of public failure lines); the bound at 1 PiB; real
requests of every card size stay OOMs."""

from __future__ import annotations

import json

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.impossible import IMPOSSIBLE_REQUEST_BYTES

pytestmark = pytest.mark.unit

EXABYTE = (
    "[rank3]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB "
    "memory"
)
ORT = (
    "onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : "
    "RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node. Name:'fc1' "
    "Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* "
    "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
    "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size "
    "{size}"
)


def test_pytorchs_more_than_an_exabyte_is_no_oom() -> None:
    d = diagnose(f"[rank3]: Watchdog caught collective operation timeout\n{EXABYTE}\n")
    assert not d.detected
    assert d.summary == ("no out-of-memory failure: it counted more than 1 EiB, more than any "
                         "machine has, a size computed wrong")
    assert d.recommendation.alloc_conf is None
    assert d.recommendation.actions[0].startswith("the failure counted more than 1 EiB")
    assert d.to_json_dict()["impossible_request"] == "more than 1 EiB"


def test_onnx_runtimes_four_exbibytes_is_no_oom() -> None:
    d = diagnose(ORT.format(size=4585490524328388608) + "\n")
    assert not d.detected
    assert "4585490524328388608 bytes" in d.summary


@pytest.mark.parametrize(("size", "detected"), [
    (IMPOSSIBLE_REQUEST_BYTES - 1, True),  # a PiB less a byte: still read as a request
    (IMPOSSIBLE_REQUEST_BYTES, False),
    (2**62, False),
])  # fmt: skip
def test_the_bound_is_one_pebibyte(size: int, detected: bool) -> None:
    assert diagnose(ORT.format(size=size) + "\n").detected is detected


@pytest.mark.parametrize("line", [
    # real requests on 4 GiB to 192 GiB cards, and a request above a whole H200
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
    "capacity of 3.81 GiB of which 2.06 MiB is free.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 180.00 GiB. GPU 0 has a total "
    "capacity of 139.81 GiB of which 130.06 GiB is free.",
    ORT.format(size=15728896),
])  # fmt: skip
def test_requests_any_machine_could_hold_are_ooms(line: str) -> None:
    d = diagnose(line + "\n")
    assert d.detected
    assert "impossible_request" not in d.to_json_dict()


def test_a_word_like_the_exabyte_message_elsewhere_is_not_the_bound() -> None:
    d = diagnose("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                 "15.78 GiB of which 1.00 GiB is free. (logged: more than 1EB memory? no)\n")
    assert d.detected


def test_hamis_usage_counted_as_two_to_the_64_is_no_oom() -> None:
    """public12 f-017: HAMi's accounting bug; the card had 22 GiB of room."""
    d = diagnose(
        "[HAMI-core ERROR (pid:7 thread=140 allocator.c:53)]: Device 0 OOM 18446744073709551615 / "
        "24150802432\nTraceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    assert not d.detected
    assert d.to_json_dict()["impossible_request"] == "18446744073709551615 bytes"
    assert d.recommendation.actions[0].startswith("HAMi counted the container's GPU memory")


def test_cudamallocasyncs_request_of_a_pebibyte_and_more_is_no_oom() -> None:
    """Found by the property test: the async backend's "Requested" figure is read the same."""
    d = diagnose(
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of "
        "memory)\nCurrently allocated     : 1.00 GiB\nRequested               : 1100000.00 GiB\n"
        "Device limit            : 139.80 GiB\nFree (according to CUDA): 31.12 MiB\n"
    )
    assert (d.detected, d.oom_count) == (False, 1)
    assert d.to_json_dict()["impossible_request"] == "1181116006400000 bytes"


def test_what_torch_printed_on_the_h200_is_read_as_the_bound_says() -> None:
    """evaluation/gpu/impossible_requests.py on the H200 (torch 2.11, both allocator backends):
    1 TiB stays an OOM (capacity); from a printed 1048576.00 GiB (1 PiB, rounded: 1 PiB less
    1 MiB prints the same) and torch's "more than 1EB" up, no OOM."""
    from pathlib import Path

    rows = json.loads((Path(__file__).resolve().parents[3] / "evaluation" / "results"
                       / "impossible-requests-h200.json").read_text())
    assert {r["backend"] for r in rows} == {"native", "cudaMallocAsync"} and len(rows) == 12
    for row in rows:
        d = diagnose(f"{row['class']}: {row['error']}\n")
        assert d.detected is (row["bytes"] <= 2**40), row
        assert d.kind == ("capacity" if d.detected else "unknown")


def test_a_request_of_0_bytes_read_from_figures_alone_is_dismissed() -> None:
    """CuPy prints its request without the words the pattern knows (the property test's find)."""
    d = diagnose(
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 0 bytes (allocated so far: "
        "0 bytes).\n"
    )
    assert not d.detected
    assert dict(d.extra)["zero_request"] == "0 bytes"


def test_a_request_of_1_byte_is_a_request() -> None:
    d = diagnose(
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1 bytes (allocated so far: "
        "0 bytes).\n"
    )
    assert d.detected


def test_an_absurd_process_figure_outside_hami_is_no_impossible_request() -> None:
    """Only HAMi's count of the process is its accounting: an MPS "other allocations" misprinted
    past any machine leaves the failure read."""
    d = diagnose(
        "MPS backend out of memory (MPS allocated: 8.00 GB, other allocations: 2000000.00 GB, max "
        "allowed: 9.07 GB). Tried to allocate 25.00 MB on private pool.\n"
    )
    assert d.detected
