"""The evidence annotation's optional fields (issue 18, mutation survivors): the node's memory
series points, the growth behind a leak and what became of a probe record are written under
their exact camelCase keys, and only when there is something to write. Literal values."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

import pytest

from gpu_auditor.base.contract import Annotation
from gpu_auditor.controller import annotations as notes
from gpu_auditor.controller.pod import Termination, parse_pod
from gpu_auditor.controller.probe import ProbeUse
from gpu_auditor.diagnosis import Diagnosis, Figures, Recommendation
from gpu_auditor.diagnosis.model import Growth

pytestmark = pytest.mark.unit

PREFIX = "gpu-auditor.io/"
NOW = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
TERMINATION = Termination(container="main", restart_count=3, reason="Error", exit_code=1,
                          message="", finished_at=None, previous=False)
POD = parse_pod({"metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1",
                              "annotations": {}}}, PREFIX)
LEAK = Diagnosis(
    detected=True, framework="pytorch", kind="leak", contributing=(),
    figures=Figures(requested_bytes=2**30), torch_version_hint="2.11",
    recommendation=Recommendation(None, None, ()), summary="leak", oom_count=1,
    alloc_conf_problems=(),
)


def evidence(d: Diagnosis = LEAK, **kw: Any) -> dict[str, Any]:
    w = notes.diagnosis_annotations(d, TERMINATION, POD, prefix=PREFIX, previous_keys=[],
                                    source="log", now=NOW, **kw)
    found: dict[str, Any] = json.loads(str(w.annotations[f"{PREFIX}{Annotation.EVIDENCE}"]))
    return found


def test_no_series_points_no_growth_no_probe_by_default() -> None:
    e = evidence()
    assert "memorySeriesPoints" not in e and "growth" not in e and "probe" not in e


@pytest.mark.parametrize(("samples", "written"), [(0, None), (1, 1), (37, 37)])
def test_series_points_are_written_from_one(samples: int, written: int | None) -> None:
    assert evidence(samples=samples).get("memorySeriesPoints") == written


def test_the_growth_behind_a_leak_is_written_whole() -> None:
    growth = Growth(source="samples", points=12, first_bytes=3 * 2**30, last_bytes=9 * 2**30,
                    per_unit=1024.0)
    e = evidence(dataclasses.replace(LEAK, growth=growth))
    assert e["growth"] == {"source": "samples", "points": 12, "firstBytes": 3221225472,
                           "lastBytes": 9663676416}


def test_what_became_of_a_probe_record_is_written() -> None:
    used = ProbeUse(source="termination-message", used=True, status="ok", verdict="cap",
                    inference_kind="capacity", disagrees=True)
    assert evidence(probe=used)["probe"] == {
        "source": "termination-message", "used": True, "status": "ok", "verdict": "cap",
        "inferenceKind": "capacity", "disagrees": True,
    }
    ignored = ProbeUse(source="log", used=False, ignored="another request")
    assert evidence(probe=ignored)["probe"] == {"source": "log", "used": False,
                                                "ignored": "another request"}
