"""Kubernetes timestamps: read from objects a tenant or the API server wrote, written as
RFC 3339 in UTC. One reading for every part (pods' states, owners' trials, jobs' evidence)."""

from __future__ import annotations

import datetime as dt
from typing import Final

MAX_CHARS: Final = 64
"""An RFC 3339 stamp with nanoseconds and an offset is 35 characters: longer text is no time."""


def parse_time(value: object) -> dt.datetime | None:
    """A timestamp as the API server writes one (``2026-12-02T05:54:31Z``), timezone-aware; None
    for anything else (not a string, too long, not a time). A stamp without an offset is UTC."""
    if not isinstance(value, str) or len(value) > MAX_CHARS:
        return None
    try:
        found = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=dt.UTC)


def stamp(when: dt.datetime) -> str:
    """``when`` in UTC to the second, as annotations and Events carry it."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
