"""One buffer past the driver's per-allocation cap is not an OOM (allocationlimit.py; the log is
public31 d-012's, as posted, labelled blind as not an OOM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.allocationlimit import LINES_BEFORE, allocation_limit
from gpu_auditor.diagnosis.logtext import QUOTED_CHARS

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


ASKED = "ggml_vulkan: Device memory allocation of size 4757131264 failed."


@pytest.mark.parametrize(("failure", "before", "found"), [
    (FAILED, f"{ASKED}\n{LIMIT}\n", LIMIT),
    (FAILED, f"{ASKED}\n{LIMIT}\na\nb\n", LIMIT),
    (FAILED, f"x\n{ASKED}\n{LIMIT}\na\n", LIMIT),
    (FAILED, f"{ASKED}\n{LIMIT}\na\nb\nc\n", None),  # too far before the failure
    # later releases' words (llama.cpp#18160)
    (FAILED, f"{ASKED}\nggml_vulkan: Requested buffer size exceeds device buffer size limit: "
     "ErrorOutOfDeviceMemory\n",
     "ggml_vulkan: Requested buffer size exceeds device buffer size limit: "
     "ErrorOutOfDeviceMemory"),
    # the cap's words after another buffer (a pinned host buffer given up for host memory),
    # then the device really out (the round's review)
    (FAILED, f"ggml_vulkan: Failed to allocate pinned memory.\n{LIMIT}\n{ASKED}\n"
     "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n", None),
    (FAILED, f"ggml_vulkan: Device memory allocation of size 2166360064 failed.\n{LIMIT}\n",
     None),  # another size than the failing buffer's
    (FAILED, f"{LIMIT}\n", None),  # no allocation named before it
    # a CUDA buffer's failure: the cap's words come from the Vulkan backend only
    ("ggml_backend_cuda_buffer_type_alloc_buffer: failed to allocate CUDA0 buffer of size "
     "4757131264", f"{ASKED}\n{LIMIT}\n", None),
    (FAILED, f"{ASKED}\n  " + LIMIT + "\x1b[0m\n", LIMIT + "?[0m"),
    (FAILED, f"{ASKED}\n" + LIMIT + "x" * 300 + "\n", (LIMIT + "x" * 300)[:200]),
])  # fmt: skip
def test_the_cap_is_read_right_after_the_failing_buffer_s_own_allocation(
    failure: str, before: str, found: str | None
) -> None:
    assert LINES_BEFORE == 4 and QUOTED_CHARS == 200
    assert allocation_limit(failure, before) == found
