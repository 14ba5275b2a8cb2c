"""The allocator-setting checker's issue labels and roundup parsing (issue 18, mutation
survivors): each issue carries its class and its entry (so the entry's key is a bad key the
recommender drops), the ``max_split_size_mb:-1`` no-op is exactly a harmless IGNORED issue,
and a roundup interval is read from the brackets only. Literal settings and messages."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.allocconf import ASYNC, Entry, Issue, IssueKind, check
from gpu_auditor.diagnosis.torchversion import TorchRange

pytestmark = pytest.mark.unit

TORCH_2_0 = TorchRange((2, 0), (2, 0))
TORCH_2_11 = TorchRange((2, 11), (2, 11))


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


class _CountingTokens(list[str]):
    """A token list that adds up the length of every slice taken of it."""

    sliced = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            self.sliced += max(0, stop - start)
        return super().__getitem__(key)


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
