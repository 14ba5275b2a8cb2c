"""One job, many pods, against a real API server with the controllers' real CRDs (issue 27).

The JobSet and PyTorchJob CRDs are the ones their controllers ship, from their Go modules
(`devtools.localcluster.crds`: `go mod download`, cached in ~/.cache/gpu-auditor/crds). No
JobSet or training-operator controller runs (kwok has none): the test makes what they make,
with the owner references and labels their sources set (docs/operator.md, "One job, many
pods"): a JobSet's 16 child Jobs (whose pods the real Job controller of kube-controller-manager
creates), and a PyTorchJob's 16 pods. kwok fails the containers (its chaos stage) and serves
their logs; the real operator does the rest.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.localcluster import LocalCluster, cri
from devtools.localcluster.components import OperatorProcess, install_crds
from devtools.localcluster.crds import JOBSET, PYTORCHJOB, CrdUnavailable, crd_file
from gpu_auditor.cli import main

pytestmark = pytest.mark.integration

PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PYTORCH_API = ("kubeflow.org", "v1", "pytorchjobs")
NCCL_TIMEOUT = (
    "[rank{rank}]:[E1129 10:00:05.100 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank "
    "{rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5041, "
    "OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600019 "
    "milliseconds before timing out.\n"
    "[rank{rank}]:[E1129 10:00:05.101 ProcessGroupNCCL.cpp:630] Some NCCL operations have failed "
    "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
    "might run on corrupted/incomplete data.\n"
    "terminate called after throwing an instance of 'c10::DistBackendError'\n")
CUDA_OOM = (  # 400 steps in: a steady run, so its idle cache reads as fragmentation (issue 24)
    "step 200 loss 1.92\nstep 400 loss 1.71\n"
    "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 88, in <module>\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.75 GiB is free. Including non-PyTorch memory, this "
    "process has 77.34 GiB memory in use. Of the allocated memory 70.12 GiB is allocated by "
    "PyTorch, and 6.91 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.\n")


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    try:
        crds = [crd_file(JOBSET), crd_file(PYTORCHJOB)]
    except CrdUnavailable as exc:  # Go and its module proxy, as for the control plane
        if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"the controllers' CRDs: {exc}")
        pytest.skip(f"the controllers' CRDs: {exc}")
    install_crds(kwok_cluster)
    for path, crd in zip(crds, (JOBSET, PYTORCHJOB), strict=True):
        kwok_cluster.apply_yaml(path.read_text())
        kwok_cluster.wait_for_crd(crd.name)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    operator = OperatorProcess(kwok_cluster).start()
    yield {"cluster": kwok_cluster, "node": node, "operator": operator}
    operator.stop()


@pytest.fixture
def ns(env: dict[str, Any]) -> str:
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(env["cluster"].api_client()).create_namespace({"metadata": {"name": name}})
    return name


def _api(env: dict[str, Any]) -> Any:
    return env["cluster"].api_client()


def custom(env: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(_api(env))


def container() -> dict[str, Any]:
    return {"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0",
            "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}}}


# -- a JobSet as its controller makes it ---------------------------------------------------------

def jobset_labels(name: str, uid: str, index: int, replicas: int) -> dict[str, str]:
    """The labels (and annotations: the same) JobSet v0.11 puts on each child Job and on its
    pod template (`labelAndAnnotateObject`)."""
    return {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": uid,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
            "jobset.sigs.k8s.io/global-replicas": str(replicas),
            "jobset.sigs.k8s.io/job-index": str(index),
            "jobset.sigs.k8s.io/job-global-index": str(index),
            "jobset.sigs.k8s.io/job-key": uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}-{index}").hex,
            "jobset.sigs.k8s.io/restart-attempt": "0"}


def make_jobset(env: dict[str, Any], ns: str, name: str, replicas: int) -> list[str]:
    """A JobSet of `replicas` one-pod Jobs, its child Jobs as its controller creates them
    (controller references, labels); their pods come from the real Job controller. Returns the
    pods' names by rank, once all run."""
    pod_spec = {"nodeName": env["node"], "restartPolicy": "Never", "containers": [container()]}
    job_spec = {"parallelism": 1, "completions": 1, "completionMode": "Indexed",
                "backoffLimit": 0, "template": {"spec": pod_spec}}
    jobset = custom(env).create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                     "template": {"spec": job_spec}}]},
    })
    uid = jobset["metadata"]["uid"]
    batch = client.BatchV1Api(_api(env))
    for index in range(replicas):
        labels = jobset_labels(name, uid, index, replicas)
        batch.create_namespaced_job(ns, {
            "metadata": {"name": f"{name}-workers-{index}", "labels": labels,
                         "annotations": labels,
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                              "kind": "JobSet", "name": name, "uid": uid,
                                              "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {**job_spec, "template": {
                # kwok completes a Job's pod at once (its pod-complete stage) unless it carries
                # the failure stage's label; "false" keeps it running until fail() sets "true"
                "metadata": {"labels": {**labels, CHAOS: "false"}, "annotations": labels},
                "spec": pod_spec}},
        })
    return running_pods(env, ns, f"jobset.sigs.k8s.io/jobset-name={name}", replicas,
                        "jobset.sigs.k8s.io/job-global-index")


