"""The operator against a real API server with kwok: failures in, annotations and Events out."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.localcluster import LocalCluster, cri
from devtools.localcluster.components import OperatorProcess, install_crds

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "oom" / "corpus"
PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
RESTART = "stage.gpu-auditor.io"
GIB = 2**30


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    install_crds(kwok_cluster)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    operator = OperatorProcess(kwok_cluster).start()
    yield {"cluster": kwok_cluster, "node": node, "operator": operator}
    operator.stop()


@pytest.fixture
def ns(env: dict[str, Any]) -> str:
    core = client.CoreV1Api(env["cluster"].api_client())
    name = f"op-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def _core(env: dict[str, Any]) -> client.CoreV1Api:
    return client.CoreV1Api(env["cluster"].api_client())


def corpus_log(name: str) -> str:
    shared = ROOT.parent / "shared" / "corpus" / "oom" / name
    return (shared if shared.exists() else FIXTURES / name).read_text()


def write_log(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def logs_object(env: dict[str, Any], ns: str, pod: str, *, current: str | None = None,
                previous: str | None = None) -> None:
    env["cluster"].serve_logs(ns, pod, current=Path(current) if current else None,
                              previous=Path(previous) if previous else None)


def failing_pod(env: dict[str, Any], ns: str, name: str, *, reason: str = "Error",
                exit_code: int = 1, restart: bool = False, delay: str = "1500ms",
                container: dict[str, Any] | None = None,
                labels: dict[str, str] | None = None) -> None:
    """A pod on the GPU node that kwok fails: terminated now, or restarted with lastState."""
    if restart:
        stage_labels = {f"{RESTART}/restart-after-failure": "true"}
        stage_notes = {f"{RESTART}/reason": reason, f"{RESTART}/exit-code": str(exit_code),
                       f"{RESTART}/delay": delay}
    else:
        stage_labels = {CHAOS: "true"}
        stage_notes = {f"{CHAOS}/reason": reason, f"{CHAOS}/exit-code": str(exit_code),
                       f"{CHAOS}/delay": delay}
    spec_container = {"name": "main", "image": "trainer:latest",
                      "resources": {"limits": {"nvidia.com/gpu": "1"}}, **(container or {})}
    _core(env).create_namespaced_pod(ns, {
        "metadata": {"name": name, "labels": {**stage_labels, **(labels or {})},
                     "annotations": stage_notes},
        "spec": {"nodeName": env["node"], "containers": [spec_container],
                 "restartPolicy": "Always" if restart else "Never"},
    })


def wait_annotated(env: dict[str, Any], ns: str, name: str, key: str = "diagnosis",
                   timeout: float = 60) -> dict[str, str]:
    core = _core(env)

    def annotations() -> dict[str, str] | None:
        found = core.read_namespaced_pod(name, ns).metadata.annotations or {}
        return found if f"{PREFIX}{key}" in found else None

    result: dict[str, str] = env["cluster"].wait(annotations, timeout, f"{ns}/{name} {key}")
    return result


def our_events(env: dict[str, Any], ns: str, pod: str) -> list[Any]:
    events = _core(env).list_namespaced_event(ns).items
    return [e for e in events if e.involved_object.name == pod
            and e.source and e.source.component == "gpu-auditor"]


# -- detection and writing -------------------------------------------------------------------


def test_an_oomkilled_container_is_diagnosed_as_host_oom_with_its_memory_limit(
    env: dict[str, Any], ns: str
) -> None:
    failing_pod(env, ns, "etl", reason="OOMKilled", exit_code=137, container={
        "resources": {"limits": {"memory": "2Gi"}, "requests": {"memory": "1Gi"}}})
    notes = wait_annotated(env, ns, "etl")
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert "2.00 GiB" in notes[f"{PREFIX}summary"] or "2 GiB" in notes[f"{PREFIX}summary"]
    assert f"{PREFIX}recommended-alloc-conf" not in notes
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert (evidence["container"], evidence["exitCode"]) == ("main", 137)
    events = env["cluster"].wait(lambda: our_events(env, ns, "etl"), 30, "event")
    assert [(e.reason, e.type) for e in events] == [("OOMKilled", "Warning")]


def test_a_pod_the_kubelet_evicted_for_the_node_s_memory_is_a_host_kill(
    env: dict[str, Any], ns: str
) -> None:
    """kwok plays the kubelet's eviction (restart-stages.yaml: phase Failed, reason Evicted,
    the memory message, each container killed with exit 137); the operator reads the pod
    status's eviction, reads no log, and annotates a host kill (public11 t-011, t-012, v-030)."""
    _core(env).create_namespaced_pod(ns, {
        "metadata": {"name": "pipeline-step", "labels": {f"{RESTART}/evicted": "true"},
                     "annotations": {f"{RESTART}/delay": "1500ms", f"{RESTART}/message": (
                         "The node was low on resource: memory. Threshold quantity: 100Mi, "
                         "available: 44Mi. Container main was using 2519384Ki, which exceeds "
                         "its request of 0. ")}},
        "spec": {"nodeName": env["node"], "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer:latest",
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })
    notes = wait_annotated(env, ns, "pipeline-step")
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert notes[f"{PREFIX}summary"].startswith(
        "host-oom-killed: container 'main' was stopped (exit 137) when the kubelet evicted the "
        "pod: the node was low on host (CPU) memory")
    pod = _core(env).read_namespaced_pod("pipeline-step", ns)
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")
    events = env["cluster"].wait(lambda: our_events(env, ns, "pipeline-step"), 30, "event")
    assert [(e.reason, e.type) for e in events] == [("OOMKilled", "Warning")]


def test_a_fragmentation_oom_in_the_current_log_recommends_expandable_segments(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    log = write_log(tmp_path, "frag.log", cri(corpus_log("frag_pinned_segments_fullgpu.log")))
    failing_pod(env, ns, "trainer")
    logs_object(env, ns, "trainer", current=log)
    notes = wait_annotated(env, ns, "trainer")
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert json.loads(notes[f"{PREFIX}evidence"])["source"] == "log"
    events = env["cluster"].wait(lambda: our_events(env, ns, "trainer"), 30, "event")
    assert events[0].reason == "CUDAOutOfMemory"
    assert "expandable_segments:True" in events[0].message


def test_the_recommendation_keeps_the_jobs_other_allocator_keys(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    log = write_log(tmp_path, "frag.log", cri(corpus_log("frag_pinned_segments_fullgpu.log")))
    failing_pod(env, ns, "tuned", container={"env": [
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "garbage_collection_threshold:0.6"}]})
    logs_object(env, ns, "tuned", current=log)
    notes = wait_annotated(env, ns, "tuned")
    conf = notes[f"{PREFIX}recommended-alloc-conf"]
    assert set(conf.split(",")) == {"garbage_collection_threshold:0.6", "expandable_segments:True"}


def test_a_job_whose_container_restarted_is_diagnosed_from_the_previous_log_and_on_the_job(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    cluster: LocalCluster = env["cluster"]
    capacity = corpus_log("capacity_batch_too_big_fullgpu.log")
    previous = write_log(tmp_path, "prev.log", cri(capacity))
    current = write_log(tmp_path, "cur.log", cri("restarted; epoch 1 resumed"))
    client.BatchV1Api(cluster.api_client()).create_namespaced_job(ns, {
        "metadata": {"name": "train"},
        "spec": {"backoffLimit": 3, "template": {
            "metadata": {"labels": {f"{RESTART}/restart-after-failure": "true"},
                         "annotations": {f"{RESTART}/delay": "3s"}},
            "spec": {"nodeName": env["node"], "restartPolicy": "OnFailure",
                     "containers": [{"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    })
    core = _core(env)
    pod = cluster.wait(lambda: core.list_namespaced_pod(ns).items, 60, "job pod").pop()
    name = pod.metadata.name
    logs_object(env, ns, name, current=current, previous=previous)
    notes = wait_annotated(env, ns, name)
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert f"{PREFIX}recommended-alloc-conf" not in notes
    assert json.loads(notes[f"{PREFIX}evidence"])["restartCount"] == 0
    job = cluster.wait(
        lambda: (j := client.BatchV1Api(cluster.api_client()).read_namespaced_job("train", ns))
        .metadata.annotations and f"{PREFIX}diagnosis" in j.metadata.annotations and j,
        30, "job annotated",
    )
    assert job.metadata.annotations[f"{PREFIX}diagnosis"] == "capacity"
    assert job.metadata.annotations[f"{PREFIX}diagnosed-pod"] == f"{ns}/{name}"


def _report(env: dict[str, Any], spec: dict[str, Any]) -> None:
    api = client.CustomObjectsApi(env["cluster"].api_client())
    body = {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": env["node"]},
            "spec": {"nodeName": env["node"], "generatedAt": "2026-11-29T10:00:00Z", **spec}}
    for gpu in spec.get("gpus", []):
        for entry in gpu["pods"]:
            entry.setdefault("podUID", f"uid-{entry['pod']}")
    try:
        existing = api.get_cluster_custom_object("gpu-auditor.io", "v1alpha1",
                                                 "gpunodereports", env["node"])
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        api.replace_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports",
                                          env["node"], body)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        api.create_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", body)


def _gpu(uuid_: str, *pods: dict[str, Any], free: int = 1 * GIB) -> dict[str, Any]:
    return {"uuid": uuid_, "index": 0, "model": "NVIDIA H200", "memoryTotalBytes": 140 * GIB,
            "memoryUsedBytes": 139 * GIB, "memoryFreeBytes": free, "pods": list(pods)}


def _running_pod(env: dict[str, Any], ns: str, name: str, gpu: bool = True) -> str:
    """Creates the pod on the GPU node; its UID (a report names pods with their UID)."""
    resources = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {}
    return str(_core(env).create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"nodeName": env["node"], "containers": [
            {"name": "main", "image": "notebook", "resources": resources}]},
    }).metadata.uid)


def test_unintended_sharing_in_a_node_report_is_written_on_both_pods(
    env: dict[str, Any], ns: str
) -> None:
    trainer_uid = _running_pod(env, ns, "trainer")
    notebook_uid = _running_pod(env, ns, "notebook", gpu=False)
    _report(env, {"gpus": [_gpu("GPU-share",
                                {"namespace": ns, "pod": "trainer", "container": "main",
                                 "podUID": trainer_uid, "bytes": 60 * GIB, "allocated": "true",
                                 "pids": [11]},
                                {"namespace": ns, "pod": "notebook", "container": "main",
                                 "podUID": notebook_uid, "bytes": 70 * GIB, "allocated": "false",
                                 "pids": [12]})],
                  "findings": [{"kind": "unintended-sharing", "gpuUUID": "GPU-share",
                                "pods": [f"{ns}/trainer", f"{ns}/notebook"],
                                "message": "2 pods on GPU-share, sharing strategy none"}]})
    trainer = wait_annotated(env, ns, "trainer", "gpu-shared-with")
    notebook = wait_annotated(env, ns, "notebook", "gpu-shared-with")
    assert trainer[f"{PREFIX}gpu-shared-with"] == f"{ns}/notebook"
    assert notebook[f"{PREFIX}gpu-shared-with"] == f"{ns}/trainer"
    for pod in ("trainer", "notebook"):
        events = env["cluster"].wait(lambda p=pod: our_events(env, ns, p), 30, "event")
        assert [e.reason for e in events] == ["UnintendedGPUSharing"]


def test_a_raw_cuda_error_becomes_gpu_shared_when_the_node_report_names_the_other_pod(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    _running_pod(env, ns, "hog", gpu=False)
    # The agent saw the trainer on GPU-full before it died; the hog still holds the GPU.
    _report(env, {"gpus": [_gpu("GPU-full",
                                {"namespace": ns, "pod": "victim", "container": "main",
                                 "bytes": 600 * 2**20, "allocated": "true", "pids": [21]},
                                {"namespace": ns, "pod": "hog", "container": "main",
                                 "bytes": 139 * GIB, "allocated": "false", "pids": [22]},
                                free=64 * 2**20)]})
    env["cluster"].wait(lambda: True, 1, "report seen")
    log = write_log(tmp_path, "ctx.log", cri(corpus_log("context_oom_gpu_full.log")))
    failing_pod(env, ns, "victim", delay="2s")
    logs_object(env, ns, "victim", current=log)
    notes = wait_annotated(env, ns, "victim")
    assert notes[f"{PREFIX}diagnosis"] == "gpu-shared"
    assert json.loads(notes[f"{PREFIX}evidence"])["otherPodsOnGPU"] == [f"{ns}/hog"]


def test_pods_labelled_ignore_are_left_alone(env: dict[str, Any], ns: str) -> None:
    failing_pod(env, ns, "skipme", reason="OOMKilled", exit_code=137,
                labels={"gpu-auditor.io/ignore": "true"})
    failing_pod(env, ns, "marker", reason="OOMKilled", exit_code=137)
    wait_annotated(env, ns, "marker")  # processed after skipme was seen
    notes = _core(env).read_namespaced_pod("skipme", ns).metadata.annotations or {}
    assert f"{PREFIX}diagnosis" not in notes


# -- faults ------------------------------------------------------------------------------------


def test_an_operator_restart_mid_run_writes_nothing_twice(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    operator: OperatorProcess = env["operator"]
    log = write_log(tmp_path, "frag.log", cri(corpus_log("frag_pinned_segments.log")))
    names = [f"job-{i}" for i in range(6)]
    for i, name in enumerate(names):
        failing_pod(env, ns, name, delay=f"{500 + 300 * i}ms")
        logs_object(env, ns, name, current=log)
    wait_annotated(env, ns, names[0])
    operator.restart()  # SIGKILL while the later pods are still failing or being diagnosed
    for name in names:
        assert wait_annotated(env, ns, name)[f"{PREFIX}diagnosis"] == "fragmentation"
    operator.restart()  # a re-list of already diagnosed pods
    failing_pod(env, ns, "after", reason="OOMKilled", exit_code=137)
    wait_annotated(env, ns, "after")
    for name in names:
        notes = _core(env).read_namespaced_pod(name, ns).metadata.annotations
        assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
        # an Event a kill lost between the annotation and the post is posted again by the next
        # process when it comes to the pod, which may be after "after" (CI's run at 6e1cccf read
        # 0 here): wait for it, then it must be the only one
        env["cluster"].wait(lambda n=name: len(our_events(env, ns, n)) >= 1, 60, f"{name} Event")
        assert len(our_events(env, ns, name)) == 1


def test_the_operator_recovers_from_a_kube_apiserver_restart(
    env: dict[str, Any], ns: str
) -> None:
    env["cluster"].restart_apiserver(downtime=2)
    failing_pod(env, ns, "after-restart", reason="OOMKilled", exit_code=137)
    assert wait_annotated(env, ns, "after-restart", timeout=120)[f"{PREFIX}diagnosis"] == (
        "host-oom-killed")


def test_a_pod_deleted_mid_diagnosis_is_skipped_and_the_operator_carries_on(
    env: dict[str, Any], ns: str
) -> None:
    failing_pod(env, ns, "ephemeral", delay="200ms")  # no Logs object: the log read fails
    env["cluster"].wait(
        lambda: _core(env).read_namespaced_pod("ephemeral", ns).status.phase == "Failed",
        30, "failed")
    _core(env).delete_namespaced_pod("ephemeral", ns, grace_period_seconds=0)
    failing_pod(env, ns, "survivor", reason="OOMKilled", exit_code=137)
    assert wait_annotated(env, ns, "survivor")[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert env["operator"].component.running


def test_a_50_mb_log_is_read_bounded_and_still_diagnosed(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    filler = b"step 1 loss 2.3456 lr 0.0001 tokens/s 123456 " * 2 + b"\n"
    body = filler * (50 * 2**20 // len(filler))
    path = tmp_path / "huge.log"
    with path.open("wb") as f:
        f.write(cri(body))
        f.write(cri(corpus_log("frag_pinned_segments_fullgpu.log")))
    assert path.stat().st_size > 50 * 2**20
    failing_pod(env, ns, "huge")
    logs_object(env, ns, "huge", current=str(path))
    assert wait_annotated(env, ns, "huge", timeout=120)[f"{PREFIX}diagnosis"] == "fragmentation"


def test_a_log_of_binary_garbage_writes_nothing_and_harms_nothing(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    garbage = write_log(tmp_path, "garbage.log", cri(os.urandom(256 * 1024).replace(b"\n", b"")))
    failing_pod(env, ns, "garbage")
    logs_object(env, ns, "garbage", current=garbage)
    failing_pod(env, ns, "next", reason="OOMKilled", exit_code=137, delay="4s")
    wait_annotated(env, ns, "next")
    notes = _core(env).read_namespaced_pod("garbage", ns).metadata.annotations or {}
    assert f"{PREFIX}diagnosis" not in notes
    assert env["operator"].component.running


def test_a_forbidden_log_read_is_counted_and_other_diagnoses_go_on(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    cluster: LocalCluster = env["cluster"]
    kubeconfig = restricted_kubeconfig(cluster, ns, tmp_path)
    restricted = OperatorProcess(cluster, f"--namespace={ns}", name="operator-no-logs",
                                 kubeconfig=kubeconfig).start()
    try:
        log = write_log(tmp_path, "frag.log", cri(corpus_log("frag_pinned_segments.log")))
        failing_pod(env, ns, "secret-log")
        logs_object(env, ns, "secret-log", current=log)
        cluster.wait(lambda: re.search(
            r'gpu_auditor_operator_log_fetch_failures_total\{reason="forbidden"\} [1-9]',
            restricted.metrics()), 60, "forbidden log read counted")
        failing_pod(env, ns, "killed", reason="OOMKilled", exit_code=137)
        assert wait_annotated(env, ns, "killed")[f"{PREFIX}diagnosis"] == "host-oom-killed"
    finally:
        restricted.stop()


def restricted_kubeconfig(cluster: LocalCluster, ns: str, tmp_path: Path) -> Path:
    """A ServiceAccount allowed everything the operator needs except pods/log."""
    api = cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "no-logs"}})
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": ["gpu-auditor.io"], "resources": ["gpunodereports"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["list", "watch"]},
    ]
    rbac.create_cluster_role({"metadata": {"name": f"no-logs-{ns}"}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": f"no-logs-{ns}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"no-logs-{ns}"},
        "subjects": [{"kind": "ServiceAccount", "name": "no-logs", "namespace": ns}],
    })
    token = core.create_namespaced_service_account_token(
        "no-logs", ns, {"spec": {"expirationSeconds": 3600}}).status.token
    import yaml

    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "no-logs", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "no-logs"
    path = tmp_path / "no-logs.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path
