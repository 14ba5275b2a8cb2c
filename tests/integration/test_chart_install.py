"""`helm install` of charts/gpu-auditor into the real local control plane (kube-apiserver,
kube-controller-manager, kube-scheduler, kwok): the objects it makes, where the DaemonSet's pods
land, and what the chart's ServiceAccounts may and may not do, with their own tokens.

No container runs (kwok only plays the pod lifecycle), so this pins the objects, scheduling,
admission and RBAC, not the processes. Two releases: one with the default values, in a namespace
labelled with the `privileged` Pod Security level as docs/install.md says, and one "locked down"
(the operator watching one namespace, the agent without hostPID, non-root, behind
kube-rbac-proxy, without reports). The RuntimeClass `nvidia` the chart names by default is
created first, as the NVIDIA GPU Operator would.

The grants are held to docs/install.md's table "What each component calls" (apicalls.py): each
call of the table is made with the account's own token and must not be refused, every other verb
on those resources must be, and the server's own list of what the account may do
(SelfSubjectRulesReview) must be the table's, no more.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.localcluster import LocalCluster, cri
from devtools.localcluster.components import OperatorProcess
from tests.unit.chart.apicalls import (
    Expected,
    Triple,
    chart_values,
    expected_rbac,
    granted,
    read_table,
)

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpu-auditor"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged",
              "pod-security.kubernetes.io/enforce-version": "latest"}
LOCKED_DOWN_SETS = {"agent.hostPID": False, "agent.runAsUser": 10001,
                    "agent.podResourcesSocketGroup": 2000, "agent.report": False,
                    "agent.metricsProxy.enabled": True, "operator.metricsProxy.enabled": True,
                    "tests.enabled": False}


@dataclass
class Install:
    cluster: LocalCluster
    namespace: str
    release: str
    values: dict[str, Any]
    gpu_nodes: list[str]
    cpu_node: str
    workload_namespace: str

    @property
    def fullname(self) -> str:
        return f"{self.release}-gpu-auditor"

    def api(self) -> client.ApiClient:
        return self.cluster.api_client()

    def expected(self) -> Expected:
        return expected_rbac(read_table(), self.values, self.namespace)

    def granted(self, account: str, namespace: str | None) -> set[Triple]:
        return granted(account, namespace, self.expected(), self.values)

    def token(self, account: str, *, bound_pod: Any = None) -> str:
        """A fresh token of the chart's `account` ServiceAccount ("agent" or "operator"),
        bound to `bound_pod` (a V1Pod) when given, as the kubelet's projected tokens are."""
        bound = None if bound_pod is None else client.V1BoundObjectReference(
            kind="Pod", api_version="v1", name=bound_pod.metadata.name,
            uid=bound_pod.metadata.uid)
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=600, bound_object_ref=bound))
        return str(client.CoreV1Api(self.api()).create_namespaced_service_account_token(
            f"{self.fullname}-{account}", self.namespace, request).status.token)

    def token_client(self, account: str) -> client.ApiClient:
        """An API client that authenticates only with a fresh token of `account`."""
        return _client_for(self, self.token(account))


def _client_for(install: Install, token: str) -> client.ApiClient:
    admin = install.api().configuration
    config = client.Configuration()
    config.host = admin.host
    config.ssl_ca_cert = admin.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(config)


def _create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str]) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": labels}})


def _helm_sets(sets: dict[str, Any]) -> list[str]:
    args = []
    for key, value in sets.items():
        text = ("{" + ",".join(value) + "}" if isinstance(value, list)
                else str(value).lower() if isinstance(value, bool) else str(value))
        args += ["--set", f"{key}={text}"]
    return args


@pytest.fixture(scope="module")
def cluster_setup(kwok_cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:6]
    gpu_nodes = [f"chart-gpu-{suffix}-{i}" for i in range(2)]
    cpu_node = f"chart-cpu-{suffix}"
    for name in gpu_nodes:
        kwok_cluster.create_node(name, gpus=8, labels={"nvidia.com/gpu.present": "true"},
                                 taints=[GPU_TAINT])
    kwok_cluster.create_node(cpu_node)
    api = kwok_cluster.api_client()
    node_api, core = client.NodeV1Api(api), client.CoreV1Api(api)
    # A kubelet reports its ephemeral storage; kwok's nodes have none until told, and the
    # chart's containers request some.
    storage = {"ephemeral-storage": "100Gi"}
    for name in [*gpu_nodes, cpu_node]:
        core.patch_node_status(name, {"status": {"capacity": storage, "allocatable": storage}})
    created_runtime_class = False
    try:
        node_api.create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
        created_runtime_class = True
    except ApiException as err:
        if err.status != 409:
            raise
    workload_namespace = f"chart-ml-{suffix}"
    _create_namespace(core, workload_namespace, {})
    try:
        yield {"suffix": suffix, "gpu_nodes": gpu_nodes, "cpu_node": cpu_node,
               "workload_namespace": workload_namespace}
    finally:
        core.delete_namespace(workload_namespace)
        for name in [*gpu_nodes, cpu_node]:
            core.delete_node(name)
        if created_runtime_class:
            node_api.delete_runtime_class("nvidia")


