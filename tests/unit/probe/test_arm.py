"""Arming at interpreter start (``_arm``), in real start-ups with ``PYTHONPATH=probe``: only
``GPU_AUDITOR_PROBE=1`` arms it, and it waits for the job's own ``import torch`` without
importing torch. A fake ``torch`` package stands in for the real one (no GPU here); the GPU
scripts under ``evaluation/gpu`` run the real thing."""

from __future__ import annotations

from pathlib import Path

import pytest

from .probe_helpers import ON, PROBE_DIR, STATE, make_fake_torch, run_python, state_of

pytestmark = pytest.mark.unit


def test_without_the_switch_nothing_is_armed_and_nothing_imported() -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR]))
    assert out == {"hooks": [], "modules": []}


@pytest.mark.parametrize("value", ["0", "true", "yes", " 1", ""])
def test_only_the_exact_value_1_switches_it_on(value: str) -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR], env={"GPU_AUDITOR_PROBE": value}))
    assert out["hooks"] == []


def test_switched_on_it_waits_for_torch_without_importing_it() -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR], env=ON))
    assert out == {
        "hooks": ["TorchImportHook"],
        "modules": ["gpu_auditor_probe", "gpu_auditor_probe._arm"],
    }


def test_torch_imported_late_inside_a_function_is_still_seen(tmp_path: Path) -> None:
    code = (
        "import json, collections, email.message\n"
        "def main():\n"
        "    import torch\n"
        "    return torch\n"
        "torch = main()\n"
        "torch.cuda._lazy_init()\n"
        "print(len(torch.observers))\n"
    )
    env = {**ON, "FAKE_TORCH_CUDA": "12.4"}
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env)
    assert (proc.returncode, proc.stdout.strip()) == (0, "1")
