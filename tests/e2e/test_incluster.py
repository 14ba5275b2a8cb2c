"""Tier 2: the operator and the agent containers, as the chart runs them (command, args, user,
read-only root, dropped capabilities, memory limit: taken from `helm template`), talk to the
local API server with in-cluster config only: a token of the chart's ServiceAccount from the
TokenRequest API and the cluster's CA, mounted where the kubelet mounts them, and
KUBERNETES_SERVICE_HOST/PORT. The chart's ServiceAccounts and RBAC are applied as rendered.

Containers share the host's network (podman --network host) and reach the API server where
the `kubernetes` Service's endpoint is (its address, port 443); tier 3 (test_real_node.py) goes
through the Service itself. No name resolves to the API server here: kopf's own
service-account login would dial https://kubernetes.default.svc whatever
KUBERNETES_SERVICE_HOST says (kopf 1.45, piggybacking.login_with_service_account), so these
containers prove that the operator's login (controller/login.py: kopf gets our credentials)
reaches the API server where the variables say.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import ROOT, Podman, plan_from_pod_template
from kubernetes import client

from devtools.localcluster import LocalCluster, cri
from devtools.localcluster.cluster import http_ok
from devtools.localcluster.components import install_crds
from devtools.localcluster.process import free_port

pytestmark = pytest.mark.e2e

CHART = ROOT / "charts" / "gpu-auditor"
RELEASE = "e2e"
NAMESPACE = "gpu-auditor"
FULLNAME = f"{RELEASE}-gpu-auditor"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
FAKE_NODE = ROOT / "examples" / "fake-node"
FAKE_NODE_NAME = "gpu-node-1"  # the name in examples/fake-node/pods.yaml


def render_chart(cluster: LocalCluster, *values: str) -> list[dict[str, Any]]:
    out = cluster.helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                       *values).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def service_account_folder(cluster: LocalCluster, account: str, folder: Path) -> Path:
    """token, ca.crt and namespace as the kubelet projects them (files 0644 in a 0755 folder):
    the token from the TokenRequest API, for the API server's own audience."""
    assert cluster.pki is not None
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = client.CoreV1Api(cluster.api_client()).create_namespaced_service_account_token(
        account, NAMESPACE, request).status.token
    folder.mkdir(parents=True)
    (folder / "token").write_text(token)
    shutil.copyfile(cluster.pki.ca_cert, folder / "ca.crt")
    (folder / "namespace").write_text(NAMESPACE)
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


def in_cluster_options(cluster: LocalCluster, sa_folder: Path) -> list[str]:
    return ["--network", "host",
            "--env", f"KUBERNETES_SERVICE_HOST={cluster.address}",
            "--env", f"KUBERNETES_SERVICE_PORT={cluster.api_port}",
            "--volume", f"{sa_folder}:{SA_MOUNT}:ro"]


@dataclass
class Deployed:
    cluster: LocalCluster
    podman: Podman
    operator: str
    agent: str
    agent_port: int
    kwok_node: str
    workdir: Path

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.cluster.api_client())


