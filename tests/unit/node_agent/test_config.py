"""The agent's flags: defaults, choices and bounds, a bad value a clear error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.cli import main

pytestmark = pytest.mark.unit


REPO = Path(__file__).resolve().parents[3]


def test_the_removed_binding_flag_is_an_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """nvidia-ml-py's pynvml is the one binding: --nvml-binding is gone (docs/contracts.md)."""
    from node_agent.config import parse

    example = ["--nvml-fake", str(REPO / "examples/fake-node/nvml.yaml")]
    with pytest.raises(SystemExit) as exit_:
        parse([*example, "--nvml-binding", "pynvml"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --nvml-binding" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "100001"])
def test_max_series_per_gpu_is_bounded(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--max-series-per-gpu", value, "--once"]) == 2
    assert "--max-series-per-gpu must be 1..100000" in capsys.readouterr().err
