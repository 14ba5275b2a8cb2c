"""Tier 3: a real node (containerd + runc + kubelet + kube-proxy, CoreDNS for Service names)
joined to the local control plane, our image imported into its containerd, and the chart
installed with helm as a user installs it. Then, with nothing simulated but the GPUs:

- the agent DaemonSet and the operator Deployment run on the node, and `helm test` passes;
- our device plugin advertises fake nvidia.com/gpu devices through the kubelet's device-plugin
  API, the kubelet allocates them to a pod, and the agent reads that allocation from the
  kubelet's pod-resources socket; the fake NVML file names the real host pids of the pods'
  containers, which the agent maps to their pods through the real containerd cgroup paths;
- a container over its memory limit is OOM-killed by the kernel, and the in-cluster operator
  annotates it `host-oom-killed` and posts the Event;
- a container of our image writes a real OOM probe record to its termination-message path and
  exits 1 after an OOM traceback: the operator builds the diagnosis from the record the kubelet
  copied into the pod's status; and a job whose host pid the fake NVML file shows rising is
  diagnosed `leak` from the agent's published memory series, though its log shows only a full
  GPU.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import ROOT
from kubernetes import client

from devtools.localcluster import LocalCluster
from devtools.localcluster.node import RealNode, pod_host_pids
from devtools.localcluster.process import Component

pytestmark = pytest.mark.e2e

CHART = ROOT / "charts" / "gpu-auditor"
HERE = Path(__file__).resolve().parent
RELEASE = "ga"
FULLNAME = f"{RELEASE}-gpu-auditor"
NAMESPACE = "gpu-auditor-system"
PREFIX = "gpu-auditor.io/"
GIB = 2**30
# Device IDs as the NVIDIA device plugin names GPUs: their UUIDs. The fake NVML file uses the
# same UUIDs, as a real node's NVML would.
GPUS = ("GPU-0e2e0000-1111-4222-8333-444455556666", "GPU-0e2e0001-1111-4222-8333-444455556666")
SLEEP = ["python", "-c", "import time; time.sleep(100000)"]


def fake_nvml(gpus: dict[str, list[tuple[int, int]]]) -> str:
    """The fake NVML file (docs/node-agent.md): GPU UUID -> [(pid, bytes)]."""
    return yaml.safe_dump({"gpus": [
        {"index": i, "uuid": uuid_, "model": "NVIDIA H200", "memoryTotalBytes": 141 * GIB,
         "processes": [{"pid": pid, "usedBytes": used} for pid, used in gpus.get(uuid_, [])]}
        for i, uuid_ in enumerate(GPUS)]})


@dataclass
class Release:
    cluster: LocalCluster
    node: RealNode
    image: str
    nvml_file: Path

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.cluster.api_client())

    def pods(self, component: str) -> list[Any]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        return list(self.core().list_namespaced_pod(NAMESPACE, label_selector=selector).items)


@pytest.fixture(scope="module")
def device_plugin(real_node: RealNode) -> Iterator[Component]:
    plugin = Component(
        "deviceplugin",
        real_node.network.wrap(["env", f"PYTHONPATH={HERE}", sys.executable, "-m", "deviceplugin",
                                f"--plugin-dir={real_node.device_plugins_dir}",
                                *(f"--device={g}" for g in GPUS)]),
        real_node.cluster.workdir / "logs" / "deviceplugin.log")
    plugin.start()
    core = client.CoreV1Api(real_node.cluster.api_client())
    try:
        real_node.cluster.wait(
            lambda: _dead(plugin) or (core.read_node(real_node.name).status.allocatable or {})
            .get("nvidia.com/gpu") == str(len(GPUS)), 60, "nvidia.com/gpu allocatable")
        yield plugin
    finally:
        plugin.stop()


def _dead(component: Component) -> bool:
    if not component.running:
        raise AssertionError(f"{component.name} exited:\n{component.log_tail()}")
    return False


@pytest.fixture(scope="module")
def release(real_node: RealNode, device_plugin: Component, image: str) -> Iterator[Release]:
    cluster = real_node.cluster
    nvml_dir = real_node.dir / "fake-nvml"
    nvml_dir.mkdir()
    nvml_file = nvml_dir / "nvml.yaml"
    nvml_file.write_text(fake_nvml({}))
    repository, tag = image.rsplit(":", 1)
    # The fake NVML folder through the chart's own agent.extraVolumes/extraVolumeMounts (its
    # host path is this run's, so it is a values file of this run).
    volumes = real_node.dir / "fake-nvml-values.yaml"
    volumes.write_text(yaml.safe_dump({"agent": {
        "extraVolumes": [{"name": "fake-nvml",
                          "hostPath": {"path": str(nvml_dir), "type": "Directory"}}],
        "extraVolumeMounts": [{"name": "fake-nvml", "mountPath": "/fake", "readOnly": True}],
    }}))
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        "-f", str(HERE / "real-node-values.yaml"), "-f", str(volumes),
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--wait", "--timeout", "5m")
    installed = Release(cluster, real_node, image, nvml_file)
    try:
        # helm --wait counts a DaemonSet of one node ready with none ready (maxUnavailable 1).
        for component in ("agent", "operator"):
            cluster.wait(lambda c=component: _all_ready(installed.pods(c)), 180,
                         f"the {component} pod Ready")
        yield installed
    finally:
        cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False)


def _all_ready(pods: list[Any]) -> bool:
    return bool(pods) and all(
        s.ready for p in pods for s in (p.status.container_statuses or [None]) if s is not None
    ) and all(p.status.container_statuses for p in pods)


@pytest.fixture
def ns(release: Release) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    release.core().create_namespace({"metadata": {"name": name}})
    # The ServiceAccount admission plugin needs the namespace's default account first.
    release.cluster.wait(lambda: release.core().read_namespaced_service_account("default", name),
                         30, f"{name}/default ServiceAccount")
    yield name
    # Frees the node's two fake GPUs for the next test.
    release.core().delete_namespace(name)


def running_pod(release: Release, ns: str, name: str, *, gpus: int = 0,
                command: list[str] | None = None, memory_limit: str | None = None,
                wait: bool = True) -> Any:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if memory_limit:
        limits["memory"] = memory_limit
    core = release.core()
    core.create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": release.image,
                                 "imagePullPolicy": "Never", "command": command or SLEEP,
                                 "resources": {"limits": limits}}]},
    })
    if not wait:
        return None
    return release.cluster.wait(
        lambda: (p := core.read_namespaced_pod(name, ns)).status.phase == "Running" and p,
        120, f"{ns}/{name} Running")


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def annotations_with(release: Release, ns: str, pod: str, key: str,
                     timeout: float = 120) -> dict[str, str]:
    core = release.core()

    def found() -> dict[str, str] | None:
        notes = core.read_namespaced_pod(pod, ns).metadata.annotations or {}
        return notes if f"{PREFIX}{key}" in notes else None

    result: dict[str, str] = release.cluster.wait(found, timeout, f"{ns}/{pod} {key}")
    return result


def our_events(release: Release, ns: str, pod: str) -> list[Any]:
    return [e for e in release.core().list_namespaced_event(ns).items
            if e.involved_object.name == pod and e.source
            and e.source.component == "gpu-auditor"]


# -- the node and the chart ------------------------------------------------------------------


def test_the_node_is_a_real_kubelet_on_containerd(real_node: RealNode) -> None:
    node = client.CoreV1Api(real_node.cluster.api_client()).read_node(real_node.name)
    info = node.status.node_info
    assert info.kubelet_version == "v1.36.3"
    assert info.container_runtime_version == "containerd://2.3.7"
    assert "kwok.x-k8s.io/node" not in (node.metadata.annotations or {})
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["InternalIP"] == real_node.network.node_ip


def test_the_agent_and_the_operator_run_on_the_node_with_our_image(release: Release) -> None:
    for component in ("agent", "operator"):
        (pod,) = release.pods(component)
        assert pod.spec.node_name == release.node.name
        (status,) = pod.status.container_statuses
        assert (status.ready, status.image) == (True, release.image), component
        assert status.container_id.startswith("containerd://")
        # In-cluster config: the kubelet projected a service-account token into the pod.
        projected = [v for v in pod.spec.volumes if v.projected is not None]
        assert any(s.service_account_token for v in projected for s in v.projected.sources)


def test_helm_test_passes(release: Release) -> None:
    # Without --logs: the chart's test pod is deleted when it succeeds (hook-succeeded), and
    # `helm test --logs` then fails to read its log ("pods ... not found") after it passed.
    result = release.cluster.helm("test", RELEASE, "--namespace", NAMESPACE, "--timeout", "3m",
                                  check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"TEST SUITE:     {FULLNAME}-test" in result.stdout
    assert "Phase:          Succeeded" in result.stdout


# -- GPUs: the kubelet's allocation, the agent's attribution, the operator's findings ------


def test_the_agent_attributes_gpu_processes_to_pods_through_the_real_kubelet_and_cgroups(
    release: Release, ns: str,
) -> None:
    trainer = running_pod(release, ns, "trainer", gpus=1)
    notebook = running_pod(release, ns, "notebook")
    pids = {"trainer": pod_host_pids(release.node, trainer)["main"],
            "notebook": pod_host_pids(release.node, notebook)["main"]}
    # What the kubelet allocated, as the container sees it (our device plugin's Allocate set
    # NVIDIA_VISIBLE_DEVICES): independent of the pod-resources API the agent reads.
    (allocated,) = environ(pids["trainer"])["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert allocated in GPUS
    assert "NVIDIA_VISIBLE_DEVICES" not in environ(pids["notebook"])
    other = next(g for g in GPUS if g != allocated)
    # Both processes on the trainer's GPU: the notebook uses a GPU it never requested.
    release.nvml_file.write_text(fake_nvml({allocated: [(pids["trainer"], 20 * GIB),
                                                         (pids["notebook"], 9 * GIB)]}))

    objects = client.CustomObjectsApi(release.cluster.api_client())

    def report_with_both() -> dict[str, Any] | None:
        report = objects.get_cluster_custom_object(
            "gpu-auditor.io", "v1alpha1", "gpunodereports", release.node.name)
        gpus = {g["uuid"]: g for g in report["spec"]["gpus"]}
        pods = {p["pod"]: p for p in gpus[allocated]["pods"] if p["namespace"] == ns}
        return report if set(pods) == {"trainer", "notebook"} else None

    spec = release.cluster.wait(report_with_both, 90, "the report naming both pods")["spec"]
    assert (spec["nvmlUp"], spec["kubeletUp"]) == (True, True)
    gpus = {g["uuid"]: g for g in spec["gpus"]}
    pods = {p["pod"]: p for p in gpus[allocated]["pods"]}
    assert (pods["trainer"]["allocated"], pods["trainer"]["pids"]) == (
        "true", [pids["trainer"]])
    assert (pods["notebook"]["allocated"], pods["notebook"]["pids"]) == (
        "false", [pids["notebook"]])
    assert (pods["trainer"]["container"], pods["trainer"]["bytes"]) == ("main", 20 * GIB)
    assert gpus[other]["pods"] == []
    kinds = {(f["kind"], tuple(sorted(f["pods"]))) for f in spec["findings"]}
    assert ("unrequested-gpu-use", (f"{ns}/notebook",)) in kinds
    assert ("unintended-sharing", (f"{ns}/notebook", f"{ns}/trainer")) in kinds

    # The in-cluster operator reads the report and writes the finding on both pods.
    assert annotations_with(release, ns, "trainer", "gpu-shared-with")[
        f"{PREFIX}gpu-shared-with"] == f"{ns}/notebook"
    assert annotations_with(release, ns, "notebook", "gpu-shared-with")[
        f"{PREFIX}gpu-shared-with"] == f"{ns}/trainer"


def test_the_agents_metrics_label_each_process_allocated_or_not(release: Release, ns: str) -> None:
    trainer = running_pod(release, ns, "solo", gpus=1)
    pid = pod_host_pids(release.node, trainer)["main"]
    (allocated,) = environ(pid)["NVIDIA_VISIBLE_DEVICES"].split(",")
    stray = running_pod(release, ns, "stray")
    stray_pid = pod_host_pids(release.node, stray)["main"]
    release.nvml_file.write_text(fake_nvml({allocated: [(pid, 3 * GIB)],
                                            next(g for g in GPUS if g != allocated): [
                                                (stray_pid, GIB)]}))
    (agent,) = release.pods("agent")
    url = f"http://{agent.status.pod_ip}:9401/metrics"

    def series() -> str | None:
        body = release.node.fetch(url)
        return body if f'namespace="{ns}",node="{release.node.name}",pod="stray"' in body else None

    body = release.cluster.wait(series, 90, "the agent's series for both pods")
    lines = [line for line in body.splitlines()
             if line.startswith("gpu_auditor_container_gpu_memory_bytes{") and ns in line]
    assert any('allocated="true"' in line and 'pod="solo"' in line for line in lines), lines
    assert any('allocated="false"' in line and 'pod="stray"' in line for line in lines), lines


# -- a real OOM kill ---------------------------------------------------------------------------


def test_a_container_over_its_memory_limit_is_oomkilled_and_diagnosed(
    release: Release, ns: str,
) -> None:
    # 1 MiB of filled bytes at a time (resident, unlike zeroed pages) until the kernel kills it.
    hog = ["python", "-c",
           "import time\nheld = []\nwhile True:\n    held.append(b'x' * (1 << 20))\n"]
    running_pod(release, ns, "hog", command=hog, memory_limit="64Mi", wait=False)
    core = release.core()

    def terminated() -> Any:
        statuses = core.read_namespaced_pod("hog", ns).status.container_statuses or []
        return statuses and statuses[0].state.terminated

    state = release.cluster.wait(terminated, 120, "the hog terminated")
    assert (state.reason, state.exit_code) == ("OOMKilled", 137)  # the kubelet's word
    notes = annotations_with(release, ns, "hog", "diagnosis")
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert (evidence["container"], evidence["exitCode"]) == ("main", 137)
    events = release.cluster.wait(lambda: our_events(release, ns, "hog"), 30, "its Event")
    assert [(e.reason, e.type) for e in events] == [("OOMKilled", "Warning")]


# -- a silent leak and the OOM probe's record, through the real kubelet (issues 10, 17) --------

H200_LOGS = ROOT / "evaluation" / "gpu" / "logs"
EMIT = ("import os, sys, time\n"
        "time.sleep(float(os.environ.get('WAIT', '0')))\n"
        "if os.environ.get('RECORD'):\n"
        "    with open('/dev/termination-log', 'w') as f:\n"
        "        f.write(os.environ['RECORD'])\n"
        "sys.stderr.write(os.environ['OOM_LOG'])\n"
        "sys.exit(1)\n")
"""A job's end as our image can play it: the probe's record written where the probe writes it
(the container's termination-message path), the job's OOM traceback on stderr, exit 1."""


def failing_job(release: Release, ns: str, name: str, env: dict[str, str], *,
                gpus: int = 0) -> Any:
    core = release.core()
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    core.create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": release.image,
                                 "imagePullPolicy": "Never", "command": ["python", "-c", EMIT],
                                 "env": [{"name": k, "value": v} for k, v in env.items()],
                                 "resources": {"limits": limits}}]},
    })
    return release.cluster.wait(
        lambda: (p := core.read_namespaced_pod(name, ns)).status.phase in ("Running", "Failed")
        and p, 120, f"{ns}/{name} started")


def test_a_probe_record_written_to_the_termination_log_builds_the_diagnosis(
    release: Release, ns: str,
) -> None:
    """The record is a real one, captured on the H200 (frag_pinned); the log is that job's log
    without the probe's own stderr line, so the record can only come from the message."""
    record = (H200_LOGS / "probe" / "frag_pinned__baseline.probe").read_text().strip()
    log = "\n".join(line for line in (H200_LOGS / "probe" / "frag_pinned__baseline.log")
                    .read_text().splitlines() if "gpu-auditor-probe-record" not in line) + "\n"
    failing_job(release, ns, "probed", {"RECORD": record, "OOM_LOG": log})
    notes = annotations_with(release, ns, "probed", "diagnosis")
    state = release.core().read_namespaced_pod("probed", ns).status.container_statuses[0]
    assert state.state.terminated.message == record  # the kubelet copied the file
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["source"] == "log"
    assert evidence["probe"] == {"source": "termination-message", "used": True, "status": "ok",
                                 "verdict": "fragmentation", "inferenceKind": "fragmentation",
                                 "disagrees": False}


def test_a_job_that_leaks_silently_is_a_leak_from_the_agents_series(
    release: Release, ns: str,
) -> None:
    """The agent samples the job's host pid (the fake NVML file says its memory rises 9 GiB
    every 2 s), publishes its series, and the in-cluster operator reads it when the job dies of
    a CUDA OOM whose log (a real H200 one) prints no memory figure and shows a full GPU."""
    log = (H200_LOGS / "capacity_batch__baseline.log").read_text()
    pod = failing_job(release, ns, "leaky", {"WAIT": "36", "OOM_LOG": log}, gpus=1)
    pid = pod_host_pids(release.node, pod)["main"]
    (allocated,) = environ(pid)["NVIDIA_VISIBLE_DEVICES"].split(",")
    for step in range(14):
        release.nvml_file.write_text(fake_nvml({allocated: [(pid, (10 + 9 * step) * GIB)]}))
        time.sleep(2.2)
    notes = annotations_with(release, ns, "leaky", "diagnosis", timeout=120)
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert notes[f"{PREFIX}diagnosis"] == "leak", (notes[f"{PREFIX}summary"], evidence)
    assert evidence["memorySeriesPoints"] >= 5
    assert evidence["growth"]["source"] == "samples"
    # at least the 5 points above, 9 GiB apart; how many more the agent sampled depends on the
    # machine's load (a fresh-clone CI run here saw 63 GiB from its first to its last point)
    assert evidence["growth"]["lastBytes"] - evidence["growth"]["firstBytes"] >= 4 * 9 * GIB