def _install(kwok_cluster: LocalCluster, setup: dict[str, Any], prefix: str,
             sets: dict[str, Any]) -> Iterator[Install]:
    suffix = setup["suffix"]
    result = Install(kwok_cluster, f"{prefix}-{suffix}", f"{prefix}-{suffix}",
                     chart_values(sets=sets), setup["gpu_nodes"], setup["cpu_node"],
                     setup["workload_namespace"])
    core = client.CoreV1Api(kwok_cluster.api_client())
    # As docs/install.md says: the namespace first, labelled for the agent's privileges.
    _create_namespace(core, result.namespace, PRIVILEGED)
    kwok_cluster.helm("install", result.release, str(CHART), "--namespace", result.namespace,
                      *_helm_sets(sets))
    try:
        yield result
    finally:
        kwok_cluster.helm("uninstall", result.release, "--namespace", result.namespace,
                          check=False)
        core.delete_namespace(result.namespace)


@pytest.fixture(scope="module")
def install(kwok_cluster: LocalCluster, cluster_setup: dict[str, Any]) -> Iterator[Install]:
    yield from _install(kwok_cluster, cluster_setup, "chart", {})


@pytest.fixture(scope="module")
def locked_down(kwok_cluster: LocalCluster, cluster_setup: dict[str, Any],
                install: Install) -> Iterator[Install]:
    sets = {**LOCKED_DOWN_SETS, "operator.namespaces": [cluster_setup["workload_namespace"]]}
    yield from _install(kwok_cluster, cluster_setup, "locked", sets)


def _pods(install: Install, component: str) -> list[Any]:
    core = client.CoreV1Api(install.api())
    selector = (f"app.kubernetes.io/instance={install.release},"
                f"app.kubernetes.io/component={component}")
    return list(core.list_namespaced_pod(install.namespace, label_selector=selector).items)


def _running(pods: list[Any]) -> list[Any]:
    return [p for p in pods if p.status.phase == "Running"]


def _agent_pod_on(install: Install, node: str) -> Any:
    def found() -> Any:
        return next((p for p in _running(_pods(install, "agent")) if p.spec.node_name == node),
                    None)

    return install.cluster.wait(found, 60, f"an agent pod Running on {node}")


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


def test_the_locked_down_agent_runs_without_host_pid_as_non_root_behind_the_proxy(
    locked_down: Install,
) -> None:
    pod = _agent_pod_on(locked_down, locked_down.gpu_nodes[0])
    assert not pod.spec.host_pid
    containers = {c.name: c for c in pod.spec.containers}
    agent = containers["agent"]
    assert "--proc-root=/host/proc" in agent.args and "--bind-address=127.0.0.1" in agent.args
    assert agent.security_context.run_as_user == 10001
    assert agent.security_context.run_as_non_root is True
    assert pod.spec.security_context.supplemental_groups == [2000]
    (proc,) = [m for m in agent.volume_mounts if m.mount_path == "/host/proc"]
    assert proc.read_only is True
    assert "kube-rbac-proxy" in containers


def test_the_locked_down_operator_serves_metrics_on_loopback_behind_the_proxy(
    locked_down: Install,
) -> None:
    def running() -> Any:
        return next(iter(_running(_pods(locked_down, "operator"))), None)

    pod = locked_down.cluster.wait(running, 60, "the locked-down operator pod Running")
    containers = {c.name: c for c in pod.spec.containers}
    assert "--metrics-bind-address=127.0.0.1" in containers["operator"].args
    assert [p.name for p in containers["kube-rbac-proxy"].ports] == ["metrics", "proxy-health"]


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


def test_namespaced_mode_makes_roles_in_the_watched_namespace_only(locked_down: Install) -> None:
    rbac = client.RbacAuthorizationV1Api(locked_down.api())
    name = f"{locked_down.fullname}-operator"
    role = rbac.read_namespaced_role(name, locked_down.workload_namespace)
    assert {r for rule in role.rules for r in rule.resources} >= {"pods", "pods/log", "events"}
    cluster_role = rbac.read_cluster_role(name)
    assert {r for rule in cluster_role.rules for r in rule.resources} == {"gpunodereports"}


