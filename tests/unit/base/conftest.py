"""The base's tests talk to the fake API server of the agent's tests (over real TLS)."""

from __future__ import annotations

from ..node_agent.apiserver_helpers import mtls_server, pki, tls_server

__all__ = ["mtls_server", "pki", "tls_server"]  # fixtures
