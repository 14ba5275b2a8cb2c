"""XLA's TPU compiler refusing a program that does not fit a memory space (xlacompile.py). The
lines are public threads' as posted: public33 i-014/i-015/i-016 (RingAttention's vmem, vLLM's TPU
backend's smem, LWM's hbm), erfanzar/EasyDeL#78 (hbm on a TPU v2), tensorflow/tpu#598 (the older
"Compilation failure" wording), jax-ml/jax#38988 (a Pallas kernel's vmem, fixed by raising
vmem_limit_bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.xlacompile import (
    HBM_ACTIONS,
    VMEM_BUDGET_ACTION,
    CompilePlan,
    compile_plan,
    kind,
)

pytestmark = pytest.mark.unit

PUBLIC33 = Path(__file__).resolve().parents[3] / "evaluation" / "public33" / "logs"
GIB, MIB = 1024**3, 1024**2

EASYDEL = (
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
    "Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm. Exceeded hbm capacity by "
    "14.42G.\n"
)
OLDER = (
    "W1110 07:24:24.387306     892 op_kernel.cc:1639] Resource exhausted: Compilation failure: "
    "Ran out of memory in memory space hbm. Used 18.56G of 16.00G hbm. Exceeded hbm capacity by "
    "2.56G.\n"
)
PALLAS = (
    "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in\n"
    "memory space vmem. Used 65.05M of 64.00M vmem. Exceeded vmem capacity by 1.05M\n"
)


@pytest.mark.parametrize(("line", "plan"), [
    (EASYDEL, CompilePlan("hbm", round(21.90 * GIB), round(7.48 * GIB))),
    (OLDER, CompilePlan("hbm", round(18.56 * GIB), 16 * GIB)),
    ("Ran out of memory in memory space smem. Used 1.00M of 1.00M smem. Exceeded smem capacity "
     "by 1.7K.", CompilePlan("smem", MIB, MIB)),
    # the space named twice must agree: not a plan of XLA's
    ("Ran out of memory in memory space hbm. Used 1.00M of 1.00M vmem.", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", None),
])
def test_the_plan_is_read_with_its_space_and_figures(line: str, plan: CompilePlan | None) -> None:
    assert compile_plan(line) == plan


def test_only_the_chips_main_memory_is_capacity() -> None:
    assert kind(CompilePlan("hbm", 2, 1)) == "capacity"
    assert kind(CompilePlan("vmem", 2, 1)) == "unknown"  # a kernel's budget as often as the chip
    assert kind(CompilePlan("smem", 2, 1)) == "unknown"


@pytest.mark.parametrize("text", [EASYDEL, OLDER, (PUBLIC33 / "i-016.log").read_text()])
def test_a_program_past_the_hbm_is_capacity_with_the_compilers_levers(text: str) -> None:
    d = diagnose(text)
    assert (d.detected, d.kind, d.contributing) == (True, "capacity", ())
    assert d.summary.startswith("capacity: XLA's TPU compiler planned ")
    assert "another process" not in d.summary  # nothing had run: nothing else held the chip
    assert d.recommendation.alloc_conf is None
    assert d.recommendation.actions == HBM_ACTIONS


def test_i016_reads_its_own_figures() -> None:
    d = diagnose((PUBLIC33 / "i-016.log").read_text())
    assert d.summary == (
        "capacity: XLA's TPU compiler planned 21.95 GiB of the chip's 15.48 GiB HBM for the "
        "program and refused to compile it: the work does not fit the chip (nothing else held "
        "its memory: nothing had run)"
    )


def test_i014_says_the_kernels_space_is_not_the_chips_memory() -> None:
    d = diagnose((PUBLIC33 / "i-014.log").read_text())
    assert d.summary == (
        "unknown: XLA's TPU compiler planned 59.79 MiB of 16.00 MiB in the chip's on-chip vmem "
        "for a kernel and refused to compile it: the kernel's tiles or its scoped budget, not "
        "the chip's main memory"
    )


@pytest.mark.parametrize(("name", "space"), [("i-014.log", "vmem"), ("i-015.log", "smem")])
def test_a_kernels_on_chip_space_is_not_called_capacity(name: str, space: str) -> None:
    d = diagnose((PUBLIC33 / name).read_text())
    assert (d.detected, d.kind) == (True, "unknown")
    assert f"in the chip's on-chip {space} for a kernel" in d.summary
    actions = d.recommendation.actions
    assert actions[0].startswith(f"a kernel's tiles did not fit the chip's on-chip {space}")
    assert (VMEM_BUDGET_ACTION in actions) == (space == "vmem")  # Pallas's budget is vmem's
    assert not any("XLA_PYTHON_CLIENT" in a for a in actions)  # a GPU's levers, not a TPU's


def test_a_plan_wrapped_across_lines_is_still_detected() -> None:
    # jax#38988 as posted: the console broke the sentence before "memory space"
    d = diagnose(PALLAS)
    assert (d.detected, d.kind) == (True, "unknown")
    assert "planned 65.05 MiB of 64.00 MiB in the chip's on-chip vmem" in d.summary
    assert d.recommendation.actions[-1] == VMEM_BUDGET_ACTION


def test_a_long_hostile_line_is_read_in_bounded_time() -> None:
    line = "Ran out of memory in memory space hbm. Used " + "9" * 100_000 + "G of 1G hbm.\n"
    assert compile_plan(line) is None