@pytest.fixture(scope="module")
def deployed(e2e_cluster: LocalCluster, podman: Podman,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    cluster = e2e_cluster
    workdir = tmp_path_factory.mktemp("incluster")
    install_crds(cluster)
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    liveness, metrics, agent_port = free_port(), free_port(), free_port()
    docs = render_chart(
        cluster,
        # Host network: ports of this run, not the chart's fixed defaults.
        "--set", f"operator.livenessPort={liveness}", "--set", f"operator.metricsPort={metrics}",
        "--set", f"agent.port={agent_port}",
        # The agent reads the fake node (no GPU here); its pods come from the fake pods file.
        "--set", "agent.extraArgs={--nvml-fake=/fake/nvml.yaml,--proc-root=/fake/proc,"
                 "--interval=1,--report-min-interval=1}")
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            cluster.apply_yaml(yaml.safe_dump(doc))

    operator_plan = plan_from_pod_template(
        one(docs, "Deployment", f"{FULLNAME}-operator")["spec"]["template"], fields={})
    operator = podman.start(
        f"e2e-operator-{uuid.uuid4().hex[:6]}", operator_plan,
        *in_cluster_options(cluster, service_account_folder(
            cluster, f"{FULLNAME}-operator", workdir / "operator-sa")))
    agent_plan = plan_from_pod_template(
        one(docs, "DaemonSet", f"{FULLNAME}-agent")["spec"]["template"],
        fields={"spec.nodeName": FAKE_NODE_NAME},
        # The kubelet's socket folder: absent here (the fake pods file stands for the kubelet).
        host_paths={"/var/lib/kubelet/pod-resources": str(workdir)},
        extra_mounts=[(str(FAKE_NODE), "/fake")])
    agent = podman.start(
        f"e2e-agent-{uuid.uuid4().hex[:6]}", agent_plan,
        *in_cluster_options(cluster, service_account_folder(
            cluster, f"{FULLNAME}-agent", workdir / "agent-sa")))

    for name, url in ((operator, f"http://127.0.0.1:{liveness}/healthz"),
                      (agent, f"http://127.0.0.1:{agent_port}/healthz")):
        cluster.wait(lambda url=url, name=name: http_ok(url) or _dead(podman, name), 90,
                     f"{name} /healthz")
        assert podman.running(name), podman.logs(name)

    kwok_node = f"e2e-kwok-{uuid.uuid4().hex[:6]}"
    cluster.create_node(kwok_node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    yield Deployed(cluster, podman, operator, agent, agent_port, kwok_node, workdir)
    for name in (operator, agent):
        print(f"--- {name} log ---\n{podman.logs(name)[-6000:]}")
        podman.cmd("rm", "--force", "--time", "5", name, check=False)
    core.delete_node(kwok_node)


def _dead(podman: Podman, name: str) -> bool:
    if not podman.running(name):
        raise AssertionError(f"{name} exited:\n{podman.logs(name)[-4000:]}")
    return False


@pytest.fixture
def ns(deployed: Deployed) -> str:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    deployed.core().create_namespace({"metadata": {"name": name}})
    return name


def kwok_failing_pod(deployed: Deployed, ns: str, name: str, *, reason: str, exit_code: int,
                     memory_limit: str | None = None) -> None:
    """A pod on the kwok GPU node that kwok's chaos stage terminates with `reason`."""
    container: dict[str, Any] = {"name": "main", "image": "trainer:latest",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    if memory_limit:
        container["resources"]["limits"]["memory"] = memory_limit
    deployed.core().create_namespaced_pod(ns, {
        "metadata": {"name": name, "labels": {CHAOS: "true"},
                     "annotations": {f"{CHAOS}/reason": reason,
                                     f"{CHAOS}/exit-code": str(exit_code),
                                     f"{CHAOS}/delay": "1500ms"}},
        "spec": {"nodeName": deployed.kwok_node, "containers": [container],
                 "restartPolicy": "Never"},
    })


def annotations_when_diagnosed(deployed: Deployed, ns: str, pod: str) -> dict[str, str]:
    core = deployed.core()

    def diagnosed() -> dict[str, str] | None:
        found = core.read_namespaced_pod(pod, ns).metadata.annotations or {}
        return found if f"{PREFIX}diagnosis" in found else None

    result: dict[str, str] = deployed.cluster.wait(diagnosed, 90, f"{ns}/{pod} diagnosed")
    return result


def our_events(deployed: Deployed, ns: str, pod: str) -> list[Any]:
    return [e for e in deployed.core().list_namespaced_event(ns).items
            if e.involved_object.name == pod and e.source
            and e.source.component == "gpu-auditor"]


# -- the operator --------------------------------------------------------------------------


def test_the_operator_container_has_no_credentials_but_its_service_account(
    deployed: Deployed,
) -> None:
    info = json.loads(deployed.podman.cmd("inspect", deployed.operator).stdout)[0]
    env = dict(e.split("=", 1) for e in info["Config"]["Env"])
    assert "KUBECONFIG" not in env
    assert info["Config"]["User"] == "65532:65532"
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert mounts[SA_MOUNT]["RW"] is False


def test_kopf_reaches_the_api_server_where_kubernetes_service_host_says(
    deployed: Deployed, ns: str,
) -> None:
    # The name kopf's built-in login would dial does not resolve in the operator's container.
    probe = deployed.podman.cmd(
        "exec", deployed.operator, "python", "-c",
        "import socket, sys\n"
        "try:\n    socket.getaddrinfo('kubernetes.default.svc', 443)\n"
        "except OSError:\n    sys.exit(3)\n", check=False)
    assert probe.returncode == 3, (probe.stdout, probe.stderr)
    info = json.loads(deployed.podman.cmd("inspect", deployed.operator).stdout)[0]
    assert not info["HostConfig"].get("ExtraHosts"), "no name is mapped to the API server"
    # Yet kopf's watch delivers a new pod's failure: its login used KUBERNETES_SERVICE_HOST/PORT.
    kwok_failing_pod(deployed, ns, "watched", reason="OOMKilled", exit_code=137)
    assert annotations_when_diagnosed(deployed, ns, "watched")[f"{PREFIX}diagnosis"] == (
        "host-oom-killed")
    log = deployed.podman.logs(deployed.operator)
    assert "kubernetes.default.svc" not in log, log[-4000:]


def test_an_oomkilled_kwok_pod_is_diagnosed_by_the_operator_container(
    deployed: Deployed, ns: str,
) -> None:
    kwok_failing_pod(deployed, ns, "etl", reason="OOMKilled", exit_code=137, memory_limit="2Gi")
    notes = annotations_when_diagnosed(deployed, ns, "etl")
    assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert (json.loads(notes[f"{PREFIX}evidence"])["exitCode"]) == 137
    events = deployed.cluster.wait(lambda: our_events(deployed, ns, "etl"), 30, "its Event")
    assert [(e.reason, e.type) for e in events] == [("OOMKilled", "Warning")]


def test_a_cuda_oom_is_read_from_the_pods_log_with_the_charts_rbac(
    deployed: Deployed, ns: str, tmp_path: Path,
) -> None:
    log = tmp_path / "trainer.log"
    log.write_bytes(cri((ROOT / "examples" / "logs" / "fragmentation.log").read_text()))
    kwok_failing_pod(deployed, ns, "trainer", reason="Error", exit_code=1)
    deployed.cluster.serve_logs(ns, "trainer", current=log)
    notes = annotations_when_diagnosed(deployed, ns, "trainer")
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert json.loads(notes[f"{PREFIX}evidence"])["source"] == "log"


# -- the agent -----------------------------------------------------------------------------


def test_the_agent_container_publishes_its_node_report(deployed: Deployed) -> None:
    objects = client.CustomObjectsApi(deployed.cluster.api_client())

    def report() -> dict[str, Any]:
        return dict(objects.get_cluster_custom_object(
            "gpu-auditor.io", "v1alpha1", "gpunodereports", FAKE_NODE_NAME))

    spec = deployed.cluster.wait(report, 60, "the agent's GPUNodeReport")["spec"]
    assert (spec["nodeName"], spec["nvmlUp"]) == (FAKE_NODE_NAME, True)
    assert [g["uuid"] for g in spec["gpus"]] == [
        "GPU-6f1c2a4e-0b1d-4c37-9a51-2d8e7f3b9c10", "GPU-b83e9d27-5a64-4f0e-8c12-7e4a1d6f2b95"]
    kinds = {(f["kind"], tuple(f["pods"])) for f in spec["findings"]}
    assert ("unrequested-gpu-use", ("ml/notebook-1",)) in kinds


def test_the_agent_container_serves_its_metrics(deployed: Deployed) -> None:
    import urllib.request

    url = f"http://127.0.0.1:{deployed.agent_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    assert f'gpu_auditor_agent_nvml_up{{node="{FAKE_NODE_NAME}"}} 1' in body
    assert 'allocated="false",container="jupyter"' in body
