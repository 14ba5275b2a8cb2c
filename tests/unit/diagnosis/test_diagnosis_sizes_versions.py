"""Sizes to bytes and what message wording says about the torch release."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.sizes import NO_LIMIT_BYTES, format_size, is_no_limit, parse_size
from gpu_auditor.diagnosis.torchversion import (
    TorchRange,
    find_banner,
    infer_from_message,
    parse_torch_version,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("511.50 KiB", 523776),
        ("2.00 GiB", 2 * 2**30),
        ("0 bytes", 0),
        ("200.00GiB", 200 * 2**30),
        ("214,748,364,800 bytes", 214748364800),
        ("1.2G", round(1.2 * 2**30)),
        ("1234 MB", 1234 * 10**6),
    ],
)
def test_sizes_parse_to_bytes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_two_to_the_64_bytes_means_no_limit() -> None:
    value = parse_size("17179869184.00 GiB")
    assert value == NO_LIMIT_BYTES and is_no_limit(value)
    assert not is_no_limit(parse_size("139.80 GiB"))


@pytest.mark.parametrize("value", [0, 512, 1024, 523776, 2 * 2**30, round(6.9 * 2**30)])
def test_format_size_round_trips_like_torchs_format_size(value: int) -> None:
    assert abs((parse_size(format_size(value)) or 0) - value) <= value * 0.005 + 1


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
