"""``PYTORCH_CUDA_ALLOC_CONF``: parse, validate by torch release and backend, merge.

The grammar is torch's own ``ConfigTokenizer``: ``,``, ``:``, ``[`` and ``]`` are tokens, spaces
are dropped, everything else makes up keys and values (``key:value,key:[a:b,c:d]``). Problems are
worded like torch's messages (they changed in 2.10 and again around 2.12) with a reason added
where torch's text alone would puzzle (a key that the release does not have yet).

A problem is reported only when it is certain for every release the evidence allows; a setting
is recommended only when every release the evidence allows accepts it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from .torchversion import UNKNOWN, Release, TorchRange, format_release, parse_torch_version

NATIVE: Final = "native"
ASYNC: Final = "cudaMallocAsync"
BACKENDS: Final = (NATIVE, ASYNC)


@dataclass(frozen=True)
class KeySpec:
    name: str
    first: Release
    kind: (
        str  # bool | size_mb | positive_mb | split_mb | gc | fraction | roundup | backend | threads
    )
    removed: Release | None = None
    native_only: bool = False
    on_rocm: bool = True


KEYS: Final[dict[str, KeySpec]] = {
    spec.name: spec
    for spec in (
        KeySpec("max_split_size_mb", (1, 10), "split_mb", native_only=True),
        KeySpec("garbage_collection_threshold", (1, 12), "gc", native_only=True),
        KeySpec("roundup_power2_divisions", (1, 12), "roundup", native_only=True),
        KeySpec(
            "roundup_bypass_threshold_mb", (1, 13), "size_mb", removed=(2, 1), native_only=True
        ),
        KeySpec("backend", (2, 0), "backend"),
        KeySpec("expandable_segments", (2, 1), "bool", native_only=True, on_rocm=False),
        KeySpec("release_lock_on_cudamalloc", (2, 2), "bool", native_only=True),
        KeySpec("pinned_use_cuda_host_register", (2, 2), "bool"),
        KeySpec("pinned_num_register_threads", (2, 2), "threads"),
        KeySpec("max_non_split_rounding_mb", (2, 6), "size_mb", native_only=True),
        KeySpec("pinned_use_background_threads", (2, 6), "bool"),
        KeySpec("graph_capture_record_stream_reuse", (2, 9), "bool", native_only=True),
        KeySpec("per_process_memory_fraction", (2, 10), "fraction"),
        KeySpec("pinned_reserve_segment_size_mb", (2, 10), "positive_mb"),
        KeySpec("large_segment_size_mb", (2, 11), "size_mb", native_only=True),
        KeySpec("pinned_free_catch_all", (2, 12), "bool"),
        KeySpec("throw_on_cudamalloc_oom", (2, 12), "bool", native_only=True),
        KeySpec("pinned_max_round_threshold_mb", (2, 13), "size_mb"),
        KeySpec("pinned_max_cached_size_mb", (2, 13), "size_mb"),
    )
}


NEWEST: Final[Release] = max(spec.first for spec in KEYS.values())
"""The newest release these rules know (its keys' first release): what an unknown release is
checked as where a caller asks for the newest rules (the admission webhook)."""


class IssueKind(StrEnum):
    """What is wrong with one entry (the admission webhook's and check-manifest's classes)."""

    SYNTAX = "syntax"
    UNKNOWN_KEY = "unknown-key"
    NOT_IN_RELEASE = "not-in-release"
    INVALID_VALUE = "invalid-value"
    IGNORED = "ignored"
    """Accepted and does nothing: a key the backend or the build ignores, or a value that is
    the default (``max_split_size_mb:-1``)."""


@dataclass(frozen=True)
class Issue:
    kind: IssueKind
    message: str
    entry: Entry | None  # None for a syntax error
    problem: bool = True
    """False for a harmless no-op (a default value): the diagnosis keeps such an entry."""


def tokenize(value: str) -> list[str]:
    """Torch's ConfigTokenizer: separators are tokens, spaces vanish."""
    tokens: list[str] = []
    word = ""
    for char in value:
        if char in ",:[]":
            if word:
                tokens.append(word)
                word = ""
            tokens.append(char)
        elif not char.isspace():
            word += char
    if word:
        tokens.append(word)
    return tokens


@dataclass(frozen=True)
class Entry:
    key: str
    value: str  # "True", "128", "[256:1,>:8]"
    index: int  # token index of the value (torch's messages count tokens)

    def render(self) -> str:
        return f"{self.key}:{self.value}"


@dataclass(frozen=True)
class Checked:
    entries: tuple[Entry, ...]
    problems: tuple[str, ...]
    bad_keys: frozenset[str]  # keys whose entry the release or backend rejects or ignores
    backend: str
    issues: tuple[Issue, ...] = ()
    """Every problem with its class and entry, and the harmless no-ops that are not problems
    (``max_split_size_mb:-1``: the default, no limit)."""


def _parse(tokens: list[str]) -> tuple[list[Entry], list[str]]:
    entries: list[Entry] = []
    problems: list[str] = []
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if key in ",:[]":
            problems.append(f"Expected a key at index {i} in ConfigTokenizer but got '{key}'")
            i += 1
            continue
        if i + 1 >= len(tokens) or tokens[i + 1] != ":":
            got = tokens[i + 1] if i + 1 < len(tokens) else "<end>"
            problems.append(f"Expected ':' at index {i + 1} in ConfigTokenizer but got '{got}'")
            i = _next_comma(tokens, i + 1)
            continue
        j = i + 2
        if j >= len(tokens) or tokens[j] in ",:]":
            problems.append(f"Expected a value for '{key}' at index {j} in ConfigTokenizer")
            i = _next_comma(tokens, j)
            continue
        if tokens[j] == "[":
            try:  # searched in place: a slice per '[' made many brackets quadratic
                close = tokens.index("]", j)
            except ValueError:
                close = len(tokens)
            value = "".join(tokens[j : close + 1])
            entries.append(Entry(key, value, j))
            j = close + 1
        else:
            entries.append(Entry(key, tokens[j], j))
            j += 1
        if j < len(tokens) and tokens[j] != ",":
            problems.append(f"Expected ',' at index {j} in ConfigTokenizer but got '{tokens[j]}'")
            j = _next_comma(tokens, j) - 1
        i = j + 1
    return entries, problems


def _next_comma(tokens: list[str], start: int) -> int:
    for k in range(start, len(tokens)):
        if tokens[k] == ",":
            return k + 1
    return len(tokens)


def _unrecognized(key: str, release: TorchRange) -> str:
    if release.surely_below((2, 10)):
        return f"Unrecognized CachingAllocator option: {key}"
    if release.surely_at_least((2, 12)):
        return f"Unrecognized key '{key}' in Accelerator allocator config."
    return f"Unrecognized key '{key}' in CUDA allocator config."


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _as_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _check_bool(entry: Entry, release: TorchRange) -> str | None:
    if entry.value in ("True", "False"):
        return None
    return (
        f"Expected 'True' or 'False' at index {entry.index} in ConfigTokenizer "
        f"but got '{entry.value}'"
    )


def _check_size(entry: Entry, release: TorchRange) -> str | None:
    value = _as_int(entry.value)
    if value is None or value < 0:
        return f"Expected a non-negative integer (MB) for {entry.key} but got '{entry.value}'"
    return None


def _check_positive(entry: Entry, release: TorchRange) -> str | None:
    value = _as_int(entry.value)
    if value is None or value <= 0:
        return f"{entry.key} must be a positive integer (MB), got '{entry.value}'"
    return None


def _check_split(entry: Entry, release: TorchRange) -> str | None:
    value = _as_int(entry.value)
    if value is None:
        return f"Expected an integer (MB) for max_split_size_mb but got '{entry.value}'"
    if value < 0 and not release.surely_below((2, 10)):
        return None  # 2.10+ read -1 as "no limit" without complaint
    if release.surely_below((2, 10)):
        if value <= 20:
            return "CachingAllocator option max_split_size_mb too small, must be > 20"
    elif value < 20:
        return "CachingAllocator option max_split_size_mb too small, must be >= 20"
    return None


def _check_gc(entry: Entry, release: TorchRange) -> str | None:
    value = _as_float(entry.value)
    if value is None or not 0.0 < value < 1.0:
        return "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"
    return None


def _check_fraction(entry: Entry, release: TorchRange) -> str | None:
    value = _as_float(entry.value)
    if value is None or not 0.0 <= value <= 1.0:
        return "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"
    return None


def _check_backend(entry: Entry, release: TorchRange) -> str | None:
    if entry.value in BACKENDS:
        return None
    return "Unknown allocator backend, options are native and cudaMallocAsync"


def _check_threads(entry: Entry, release: TorchRange) -> str | None:
    value = _as_int(entry.value)
    if value is None or not _is_power_of_two(value):
        return f"Number of register threads has to be power of 2, got {entry.value}"
    if value > 128:
        return f"Number of register threads should be less than or equal to 128, got {value}"
    return None


def _check_roundup(entry: Entry, release: TorchRange) -> str | None:
    spelled = "divisons" if release.surely_below((2, 8)) else "divisions"
    zero_ok = not release.surely_below((2, 4))

    def division_ok(text: str) -> bool:
        n = _as_int(text)
        return n is not None and (_is_power_of_two(n) or (zero_ok and n == 0))

    if not entry.value.startswith("["):
        if division_ok(entry.value):
            return None
        return f"For roundups, the {spelled} has to be power of 2"
    if release.surely_below((2, 0)):
        return (
            f"roundup_power2_divisions takes a single integer before torch 2.0, got '{entry.value}'"
        )
    for item in entry.value.strip("[]").split(","):
        interval, _, divisions = item.partition(":")
        size = _as_int(interval)
        if interval != ">" and (size is None or not _is_power_of_two(size)):
            return "For roundups, the intervals have to be power of 2"
        if not division_ok(divisions):
            return f"For roundups, the {spelled} has to be power of 2 or 0 to disable roundup"
    return None


_VALUE_CHECKS: Final[dict[str, Callable[[Entry, TorchRange], str | None]]] = {
    "bool": _check_bool,
    "size_mb": _check_size,
    "positive_mb": _check_positive,
    "split_mb": _check_split,
    "gc": _check_gc,
    "fraction": _check_fraction,
    "backend": _check_backend,
    "threads": _check_threads,
    "roundup": _check_roundup,
}


def key_available(spec: KeySpec, release: TorchRange, *, rocm: bool = False) -> bool:
    """Every release the evidence allows accepts ``spec`` (for recommending it)."""
    if rocm and not spec.on_rocm:
        return False
    if not release.surely_at_least(spec.first):
        return False
    return spec.removed is None or release.surely_below(spec.removed)


def _release_problem(spec: KeySpec, release: TorchRange) -> str | None:
    if release.surely_below(spec.first):
        needs = f"{spec.name} needs torch >= {format_release(spec.first)}"
        return f"{_unrecognized(spec.name, release)} ({needs})"
    if spec.removed is not None and release.surely_at_least(spec.removed):
        gone = f"{spec.name} was removed in torch {format_release(spec.removed)}"
        return f"{_unrecognized(spec.name, release)} ({gone})"
    return None


def effective_backend(entries: Iterable[Entry], backend: str | None) -> str:
    """The ``backend`` key wins over what the caller says; native by default."""
    chosen = backend if backend in BACKENDS else NATIVE
    for entry in entries:
        if entry.key == "backend" and entry.value in BACKENDS:
            chosen = entry.value
    return chosen


def check(
    value: str, release: TorchRange = UNKNOWN, backend: str | None = None, *, rocm: bool = False
) -> Checked:
    """Parse ``value`` and list every certain problem for ``release`` and ``backend``."""
    entries, syntax = _parse(tokenize(value))
    chosen = effective_backend(entries, backend)
    issues = [Issue(IssueKind.SYNTAX, problem, None) for problem in syntax]
    for entry in entries:
        issue = _entry_issue(entry, release, chosen, rocm)
        if issue is not None:
            issues.append(issue)
    problems = [i for i in issues if i.problem]
    return Checked(
        tuple(entries), tuple(i.message for i in problems),
        frozenset(i.entry.key for i in problems if i.entry is not None), chosen, tuple(issues),
    )


def _entry_issue(entry: Entry, release: TorchRange, backend: str, rocm: bool) -> Issue | None:
    spec = KEYS.get(entry.key)
    if spec is None:
        return Issue(IssueKind.UNKNOWN_KEY, _unrecognized(entry.key, release), entry)
    problem = _release_problem(spec, release)
    if problem is not None:
        return Issue(IssueKind.NOT_IN_RELEASE, problem, entry)
    problem = _VALUE_CHECKS[spec.kind](entry, release)
    if problem is not None:
        return Issue(IssueKind.INVALID_VALUE, problem, entry)
    if rocm and not spec.on_rocm:
        return Issue(IssueKind.IGNORED, f"{entry.key} is not supported on ROCm builds of torch",
                     entry)
    if spec.native_only and backend == ASYNC:
        return Issue(IssueKind.IGNORED, f"{entry.key} is an option of the native allocator; "
                     "backend:cudaMallocAsync ignores it", entry)
    if spec.kind == "split_mb" and (_as_int(entry.value) or 0) < 0:
        return Issue(IssueKind.IGNORED, f"max_split_size_mb:{entry.value} means no limit, the "
                     "default: this entry does nothing", entry, problem=False)
    return None


def validate_alloc_conf(
    value: str,
    *,
    torch_version: str | None = None,
    backend: str | None = None,
    rocm: bool = False,
) -> list[str]:
    """Problems torch would raise (or silently ignore) for ``value``; ``[]`` when it is valid.

    ``torch_version`` ("2.11", "2.11.0+cu130") limits the keys to that release; without it every
    key of some release is accepted and values are checked as the newest release checks them.
    """
    release = parse_torch_version(torch_version)
    problems: list[str] = []
    if torch_version is not None and release is None:
        problems.append(f"not a torch version: {torch_version!r}")
    if backend is not None and backend not in BACKENDS:
        problems.append("Unknown allocator backend, options are native and cudaMallocAsync")
    span = TorchRange.exact(release) if release is not None else UNKNOWN
    return problems + list(check(value, span, backend, rocm=rocm).problems)


def merge(current: Checked | None, updates: dict[str, str]) -> str:
    """``current`` without its rejected entries, with ``updates`` set (existing order kept)."""
    pairs: dict[str, str] = {}
    if current is not None:
        for entry in current.entries:
            if entry.key not in current.bad_keys:
                pairs[entry.key] = entry.value
    pairs.update(updates)
    return ",".join(f"{k}:{v}" for k, v in pairs.items())