# -- each account's grants against the table ---------------------------------------------------

VERSIONS = {"": "v1", "apps": "v1", "batch": "v1", "events.k8s.io": "v1",
            "gpu-auditor.io": "v1alpha1", "apiextensions.k8s.io": "v1",
            "authentication.k8s.io": "v1", "authorization.k8s.io": "v1",
            "resource.k8s.io": "v1"}
NAMESPACED = {"pods", "events", "replicasets", "jobs", "deployments", "statefulsets", "daemonsets"}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
# What the API server grants every authenticated user (system:basic-user): not the chart's.
EVERYONE = {("authorization.k8s.io", "selfsubjectaccessreviews", "create"),
            ("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
            ("authentication.k8s.io", "selfsubjectreviews", "create")}


def _raw(install: Install, token: str, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, str]:
    """One request with `token`: (status, body)."""
    admin = install.api().configuration
    tls = ssl.create_default_context(cafile=admin.ssl_ca_cert)
    request = urllib.request.Request(
        admin.host + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                 "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, context=tls, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _call(install: Install, token: str, triple: Triple, namespace: str | None
          ) -> tuple[int, str]:
    """Make the call `triple` names (group, resource, verb), on an object that does not exist
    where one is needed and with an empty body: RBAC answers before any of that matters, so a
    403 means refused and anything else (404, 400, 422, 200) means allowed."""
    group, resource, verb = triple
    plural, _, sub = resource.partition("/")
    base = "/api/v1" if group == "" else f"/apis/{group}/{VERSIONS[group]}"
    scoped = namespace is not None and plural in NAMESPACED
    collection = f"{base}{f'/namespaces/{namespace}' if scoped else ''}/{plural}"
    item = f"{collection}/no-such-object-{uuid.uuid4().hex[:6]}{f'/{sub}' if sub else ''}"
    if verb == "list":
        return _raw(install, token, "GET", f"{collection}?limit=1")
    if verb == "watch":
        return _raw(install, token, "GET", f"{collection}?watch=true&timeoutSeconds=1")
    return {
        "get": lambda: _raw(install, token, "GET", item),
        "create": lambda: _raw(install, token, "POST", collection, {}),
        "update": lambda: _raw(install, token, "PUT", item, {}),
        "patch": lambda: _raw(install, token, "PATCH", item, {},
                              "application/merge-patch+json"),
        "delete": lambda: _raw(install, token, "DELETE", item),
    }[verb]()


def _where(install: Install, account: str, triple: Triple, namespace: str) -> str | None:
    """Where to make a call: across all namespaces for list/watch of a namespaced resource the
    account holds cluster-wide (the agent's pod list), else in `namespace`."""
    plural = triple[1].partition("/")[0]
    if (plural in NAMESPACED and triple[2] in ("list", "watch")
            and triple in install.granted(account, None)):
        return None
    return namespace


ACCOUNTS = [("install", "agent"), ("install", "operator"), ("locked_down", "agent"),
            ("locked_down", "operator")]


@pytest.mark.parametrize("release, account", ACCOUNTS)
def test_each_account_may_make_every_call_of_the_table(
    request: pytest.FixtureRequest, release: str, account: str,
) -> None:
    chosen: Install = request.getfixturevalue(release)
    token = chosen.token(account)
    namespace = chosen.workload_namespace
    calls = chosen.granted(account, namespace)
    assert calls, "the table gives this account nothing: nothing to check"
    for triple in sorted(calls):
        status, body = _call(chosen, token, triple,
                             _where(chosen, account, triple, namespace))
        assert status != 403 and status < 500, (triple, status, body[:300])


@pytest.mark.parametrize("release, account", ACCOUNTS)
def test_each_account_is_refused_every_other_verb_on_those_resources(
    request: pytest.FixtureRequest, release: str, account: str,
) -> None:
    chosen: Install = request.getfixturevalue(release)
    token = chosen.token(account)
    namespace = chosen.workload_namespace
    calls = chosen.granted(account, namespace)
    resources = {(group, resource) for group, resource, _ in calls}
    for group, resource in sorted(resources | {("", "secrets"), ("", "configmaps")}):
        for verb in VERBS:
            triple = (group, resource, verb)
            if triple in calls or (resource.endswith("/log") and verb != "get"):
                continue
            status, body = _call(chosen, token, triple, namespace)
            assert status == 403, (triple, status, body[:300])


def _server_rules(install: Install, token: str, namespace: str) -> set[Triple]:
    review = client.V1SelfSubjectRulesReview(
        spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace))
    status = client.AuthorizationV1Api(_client_for(install, token)) \
        .create_self_subject_rules_review(review).status
    assert not status.incomplete, status.evaluation_error
    return {(group, resource, verb) for rule in status.resource_rules
            for group in rule.api_groups or [""] for resource in rule.resources or []
            for verb in rule.verbs} - EVERYONE


