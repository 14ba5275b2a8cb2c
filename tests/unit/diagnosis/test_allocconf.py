"""validate_alloc_conf: torch's own wording, by release and backend."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import allocconf, validate_alloc_conf
from gpu_auditor.diagnosis.allocconf import (
    ASYNC,
    KEYS,
    Entry,
    Issue,
    IssueKind,
    check,
    key_available,
    merge,
    tokenize,
)
from gpu_auditor.diagnosis.torchversion import TorchRange

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


# Boundary table for PYTORCH_CUDA_ALLOC_CONF values: each bound from both sides, per release.

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


# What mutation testing found loose in the allocator-setting checks (``scripts/mutation.py
# --modules allocconf``): torch's ConfigTokenizer messages with their token indexes, where parsing
# picks up after a bad entry, and the release and backend edges, literal values throughout.

@pytest.mark.parametrize(
    ("value", "entries", "problems"),
    [
        (":x", [], ["Expected a key at index 0 in ConfigTokenizer but got ':'",
                    "Expected ':' at index 2 in ConfigTokenizer but got '<end>'"]),
        (",expandable_segments:True", [Entry("expandable_segments", "True", 3)],
         ["Expected a key at index 0 in ConfigTokenizer but got ','"]),
        ("expandable_segments", [],
         ["Expected ':' at index 1 in ConfigTokenizer but got '<end>'"]),
        ("a,expandable_segments:True", [Entry("expandable_segments", "True", 4)],
         ["Expected ':' at index 1 in ConfigTokenizer but got ','"]),
        ("a b c,max_split_size_mb:128", [Entry("max_split_size_mb", "128", 4)],
         ["Expected ':' at index 1 in ConfigTokenizer but got ','"]),
        ("expandable_segments:", [],
         ["Expected a value for 'expandable_segments' at index 2 in ConfigTokenizer"]),
        ("expandable_segments:,max_split_size_mb:128", [Entry("max_split_size_mb", "128", 5)],
         ["Expected a value for 'expandable_segments' at index 2 in ConfigTokenizer"]),
        ("expandable_segments:True:x,max_split_size_mb:128",
         [Entry("expandable_segments", "True", 2), Entry("max_split_size_mb", "128", 8)],
         ["Expected ',' at index 3 in ConfigTokenizer but got ':'"]),
        ("expandable_segments:True:x:y:z,max_split_size_mb:128",
         [Entry("expandable_segments", "True", 2), Entry("max_split_size_mb", "128", 12)],
         ["Expected ',' at index 3 in ConfigTokenizer but got ':'"]),
        ("roundup_power2_divisions:[256:1,512:2],expandable_segments:True",
         [Entry("roundup_power2_divisions", "[256:1,512:2]", 2),
          Entry("expandable_segments", "True", 14)], []),
        ("roundup_power2_divisions:[256:1,512:2]x,expandable_segments:True",
         [Entry("roundup_power2_divisions", "[256:1,512:2]", 2),
          Entry("expandable_segments", "True", 15)],
         ["Expected ',' at index 11 in ConfigTokenizer but got 'x'"]),
        ("roundup_power2_divisions:[256:1,512:2", [
            Entry("roundup_power2_divisions", "[256:1,512:2", 2)], []),
        ("expandable_segments:True,roundup_power2_divisions:[256:1]",
         [Entry("expandable_segments", "True", 2),
          Entry("roundup_power2_divisions", "[256:1]", 6)], []),
        ("expandable_segments:True,,max_split_size_mb:128",
         [Entry("expandable_segments", "True", 2), Entry("max_split_size_mb", "128", 7)],
         ["Expected a key at index 4 in ConfigTokenizer but got ','"]),
        ("a,", [], ["Expected ':' at index 1 in ConfigTokenizer but got ','"]),
        ("a:],roundup_power2_divisions:[256:1]",
         [Entry("roundup_power2_divisions", "[256:1]", 6)],
         ["Expected a value for 'a' at index 2 in ConfigTokenizer"]),
    ],
    ids=[f"case{i}" for i in range(16)],  # plain ids: the values hold ':' ',' '[' (mutmut's runner)
)  # fmt: skip
def test_the_tokenizer_messages_and_where_parsing_resumes(
    value: str, entries: list[Entry], problems: list[str]
) -> None:
    checked = check(value)
    assert list(checked.entries) == entries
    assert list(checked.problems)[: len(problems)] == problems


def test_only_true_and_false_are_booleans() -> None:
    assert validate_alloc_conf("expandable_segments:False") == []
    for value in ("false", "FALSE", "XXFalseXX"):
        assert validate_alloc_conf(f"expandable_segments:{value}") == [
            f"Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '{value}'"
        ]


def test_the_roundup_message_is_spelled_as_the_release_spells_it() -> None:
    assert validate_alloc_conf("roundup_power2_divisions:3", torch_version="2.7") == [
        "For roundups, the divisons has to be power of 2"
    ]
    assert validate_alloc_conf("roundup_power2_divisions:3", torch_version="2.8") == [
        "For roundups, the divisions has to be power of 2"
    ]


def test_roundup_intervals_must_be_powers_of_2() -> None:
    assert validate_alloc_conf("roundup_power2_divisions:[256:1,300:2]") == [
        "For roundups, the intervals have to be power of 2"
    ]
    assert validate_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:8]") == []


@pytest.mark.parametrize(
    ("value", "version", "ok"),
    [("-1", "2.10", True), ("0", "2.10", False), ("0", "2.9", False), ("-1", "2.9", False)],
)
def test_max_split_minus_one_means_no_limit_from_2_10_only(
    value: str, version: str, ok: bool
) -> None:
    assert (validate_alloc_conf(f"max_split_size_mb:{value}", torch_version=version) == []) is ok


@pytest.mark.parametrize(("threads", "ok"), [(128, True), (129, False), (256, False)])
def test_register_threads_up_to_128(threads: int, ok: bool) -> None:
    problems = validate_alloc_conf(f"pinned_num_register_threads:{threads}")
    assert (problems == []) is ok


def test_a_fraction_that_is_not_finite_is_rejected() -> None:
    for value in ("inf", "nan", "-inf"):
        assert validate_alloc_conf(f"per_process_memory_fraction:{value}") == [
            "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"
        ]


def test_an_unknown_backend_argument_is_named_once() -> None:
    assert validate_alloc_conf("expandable_segments:True", backend="tcmalloc") == [
        "Unknown allocator backend, options are native and cudaMallocAsync"
    ]


def test_a_removed_key_names_the_key_and_the_release() -> None:
    removed = [s for s in allocconf.KEYS.values() if s.removed is not None]
    assert removed, "no key of the table has been removed"
    spec = removed[0]
    release = allocconf.format_release(spec.removed)
    problems = validate_alloc_conf(f"{spec.name}:1", torch_version=release)
    assert problems and problems[0].endswith(f"({spec.name} was removed in torch {release})")
    assert spec.name in problems[0].split("(")[0]


def test_the_backend_key_decides_only_with_a_known_value() -> None:
    assert check("backend:cudaMallocAsync").backend == "cudaMallocAsync"
    assert check("backend:foo", backend="cudaMallocAsync").backend == "cudaMallocAsync"
    assert check("expandable_segments:True", backend="foo").backend == "native"
    assert check("backend:native", backend="cudaMallocAsync").backend == "native"


def test_a_native_only_key_under_cuda_malloc_async_is_named() -> None:
    assert validate_alloc_conf("backend:cudaMallocAsync,garbage_collection_threshold:0.6") == [
        "garbage_collection_threshold is an option of the native allocator; "
        "backend:cudaMallocAsync ignores it"
    ]


def test_rocm_is_off_unless_said() -> None:
    not_on_rocm = [s for s in allocconf.KEYS.values() if not s.on_rocm]
    assert not_on_rocm, "every key of the table runs on ROCm"
    key = not_on_rocm[0].name
    value = {"bool": "True", "gc": "0.6", "threads": "8", "fraction": "0.5"}.get(
        not_on_rocm[0].kind, "1")  # fmt: skip
    assert check(f"{key}:{value}").problems == ()
    assert check(f"{key}:{value}", rocm=True).problems == (
        f"{key} is not supported on ROCm builds of torch",
    )


def test_parsing_resumes_after_the_next_comma_not_an_earlier_one() -> None:
    checked = check(
        "max_split_size_mb:128,expandable_segments:True:x,garbage_collection_threshold:0.6"
    )
    assert [e.key for e in checked.entries] == [
        "max_split_size_mb", "expandable_segments", "garbage_collection_threshold"]
    assert checked.problems == ("Expected ',' at index 7 in ConfigTokenizer but got ':'",)


def test_only_the_backend_key_names_the_backend() -> None:
    assert check("max_split_size_mb:cudaMallocAsync").backend == "native"


def test_a_key_or_value_with_x_is_a_word() -> None:
    assert list(check("X:1").entries) == [Entry("X", "1", 2)]
    assert list(check("expandable_segments:X").entries) == [Entry("expandable_segments", "X", 2)]


def test_only_the_four_separators_split_tokens() -> None:
    assert allocconf.tokenize("aXb : 1,[ 2 ]") == ["aXb", ":", "1", ",", "[", "2", "]"]


# The allocator-setting checker's issue labels and roundup parsing (issue 18, mutation survivors):
# each issue carries its class and its entry (so the entry's key is a bad key the recommender
# drops), the ``max_split_size_mb:-1`` no-op is exactly a harmless IGNORED issue, and a roundup
# interval is read from the brackets only. Literal settings and messages.

TORCH_2_0 = TorchRange((2, 0), (2, 0))
TORCH_2_11 = TorchRange((2, 11), (2, 11))


class _CountingTokens(list[str]):
    """A token list that adds up the length of every slice taken of it."""

    sliced = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            self.sliced += max(0, stop - start)
        return super().__getitem__(key)


def test_a_key_newer_than_the_release_is_a_bad_key_with_its_entry() -> None:
    c = check("expandable_segments:True", TORCH_2_0)
    [issue] = c.issues
    assert issue.kind is IssueKind.NOT_IN_RELEASE and issue.problem
    assert issue.entry == Entry("expandable_segments", "True", 2)
    assert c.bad_keys == frozenset({"expandable_segments"})


def test_a_key_rocm_does_not_support_is_ignored_and_bad() -> None:
    c = check("expandable_segments:True", TORCH_2_11, rocm=True)
    assert c.issues == (Issue(IssueKind.IGNORED,
                              "expandable_segments is not supported on ROCm builds of torch",
                              Entry("expandable_segments", "True", 2)),)
    assert c.bad_keys == frozenset({"expandable_segments"})


def test_a_native_only_key_under_cuda_malloc_async_is_ignored_and_bad() -> None:
    c = check("max_split_size_mb:128", TORCH_2_11, ASYNC)
    assert c.issues == (Issue(IssueKind.IGNORED,
                              "max_split_size_mb is an option of the native allocator; "
                              "backend:cudaMallocAsync ignores it",
                              Entry("max_split_size_mb", "128", 2)),)
    assert c.bad_keys == frozenset({"max_split_size_mb"})


def test_max_split_minus_one_is_a_harmless_no_op_not_a_problem() -> None:
    c = check("max_split_size_mb:-1", TORCH_2_11)
    assert c.issues == (Issue(IssueKind.IGNORED,
                              "max_split_size_mb:-1 means no limit, the default: this entry "
                              "does nothing",
                              Entry("max_split_size_mb", "-1", 2), problem=False),)
    assert c.problems == () and c.bad_keys == frozenset()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[64:2,>:8]", None),
        ("[X64:2]", "For roundups, the intervals have to be power of 2"),  # X is no digit
        ("[64:2X]", "For roundups, the divisions has to be power of 2 or 0 to disable roundup"),
        # the first ':' ends the interval: "2:4" is not a number of divisions
        ("[64:2:4]", "For roundups, the divisions has to be power of 2 or 0 to disable roundup"),
    ],
)
def test_a_roundup_list_is_read_inside_its_brackets(value: str, problem: str | None) -> None:
    c = check(f"roundup_power2_divisions:{value}", TORCH_2_11)
    assert [i.message for i in c.issues if i.kind is IssueKind.INVALID_VALUE] == (
        [problem] if problem else [])


def test_many_bracketed_values_are_parsed_with_linear_work() -> None:
    from gpu_auditor.diagnosis.allocconf import _parse

    # 2,000 'a:[]' entries: each value's tokens are read once (the old code sliced the rest of
    # the list at every '[': 2,000 x 10,000 / 2 tokens); the entries are all read
    tokens = _CountingTokens(["a", ":", "[", "]", ","] * 2000)
    entries, problems = _parse(tokens)
    assert [(e.key, e.value) for e in entries] == [("a", "[]")] * 2000
    assert problems == []
    assert tokens.sliced <= 2 * len(tokens)
    # an unclosed '[' takes the rest as its value, as before
    entries, _ = _parse(["a", ":", "[", "1", ",", "2"])
    assert [(e.key, e.value) for e in entries] == [("a", "[1,2")]
