"""What mutation testing found loose in the allocator-setting checks (``scripts/mutation.py
--modules allocconf``): torch's ConfigTokenizer messages with their token indexes, where parsing
picks up after a bad entry, and the release and backend edges, literal values throughout.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import allocconf, validate_alloc_conf
from gpu_auditor.diagnosis.allocconf import Entry, check

pytestmark = pytest.mark.unit


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