@pytest.mark.parametrize("release, account", ACCOUNTS)
def test_the_server_grants_each_account_exactly_the_table(
    request: pytest.FixtureRequest, release: str, account: str,
) -> None:
    chosen: Install = request.getfixturevalue(release)
    token = chosen.token(account)
    for namespace in (chosen.workload_namespace, chosen.namespace, "default"):
        assert _server_rules(chosen, token, namespace) == chosen.granted(account, namespace), (
            namespace)


def test_the_operator_watching_one_namespace_is_refused_the_others(locked_down: Install) -> None:
    token = locked_down.token("operator")
    for triple in (("", "pods", "patch"), ("", "pods", "get"), ("", "events", "create")):
        assert _call(locked_down, token, triple, locked_down.workload_namespace)[0] != 403
        assert _call(locked_down, token, triple, "default")[0] == 403, triple
    assert _call(locked_down, token, ("", "pods", "list"), None)[0] == 403


# -- the GPUNodeReport admission policy --------------------------------------------------------

def _report(node: str, node_name: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": node},
            "spec": {"nodeName": node_name or node, "generatedAt": "2026-11-29T19:00:00Z",
                     "sharingStrategy": "none", "replicas": 1, "nvmlUp": True,
                     "kubeletUp": True, "gpus": [], "findings": []}}


REPORTS = "/apis/gpu-auditor.io/v1alpha1/gpunodereports"


@pytest.fixture
def reports_cleanup(install: Install) -> Iterator[None]:
    yield
    objects = client.CustomObjectsApi(install.api())
    for node in install.gpu_nodes:
        try:
            objects.delete_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports",
                                                 node)
        except ApiException as err:
            if err.status != 404:
                raise


def test_the_pods_token_carries_its_node_as_the_policy_expects(install: Install) -> None:
    node = install.gpu_nodes[0]
    token = install.token("agent", bound_pod=_agent_pod_on(install, node))
    status, body = _raw(install, token, "POST",
                        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert status == 201, body
    user = json.loads(body)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{install.namespace}:{install.fullname}-agent"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == node


def test_an_agent_writes_its_own_nodes_report_and_no_other(
    install: Install, reports_cleanup: None,
) -> None:
    mine, other = install.gpu_nodes
    token = install.token("agent", bound_pod=_agent_pod_on(install, mine))

    def refused_other() -> bool:  # the policy takes effect moments after the install
        status, body = _raw(install, token, "POST", REPORTS, _report(other))
        return status == 403 and f"may write only GPUNodeReport {mine}" in body

    install.cluster.wait(refused_other, 30, f"the agent on {mine} refused {other}'s report")
    status, body = _raw(install, token, "POST", REPORTS, _report(mine))
    assert status == 201, body
    current = json.loads(body)
    status, body = _raw(install, token, "PUT", f"{REPORTS}/{mine}", current)
    assert status == 200, body
    current = json.loads(body)
    # Its own report, claiming to be another node's, is refused too.
    forged = {**current, "spec": {**current["spec"], "nodeName": other}}
    status, body = _raw(install, token, "PUT", f"{REPORTS}/{mine}", forged)
    assert status == 403 and f"must report spec.nodeName {mine}" in body, body
    # Another node's existing report (written by an admin, whom the policy leaves alone).
    try:
        client.CustomObjectsApi(install.api()).create_cluster_custom_object(
            "gpu-auditor.io", "v1alpha1", "gpunodereports", _report(other))
    except ApiException as err:
        if err.status != 409:  # written by the agent before the policy took effect
            raise
    theirs = _raw(install, token, "GET", f"{REPORTS}/{other}")
    assert theirs[0] == 200
    status, body = _raw(install, token, "PUT", f"{REPORTS}/{other}", json.loads(theirs[1]))
    assert status == 403 and f"may write only GPUNodeReport {mine}" in body, body


def test_a_token_bound_to_no_node_writes_no_report(install: Install,
                                                   reports_cleanup: None) -> None:
    token = install.token("agent")
    node = install.gpu_nodes[0]

    def refused() -> str | None:
        status, body = _raw(install, token, "POST", REPORTS, _report(node))
        return body if status == 403 else None

    assert "bound to no node" in install.cluster.wait(refused, 30, "an unbound token refused")


# -- Pod Security: why the namespace is `privileged` ---------------------------------------------

def _pod_from(template: Any, api: client.ApiClient) -> dict[str, Any]:
    body = api.sanitize_for_serialization(template)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "psa-check-", "labels": body["metadata"]["labels"]},
            "spec": body["spec"]}