def running_pods(env: dict[str, Any], ns: str, selector: str, count: int, rank_label: str
                 ) -> list[str]:
    core = client.CoreV1Api(_api(env))

    def ready() -> list[Any] | None:
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        running = [p for p in pods if p.status.phase == "Running"]
        return running if len(running) == count else None

    pods = env["cluster"].wait(ready, 120, f"{count} pods of {selector} running")
    return [p.metadata.name for p in sorted(pods, key=lambda p: int(p.metadata.labels[
        rank_label]))]


# -- driving the pods --------------------------------------------------------------------------

def fail(env: dict[str, Any], ns: str, pod: str, *, reason: str, exit_code: int, delay: str,
         log: str | None, tmp_path: Path) -> None:
    """Serve `log` as the container's log, then put the pod on kwok's failure stage."""
    if log is not None:
        path = tmp_path / f"{pod}.log"
        path.write_bytes(cri(log))
        env["cluster"].serve_logs(ns, pod, current=path)
    client.CoreV1Api(_api(env)).patch_namespaced_pod(pod, ns, {"metadata": {
        "labels": {CHAOS: "true"},
        "annotations": {f"{CHAOS}/reason": reason, f"{CHAOS}/exit-code": str(exit_code),
                        f"{CHAOS}/delay": delay, f"{CHAOS}/jitter-delay": delay}}})


def annotations(env: dict[str, Any], ns: str, pod: str) -> dict[str, str]:
    notes: dict[str, str] = client.CoreV1Api(_api(env)).read_namespaced_pod(
        pod, ns).metadata.annotations or {}
    return notes


def object_notes(env: dict[str, Any], ns: str, api: tuple[str, str, str], name: str
                 ) -> dict[str, str]:
    found = custom(env).get_namespaced_custom_object(api[0], api[1], ns, api[2], name)
    notes: dict[str, str] = found["metadata"].get("annotations") or {}
    return notes


def our_events(env: dict[str, Any], ns: str) -> list[Any]:
    return [e for e in client.CoreV1Api(_api(env)).list_namespaced_event(ns).items
            if e.source and e.source.component == "gpu-auditor"]


def explain(cluster: LocalCluster, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["explain", "--kubeconfig", str(cluster.kubeconfig), *argv], stdout=out,
                stderr=err)
    print(out.getvalue())  # the job view as a person reads it (pytest -s shows it)
    return code, out.getvalue(), err.getvalue()


# -- the tests ---------------------------------------------------------------------------------

