"""The allocator setting: only for fragmentation, valid for the release and backend, merged."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import allocconf, diagnose, validate_alloc_conf
from gpu_auditor.diagnosis.classify import Verdict
from gpu_auditor.diagnosis.model import (
    Figures,
    Growth,
    NodeEvidence,
    OomEvent,
    OtherProcess,
    Recommendation,
)
from gpu_auditor.diagnosis.recommend import (
    ENGINE_DUMMY_RUN_FIX,
    ENGINE_WARM_UP_FIX,
    HOST_FIXES,
    LIBRARY_ROOM,
    OTHER_STACK_PEAK,
    REDUCE_PEAK,
    XPU_ONE_ALLOCATION_BYTES,
    Context,
    _outside_beyond_runtime,
    _past_one_xpu_allocation,
    looks_like_inference,
    phase_of,
    recommend,
)
from gpu_auditor.diagnosis.sizes import format_size as fs
from gpu_auditor.diagnosis.torchversion import TorchRange

from .diagnosis_helpers import PROGRESS, torch_oom

pytestmark = pytest.mark.unit

# 6.90 GiB idle of 77 GiB reserved (9 %): fragmentation, and a setting, only for a job that
# finished steps before the failure (issue 24); the settings below are read after PROGRESS
FRAG_NO_PROGRESS = torch_oom(
    requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9
)
FRAG = PROGRESS + FRAG_NO_PROGRESS
FRAG_1X = PROGRESS + (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
    "capacity; 70.10 GiB already allocated; 1.20 GiB free; 77.00 GiB reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)
CAPACITY = torch_oom(
    requested=2, total=79.15, free=1.0, process=78, allocated=76.9, unallocated=0.1
)


@pytest.mark.parametrize("version", ["2.1", "2.4", "2.11", "2.13"])
def test_fragmentation_recommends_expandable_segments_on_torch_2_1_plus(version: str) -> None:
    rec = diagnose(FRAG, torch_version=version).recommendation
    assert (rec.env, rec.alloc_conf) == ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


@pytest.mark.parametrize("version", ["1.10", "1.13", "2.0"])
def test_fragmentation_recommends_max_split_size_mb_before_torch_2_1(version: str) -> None:
    rec = diagnose(FRAG, torch_version=version).recommendation
    assert rec.alloc_conf == "max_split_size_mb:128"
    assert validate_alloc_conf(rec.alloc_conf, torch_version=version) == []


@pytest.mark.parametrize("version", ["1.13", "2.11"])
def test_the_same_idle_cache_before_the_first_step_gets_no_setting(version: str) -> None:
    diagnosis = diagnose(FRAG_NO_PROGRESS, torch_version=version)
    assert diagnosis.kind == "capacity"
    assert (diagnosis.recommendation.env, diagnosis.recommendation.alloc_conf) == (None, None)


def test_one_x_message_format_alone_rules_out_expandable_segments() -> None:
    diagnosis = diagnose(FRAG_1X)
    assert diagnosis.kind == "fragmentation"
    assert diagnosis.torch_version_hint == "1.10-2.0"
    assert diagnosis.recommendation.alloc_conf == "max_split_size_mb:128"


def test_fragmentation_before_max_split_size_mb_existed_recommends_an_upgrade() -> None:
    rec = diagnose(FRAG, torch_version="1.9").recommendation
    assert rec.alloc_conf is None
    assert any("upgrade to torch >= 2.1" in a for a in rec.actions)


def test_rocm_fragmentation_never_gets_expandable_segments() -> None:
    rocm = FRAG.replace("CUDA out of memory", "HIP out of memory")
    rec = diagnose(rocm, torch_version="2.6").recommendation
    assert rec.alloc_conf == "max_split_size_mb:128"


def test_recommendation_keeps_the_jobs_other_keys() -> None:
    current = "garbage_collection_threshold:0.6,pinned_use_background_threads:True"
    rec = diagnose(FRAG, torch_version="2.11", alloc_conf=current).recommendation
    assert rec.alloc_conf == (
        "garbage_collection_threshold:0.6,pinned_use_background_threads:True,"
        "expandable_segments:True"
    )


def test_expandable_segments_already_on_is_never_recommended_again() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11", alloc_conf="expandable_segments:True")
    assert diagnosis.kind == "fragmentation"
    assert diagnosis.recommendation.alloc_conf is None
    assert diagnosis.recommendation.env is None
    assert any("already True" in a for a in diagnosis.recommendation.actions)


def test_expandable_segments_false_is_switched_on() -> None:
    rec = diagnose(
        FRAG, torch_version="2.11", alloc_conf="expandable_segments:False"
    ).recommendation
    assert rec.alloc_conf == "expandable_segments:True"


def test_max_split_size_already_small_is_a_no_op_before_2_1() -> None:
    rec = diagnose(FRAG, torch_version="1.13", alloc_conf="max_split_size_mb:64").recommendation
    assert rec.alloc_conf is None
    assert any("already 64" in a for a in rec.actions)


def test_invalid_current_setting_is_reported_and_left_out_not_a_crash() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11", alloc_conf="foo:1,max_split_size_mb:10")
    assert diagnosis.alloc_conf_problems == (
        "Unrecognized key 'foo' in CUDA allocator config.",
        "CachingAllocator option max_split_size_mb too small, must be >= 20",
    )
    assert diagnosis.recommendation.alloc_conf == "expandable_segments:True"
    assert any("has problems" in a for a in diagnosis.recommendation.actions)
    assert diagnosis.to_json_dict()["alloc_conf_problems"] == list(diagnosis.alloc_conf_problems)


def test_key_newer_than_the_release_is_dropped_from_the_merged_value() -> None:
    rec = diagnose(FRAG, torch_version="2.4", alloc_conf="large_segment_size_mb:64").recommendation
    assert rec.alloc_conf == "expandable_segments:True"


def test_cuda_malloc_async_backend_gets_no_native_only_setting() -> None:
    diagnosis = diagnose(FRAG, torch_version="2.11", alloc_conf="backend:cudaMallocAsync")
    assert diagnosis.recommendation.alloc_conf is None
    assert any("cudaMallocAsync" in a for a in diagnosis.recommendation.actions)


def test_backend_argument_alone_selects_cuda_malloc_async() -> None:
    rec = diagnose(FRAG, torch_version="2.11", backend="cudaMallocAsync").recommendation
    assert rec.alloc_conf is None


@pytest.mark.parametrize("current", [None, "garbage_collection_threshold:0.8"])
def test_other_kinds_get_actions_and_no_setting(current: str | None) -> None:
    rec = diagnose(CAPACITY, torch_version="2.11", alloc_conf=current).recommendation
    assert (rec.env, rec.alloc_conf) == (None, None)
    assert any("gradient accumulation" in a for a in rec.actions)
    assert any("inference_mode" in a for a in rec.actions)


def test_caveat_for_expandable_segments_with_max_split_before_2_5() -> None:
    rec = diagnose(FRAG, torch_version="2.3", alloc_conf="max_split_size_mb:256").recommendation
    assert rec.alloc_conf == "max_split_size_mb:256,expandable_segments:True"
    assert any("could assert" in a for a in rec.actions)


def test_jax_capacity_names_the_xla_knob() -> None:
    log = (
        "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
        "allocate 90.00GiB\n"
    )
    rec = diagnose(log).recommendation
    assert any("XLA_PYTHON_CLIENT_MEM_FRACTION" in a for a in rec.actions)


def test_vllm_capacity_names_gpu_memory_utilization() -> None:
    # the KV cache cannot hold one request of the model's length: the work, not the budget
    log = (
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        "that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.\n"
    )
    diagnosis = diagnose(log)
    assert (diagnosis.framework, diagnosis.kind) == ("vllm", "capacity")
    assert any("gpu_memory_utilization" in a for a in diagnosis.recommendation.actions)


def test_an_engine_budget_spent_on_the_weights_is_the_cap_that_bit() -> None:
    # public2 p-029, public4 t-009 (vLLM) and t-011 (SGLang): each thread's cause is the budget
    vllm = diagnose(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n"
    )
    assert (vllm.framework, vllm.kind) == ("vllm", "memory-fraction-cap")
    assert vllm.recommendation.actions[0].startswith("raise gpu_memory_utilization if nothing")
    sglang = diagnose(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.88.\n"
    )
    assert (sglang.framework, sglang.kind) == ("sglang", "memory-fraction-cap")
    assert sglang.recommendation.actions[0].startswith("raise --mem-fraction-static")
    assert sglang.summary.startswith("memory-fraction-cap: the engine's memory budget")


# What mutation testing found loose in the recommendation (``scripts/mutation.py --modules
# recommend``): the whole action list a job owner reads for each path of the setting, pinned word
# for word (each list read and checked against the rule it states before it was pinned).

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


# Boundary table for the recommendation: which setting, when none, the fraction, the first action.

G = 2**30
FRAG_FIGURES = Figures(
    requested_bytes=2 * G,
    total_bytes=80 * G,
    free_bytes=1 * G,
    allocated_bytes=70 * G,
    reserved_unallocated_bytes=7 * G,
)


TORCH_2_11 = TorchRange((2, 11), (2, 11))
SMALLER_BATCH = "reduce peak memory: a smaller batch (when training, gradient accumulation"


def rec(
    kind: str = "fragmentation",
    *,
    release: TorchRange = TORCH_2_11,
    current: str | None = None,
    rocm: bool = False,
    framework: str = "pytorch",
    figures: Figures = FRAG_FIGURES,
    contributing: tuple[str, ...] = (),
    phase: str | None = None,
    precontext: str = "",
    backend: str = allocconf.NATIVE,
    node: NodeEvidence | None = None,
    growth: Growth | None = None,
    shows_room: bool = False,
    steps: int = 20,
) -> Recommendation:
    event = OomEvent("torch", framework, "CUDA out of memory", figures, rocm=rocm)
    verdict = Verdict(kind, contributing, "", figures, shows_room)
    checked = allocconf.check(current, release, backend, rocm=rocm) if current is not None else None
    ctx = Context(event, verdict, release, checked, backend, node, growth, precontext, phase, steps)
    return recommend(ctx)


def cap_figures(allocated: int, requested: int) -> Figures:
    return Figures(requested_bytes=requested, total_bytes=100 * G, free_bytes=50 * G,
                   allocated_bytes=allocated, allowed_bytes=8 * G)  # fmt: skip


CAPACITY_FIGURES = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G,
                   allocated_bytes=77 * G, reserved_unallocated_bytes=0)  # fmt: skip


JAX_FRACTION = (  # {} is " if the GPU has room" unless other processes hold it
    "JAX preallocates 75% of the GPU: raise XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.9){}, or set "
    "XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand"
)


VLLM_FIRST = (
    "raise gpu_memory_utilization (default 0.9) if nothing else uses the GPU, or lower "
    "max_model_len / max_num_seqs"
)


TF_FIRST = (
    "reduce the batch size; use mixed precision "
    "(tf.keras.mixed_precision.set_global_policy('mixed_float16'))"
)


ISOLATE = (
    "isolate the GPU: other processes hold 3.00 GiB of it; stop them or make sure one pod gets "
    "the whole GPU (request nvidia.com/gpu; check time-slicing/MPS)"
)


SHARED = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G,
                 other_processes=(OtherProcess(9, 3 * G),))  # fmt: skip


CHECK = (
    "check what else holds the GPU (nvidia-smi --query-compute-apps=pid,used_memory "
    "--format=csv, or the node agent's GPUNodeReport)"
)


@pytest.mark.parametrize(
    "kind",
    ["capacity", "gpu-shared", "memory-fraction-cap", "leak", "non-pytorch-memory", "unknown"],
)
def test_only_fragmentation_gets_a_setting(kind: str) -> None:
    r = rec(kind)
    assert (r.env, r.alloc_conf) == (None, None)
    assert rec("fragmentation").alloc_conf == "expandable_segments:True"


def test_only_pytorch_gets_a_setting() -> None:
    assert rec(framework="jax").alloc_conf is None


@pytest.mark.parametrize(
    ("low", "high", "setting"),
    [
        ((2, 1), (2, 1), "expandable_segments:True"),
        ((2, 1), None, "expandable_segments:True"),
        ((2, 0), (2, 0), "max_split_size_mb:128"),
        ((2, 0), (2, 1), "max_split_size_mb:128"),  # 2.0 or 2.1: not every release has it
        ((1, 10), (1, 10), "max_split_size_mb:128"),
        ((1, 9), (1, 9), None),
        ((1, 9), (1, 10), None),
        (None, None, None),
    ],
)
def test_the_setting_by_release(
    low: tuple[int, int] | None, high: tuple[int, int] | None, setting: str | None
) -> None:
    assert rec(release=TorchRange(low, high)).alloc_conf == setting


def test_rocm_gets_max_split_size_mb_on_any_release() -> None:
    assert rec(rocm=True).alloc_conf == "max_split_size_mb:128"


@pytest.mark.parametrize(
    ("current", "setting"),
    [
        ("max_split_size_mb:20", "max_split_size_mb:128"),  # 2.10+ accepts 20: not in (20, 128]
        ("max_split_size_mb:21", None),
        ("max_split_size_mb:128", None),
        ("max_split_size_mb:129", "max_split_size_mb:128"),  # too big to stop splits of 128
        ("max_split_size_mb:-1", "max_split_size_mb:128"),  # "no limit" on 2.10+
    ],
)
def test_max_split_already_set_within_20_to_128(current: str, setting: str | None) -> None:
    # ROCm on 2.11: expandable_segments is not available, max_split_size_mb is the setting
    r = rec(rocm=True, current=current)
    assert r.alloc_conf == setting
    if setting is None:
        already = current.split(":")[1]
        assert r.actions[0].startswith(f"max_split_size_mb is already {already}, so no allocator")
        assert "torch >= 2.1 has expandable_segments" not in r.actions[0]  # not on ROCm


def test_max_split_already_set_before_2_1_points_at_expandable_segments() -> None:
    r = rec(release=TorchRange((2, 0), (2, 0)), current="max_split_size_mb:64")
    assert r.alloc_conf is None
    assert "(torch >= 2.1 has expandable_segments:True)" in r.actions[0]


def test_max_split_20_is_rejected_before_2_10_so_it_is_replaced() -> None:
    r = rec(release=TorchRange((2, 0), (2, 0)), current="max_split_size_mb:20")
    assert r.alloc_conf == "max_split_size_mb:128"
    r = rec(release=TorchRange((2, 0), (2, 0)), current="max_split_size_mb:21")
    assert r.alloc_conf is None


@pytest.mark.parametrize(
    ("current", "setting"),
    [
        ("expandable_segments:True", None),
        ("expandable_segments:False", "expandable_segments:True"),
        ("expandable_segments:true", "expandable_segments:True"),  # rejected value: replaced
    ],
)
def test_expandable_segments_already_true(current: str, setting: str | None) -> None:
    r = rec(current=current)
    assert r.alloc_conf == setting
    if setting is None:
        assert r.actions[0].startswith("expandable_segments is already True")


def test_a_merged_value_the_release_rejects_is_not_recommended() -> None:
    # async backend from the caller: the native-only setting is not recommended
    r = rec(backend=allocconf.ASYNC)
    assert r.alloc_conf is None
    assert r.actions[0].startswith("the job uses backend:cudaMallocAsync")


def test_caveats_before_2_5_only() -> None:
    current = "garbage_collection_threshold:0.6"
    before = rec(release=TorchRange((2, 4), (2, 4)), current=current)
    assert any("could assert" in a for a in before.actions)
    assert any("CUDA IPC" in a for a in before.actions)
    after = rec(release=TorchRange((2, 5), (2, 5)), current=current)
    assert not any("could assert" in a or "CUDA IPC" in a for a in after.actions)
    plain = rec(release=TorchRange((2, 4), (2, 4)))
    assert not any("could assert" in a for a in plain.actions)
    assert any("CUDA IPC" in a for a in plain.actions)


def test_fragmentation_notes_for_contributing_capacity_and_leak() -> None:
    r = rec(contributing=("capacity", "leak"))
    assert r.alloc_conf == "expandable_segments:True"
    assert r.actions[0].startswith("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: lets")
    assert "7.00 GiB reserved" in r.actions[0]
    assert any(a.startswith("the GPU stays nearly full") for a in r.actions)
    assert any(a.startswith("memory also rose steadily") for a in r.actions)
    assert not any(a.startswith("the GPU stays") for a in rec().actions)


@pytest.mark.parametrize(
    ("allocated", "requested", "fraction"),
    [
        (6 * G, 4 * G, "0.20"),  # needs 0.10 of the GPU: twice is 0.20 exactly
        (6 * G, 4 * G + 2**20, "0.25"),  # a MiB more: rounded up to the next 0.05
        (10 * G, 2 * G + 512 * 2**20, "0.25"),  # 0.125 * 2 = 0.25
        (40 * G, 10 * G, "1.00"),  # 0.5 * 2
        (50 * G, 10 * G, "1.00"),  # 0.6 * 2, capped at the whole GPU
    ],
)
def test_the_fraction_to_raise_the_cap_to(allocated: int, requested: int, fraction: str) -> None:
    r = rec("memory-fraction-cap", figures=cap_figures(allocated, requested))
    assert r.actions[0] == (
        f"raise the per-process memory fraction to about {fraction} "
        "(torch.cuda.set_per_process_memory_fraction): the cap, not the GPU, ran out"
    )


def test_the_fraction_for_jax_and_vllm_names_their_knob() -> None:
    figures = cap_figures(6 * G, 4 * G)
    jax = rec("memory-fraction-cap", framework="jax", figures=figures)
    assert jax.actions == ("raise XLA_PYTHON_CLIENT_MEM_FRACTION to about 0.20",)
    vllm = rec("memory-fraction-cap", framework="vllm", figures=figures)
    assert vllm.actions == ("raise gpu_memory_utilization to about 0.20",)


@pytest.mark.parametrize(
    ("phase", "start"),
    [
        ("optimizer-step", "it failed in optimizer.step() creating the optimizer's state"),
        ("backward", "it failed in the backward pass"),
        ("graph-capture", "it failed capturing a CUDA graph"),
        ("loading", "it failed loading or moving the model to the GPU"),
        ("retry-exhausted", "the job's own retry loop already shrank the batch"),
    ],
)
def test_a_capacity_failure_starts_with_its_phases_action(phase: str, start: str) -> None:
    r = rec("capacity", figures=CAPACITY_FIGURES, phase=phase)
    assert r.actions[0].startswith(start)
    smaller = [a for a in r.actions if a.startswith(SMALLER_BATCH)]
    assert smaller == ([] if phase == "retry-exhausted" else [smaller[0]])


def test_forward_or_no_phase_starts_with_the_smaller_batch() -> None:
    for phase in ("forward", None):
        actions = rec("capacity", figures=CAPACITY_FIGURES, phase=phase).actions
        assert actions[0].startswith(SMALLER_BATCH)


def test_inference_without_a_backward_frame_starts_with_inference_mode() -> None:
    # issue 24: inference gets its own list (recommend.INFERENCE_PEAK), inference_mode first
    r = rec("capacity", figures=CAPACITY_FIGURES, precontext="running inference on 100 prompts\n")
    assert r.actions[0].startswith("run under torch.inference_mode()")
    r = rec("capacity", figures=CAPACITY_FIGURES, precontext="inference\n  loss.backward()\n")
    assert r.actions[0].startswith(SMALLER_BATCH)
    r = rec("capacity", figures=CAPACITY_FIGURES, precontext="inference done\n", framework="jax")
    assert r.actions[0].startswith("JAX preallocates 75% of the GPU")


def test_fragmentation_without_a_setting_or_a_note_gets_the_capacity_actions() -> None:
    # torch 1.9: no setting exists, and the reason is in the actions already
    r = rec(release=TorchRange((1, 9), (1, 9)), phase="backward")
    assert r.actions[0].startswith("this torch release has no allocator setting")
    assert not any(a.startswith("it failed in the backward pass") for a in r.actions)


def test_a_request_larger_than_the_gpu_first_asks_whether_that_size_is_meant() -> None:
    huge = Figures(requested_bytes=81 * G, total_bytes=80 * G, free_bytes=1 * G)
    r = rec("capacity", figures=huge)
    assert r.actions[0].startswith(
        "check that a 81.00 GiB tensor is meant: it is larger than the whole 80.00 GiB GPU"
    )
    assert not any(a.startswith(SMALLER_BATCH) for a in r.actions)
    same = Figures(requested_bytes=80 * G, total_bytes=80 * G, free_bytes=1 * G)
    assert rec("capacity", figures=same).actions[0].startswith(SMALLER_BATCH)


def test_gpu_shared_tells_an_unallocated_pod_to_request_the_gpu() -> None:
    shared = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G)
    says = "this pod used a GPU the kubelet did not allocate to it: request nvidia.com/gpu"
    assert says in rec("gpu-shared", figures=shared, node=NodeEvidence(allocated=False)).actions
    assert says not in rec("gpu-shared", figures=shared, node=NodeEvidence(allocated=True)).actions
    assert says not in rec("gpu-shared", figures=shared).actions


def test_a_current_setting_with_problems_is_named_and_left_out() -> None:
    r = rec(current="foo:1")
    assert r.alloc_conf == "expandable_segments:True"
    assert r.actions[-1] == (
        "the current PYTORCH_CUDA_ALLOC_CONF has problems for this release (left out of the "
        "recommended value): Unrecognized key 'foo' in CUDA allocator config."
    )
    r = rec("capacity", figures=CAPACITY_FIGURES, current="foo:1")
    assert r.actions[-1].startswith(
        "the current PYTORCH_CUDA_ALLOC_CONF has problems for this release: "
    )


@pytest.mark.parametrize(
    ("framework", "actions"),
    [
        ("jax", (JAX_FRACTION.format(" if the GPU has room"),
                 "reduce the batch size or shard the computation across devices")),
        ("tensorflow", (TF_FIRST, "with other processes on the GPU, enable "
                                  "tf.config.experimental.set_memory_growth")),
        ("cupy", ("free cached blocks between phases: "
                  "cupy.get_default_memory_pool().free_all_blocks()",
                  "process the data in smaller pieces")),
        ("vllm", (VLLM_FIRST, "use tensor_parallel_size > 1 or a quantized model")),
    ],
)  # fmt: skip
def test_capacity_actions_by_stack(framework: str, actions: tuple[str, ...]) -> None:
    assert rec("capacity", figures=CAPACITY_FIGURES, framework=framework).actions == actions


@pytest.mark.parametrize(
    ("framework", "actions"),
    [
        ("pytorch", (ISOLATE,)),
        ("cupy", (ISOLATE,)),
        ("jax", (ISOLATE, JAX_FRACTION.format(""))),
        ("tensorflow", (ISOLATE, TF_FIRST)),
        ("vllm", (ISOLATE, VLLM_FIRST)),
    ],
)
def test_gpu_shared_actions_by_stack(framework: str, actions: tuple[str, ...]) -> None:
    assert rec("gpu-shared", figures=SHARED, framework=framework).actions == actions


def test_pytorch_capacity_actions() -> None:
    assert rec("capacity", figures=CAPACITY_FIGURES).actions == (
        "reduce peak memory: a smaller batch (when training, gradient accumulation keeps the "
        "effective batch)",
        "use mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16))",
        "enable activation checkpointing "
        "(torch.utils.checkpoint / model.gradient_checkpointing_enable())",
        "for inference, run under torch.inference_mode() so no autograd graph is kept",
        "shard the model (FSDP / DeepSpeed ZeRO) or use a GPU with more memory",
    )


def test_leak_actions_name_the_growth() -> None:
    grew = Growth("samples", 12, 40 * G, 43 * G, 1.0)
    actions = rec("leak", figures=CAPACITY_FIGURES, growth=grew).actions
    assert actions[0] == (
        "memory grew by 3.00 GiB over 12 points: something keeps tensors alive across steps"
    )
    assert actions[1:] == rec("leak", figures=CAPACITY_FIGURES).actions
    assert actions[1].startswith("accumulate numbers, not tensors: total_loss += loss.item()")


def test_non_pytorch_memory_actions_by_family() -> None:
    def actions(family: str, framework: str = "tensorflow") -> tuple[str, ...]:
        event = OomEvent(family, framework, "m", CAPACITY_FIGURES)
        verdict = Verdict("non-pytorch-memory", (), "", CAPACITY_FIGURES)
        ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
        return recommend(ctx).actions

    grow = (
        "let the framework allocate on demand so the library has room (TensorFlow: "
        "tf.config.experimental.set_memory_growth / allow_growth; JAX: "
        "XLA_PYTHON_CLIENT_PREALLOCATE=false or a lower XLA_PYTHON_CLIENT_MEM_FRACTION)"
    )
    assert actions("nccl") == actions("cuda-library", "jax") == (grow, "reduce the batch size")
    assert actions("torch", "pytorch") == (
        "find what else allocates in this process outside PyTorch (CuPy/JAX/TensorRT/custom CUDA "
        "extensions, cuDNN benchmark workspaces) and free or limit it",
    )


@pytest.mark.parametrize(("family", "room"), [
    ("nccl", "leave NCCL headroom: create the process group (and run a first collective) before "
     "loading the model, call torch.cuda.empty_cache() before collectives, or lower "
     "NCCL_BUFFSIZE"),
    ("cuda-library", "leave room for cuBLAS/cuDNN workspaces: torch.cuda.empty_cache() before "
     "the failing call, or CUBLAS_WORKSPACE_CONFIG=:4096:8"),
])  # fmt: skip
def test_a_library_that_found_the_gpu_full_is_told_to_make_room_and_to_look(
    family: str, room: str
) -> None:
    event = OomEvent(family, "pytorch", "m", Figures())
    verdict = Verdict("unknown", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
    actions = recommend(ctx).actions
    assert actions[0].startswith("the log has no usable memory figures: check what else holds")
    assert actions[1:3] == (room, REDUCE_PEAK[0])
    assert actions[3].startswith("if it fails at start-up") and len(actions) == 4
    assert recommend(ctx).alloc_conf is None


def test_unknown_actions() -> None:
    assert rec("unknown", figures=Figures()).actions == (
        "the log has no usable memory figures: check what else holds the GPU "
        "(nvidia-smi --query-compute-apps=pid,used_memory --format=csv, or the node agent's "
        "GPUNodeReport)",
        "if it fails at start-up (context creation, .cuda()), the GPU was already full: isolate "
        "the GPU",
    )
    # issue 24: host memory is its own kind, host-oom-killed, with the host actions
    host = OomEvent("host-alloc", "pytorch", "m", Figures())
    ctx = Context(host, Verdict("host-oom-killed", (), "", Figures()), TORCH_2_11, None,
                  "native", None, None)  # fmt: skip
    assert recommend(ctx).actions[0] == (
        "raise the container's memory limit (and set the request equal to it)"
    )


def test_unknown_with_figures_that_show_room_says_so_not_that_there_are_none() -> None:
    # the verdict says the figures show room beyond the full-GPU margin (classify's fits): say
    # so; figures at the request itself are a full GPU since issue 24, not "room"
    room = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=2 * G + 13 * 1024**2)
    assert rec("unknown", figures=room, shows_room=True).actions[0] == (
        "the figures show room (2.01 GiB free for the 2.00 GiB request): the memory was taken and "
        "given back around the failure (another process, or a large request the driver could "
        "not place near full); if it happens again, " + CHECK
    )
    full = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=2 * G)
    assert rec("unknown", figures=full).actions[0] == (
        "the log has no usable memory figures: " + CHECK
    )
    no_free = Figures(requested_bytes=2 * G, total_bytes=80 * G)
    assert rec("unknown", figures=no_free).actions[0].startswith("the log has no usable")


def test_unknown_memory_outside_pytorch_says_the_log_cannot_tell_whose() -> None:
    # rule 6: both kinds contribute (the message lists no process)
    figures = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G)
    both = ("gpu-shared", "non-pytorch-memory")
    assert rec("unknown", figures=figures, contributing=both).actions[0] == (
        "memory outside this process's PyTorch cache holds the GPU, and the log cannot tell "
        "whose (another process, or this one outside PyTorch): " + CHECK
    )
    for one in both:
        first = rec("unknown", figures=figures, contributing=(one,)).actions[0]
        assert first.startswith("the log has no usable memory figures: ")


def test_host_oom_actions_by_limit_and_request() -> None:
    from gpu_auditor.diagnosis.recommend import host_recommendation

    first = "raise the container's memory limit (and set the request equal to it)"
    assert host_recommendation(None, None).actions[:2] == (
        "the container has no memory limit: the node itself ran out; set requests and limits",
        first,
    )
    assert host_recommendation(8 * G, 4 * G).actions[:2] == (
        "the memory request (4.00 GiB) is below the limit (8.00 GiB): the node may be "
        "overcommitted; set request = limit",
        first,
    )
    assert host_recommendation(8 * G, 8 * G).actions[0] == first
    assert host_recommendation(8 * G, None).actions[0] == first
    assert len(host_recommendation(8 * G, 8 * G).actions) == 5


# Boundary cases for the recommendation's rules that mutation testing found loose (issue 18).

CAP_ACTION = "(torch.cuda.set_per_process_memory_fraction): the cap, not the GPU, ran out"


def rec_of(kind: str, figures: Figures, *, framework: str = "pytorch", rocm: bool = False,
        current: allocconf.Checked | None = None, precontext: str = "",
        steps: int = 20) -> Recommendation:
    event = OomEvent("torch", framework, "CUDA out of memory", figures, rocm=rocm)
    ctx = Context(event, Verdict(kind, (), "", figures), TORCH_2_11, current, allocconf.NATIVE,
                  None, None, precontext, None, steps)
    return recommend(ctx)


def cap(*, total: int | None, allocated: int | None, unallocated: int, requested: int,
        allowed: int) -> str:
    figures = Figures(requested_bytes=requested, total_bytes=total, free_bytes=8 * G,
                      allocated_bytes=allocated, reserved_unallocated_bytes=unallocated,
                      allowed_bytes=allowed)
    return rec_of("memory-fraction-cap", figures).actions[0]


BACKWARD_TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 7, in train\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


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


def test_a_request_larger_than_the_gpu_gets_the_size_the_fast_path_then_splitting() -> None:
    huge = Figures(requested_bytes=81 * G, total_bytes=80 * G, free_bytes=1 * G)
    actions = rec_of("capacity", huge).actions
    assert len(actions) == 3
    assert "an input larger than intended" in actions[0] and "its shape is wrong" in actions[0]
    assert actions[1].startswith("check that the memory-efficient path runs: attention without")
    assert actions[2].startswith("reduce the batch if the tensor grows with it; otherwise split")
    assert rec_of("capacity", huge, framework="tensorflow").actions[0].startswith("reduce the")


def test_fragmentation_outside_pytorch_gets_its_stacks_capacity_actions() -> None:
    r = rec_of("fragmentation", FRAG_FIGURES, framework="jax")
    assert r.alloc_conf is None
    assert r.actions == (
        "JAX preallocates 75% of the GPU: raise XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.9) if "
        "the GPU has room, or set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand",
        "reduce the batch size or shard the computation across devices",
    )


def test_fragmentation_with_a_setting_gets_no_capacity_actions() -> None:
    r = rec_of("fragmentation", FRAG_FIGURES)
    assert r.alloc_conf == "expandable_segments:True"
    assert not any(a.startswith("reduce peak memory") for a in r.actions)


def test_a_merged_value_with_a_key_rocm_ignores_is_not_recommended() -> None:
    # the caller checked the current setting without the ROCm flag, so expandable_segments
    # was kept; on ROCm the recommender re-checks the merged value and rejects it
    current = allocconf.check("expandable_segments:True", TORCH_2_11, allocconf.NATIVE)
    r = rec_of("fragmentation", FRAG_FIGURES, rocm=True, current=current)
    assert r.alloc_conf is None
    assert r.env is None
    # the same current setting off ROCm: expandable_segments is already True, nothing to set
    assert rec_of("fragmentation", FRAG_FIGURES, current=current).alloc_conf is None
    # and on ROCm without a current setting: max_split_size_mb
    assert rec_of("fragmentation", FRAG_FIGURES, rocm=True).alloc_conf == "max_split_size_mb:128"


def test_inference_is_read_in_the_last_16384_characters() -> None:
    inside = "inference" + " " * 16375  # 16384 characters: the word is the first of them
    outside = "inference" + " " * 16376  # 16385: its first letter falls outside
    assert len(inside) == 16384 and len(outside) == 16385
    assert looks_like_inference(inside)
    assert not looks_like_inference(outside)


@pytest.mark.parametrize(
    ("framework", "phase"),
    [("pytorch", "backward"), ("jax", None), ("tensorflow", None), (None, None)],
)
def test_a_phase_is_read_for_pytorch_only(framework: str | None, phase: str | None) -> None:
    event = OomEvent("torch", framework, "CUDA out of memory", FRAG_FIGURES)
    assert phase_of(event, BACKWARD_TB) == phase


# -- issue 24: the inference list, CUDA graphs' private pools, a colocated engine ---------------

INFERENCE_LIST = (
    "run under torch.inference_mode() so no autograd graph is kept",
    "reduce peak memory: fewer sequences per batch, or a shorter maximum input length",
    "use bf16/fp16 weights and activations, or a quantized model",
)


def test_an_inference_job_gets_the_inference_list_and_no_training_actions() -> None:
    r = rec("capacity", figures=CAPACITY_FIGURES, precontext="running inference on 100 prompts\n")
    assert r.actions == (
        *INFERENCE_LIST,
        "shard the model (FSDP / DeepSpeed ZeRO) or use a GPU with more memory",
    )
    assert not any("gradient accumulation" in a or "checkpointing" in a for a in r.actions)
    # a training job keeps the training list, gradient accumulation first
    train = rec("capacity", figures=CAPACITY_FIGURES, precontext="epoch 1\n  loss.backward()\n")
    assert train.actions[0].startswith(SMALLER_BATCH)
    assert not any(a in INFERENCE_LIST for a in train.actions)


def _pools(pools: int) -> Figures:
    return Figures(requested_bytes=2 * G, total_bytes=140 * G, free_bytes=1 * G,
                   allocated_bytes=100 * G, reserved_unallocated_bytes=0,
                   private_pool_bytes=pools)  # fmt: skip


POOL_FIX = (
    "10.00 GiB of PyTorch's memory is in CUDA graphs' private pools (each captured graph keeps "
    "its own pool, and a cache of graphs per shape grows with every new shape): capture a few "
    "padded shapes (buckets) instead of every length, share one pool across captures "
    "(pool=torch.cuda.graph_pool_handle()), bound the graph cache, or run rare shapes eagerly"
)


def test_private_pools_from_a_tenth_of_the_allocated_memory_are_named_first() -> None:
    # 10 GiB of 100 GiB allocated: named, before the kind's actions; a byte less, or 9.9 %, not
    at = rec("capacity", figures=_pools(10 * G)).actions
    assert at[0] == POOL_FIX
    assert at[1].startswith(SMALLER_BATCH)
    for pools in (10 * G - 1, round(9.9 * G), 0, None):
        below = rec("capacity", figures=_pools(pools)).actions  # type: ignore[arg-type]
        assert below[0].startswith(SMALLER_BATCH), pools
        assert not any("private pools" in a for a in below), pools


def test_private_pools_are_named_whatever_the_kind_but_not_without_an_allocated_figure() -> None:
    assert rec("leak", figures=_pools(10 * G)).actions[0] == POOL_FIX
    assert rec("fragmentation", figures=_pools(10 * G)).actions[0] != POOL_FIX  # the setting
    assert POOL_FIX in rec("fragmentation", figures=_pools(10 * G)).actions
    none = Figures(requested_bytes=2 * G, private_pool_bytes=10 * G)
    assert not any("private pools" in a for a in rec("capacity", figures=none).actions)


def _engine(value: str) -> str:
    return (
        "a colocated inference engine reserved gpu_memory_utilization="
        f"{value} of the GPU for its weights and KV cache at start: lower it (the KV cache "
        "shrinks, the engine still runs) so the training side has room, or give the engine its "
        "own GPU"
    )


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("llm = LLM(model, gpu_memory_utilization=0.9)", "0.9"),
        ("engine args: gpu_memory_utilization: 0.85,", "0.85"),
        ("gpu_memory_utilization = .6", ".6"),
        ("gpu_memory_utilization=1.0", "1.0"),
        ("gpu_memory_utilization=1.5", None),  # no fraction of a GPU
        ("gpu_memory_utilization=90", None),
        ("gpu_memory_utilization is a setting", None),
    ],
)
def test_a_colocated_engine_named_in_the_log_is_the_lever(line: str, value: str | None) -> None:
    for kind in ("capacity", "leak"):
        actions = rec(kind, figures=CAPACITY_FIGURES, precontext=f"{line}\nstep 1\n").actions
        assert (actions[0] == _engine(value)) if value else not any(
            "colocated" in a for a in actions
        ), (kind, line)


def test_a_colocated_engine_is_named_only_for_a_pytorch_capacity_or_leak() -> None:
    log = "llm = LLM(model, gpu_memory_utilization=0.9)\n"
    for kind in ("fragmentation", "gpu-shared", "non-pytorch-memory", "unknown"):
        actions = rec(kind, figures=CAPACITY_FIGURES, precontext=log).actions
        assert not any("colocated" in a for a in actions), kind
    jax = rec("capacity", figures=CAPACITY_FIGURES, precontext=log, framework="jax").actions
    assert not any("colocated" in a for a in jax)


def test_a_colocated_engine_is_read_from_the_last_64_kib_before_the_failure() -> None:
    line = "gpu_memory_utilization=0.9\n"
    for filler, read in ((65536 - len(line), True), (65536 - len(line) + 1, False)):
        log = line + "x" * (filler - 1) + "\n"
        actions = rec("capacity", figures=CAPACITY_FIGURES, precontext=log).actions
        assert (actions[0] == _engine("0.9")) is read, filler


HOST = (
    "raise the container's memory limit (and set the request equal to it)",
    "use fewer DataLoader workers (each worker holds its own copy of the dataset object)",
    "set pin_memory=False or a smaller prefetch_factor (pinned host buffers count against the "
    "limit)",
    "load checkpoints with torch.load(..., mmap=True) or straight to the GPU "
    "(map_location='cuda')",
    "a memory-backed /dev/shm (emptyDir medium: Memory) counts against the limit: size it "
    "explicitly",
)


@pytest.mark.parametrize(
    ("family", "message", "actions"),
    [
        ("host-killed", "DataLoader worker (pid 19597) is killed by signal: Killed",
         (HOST[1], HOST[0], *HOST[2:])),
        ("host-killed", "Killed", HOST),
        ("host-alloc", "DefaultCPUAllocator: can't allocate memory", HOST),
    ],
)  # fmt: skip
def test_host_memory_gets_the_host_actions_workers_first_for_a_killed_worker(
    family: str, message: str, actions: tuple[str, ...]
) -> None:
    event = OomEvent(family, None, message, Figures())
    verdict = Verdict("host-oom-killed", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
    assert recommend(ctx).actions == actions


def test_another_process_no_one_named_gets_the_check_to_run_on_the_node() -> None:
    # gpu-shared from the first CUDA call or from unseen memory: no process to name
    assert rec("gpu-shared", figures=CAPACITY_FIGURES).actions == (
        "find what else holds the GPU: nvidia-smi --query-compute-apps=pid,used_memory "
        "--format=csv on the node, or its GPUNodeReport (kubectl get gpunodereport NODE -o yaml "
        "lists each pod's memory on each GPU); stop it (it may be a stale process of an earlier "
        "run of this job)",
        "make sure one pod gets the whole GPU (request nvidia.com/gpu; check time-slicing/MPS)",
    )
    named = Figures(requested_bytes=2 * G, total_bytes=80 * G, free_bytes=1 * G,
                    other_processes=(OtherProcess(872, 60 * G),))  # fmt: skip
    assert rec("gpu-shared", figures=named).actions == (
        "isolate the GPU: other processes hold 60.00 GiB of it; stop them or make sure one pod "
        "gets the whole GPU (request nvidia.com/gpu; check time-slicing/MPS)",
    )


def test_fragmentation_without_a_finished_step_gets_the_setting_as_an_action_only() -> None:
    # thresholds.SETTING_MIN_FINISHED_STEPS: one message shows one allocation, not the step; in
    # the public threads no log without progress that read as fragmentation was fixed by a setting
    r = rec(steps=0)
    assert r.alloc_conf is None and r.env is None
    assert r.actions[0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may let")
    assert "no finished step" in r.actions[0] and "not as the fix" in r.actions[0]
    assert r.actions[1].startswith(SMALLER_BATCH)
    # one finished step is enough here (classify asks a short run for more idle cache)
    assert rec(steps=1).alloc_conf == "expandable_segments:True"


# -- issue 24, third round: an inference engine capturing its CUDA graphs ----------------------


@pytest.mark.parametrize(
    ("precontext", "first"),
    [
        (
            "(VllmWorker rank=3 pid=1090) INFO Capturing CUDA graphs\n",
            "vLLM ran out capturing its CUDA graphs, after its memory budget went to the weights "
            "and the KV cache: lower gpu_memory_utilization so capture has room (the KV cache "
            "shrinks, the engine still runs), capture fewer batch sizes (max_num_seqs, "
            "cudagraph_capture_sizes), or run it eagerly (--enforce-eager)",
        ),
        (
            "[2026-01-02 10:00:00] sglang: Capture cuda graph begin.\n",
            "SGLang ran out capturing its CUDA graphs, after its memory budget went to the weights "
            "and the KV cache: lower --mem-fraction-static so capture has room (the KV cache "
            "shrinks, the engine still runs), capture fewer batch sizes (--cuda-graph-max-bs), or "
            "run it eagerly (--disable-cuda-graph)",
        ),
    ],
)
def test_an_engine_capturing_its_graphs_is_told_its_own_levers(precontext: str, first: str) -> None:
    for kind in ("capacity", "unknown", "non-pytorch-memory"):
        r = rec(kind, figures=CAPACITY_FIGURES, phase="graph-capture", precontext=precontext)
        assert r.actions[0] == first, kind
    # not outside the capture, and not without an engine named in the log
    assert not any("capturing its CUDA graphs" in a for a in rec(
        "capacity", figures=CAPACITY_FIGURES, phase="forward", precontext=precontext).actions)
    assert not any("capturing its CUDA graphs" in a for a in rec(
        "capacity", figures=CAPACITY_FIGURES, phase="graph-capture",
        precontext="torch.cuda.graph(g)\n").actions)


def test_a_vllm_workers_prefixed_traceback_gives_the_phase_and_the_engines_levers() -> None:
    # public7 z-008's shape: vLLM V1's worker prefixes every line of the traceback it logs
    prefix = "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] "
    frames = [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/site-packages/vllm/compilation/backends.py", line 681,'
        " in __call__",
        "    with torch.cuda.graph(cudagraph, pool=self.graph_pool):",
        '  File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 84, in '
        "capture_end",
        "    super().capture_end()",
        "RuntimeError: CUDA error: out of memory",
    ]
    d = diagnose("".join(prefix + line + "\n" for line in frames))
    out = d.to_json_dict()
    assert (out["phase"], out["rank"]) == ("graph-capture", "1090")
    assert d.recommendation.actions[0].startswith("vLLM ran out capturing its CUDA graphs")


def test_llama_cpp_is_told_its_own_levers_not_pytorch_s() -> None:
    """public9 o-008: ollama offloaded 32 of 33 layers on its own estimate and llama.cpp's
    compute buffer then failed; OLLAMA_GPU_OVERHEAD fixed it."""
    d = diagnose(
        "ollama[1]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2508.00 MiB on device "
        "0: cudaMalloc failed: out of memory\n"
    )
    assert (d.framework, d.kind, d.recommendation.alloc_conf) == ("llama.cpp", "capacity", None)
    actions = d.recommendation.actions
    assert actions[0].startswith("put fewer layers on the GPU (llama.cpp --n-gpu-layers")
    assert any("OLLAMA_GPU_OVERHEAD" in a for a in actions)
    assert not any("torch" in a or "FSDP" in a for a in actions)


def test_an_eviction_is_told_to_request_what_it_uses_first() -> None:
    """public11 t-011, t-012, v-030: the kubelet evicted the pod under node memory pressure."""
    d = diagnose("Epoch 1/100\nThe node was low on resource: memory. Container main was using "
                 "2519384Ki, which exceeds its request of 0.\n")
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert d.summary == (
        "host-oom-killed: the kubelet evicted the pod: the node was low on host (CPU) memory, "
        "not GPU memory"
    )
    assert d.recommendation.actions[0].startswith("set the pod's memory request to what it uses")
    assert d.recommendation.actions[1:] == HOST_FIXES


STACK_ACTIONS: list[tuple[str, str, str, tuple[str, ...]]] = [
    # each stack's own levers, exactly as the user reads them (recommend._kind_actions and
    # _framework_actions: pinned here, where recommend's mutants are run)
    ('tgi',
     'Error: Not enough memory to handle 4096 prefill tokens. You need to decrease '
     '`--max-batch-prefill-tokens`\n',
     'capacity', (
         'lower --max-batch-prefill-tokens (and --max-batch-total-tokens / '
         '--max-total-tokens) until the warm-up fits',
         'shard the model over more GPUs (--num-shard) or serve a quantized model '
         '(--quantize)',
     )),
    ('tf-start',
     '2023-01-01 00:00:00: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1] Created '
     'TensorFlow device (/job:localhost/replica:0/task:0/device:GPU:0 with 7000 MB '
     'memory)\n2023-01-01 00:00:01: E tensorflow/stream_executor/cuda/cuda_driver.cc:1] '
     'failed to allocate 7.00G (7516192768 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: '
     'out of memory\n',
     'memory-fraction-cap', (
         'set a lower per_process_gpu_memory_fraction (e.g. 0.8: '
         'tf.compat.v1.GPUOptions(per_process_gpu_memory_fraction=0.8)) or let TensorFlow '
         'grow its memory instead of reserving it at start '
         '(tf.config.experimental.set_memory_growth(gpu, True) / allow_growth=True)',
         'check what else holds part of the GPU (a display, another process: nvidia-smi)',
     )),
    ('vllm-start',
     'ValueError: Free memory on device (10.0/79.15 GiB) on startup is less than desired '
     'GPU memory utilization (0.9, 71.24 GiB). Decrease GPU memory utilization or reduce '
     'GPU memory used by other processes.\n',
     'gpu-shared', (
         'lower gpu_memory_utilization to at most 0.12 (what was free at start), or stop '
         "what else holds the GPU (nvidia-smi; the node's GPUNodeReport names pods)",
     )),
    ('onnx-limit',
     'onnxruntime::BFCArena::AllocateRawInternal(size_t, bool) Available memory of 0 is '
     'smaller than requested bytes of 135383040\n',
     'memory-fraction-cap', (
         "raise the CUDA execution provider's gpu_mem_limit (or leave it unset) if the "
         'GPU has room; arena_extend_strategy=kSameAsRequested wastes less of the limit',
         'run smaller inputs or batches',
     )),
    ('ray',
     'ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on '
     'memory.\n',
     'host-oom-killed', (
         "give Ray's tasks and actors memory to match what they use (memory=... in their "
         "options) so fewer run at once on a node, or raise the pod's memory limit",
         "raise the container's memory limit (and set the request equal to it)",
         "Ray's monitor kills at RAY_memory_usage_threshold (0.95 of the node's memory by "
         'default): a job that needs that much needs more memory, not a higher threshold',
     )),
    ('sglang',
     'ValueError: Loaded weights leave no GPU memory for the KV cache under '
     '--mem-fraction-static=0.88.\n',
     'memory-fraction-cap', (
         'raise --mem-fraction-static if nothing else uses the GPU (the KV cache gets '
         'what the weights leave of the budget)',
         'serve a quantized or smaller model, or shard it over more GPUs (tensor '
         'parallelism)',
     )),
]


@pytest.mark.parametrize(("stack", "log", "kind", "actions"), STACK_ACTIONS,
                         ids=[row[0] for row in STACK_ACTIONS])
def test_each_stack_is_told_its_own_levers(
    stack: str, log: str, kind: str, actions: tuple[str, ...]
) -> None:
    d = diagnose(log)
    assert (d.kind, d.recommendation.actions) == (kind, actions), stack


@pytest.mark.parametrize(("line", "framework", "second"), [
    ("cv2.error: OpenCV(4.4.0) alloc.cpp:73: error: (-4:Insufficient memory) Failed to allocate "
     "6291456 bytes in function 'cv::OutOfMemoryError'", "opencv", "a memory-backed /dev/shm"),
])  # fmt: skip
def test_host_memory_outside_pytorch_gets_no_dataloader_levers(
    line: str, framework: str | None, second: str
) -> None:
    """The review of the fifth round: OpenCV's host failure was named PyTorch's and told to use
    fewer DataLoader workers."""
    d = diagnose(line + "\n")
    assert (d.kind, d.framework) == ("host-oom-killed", framework)
    assert d.recommendation.actions[0].startswith("raise the container's memory limit")
    assert d.recommendation.actions[1].startswith(second)
    assert not any("DataLoader" in a for a in d.recommendation.actions)


@pytest.mark.parametrize("log", [
    # Faiss (its benchs/bench_gpu_1bn.py), XGBoost (public15 v-010), ONNX Runtime, Paddle
    "Error: 'err == cudaSuccess' failed: StandardGpuResources: alloc fail type "
    "TemporaryMemoryOverflow dev 0 space Device stream 0x7effcc5f47a0 size 4513349632 bytes "
    "(cudaMalloc error out of memory [2])\n",
    "device_helpers.cuh:428: Memory allocation error on worker 3: Caching allocator\n"
    "- Free memory: 224067584\n- Requested memory: 878511352\n",
    "Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available memory "
    "is only 416.625000MB.\n",
])  # fmt: skip
def test_another_stack_s_capacity_gets_no_pytorch_lever(log: str) -> None:
    """The review of the sixth round: Faiss, XGBoost and TensorRT failures were told to use
    torch.autocast and torch.utils.checkpoint."""
    d = diagnose(log)
    assert (d.detected, d.kind) == (True, "capacity")
    assert d.framework not in (None, "pytorch")
    assert not any("torch" in action for action in d.recommendation.actions)
    assert d.recommendation.actions[: len(OTHER_STACK_PEAK)] == OTHER_STACK_PEAK


_EDGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process "
    "has 77.64 GiB memory in use. Of the allocated memory 73.00 GiB is allocated by PyTorch, and "
    "4.00 GiB is reserved by PyTorch but unallocated.\n"
)


def test_a_setting_that_might_help_a_little_is_an_action_never_the_recommendation() -> None:
    """Issue 24: capacity with fragmentation contributing (the idle cache would cover this
    request, not the rest of the job) says the setting as an action only (mutation found this
    path untested)."""
    d = diagnose(_EDGE, torch_version="2.4.0")
    assert (d.kind, d.contributing, d.recommendation.alloc_conf) == (
        "capacity", ("fragmentation",), None)
    assert d.recommendation.actions.count(
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may recover part of the 4.00 GiB "
        "reserved but unallocated, but not the room the job needs beyond it: not recommended as "
        "the fix"
    ) == 1
    # under cudaMallocAsync PyTorch's fragmentation settings do nothing: not even an action
    asynced = diagnose(_EDGE, torch_version="2.4.0", backend="cudaMallocAsync")
    assert not any("may recover" in a for a in asynced.recommendation.actions)


# -- issue 24, seventh round: vLLM's warm-up after its budget was spent -------------------------


@pytest.mark.parametrize(
    ("precontext", "first"),
    [
        # the KV cache was sized before the failure: the warm-up after the budget was spent
        ("(EngineCore_0 pid=9) INFO [gpu_worker.py:298] Available KV cache memory: 19.82 GiB\n",
         ENGINE_WARM_UP_FIX),
        ("INFO [kv_cache_utils.py:1087] GPU KV cache size: 87,632 tokens\n", ENGINE_WARM_UP_FIX),
        # nothing says so: profiling makes the same dummy run before any KV cache exists, where
        # gpu_memory_utilization frees nothing (the review)
        ("", ENGINE_DUMMY_RUN_FIX),
        ("INFO Model loading took 0.24 GiB\n", ENGINE_DUMMY_RUN_FIX),
    ],
)
def test_an_engine_warming_up_is_told_its_own_levers_not_pytorch_s(
    precontext: str, first: str
) -> None:
    for kind in ("capacity", "unknown", "non-pytorch-memory"):
        r = rec(kind, figures=CAPACITY_FIGURES, phase="engine-warm-up", precontext=precontext)
        assert r.actions[0] == first, kind
        assert not any(a in r.actions for a in REDUCE_PEAK), kind
    # PyTorch's levers are for a forward pass that is the job's own
    r = rec("capacity", figures=CAPACITY_FIGURES, phase="forward", precontext=precontext)
    assert first not in r.actions
    assert REDUCE_PEAK[0] in r.actions


def test_the_kv_cache_s_size_is_read_from_the_last_64_kib_before_the_failure() -> None:
    sized = "GPU KV cache size: 87,632 tokens\n"
    near = sized + "x" * (65536 - len(sized))
    far = sized + "x" * (65536 - len(sized) + 1)
    assert rec("capacity", phase="engine-warm-up", precontext=near).actions[0] == (
        ENGINE_WARM_UP_FIX
    )
    assert rec("capacity", phase="engine-warm-up", precontext=far).actions[0] == (
        ENGINE_DUMMY_RUN_FIX
    )


def test_catboost_is_told_its_own_levers_and_that_its_pool_may_be_the_host_s() -> None:
    """public18 h-010 (catboost/catboost#302): the maintainer's answer was
    gpu_cat_features_storage=CpuPinnedMemory; #1081: depth 16 failed where 14 ran. CatBoost's
    pinned host pool prints the same words as its device pool (stack_like_memory_pool.h)."""
    d = diagnose(
        "Application terminated with error: (NCudaLib::TOutOfMemoryError) catboost/cuda/cuda_lib/"
        "memory_pool/stack_like_memory_pool.h:294: Error: Out of memory. Requested 1070.546387; "
        "Free 1010.952393\n"
    )
    assert (d.framework, d.kind, d.recommendation.alloc_conf) == ("catboost", "capacity", None)
    actions = d.recommendation.actions
    assert actions[0].startswith("train a shallower model (a lower depth")
    assert any("gpu_cat_features_storage='CpuPinnedMemory'" in a for a in actions)
    assert any("pinned_memory_size" in a and "gpu_ram_part" in a for a in actions)
    assert not any("torch" in a or "batch" in a for a in actions)


def test_the_rapids_accelerator_for_spark_is_told_its_own_levers() -> None:
    """public20 m-009's failure, as the driver reports the job it aborted."""
    d = diagnose(
        "23/06/29 06:34:56 WARN DeviceMemoryEventHandler: Device store exhausted, unable to "
        "allocate 12421594616 bytes. Total RMM allocated is 5213155072 bytes.\n"
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 49 in stage 10.0 "
        "failed 4 times, most recent failure: Lost task 49.3 in stage 10.0 (TID 560) (10.0.0.7 "
        "executor 1): com.nvidia.spark.rapids.jni.GpuSplitAndRetryOOM: GPU OutOfMemory: could "
        "not split inputs and retry\n"
    )
    assert (d.framework, d.recommendation.alloc_conf) == ("spark-rapids", None)
    assert d.recommendation.actions[0].startswith("lower spark.rapids.sql.concurrentGpuTasks")
    assert not any("torch" in a for a in d.recommendation.actions)


def test_spark_rapids_levers_lead_even_without_figures() -> None:
    """The review: the driver's abort line alone carries no figures (kind unknown)."""
    d = diagnose(
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 5.0 "
        "failed 4 times, most recent failure: Lost task 3.3 in stage 5.0 (TID 9) (10.0.0.7 "
        "executor 1): com.nvidia.spark.rapids.jni.GpuSplitAndRetryOOM: GPU OutOfMemory: could "
        "not split inputs and retry\n"
    )
    assert (d.kind, d.framework) == ("unknown", "spark-rapids")
    actions = d.recommendation.actions
    assert actions[0].startswith("lower spark.rapids.sql.concurrentGpuTasks")
    assert not any(".cuda()" in a for a in actions)


def test_a_managed_training_replica_is_told_the_machine_type_not_a_pod_limit() -> None:
    """public19 l-023 (Cloud ML Engine); the review: there is no pod to resize."""
    d = diagnose(
        "Filling up shuffle buffer (this may take a while): 1043 of 10000\n"
        "The replica master 0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL)\n"
    )
    assert (d.kind, d.summary) == (
        "host-oom-killed",
        "host-oom-killed: the training service killed a replica that ran out of its machine's "
        "memory: host (CPU) memory, not GPU memory",
    )
    actions = d.recommendation.actions
    assert actions[0].startswith("choose a machine type with more memory")
    assert not any("container" in a or "DataLoader" in a for a in actions)


MPS_LINE = (
    "RuntimeError: MPS backend out of memory (MPS allocated: 8.93 GB, other allocations: "
    "120.39 MB, max allowed: 9.07 GB). Tried to allocate 25.00 MB on private pool. Use "
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
    "cause system failure).\n"
)


def test_apples_mps_watermark_is_its_cap_with_its_own_levers() -> None:
    """public21 t-001 (an 8 GB Mac; the thread: PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 let it run)."""
    d = diagnose("step 1\n" + MPS_LINE)
    f = d.figures
    assert (d.kind, d.framework, d.recommendation.alloc_conf) == (
        "memory-fraction-cap", "pytorch", None,
    )  # fmt: skip
    assert (f.requested_bytes, f.allowed_bytes, f.allocated_bytes) == (
        25 * 2**20, round(9.07 * 2**30), round(8.93 * 2**30),
    )  # fmt: skip
    assert f.process_bytes == round(8.93 * 2**30) + round(120.39 * 2**20)
    assert d.summary.startswith("memory-fraction-cap: PyTorch's MPS high watermark (9.07 GiB)")
    actions = d.recommendation.actions
    assert actions[0].startswith("reduce the work")
    assert any("PYTORCH_MPS_HIGH_WATERMARK_RATIO" in a for a in actions)
    assert not any("nvidia-smi" in a or "set_per_process_memory_fraction" in a for a in actions)


def test_an_mps_request_in_bytes_and_sizes_in_gib_are_read() -> None:
    """public21 t-008 ("Tried to allocate 256 bytes on shared pool"), t-002 (GiB)."""
    d = diagnose(
        "RuntimeError: MPS backend out of memory (MPS allocated: 22.57 GiB, other allocations: "
        "139.74 GiB, max allowed: 163.20 GiB). Tried to allocate 256 bytes on shared pool.\n"
    )
    assert (d.figures.requested_bytes, d.figures.allowed_bytes) == (256, round(163.2 * 2**30))


def test_an_xpu_request_past_level_zeros_one_allocation_cap_is_told_so() -> None:
    """public21 t-006: 4.66 GiB asked of a 5.65 GiB Intel GPU with all of it free; Level Zero's
    max_mem_alloc_size (PyTorch PR 176868)."""
    d = diagnose(
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total "
        "capacity of 5.65 GiB of which 5.65 GiB is free. Of the allocated memory 195.50 KiB is "
        "allocated by PyTorch, and 1.81 MiB is reserved by PyTorch but unallocated.\n"
    )
    assert (d.detected, d.kind) == (True, "unknown")
    assert d.recommendation.actions[0].startswith("Intel's Level Zero caps one allocation")


def test_an_xpu_request_under_the_cap_with_room_is_not_blamed_on_it() -> None:
    d = diagnose(
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 3.90 GiB. GPU 0 has a total "
        "capacity of 15.11 GiB of which 15.11 GiB is free. Of the allocated memory 1024 bytes is "
        "allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    assert d.detected
    assert not d.recommendation.actions[0].startswith("Intel's Level Zero")


def test_an_xpu_request_past_the_cap_without_a_free_figure_is_told_so() -> None:
    """The census's A770 line: 8.00 GiB asked of 15.11 GiB with nothing held, no free clause."""
    d = diagnose(
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total "
        "capacity of 15.11 GiB. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 "
        "bytes is reserved by PyTorch but unallocated.\n"
    )
    assert d.recommendation.actions[0].startswith("Intel's Level Zero caps one allocation")


# -- the eighth round's second review ------------------------------------------------------------


def test_an_mps_failure_with_no_watermark_is_the_devices_not_a_cap() -> None:
    """PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0: MPSAllocator.mm prints no "max allowed"."""
    d = diagnose(
        "RuntimeError: MPS backend out of memory (MPS allocated: 30.27 GB, other allocations: "
        "1.80 GB). Tried to allocate 2.00 GB on private pool.\n"
    )
    assert (d.kind, d.figures.requested_bytes, d.figures.allowed_bytes) == (
        "capacity", 2 * 2**30, None,
    )  # fmt: skip
    assert d.summary.startswith("capacity: Metal refused the 2.00 GiB request")
    assert not any("WATERMARK" in a for a in d.recommendation.actions)


def test_an_mps_failure_under_its_watermark_is_metals_refusal() -> None:
    d = diagnose(
        "MPS backend out of memory (MPS allocated: 5.00 GB, other allocations: 1.00 GB, max "
        "allowed: 27.20 GB). Tried to allocate 2.00 GB on private pool.\n"
    )
    assert d.kind == "capacity"


def test_an_xpu_fraction_keeps_its_own_advice() -> None:
    d = diagnose(
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.50 GiB. GPU 0 has a total "
        "capacity of 15.11 GiB of which 10.00 GiB is free. 8.00 GiB allowed; Of the allocated "
        "memory 4.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
        "unallocated.\n"
    )
    assert d.kind == "memory-fraction-cap"
    assert not d.recommendation.actions[0].startswith("Intel's Level Zero")


def test_ipex_s_older_wording_is_not_blamed_on_the_one_allocation_cap() -> None:
    """IPEX checks the cap first and says so in its own words (intel-extension-for-pytorch#629)."""
    d = diagnose(
        "RuntimeError: XPU out of memory. Tried to allocate 6.00 GiB (GPU 0; 63.98 GiB total "
        "capacity; 40.00 GiB already allocated; 41.00 GiB reserved in total by PyTorch)\n"
    )
    assert not any(a.startswith("Intel's Level Zero") for a in d.recommendation.actions)


def test_pycudas_pinned_host_memory_is_no_gpu_failure() -> None:
    """cryosparc-issues#258: cuMemHostAlloc is page-locked host memory."""
    d = diagnose("pycuda._driver.MemoryError: cuMemHostAlloc failed: out of memory\n")
    assert not d.detected


XPU_MSG = "torch.OutOfMemoryError: XPU out of memory. GPU 0 has a total capacity of 6.00 GiB"
CAP = XPU_ONE_ALLOCATION_BYTES


@pytest.mark.parametrize(("message", "figures", "past"), [
    # at the cap, with exactly the room it needs
    (XPU_MSG, Figures(CAP, total_bytes=CAP), True),
    (XPU_MSG, Figures(CAP - 1, total_bytes=CAP), False),  # under the cap
    (XPU_MSG, Figures(CAP, total_bytes=CAP - 1), False),  # no room on the card
    # what PyTorch holds, both its parts, comes off the card's room
    (XPU_MSG, Figures(CAP, total_bytes=CAP + 2, allocated_bytes=1, reserved_unallocated_bytes=1),
     True),
    (XPU_MSG, Figures(CAP, total_bytes=CAP + 1, allocated_bytes=1, reserved_unallocated_bytes=1),
     False),
    (XPU_MSG, Figures(CAP, total_bytes=CAP + 1, allocated_bytes=0, reserved_unallocated_bytes=2),
     False),
    # the free figure and a fraction bound the room too
    (XPU_MSG, Figures(CAP, total_bytes=2 * CAP, free_bytes=CAP - 1), False),
    (XPU_MSG, Figures(CAP, total_bytes=2 * CAP, allowed_bytes=CAP + 1, allocated_bytes=2), False),
    # CUDA's message, a request or total missing: no
    (XPU_MSG.replace("XPU", "CUDA"), Figures(CAP, total_bytes=2 * CAP), False),
    (XPU_MSG, Figures(None, total_bytes=2 * CAP), False),
    (XPU_MSG, Figures(CAP), False),
])  # fmt: skip
def test_the_one_allocation_cap_needs_the_room_the_request_had(
    message: str, figures: Figures, past: bool
) -> None:
    assert _past_one_xpu_allocation(message, figures) is past


def test_the_one_allocation_cap_is_four_gib_less_its_printed_rounding() -> None:
    """A request printed "4.00 GiB" may be up to half a hundredth of a GiB under 4 GiB."""
    assert XPU_ONE_ALLOCATION_BYTES == 4 * 2**30 - 2**30 // 200
    edge = 4 * 2**30 - 2**30 // 200
    assert _past_one_xpu_allocation(XPU_MSG, Figures(edge, total_bytes=6 * 2**30))
    assert not _past_one_xpu_allocation(XPU_MSG, Figures(edge - 1, total_bytes=6 * 2**30))


def test_the_xpu_and_managed_replica_actions_read_whole() -> None:
    d = diagnose(
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total "
        "capacity of 5.65 GiB of which 5.65 GiB is free. Of the allocated memory 195.50 KiB is "
        "allocated by PyTorch, and 1.81 MiB is reserved by PyTorch but unallocated.\n"
    )
    assert d.recommendation.actions == (
        "Intel's Level Zero caps one allocation at about 4 GiB on Intel GPUs other than the Data "
        "Center GPU Max series: the 4.66 GiB request is past it though the GPU has room for it: "
        "set UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS=1 to lift the cap (slower kernels), or split "
        "the tensor",
    )
    d = diagnose("The replica master 0 ran out-of-memory and exited with a non-zero status of 9\n")
    assert d.recommendation.actions == (
        "choose a machine type with more memory for the replica (its memory is the machine's)",
        "hold less in host memory: smaller shuffle and prefetch buffers, no dataset cached in "
        "memory",
    )


# -- issue 24, ninth round: memory outside PyTorch larger than the idle cache --------------------

_EPOCHS = "".join(f"Epoch: {i}, global_step={i * 12800}\n" for i in range(1, 104))


@pytest.mark.parametrize(("process", "recommended"), [
    (10.56, False),  # public23 b-001: 6.2 GiB outside PyTorch (4.72 beyond the runtime's share)
    (4.34 + 1.5 + 0.45, True),  # beyond the runtime's share: less than the 0.46 GiB idle
    (4.34 + 1.5 + 0.46, False),  # more than it
])  # fmt: skip
def test_a_setting_is_not_recommended_beside_more_outside_pytorch_than_it_recovers(
    process: float, recommended: bool
) -> None:
    log = _EPOCHS + torch_oom(
        requested=0.1836, total=10.75, free=0.1735, process=process, allocated=3.88,
        unallocated=0.4574,
    )
    d = diagnose(log)
    assert d.kind == "fragmentation"
    assert (d.recommendation.alloc_conf is not None) is recommended
    if not recommended:
        assert "outside PyTorch beyond the CUDA runtime's own" in d.recommendation.actions[0]
        assert "not as the fix" in d.recommendation.actions[0]


def test_a_multi_gpu_job_past_its_idle_cache_outside_pytorch_is_told_the_setting_as_a_try() -> None:
    # the first review: public3 r-003's figures (8x H100), 2.92 GiB beyond the runtime's share
    # (NCCL's buffers) beside 2.50 GiB idle: named, not recommended
    log = _EPOCHS + torch_oom(
        requested=1.30, total=94.99, free=0.8409, process=94.14, allocated=87.22, unallocated=2.50,
    )
    d = diagnose(log)
    assert (d.kind, d.recommendation.alloc_conf) == ("fragmentation", None)
    assert "expandable_segments:True may let this allocation through" in d.recommendation.actions[0]


def test_ascend_s_npu_is_told_its_own_allocator_setting() -> None:
    npu = (
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total "
        "capacity; 40.00 GiB already allocated; 40.00 GiB current active; 500.00 MiB free; 58.00 "
        "GiB reserved in total by PyTorch)\n"
    )
    d = diagnose(_EPOCHS + npu)
    assert (d.kind, d.framework, d.recommendation.alloc_conf) == (
        "fragmentation", "torch-npu", None
    )
    assert d.recommendation.actions == (
        "Ascend's torch_npu reads its allocator's settings from PYTORCH_NPU_ALLOC_CONF, not "
        "PYTORCH_CUDA_ALLOC_CONF: its fragmentation settings are not measured here; try them on "
        "one run, not as the fix",
        REDUCE_PEAK[0],
    )


def test_a_simulator_s_failure_names_its_scene_as_the_lever() -> None:
    d = diagnose(
        "[Error] [carb.graphics-vulkan.plugin] VkResult: ERROR_OUT_OF_DEVICE_MEMORY\n"
    )
    assert (d.kind, d.framework) == ("unknown", "omniverse")
    assert any("fewer parallel environments (num_envs)" in a for a in d.recommendation.actions)
    d = diagnose("Error out of memory at line 88 in file csrc/ops.cu\n")
    assert d.detected
    assert not any("num_envs" in a for a in d.recommendation.actions)


# -- the ninth round's rules at their boundaries (mutation survivors) -----------------------------

ALLOWANCE = 3 * G // 2


def test_memory_outside_pytorch_is_read_beyond_the_runtime_s_share_at_any_share() -> None:
    # the second review: a simulator's memory does not shrink on a larger card, so no share of
    # the process gates it (b-001's figures on an 80 GiB card are 8 % of the process)
    f = Figures(process_bytes=80 * G, allocated_bytes=70 * G, reserved_unallocated_bytes=3 * G)
    assert _outside_beyond_runtime(f) == 7 * G - ALLOWANCE
    assert _outside_beyond_runtime(Figures(allocated_bytes=G, reserved_unallocated_bytes=0)) is None


@pytest.mark.parametrize(("idle", "recommended"), [
    (G, True),  # the outside memory beyond the runtime's share equals the idle cache: kept
    (G - 1, False),  # a byte more outside than idle: withheld
])  # fmt: skip
def test_the_setting_is_withheld_only_past_the_idle_cache(idle: int, recommended: bool) -> None:
    # 6 GiB held by PyTorch (5 in use), 2.5 GiB outside it (29 %): 1 GiB beyond the allowance
    figures = Figures(
        requested_bytes=100 * 2**20, total_bytes=16 * G, free_bytes=50 * 2**20,
        process_bytes=5 * G + idle + G + ALLOWANCE, allocated_bytes=5 * G,
        reserved_unallocated_bytes=idle,
    )
    r = rec(figures=figures)
    assert (r.alloc_conf is not None) is recommended
    if not recommended:
        assert r.actions == (
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may let this allocation through "
            f"(the allocator could reuse the {fs(idle)} reserved but unallocated), but this "
            f"process holds 1.00 GiB outside PyTorch beyond the CUDA runtime's own (another "
            "library's memory no PyTorch setting reaches, and the log cannot show it steady): "
            "try it on one run, not as the fix",
            REDUCE_PEAK[0],
        )


def test_a_summary_without_a_request_says_so_in_its_first_action() -> None:
    summary = Figures(allocated_bytes=4 * G, allowed_bytes=5 * G)
    assert rec_of("unknown", summary).actions[0].startswith(
        "the log does not show the request that failed: check what else holds the GPU"
    )
    for figures in (
        Figures(requested_bytes=G, allocated_bytes=4 * G),  # a request: not this sentence
        Figures(allocated_bytes=4 * G, total_bytes=8 * G),  # a card's figures: not this one
    ):
        assert not rec_of("unknown", figures).actions[0].startswith("the log does not show")


def test_dali_is_told_its_own_lever() -> None:
    actions = rec_of("unknown", Figures(), framework="dali").actions
    assert actions[1] == (
        "DALI's decoders hold their own device and pinned buffers per thread: size them from a "
        "run with memory_stats=True (the decoder's device_memory_padding, host_memory_padding), "
        "or lower batch_size or num_threads"
    )
    assert not any("DALI" in a for a in rec_of("unknown", Figures()).actions)


@pytest.mark.parametrize(("framework", "message", "second"), [
    # cuBLAS's and cuDNN's workspaces under PyTorch: its cache and CUBLAS_WORKSPACE_CONFIG
    ("pytorch", "CUDNN_STATUS_ALLOC_FAILED", LIBRARY_ROOM["cuda-library"]),
    ("pytorch", "CUBLAS_STATUS_ALLOC_FAILED", LIBRARY_ROOM["cuda-library"]),
    # another library under PyTorch, or cuBLAS under another stack: PyTorch's levers are not its
    ("pytorch", "Check failed: status == CURAND_STATUS_SUCCESS (102 vs. 0)  "
     "CURAND_STATUS_ALLOCATION_FAILED", OTHER_STACK_PEAK[0]),
    ("cupy", "cupy_backends.cuda.libs.cublas.CUBLASError: CUBLAS_STATUS_ALLOC_FAILED",
     OTHER_STACK_PEAK[0]),
    ("opencl", "pyopencl._cl.MemoryError: clEnqueueMapBuffer failed: "
     "MEM_OBJECT_ALLOCATION_FAILURE", OTHER_STACK_PEAK[0]),
])  # fmt: skip
def test_only_pytorch_s_cublas_and_cudnn_are_told_pytorch_s_workspace_levers(
    framework: str, message: str, second: str
) -> None:
    event = OomEvent("cuda-library", framework, message, Figures())
    verdict = Verdict("unknown", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
    actions = recommend(ctx).actions
    assert actions[1] == second
    if second == LIBRARY_ROOM["cuda-library"]:
        assert actions[2] == REDUCE_PEAK[0]
    if framework != "pytorch":
        assert not any("torch." in a or "CUBLAS_WORKSPACE" in a for a in actions)


@pytest.mark.parametrize(("message", "room"), [
    ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "leave room for cuFFT's own memory: "
     "torch.cuda.empty_cache() before the failing call, or a smaller cuFFT plan cache "
     "(torch.backends.cuda.cufft_plan_cache.max_size)"),
    ("RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED", "leave room for cuSOLVER's "
     "own memory: torch.cuda.empty_cache() before the failing call"),
])  # fmt: skip
def test_pytorch_s_other_libraries_are_told_its_cache(message: str, room: str) -> None:
    """The review's cases 14, 15: they allocate beside PyTorch's cache as cuBLAS does."""
    event = OomEvent("cuda-library", "pytorch", message, Figures())
    verdict = Verdict("unknown", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
    assert recommend(ctx).actions[1:3] == (room, REDUCE_PEAK[0])


@pytest.mark.parametrize(("precontext", "fix"), [
    ("", ENGINE_DUMMY_RUN_FIX),
    ("INFO [kv_cache_utils.py:600] GPU KV cache size: 400,000 tokens\n", ENGINE_WARM_UP_FIX),
    ("INFO [gpu_worker.py:300] Available KV cache memory: 41.87 GiB\n", ENGINE_WARM_UP_FIX),
    # only the last 64 KiB before the failure are read for it
    ("INFO GPU KV cache size: 400,000 tokens\n" + "step\n" * 16384, ENGINE_DUMMY_RUN_FIX),
])  # fmt: skip
def test_vllms_warm_up_message_is_told_the_lever_its_log_shows(precontext: str, fix: str) -> None:
    event = OomEvent("engine-warmup", "vllm", "CUDA out of memory occurred when warming up "
                     "sampler with 1024 dummy requests", Figures())
    verdict = Verdict("memory-fraction-cap", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None, precontext)
    assert recommend(ctx).actions[0] == fix


def test_an_opencl_failure_under_any_stack_gets_no_pytorch_lever() -> None:
    event = OomEvent("cuda-library", "pytorch", "MemoryError: create_buffer failed: "
                     "MEM_OBJECT_ALLOCATION_FAILURE", Figures())
    verdict = Verdict("unknown", (), "", Figures())
    ctx = Context(event, verdict, TORCH_2_11, None, allocconf.NATIVE, None, None)
    assert recommend(ctx).actions[1] == OTHER_STACK_PEAK[0]


@pytest.mark.parametrize(("text", "first"), [
    # llama.cpp's CPU buffers: its context and micro-batch (public33 i-026; the round's review)
    ("ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 139183763104\n",
     "shrink what llama.cpp puts in host memory: a shorter context"),
    # Apple's unified memory: no nvidia-smi (the round's review)
    ("error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n",
     "on Apple silicon the GPU shares the machine's memory"),
    # NVML refused: nvidia-smi cannot list the processes either (the round's review)
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/'
     'CUDACachingAllocator.cpp":838, please report a bug to PyTorch.\n',
     "PyTorch ran out of GPU memory and NVML refused to list the GPU's processes"),
])  # fmt: skip
def test_the_twelfth_rounds_stacks_get_their_own_first_action(text: str, first: str) -> None:
    actions = diagnose(text).recommendation.actions
    assert actions[0].startswith(first)
    assert not any("nvidia-smi --query" in a for a in actions)


# -- the fourteenth round's stacks (public37): their own actions, whole -------------------------


def test_a_memoryerror_head_asks_for_its_message_then_both_memories_levers() -> None:
    log = ("MemoryError                               Traceback (most recent call last)\n"
           "/tmp/ipykernel_1/2.py in <module>\n")
    assert diagnose(log).recommendation.actions == (
        "find the MemoryError's message (the full log, the notebook's output): a size refused on "
        "the host, or a GPU library's (RMM, CuPy) pool",
        "raise the container's memory limit (and set the request equal to it)",
        "the log has no usable memory figures: check what else holds the GPU (nvidia-smi "
        "--query-compute-apps=pid,used_memory --format=csv, or the node agent's GPUNodeReport)",
    )
    torch_head = log.replace("MemoryError       ", "OutOfMemoryError  ")
    assert not diagnose(torch_head).recommendation.actions[0].startswith("find the MemoryError")


def test_gfortran_s_host_refusal_gets_the_container_s_levers_not_pytorch_s() -> None:
    log = "Operating system error: Cannot allocate memory\nAllocation would exceed memory limit\n"
    assert diagnose(log).recommendation.actions == (
        "raise the container's memory limit (and set the request equal to it)",
        "a memory-backed /dev/shm (emptyDir medium: Memory) counts against the limit: size it "
        "explicitly",
    )
