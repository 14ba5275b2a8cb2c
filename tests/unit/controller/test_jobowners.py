"""jobowners: a distributed job's chain of owners, verified link by link, and the rank."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.controller.jobmember import member_of
from gpu_auditor.controller.jobowners import verify
from gpu_auditor.controller.owners import OwnerRefused
from gpu_auditor.controller.pod import Pod, parse_pod

from .controller_helpers import PREFIX, FakeKube
from .jobs_helpers import (
    OOMKILLED,
    jobset,
    jobset_pod,
    obj,
    owner,
    pod,
    pytorch_pod,
    pytorchjob,
)

pytestmark = pytest.mark.unit

ALL = frozenset(jk.SWITCHES)


def verified(kube: FakeKube, body: dict[str, Any], switches: frozenset[str] = ALL) -> Any:
    parsed: Pod = parse_pod(body, PREFIX)
    member = member_of(parsed, switches)
    assert member is not None
    return verify(kube, parsed, member, switches)


def test_a_jobset_pod_is_verified_through_its_job() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    jobset(kube, ranks=4)
    job = verified(kube, jobset_pod(2, OOMKILLED))
    assert (job.kind, job.name, job.uid, job.rank) == (jk.JOBSET, "train", "js-uid", 2)
    assert kube.workload_reads == [("Job", "train-workers-2")]


def test_a_jobset_of_one_job_with_many_pods_ranks_them_by_completion_index() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    jobset(kube, ranks=1)
    kube.workloads[("Job", "train-workers-0")]["spec"]["completions"] = 8
    body = jobset_pod(0, OOMKILLED)
    body["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "5"
    assert verified(kube, body).rank == 5


def test_a_pod_labelled_for_another_jobset_is_refused() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    jobset(kube, ranks=1)
    body = jobset_pod(0, OOMKILLED)
    body["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"] = "someone-elses"
    with pytest.raises(OwnerRefused) as refused:
        verified(kube, body)
    assert refused.value.reason == "not-selected"


def test_a_job_not_owned_by_a_jobset_is_refused() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    jobset(kube, ranks=1)
    kube.workloads[("Job", "train-workers-0")]["metadata"]["ownerReferences"] = []
    with pytest.raises(OwnerRefused) as refused:
        verified(kube, jobset_pod(0, OOMKILLED))
    assert refused.value.reason == "invalid-reference"


def test_a_trainjobs_jobset_leads_to_the_trainjob_only_when_trainjobs_are_on() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    jobset(kube, ranks=1, trainjob=True)
    assert verified(kube, jobset_pod(0, OOMKILLED)).kind is jk.TRAINJOB
    assert verified(kube, jobset_pod(0, OOMKILLED), frozenset({"jobset"})).kind is jk.JOBSET


def test_a_pytorchjob_without_a_master_ranks_workers_from_zero() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    pytorchjob(kube, master=False)
    assert verified(kube, pytorch_pod("worker", 2, OOMKILLED)).rank == 2


def test_a_pytorchjob_pod_of_another_controller_is_refused() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    pytorchjob(kube)
    body = pytorch_pod("worker", 1, OOMKILLED)
    body["metadata"]["labels"]["training.kubeflow.org/operator-name"] = "tfjob-controller"
    with pytest.raises(OwnerRefused):
        verified(kube, body)


def test_an_mpi_operator_launcher_is_verified_through_its_job() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    kube.objects[("MPIJob", "mpi")] = obj("MPIJob", "kubeflow.org/v2beta1", "mpi", "m-uid")
    kube.workloads[("Job", "mpi-launcher")] = {
        "metadata": {"namespace": "ml", "name": "mpi-launcher", "uid": "l-uid",
                     "ownerReferences": [owner("MPIJob", "kubeflow.org/v2beta1", "mpi",
                                               "m-uid")]},
        "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "l-uid"}}}}
    labels = {"training.kubeflow.org/job-name": "mpi",
              "training.kubeflow.org/operator-name": "mpi-operator",
              "training.kubeflow.org/job-role": "launcher",
              "batch.kubernetes.io/controller-uid": "l-uid"}
    body = pod("mpi-launcher-x", OOMKILLED, labels=labels,
               refs=[owner("Job", "batch/v1", "mpi-launcher", "l-uid")])
    job = verified(kube, body)
    assert (job.kind, job.name) == (jk.MPIJOB, "mpi")


LWS = {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "1"}


def lws(kube: FakeKube) -> dict[str, Any]:
    """A LeaderWorkerSet's group 1: leader lws-1 (StatefulSet lws), worker StatefulSet lws-1
    owned by the leader pod; returns worker 2's pod."""
    kube.objects[("LeaderWorkerSet", "lws")] = obj(
        "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws", "lws-uid")
    selector = {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "lws"}}
    kube.workloads[("StatefulSet", "lws")] = {
        "metadata": {"namespace": "ml", "name": "lws", "uid": "sts-uid", "ownerReferences": [
            owner("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws", "lws-uid")]},
        "spec": {"selector": selector}}
    kube.workloads[("StatefulSet", "lws-1")] = {
        "metadata": {"namespace": "ml", "name": "lws-1", "uid": "wsts-uid", "ownerReferences": [
            owner("Pod", "v1", "lws-1", "leader-uid")]},
        "spec": {"selector": selector}}
    leader = pod("lws-1", OOMKILLED, uid="leader-uid",
                 labels={**LWS, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                 refs=[owner("StatefulSet", "apps/v1", "lws", "sts-uid")])
    kube.pod = leader
    labels = {**LWS, "leaderworkerset.sigs.k8s.io/worker-index": "2"}
    return pod("lws-1-2", OOMKILLED, labels=labels,
               refs=[owner("StatefulSet", "apps/v1", "lws-1", "wsts-uid")])


def test_a_leaderworkerset_worker_is_verified_through_its_leader_pod() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    worker = lws(kube)
    job = verified(kube, worker)
    assert (job.kind, job.name, job.rank, job.position) == (
        jk.LEADERWORKERSET, "lws", 2, "group 1, worker 2")
    assert kube.reads == [("ml", "lws-1")]


def test_a_leaderworkerset_worker_whose_leader_is_of_another_group_is_refused() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    worker = lws(kube)
    kube.pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "0"
    with pytest.raises(OwnerRefused):
        verified(kube, worker)


def test_a_ray_worker_leads_to_the_rayjob_that_made_its_cluster() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    kube.objects[("RayJob", "rj")] = obj("RayJob", "ray.io/v1", "rj", "rj-uid")
    kube.objects[("RayCluster", "rj-abcde")] = obj(
        "RayCluster", "ray.io/v1", "rj-abcde", "rc-uid",
        refs=[owner("RayJob", "ray.io/v1", "rj", "rj-uid")],
        labels={"ray.io/originated-from-cr-name": "rj", "ray.io/originated-from-crd": "RayJob"})
    body = pod("rj-abcde-worker-x", OOMKILLED,
               labels={"ray.io/cluster": "rj-abcde", "ray.io/node-type": "worker"},
               refs=[owner("RayCluster", "ray.io/v1", "rj-abcde", "rc-uid")])
    job = verified(kube, body)
    assert (job.kind, job.name, job.rank) == (jk.RAYJOB, "rj", None)


def test_an_indexed_job_is_its_own_top_and_a_non_indexed_one_is_refused() -> None:
    kube = FakeKube(None)  # type: ignore[arg-type]
    kube.workloads[("Job", "ix")] = {
        "metadata": {"namespace": "ml", "name": "ix", "uid": "ju"},
        "spec": {"completionMode": "Indexed",
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "ju"}}}}
    body = pod("ix-4-x", OOMKILLED, labels={"batch.kubernetes.io/controller-uid": "ju"},
               refs=[owner("Job", "batch/v1", "ix", "ju")],
               annotations={"batch.kubernetes.io/job-completion-index": "4"})
    job = verified(kube, body)
    assert (job.kind, job.name, job.rank) == (jk.JOB, "ix", 4)
    kube.workloads[("Job", "ix")]["spec"]["completionMode"] = "NonIndexed"
    with pytest.raises(OwnerRefused):
        verified(kube, body)