def _dry_run_pod(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> str | None:
    """None when the API server would admit the pod, else its reason."""
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as err:
        assert err.status == 403, err.body
        return str(json.loads(err.body)["message"])
    return None


@pytest.fixture(scope="module")
def psa_namespaces(install: Install) -> Iterator[dict[str, str]]:
    core = client.CoreV1Api(install.api())
    names = {}
    for level in ("baseline", "restricted"):
        names[level] = f"psa-{level}-{uuid.uuid4().hex[:6]}"
        _create_namespace(core, names[level], {"pod-security.kubernetes.io/enforce": level})
    yield names
    for name in names.values():
        core.delete_namespace(name)


def test_baseline_refuses_the_agent_for_its_host_paths_and_host_pid(
    install: Install, locked_down: Install, psa_namespaces: dict[str, str],
) -> None:
    api = install.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    daemonset = apps.read_namespaced_daemon_set(f"{install.fullname}-agent", install.namespace)
    reason = _dry_run_pod(core, psa_namespaces["baseline"], _pod_from(daemonset.spec.template, api))
    assert reason is not None
    assert "hostPID=true" in reason and 'hostPath volumes (volume "pod-resources")' in reason
    # Without hostPID, the host paths alone still need `privileged`.
    daemonset = apps.read_namespaced_daemon_set(f"{locked_down.fullname}-agent",
                                                locked_down.namespace)
    reason = _dry_run_pod(core, psa_namespaces["baseline"], _pod_from(daemonset.spec.template, api))
    assert reason is not None and "hostPID" not in reason
    assert '"host-proc"' in reason and '"pod-resources"' in reason


def test_the_operator_meets_the_restricted_level(
    install: Install, psa_namespaces: dict[str, str],
) -> None:
    api = install.api()
    deployment = client.AppsV1Api(api).read_namespaced_deployment(
        f"{install.fullname}-operator", install.namespace)
    pod = _pod_from(deployment.spec.template, api)
    assert _dry_run_pod(client.CoreV1Api(api), psa_namespaces["restricted"], pod) is None


# -- the operator's token: its job, and nothing more ------------------------------------------

@pytest.fixture(scope="module")
def operator_api(install: Install) -> client.ApiClient:
    return install.token_client("operator")


@pytest.fixture(scope="module")
def agent_api(install: Install) -> client.ApiClient:
    return install.token_client("agent")


@pytest.fixture(scope="module")
def victim_pod(install: Install) -> str:
    core = client.CoreV1Api(install.api())
    core.create_namespaced_pod(install.workload_namespace, {
        "metadata": {"name": "trainer-0"},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:latest"}]},
    })
    return "trainer-0"


def _forbidden(call: Any) -> bool:
    try:
        call()
    except ApiException as err:
        return err.status == 403
    return False


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


def test_operator_token_posts_core_events_only(
    install: Install, operator_api: client.ApiClient, victim_pod: str,
) -> None:
    ns = install.workload_namespace
    involved = client.V1ObjectReference(kind="Pod", name=victim_pod, namespace=ns,
                                        api_version="v1")
    client.CoreV1Api(operator_api).create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{victim_pod}-"), involved_object=involved,
        reason="CUDAOutOfMemory", message="diagnosed: fragmentation", type="Warning"))
    # events.k8s.io is a second door to the same objects, which no code of ours opens.
    assert _forbidden(lambda: client.EventsV1Api(operator_api).create_namespaced_event(
        ns, client.EventsV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{victim_pod}-"), regarding=involved,
            reason="CUDAOutOfMemory", note="diagnosed: fragmentation", type="Warning",
            action="Diagnose", reporting_controller="gpu-auditor.io/operator",
            reporting_instance="gpu-auditor-operator",
            event_time=datetime.datetime.now(datetime.UTC))))


