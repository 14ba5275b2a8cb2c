"""Fixtures for the node agent's unit tests (helpers live in agent_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .apiserver_helpers import mtls_server, pki, tls_server

__all__ = ["mtls_server", "pki", "tls_server"]  # fixtures of the fake API server


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """An empty directory standing for /proc."""
    root = tmp_path / "proc"
    root.mkdir()
    return root