def test_a_jobset_names_its_oom_pod_its_rank_and_the_cause_and_every_other_pod_points_at_it(
    env: dict[str, Any], ns: str, tmp_path: Path,
) -> None:
    cluster: LocalCluster = env["cluster"]
    pods = make_jobset(env, ns, "train", 16)
    root = pods[3]
    for rank, pod in enumerate(pods):
        if rank != 3:
            fail(env, ns, pod, reason="Error", exit_code=1, delay="4s",
                 log=NCCL_TIMEOUT.format(rank=rank), tmp_path=tmp_path)
    fail(env, ns, root, reason="OOMKilled", exit_code=137, delay="0s", log=None,
         tmp_path=tmp_path)

    def written() -> dict[str, str] | None:
        notes = object_notes(env, ns, JOBSET_API, "train")
        pointed = [p for p in pods if p != root
                   and annotations(env, ns, p).get(f"{PREFIX}root-cause-pod")]
        return notes if f"{PREFIX}root-cause-pod" in notes and len(pointed) == 15 else None

    notes = cluster.wait(written, 90, "the JobSet's root cause and 15 pointers")
    assert notes[f"{PREFIX}root-cause-pod"] == f"{ns}/{root}"
    assert notes[f"{PREFIX}root-cause-rank"] == "3"
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    summary = notes[f"{PREFIX}summary"]
    assert summary.startswith(f"rank 3 (replicatedJob workers, job 3, index 0) (pod {ns}/{root})"
                              " failed first: host-oom-killed: ")
    assert "15 pods failed after it (15 nccl-timeout)" in summary
    for pod in pods:
        pod_notes = annotations(env, ns, pod)
        if pod == root:
            assert pod_notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
            continue
        assert pod_notes[f"{PREFIX}root-cause-pod"] == f"{ns}/{root}"
        assert pod_notes[f"{PREFIX}consequence"].startswith("nccl-timeout, ")
        assert f"{PREFIX}diagnosis" not in pod_notes
    events = cluster.wait(lambda: our_events(env, ns), 30, "the JobSet's Event")
    assert [(e.involved_object.kind, e.involved_object.name, e.reason) for e in events] == [
        ("JobSet", "train", "OOMKilled")]
    code, out, err = explain(cluster, "-n", ns, "jobset/train", "--exit-code")
    assert (code, err) == (1, "")
    assert out.startswith(f"JobSet {ns}/train\n  root cause: pod {ns}/{root}, rank 3 "
                          "(replicatedJob workers, job 3, index 0), failed at ")
    assert "\nDiagnosis: host-oom-killed\n" in out
    assert "Consequences: 15 pods failed after it (15 nccl-timeout):" in out
    assert out.count("  nccl-timeout, ") == 15
    assert "Warning OOMKilled: rank 3 (replicatedJob workers" in out


def test_a_jobset_that_failed_of_something_else_gets_no_oom_diagnosis(
    env: dict[str, Any], ns: str, tmp_path: Path,
) -> None:
    cluster: LocalCluster = env["cluster"]
    pods = make_jobset(env, ns, "etl", 4)
    fail(env, ns, pods[0], reason="Error", exit_code=1, delay="0s", tmp_path=tmp_path,
         log="Traceback (most recent call last):\nValueError: shard 17 is corrupt\n")
    for rank in (1, 2):
        fail(env, ns, pods[rank], reason="Error", exit_code=1, delay="4s", tmp_path=tmp_path,
             log=NCCL_TIMEOUT.format(rank=rank))
    # an OOM of its own, well after the job had failed of the corrupt shard
    fail(env, ns, pods[3], reason="OOMKilled", exit_code=137, delay="20s", log=None,
         tmp_path=tmp_path)
    # with no root cause on the job, the late OOM keeps its own Event, as for a pod alone
    events = cluster.wait(lambda: our_events(env, ns), 90, "the late OOM's own Event")
    assert [(e.involved_object.kind, e.involved_object.name) for e in events] == [
        ("Pod", pods[3])]
    assert annotations(env, ns, pods[3])[f"{PREFIX}diagnosis"] == "host-oom-killed"
    notes = object_notes(env, ns, JOBSET_API, "etl")
    assert not any(key.startswith(PREFIX) for key in notes)
    for pod in pods[:3]:
        pod_notes = annotations(env, ns, pod)
        assert f"{PREFIX}root-cause-pod" not in pod_notes
        assert f"{PREFIX}diagnosis" not in pod_notes


