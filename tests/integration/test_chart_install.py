"""`helm install` of charts/gpu-auditor into the real local control plane (kube-apiserver,
kube-controller-manager, kube-scheduler, kwok): the objects it makes, where the DaemonSet's pods
land, and what the chart's ServiceAccounts may and may not do, with their own tokens.

No container runs (kwok only plays the pod lifecycle), so this pins the objects, scheduling and
RBAC, not the processes. The chart is installed with its default values; the RuntimeClass
`nvidia` it names by default is created first, as the NVIDIA GPU Operator would (the API server
rejects pods whose RuntimeClass does not exist).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpu_auditor.localcluster import LocalCluster

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpu-auditor"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass
class Install:
    cluster: LocalCluster
    namespace: str
    release: str
    gpu_nodes: list[str]
    cpu_node: str
    workload_namespace: str

    @property
    def fullname(self) -> str:
        return f"{self.release}-gpu-auditor"

    def api(self) -> client.ApiClient:
        return self.cluster.api_client()

    def token_client(self, service_account: str) -> client.ApiClient:
        """An API client that authenticates only with a fresh token of `service_account`."""
        core = client.CoreV1Api(self.api())
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
        token = core.create_namespaced_service_account_token(
            service_account, self.namespace, request).status.token
        admin = self.api().configuration
        config = client.Configuration()
        config.host = admin.host
        config.ssl_ca_cert = admin.ssl_ca_cert
        config.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(config)


@pytest.fixture(scope="module")
def install(kwok_cluster: LocalCluster) -> Iterator[Install]:
    suffix = uuid.uuid4().hex[:6]
    gpu_nodes = [f"chart-gpu-{suffix}-{i}" for i in range(2)]
    cpu_node = f"chart-cpu-{suffix}"
    for name in gpu_nodes:
        kwok_cluster.create_node(name, gpus=8, labels={"nvidia.com/gpu.present": "true"},
                                 taints=[GPU_TAINT])
    kwok_cluster.create_node(cpu_node)
    api = kwok_cluster.api_client()
    node_api, core = client.NodeV1Api(api), client.CoreV1Api(api)
    created_runtime_class = False
    try:
        node_api.create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
        created_runtime_class = True
    except ApiException as err:
        if err.status != 409:
            raise
    workload_namespace = f"chart-ml-{suffix}"
    core.create_namespace({"metadata": {"name": workload_namespace}})
    result = Install(kwok_cluster, f"chart-{suffix}", f"ga-{suffix}", gpu_nodes, cpu_node,
                     workload_namespace)
    kwok_cluster.helm("install", result.release, str(CHART), "--namespace", result.namespace,
                      "--create-namespace")
    try:
        yield result
    finally:
        kwok_cluster.helm("uninstall", result.release, "--namespace", result.namespace,
                          check=False)
        for ns in (result.namespace, workload_namespace):
            core.delete_namespace(ns)
        for name in [*gpu_nodes, cpu_node]:
            core.delete_node(name)
        if created_runtime_class:
            node_api.delete_runtime_class("nvidia")


def _pods(install: Install, component: str) -> list[Any]:
    core = client.CoreV1Api(install.api())
    selector = (f"app.kubernetes.io/instance={install.release},"
                f"app.kubernetes.io/component={component}")
    return list(core.list_namespaced_pod(install.namespace, label_selector=selector).items)


def _running(pods: list[Any]) -> list[Any]:
    return [p for p in pods if p.status.phase == "Running"]


# -- workloads ---------------------------------------------------------------------------------

def test_the_agent_runs_on_every_gpu_node_despite_the_gpu_taint(install: Install) -> None:
    def on_every_gpu_node() -> bool:
        nodes = {p.spec.node_name for p in _running(_pods(install, "agent"))}
        return set(install.gpu_nodes) <= nodes

    install.cluster.wait(on_every_gpu_node, 60, "an agent pod Running on each GPU node")


def test_the_agent_stays_off_nodes_without_a_gpu(install: Install) -> None:
    install.cluster.wait(lambda: len(_pods(install, "agent")) >= 2, 60, "agent pods")
    core = client.CoreV1Api(install.api())
    for pod in _pods(install, "agent"):
        assert pod.spec.node_name != install.cpu_node
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels.get("nvidia.com/gpu.present") == "true", pod.spec.node_name


def test_agent_pods_carry_the_node_name_and_the_runtime_class(install: Install) -> None:
    install.cluster.wait(lambda: _pods(install, "agent"), 60, "agent pods")
    pod = _pods(install, "agent")[0]
    assert pod.spec.runtime_class_name == "nvidia"
    assert pod.spec.host_pid is True
    assert pod.spec.priority_class_name == "system-node-critical"
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["NODE_NAME"].value_from.field_ref.field_path == "spec.nodeName"


def test_the_operator_deployment_gets_its_one_pod(install: Install) -> None:
    apps = client.AppsV1Api(install.api())
    name = f"{install.fullname}-operator"
    install.cluster.wait(
        lambda: apps.read_namespaced_deployment(name, install.namespace).status.available_replicas
        == 1, 60, f"deployment {name} available")
    (pod,) = _running(_pods(install, "operator"))
    assert pod.spec.service_account_name == name
    assert pod.spec.containers[0].command == ["gpu-auditor-operator"]


def test_the_chart_creates_its_accounts_roles_services_and_the_crd(install: Install) -> None:
    api = install.api()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for component in ("agent", "operator"):
        name = f"{install.fullname}-{component}"
        core.read_namespaced_service_account(name, install.namespace)
        core.read_namespaced_service(name, install.namespace)
        rbac.read_cluster_role(name)
        binding = rbac.read_cluster_role_binding(name)
        assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
            ("ServiceAccount", name, install.namespace)]
    install.cluster.wait_for_crd("gpunodereports.gpu-auditor.io")


# -- the operator's token: its job, and nothing more ------------------------------------------

def _allowed(api: client.ApiClient, verb: str, resource: str, *, group: str = "",
             namespace: str | None = None, subresource: str | None = None) -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, namespace=namespace,
            subresource=subresource)))
    result = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status.allowed)


def _forbidden(call: Any) -> bool:
    try:
        call()
    except ApiException as err:
        return err.status == 403
    return False


@pytest.fixture(scope="module")
def operator_api(install: Install) -> client.ApiClient:
    return install.token_client(f"{install.fullname}-operator")


@pytest.fixture(scope="module")
def agent_api(install: Install) -> client.ApiClient:
    return install.token_client(f"{install.fullname}-agent")


@pytest.fixture(scope="module")
def victim_pod(install: Install) -> str:
    core = client.CoreV1Api(install.api())
    core.create_namespaced_pod(install.workload_namespace, {
        "metadata": {"name": "trainer-0"},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:latest"}]},
    })
    return "trainer-0"


def test_operator_token_lists_and_annotates_pods(
    install: Install, operator_api: client.ApiClient, victim_pod: str,
) -> None:
    core = client.CoreV1Api(operator_api)
    names = {p.metadata.name for p in core.list_pod_for_all_namespaces().items}
    assert victim_pod in names
    core.patch_namespaced_pod(victim_pod, install.workload_namespace, {
        "metadata": {"annotations": {"gpu-auditor.io/diagnosis": "fragmentation"}}})
    pod = client.CoreV1Api(install.api()).read_namespaced_pod(victim_pod,
                                                              install.workload_namespace)
    assert pod.metadata.annotations["gpu-auditor.io/diagnosis"] == "fragmentation"


def test_operator_token_posts_events_through_both_events_apis(
    install: Install, operator_api: client.ApiClient, victim_pod: str,
) -> None:
    ns = install.workload_namespace
    involved = client.V1ObjectReference(kind="Pod", name=victim_pod, namespace=ns,
                                        api_version="v1")
    client.CoreV1Api(operator_api).create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{victim_pod}-"), involved_object=involved,
        reason="CUDAOutOfMemory", message="diagnosed: fragmentation", type="Warning"))
    client.EventsV1Api(operator_api).create_namespaced_event(ns, client.EventsV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{victim_pod}-"), regarding=involved,
        reason="CUDAOutOfMemory", note="diagnosed: fragmentation", type="Warning",
        action="Diagnose", reporting_controller="gpu-auditor.io/operator",
        reporting_instance="gpu-auditor-operator", event_time=_now()))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_operator_token_reads_reports_namespaces_and_crds(
    install: Install, operator_api: client.ApiClient,
) -> None:
    client.CustomObjectsApi(operator_api).list_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports")
    client.CoreV1Api(operator_api).list_namespace()
    client.ApiextensionsV1Api(operator_api).list_custom_resource_definition()


@pytest.mark.parametrize("verb, resource, group, subresource", [
    ("get", "pods", "", "log"),
    ("get", "jobs", "batch", None),
    ("patch", "jobs", "batch", None),
    ("get", "replicasets", "apps", None),
    ("patch", "deployments", "apps", None),
    ("patch", "statefulsets", "apps", None),
    ("patch", "daemonsets", "apps", None),
    ("watch", "gpunodereports", "gpu-auditor.io", None),
    ("watch", "customresourcedefinitions", "apiextensions.k8s.io", None),
])
def test_operator_token_may_do_its_job(
    install: Install, operator_api: client.ApiClient, verb: str, resource: str, group: str,
    subresource: str | None,
) -> None:
    namespace = None if resource in ("gpunodereports", "customresourcedefinitions") \
        else install.workload_namespace
    assert _allowed(operator_api, verb, resource, group=group, namespace=namespace,
                    subresource=subresource)


def test_operator_token_may_not_delete_pods_or_read_secrets(
    install: Install, operator_api: client.ApiClient, victim_pod: str,
) -> None:
    core = client.CoreV1Api(operator_api)
    ns = install.workload_namespace
    assert _forbidden(lambda: core.delete_namespaced_pod(victim_pod, ns))
    assert _forbidden(lambda: core.list_namespaced_secret(ns))
    assert _forbidden(lambda: core.create_namespaced_pod(ns, {
        "metadata": {"name": "sneaky"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}))
    assert _forbidden(lambda: core.patch_node(install.gpu_nodes[0],
                                              {"metadata": {"labels": {"x": "y"}}}))
    assert _forbidden(lambda: client.CustomObjectsApi(operator_api).create_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports",
        {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
         "metadata": {"name": install.gpu_nodes[0]}, "spec": {}}))
    for verb, resource, group in [("delete", "deployments", "apps"), ("create", "jobs", "batch"),
                                  ("update", "pods", ""), ("get", "configmaps", "")]:
        assert not _allowed(operator_api, verb, resource, group=group, namespace=ns), (
            verb, resource)


# -- the agent's token ---------------------------------------------------------------------------

def test_agent_token_publishes_its_node_report_and_reads_pods_and_its_node(
    install: Install, agent_api: client.ApiClient,
) -> None:
    node = install.gpu_nodes[0]
    objects = client.CustomObjectsApi(agent_api)
    body = {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": node},
            "spec": {"nodeName": node, "generatedAt": "2026-11-29T19:00:00Z",
                     "sharingStrategy": "none", "replicas": 1, "nvmlUp": True,
                     "kubeletUp": True, "gpus": [], "findings": []}}
    try:
        objects.create_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", body)
        objects.patch_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", node,
                                            {"spec": {"nvmlUp": False}})
        core = client.CoreV1Api(agent_api)
        core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        assert core.read_node(node).metadata.name == node
    finally:
        client.CustomObjectsApi(install.api()).delete_cluster_custom_object(
            "gpu-auditor.io", "v1alpha1", "gpunodereports", node)


def test_agent_token_may_not_touch_pods_secrets_or_delete_reports(
    install: Install, agent_api: client.ApiClient, victim_pod: str,
) -> None:
    core = client.CoreV1Api(agent_api)
    ns = install.workload_namespace
    assert _forbidden(lambda: core.patch_namespaced_pod(
        victim_pod, ns, {"metadata": {"annotations": {"x": "y"}}}))
    assert _forbidden(lambda: core.list_namespaced_secret(ns))
    assert _forbidden(lambda: core.list_node())
    assert not _allowed(agent_api, "delete", "gpunodereports", group="gpu-auditor.io")
    assert not _allowed(agent_api, "get", "pods", subresource="log", namespace=ns)


# -- NOTES.txt -----------------------------------------------------------------------------------

def test_the_install_notes_say_where_to_look(install: Install) -> None:
    notes = install.cluster.helm("get", "notes", install.release, "--namespace",
                                 install.namespace).stdout
    assert "kubectl get gpunodereports" in notes
    assert "gpu-auditor.io/" in notes  # where the diagnoses appear
    assert "serviceMonitor.enabled=true" in notes
    assert f"helm test {install.release}" in notes


@pytest.fixture(scope="module")
def monitoring_crds(install: Install) -> Iterator[None]:
    """Stand-ins for the Prometheus Operator's CRDs (names and kinds only, no schema), so the
    API server maps ServiceMonitor, PodMonitor and PrometheusRule. Not a check of their fields."""
    ext = client.ApiextensionsV1Api(install.api())
    created = []
    for kind, plural in (("ServiceMonitor", "servicemonitors"), ("PodMonitor", "podmonitors"),
                         ("PrometheusRule", "prometheusrules")):
        name = f"{plural}.monitoring.coreos.com"
        try:
            ext.create_custom_resource_definition({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                         "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                                   "listKind": f"{kind}List"},
                         "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                             "openAPIV3Schema": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": True}}}]},
            })
            created.append(name)
        except ApiException as err:
            if err.status != 409:
                raise
        install.cluster.wait_for_crd(name)
    yield
    for name in created:
        ext.delete_custom_resource_definition(name)


@pytest.mark.parametrize("values_file", sorted(p.name for p in (CHART / "ci").glob("*.yaml")))
def test_every_ci_values_file_renders_its_notes_against_the_cluster(
    install: Install, monitoring_crds: None, values_file: str,
) -> None:
    result = install.cluster.helm(
        "install", f"dry-{install.release}", str(CHART), "--namespace", install.namespace,
        "--dry-run=server", "-f", str(CHART / "ci" / values_file), check=False)
    assert result.returncode == 0, result.stderr
    assert "NOTES:" in result.stdout
