"""Boundary cases for the recommendation's rules that mutation testing found loose (issue 18).

The memory fraction to raise the cap to, when the cache (reserved), not allocations, filled the
cap: each side of ``allocated + request <= allowed`` by exact bytes, and a GPU of 16 GiB where
one byte more moves the fraction by 0.05 (2 GiB of 16 is 0.125, twice is 0.25 exactly); no
total, no fraction. The actions of a request larger than the GPU in full; fragmentation without
a setting (not PyTorch) gets the capacity actions; the inference look-back of 16384 characters;
phases for PyTorch only; a merged setting the build ignores is not recommended. Literal numbers
and strings, never the module's constants.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import allocconf
from gpu_auditor.diagnosis.classify import Verdict
from gpu_auditor.diagnosis.model import Figures, OomEvent, Recommendation
from gpu_auditor.diagnosis.recommend import Context, looks_like_inference, phase_of, recommend
from gpu_auditor.diagnosis.torchversion import TorchRange

pytestmark = pytest.mark.unit

G = 2**30
TORCH_2_11 = TorchRange((2, 11), (2, 11))
CAP_ACTION = "(torch.cuda.set_per_process_memory_fraction): the cap, not the GPU, ran out"


def rec(kind: str, figures: Figures, *, framework: str = "pytorch", rocm: bool = False,
        current: allocconf.Checked | None = None, precontext: str = "") -> Recommendation:
    event = OomEvent("torch", framework, "CUDA out of memory", figures, rocm=rocm)
    ctx = Context(event, Verdict(kind, (), "", figures), TORCH_2_11, current, allocconf.NATIVE,
                  None, None, precontext, None)
    return recommend(ctx)


def cap(*, total: int | None, allocated: int | None, unallocated: int, requested: int,
        allowed: int) -> str:
    figures = Figures(requested_bytes=requested, total_bytes=total, free_bytes=8 * G,
                      allocated_bytes=allocated, reserved_unallocated_bytes=unallocated,
                      allowed_bytes=allowed)
    return rec("memory-fraction-cap", figures).actions[0]


# -- the fraction: what the step held, the cache when it filled the cap ------------------------


@pytest.mark.parametrize(
    ("total", "allocated", "unallocated", "requested", "allowed", "fraction"),
    [
        # allocated + request = 2 + 2 = allowed 4: the cap was full of cache, so the 6 GiB
        # reserved is what the step held: (6 + 2) / 80 = 0.10, twice 0.20
        (80 * G, 2 * G, 4 * G, 2 * G, 4 * G, "0.20"),
        # one byte more allowed: still reserved (2 + 2 < 4 GiB + 1)
        (80 * G, 2 * G, 4 * G, 2 * G, 4 * G + 1, "0.20"),
        # one byte less allowed: allocations bound the cap, allocated counts: (2 + 2) / 80 = 0.05
        (80 * G, 2 * G, 4 * G, 2 * G, 4 * G - 1, "0.10"),
        # allocated + request = 4 + 2 > 4, though allocated - request would be under it:
        # allocated counts, (4 + 2) / 80 = 0.075, twice 0.15
        (80 * G, 4 * G, 2 * G, 2 * G, 4 * G, "0.15"),
        # nothing allocated, nothing cached: 2 / 16 = 0.125, twice 0.25 exactly (a byte more
        # held would make it 0.30)
        (16 * G, 0, 0, 2 * G, 4 * G, "0.25"),
        # no allocated figure, the request alone over the cap: the same 0.25
        (16 * G, None, 0, 2 * G, 1 * G, "0.25"),
    ],
)
def test_the_fraction_counts_the_cache_only_when_it_filled_the_cap(
        total: int, allocated: int | None, unallocated: int, requested: int, allowed: int,
        fraction: str) -> None:
    action = cap(total=total, allocated=allocated, unallocated=unallocated,
                 requested=requested, allowed=allowed)
    assert action == f"raise the per-process memory fraction to about {fraction} {CAP_ACTION}"


def test_without_the_gpus_total_no_fraction_is_named() -> None:
    action = cap(total=None, allocated=2 * G, unallocated=0, requested=2 * G, allowed=3 * G)
    assert action == f"raise the per-process memory fraction {CAP_ACTION}"


# -- a request larger than the GPU: every action ---------------------------------------------


def test_a_request_larger_than_the_gpu_gets_split_two_peak_reducers_and_sharding() -> None:
    huge = Figures(requested_bytes=81 * G, total_bytes=80 * G, free_bytes=1 * G)
    assert rec("capacity", huge).actions == (
        "split the work: one 81.00 GiB tensor cannot fit a 80.00 GiB GPU whatever the setting",
        "reduce peak memory: a smaller batch (when training, gradient accumulation keeps the "
        "effective batch)",
        "use mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16))",
        "shard the model (FSDP / DeepSpeed ZeRO) across GPUs",
    )


# -- fragmentation with no setting and no note: the capacity actions --------------------------

FRAG = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G,
               allocated_bytes=70 * G, reserved_unallocated_bytes=7 * G)


def test_fragmentation_outside_pytorch_gets_its_stacks_capacity_actions() -> None:
    r = rec("fragmentation", FRAG, framework="jax")
    assert r.alloc_conf is None
    assert r.actions == (
        "JAX preallocates 75% of the GPU: raise XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.9) if "
        "the GPU has room, or set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand",
        "reduce the batch size or shard the computation across devices",
    )


def test_fragmentation_with_a_setting_gets_no_capacity_actions() -> None:
    r = rec("fragmentation", FRAG)
    assert r.alloc_conf == "expandable_segments:True"
    assert not any(a.startswith("reduce peak memory") for a in r.actions)


# -- a merged value the build ignores is not recommended --------------------------------------


def test_a_merged_value_with_a_key_rocm_ignores_is_not_recommended() -> None:
    # the caller checked the current setting without the ROCm flag, so expandable_segments
    # was kept; on ROCm the recommender re-checks the merged value and rejects it
    current = allocconf.check("expandable_segments:True", TORCH_2_11, allocconf.NATIVE)
    r = rec("fragmentation", FRAG, rocm=True, current=current)
    assert r.alloc_conf is None
    assert r.env is None
    # the same current setting off ROCm: expandable_segments is already True, nothing to set
    assert rec("fragmentation", FRAG, current=current).alloc_conf is None
    # and on ROCm without a current setting: max_split_size_mb
    assert rec("fragmentation", FRAG, rocm=True).alloc_conf == "max_split_size_mb:128"


# -- the inference look-back: the last 16384 characters ---------------------------------------


def test_inference_is_read_in_the_last_16384_characters() -> None:
    inside = "inference" + " " * 16375  # 16384 characters: the word is the first of them
    outside = "inference" + " " * 16376  # 16385: its first letter falls outside
    assert len(inside) == 16384 and len(outside) == 16385
    assert looks_like_inference(inside)
    assert not looks_like_inference(outside)


# -- the phase: PyTorch only -------------------------------------------------------------------

BACKWARD_TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 7, in train\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


@pytest.mark.parametrize(
    ("framework", "phase"),
    [("pytorch", "backward"), ("jax", None), ("tensorflow", None), (None, None)],
)
def test_a_phase_is_read_for_pytorch_only(framework: str | None, phase: str | None) -> None:
    event = OomEvent("torch", framework, "CUDA out of memory", FRAG)
    assert phase_of(event, BACKWARD_TB) == phase
