"""Linear-time patterns: shown by their structure, and by rewrites that agree with the regexes.

A pattern that may start at every digit of a run, and reads the rest of the run from each one,
is quadratic: one 4 KB line of digits took seconds (issue 11). The structure checked here is what
makes each attempt bounded: every run of digits a pattern reads has a bound, and a pattern that
begins with a number first looks behind it for a digit (an attempt inside a run stops at once).
No timing here: bench/hostile_scaling.py measures time against input size.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import (
    addressspace,
    aftermath,
    consequence,
    core,
    formats,
    impossible,
    killed,
    leak,
    logtext,
    parse,
    phase,
    proberecord,
    progress,
    recommend,
    sizes,
    torchversion,
    wrapped,
)

pytestmark = pytest.mark.unit

OWNED: tuple[ModuleType, ...] = (
    sizes, formats, parse, torchversion, logtext, phase, leak, proberecord, recommend, progress,
    aftermath, killed, wrapped, consequence, addressspace, impossible, core,
)  # fmt: skip
NUMBER_CHARS = frozenset("0123456789,. ")
LONGEST_NUMBER = 64


def patterns(value: Any, path: str) -> Iterator[tuple[str, re.Pattern[Any]]]:
    if isinstance(value, re.Pattern):
        yield path, value
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            yield from patterns(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from patterns(item, f"{path}[{key!r}]")
    elif isinstance(value, type):
        for name, item in vars(value).items():
            yield from patterns(item, f"{path}.{name}")


ALL = [
    (f"{module.__name__.rsplit('.', 1)[-1]}.{name}", pattern)
    for module in OWNED
    for name, value in vars(module).items()
    for _, pattern in patterns(value, name)
]


def numeric(item: tuple[Any, Any]) -> bool:
    """An IN set (``\\d``, ``[\\d,]``, ``[\\d,\\s]``) that reads digits and nothing but number
    punctuation and spaces."""
    op, av = item
    if op is not sre.IN:
        return False
    digit = False
    for kind, value in av:
        if kind is sre.CATEGORY and value is sre.CATEGORY_DIGIT:
            digit = True
        elif kind is sre.CATEGORY and value is sre.CATEGORY_SPACE:
            continue
        elif kind is sre.LITERAL and chr(value) in NUMBER_CHARS:
            digit = digit or chr(value).isdigit()
        elif kind is sre.RANGE and chr(value[0]).isdigit() and chr(value[1]).isdigit():
            digit = True
        else:
            return False
    return digit


REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def walk(parsed: Any) -> Iterator[tuple[Any, Any]]:
    for op, av in parsed:
        yield op, av
        if op in REPEATS:
            yield from walk(av[2])
        elif op is sre.SUBPATTERN:
            yield from walk(av[3])
        elif op is sre.BRANCH:
            for branch in av[1]:
                yield from walk(branch)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            yield from walk(av[1])
        elif op is sre.ATOMIC_GROUP:
            yield from walk(av)


def unbounded_numbers(pattern: re.Pattern[Any]) -> list[str]:
    found = []
    for op, av in walk(sre_parse.parse(pattern.pattern, pattern.flags)):
        unbounded = op in REPEATS and (av[1] is sre.MAXREPEAT or av[1] > LONGEST_NUMBER)
        if unbounded and len(av[2]) == 1 and numeric(av[2][0]):
            found.append(f"{{{av[0]},{'' if av[1] is sre.MAXREPEAT else av[1]}}}")
    return found


def starts(parsed: Any) -> Iterator[list[tuple[Any, Any]]]:
    """Each way the pattern can begin: the list of its nodes from that beginning."""
    items = list(parsed)
    if not items:
        return
    op, av = items[0]
    if op is sre.BRANCH:
        for branch in av[1]:
            yield from starts(list(branch) + items[1:])
    elif op is sre.SUBPATTERN:
        yield from starts(list(av[3]) + items[1:])
    else:
        yield items


def begins_with_a_bare_number(pattern: re.Pattern[Any]) -> bool:
    for items in starts(sre_parse.parse(pattern.pattern, pattern.flags)):
        op, av = items[0]
        if op is sre.AT:  # anchored at a line's start: one attempt only
            continue
        look_behind = op is sre.ASSERT_NOT and av[0] == -1
        if look_behind and any(numeric(node) for node in av[1]):  # it excludes digits
            continue
        first = av[2][0] if op in REPEATS and len(av[2]) == 1 else (op, av)
        if numeric(first):
            return True
    return False


def test_the_check_sees_the_patterns_it_must_and_flags_the_old_forms() -> None:
    names = {name for name, _ in ALL}
    assert {"sizes._SIZE_RE", "parse._PROCESS", "parse._BFC_LIMIT", "logtext._CRI_RE"} <= names
    assert len(ALL) >= 50
    # the forms issue 11 found: an unbounded run, and a size that starts on a bare number
    assert unbounded_numbers(re.compile(r"GPU (\d+)[;, ]")) == ["{1,}"]
    assert begins_with_a_bare_number(re.compile(r"(\d+(?:\.\d+)?)\s*GiB total capacity"))
    assert not begins_with_a_bare_number(re.compile(r"(?<![\d.])\d{1,20} GiB"))
    assert not begins_with_a_bare_number(re.compile(r"^\d+ GiB"))


@pytest.mark.parametrize(("name", "pattern"), ALL, ids=[name for name, _ in ALL])
def test_every_number_a_pattern_reads_is_bounded(name: str, pattern: re.Pattern[Any]) -> None:
    assert unbounded_numbers(pattern) == []


@pytest.mark.parametrize(("name", "pattern"), ALL, ids=[name for name, _ in ALL])
def test_no_pattern_starts_on_a_bare_number(name: str, pattern: re.Pattern[Any]) -> None:
    assert not begins_with_a_bare_number(pattern)


DRIVER = dict(formats._FAMILIES)[formats.DRIVER]
DRIVER_PIECES = st.sampled_from(
    [
        "Error",
        "ERROR",
        "INTERNAL",
        "Exception",
        "Errors",
        "xError",
        " ",
        ": ",
        "_",
        "\n",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation",
        "hipErrorOutOfMemory",
        "a" * 50,
        "b" * 150,
        "é",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(DRIVER_PIECES, max_size=24), st.integers(0, 2000), st.integers(0, 2000))
def test_the_driver_search_finds_what_its_regex_finds(
    pieces: list[str], pos: int, span: int
) -> None:
    text = "".join(pieces)
    pos = min(pos, len(text))
    endpos = min(len(text), pos + span)
    expected = re.compile(DRIVER.pattern).search(text, pos, endpos)
    found = DRIVER.search(text, pos, endpos)
    assert (found and found.start()) == (expected and expected.start())


CLUE_PIECES = st.sampled_from(
    [
        "total capacity; ",
        "cached)",
        "xcached)",
        " cached)",
        "reserved in total by PyTorch)",
        "max_split_size_mb",
        "\n",
        "a",
        " ",
    ]
)
CLUE_REGEXES = (
    r"total capacity; .*\bcached\)",
    r"reserved in total by PyTorch\)(?!.*max_split_size_mb)",
    r"reserved in total by PyTorch\).*max_split_size_mb",
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CLUE_PIECES, max_size=14))
def test_the_release_clues_match_what_their_regexes_match(pieces: list[str]) -> None:
    text = "".join(pieces)
    for (clue, _), regex in zip(torchversion._CLUES, CLUE_REGEXES, strict=False):
        assert bool(clue.search(text)) == bool(re.search(regex, text))


RETRY_PIECES = st.sampled_from(
    [
        "OOM",
        "oom",
        "xOOM",
        "Out of Memory",
        "out of memory",
        "batch",
        "Batch",
        "BATCH_SIZE",
        "batch-size",
        "batch size",
        "batchsize",
        "batches",
        "=",
        ": ",
        " ",
        ",",
        "_",
        "\n",
        "x" * 10,
        "y" * 20,
        "1",
        "32",
        "64",
        "1234567890",
    ]
)
# phase.py's retry patterns before they read a lowercased line with a possessive repeat
RETRY_OOM_REGEX = re.compile(r"out of memory|\bOOM\b", re.IGNORECASE)
RETRY_BATCH_REGEX = re.compile(
    r"\bbatch(?:[ _-]?size)?\b[^\d\n]{0,16}?(\d{1,9})\b", re.IGNORECASE
)


@settings(max_examples=500, deadline=None)
@given(st.lists(RETRY_PIECES, max_size=20))
def test_the_retry_patterns_on_a_lowercased_line_read_what_the_ignorecase_ones_read(
    pieces: list[str],
) -> None:
    # ASCII text: IGNORECASE and lower() differ only on a few non-ASCII letters (the long s)
    line = "".join(pieces)
    lowered = line.lower()
    assert bool(phase._OOM_WORDS.search(lowered)) == bool(RETRY_OOM_REGEX.search(line))
    found, expected = phase._BATCH_SIZE.search(lowered), RETRY_BATCH_REGEX.search(line)
    assert (found and found.group(1)) == (expected and expected.group(1))


def test_the_retry_check_reads_a_hostile_precontext_in_bounded_steps() -> None:
    # 256 KiB of lines naming "batch" hundreds of times with no size near: no sizes, no verdict;
    # and the same with one real shrinking loop after it still reads the loop
    hostile = ("out of memory, " + "batch " * 680 + "\n") * 64
    assert not phase._shrinking_retries(hostile)
    loop = "OOM at batch size 64, retrying\nOOM at batch size 32, retrying\n"
    assert phase._shrinking_retries(hostile + loop)


def _matches_newline(item: tuple[Any, Any], flags: int) -> bool:
    """Whether one parsed regex item can match ``\\n`` (True when unsure)."""
    op, av = item
    crossing = (sre.CATEGORY_SPACE, sre.CATEGORY_NOT_DIGIT, sre.CATEGORY_NOT_WORD)
    if op is sre.LITERAL:
        return bool(av == 10)
    if op is sre.NOT_LITERAL:
        return bool(av != 10)
    if op is sre.ANY:
        return bool(flags & re.DOTALL)
    if op is sre.CATEGORY:
        return av in crossing
    if op is sre.IN:
        negated = any(o is sre.NEGATE for o, _ in av)
        hit = any(
            (o is sre.LITERAL and a == 10)
            or (o is sre.RANGE and a[0] <= 10 <= a[1])
            or (o is sre.CATEGORY and a in crossing)
            for o, a in av
        )
        return hit != negated
    return True


def line_start_repeats_cross_lines(pattern: re.Pattern[Any]) -> bool:
    """A MULTILINE pattern whose ``^`` is followed by a repeat that can match a newline: tried
    at every line start of a run of such lines, each attempt reads the rest of the run."""
    if not pattern.flags & re.MULTILINE:
        return False
    source = pattern.pattern
    if isinstance(source, bytes):
        source = source.decode("latin-1")
    items = list(sre_parse.parse(source, pattern.flags))
    for (op, av), (next_op, next_av) in itertools.pairwise(items):
        repeats = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
        if op is sre.AT and av is sre.AT_BEGINNING and next_op in repeats:
            body = list(next_av[2])
            if next_av[1] > 1 and any(_matches_newline(x, pattern.flags) for x in body):
                return True
    return False


def test_the_line_start_check_flags_the_old_frame_pattern() -> None:
    old = re.compile(r'^\s*File "([^"\n]{0,512})", line \d{1,9}', re.MULTILINE)
    assert line_start_repeats_cross_lines(old)
    assert line_start_repeats_cross_lines(re.compile(r"^.*x", re.MULTILINE | re.DOTALL))
    assert not line_start_repeats_cross_lines(re.compile(r"^[ \t]*File", re.MULTILINE))
    assert not line_start_repeats_cross_lines(re.compile(r"^\s*File"))  # not MULTILINE
    assert any(p.flags & re.MULTILINE for _, p in ALL)


@pytest.mark.parametrize(("name", "pattern"), ALL, ids=[name for name, _ in ALL])
def test_no_line_start_repeat_crosses_a_newline(name: str, pattern: re.Pattern[Any]) -> None:
    assert not line_start_repeats_cross_lines(pattern)


def test_frames_after_blank_lines_and_indents_are_read_as_before() -> None:
    traceback = (
        "Traceback (most recent call last):\n\n\n"
        '  File "/app/train.py", line 42, in <module>\n'
        "    loss.backward()\n\n"
        '\t File "/usr/lib/python3/site-packages/torch/_tensor.py", line 581, in backward\n'
        "    torch.autograd.backward(\n"
        '\r  File "/usr/lib/python3/site-packages/torch/autograd/__init__.py", line 347, in '
        "backward\n"
        "    _engine_run_backward(\n"
    )
    assert phase._frames(traceback) == [
        ("/app/train.py", "<module>", "loss.backward()"),
        ("/usr/lib/python3/site-packages/torch/_tensor.py", "backward", "torch.autograd.backward("),
        ("/usr/lib/python3/site-packages/torch/autograd/__init__.py", "backward",
         "_engine_run_backward("),
    ]  # fmt: skip
    assert phase._frames("Traceback (most recent call last):\n" + "\n" * 4096) == []
