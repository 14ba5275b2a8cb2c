"""An out-of-memory code from reserving virtual address space is not an OOM (addressspace.py;
the log is public11 u-016's, as posted, labelled blind as not an OOM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.addressspace import NEXT_LINES, address_space_call
from gpu_auditor.diagnosis.logtext import QUOTED_CHARS, Line

pytestmark = pytest.mark.unit

U016 = Path(__file__).resolve().parents[3] / "evaluation" / "public11" / "logs" / "u-016.log"
RESERVE = "cuMemAddressReserve(&pool_addr, CUDA_POOL_VMM_MAX_SIZE, 0, 0, 0)"


def test_llama_cpp_s_vmm_pool_refused_is_no_oom() -> None:
    d = diagnose(U016.read_bytes())
    assert (d.detected, d.kind) == (False, "unknown")
    assert d.to_json_dict()["address_space_call"] == RESERVE
    assert d.summary == (
        "no out-of-memory failure: CUDA's out-of-memory code came from a call that reserves "
        "virtual address space, not GPU memory"
    )
    assert d.recommendation.actions[0].startswith(
        f"the out-of-memory code came from reserving virtual address space ({RESERVE}), not from "
        "GPU memory running out: llama.cpp reserves its VMM pool that way; build it with "
        "GGML_CUDA_NO_VMM=ON"
    )
    assert "killed_by_signal" not in d.to_json_dict()


def test_the_same_error_with_another_failing_call_is_an_oom() -> None:
    text = U016.read_text().replace("cuMemAddressReserve(", "cuMemCreate(")
    d = diagnose(text)
    assert d.detected and "address_space_call" not in d.to_json_dict()


@pytest.mark.parametrize(("after", "found"), [
    ([Line("x"), Line("y"), Line("z"), Line(f"  {RESERVE}")], RESERVE),
    ([Line("x"), Line("y"), Line("z"), Line("w"), Line(f"  {RESERVE}")], None),  # too far
    ([Line(f"the pool uses {RESERVE}")], None),  # named, not as the failing call
    ([Line("\t" + RESERVE + "\x1b[0m")], RESERVE + "?[0m"),
    ([Line("cuMemAddressReserve(" + "a" * 300)], ("cuMemAddressReserve(" + "a" * 300)[:200]),
])  # fmt: skip
def test_the_failing_call_is_read_from_the_next_lines_only(
    after: list[Line], found: str | None
) -> None:
    assert NEXT_LINES == 4 and QUOTED_CHARS == 200
    assert address_space_call(after) == found
