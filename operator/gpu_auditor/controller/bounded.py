"""Values that always fit their annotation: text cut at a byte budget, JSON cut at whole items.

Annotations share one limit per object (256 KiB for all keys and values together); the
operator keeps its own far below (`annotations.BUDGET`). A JSON value is never cut inside a
string: whole items are left out and counted, so what lands on the pod always parses.
Numbers that JSON cannot carry faithfully (NaN, infinities, integers beyond 2**63) become null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

ELLIPSIS = "…"
MAX_INT = 2**63 - 1
MAX_DEPTH = 6

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


def size(text: str) -> int:
    """Bytes the API server counts for `text` (UTF-8)."""
    return len(text.encode("utf-8", "replace"))


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` UTF-8 bytes; a cut one ends with '…'."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[: max(limit - size(ELLIPSIS), 0)].decode("utf-8", "ignore") + ELLIPSIS


def dumps(value: JsonValue) -> str:
    """Compact JSON, ASCII only (so its length is its size in bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def plain(value: object, string_limit: int, depth: int = 0) -> JsonValue:
    """`value` as JSON data: strings cut to `string_limit` bytes, absurd numbers as null,
    anything else as its (cut) text."""
    if value is None or isinstance(value, bool | str):
        return clip(value, string_limit) if isinstance(value, str) else value
    if isinstance(value, int):
        return value if -MAX_INT <= value <= MAX_INT else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return ELLIPSIS
    if isinstance(value, Mapping):
        return {clip(str(k), 64): plain(v, string_limit, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, string_limit, depth + 1) for v in value]
    return clip(str(value), string_limit)


def whole_items(items: Sequence[JsonValue], limit: int) -> tuple[list[JsonValue], int]:
    """The longest prefix of `items` whose JSON array fits `limit` bytes, and how many items
    were left out."""
    kept: list[JsonValue] = []
    used = 2  # []
    for item in items:
        cost = len(dumps(item)) + (1 if kept else 0)
        if used + cost > limit:
            break
        kept.append(item)
        used += cost
    return kept, len(items) - len(kept)


def json_list(items: Sequence[object], limit: int, *, item_limit: int, what: str) -> str:
    """A JSON array of whole items (each string cut to `item_limit` bytes) in at most `limit`
    bytes; when some are left out, the last item says how many: "(3 more <what> left out)"."""
    values = [plain(item, item_limit) for item in items]
    kept, left = whole_items(values, limit)
    if not left:
        return dumps(kept)
    while True:
        note = f"({left} more {what} left out)"
        if len(dumps([*kept, note])) <= limit or not kept:
            return dumps([*kept, note]) if len(dumps([note])) <= limit else "[]"
        kept.pop()
        left += 1


def json_object(
    fields: Sequence[tuple[str, object]], limit: int, *, string_limit: int, list_limit: int,
) -> str:
    """A JSON object of `fields` (in priority order) in at most `limit` bytes.

    Strings are cut to `string_limit` bytes; a list is cut to whole items within `list_limit`
    bytes and `leftOut.<field>` says how many items it lost; fields that still do not fit are
    left out from the end and named in `leftOut.fields`.
    """
    values: list[tuple[str, JsonValue]] = []
    left_out: dict[str, JsonValue] = {}
    for name, raw in fields:
        value = plain(raw, string_limit)
        if isinstance(value, list):
            value, left = whole_items(value, list_limit)
            if left:
                left_out[name] = left
        values.append((name, value))
    dropped: list[str] = []
    while True:
        out: dict[str, JsonValue] = dict(values)
        notes: dict[str, JsonValue] = dict(left_out)
        if dropped:
            fields_left: list[JsonValue] = [*dropped]
            notes["fields"] = fields_left
        if notes:
            out["leftOut"] = notes
        text = dumps(out)
        if len(text) <= limit or not values:
            return text if len(text) <= limit else "{}"
        name, _ = values.pop()
        left_out.pop(name, None)
        dropped.insert(0, name)
