"""jobmember: the job a pod's labels place it in, and its place there."""

from __future__ import annotations

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.controller.jobmember import GroupKey, member_of
from gpu_auditor.controller.pod import parse_pod

from .controller_helpers import PREFIX
from .jobs_helpers import OOMKILLED, jobset_pod, owner, pod, pytorch_pod

pytestmark = pytest.mark.unit

ALL = frozenset(jk.SWITCHES)


def test_a_jobset_pod_is_filed_by_jobset_uid_and_restart_attempt() -> None:
    member = member_of(parse_pod(jobset_pod(3, OOMKILLED, attempt=2), PREFIX), ALL)
    assert member is not None and member.kind is jk.JOBSET
    assert member.group("ml") == GroupKey("ml", "JobSet", "train", "restart-attempt 2", "js-uid")
    assert (member.index, member.position) == (3, "replicatedJob workers, job 3, index 0")


def test_two_restart_attempts_of_one_jobset_are_two_groups() -> None:
    first = member_of(parse_pod(jobset_pod(0, OOMKILLED, attempt=0), PREFIX), ALL)
    second = member_of(parse_pod(jobset_pod(0, OOMKILLED, attempt=1), PREFIX), ALL)
    assert first is not None and second is not None
    assert first.group("ml") != second.group("ml")


def test_a_pytorchjob_worker_is_placed_by_replica_type_and_index() -> None:
    member = member_of(parse_pod(pytorch_pod("worker", 2, OOMKILLED), PREFIX), ALL)
    assert member is not None and member.kind is jk.PYTORCHJOB
    assert (member.name, member.position, member.index) == ("pj", "worker 2", 2)


def test_mpi_operators_pods_are_the_v2beta1_mpijob() -> None:
    labels = {"training.kubeflow.org/job-name": "mpi",
              "training.kubeflow.org/operator-name": "mpi-operator",
              "training.kubeflow.org/job-role": "worker",
              "training.kubeflow.org/replica-index": "1"}
    body = pod("mpi-worker-1", OOMKILLED, labels=labels,
               refs=[owner("MPIJob", "kubeflow.org/v2beta1", "mpi", "u")])
    member = member_of(parse_pod(body, PREFIX), ALL)
    assert member is not None and member.kind is jk.MPIJOB and member.position == "worker 1"


def test_a_leaderworkerset_pod_is_filed_by_its_group() -> None:
    labels = {"leaderworkerset.sigs.k8s.io/name": "lws",
              "leaderworkerset.sigs.k8s.io/group-index": "1",
              "leaderworkerset.sigs.k8s.io/worker-index": "3"}
    body = pod("lws-1-3", OOMKILLED, labels=labels,
               refs=[owner("StatefulSet", "apps/v1", "lws-1", "s")])
    member = member_of(parse_pod(body, PREFIX), ALL)
    assert member is not None and member.generation == "group 1"
    assert (member.index, member.position) == (3, "group 1, worker 3")


def test_a_ray_worker_is_filed_by_its_cluster() -> None:
    labels = {"ray.io/cluster": "rc-abcde", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    body = pod("rc-abcde-gpu-worker-x", OOMKILLED, labels=labels,
               refs=[owner("RayCluster", "ray.io/v1", "rc-abcde", "r")])
    member = member_of(parse_pod(body, PREFIX), ALL)
    assert member is not None and member.kind is jk.RAYCLUSTER
    assert member.position == "worker group gpu"


def test_an_indexed_jobs_pod_is_placed_by_its_completion_index_annotation_first() -> None:
    labels = {"batch.kubernetes.io/controller-uid": "ju", "batch.kubernetes.io/job-name": "ix",
              "batch.kubernetes.io/job-completion-index": "9"}
    body = pod("ix-5-abc", OOMKILLED, labels=labels, refs=[owner("Job", "batch/v1", "ix", "ju")],
               annotations={"batch.kubernetes.io/job-completion-index": "5"})
    member = member_of(parse_pod(body, PREFIX), ALL)
    assert member is not None and member.kind is jk.JOB
    assert (member.index, member.uid) == (5, "ju")


def test_a_job_without_a_completion_index_is_no_group() -> None:
    labels = {"batch.kubernetes.io/controller-uid": "ju"}
    body = pod("plain", OOMKILLED, labels=labels, refs=[owner("Job", "batch/v1", "p", "ju")])
    assert member_of(parse_pod(body, PREFIX), ALL) is None


def test_a_kind_switched_off_keeps_the_pod_alone() -> None:
    body = pytorch_pod("worker", 0, OOMKILLED)
    assert member_of(parse_pod(body, PREFIX), ALL - {"pytorchjob"}) is None


def test_a_jobset_pod_with_jobsets_off_is_grouped_by_its_indexed_job() -> None:
    member = member_of(parse_pod(jobset_pod(3, OOMKILLED), PREFIX), frozenset({"job"}))
    assert member is not None and member.kind is jk.JOB and member.name == "train-workers-3"


def test_labels_that_are_not_names_are_no_claim() -> None:
    body = jobset_pod(0, OOMKILLED)
    body["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = "../x"
    body["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] = "²"
    member = member_of(parse_pod(body, PREFIX), frozenset({"jobset"}))
    assert member is None


def test_a_healthy_pod_is_never_read_for_a_job() -> None:
    body = jobset_pod(0, OOMKILLED)
    body["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert member_of(parse_pod(body, PREFIX), ALL) is None