def test_a_pytorchjob_names_the_worker_whose_log_holds_a_cuda_oom_and_its_rank(
    env: dict[str, Any], ns: str, tmp_path: Path,
) -> None:
    cluster: LocalCluster = env["cluster"]
    job = custom(env).create_namespaced_custom_object(*PYTORCH_API[:2], ns, PYTORCH_API[2], {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pj"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "Never",
                       "template": {"spec": {"containers": [container()]}}},
            "Worker": {"replicas": 15, "restartPolicy": "Never",
                       "template": {"spec": {"containers": [container()]}}}}}})
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pj",
             "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    core = client.CoreV1Api(_api(env))
    roles = [("master", 0), *(("worker", i) for i in range(15))]
    for role, index in roles:  # as the training operator's createNewPod names and labels them
        labels = {"training.kubeflow.org/job-name": "pj",
                  "training.kubeflow.org/operator-name": "pytorchjob-controller",
                  "training.kubeflow.org/replica-type": role,
                  "training.kubeflow.org/replica-index": str(index)}
        if role == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        core.create_namespaced_pod(ns, {
            "metadata": {"name": f"pj-{role}-{index}", "labels": labels,
                         "ownerReferences": [owner]},
            "spec": {"nodeName": env["node"], "restartPolicy": "Never",
                     "containers": [container()]}})
    cluster.wait(lambda: len([p for p in core.list_namespaced_pod(ns).items
                              if p.status.phase == "Running"]) == 16, 120, "16 pods running")
    root = "pj-worker-4"
    for role, index in roles:
        pod = f"pj-{role}-{index}"
        if pod != root:
            fail(env, ns, pod, reason="Error", exit_code=1, delay="4s", tmp_path=tmp_path,
                 log=NCCL_TIMEOUT.format(rank=index + (role == "worker")))
    fail(env, ns, root, reason="Error", exit_code=1, delay="0s", log=CUDA_OOM,
         tmp_path=tmp_path)

    def written() -> dict[str, str] | None:
        notes = object_notes(env, ns, PYTORCH_API, "pj")
        pointed = [f"pj-{r}-{i}" for r, i in roles if f"pj-{r}-{i}" != root
                   and annotations(env, ns, f"pj-{r}-{i}").get(f"{PREFIX}root-cause-pod")]
        return notes if f"{PREFIX}root-cause-pod" in notes and len(pointed) == 15 else None

    notes = cluster.wait(written, 90, "the PyTorchJob's root cause and 15 pointers")
    assert notes[f"{PREFIX}root-cause-pod"] == f"{ns}/{root}"
    assert notes[f"{PREFIX}root-cause-rank"] == "5"  # the master is rank 0, worker i is i + 1
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert notes[f"{PREFIX}summary"].startswith(f"rank 5 (worker 4) (pod {ns}/{root}) failed "
                                                "first: fragmentation: ")
    assert annotations(env, ns, "pj-master-0")[f"{PREFIX}consequence"].startswith(
        "nccl-timeout, ")
    events = cluster.wait(lambda: our_events(env, ns), 30, "the PyTorchJob's Event")
    assert [(e.involved_object.kind, e.reason) for e in events] == [
        ("PyTorchJob", "CUDAOutOfMemory")]
    code, text, _ = explain(cluster, "-n", ns, "pytorchjob/pj")
    assert f"  root cause: pod {ns}/{root}, rank 5 (worker 4), failed at " in text
    assert "Apply it: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in PyTorchJob pj's " \
           "pod template (container main)" in text
    code, out, _ = explain(cluster, "-n", ns, "pytorchjob/pj", "--json")
    view = json.loads(out)
    assert (code, view["root_pod"], view["rank"]) == (0, f"{ns}/{root}", "5")
    assert view["diagnosis"]["figures"]["requested_bytes"] == 4 * 2**30
    assert view["consequence_count"] == 15