def test_operator_token_may_not_delete_pods_or_write_reports(
    install: Install, operator_api: client.ApiClient, victim_pod: str,
) -> None:
    core = client.CoreV1Api(operator_api)
    ns = install.workload_namespace
    assert _forbidden(lambda: core.delete_namespaced_pod(victim_pod, ns))
    assert _forbidden(lambda: core.create_namespaced_pod(ns, {
        "metadata": {"name": "sneaky"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}))
    assert _forbidden(lambda: core.patch_node(install.gpu_nodes[0],
                                              {"metadata": {"labels": {"x": "y"}}}))
    assert _forbidden(lambda: client.CustomObjectsApi(operator_api).create_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports", _report(install.gpu_nodes[0])))


# -- the operator itself, with nothing but the chart's grants -----------------------------------
# The calls above are the table's, made by hand. Here the real operator process runs with a
# token of the chart's ServiceAccount (kwok runs no containers, so it runs beside the cluster,
# as the pod would: its kubeconfig's namespace is the release namespace, as the pod's is) and
# does each thing it does: diagnoses a failed pod (reading its log), verifies and annotates each
# kind of owner, and acts on a GPUNodeReport. Any request the chart does not grant shows as a
# 403 in its metrics or its log; what kopf would do without its discovery grants shows in the
# log too.

CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
PREFIX = "gpu-auditor.io/"
GIB = 2**30
CUDA_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has "
            "a total capacity of 139.72 GiB of which 1.50 GiB is free. Of the allocated memory "
            "118.00 GiB is allocated by PyTorch, and 17.60 GiB is reserved by PyTorch but "
            "unallocated.\n")


@contextlib.contextmanager
def _chart_operator(install: Install, tmp_path: Path) -> Iterator[OperatorProcess]:
    config = yaml.safe_load(install.cluster.kubeconfig.read_text())
    config["users"] = [{"name": "chart-operator", "user": {"token": install.token("operator")}}]
    config["contexts"] = [{"name": "local", "context": {
        "cluster": "local", "user": "chart-operator", "namespace": install.namespace}}]
    path = tmp_path / "chart-operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    args = [f"--namespace={n}" for n in install.values["operator"]["namespaces"]]
    if install.values["operator"]["metricsProxy"]["enabled"]:
        args.append("--metrics-bind-address=127.0.0.1")  # as the chart runs it behind the proxy
    operator = OperatorProcess(install.cluster, *args, name=f"operator-{install.release}",
                               kubeconfig=path)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


@contextlib.contextmanager
def _controllers_paused(cluster: LocalCluster) -> Iterator[None]:
    """kube-controller-manager stopped, then started again: its Job, ReplicaSet, StatefulSet and
    DaemonSet controllers would release (or delete) the pods this test gives owners by hand."""
    kcm = cluster.components["kube-controller-manager"]
    port = next(a.split("=", 1)[1] for a in kcm.argv if a.startswith("--secure-port="))
    kcm.stop()
    try:
        yield
    finally:
        kcm.start()
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=insecure) as answer:
                return bool(answer.status == 200)

        kcm.wait_until(healthy, 60, "healthy again")


def _owners(install: Install, ns: str, tag: str,
            ) -> dict[str, tuple[str, dict[str, Any], dict[str, str]]]:
    """One workload of each kind the operator annotates, and a Deployment's ReplicaSet: kind ->
    (the object the annotation must land on, the controller reference its pod carries, the
    labels its controller gives the pod: its template's, as the API server returns them, so a
    Job's include the controller-uid its generated selector selects)."""
    api = install.api()
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    labels = {"app": f"owned-{tag}"}
    template = {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "x"}]}}
    nowhere = {"nodeSelector": {"no-such-node": "true"}}

    def ref(kind: str, api_version: str, obj: Any) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": kind, "name": obj.metadata.name,
                "uid": obj.metadata.uid, "controller": True}

    job = batch.create_namespaced_job(ns, {
        "metadata": {"name": f"job-{tag}"},
        "spec": {"suspend": True, "template": {
            "spec": {**template["spec"], "restartPolicy": "Never"}}}})
    deployment = apps.create_namespaced_deployment(ns, {
        "metadata": {"name": f"deploy-{tag}"},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}})
    replica_set = apps.create_namespaced_replica_set(ns, {
        "metadata": {"name": f"deploy-{tag}-1", "labels": labels,
                     "ownerReferences": [ref("Deployment", "apps/v1", deployment)]},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}})
    stateful_set = apps.create_namespaced_stateful_set(ns, {
        "metadata": {"name": f"sts-{tag}"},
        "spec": {"replicas": 0, "serviceName": "x", "selector": {"matchLabels": labels},
                 "template": template}})
    daemon_set = apps.create_namespaced_daemon_set(ns, {
        "metadata": {"name": f"ds-{tag}"},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            **template, "spec": {**template["spec"], **nowhere}}}})
    job_labels = dict(job.spec.template.metadata.labels or {})
    return {
        "Job": (f"jobs/{job.metadata.name}", ref("Job", "batch/v1", job), job_labels),
        "Deployment": (f"deployments/{deployment.metadata.name}",
                       ref("ReplicaSet", "apps/v1", replica_set), labels),
        "StatefulSet": (f"statefulsets/{stateful_set.metadata.name}",
                        ref("StatefulSet", "apps/v1", stateful_set), labels),
        "DaemonSet": (f"daemonsets/{daemon_set.metadata.name}",
                      ref("DaemonSet", "apps/v1", daemon_set), labels),
    }


