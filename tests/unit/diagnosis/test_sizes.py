"""Sizes at their edges (issue 18, mutation survivors of ``diagnosis/sizes.py``): PyTorch's
``format_size`` switches unit at exactly 1024 bytes, 1024 KiB and 1024 MiB; the "no limit"
sentinel starts at exactly 2^54 bytes; units are read case-insensitively and around spaces; a
fraction of zeros is an integer (exact), any other fraction is rounded. Literal numbers only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.diagnosis import Diagnosis, diagnose
from gpu_auditor.diagnosis.sizes import (
    NO_LIMIT_BYTES,
    format_size,
    is_no_limit,
    parse_size,
    to_bytes,
    to_count,
    unit_bytes,
)

from .diagnosis_helpers import GIB, ROOT, torch_oom

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


# Sizes as the messages print them.

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


# Hostile figures: digit runs and absurd sizes never raise and never become figures.

SLOTS_FILE = ROOT / "tests" / "fixtures" / "hostile" / "digit_slots.json"
SLOTS: dict[str, dict[str, Any]] = {
    name: slot
    for name, slot in json.loads(Path(SLOTS_FILE).read_text()).items()
    if not name.startswith("_")
}


OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)


def field(diagnosis: Diagnosis, name: str) -> Any:
    if name == "gpu_index":
        return diagnosis.figures.gpu_index
    if name == "other_process_pids":
        return [p.pid for p in diagnosis.figures.other_processes]
    return diagnosis.to_json_dict()["figures"][name]


NEGATIVE_ROOM_LOG = torch_oom(
    requested=2, total=80, free=3, allocated=1, unallocated=5, process=7, allowed=4
)


@pytest.mark.parametrize("name", sorted(SLOTS))
def test_each_digit_slot_is_a_real_figure_when_the_number_is_sane(name: str) -> None:
    slot = SLOTS[name]
    diagnosis = diagnose(slot["log"].replace("{D}", "3"))
    assert diagnosis.detected
    assert field(diagnosis, slot["field"]) == slot["value_for_3"]


@pytest.mark.parametrize("digits", [21, 400, 4301, 20_000])
@pytest.mark.parametrize("name", sorted(SLOTS))
def test_a_run_of_digits_in_any_figure_is_absent_not_an_error(name: str, digits: int) -> None:
    # 4301: one more than CPython's int() string limit (ValueError before the fix)
    slot = SLOTS[name]
    diagnosis = diagnose(slot["log"].replace("{D}", "9" * digits))
    assert field(diagnosis, slot["field"]) in (None, [])
    assert json.loads(json.dumps(diagnosis.to_json_dict())) == diagnosis.to_json_dict()


def test_the_tail_of_a_digit_run_is_not_read_as_a_figure() -> None:
    # a bounded pattern may not start inside the run: its last digits are not "1 GiB"
    log = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate " + "7" * 50 + "1.00 GiB")
    assert diagnose(log).figures.requested_bytes is None
    assert parse_size("7" * 30 + "1073741824 bytes") is None


def test_sizes_up_to_two_to_the_64_are_figures_above_are_absent() -> None:
    assert to_bytes("18446744073709551616", "bytes") == 2**64
    assert to_bytes("18446744073709551617", "bytes") is None
    assert to_bytes("17179869184.00", "GiB") == 2**64  # PyTorch's "no limit", rounded
    assert to_bytes("17179869184.01", "GiB") is None
    assert to_bytes("16777216", "TiB") == 2**64
    assert to_bytes("16777217", "TiB") is None
    assert to_bytes("12345678901234567890", "bytes") == 12345678901234567890  # 20 digits, exact
    assert to_bytes("123456789012345678901", "bytes") is None  # 21 digits: not a figure
    assert to_bytes("1,000,000,000,000,000,000", "bytes") == 10**18
    assert to_bytes("1,000,000,000,000,000,000,000", "bytes") is None  # 7 groups: not one
    assert to_bytes("1e400", "GiB") is None
    assert to_bytes("-3", "GiB") is None


def test_integer_sizes_are_exact_where_a_float_would_round() -> None:
    assert to_bytes(str(2**60 + 1), "bytes") == 2**60 + 1
    assert to_bytes("214,748,364,800", "bytes") == 214_748_364_800


def test_counts_are_bounded_integers() -> None:
    assert to_count("12345") == 12345
    assert to_count("9" * 21) is None
    assert to_count("1.5") is None
    assert to_count("") is None


def test_a_request_above_two_to_the_64_is_absent_and_the_no_limit_cap_stays_no_limit() -> None:
    huge = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate 17179869185.00 GiB")
    assert diagnose(huge).figures.requested_bytes is None
    capped = OOM.replace("Of the allocated", "17179869184.00 GiB allowed; Of the allocated")
    diagnosis = diagnose(capped)
    assert diagnosis.figures.allowed_bytes is None  # 2^64 = no memory fraction set
    assert diagnosis.figures.requested_bytes == 2 * GIB


def test_a_request_far_above_the_gpu_but_below_two_to_the_64_is_still_the_finding() -> None:
    # a bug that asks for 3.5 TiB is a real figure: "capacity: the request alone exceeds the GPU"
    log = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate 3584.00 GiB")
    diagnosis = diagnose(log)
    assert (diagnosis.kind, diagnosis.figures.requested_bytes) == ("capacity", 3584 * GIB)


def test_format_size_of_absurd_and_absent_sizes() -> None:
    assert format_size(2**64) == "17179869184.00 GiB"
    assert format_size(None) == "?"


def test_no_summary_shows_a_negative_size() -> None:
    diagnosis = diagnose(NEGATIVE_ROOM_LOG)
    assert diagnosis.kind == "fragmentation"
    assert re.search(r"(?<![\w.])-\d", diagnosis.summary) is None
