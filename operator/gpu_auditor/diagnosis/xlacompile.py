"""XLA's TPU compiler finding that a program does not fit one of the chip's memory spaces.

On a TPU, XLA plans every buffer of a compiled program before it runs, and refuses to compile
when the plan is larger than a memory space: "RESOURCE_EXHAUSTED: XLA:TPU compile permanent
error. Ran out of memory in memory space hbm. Used 21.95G of 15.48G hbm. Exceeded hbm capacity
by 6.47G." (older releases: "Resource exhausted: Compilation failure: Ran out of memory in memory
space hbm. ..."). Nothing ran yet, so nothing else held the memory: no other process, no cache,
no leak.

- ``hbm``, the chip's main memory: XLA's error code 1000 ("thrown when the total High Bandwidth
  Memory required at any specific point in the compiled program exceeds the physical capacity of
  the TPU device", openxla/xla docs/errors/error_1000.md): the work does not fit the chip, a
  capacity failure, whose levers are the batch, buffer donation, bfloat16, sharding over more
  chips and rematerialization.
- ``vmem``/``smem``, on-chip scratch memories a kernel's tiles live in: the limit is a kernel's
  scoped budget as often as the chip's (Pallas's ``vmem_limit_bytes``, 64 MiB by default: raising
  it fixed jax-ml/jax#38988; a smaller kernel block fixed pytorch/xla#9346's and vLLM#9350's),
  so the kind stays ``unknown`` and the actions name the kernel's levers.

The figures are XLA's human-readable sizes (``HumanReadableNumBytes``: K, M, G, T as powers of
1024).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .sizes import format_size, to_bytes

_PLAN: Final = re.compile(
    r"\bRan out of memory in memory space (?P<space>[a-z]{1,12})\. "
    r"Used (?P<used>\d{1,12}(?:\.\d{1,6})?)(?P<used_unit>[KMGT]?)B? "
    r"of (?P<limit>\d{1,12}(?:\.\d{1,6})?)(?P<limit_unit>[KMGT]?)B? (?P=space)\b"
)
DEVICE_MEMORY: Final = "hbm"
"""The memory space that is the chip's main memory (its capacity on the product sheet)."""

KERNEL_ACTION: Final = (
    "a kernel's tiles did not fit the chip's on-chip {space}: use smaller block sizes for that "
    "kernel (Pallas: its BlockSpecs; an attention kernel: a shorter max sequence or a smaller "
    "batch per call); a library's own kernel is often fixed in a newer release"
)
VMEM_BUDGET_ACTION: Final = (
    "where the chip has more vmem than the kernel's scoped budget, raise the budget (Pallas: "
    "vmem_limit_bytes in its TPU compiler params)"
)
HBM_ACTIONS: Final = (
    "the compiled program needs more of the TPU's memory than the chip has: a smaller batch "
    "(per chip) or sequence",
    "shard the parameters and optimizer state over more chips (a larger slice, tensor or "
    "pipeline parallelism) or move to a TPU with more memory per chip",
    "trade compute for memory: rematerialization (jax.checkpoint; tf.recompute_grad) on the "
    "large layers, bfloat16 for the largest tensors, donate_argnums for the state jit replaces",
)


@dataclass(frozen=True)
class CompilePlan:
    """What XLA's compiler planned and where: ``space`` (``hbm``, ``vmem``, ``smem``...), the
    bytes the plan used and the bytes the space holds (``None`` where a figure is not a size)."""

    space: str
    used_bytes: int | None
    limit_bytes: int | None

    @property
    def on_device_memory(self) -> bool:
        return self.space == DEVICE_MEMORY


def compile_plan(message: str) -> CompilePlan | None:
    """The plan XLA's TPU compiler refused in ``message``, or None for any other failure."""
    found = _PLAN.search(message)
    if found is None:
        return None
    return CompilePlan(
        found.group("space"),
        to_bytes(found.group("used"), found.group("used_unit")),
        to_bytes(found.group("limit"), found.group("limit_unit")),
    )


def kind(plan: CompilePlan) -> str:
    """``capacity`` for the chip's main memory, ``unknown`` for a kernel's on-chip space."""
    return "capacity" if plan.on_device_memory else "unknown"


def summary(plan: CompilePlan) -> str:
    """One line for the verdict, with the plan's figures."""
    used, limit = format_size(plan.used_bytes), format_size(plan.limit_bytes)
    if plan.on_device_memory:
        return (
            f"capacity: XLA's TPU compiler planned {used} of the chip's {limit} HBM for the "
            "program and refused to compile it: the work does not fit the chip (nothing else "
            "held its memory: nothing had run)"
        )
    return (
        f"unknown: XLA's TPU compiler planned {used} of {limit} in the chip's on-chip "
        f"{plan.space} for a kernel and refused to compile it: the kernel's tiles or its scoped "
        "budget, not the chip's main memory"
    )


def actions(plan: CompilePlan) -> list[str]:
    """What to change, by the memory space the plan did not fit."""
    if plan.on_device_memory:
        return list(HBM_ACTIONS)
    kernel = [KERNEL_ACTION.format(space=plan.space)]
    return [*kernel, VMEM_BUDGET_ACTION] if plan.space == "vmem" else kernel