def _annotations(install: Install, ns: str, where: str) -> dict[str, str]:
    plural, name = where.split("/")
    api = install.api()
    read = {"pods": lambda: client.CoreV1Api(api).read_namespaced_pod(name, ns),
            "jobs": lambda: client.BatchV1Api(api).read_namespaced_job(name, ns),
            "deployments": lambda: client.AppsV1Api(api).read_namespaced_deployment(name, ns),
            "statefulsets": lambda: client.AppsV1Api(api).read_namespaced_stateful_set(name, ns),
            "daemonsets": lambda: client.AppsV1Api(api).read_namespaced_daemon_set(name, ns)}
    return dict(read[plural]().metadata.annotations or {})


def _wait_annotated(install: Install, ns: str, where: str, key: str) -> dict[str, str]:
    def found() -> dict[str, str] | None:
        notes = _annotations(install, ns, where)
        return notes if f"{PREFIX}{key}" in notes else None

    result: dict[str, str] = install.cluster.wait(found, 60, f"{where} annotated with {key}")
    return result


def _failing_pod(install: Install, ns: str, name: str, node: str, owner: dict[str, Any],
                 labels: dict[str, str]) -> None:
    client.CoreV1Api(install.api()).create_namespaced_pod(ns, {
        "metadata": {"name": name, "labels": {**labels, CHAOS: "true"},
                     "ownerReferences": [owner],
                     "annotations": {f"{CHAOS}/reason": "Error", f"{CHAOS}/exit-code": "1",
                                     f"{CHAOS}/delay": "1500ms"}},
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer:latest",
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})


def _running_pod(install: Install, ns: str, name: str, node: str) -> str:
    pod = client.CoreV1Api(install.api()).create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "notebook"}]}})
    return str(pod.metadata.uid)


def _metric_sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if (line.startswith((name + "{", name + " "))
                and all(f'{k}="{v}"' in line for k, v in labels.items())):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _delete(install: Install, ns: str, where: str) -> None:
    plural, name = where.split("/")
    api = install.api()
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    delete = {"jobs": batch.delete_namespaced_job,
              "deployments": apps.delete_namespaced_deployment,
              "statefulsets": apps.delete_namespaced_stateful_set,
              "daemonsets": apps.delete_namespaced_daemon_set}[plural]
    delete(name, ns, propagation_policy="Background")


# An API error in the operator's log (our client's "HTTP 403: ..."), kopf's for a refused
# request, and kopf's warnings when it lacks discovery or cannot find a resource.
REFUSED = re.compile(r"HTTP 403\b|APIForbiddenError|Not enough permissions|Unresolved resources")


