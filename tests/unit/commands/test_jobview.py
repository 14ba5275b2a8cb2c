"""explain KIND/NAME: a distributed job's view, read back from what the operator writes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base.contract import EventReason
from gpu_auditor.commands import jobviewtext
from gpu_auditor.commands.jobreads import target
from gpu_auditor.commands.jobview import job_view
from gpu_auditor.controller import jobnotes
from gpu_auditor.controller.jobnotes import RootCause
from gpu_auditor.controller.pod import DiagnosedKeys, Termination
from gpu_auditor.controller.rootcause import Failure, Read, verdicts

pytestmark = pytest.mark.unit

P = "gpu-auditor.io/"
T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
ROOT_NOTES = {
    f"{P}diagnosis": "fragmentation",
    f"{P}summary": "fragmentation: 6.91 GiB reserved but unallocated + 1.75 GiB free would cover "
                   "the 4.00 GiB request",
    f"{P}actions": json.dumps(["set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]),
    f"{P}recommended-alloc-conf": "expandable_segments:True",
    f"{P}evidence": json.dumps({"container": "main", "restartCount": 0, "exitCode": 1,
                                "terminationReason": "Error", "source": "log",
                                "figures": {"requestedBytes": 4 * 2**30,
                                            "freeBytes": 1879048192},
                                "framework": "pytorch"}),
}


def fail(pod: str, seconds: int, read: Read, how: str) -> Failure:
    return Failure("ml", pod, f"uid-{pod}", "main", 0, T0 + dt.timedelta(seconds=seconds), read,
                   how)


def written_job() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A JobSet and its pods as the operator leaves them (its own builders)."""
    root = RootCause(fail("train-workers-3-0-a", 0, Read.OOM, "fragmentation"), ROOT_NOTES,
                     EventReason.CUDA_OUT_OF_MEMORY, 3, "replicatedJob workers, job 3, index 0")
    peers = [fail(f"train-workers-{i}-0-a", 4, Read.CONSEQUENCE, "nccl-timeout")
             for i in (0, 1, 2)]
    (verdict,) = verdicts([root.failure, *peers])
    obj = {"metadata": {"namespace": "ml", "name": "train", "uid": "js-uid", "annotations": {
        k: v for k, v in jobnotes.job_annotations(root, verdict, prefix=P, now=T0).items()
        if v is not None}}}
    t = Termination("main", 0, "Error", 1, "", T0, previous=False)
    pods = [{"metadata": {"namespace": "ml", "name": peer.pod, "annotations": {
        k: v for k, v in jobnotes.pointer_annotations(
            peer, t, root, verdict, prefix=P, previous_keys=DiagnosedKeys(), now=T0).items()
        if v is not None}}} for peer in peers]
    pods.append({"metadata": {"namespace": "ml", "name": root.failure.pod,
                              "annotations": dict(ROOT_NOTES)}})
    return obj, pods


def test_kind_slash_name_names_a_job_and_namespace_slash_pod_does_not() -> None:
    assert target("jobset/train") == ((jk.JOBSET,), "train")
    assert target("PyTorchJob/pj") == ((jk.PYTORCHJOB,), "pj")
    assert target("lws/serve") == ((jk.LEADERWORKERSET,), "serve")
    assert target("mpijobs/m") == ((jk.MPIJOB_V1, jk.MPIJOB), "m")
    assert target("ml/trainer-0") is None and target("trainer-0") is None


def test_the_view_names_the_root_pod_its_rank_cause_figures_and_consequences() -> None:
    obj, pods = written_job()
    view = job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P)
    assert (view.root_pod, view.rank) == ("ml/train-workers-3-0-a", "3")
    assert view.position == "replicatedJob workers, job 3, index 0"
    assert view.diagnosis is not None and view.diagnosis.kind == "fragmentation"
    assert view.diagnosis.figures.requested_bytes == 4 * 2**30
    assert view.consequence_count == 3 and view.consequences == (("nccl-timeout", 3),)
    assert [p.pod for p in view.consequence_pods] == [
        "ml/train-workers-0-0-a", "ml/train-workers-1-0-a", "ml/train-workers-2-0-a"]
    assert "spec.replicatedJobs[].template" in view.setting
    text = jobviewtext.render(view)
    assert text.splitlines()[:2] == [
        "JobSet ml/train",
        "  root cause: pod ml/train-workers-3-0-a, rank 3 (replicatedJob workers, job 3, "
        "index 0), failed at 2026-11-29T10:00:00Z"]
    assert "Consequences: 3 pods failed after it (3 nccl-timeout):" in text
    assert "  ml/train-workers-0-0-a  nccl-timeout, 4 s after ml/train-workers-3-0-a" in text
    assert "GPU free" in text and "What to do, in order:" in text
    as_json = jobviewtext.to_json(view)
    assert as_json["consequences"] == [{"how": "nccl-timeout", "pods": 3}]
    assert as_json["diagnosis"]["figures"]["requested_bytes"] == 4 * 2**30


def test_a_job_without_a_root_cause_says_so() -> None:
    view = job_view(jk.PYTORCHJOB, {"metadata": {"namespace": "ml", "name": "pj"}}, pods=[],
                    events=[])
    assert view.root_pod == "" and "No root cause on this job" in jobviewtext.render(view)


def test_what_a_tenant_wrote_is_shown_clean_and_garbage_is_said() -> None:
    obj, pods = written_job()
    notes = obj["metadata"]["annotations"]
    notes[f"{P}root-cause-rank"] = "3\x1b[2J"
    notes[f"{P}evidence"] = "{not json"
    pods[0]["metadata"]["annotations"][f"{P}consequence"] = "x\x1b]0;pwned\x07"
    view = job_view(jk.JOBSET, obj, pods=pods, events=[], prefix=P)
    text = jobviewtext.render(view)
    assert "\x1b" not in text and "\x07" not in text
    assert view.rank == "" and "the evidence annotation is not valid JSON" in text
