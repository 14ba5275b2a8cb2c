"""`make demo`: the whole product on one machine, no container engine, no GPU.

Starts a real control plane (etcd, kube-apiserver, controllers, scheduler) with kwok GPU nodes,
the node agent on the fake node example (examples/fake-node, publishing its GPUNodeReport), and
the operator; then three pods fail the way training jobs do:

* ml/finetune-7b   CUDA OOM from allocator fragmentation (a real H200 log)
* ml/trainer-0     raw `CUDA error: out of memory` (no figures in the log) on a GPU that
                   ml/notebook-1, which requested no GPU, has filled: the node report names it
* etl/preprocess   the kernel's OOM killer (host memory, exit 137)

and prints what a user reads on each pod, then tears everything down.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import yaml

from devtools.localcluster import ClusterError, LocalCluster, cri
from devtools.localcluster.components import AgentProcess, OperatorProcess, install_crds

ROOT = Path(__file__).resolve().parents[1]
FAKE_NODE = ROOT / "examples" / "fake-node"
LOGS = ROOT / "examples" / "logs"
PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
WANTED = {("ml", "finetune-7b"): "diagnosis", ("ml", "trainer-0"): "diagnosis",
          ("etl", "preprocess"): "diagnosis", ("ml", "notebook-1"): "gpu-shared-with"}
"""The demo's pods and the annotation each one gets: the three that fail, and the notebook
that filled the trainer's GPU."""


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _pod(name: str, node: str, container: str, *, gpu: bool, fail: dict[str, str] | None = None,
         memory: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {}}
    if gpu:
        resources["limits"]["nvidia.com/gpu"] = "1"
    if memory:
        resources["limits"]["memory"] = memory
    metadata: dict[str, Any] = {"name": name}
    if fail:
        metadata["labels"] = {CHAOS: "true"}
        metadata["annotations"] = {f"{CHAOS}/{k}": v for k, v in fail.items()}
    return {"metadata": metadata, "spec": {
        "nodeName": node, "restartPolicy": "Never",
        "containers": [{"name": container, "image": "pytorch/pytorch:2.11.0-cuda13.0-runtime",
                        "resources": resources}]}}