@pytest.mark.parametrize("release", ["install", "locked_down"])
def test_the_operator_does_all_its_work_with_only_the_charts_grants(
    request: pytest.FixtureRequest, release: str, tmp_path: Path, reports_cleanup: None,
) -> None:
    chosen: Install = request.getfixturevalue(release)
    ns, node, cluster = chosen.workload_namespace, chosen.gpu_nodes[0], chosen.cluster
    tag = chosen.release
    log_file = tmp_path / "oom.log"
    log_file.write_bytes(cri(CUDA_OOM))
    owners: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {}
    with _chart_operator(chosen, tmp_path) as operator:
        try:
            with _controllers_paused(cluster):
                owners = _owners(chosen, ns, tag)
                for kind, (_, owner, pod_labels) in owners.items():
                    pod = f"{kind.lower()}-pod-{tag}"
                    _failing_pod(chosen, ns, pod, node, owner, pod_labels)
                    cluster.serve_logs(ns, pod, current=log_file)
                for kind, (where, _, _) in owners.items():
                    pod = f"{kind.lower()}-pod-{tag}"
                    notes = _wait_annotated(chosen, ns, f"pods/{pod}", "diagnosis")
                    assert notes[f"{PREFIX}diagnosis"] != "unknown", notes
                    owner_notes = _wait_annotated(chosen, ns, where, "diagnosed-pod")
                    assert owner_notes[f"{PREFIX}diagnosed-pod"] == f"{ns}/{pod}"
        finally:
            for where, _, _ in owners.values():
                _delete(chosen, ns, where)
        # A GPUNodeReport, through kopf's watch of the cluster-scoped reports. It also names a
        # pod of the release namespace, which the namespaced operator does not watch: that one
        # it must leave alone, not be refused.
        pods = {(ns, f"trainer-{tag}"), (ns, f"notebook-{tag}"),
                (chosen.namespace, f"outsider-{tag}")}
        entries = [{"namespace": where, "pod": name, "container": "main",
                    "podUID": _running_pod(chosen, where, name, node), "bytes": 40 * GIB,
                    "allocated": "true" if name.startswith("trainer") else "false",
                    "pids": [11 + i]}
                   for i, (where, name) in enumerate(sorted(pods))]
        report = _report(node)
        report["spec"]["gpus"] = [{"uuid": "GPU-chart", "index": 0, "memoryTotalBytes": 140 * GIB,
                                   "memoryFreeBytes": GIB, "pods": entries}]
        report["spec"]["findings"] = [{"kind": "unintended-sharing", "gpuUUID": "GPU-chart",
                                       "pods": [f"{w}/{n}" for w, n in sorted(pods)],
                                       "message": "3 pods on GPU-chart"}]
        client.CustomObjectsApi(chosen.api()).create_cluster_custom_object(
            "gpu-auditor.io", "v1alpha1", "gpunodereports", report)
        for name in (f"trainer-{tag}", f"notebook-{tag}"):
            shared = _wait_annotated(chosen, ns, f"pods/{name}", "gpu-shared-with")
            assert f"{chosen.namespace}/outsider-{tag}" in shared[f"{PREFIX}gpu-shared-with"]
        outsider = f"pods/outsider-{tag}"
        if chosen.values["operator"]["namespaces"]:
            cluster.wait(lambda: _metric_sum(operator.metrics(),
                                             "gpu_auditor_operator_report_items_ignored_total",
                                             reason="not-watched") >= 1, 30, "not-watched")
            assert not [k for k in _annotations(chosen, chosen.namespace, outsider)
                        if k.startswith(PREFIX)]
        else:
            _wait_annotated(chosen, chosen.namespace, outsider, "gpu-shared-with")
        metrics = operator.metrics()
        log = operator.component.log_path.read_text(errors="replace")
        if chosen.values["operator"]["metricsProxy"]["enabled"]:
            # /metrics on 127.0.0.1 alone: another address of this host (127.0.0.2, loopback
            # too on Linux, where 0.0.0.0 would answer) is refused, as the pod's IP would be.
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", operator.metrics_port), timeout=5).close()
    assert _metric_sum(metrics, "gpu_auditor_operator_api_requests_total", verb="get_log") >= 4
    assert _metric_sum(metrics, "gpu_auditor_operator_api_errors_total", reason="forbidden") == 0
    refused = [line for line in log.splitlines() if REFUSED.search(line)]
    assert refused == [], refused


# -- the agent's token ---------------------------------------------------------------------------

def test_agent_token_lists_its_nodes_pods_and_reads_its_node(
    install: Install, agent_api: client.ApiClient,
) -> None:
    node = install.gpu_nodes[0]
    core = client.CoreV1Api(agent_api)
    core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    assert core.read_node(node).metadata.name == node
    assert _forbidden(lambda: core.list_node())
    assert _forbidden(lambda: core.read_namespaced_pod("trainer-0", install.workload_namespace))


# -- NOTES.txt and every ci variant against the server -----------------------------------------

def test_the_install_notes_say_where_to_look(install: Install) -> None:
    notes = install.cluster.helm("get", "notes", install.release, "--namespace",
                                 install.namespace).stdout
    assert "kubectl get gpunodereports" in notes
    assert "gpu-auditor.io/" in notes  # where the diagnoses appear
    assert "serviceMonitor.enabled=true" in notes
    assert f"helm test {install.release}" in notes


@pytest.fixture(scope="module")
def monitoring_crds(install: Install) -> Iterator[None]:
    """Stand-ins for the Prometheus Operator's and cert-manager's CRDs (names and kinds only, no
    schema), so the API server maps ServiceMonitor, PodMonitor, PrometheusRule, Certificate and
    Issuer. Not a check of their fields."""
    ext = client.ApiextensionsV1Api(install.api())
    created = []
    for group, kind, plural in (
        ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
        ("monitoring.coreos.com", "PodMonitor", "podmonitors"),
        ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
        ("cert-manager.io", "Certificate", "certificates"),
        ("cert-manager.io", "Issuer", "issuers"),
    ):
        name = f"{plural}.{group}"
        try:
            ext.create_custom_resource_definition({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": group, "scope": "Namespaced",
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
def test_every_ci_values_file_installs_against_the_cluster(
    install: Install, monitoring_crds: None, values_file: str,
) -> None:
    result = install.cluster.helm(
        "install", f"dry-{install.release}", str(CHART), "--namespace", install.namespace,
        "--dry-run=server", "-f", str(CHART / "ci" / values_file), check=False)
    assert result.returncode == 0, result.stderr
    assert "NOTES:" in result.stdout
    assert "kind: DaemonSet" in result.stdout or "kind: Deployment" in result.stdout
