"""What mutation testing found loose in the recommendation (``scripts/mutation.py --modules
recommend``): the whole action list a job owner reads for each path of the setting, pinned word
for word (each list read and checked against the rule it states before it was pinned).
"""

from __future__ import annotations

import pytest
from test_boundaries_recommend import rec

from gpu_auditor.diagnosis.torchversion import TorchRange

pytestmark = pytest.mark.unit

PEAK = (
    "reduce peak memory: a smaller batch (when training, gradient accumulation keeps the "
    "effective batch)"
)


def release(major: int, minor: int) -> TorchRange:
    return TorchRange((major, minor), (major, minor))


def test_before_2_5_with_a_gc_threshold_both_caveats() -> None:
    r = rec(release=release(2, 4), current="garbage_collection_threshold:0.6")
    assert r.alloc_conf == "garbage_collection_threshold:0.6,expandable_segments:True"
    assert list(r.actions) == [
        "set PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6,expandable_segments:True: "
        "lets the allocator reuse the 7.00 GiB reserved but unallocated",
        "before torch 2.5, expandable_segments together with max_split_size_mb or "
        "garbage_collection_threshold could assert: drop those keys if it does",
        "before torch 2.5, expandable_segments does not support sharing CUDA tensors between "
        "processes (CUDA IPC, e.g. DataLoader workers returning CUDA tensors)",
    ]


def test_contributing_capacity_and_leak_notes_word_for_word() -> None:
    r = rec(contributing=("capacity", "leak"))
    assert list(r.actions) == [
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: lets the allocator reuse the "
        "7.00 GiB reserved but unallocated",
        f"the GPU stays nearly full even without fragmentation: {PEAK}",
        "memory also rose steadily before the failure: the setting buys room, but if something "
        "keeps tensors alive across steps it will run out again: accumulate numbers, not "
        "tensors: total_loss += loss.item() (a tensor keeps its graph alive)",
    ]
    assert list(rec(contributing=("leak",)).actions)[1:] == [r.actions[2]]


@pytest.mark.parametrize(
    ("kw", "action"),
    [
        ({"release": release(2, 0), "current": "max_split_size_mb:64"},
         "max_split_size_mb is already 64, so no allocator setting is left to try on this "
         f"release (torch >= 2.1 has expandable_segments:True): {PEAK}"),
        ({"release": release(2, 0), "current": "max_split_size_mb:64", "rocm": True},
         f"max_split_size_mb is already 64, so no allocator setting is left to try: {PEAK}"),
        ({"release": release(1, 9)},
         "this torch release has no allocator setting against fragmentation: upgrade to "
         f"torch >= 2.1 (expandable_segments:True), or {PEAK}"),
        ({"current": "expandable_segments:True"},
         f"expandable_segments is already True, so no allocator setting is left to try: {PEAK}"),
        ({"backend": "cudaMallocAsync"},
         "the job uses backend:cudaMallocAsync, whose pool PyTorch's fragmentation settings do "
         "not touch: reduce peak memory instead"),
    ],
)  # fmt: skip
def test_no_setting_left_says_why_and_what_instead(kw: dict[str, object], action: str) -> None:
    r = rec(**kw)  # type: ignore[arg-type]
    assert r.alloc_conf is None
    assert r.actions[0] == action


def test_a_max_split_the_release_rejects_is_replaced() -> None:
    # 2.0 rejects 20 (must be > 20): the current value is bad, so 128 is recommended
    r = rec(release=release(2, 0), current="max_split_size_mb:20")
    assert r.alloc_conf == "max_split_size_mb:128"


def test_an_expandable_segments_the_release_rejects_is_set_again() -> None:
    r = rec(current="expandable_segments:yes")
    assert r.alloc_conf == "expandable_segments:True"


def test_the_problems_of_the_current_setting_are_listed_joined() -> None:
    r = rec(current="foo:1,bar:2")
    assert r.actions[-1] == (
        "the current PYTORCH_CUDA_ALLOC_CONF has problems for this release (left out of the "
        "recommended value): Unrecognized key 'foo' in CUDA allocator config.; Unrecognized key "
        "'bar' in CUDA allocator config."
    )


def test_pytorch_capacity_actions_word_for_word() -> None:
    assert list(rec("capacity").actions) == [
        PEAK,
        "use mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16))",
        "enable activation checkpointing (torch.utils.checkpoint / "
        "model.gradient_checkpointing_enable())",
        "for inference, run under torch.inference_mode() so no autograd graph is kept",
        "shard the model (FSDP / DeepSpeed ZeRO) or use a GPU with more memory",
    ]
