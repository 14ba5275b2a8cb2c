"""The base's tests share the fake API server and the fake node of the agent's tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "node_agent"))


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """An empty directory standing for /proc."""
    root = tmp_path / "proc"
    root.mkdir()
    return root
