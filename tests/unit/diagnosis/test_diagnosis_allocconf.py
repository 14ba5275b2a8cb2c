"""validate_alloc_conf: torch's own wording, by release and backend."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import validate_alloc_conf
from gpu_auditor.diagnosis.allocconf import check, merge, tokenize

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value",
    [
        "",
        "expandable_segments:True",
        "expandable_segments: True",
        "max_split_size_mb:128,garbage_collection_threshold:0.6",
        "roundup_power2_divisions:[256:1,512:2,>:8]",
        "backend:cudaMallocAsync",
        "pinned_num_register_threads:8,pinned_use_cuda_host_register:True",
    ],
)
def test_valid_values_have_no_problems_on_a_recent_release(value: str) -> None:
    assert validate_alloc_conf(value, torch_version="2.11") == []


@pytest.mark.parametrize(
    ("value", "version", "message"),
    [
        ("foo:1", "2.11", "Unrecognized key 'foo' in CUDA allocator config."),
        ("foo:1", "2.13", "Unrecognized key 'foo' in Accelerator allocator config."),
        ("foo:1", "1.13", "Unrecognized CachingAllocator option: foo"),
        (
            "max_split_size_mb:10",
            "2.11",
            "CachingAllocator option max_split_size_mb too small, must be >= 20",
        ),
        (
            "max_split_size_mb:20",
            "2.4",
            "CachingAllocator option max_split_size_mb too small, must be > 20",
        ),
        (
            "garbage_collection_threshold:1.5",
            "2.11",
            "garbage_collect_threshold is invalid, set it in (0.0, 1.0)",
        ),
        (
            "expandable_segments:yes",
            "2.11",
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'",
        ),
        ("roundup_power2_divisions:3", "2.11", "For roundups, the divisions has to be power of 2"),
        ("roundup_power2_divisions:3", "2.3", "For roundups, the divisons has to be power of 2"),
        (
            "backend:foo",
            "2.11",
            "Unknown allocator backend, options are native and cudaMallocAsync",
        ),
        (
            "pinned_num_register_threads:3",
            "2.11",
            "Number of register threads has to be power of 2, got 3",
        ),
    ],
)
def test_problems_are_worded_like_torch(value: str, version: str, message: str) -> None:
    assert validate_alloc_conf(value, torch_version=version) == [message]


def test_key_newer_than_the_release_says_which_release_has_it() -> None:
    assert validate_alloc_conf("expandable_segments:True", torch_version="2.0") == [
        "Unrecognized CachingAllocator option: expandable_segments "
        "(expandable_segments needs torch >= 2.1)"
    ]


def test_removed_key_says_when_it_went() -> None:
    (problem,) = validate_alloc_conf("roundup_bypass_threshold_mb:64", torch_version="2.2")
    assert problem.endswith("(roundup_bypass_threshold_mb was removed in torch 2.1)")


def test_without_a_release_every_known_key_is_accepted() -> None:
    assert validate_alloc_conf("pinned_max_cached_size_mb:64,expandable_segments:True") == []


@pytest.mark.parametrize(
    "key", ["expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.8"]
)
def test_native_only_keys_are_problems_under_cuda_malloc_async(key: str) -> None:
    problems = validate_alloc_conf(f"backend:cudaMallocAsync,{key}", torch_version="2.11")
    assert len(problems) == 1 and "backend:cudaMallocAsync ignores it" in problems[0]
    assert validate_alloc_conf(key, torch_version="2.11", backend="cudaMallocAsync") == problems


def test_expandable_segments_is_a_problem_on_rocm() -> None:
    assert validate_alloc_conf("expandable_segments:True", torch_version="2.4", rocm=True) == [
        "expandable_segments is not supported on ROCm builds of torch"
    ]


@pytest.mark.parametrize("value", ["expandable_segments", "max_split_size_mb:", ":True", "a:1:2"])
def test_malformed_values_are_problems_not_exceptions(value: str) -> None:
    assert validate_alloc_conf(value, torch_version="2.11") != []


def test_unparseable_torch_version_is_a_problem() -> None:
    assert validate_alloc_conf("expandable_segments:True", torch_version="latest") == [
        "not a torch version: 'latest'"
    ]


def test_tokenizer_matches_torchs_config_tokenizer() -> None:
    assert tokenize(" a : [1:2, >:8],b:True") == [
        "a",
        ":",
        "[",
        "1",
        ":",
        "2",
        ",",
        ">",
        ":",
        "8",
        "]",
        ",",
        "b",
        ":",
        "True",
    ]


def test_merge_keeps_order_drops_rejected_entries_and_overrides() -> None:
    current = check("max_split_size_mb:256,foo:1,expandable_segments:False")
    assert merge(current, {"expandable_segments": "True"}) == (
        "max_split_size_mb:256,expandable_segments:True"
    )


def test_the_core_keeps_max_split_minus_one_out_of_its_problems() -> None:
    """The diagnosis merges a recommendation into the job's setting without its problems; the
    default value is harmless there, so it is an issue (for the webhook) but not a problem."""
    from gpu_auditor.diagnosis.allocconf import check

    checked = check("max_split_size_mb:-1")
    assert checked.problems == () and checked.bad_keys == frozenset()
    assert [i.kind.value for i in checked.issues] == ["ignored"]
