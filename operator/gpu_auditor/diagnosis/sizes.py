"""Memory sizes as printed by GPU stacks, to and from bytes.

PyTorch prints sizes with ``format_size``: ``<n> bytes`` up to 1024, then ``x.xx KiB|MiB|GiB``
(never TiB, so a limit of 2^64 bytes reads ``17179869184.00 GiB``). TensorFlow and XLA print
``200.00GiB`` or ``1.2G``; CuPy prints ``214,748,364,800 bytes``. Binary prefixes (``KiB``) and the
bare letters TensorFlow uses (``K``, ``M``, ``G``) are powers of 1024; SI units (``KB``, ``MB``,
``GB``) are powers of 1000.
"""

from __future__ import annotations

import re
from typing import Final

NO_LIMIT_BYTES: Final = 2**64
"""PyTorch prints ``17179869184.00 GiB`` (2^64 bytes) for "no memory fraction set"."""

NO_LIMIT_TOLERANCE: Final = 2**54
"""Any figure this large is a "no limit" sentinel, not memory (2^54 bytes = 16 PiB)."""

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

SIZE_PATTERN: Final = (
    r"(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*"
    r"(?P<unit>bytes|byte|[KMGT]iB|[KMGT]B|[KMGT]|B)\b"
)
"""A size with its unit (case-sensitive); named groups ``num`` and ``unit``."""

_SIZE_RE: Final = re.compile(SIZE_PATTERN)


def unit_bytes(unit: str) -> int | None:
    """Bytes per ``unit`` (case-insensitive), or None for an unknown unit."""
    return _UNITS.get(unit.strip().lower())


def to_bytes(number: str, unit: str) -> int | None:
    """``("2.00", "GiB")`` -> 2147483648; None when the number or unit is not one."""
    factor = unit_bytes(unit)
    if factor is None:
        return None
    try:
        value = float(number.replace(",", ""))
    except ValueError:
        return None
    if value < 0 or value != value or value == float("inf"):
        return None
    return round(value * factor)


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
