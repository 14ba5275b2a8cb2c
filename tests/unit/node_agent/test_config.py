"""The agent's flags: defaults, choices and bounds, a bad value a clear error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.cli import main

pytestmark = pytest.mark.unit


REPO = Path(__file__).resolve().parents[3]


def test_the_binding_flag_defaults_to_lite_and_takes_only_known_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    from node_agent.config import parse

    example = ["--nvml-fake", str(REPO / "examples/fake-node/nvml.yaml")]
    assert parse(example).nvml_binding == "lite"
    assert parse([*example, "--nvml-binding", "pynvml"]).nvml_binding == "pynvml"
    with pytest.raises(SystemExit) as exit_:
        parse([*example, "--nvml-binding", "ctypes"])
    assert exit_.value.code == 2
    assert "invalid choice: 'ctypes'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "100001"])
def test_max_series_per_gpu_is_bounded(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--max-series-per-gpu", value, "--once"]) == 2
    assert "--max-series-per-gpu must be 1..100000" in capsys.readouterr().err
