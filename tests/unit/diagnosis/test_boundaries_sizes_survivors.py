"""Sizes at their edges (issue 18, mutation survivors of ``diagnosis/sizes.py``): PyTorch's
``format_size`` switches unit at exactly 1024 bytes, 1024 KiB and 1024 MiB; the "no limit"
sentinel starts at exactly 2^54 bytes; units are read case-insensitively and around spaces; a
fraction of zeros is an integer (exact), any other fraction is rounded. Literal numbers only."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.sizes import (
    format_size,
    is_no_limit,
    parse_size,
    to_bytes,
    to_count,
    unit_bytes,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 bytes"),
        (1, "1 bytes"),
        (1023, "1023 bytes"),
        (1024, "1024 bytes"),  # torch: `if num_bytes <= 1024`
        (1025, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (1048575, "1024.00 KiB"),  # 1 byte under 1 MiB: still KiB
        (1048576, "1.00 MiB"),
        (1572864, "1.50 MiB"),
        (1073741823, "1024.00 MiB"),  # 1 byte under 1 GiB: still MiB
        (1073741824, "1.00 GiB"),
        (1610612736, "1.50 GiB"),
        (1099511627776, "1024.00 GiB"),  # never TiB
        (-1, "-1 bytes"),
        (-1536, "-1.50 KiB"),
        (-1073741824, "-1.00 GiB"),
        (1536.0, "1.50 KiB"),
        (512.7, "512 bytes"),
    ],
)
def test_format_size_switches_unit_where_torch_does(value: int | float, text: str) -> None:
    assert format_size(value) == text


def test_format_size_of_none_is_a_question_mark() -> None:
    assert format_size(None) == "?"


@pytest.mark.parametrize(
    ("value", "no_limit"),
    [
        (18014398509481984, True),  # 2^54
        (18014398509481983, False),  # 2^54 - 1
        (18446744073709551616, True),  # 2^64
        (0, False),
        (None, False),
    ],
)
def test_no_limit_starts_at_two_to_the_54(value: int | None, no_limit: bool) -> None:
    assert is_no_limit(value) is no_limit


@pytest.mark.parametrize(
    ("unit", "factor"),
    [
        ("KiB", 1024),
        ("kib", 1024),
        ("KIB", 1024),
        (" MiB ", 1048576),
        ("\tGiB\n", 1073741824),
        ("TiB", 1099511627776),
        ("K", 1024),
        ("G", 1073741824),
        ("KB", 1000),
        ("MB", 1000000),
        ("GB", 1000000000),
        ("TB", 1000000000000),
        ("B", 1),
        ("bytes", 1),
        ("Bytes", 1),
        ("", 1),
        ("PiB", None),
        ("XX", None),
    ],
)
def test_units_are_read_case_insensitively_and_without_spaces(
    unit: str, factor: int | None
) -> None:
    assert unit_bytes(unit) == factor


@pytest.mark.parametrize(
    ("number", "unit", "size"),
    [
        ("1.5", "KiB", 1536),
        ("1.50", "KiB", 1536),
        ("0.5", "bytes", 0),  # round half to even
        ("1.5", "bytes", 2),
        ("2.5", "bytes", 2),
        ("1.2", "G", 1288490189),
        ("1.00", "GiB", 1073741824),
        ("1,024", "MiB", 1073741824),
        ("1,024", "bytes", 1024),
        ("3", "GB", 3000000000),
        # a fraction of zeros is an integer: exact where a float would round
        ("9007199254740993.00", "bytes", 9007199254740993),
        ("9007199254740993.0", "bytes", 9007199254740993),
        ("9007199254740993", "bytes", 9007199254740993),
    ],
)
def test_to_bytes_reads_fractions_commas_and_units(number: str, unit: str, size: int) -> None:
    assert to_bytes(number, unit) == size


@pytest.mark.parametrize(
    ("number", "unit"),
    [
        ("1.5", "PiB"),  # unknown unit
        ("1.5x", "GiB"),  # not a number
        ("", "GiB"),
        ("1.2.3", "GiB"),
        ("1,5", "GiB"),  # a comma group has three digits
        ("17179869184.01", "GiB"),  # above 2^64 through the float path
        ("16777216.5", "TiB"),
    ],
)
def test_to_bytes_rejects_what_is_not_a_size(number: str, unit: str) -> None:
    assert to_bytes(number, unit) is None


@pytest.mark.parametrize(
    ("number", "count"),
    [
        ("0", 0),
        ("7", 7),
        ("1,234", 1234),
        ("214,748,364,800", 214748364800),
        ("12345678901234567890", 12345678901234567890),
        ("1.0", None),
        ("1.5", None),
        ("1,2345", None),
        ("x1", None),
        ("", None),
    ],
)
def test_to_count_reads_plain_integers_only(number: str, count: int | None) -> None:
    assert to_count(number) == count


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("Tried to allocate 20.00 MiB (GPU 0)", 20971520),
        ("free 3 KiB then 5 GiB", 3072),  # the first size
        ("1536 bytes", 1536),
        ("1 byte", 1),
        ("12 B", 12),
        ("12B", 12),
        ("2  GiB", 2147483648),
        ("8 KB", 8000),
        ("no size here", None),
        ("2 gib", None),  # the pattern's unit is case-sensitive
        ("17179869185.00 GiB", None),
    ],
)
def test_parse_size_finds_the_first_size(text: str, size: int | None) -> None:
    assert parse_size(text) == size
