"""Hostile figures: digit runs and absurd sizes never raise and never become figures.

Issue 11, "Crashes and stalls in the diagnosis core": figures of hundreds or thousands of digits
raised OverflowError or ValueError (or, below those limits, became figures of 10^300 bytes);
sizes above 2^64 bytes were reported; one summary showed a negative size.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from diagnosis_helpers import GIB, ROOT, torch_oom

from gpu_auditor.diagnosis import Diagnosis, diagnose
from gpu_auditor.diagnosis.sizes import format_size, parse_size, to_bytes, to_count

pytestmark = pytest.mark.unit

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


def test_a_leak_series_of_huge_figures_does_not_overflow() -> None:
    # 10^300 GiB is a finite float whose product with 2^30 is infinite: OverflowError in round()
    series = "".join(f"step {i} mem {i}{'9' * 300} GiB\n" for i in range(1, 9))
    diagnosis = diagnose(series + OOM)
    assert diagnosis.detected and diagnosis.growth is None


def test_a_banner_with_a_huge_version_number_is_no_release() -> None:
    diagnosis = diagnose("torch " + "9" * 5000 + "." + "9" * 5000 + "\n" + OOM)
    assert diagnosis.detected and diagnosis.torch_version_hint == ">=2.4"  # the wording's


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


NEGATIVE_ROOM_LOG = torch_oom(
    requested=2, total=80, free=3, allocated=1, unallocated=5, process=7, allowed=4
)


def test_no_summary_shows_a_negative_size() -> None:
    diagnosis = diagnose(NEGATIVE_ROOM_LOG)
    assert diagnosis.kind == "fragmentation"
    assert re.search(r"(?<![\w.])-\d", diagnosis.summary) is None
