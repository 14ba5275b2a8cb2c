"""Boundary table for PYTORCH_CUDA_ALLOC_CONF values: each bound from both sides, per release."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import validate_alloc_conf
from gpu_auditor.diagnosis.allocconf import KEYS, key_available
from gpu_auditor.diagnosis.torchversion import TorchRange

pytestmark = pytest.mark.unit

FRACTION = "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"
GC = "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0", True), ("0.0", True), ("1", True), ("1.0", True), ("0.5", True),
     ("-0.001", False), ("1.001", False), ("1.0000001", False), ("nan", False), ("inf", False),
     ("x", False)],
)  # fmt: skip
def test_per_process_memory_fraction_is_within_0_and_1_inclusive(value: str, ok: bool) -> None:
    problems = validate_alloc_conf(f"per_process_memory_fraction:{value}", torch_version="2.11")
    assert problems == ([] if ok else [FRACTION])


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0", False), ("0.0", False), ("0.0001", True), ("0.5", True), ("0.9999", True),
     ("1", False), ("1.0", False), ("-0.5", False), ("nan", False), ("x", False)],
)  # fmt: skip
def test_gc_threshold_is_within_0_and_1_exclusive(value: str, ok: bool) -> None:
    problems = validate_alloc_conf(f"garbage_collection_threshold:{value}", torch_version="2.11")
    assert problems == ([] if ok else [GC])


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1", None),
        ("2", None),
        ("64", None),
        ("128", None),
        ("256", "Number of register threads should be less than or equal to 128, got 256"),
        ("3", "Number of register threads has to be power of 2, got 3"),
        ("0", "Number of register threads has to be power of 2, got 0"),
        ("-2", "Number of register threads has to be power of 2, got -2"),
        ("127", "Number of register threads has to be power of 2, got 127"),
        ("x", "Number of register threads has to be power of 2, got x"),
    ],
)
def test_register_threads_are_a_power_of_2_up_to_128(value: str, problem: str | None) -> None:
    problems = validate_alloc_conf(f"pinned_num_register_threads:{value}", torch_version="2.11")
    assert problems == ([] if problem is None else [problem])


@pytest.mark.parametrize(
    ("value", "version", "problem"),
    [
        ("21", "2.9", None),
        ("20", "2.9", "CachingAllocator option max_split_size_mb too small, must be > 20"),
        ("-1", "2.9", "CachingAllocator option max_split_size_mb too small, must be > 20"),
        ("20", "2.10", None),
        ("19", "2.10", "CachingAllocator option max_split_size_mb too small, must be >= 20"),
        ("-1", "2.10", None),  # "no limit" from 2.10 on
        ("x", "2.10", "Expected an integer (MB) for max_split_size_mb but got 'x'"),
    ],
)
def test_max_split_size_mb_over_20_before_2_10_and_from_20_on(
    value: str, version: str, problem: str | None
) -> None:
    problems = validate_alloc_conf(f"max_split_size_mb:{value}", torch_version=version)
    assert problems == ([] if problem is None else [problem])


def test_max_split_size_mb_on_a_release_range_across_2_10() -> None:
    # 2.9 or 2.10: only what every release in the range rejects is a problem
    from gpu_auditor.diagnosis.allocconf import check

    span = TorchRange((2, 9), (2, 10))
    assert check("max_split_size_mb:20", span).problems == ()
    assert check("max_split_size_mb:19", span).problems == (
        "CachingAllocator option max_split_size_mb too small, must be >= 20",
    )


@pytest.mark.parametrize(
    ("key", "first", "before"),
    [
        ("max_split_size_mb:128", "1.10", "1.9"),
        ("garbage_collection_threshold:0.5", "1.12", "1.11"),
        ("backend:native", "2.0", "1.13"),
        ("expandable_segments:True", "2.1", "2.0"),
        ("per_process_memory_fraction:0.5", "2.10", "2.9"),
        ("large_segment_size_mb:64", "2.11", "2.10"),
        ("pinned_max_cached_size_mb:64", "2.13", "2.12"),
    ],
)
def test_a_key_exists_from_its_first_release(key: str, first: str, before: str) -> None:
    assert validate_alloc_conf(key, torch_version=first) == []
    (problem,) = validate_alloc_conf(key, torch_version=before)
    assert problem.endswith(f"needs torch >= {first})")


def test_a_removed_key_is_accepted_until_its_removal() -> None:
    assert validate_alloc_conf("roundup_bypass_threshold_mb:64", torch_version="2.0") == []
    (problem,) = validate_alloc_conf("roundup_bypass_threshold_mb:64", torch_version="2.1")
    assert problem.endswith("(roundup_bypass_threshold_mb was removed in torch 2.1)")


def test_a_key_is_recommended_only_when_every_release_allowed_has_it() -> None:
    expandable = KEYS["expandable_segments"]
    assert key_available(expandable, TorchRange((2, 1), (2, 1)))
    assert key_available(expandable, TorchRange((2, 1), None))
    assert not key_available(expandable, TorchRange((2, 0), (2, 1)))
    assert not key_available(expandable, TorchRange(None, None))
    assert not key_available(expandable, TorchRange((2, 1), None), rocm=True)
    bypass = KEYS["roundup_bypass_threshold_mb"]
    assert key_available(bypass, TorchRange((1, 13), (2, 0)))
    assert not key_available(bypass, TorchRange((1, 13), (2, 1)))


@pytest.mark.parametrize(
    ("value", "version", "ok"),
    [
        ("roundup_power2_divisions:0", "2.4", True),
        ("roundup_power2_divisions:0", "2.3", False),
        ("roundup_power2_divisions:[256:0,>:8]", "2.4", True),
        ("roundup_power2_divisions:[256:1,>:8]", "2.0", True),
        ("roundup_power2_divisions:[256:1,>:8]", "1.13", False),
        ("roundup_power2_divisions:[255:1]", "2.11", False),
        ("roundup_power2_divisions:[256:3]", "2.11", False),
    ],
)
def test_roundup_divisions(value: str, version: str, ok: bool) -> None:
    assert (validate_alloc_conf(value, torch_version=version) == []) is ok


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("2.9", "Unrecognized CachingAllocator option: foo"),
        ("2.10", "Unrecognized key 'foo' in CUDA allocator config."),
        ("2.11", "Unrecognized key 'foo' in CUDA allocator config."),
        ("2.12", "Unrecognized key 'foo' in Accelerator allocator config."),
    ],
)
def test_unknown_keys_are_worded_by_release(version: str, message: str) -> None:
    assert validate_alloc_conf("foo:1", torch_version=version) == [message]


def test_sizes_are_non_negative_and_positive_where_torch_says_so() -> None:
    assert validate_alloc_conf("max_non_split_rounding_mb:0", torch_version="2.11") == []
    assert validate_alloc_conf("max_non_split_rounding_mb:-1", torch_version="2.11") != []
    assert validate_alloc_conf("pinned_reserve_segment_size_mb:1", torch_version="2.11") == []
    assert validate_alloc_conf("pinned_reserve_segment_size_mb:0", torch_version="2.11") == [
        "pinned_reserve_segment_size_mb must be a positive integer (MB), got '0'"
    ]
