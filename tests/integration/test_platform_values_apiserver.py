"""examples/platforms/values-*.yaml: every object the chart renders for GKE, EKS, AKS and
OpenShift is sent to the real local kube-apiserver as a server-side dry-run create, so the API
server's validation and admission judge it (a privileged container with
allowPrivilegeEscalation false, say, is refused). `helm install --dry-run=server` would not do
this: it only lets templates look objects up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import ApiException

from devtools.localcluster import LocalCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-auditor"
PLATFORMS = ROOT / "examples" / "platforms"


def dry_run_create(cluster: LocalCluster, objects: list[dict[str, Any]]) -> list[str]:
    """The API server's refusals of a dry-run create of each object, as messages."""
    dyn = dynamic.DynamicClient(cluster.api_client())
    refused = []
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            resource.create(body=obj, namespace=obj["metadata"].get("namespace"),
                            query_params=[("dryRun", "All")])
        except ApiException as exc:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.status} {exc.body}")
    return refused


def render(cluster: LocalCluster, namespace: str, values: Path) -> list[dict[str, Any]]:
    out = cluster.helm("template", "gpu-auditor", str(CHART), "--namespace", namespace,
                       "--kube-version", "v1.36.3", "-f", str(values)).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] != "Pod"]  # helm tests


@pytest.mark.parametrize("name", ["gke", "eks", "aks", "openshift"])
def test_each_platforms_objects_pass_the_api_servers_validation(
        cluster: LocalCluster, name: str) -> None:
    namespace = f"platform-{name}"
    client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    objects = render(cluster, namespace, PLATFORMS / f"values-{name}.yaml")
    assert {"DaemonSet", "Deployment"} <= {o["kind"] for o in objects}
    assert dry_run_create(cluster, objects) == []


def test_a_privileged_agent_that_forbids_escalation_is_refused(
        cluster: LocalCluster, tmp_path: Path) -> None:
    """The check above has teeth: GKE's values without `allowPrivilegeEscalation: null`."""
    values = yaml.safe_load((PLATFORMS / "values-gke.yaml").read_text())
    del values["agent"]["securityContext"]["allowPrivilegeEscalation"]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    client.CoreV1Api(cluster.api_client()).create_namespace({"metadata": {
        "name": "platform-bad", "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    refused = dry_run_create(cluster, [o for o in render(cluster, "platform-bad", path)
                                       if o["kind"] == "DaemonSet"])
    assert len(refused) == 1 and "allowPrivilegeEscalation" in refused[0]
