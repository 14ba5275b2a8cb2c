"""Distributed jobs' pods and objects as their controllers make them (the labels, annotations
and owner references of docs/operator.md's "One job, many pods"), for the job path's tests."""

from __future__ import annotations

from typing import Any

from .controller_helpers import FakeKube

NS = "ml"
OOMKILLED = {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-11-29T10:00:00Z"}


def error_at(second: int, exit_code: int = 1, message: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {"exitCode": exit_code, "reason": "Error",
                             "finishedAt": f"2026-11-29T10:00:{second:02d}Z"}
    if message:
        found["message"] = message
    return found


def owner(kind: str, api_version: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def pod(name: str, terminated: dict[str, Any], *, labels: dict[str, str],
        refs: list[dict[str, Any]], annotations: dict[str, str] | None = None,
        uid: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name, "uid": uid or f"uid-{name}",
                     "labels": labels, "annotations": dict(annotations or {}),
                     "ownerReferences": refs},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": {"memory": "8Gi"}}}]},
        "status": {"containerStatuses": [{"name": "main", "restartCount": 0,
                                          "state": {"terminated": terminated}}]},
    }


def obj(kind: str, api_version: str, name: str, uid: str, *, refs: list[dict[str, Any]] | None
        = None, labels: dict[str, str] | None = None, spec: dict[str, Any] | None = None
        ) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"namespace": NS, "name": name, "uid": uid, "labels": labels or {},
                         "annotations": {}, "ownerReferences": refs or []},
            "spec": spec or {}}


# -- JobSet: pod -> Job (one per rank) -> JobSet ---------------------------------------------------

def jobset(kube: FakeKube, name: str = "train", ranks: int = 4, *, uid: str = "js-uid",
           trainjob: bool = False) -> None:
    refs = [owner("TrainJob", "trainer.kubeflow.org/v1alpha1", name, "tj-uid")] if trainjob \
        else []
    kube.objects[("JobSet", name)] = obj("JobSet", "jobset.x-k8s.io/v1alpha2", name, uid,
                                         refs=refs)
    if trainjob:
        kube.objects[("TrainJob", name)] = obj("TrainJob", "trainer.kubeflow.org/v1alpha1",
                                               name, "tj-uid")
    for rank in range(ranks):
        job = f"{name}-workers-{rank}"
        job_uid = f"job-uid-{rank}"
        kube.workloads[("Job", job)] = {
            "metadata": {"namespace": NS, "name": job, "uid": job_uid,
                         "labels": jobset_labels(name, uid, rank),
                         "ownerReferences": [owner("JobSet", "jobset.x-k8s.io/v1alpha2", name,
                                                   uid)]},
            "spec": {"completions": 1, "parallelism": 1, "completionMode": "Indexed",
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": job_uid}}},
        }


def jobset_labels(name: str, uid: str, rank: int, attempt: int = 0) -> dict[str, str]:
    return {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": uid,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/replicatedjob-replicas": "16",
            "jobset.sigs.k8s.io/job-index": str(rank),
            "jobset.sigs.k8s.io/job-global-index": str(rank),
            "jobset.sigs.k8s.io/restart-attempt": str(attempt)}


def jobset_pod(rank: int, terminated: dict[str, Any], *, name: str = "train",
               uid: str = "js-uid", attempt: int = 0) -> dict[str, Any]:
    job, job_uid = f"{name}-workers-{rank}", f"job-uid-{rank}"
    labels = {**jobset_labels(name, uid, rank, attempt),
              "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid,
              "batch.kubernetes.io/job-name": job, "job-name": job,
              "batch.kubernetes.io/job-completion-index": "0"}
    return pod(f"{job}-0-x{rank}", terminated, labels=labels,
               refs=[owner("Job", "batch/v1", job, job_uid)],
               annotations={"batch.kubernetes.io/job-completion-index": "0"})


# -- PyTorchJob: pod -> PyTorchJob -----------------------------------------------------------

def pytorchjob(kube: FakeKube, name: str = "pj", *, master: bool = True) -> None:
    specs: dict[str, Any] = {"Worker": {"replicas": 3}}
    if master:
        specs["Master"] = {"replicas": 1}
    kube.objects[("PyTorchJob", name)] = obj("PyTorchJob", "kubeflow.org/v1", name, "pj-uid",
                                             spec={"pytorchReplicaSpecs": specs})


def pytorch_pod(role: str, index: int, terminated: dict[str, Any], name: str = "pj"
                ) -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": name,
              "training.kubeflow.org/operator-name": "pytorchjob-controller",
              "training.kubeflow.org/replica-type": role,
              "training.kubeflow.org/replica-index": str(index)}
    return pod(f"{name}-{role}-{index}", terminated, labels=labels,
               refs=[owner("PyTorchJob", "kubeflow.org/v1", name, "pj-uid")])


def serve(kube: FakeKube, *pods: dict[str, Any]) -> None:
    """Every pod readable by name, and its log (the first is `kube.pod`)."""
    kube.pod = pods[0]
    kube.others = {p["metadata"]["name"]: p for p in pods[1:]}
