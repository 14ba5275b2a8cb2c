"""Exposition text for /metrics, rendered once per sampling pass instead of once per scrape.

The agent's families come from an immutable Snapshot, so every scrape between two passes would
render the same bytes; turning ~1,000 samples into text costs prometheus_client ~15 ms. So the
sampling thread renders them right after each pass, in every format a scraper has asked for so
far, and a scrape only appends the live ``process_*`` self metrics. The Collector still builds
fresh families from the snapshot each time it is collected (``--once``, tests, a new pass).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from node_agent.model import Snapshot

log = logging.getLogger(__name__)

Encoder = Callable[[CollectorRegistry], bytes]
EOF_LINE = b"# EOF\n"


class Exposition:
    def __init__(self, snapshot_registry: CollectorRegistry,
                 live_registry: CollectorRegistry | None = None) -> None:
        self._snapshot_registry = snapshot_registry
        self._live_registry = live_registry
        self._lock = threading.Lock()
        self._encoders: dict[str, Encoder] = {}
        default, content_type = choose_encoder("")
        self._encoders[content_type] = default
        self._rendered: dict[str, tuple[object, bytes]] = {}  # content type → (snapshot, text)

    def prime(self, snapshot: Snapshot | None) -> None:
        """Render the snapshot's families in every format asked for so far (sampling thread)."""
        with self._lock:
            encoders = dict(self._encoders)
        for content_type, encoder in encoders.items():
            self._render(content_type, encoder, snapshot)

    def _render(self, content_type: str, encoder: Encoder, snapshot: object) -> bytes:
        text = encoder(self._snapshot_registry)
        if text.endswith(EOF_LINE):
            text = text[: -len(EOF_LINE)]
        with self._lock:
            self._rendered[content_type] = (snapshot, text)
        return text

    def render(self, accept: str, snapshot: Snapshot | None) -> tuple[bytes, str]:
        """The /metrics body and content type for this Accept header."""
        parts, content_type = self.render_parts(accept, snapshot)
        return b"".join(parts), content_type

    def render_parts(self, accept: str,
                     snapshot: Snapshot | None) -> tuple[list[bytes], str]:
        """The body in pieces: the pass's rendered families (one object shared by every
        scrape until the next pass, not copied per request), then the live self metrics."""
        encoder, content_type = choose_encoder(accept)
        with self._lock:
            self._encoders.setdefault(content_type, encoder)
            cached = self._rendered.get(content_type)
        if cached is not None and cached[0] is snapshot:
            text = cached[1]
        else:
            text = self._render(content_type, encoder, snapshot)
        if self._live_registry is not None:
            return [text, encoder(self._live_registry)], content_type
        if content_type.startswith("application/openmetrics-text"):
            return [text, EOF_LINE], content_type
        return [text], content_type
