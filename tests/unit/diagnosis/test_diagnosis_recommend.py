"""The allocator setting: only for fragmentation, valid for the release and backend, merged."""

from __future__ import annotations

import pytest
from diagnosis_helpers import torch_oom

from gpu_auditor.diagnosis import diagnose, validate_alloc_conf

pytestmark = pytest.mark.unit

FRAG = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
FRAG_1X = (
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
    log = (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n"
    )
    diagnosis = diagnose(log)
    assert (diagnosis.framework, diagnosis.kind) == ("vllm", "capacity")
    assert any("gpu_memory_utilization" in a for a in diagnosis.recommendation.actions)
