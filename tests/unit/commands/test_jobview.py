"""jobview: a distributed job's view, read back from what the operator writes."""

from __future__ import annotations

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.commands.jobview import job_view

from .jobview_helpers import P, written_job

pytestmark = pytest.mark.unit


def test_the_view_names_the_root_pod_its_rank_cause_figures_and_consequences() -> None:
    obj, pods = written_job()
    view = job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P)
    assert (view.root_pod, view.rank) == ("ml/train-workers-3-0-a", "3")
    assert view.position == "replicatedJob workers, job 3, index 0"
    assert view.failed_at == "2026-11-29T10:00:00Z"
    assert view.diagnosis is not None and view.diagnosis.kind == "fragmentation"
    assert view.diagnosis.figures.requested_bytes == 4 * 2**30
    assert view.consequence_count == 3 and view.consequences == (("nccl-timeout", 3),)
    assert [p.pod for p in view.consequence_pods] == [
        "ml/train-workers-0-0-a", "ml/train-workers-1-0-a", "ml/train-workers-2-0-a"]
    assert [p.pod for p in view.own_ooms] == ["ml/train-workers-3-0-a"]
    assert "spec.replicatedJobs[].template" in view.setting


def test_a_job_without_a_root_cause_has_none() -> None:
    view = job_view(jk.PYTORCHJOB, {"metadata": {"namespace": "ml", "name": "pj"}}, pods=[],
                    events=[])
    assert (view.root_pod, view.rank, view.diagnosis) == ("", "", None)


def test_a_rank_that_is_not_a_number_is_no_rank() -> None:
    obj, pods = written_job()
    obj["metadata"]["annotations"][f"{P}root-cause-rank"] = "3\x1b[2J"
    assert job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P).rank == ""
