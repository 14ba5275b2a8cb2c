"""evaluation/gpu/series_demo.py on a CPU: the GPU demo's own pipeline with a fake NVML source.

The child prints a real H200 OOM log (a full GPU, no memory figures before it); the fake source
reports the child's pid rising 2 GiB a pass, or flat. Through the agent's series store, the
report contract and the operator's cut, the diagnosis must say leak only for the rising one.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation/gpu/series_demo.py"


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("series_demo", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_demo_pipeline_finds_the_leak_only_in_the_rising_series(tmp_path: Path) -> None:
    rc = _demo().main(["--fake", "--out", str(tmp_path), "--interval", "0.05",
                       "--flat-seconds", "2.5"])
    result = json.loads((tmp_path / "series_demo.json").read_text())
    by_job = {r["job"]: r for r in result["results"]}
    leak, flat = by_job["leak"], by_job["flat"]
    assert leak["raw_samples"] > 32  # more passes than a series keeps: thinned on the way
    assert 5 <= leak["samples_used"] <= 32
    assert len(leak["report_entry"]["memorySeries"]["times"]) == leak["samples_used"]
    assert leak["with_samples"]["kind"] == "leak"
    assert leak["with_samples"]["growth"]["source"] == "samples"
    assert leak["without_samples"]["kind"] == "capacity"
    assert flat["with_samples"]["kind"] == "capacity"
    assert leak["memory_words_in_log_before_oom"] == []
    assert result["checks"] == {"leak_with_samples_is_leak": True,
                                "leak_without_samples_is_not_leak": True,
                                "flat_with_samples_is_not_leak": True}
    assert rc == 0 and (tmp_path / "leak.log").read_text().count("OutOfMemoryError") >= 1