def _with_real_uids(work: Path, uids: dict[str, str]) -> Path:
    """A copy of the fake node example (pods.yaml, /proc) carrying the UIDs the API server gave
    the demo's pods instead of the example's: the operator writes a report's finding only onto
    the pod of the UID the report names."""
    copy = work / "fake-node"
    for source in FAKE_NODE.rglob("*"):
        target = copy / source.relative_to(FAKE_NODE)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        text = source.read_text()
        for fake, real in uids.items():  # cgroup paths spell a UID with underscores
            text = text.replace(fake, real).replace(fake.replace("-", "_"),
                                                    real.replace("-", "_"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return copy


def _crowded_gpu(work: Path, fake_node: Path) -> Path:
    """The fake node example with ml/notebook-1 (no GPU requested) grown to fill GPU 0, as an
    unattended notebook does: the trainer sharing that GPU then dies at CUDA context creation."""
    fake = yaml.safe_load((fake_node / "nvml.yaml").read_text())
    fake["pods"] = str(fake_node / fake.get("pods", "pods.yaml"))
    gpu0 = fake["gpus"][0]
    trainer, trainer_helper, notebook = 48211, 48377, 51904
    context = 500 * 2**20  # the trainer got as far as its CUDA context
    budget = gpu0["memoryTotalBytes"] - gpu0.get("memoryReservedBytes", 0) - 96 * 2**20
    gpu0["processes"] = [p for p in gpu0["processes"] if p["pid"] != trainer_helper]
    for process in gpu0["processes"]:
        if process["pid"] == trainer:
            process["usedBytes"] = context
        elif process["pid"] == notebook:
            process["usedBytes"] = budget - context
    path = work / "nvml-crowded.yaml"
    path.write_text(yaml.safe_dump(fake))
    return path


def stage(cluster: LocalCluster) -> OperatorProcess:
    """Everything up to the three failed pods annotated (and ml/notebook-1 told it shares a
    GPU): the scenario `make demo` shows and tests/integration/test_explain_demo.py reads back."""
    from kubernetes import client

    api = cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    fake = yaml.safe_load((FAKE_NODE / "pods.yaml").read_text())
    node = fake["node"]["name"]

    _say("starting kube-controller-manager, kube-scheduler and kwok")
    cluster.start_controllers()
    cluster.start_kwok()
    install_crds(cluster)
    _say(f"kwok GPU nodes: {node} (the fake node example, 2 GPUs) and gpu-node-2 (8 GPUs)")
    gpu_labels = {"nvidia.com/gpu.present": "true", **fake["node"].get("labels", {})}
    cluster.create_node(node, gpus=2, labels=gpu_labels)
    cluster.create_node("gpu-node-2", gpus=8, labels={"nvidia.com/gpu.present": "true"})

    for ns in ("ml", "serving", "etl"):
        core.create_namespace({"metadata": {"name": ns}})
    uids: dict[str, str] = {}
    for pod in fake["pods"]:  # the running pods the agent sees on its fake node
        gpu = any(c.get("gpus") for c in pod["containers"])
        created = core.create_namespaced_pod(pod["namespace"], _pod(
            pod["name"], node, pod["containers"][0]["name"], gpu=gpu))
        uids[pod["uid"]] = created.metadata.uid
    work = cluster.workdir / "demo-logs"
    work.mkdir()
    fake_node = _with_real_uids(work, uids)
    (work / "trainer-0.log").write_bytes(cri((LOGS / "context-oom.log").read_text()))
    cluster.serve_logs("ml", "trainer-0", current=work / "trainer-0.log", container="trainer")

    _say("starting the operator and the node agent (fake NVML, fake /proc)")
    operator = OperatorProcess(cluster).start()
    AgentProcess(cluster, node, f"--nvml-fake={_crowded_gpu(work, fake_node)}",
                 f"--proc-root={fake_node / 'proc'}", "--interval=1",
                 "--report-min-interval=1").start()

    cluster.wait(lambda: custom.get_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports", node), 60, "the agent's GPUNodeReport")
    _say(f"GPUNodeReport/{node} published (kubectl get gpunodereports)")

    _say("three jobs fail: a fragmentation OOM, a raw CUDA OOM on a shared GPU, an OOM kill")
    core.patch_namespaced_pod("trainer-0", "ml", {"metadata": {
        "labels": {CHAOS: "true"},
        "annotations": {f"{CHAOS}/reason": "Error", f"{CHAOS}/exit-code": "1",
                        f"{CHAOS}/delay": "1s"}}})
    (work / "finetune.log").write_bytes(cri((LOGS / "fragmentation.log").read_text()))
    core.create_namespaced_pod("ml", _pod(
        "finetune-7b", "gpu-node-2", "main", gpu=True,
        fail={"reason": "Error", "exit-code": "1", "delay": "2s"}))
    cluster.serve_logs("ml", "finetune-7b", current=work / "finetune.log")
    core.create_namespaced_pod("etl", _pod("preprocess", "gpu-node-2", "main", gpu=False,
                                           memory="16Gi", fail={"reason": "OOMKilled",
                                                                "exit-code": "137", "delay": "2s"}))

    for (ns, name), key in WANTED.items():
        cluster.wait(lambda ns=ns, name=name, key=key: f"{PREFIX}{key}" in (
            core.read_namespaced_pod(name, ns).metadata.annotations or {}), 90,
            f"{ns}/{name} annotated")
    time.sleep(1)
    return operator


def run(cluster: LocalCluster) -> int:
    from kubernetes import client

    from gpu_auditor import cli

    operator = stage(cluster)
    core = client.CoreV1Api(cluster.api_client())
    _say("what the job owners read (gpu-auditor explain -n NAMESPACE POD, or "
         "kubectl gpu-auditor explain ...; the raw form: kubectl get pod POD -o yaml):")
    for ns, name in WANTED:
        print(f"\n$ gpu-auditor explain -n {ns} {name}", flush=True)
        cli.main(["explain", "-n", ns, name, "--kubeconfig", str(cluster.kubeconfig)])
    print(flush=True)
    _say("Events (kubectl get events -A --field-selector source=gpu-auditor):")
    for event in sorted(core.list_event_for_all_namespaces().items,
                        key=lambda e: (e.metadata.namespace, e.involved_object.name)):
        if event.source and event.source.component == "gpu-auditor":
            print(f"  {event.type:8} {event.reason:22} {event.metadata.namespace}/"
                  f"{event.involved_object.name}: {event.message[:110]}")
    _say("operator metrics:")
    for line in operator.metrics().splitlines():
        if line.startswith("gpu_auditor_diagnoses_total") or line.startswith(
                "gpu_auditor_sharing_findings_total"):
            print(f"  {line}")
    return 0


def main() -> int:
    try:
        with LocalCluster() as cluster:
            _say(f"control plane up: {cluster.server} (work folder {cluster.workdir})")
            status = run(cluster)
        _say("cleaned up")
        return status
    except ClusterError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
