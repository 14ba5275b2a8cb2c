"""Torch release ranges at their edges (issue 18, mutation survivors of
``diagnosis/torchversion.py``): both ends of a range are inclusive, a contradiction keeps the
narrower evidence, the two-part clues look only within one line and after the first part, and the
"absent" clue asks whether the *last* occurrence has nothing after it. Literal releases only."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import diagnose, torchversion
from gpu_auditor.diagnosis.torchversion import (
    TorchRange,
    find_banner,
    format_release,
    infer_from_message,
    parse_torch_version,
)

from .diagnosis_helpers import torch_oom

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("2.11.0+cu130", (2, 11)),
        ("1.13", (1, 13)),
        (" v2.4 ", (2, 4)),
        ("10.123", (10, 123)),
        ("2.3.1-rc1", (2, 3)),
        ("123.1", None),  # a three-digit major is no release
        ("2", None),
        ("latest", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_torch_version(text: str | None, release: tuple[int, int] | None) -> None:
    assert parse_torch_version(text) == release


def test_format_release_is_major_dot_minor() -> None:
    assert format_release((2, 11)) == "2.11"
    assert format_release((1, 3)) == "1.3"


def test_an_exact_range_has_both_ends() -> None:
    exact = TorchRange.exact((2, 1))
    assert (exact.low, exact.high) == ((2, 1), (2, 1))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # no evidence on either side stays unbounded
        (TorchRange(), TorchRange(), TorchRange()),
        (TorchRange((2, 0), None), TorchRange(), TorchRange((2, 0), None)),
        (TorchRange(None, (2, 0)), TorchRange(), TorchRange(None, (2, 0))),
        (TorchRange(), TorchRange((1, 10), (2, 0)), TorchRange((1, 10), (2, 0))),
        # the tighter end wins on each side
        (TorchRange((1, 10), (2, 4)), TorchRange((2, 0), (2, 8)), TorchRange((2, 0), (2, 4))),
        (TorchRange((2, 0), (2, 8)), TorchRange((1, 10), (2, 4)), TorchRange((2, 0), (2, 4))),
        # meeting in one release is no contradiction: that release
        (TorchRange((2, 0), None), TorchRange(None, (2, 0)), TorchRange((2, 0), (2, 0))),
        # a contradiction keeps the second (narrower) evidence
        (TorchRange((2, 1), None), TorchRange(None, (2, 0)), TorchRange(None, (2, 0))),
        (TorchRange(None, (1, 9)), TorchRange((1, 10), (2, 0)), TorchRange((1, 10), (2, 0))),
    ],
)
def test_intersect(a: TorchRange, b: TorchRange, expected: TorchRange) -> None:
    assert a.intersect(b) == expected


@pytest.mark.parametrize(
    ("rng", "release", "at_least", "below"),
    [
        (TorchRange((2, 4), None), (2, 4), True, False),  # low end inclusive
        (TorchRange((2, 4), None), (2, 5), False, False),
        (TorchRange((2, 4), None), (2, 3), True, False),
        (TorchRange(None, (2, 4)), (2, 4), False, False),  # high end inclusive: not below
        (TorchRange(None, (2, 4)), (2, 5), False, True),
        (TorchRange(None, (2, 4)), (2, 3), False, False),
        (TorchRange((2, 0), (2, 4)), (2, 0), True, False),
        (TorchRange((2, 0), (2, 4)), (2, 5), False, True),
        (TorchRange(), (2, 0), False, False),
    ],
)
def test_surely_at_least_and_surely_below(
    rng: TorchRange, release: tuple[int, int], at_least: bool, below: bool
) -> None:
    assert rng.surely_at_least(release) is at_least
    assert rng.surely_below(release) is below


@pytest.mark.parametrize(
    ("rng", "hint"),
    [
        (TorchRange((2, 11), (2, 11)), "2.11"),
        (TorchRange((1, 10), (2, 0)), "1.10-2.0"),
        (TorchRange((2, 4), None), ">=2.4"),
        (TorchRange(None, (1, 9)), "<=1.9"),
        (TorchRange(), None),
    ],
)
def test_hint(rng: TorchRange, hint: str | None) -> None:
    assert rng.hint() == hint


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        # the two-part clue at the very start of the line
        ("total capacity; 43.99 MiB cached)", "<=1.3"),
        ("(GPU 0; 15.78 GiB total capacity; 43.99 MiB cached)", "<=1.3"),
        # "cached)" before "total capacity; " is not the clue
        ("43.99 MiB cached) 15.78 GiB total capacity; 1 GiB", None),
        # nor on the next line
        ("15.78 GiB total capacity; 1 GiB\n43.99 MiB cached)", None),
        ("reserved in total by PyTorch)", "<=1.9"),
        ("reserved in total by PyTorch) try max_split_size_mb", "1.10-2.0"),
        ("max_split_size_mb then reserved in total by PyTorch)", "<=1.9"),
        ("reserved in total by PyTorch)\ntry max_split_size_mb", "<=1.9"),
        # the hint after the first occurrence only: the "with hint" clue holds
        (
            "reserved in total by PyTorch) max_split_size_mb reserved in total by PyTorch)",
            "1.10-2.0",
        ),
        ("GPU 0 has a total capacty of 79.15 GiB", "2.1"),
        ("GPU 0 has a total capacity of 79.15 GiB", ">=2.2"),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory.", ">=1.13"),
        ("torch.OutOfMemoryError: CUDA out of memory.", ">=2.4"),
        ("Process has 1 GiB memory in use. would exceed allowed memory", ">=2.0"),
        # two agreeing clues narrow together; a later contradicting one wins
        ("torch.cuda.OutOfMemoryError: ... total capacty of 79.15 GiB", "2.1"),
        ("total capacty of 79 GiB; torch.OutOfMemoryError: x", ">=2.4"),
        ("", None),
    ],
)
def test_infer_from_message(message: str, hint: str | None) -> None:
    assert infer_from_message(message).hint() == hint


def test_the_absent_clue_asks_about_the_last_occurrence_on_each_line() -> None:
    # through infer_from_message the "with hint" clue masks this one; the clue itself is a rule
    absent = torchversion._Then("reserved in total by PyTorch)", "max_split_size_mb", absent=True)
    present = torchversion._Then("reserved in total by PyTorch)", "max_split_size_mb")
    twice = "reserved in total by PyTorch) max_split_size_mb reserved in total by PyTorch)"
    assert absent.search(twice) is True
    assert present.search(twice) is True
    once = "reserved in total by PyTorch) max_split_size_mb"
    assert absent.search(once) is False
    assert present.search(once) is True
    assert absent.search("x\nreserved in total by PyTorch)\nmax_split_size_mb") is True
    assert present.search("x\nreserved in total by PyTorch)\nmax_split_size_mb") is False
    assert absent.search("reserved in total by PyTorch)") is True
    assert absent.search("nothing") is False
    assert present.search("nothing") is False


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("torch 2.11.0+cu130", (2, 11)),
        ("torch==2.3.1", (2, 3)),
        ("PyTorch version: 1.13.1", (1, 13)),
        ("torch-2.4.0", (2, 4)),
        ("torch 2.1.0\n...\ntorch 2.5.1\n", (2, 5)),  # the last one printed
        ("torchvision 0.16", None),
        ("", None),
    ],
)
def test_find_banner(text: str, release: tuple[int, int] | None) -> None:
    assert find_banner(text) == release


# Torch releases from the message's wording and the job's banner.

@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("2.11.0+cu130", (2, 11)),
        ("1.13", (1, 13)),
        ("v2.4.1", (2, 4)),
        ("latest", None),
        ("", None),
    ],
)
def test_torch_versions_parse_to_major_minor(text: str, release: tuple[int, int] | None) -> None:
    assert parse_torch_version(text) == release


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1 GiB total "
            "capacity; 1 GiB already allocated; 0 bytes free; 1 GiB reserved in total by "
            "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb",
            "1.10-2.0",
        ),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacty of 79.15 GiB",
            "2.1",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 79.15 GiB",
            ">=2.4",
        ),
        ("torch.AcceleratorError: CUDA error: out of memory", ">=2.8"),
        ("... try setting PYTORCH_ALLOC_CONF=expandable_segments:True", ">=2.10"),
        ("RuntimeError: CUDA error: out of memory", None),
    ],
)
def test_message_wording_narrows_the_release(message: str, hint: str | None) -> None:
    assert infer_from_message(message).hint() == hint


def test_banner_the_job_printed_is_found() -> None:
    assert find_banner("starting job on NVIDIA H200 torch 2.11.0+cu130\n") == (2, 11)
    assert find_banner("pip: torch==2.3.1 torchvision==0.18.1") == (2, 3)
    assert find_banner("File torch/nn/modules/module.py, torchvision 0.16") is None


def test_contradicting_evidence_keeps_the_narrower_one() -> None:
    assert TorchRange.exact((2, 0)).intersect(TorchRange((2, 4), None)) == TorchRange((2, 4), None)


OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)


def test_a_banner_with_a_huge_version_number_is_no_release() -> None:
    diagnosis = diagnose("torch " + "9" * 5000 + "." + "9" * 5000 + "\n" + OOM)
    assert diagnosis.detected and diagnosis.torch_version_hint == ">=2.4"  # the wording's


def test_ascend_s_npu_message_says_nothing_about_the_torch_release() -> None:
    """torch_npu prints torch 1.x's wording ("cached)") on any release (public24 c-002)."""
    from gpu_auditor.diagnosis.torchversion import UNKNOWN, infer_from_message

    message = (
        "NPU out of memory. Tried to allocate 9.78 GiB (NPU 0; 32.00 GiB total capacity; 29.80 "
        "GiB already allocated; 1.59 GiB free; 50.34 MiB cached)"
    )
    assert infer_from_message(message) == UNKNOWN
    assert infer_from_message(message.replace("NPU", "GPU")) != UNKNOWN
