"""jobnotes: what a distributed job's object and its consequence pods get, within limits."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from gpu_auditor.base.contract import Annotation, EventReason
from gpu_auditor.controller import bounded, jobnotes
from gpu_auditor.controller.annotations import BUDGET, LIMITS
from gpu_auditor.controller.jobnotes import JOB_KEEPS, JOB_LIMITS, RootCause
from gpu_auditor.controller.pod import DiagnosedKeys, Termination
from gpu_auditor.controller.rootcause import Failure, Read, verdicts

pytestmark = pytest.mark.unit

P = "gpu-auditor.io/"
T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)


def fail(pod: str, seconds: int, read: Read, how: str) -> Failure:
    return Failure("ml", pod, f"uid-{pod}", "main", 0, T0 + dt.timedelta(seconds=seconds), read,
                   how)


def root_cause(summary: str = "capacity: the job needs more than the GPU has",
               evidence: str = '{"figures":{"requestedBytes":1},"container":"main"}'
               ) -> RootCause:
    return RootCause(fail("w-3", 0, Read.OOM, "capacity"), {
        f"{P}diagnosis": "capacity", f"{P}summary": summary, f"{P}actions": '["a smaller batch"]',
        f"{P}evidence": evidence}, EventReason.CUDA_OUT_OF_MEMORY, 3, "worker 2")


def test_the_job_gets_every_kept_annotation_set_or_cleared() -> None:
    root = root_cause()
    (verdict,) = verdicts([root.failure, fail("w-1", 5, Read.CONSEQUENCE, "nccl-timeout")])
    notes = jobnotes.job_annotations(root, verdict, prefix=P, now=T0)
    assert set(notes) == {f"{P}{name}" for name in JOB_KEEPS}
    assert notes[f"{P}recommended-alloc-conf"] is None
    assert notes[f"{P}root-cause-pod"] == notes[f"{P}diagnosed-pod"] == "ml/w-3"
    assert notes[f"{P}summary"] == ("rank 3 (worker 2) (pod ml/w-3) failed first: "
                                    "capacity: the job needs more than the GPU has; 1 pod failed "
                                    "after it (1 nccl-timeout)")
    evidence = json.loads(notes[f"{P}evidence"] or "")
    assert evidence["figures"] == {"requestedBytes": 1}
    assert evidence["consequencePods"] == ["ml/w-1"]


def test_a_long_summary_is_cut_but_keeps_the_root_pod_and_the_count() -> None:
    root = root_cause(summary="x" * 5000)
    failures = [root.failure, *(fail(f"p-{i}", 5, Read.CONSEQUENCE, "nccl-timeout")
                                for i in range(20))]
    (verdict,) = verdicts(failures)
    text = jobnotes.summary(root, verdict, P)
    assert bounded.size(text) <= LIMITS[Annotation.SUMMARY]
    assert text.startswith("rank 3 (worker 2) (pod ml/w-3)")
    assert text.endswith("20 pods failed after it (20 nccl-timeout)")


def test_a_huge_job_keeps_its_evidence_within_the_limit() -> None:
    root = root_cause(evidence=json.dumps({"figures": {"x": "y" * 1000}, "note": "z" * 3000}))
    (verdict,) = verdicts([root.failure, *(fail(f"pod-{i:05d}", 9, Read.UNREAD, "exit code 1")
                                           for i in range(10_000))])
    notes = jobnotes.job_annotations(root, verdict, prefix=P, now=T0)
    text = notes[f"{P}evidence"] or ""
    assert bounded.size(text) <= LIMITS[Annotation.EVIDENCE]
    assert json.loads(text)["consequenceCount"] == 10_000


def test_the_pointer_names_the_root_and_how_the_pod_read_and_records_it_done() -> None:
    root = root_cause()
    peer = fail("w-1", 5, Read.CONSEQUENCE, "nccl-timeout")
    (verdict,) = verdicts([root.failure, peer])
    t = Termination("main", 0, "Error", 1, "", T0, previous=False)
    notes = jobnotes.pointer_annotations(peer, t, root, verdict, prefix=P,
                                         previous_keys=DiagnosedKeys(), now=T0)
    assert notes == {f"{P}root-cause-pod": "ml/w-3",
                     f"{P}consequence": "nccl-timeout, 5 s after ml/w-3 failed (capacity, "
                                        "rank 3)",
                     f"{P}diagnosed-at": "2026-11-29T10:00:00Z",
                     f"{P}diagnosed-key": "main/0"}


def test_the_job_objects_values_stay_under_the_budget() -> None:
    keys = [*(name for name in JOB_KEEPS)]
    worst = sum(JOB_LIMITS.get(name, LIMITS.get(name, 0)) + 64 + len(name) for name in keys)
    assert worst <= BUDGET
    assert sum(JOB_LIMITS.get(n, LIMITS.get(n, 0)) for n in keys) == 12_016


def test_one_event_per_incident_named_for_the_job_and_the_root() -> None:
    root = root_cause()
    (verdict,) = verdicts([root.failure])
    name, reason, message = jobnotes.job_event(root, verdict, prefix=P, job_name="train",
                                               job_uid="js")
    again = jobnotes.job_event(root, verdict, prefix=P, job_name="train", job_uid="js")
    assert name == again[0] and name.startswith("train.gpu-auditor.")
    assert reason == "CUDAOutOfMemory" and message.startswith("rank 3 (worker 2)")


def test_rank_words() -> None:
    assert jobnotes.rank_words(0, "index 0") == "rank 0"
    assert jobnotes.rank_words(None, "head") == "head"
    assert jobnotes.rank_words(None, "") == "rank unknown"
