"""Memory sizes as printed by GPU stacks, to and from bytes.

PyTorch prints sizes with ``format_size``: ``<n> bytes`` up to 1024, then ``x.xx KiB|MiB|GiB``
(never TiB, so a limit of 2^64 bytes reads ``17179869184.00 GiB``). TensorFlow and XLA print
``200.00GiB`` or ``1.2G``; CuPy prints ``214,748,364,800 bytes``. Binary prefixes (``KiB``) and the
bare letters TensorFlow uses (``K``, ``M``, ``G``) are powers of 1024; SI units (``KB``, ``MB``,
``GB``) are powers of 1000.

Every figure comes from text a tenant controls, so a number is bounded where it is read: at most
``MAX_DIGITS`` digits, never starting inside a longer run of digits (which also keeps the search
linear: a pattern that may start at every digit of a run re-reads the run from each one), and a
size above ``MAX_SIZE_BYTES`` is not a size at all: ``None``, as if the log had not printed it.
"""

from __future__ import annotations

import math
import re
from typing import Final

NO_LIMIT_BYTES: Final = 2**64
"""PyTorch prints ``17179869184.00 GiB`` (2^64 bytes) for "no memory fraction set"."""

NO_LIMIT_TOLERANCE: Final = 2**54
"""Any figure this large is a "no limit" sentinel, not memory (2^54 bytes = 16 PiB)."""

MAX_SIZE_BYTES: Final = 2**64
"""The largest figure read as a size: every stack here counts bytes in a 64-bit ``size_t``, and
PyTorch's "no limit" sentinel prints as exactly 2^64 (``17179869184.00 GiB``, rounded). Above it a
figure is not memory but garbage, and is treated as absent."""

MAX_DIGITS: Final = 20
"""Digits read in one integer (or one fraction): 2^64 has 20. A longer run is not a figure."""

_UNITS: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}

NUMBER_PATTERN: Final = (
    rf"(?<![\d.,])(?:\d{{1,3}}(?:,\d{{3}}){{1,6}}|\d{{1,{MAX_DIGITS}}}(?:\.\d{{1,{MAX_DIGITS}}})?)"
    r"(?![\d,])"
)
"""A number as GPU stacks print one (``1.20``, ``214,748,364,800``), that neither starts nor
ends inside a longer run of digits: each attempt does bounded work, so a search is linear."""

SIZE_PATTERN: Final = (
    rf"(?P<num>{NUMBER_PATTERN})\s{{0,8}}(?P<unit>bytes|byte|[KMGT]iB|[KMGT]B|[KMGT]|B)\b"
)
"""A size with its unit (case-sensitive); named groups ``num`` and ``unit``."""

_NUMBER_RE: Final = re.compile(NUMBER_PATTERN)

_SIZE_RE: Final = re.compile(SIZE_PATTERN)


def unit_bytes(unit: str) -> int | None:
    """Bytes per ``unit`` (case-insensitive), or None for an unknown unit."""
    return _UNITS.get(unit.strip().lower())


def to_bytes(number: str, unit: str) -> int | None:
    """``("2.00", "GiB")`` -> 2147483648; None when the number or unit is not one, or when the
    size is above ``MAX_SIZE_BYTES``. Integers are exact (no float rounding)."""
    factor = unit_bytes(unit)
    if factor is None or _NUMBER_RE.fullmatch(number) is None:
        return None
    whole, _, fraction = number.replace(",", "").partition(".")
    if fraction.strip("0"):
        value = float(f"{whole}.{fraction}") * factor
        size = round(value) if math.isfinite(value) else MAX_SIZE_BYTES + 1
    else:
        size = int(whole) * factor
    return size if size <= MAX_SIZE_BYTES else None


def to_count(number: str) -> int | None:
    """A plain integer as printed (``1234``, ``214,748,364,800``), or None when it is not one or
    has more than ``MAX_DIGITS`` digits: a pid, a device index, a tensor dimension."""
    if _NUMBER_RE.fullmatch(number) is None or "." in number:
        return None
    return int(number.replace(",", ""))


def parse_size(text: str) -> int | None:
    """The first size in ``text`` in bytes (``"1.20 GiB"`` -> 1288490189), else None."""
    match = _SIZE_RE.search(text)
    if match is None:
        return None
    return to_bytes(match.group("num"), match.group("unit"))


def is_no_limit(value: int | None) -> bool:
    """True for the 2^64 "no limit" sentinel (and anything as absurdly large)."""
    return value is not None and value >= NO_LIMIT_TOLERANCE


def format_size(value: int | float | None) -> str:
    """Bytes as PyTorch prints them: ``512 bytes``, ``1.20 GiB``; ``?`` for None."""
    if value is None:
        return "?"
    if value < 0:
        return "-" + format_size(-value)
    if value <= 1024:
        return f"{int(value)} bytes"
    for unit, factor in (("KiB", 1024), ("MiB", 1024**2)):
        if value < factor * 1024:
            return f"{value / factor:.2f} {unit}"
    return f"{value / 1024**3:.2f} GiB"
