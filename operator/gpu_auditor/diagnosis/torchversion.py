"""Torch releases as (major, minor), and what an OOM message's wording says about the release.

Wording clues (from the PyTorch wheels 1.0–2.14, see ``shared/facts/pytorch-allocator.md``):

- ``(GPU 0; 15.78 GiB total capacity; ...; 43.99 MiB cached)``: 1.0–1.3.
- ``(GPU 0; ...; X reserved in total by PyTorch)`` without the ``max_split_size_mb`` hint: 1.4–1.9.
- the same with the ``max_split_size_mb`` hint: 1.10–2.0 (``max_split_size_mb`` exists, the
  ``expandable_segments`` key does not).
- ``total capacty of`` (sic): 2.1. ``total capacity of``: 2.2 and later.
- class ``torch.cuda.OutOfMemoryError``: 1.13+; ``torch.OutOfMemoryError``: 2.4+;
  ``torch.AcceleratorError``: 2.8+; the tip naming ``PYTORCH_ALLOC_CONF=``: 2.10+;
  the cudaMallocAsync block: 2.0+ (the ``backend`` key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .formats import NPU_OOM

Release = tuple[int, int]

_VERSION_RE: Final = re.compile(r"^\s*v?(\d{1,2})\.(\d{1,3})(?:[.\w+-]*)?\s*$")
_BANNER_RE: Final = re.compile(
    r"\b(?:torch|pytorch|PyTorch|Torch)(?:\s{1,8}version)?(?:==|\s{0,8}[:=]\s{0,8}|\s{1,8}v?|-)"
    r"(\d{1,2})\.(\d{1,3})\b"
)


def parse_torch_version(text: str | None) -> Release | None:
    """``"2.11.0+cu130"`` -> (2, 11); None for None or text that is not a version."""
    if not text:
        return None
    match = _VERSION_RE.match(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def format_release(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


@dataclass(frozen=True)
class TorchRange:
    """Releases the evidence allows, both ends inclusive; None = unbounded."""

    low: Release | None = None
    high: Release | None = None

    @classmethod
    def exact(cls, release: Release) -> TorchRange:
        return cls(release, release)

    @property
    def known(self) -> bool:
        return self.low is not None or self.high is not None

    def intersect(self, other: TorchRange) -> TorchRange:
        """Both constraints; when they contradict, the narrower evidence (``other``) wins."""
        low = max((r for r in (self.low, other.low) if r is not None), default=None)
        high = min((r for r in (self.high, other.high) if r is not None), default=None)
        if low is not None and high is not None and low > high:
            return other
        return TorchRange(low, high)

    def surely_at_least(self, release: Release) -> bool:
        """Every release in the range is >= ``release``."""
        return self.low is not None and self.low >= release

    def surely_below(self, release: Release) -> bool:
        """Every release in the range is < ``release``."""
        return self.high is not None and self.high < release

    def hint(self) -> str | None:
        """``"2.11"``, ``"1.10-2.0"``, ``">=2.4"``, ``"<=1.9"`` or None when nothing is known."""
        if self.low is not None and self.high is not None:
            if self.low == self.high:
                return format_release(self.low)
            return f"{format_release(self.low)}-{format_release(self.high)}"
        if self.low is not None:
            return f">={format_release(self.low)}"
        if self.high is not None:
            return f"<={format_release(self.high)}"
        return None


UNKNOWN: Final = TorchRange()


class _Then:
    """``first.*then`` (or, with ``absent``, ``first(?!.*then)``) on one line, in linear time:
    the regex form re-reads the rest of the line after every occurrence of ``first``."""

    def __init__(self, first: str, then: str, *, absent: bool = False) -> None:
        self._first, self._then, self._absent = first, re.compile(then), absent

    def search(self, text: str) -> bool:
        # ``.`` stops at a newline: look from the first occurrence of each line
        for line in text.split("\n"):
            # "some occurrence has no ``then`` after it": the last one; "has one": the first one
            at = line.rfind(self._first) if self._absent else line.find(self._first)
            if at >= 0 and (self._then.search(line, at + len(self._first)) is None) == self._absent:
                return True
        return False


_CLUES: Final[tuple[tuple[re.Pattern[str] | _Then, TorchRange], ...]] = (
    (_Then("total capacity; ", r"\bcached\)"), TorchRange(None, (1, 3))),
    (
        _Then("reserved in total by PyTorch)", "max_split_size_mb", absent=True),
        TorchRange(None, (1, 9)),
    ),
    (_Then("reserved in total by PyTorch)", "max_split_size_mb"), TorchRange((1, 10), (2, 0))),
    (re.compile(r"total capacty of"), TorchRange.exact((2, 1))),
    (re.compile(r"total capacity of"), TorchRange((2, 2), None)),
    (re.compile(r"\btorch\.cuda\.OutOfMemoryError\b"), TorchRange((1, 13), None)),
    (re.compile(r"(?<![.\w])torch\.OutOfMemoryError\b"), TorchRange((2, 4), None)),
    (re.compile(r"\btorch\.AcceleratorError\b"), TorchRange((2, 8), None)),
    (re.compile(r"PYTORCH_ALLOC_CONF=expandable_segments"), TorchRange((2, 10), None)),
    (re.compile(r"would exceed allowed memory"), TorchRange((2, 0), None)),
)


def infer_from_message(message: str) -> TorchRange:
    """What the wording of one OOM message (and its exception class) says about the release.
    Nothing for Ascend's torch_npu, which prints torch 1.x's wording on any release."""
    found = UNKNOWN
    if NPU_OOM in message:
        return found
    for pattern, clue in _CLUES:
        if pattern.search(message):
            found = found.intersect(clue)
    return found


def find_banner(text: str) -> Release | None:
    """The last release the job printed about itself (``torch 2.11.0+cu130``, ``torch==2.3.1``)."""
    last: Release | None = None
    for match in _BANNER_RE.finditer(text):
        last = int(match.group(1)), int(match.group(2))
    return last
