"""One buffer past the driver's per-allocation cap is not an OOM (allocationlimit.py; the log is
public31 d-012's, as posted, labelled blind as not an OOM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.allocationlimit import LINES_BEFORE, MAX_LINE_CHARS, allocation_limit

pytestmark = pytest.mark.unit

D012 = Path(__file__).resolve().parents[3] / "evaluation" / "public31" / "logs" / "d-012.log"
LIMIT = (
    "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: "
    "ErrorOutOfDeviceMemory"
)
FAILED = "ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 4757131264"


def test_llama_cpp_s_vulkan_buffer_past_the_drivers_cap_is_no_oom() -> None:
    d = diagnose(D012.read_bytes())
    assert (d.detected, d.kind) == (False, "unknown")
    assert d.to_json_dict()["allocation_limit"] == LIMIT
    assert d.summary == (
        "no out-of-memory failure: one buffer was larger than the driver allows in a single "
        "allocation, not the GPU running out"
    )
    assert d.recommendation.actions[0].startswith(
        f"one buffer was larger than the Vulkan driver allows in a single allocation ({LIMIT}), "
        "whatever the GPU had free: make that buffer smaller"
    )


def test_the_same_failure_without_the_cap_s_words_is_an_oom() -> None:
    text = D012.read_text().replace(LIMIT, "ggml_vulkan: vk::Device::allocateMemory: "
                                    "ErrorOutOfDeviceMemory")
    d = diagnose(text)
    assert d.detected and d.framework == "llama.cpp"
    assert "allocation_limit" not in d.to_json_dict()


@pytest.mark.parametrize(("failure", "before", "found"), [
    (FAILED, f"{LIMIT}\n", LIMIT),
    (FAILED, f"{LIMIT}\na\nb\nc\n", LIMIT),
    (FAILED, f"{LIMIT}\na\nb\nc\nd\n", None),  # too far before the failure
    # a CUDA buffer's failure: the cap's words come from the Vulkan backend only
    ("ggml_backend_cuda_buffer_type_alloc_buffer: failed to allocate CUDA0 buffer of size 9",
     f"{LIMIT}\n", None),
    (FAILED, "  " + LIMIT + "\x1b[0m\n", LIMIT + "?[0m"),
    (FAILED, LIMIT + "x" * 300 + "\n", (LIMIT + "x" * 300)[:200]),
])  # fmt: skip
def test_the_cap_is_read_from_the_lines_just_before_a_vulkan_buffer_s_failure(
    failure: str, before: str, found: str | None
) -> None:
    assert LINES_BEFORE == 4 and MAX_LINE_CHARS == 200
    assert allocation_limit(failure, before) == found
