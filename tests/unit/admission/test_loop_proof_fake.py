"""evaluation/gpu/loop_proof.py on a CPU: the H200 proof's own pipeline with a child that prints
the scenario's real H200 log unless its env carries the setting.

The first attempt fails, the diagnosis recommends expandable_segments:True, the webhook's
function puts it into the retry's spec (its owner chain verified against the Job), the retry
runs with exactly that env and completes, the control without it fails again, and the
operator's judgement is fixed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation/gpu/loop_proof.py"


def _proof() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loop_proof", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_loop_goes_from_oom_to_fixed_through_the_webhooks_function(tmp_path: Path) -> None:
    assert _proof().main(["--fake", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "loop-proof.json").read_text())
    assert [r["verdict"] for r in result["results"]] == ["fixed", "fixed"]
    for record in result["results"]:
        assert record["attempt1"]["rc"] == 1 and record["diagnosis"]["kind"] == "fragmentation"
        assert record["admission"]["result"] == "applied"
        assert record["retry"]["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
        assert "PYTORCH_CUDA_ALLOC_CONF" not in record["control"]["env"]
        assert (record["retry"]["rc"], record["control"]["rc"]) == (0, 1)
        assert record["judged"]["outcome"] == "fixed"
        retry_pod = json.loads((tmp_path / f"{record['scenario']}__retry-pod.json").read_text())
        assert "gpu-auditor.io/recommendation-applied" in retry_pod["metadata"]["annotations"]


def test_a_retry_that_fails_again_is_judged_not_fixed(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    proof = _proof()
    monkeypatch.setattr(proof, "FAKE_CHILD", proof.FAKE_CHILD.replace(
        '"expandable_segments:True" in conf.split(",")', "False"))
    assert proof.main(["--fake", "--out", str(tmp_path), "--scenarios", "frag_pinned"]) == 1
    [record] = json.loads((tmp_path / "loop-proof.json").read_text())["results"]
    assert record["judged"]["outcome"] == "not-fixed" and record["verdict"] == "not proven"
    assert record["judged"]["new_summary"].endswith(
        "(expandable_segments:True was applied and did not help)")
