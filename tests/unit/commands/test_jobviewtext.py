"""jobviewtext: a job view as a person reads it, and as JSON."""

from __future__ import annotations

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.commands import jobviewtext
from gpu_auditor.commands.jobview import job_view

from .jobview_helpers import P, written_job

pytestmark = pytest.mark.unit


def test_the_text_says_root_pod_rank_cause_figures_actions_and_consequences() -> None:
    obj, pods = written_job()
    text = jobviewtext.render(job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P))
    assert text.splitlines()[:2] == [
        "JobSet ml/train",
        "  root cause: pod ml/train-workers-3-0-a, rank 3 (replicatedJob workers, job 3, "
        "index 0), failed at 2026-11-29T10:00:00Z"]
    assert "Consequences: 3 pods failed after it (3 nccl-timeout):" in text
    assert "  ml/train-workers-0-0-a  nccl-timeout, 4 s after ml/train-workers-3-0-a" in text
    assert "GPU free" in text and "What to do, in order:" in text
    assert "Apply it: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in JobSet train" in text


def test_json_keeps_the_figures_in_bytes_and_counts_by_how() -> None:
    obj, pods = written_job()
    as_json = jobviewtext.to_json(job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P))
    assert as_json["consequences"] == [{"how": "nccl-timeout", "pods": 3}]
    assert as_json["diagnosis"]["figures"]["requested_bytes"] == 4 * 2**30
    assert (as_json["root_pod"], as_json["rank"]) == ("ml/train-workers-3-0-a", "3")


def test_a_job_without_a_root_cause_says_so() -> None:
    view = job_view(jk.PYTORCHJOB, {"metadata": {"namespace": "ml", "name": "pj"}}, pods=[],
                    events=[])
    assert "No root cause on this job" in jobviewtext.render(view)


def test_what_a_tenant_wrote_is_shown_clean_and_garbage_is_said() -> None:
    obj, pods = written_job()
    obj["metadata"]["annotations"][f"{P}evidence"] = "{not json"
    pods[0]["metadata"]["annotations"][f"{P}consequence"] = "x\x1b]0;pwned\x07"
    text = jobviewtext.render(job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P))
    assert "\x1b" not in text and "\x07" not in text
    assert "the evidence annotation is not valid JSON" in text
