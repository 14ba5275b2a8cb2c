"""The job path with an in-memory API: a distributed job's failures in, its root cause written
on the job's object and its consequences pointed at it (the real API server and the real CRDs:
tests/integration/test_operator_jobs.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from gpu_auditor.base.errors import APIForbiddenError
from gpu_auditor.controller import jobpath
from gpu_auditor.controller.service import OperatorConfig, Services

from .controller_helpers import PREFIX, FakeKube, Inline, Scheduled, metric
from .jobs_helpers import (
    OOMKILLED,
    error_at,
    jobset,
    jobset_pod,
    pytorch_pod,
    pytorchjob,
    serve,
)

pytestmark = pytest.mark.unit

NCCL = (b"[rank5]:[E1129 10:00:05.100 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 5] Watchdog caught "
        b"collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 "
        b"milliseconds before timing out.\n")
# a job 200 steps in (a steady run: its idle cache reads as fragmentation, issue 24)
CUDA_OOM = (b"step 100 loss 2.31\nstep 200 loss 2.05\n"
            b"Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. "
            b"Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
            b"1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
            b"6.00 GiB is reserved by PyTorch but unallocated.\n")


class Now:
    """An executor that runs what it is given at once (the groups' writes, in order)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args))
        return done

    def shutdown(self, **_: Any) -> None:
        pass


def services(kube: FakeKube, schedule: Scheduled, **config: Any) -> Services:
    found = Services(kube=kube, config=OperatorConfig(**config),  # type: ignore[arg-type]
                     diagnoser=Inline(), schedule=schedule)
    assert found.jobs is not None
    found.jobs.executor = Now()  # type: ignore[assignment]
    return found


def settle(schedule: Scheduled) -> None:
    """Run what the operator scheduled (the groups' decisions, retries), until none is left."""
    while schedule:
        _, callback = schedule.pop(0)
        callback()


def sixteen(kube: FakeKube, *, first: dict[str, Any] = OOMKILLED,
            others: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    jobset(kube, ranks=16)
    pods = [jobset_pod(rank, first if rank == 3 else (others or error_at(5)))
            for rank in range(16)]
    serve(kube, *pods)
    return pods


def jobset_notes(kube: FakeKube) -> dict[str, str]:
    notes: dict[str, str] = kube.objects[("JobSet", "train")]["metadata"]["annotations"]
    return notes


def test_the_jobset_names_the_oom_pod_its_rank_and_cause_and_every_other_pod_points_at_it(
) -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    notes = jobset_notes(kube)
    root = pods[3]["metadata"]["name"]
    assert notes[f"{PREFIX}root-cause-pod"] == f"ml/{root}"
    assert notes[f"{PREFIX}root-cause-rank"] == "3"
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert notes[f"{PREFIX}summary"].startswith(f"rank 3 (replicatedJob workers, job 3, index 0)"
                                                f" (pod ml/{root}) failed first: "
                                                "host-oom-killed: ")
    assert "15 pods failed after it (15 nccl-timeout)" in notes[f"{PREFIX}summary"]
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert (evidence["rank"], evidence["consequenceCount"]) == (3, 15)
    for body in pods:
        pod_notes = body["metadata"]["annotations"]
        if body is pods[3]:
            assert pod_notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
            continue
        assert pod_notes[f"{PREFIX}root-cause-pod"] == f"ml/{root}"
        assert pod_notes[f"{PREFIX}consequence"].startswith("nccl-timeout, 5 s after ")
        assert f"{PREFIX}diagnosis" not in pod_notes
    assert kube.event_objects == [("JobSet", "train")]  # one Event, on the job, none per pod
    assert metric("gpu_auditor_job_diagnoses_total", job_kind="JobSet",
                  kind="host-oom-killed") >= 1


def test_the_root_pods_own_annotation_is_written_before_the_group_is_decided() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    services(kube, schedule).handle_pod(pods[3])
    assert pods[3]["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert kube.object_patches == [] and kube.events == {}
    assert [delay for delay, _ in schedule] == [2.0]


def test_a_job_whose_first_failure_is_not_an_oom_gets_no_oom_diagnosis() -> None:
    kube, schedule = FakeKube(None, log=b"ValueError: a corrupt shard\n"), Scheduled()  # type: ignore[arg-type]
    jobset(kube, ranks=3)
    pods = [jobset_pod(0, error_at(0)), jobset_pod(1, error_at(4, message=NCCL.decode())),
            jobset_pod(2, {**OOMKILLED, "finishedAt": "2026-11-29T10:00:30Z"})]
    serve(kube, *pods)
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert jobset_notes(kube) == {}
    assert f"{PREFIX}root-cause-pod" not in pods[1]["metadata"]["annotations"]
    # the OOM of rank 2 is its own, and its own Event tells it, as for a pod alone
    assert pods[2]["metadata"]["annotations"][f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert kube.event_objects == [("Pod", pods[2]["metadata"]["name"])]


def test_a_thousand_pod_job_reads_a_bounded_number_of_logs() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    jobset(kube, ranks=1000)
    pods = [jobset_pod(rank, OOMKILLED if rank == 0 else error_at(5 + rank % 50))
            for rank in range(1000)]
    serve(kube, *pods)
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.log_reads == 16
    notes = jobset_notes(kube)
    assert "999 pods failed after it (983 exit code 1 (log not read), 16 nccl-timeout)" in \
        notes[f"{PREFIX}summary"]
    pointed = [p for p in pods[1:]
               if p["metadata"]["annotations"].get(f"{PREFIX}root-cause-pod")]
    assert len(pointed) == 999
    assert pods[500]["metadata"]["annotations"][f"{PREFIX}consequence"].startswith(
        "exit code 1 (log not read), ")
    assert kube.workload_reads == [("Job", "train-workers-0")]  # one chain read, for the root
    assert kube.object_reads == [("JobSet", "train")]


def test_a_signal_from_outside_is_a_consequence_read_from_the_termination_alone() -> None:
    kube, schedule = FakeKube(None), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube, others=error_at(7, exit_code=143))
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.log_reads == 0
    assert pods[0]["metadata"]["annotations"][f"{PREFIX}consequence"].startswith(
        "SIGTERM (exit code 143), 7 s after")


def test_a_cuda_oom_in_the_log_is_the_root_and_its_rank_comes_from_a_pytorchjobs_master(
) -> None:
    kube, schedule = FakeKube(None, log=CUDA_OOM), Scheduled()  # type: ignore[arg-type]
    pytorchjob(kube)
    root = pytorch_pod("worker", 2, error_at(0))
    peer = pytorch_pod("master", 0, error_at(3, message=NCCL.decode()))
    serve(kube, root, peer)
    operator = services(kube, schedule)
    operator.handle_pod(root)
    operator.handle_pod(peer)
    settle(schedule)
    notes = kube.objects[("PyTorchJob", "pj")]["metadata"]["annotations"]
    assert notes[f"{PREFIX}root-cause-pod"] == "ml/pj-worker-2"
    assert notes[f"{PREFIX}root-cause-rank"] == "3"  # master 0, worker i is rank i + 1
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert peer["metadata"]["annotations"][f"{PREFIX}root-cause-pod"] == "ml/pj-worker-2"


def test_a_trainjobs_jobset_is_written_on_the_trainjob() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    jobset(kube, ranks=2, trainjob=True)
    pods = [jobset_pod(0, OOMKILLED), jobset_pod(1, error_at(5))]
    serve(kube, *pods)
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.objects[("TrainJob", "train")]["metadata"]["annotations"][
        f"{PREFIX}root-cause-pod"] == f"ml/{pods[0]['metadata']['name']}"
    assert jobset_notes(kube) == {}
    assert kube.event_objects == [("TrainJob", "train")]


def test_a_chain_that_does_not_verify_leaves_the_pods_as_they_would_be_alone() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    kube.objects[("JobSet", "train")]["metadata"]["uid"] = "another-uid"
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.object_patches == []
    assert all(f"{PREFIX}root-cause-pod" not in p["metadata"]["annotations"] for p in pods)
    root = pods[3]["metadata"]["name"]
    assert kube.event_objects == [("Pod", root)]
    assert kube.workload_patches[0][:2] == ("Job", "train-workers-3")  # its owner, as today
    assert metric("gpu_auditor_operator_owner_writes_refused_total", reason="uid-mismatch") >= 1


def test_a_failure_seen_late_that_came_first_takes_the_diagnosis_back() -> None:
    kube, schedule = FakeKube(None, log=b"ValueError: a corrupt shard\n"), Scheduled()  # type: ignore[arg-type]
    jobset(kube, ranks=3)
    oom = jobset_pod(1, {**OOMKILLED, "finishedAt": "2026-11-29T10:00:30Z"})
    consequence = jobset_pod(2, error_at(35, exit_code=143))
    first = jobset_pod(0, error_at(0))
    serve(kube, oom, consequence, first)
    operator = services(kube, schedule)
    operator.handle_pod(oom)
    operator.handle_pod(consequence)
    settle(schedule)
    assert jobset_notes(kube)[f"{PREFIX}root-cause-pod"] == f"ml/{oom['metadata']['name']}"
    operator.handle_pod(first)  # its event came late: it failed 30 s before the OOM
    settle(schedule)
    assert jobset_notes(kube) == {}
    assert f"{PREFIX}root-cause-pod" not in consequence["metadata"]["annotations"]
    assert ("Pod", oom["metadata"]["name"]) in kube.event_objects


def test_after_a_restart_a_late_consequence_points_at_the_root_the_job_names() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    first_run = services(kube, schedule)
    first_run.handle_pod(pods[3])
    first_run.handle_pod(pods[0])
    settle(schedule)
    late = pods[1]
    second_run = services(kube, schedule)  # a new process: no memory of the first
    second_run.handle_pod(pods[3])  # done: its annotation says so
    second_run.handle_pod(late)
    settle(schedule)
    assert late["metadata"]["annotations"][f"{PREFIX}root-cause-pod"] == \
        f"ml/{pods[3]['metadata']['name']}"
    assert "rank 3" in late["metadata"]["annotations"][f"{PREFIX}consequence"]
    assert len(kube.events) == 1


def test_grouping_off_keeps_every_pod_alone() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    operator = Services(kube=kube, config=OperatorConfig(job_kinds=()),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=schedule)
    assert operator.jobs is None
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.object_patches == [] and kube.log_reads == 15


def test_a_job_object_the_operator_may_not_write_leaves_the_pods_alone() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)

    def forbidden(*_: Any, **__: Any) -> None:
        raise APIForbiddenError("jobsets is forbidden", status=403)

    kube.patch_object = forbidden  # type: ignore[method-assign]
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    settle(schedule)
    assert kube.event_objects == [("Pod", pods[3]["metadata"]["name"])]
    assert all(f"{PREFIX}root-cause-pod" not in p["metadata"]["annotations"] for p in pods)
    assert schedule == []  # no retry of a write the operator is not allowed


def test_memory_is_bounded_across_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobpath, "MAX_FILED", 20)
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = []
    for name in ("a", "b", "c"):
        jobset(kube, name=name, ranks=10, uid=f"{name}-uid")
        pods += [jobset_pod(rank, error_at(5), name=name, uid=f"{name}-uid")
                 for rank in range(10)]
    serve(kube, *pods)
    operator = services(kube, schedule)
    for body in pods:
        operator.handle_pod(body)
    assert operator.jobs is not None
    assert operator.jobs.filed <= 20 and [k.name for k in operator.jobs.groups] == ["b", "c"]


def test_a_root_cause_is_counted_once_however_often_its_job_is_written_again() -> None:
    kube, schedule = FakeKube(None, log=NCCL), Scheduled()  # type: ignore[arg-type]
    pods = sixteen(kube)
    before = metric("gpu_auditor_job_diagnoses_total", job_kind="JobSet", kind="host-oom-killed")
    operator = services(kube, schedule)
    operator.handle_pod(pods[3])
    settle(schedule)
    for body in pods[4:]:  # their failures come in later: the job's summary is written again
        operator.handle_pod(body)
        settle(schedule)
    assert len(kube.object_patches) > 1
    assert metric("gpu_auditor_job_diagnoses_total", job_kind="JobSet",
                  kind="host-oom-killed") == before + 1
