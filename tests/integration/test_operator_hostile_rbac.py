"""One pod of a node report whose write is forbidden (403, for real: the operator's
ServiceAccount may patch pods in two namespaces of three) does not stop the rest of the report,
and the operator tries that pod again by itself once the write is allowed.

Its own module: the only operator running is the restricted one (a cluster-wide operator with
full rights would write the forbidden pod itself).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.localcluster import LocalCluster
from devtools.localcluster.components import OperatorProcess, install_crds

pytestmark = pytest.mark.integration

PREFIX = "gpu-auditor.io/"
GIB = 2**30


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster) -> dict[str, Any]:
    install_crds(kwok_cluster)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    return {"cluster": kwok_cluster, "node": node}


def _grant(rbac: client.RbacAuthorizationV1Api, name: str, subject: dict[str, str],
           rules: list[dict[str, Any]], namespace: str | None = None) -> None:
    if namespace is None:
        rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
        rbac.create_cluster_role_binding({
            "metadata": {"name": name}, "subjects": [subject],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name}})
    else:
        rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": name}, "subjects": [subject],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": name}})


PATCH_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]


@pytest.fixture
def restricted(env: dict[str, Any], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Three namespaces; an operator that may read pods everywhere, post Events everywhere, and
    patch pods only in the first and the last."""
    cluster: LocalCluster = env["cluster"]
    api = cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    tag = uuid.uuid4().hex[:6]
    namespaces = [f"r403-{letter}-{tag}" for letter in "abc"]
    for namespace in namespaces:
        core.create_namespace({"metadata": {"name": namespace}})
    home = namespaces[0]
    core.create_namespaced_service_account(home, {"metadata": {"name": "operator"}})
    subject = {"kind": "ServiceAccount", "name": "operator", "namespace": home}
    _grant(rbac, f"r403-{tag}", subject, [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": ["gpu-auditor.io"], "resources": ["gpunodereports"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["list", "watch"]},
    ])
    for namespace in (namespaces[0], namespaces[2]):
        _grant(rbac, "patch-pods", subject, PATCH_PODS, namespace)
    token = core.create_namespaced_service_account_token(
        "operator", home, {"spec": {"expirationSeconds": 3600}}).status.token
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "restricted", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "restricted"
    kubeconfig = tmp_path / "restricted.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    args = [f"--namespace={n}" for n in namespaces]
    operator = OperatorProcess(cluster, *args, name=f"operator-403-{tag}",
                               kubeconfig=kubeconfig).start()
    try:
        yield {"namespaces": namespaces, "operator": operator, "subject": subject,
               "rbac": rbac, "core": core}
    finally:
        operator.stop()


def _running(core: client.CoreV1Api, namespace: str, node: str) -> str:
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": "trainer"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer"}]}})
    return str(pod.metadata.uid)


def test_a_403_in_the_middle_of_a_report_does_not_stop_the_rest(
    env: dict[str, Any], restricted: dict[str, Any]
) -> None:
    cluster: LocalCluster = env["cluster"]
    core: client.CoreV1Api = restricted["core"]
    first, forbidden, last = restricted["namespaces"]
    refs = [f"{n}/trainer" for n in (first, forbidden, last)]
    entries = [{"namespace": n, "pod": "trainer", "podUID": _running(core, n, env["node"]),
                "container": "main", "bytes": 40 * GIB, "allocated": "true", "pids": [i]}
               for i, n in enumerate((first, forbidden, last))]
    client.CustomObjectsApi(cluster.api_client()).create_cluster_custom_object(
        "gpu-auditor.io", "v1alpha1", "gpunodereports", {
            "apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": env["node"]},
            "spec": {"nodeName": env["node"], "generatedAt": "2026-11-29T10:00:00Z",
                     "gpus": [{"uuid": "GPU-403", "index": 0, "pods": entries}],
                     "findings": [{"kind": "unintended-sharing", "gpuUUID": "GPU-403",
                                   "pods": refs, "message": "3 pods on GPU-403"}]}})

    def shared_with(namespace: str) -> str | None:
        notes = core.read_namespaced_pod("trainer", namespace).metadata.annotations or {}
        return notes.get(f"{PREFIX}gpu-shared-with")

    operator: OperatorProcess = restricted["operator"]
    cluster.wait(lambda: re.search(
        r'gpu_auditor_operator_api_errors_total\{reason="forbidden",verb="patch_pod"\} [1-9]',
        operator.metrics()), 60, "the forbidden write")
    cluster.wait(lambda: shared_with(last), 60, "the pod after the forbidden one annotated")
    assert shared_with(first) == f"{forbidden}/trainer,{last}/trainer"
    assert shared_with(last) == f"{first}/trainer,{forbidden}/trainer"
    assert shared_with(forbidden) is None
    # The write is allowed now: the operator's own retry (5 s, then 15 s) writes it, with no
    # new report and no new event of that pod.
    _grant(restricted["rbac"], "patch-pods", restricted["subject"], PATCH_PODS, forbidden)
    assert cluster.wait(lambda: shared_with(forbidden), 60, "the retry") == (
        f"{first}/trainer,{last}/trainer")
