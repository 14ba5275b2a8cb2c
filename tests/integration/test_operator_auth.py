"""Operator auth where users run it, against the real API server: a kubeconfig whose user is an
exec credential plugin (as EKS, GKE and AKS write them), split over two files in `KUBECONFIG`.

The API server here authenticates bearer tokens from a static token file
(`--token-auth-file`), so the only way in for these requests is the token the plugin prints:
the kubeconfigs carry no client certificate.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.localcluster import LocalCluster, default_bin_dir, missing_binaries
from devtools.localcluster.components import OperatorProcess, install_crds
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import APIUnauthorizedError
from gpu_auditor.base.kubeconfig import load_kubeconfig

pytestmark = pytest.mark.integration

TOKEN = "exec-token-" + uuid.uuid4().hex
USER = "exec-user"
PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"

PLUGIN = """\
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False, info
runs = pathlib.Path(sys.argv[1])
runs.write_text((runs.read_text() if runs.exists() else "") + "run\\n")
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": sys.argv[2],
                             "expirationTimestamp": "2099-01-01T00:00:00Z"}}))
"""


class TokenCluster(LocalCluster):
    """The local control plane with one more way in: a static bearer token for USER, a member
    of system:masters."""

    def _apiserver_argv(self) -> list[str]:
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{TOKEN},{USER},{USER}-uid,"system:masters"\n')
        return [*super()._apiserver_argv(), f"--token-auth-file={tokens}"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[TokenCluster]:
    missing = missing_binaries(default_bin_dir())
    if missing:
        message = f"control-plane binaries missing: {', '.join(missing)}"
        if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    with TokenCluster() as local:
        yield local


def exec_kubeconfigs(folder: Path, cluster: LocalCluster, token: str = TOKEN) -> str:
    """`a:b`: the exec user in a; the cluster (its CA only, no client certificate), the
    context and the current context in b."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "plugin.py"
    script.write_text(PLUGIN)
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    a = folder / "a.yaml"
    a.write_text(yaml.safe_dump({"users": [{"name": "exec", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(script), str(folder / "runs"), token], "interactiveMode": "Never"}}}]}))
    b = folder / "b.yaml"
    b.write_text(yaml.safe_dump({
        "clusters": admin["clusters"],
        "contexts": [{"name": "exec", "context": {"cluster": "local", "user": "exec"}}],
        "current-context": "exec"}))
    return f"{a}{os.pathsep}{b}"


def runs(folder: Path) -> int:
    path = folder / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_operators_client_lists_pods_as_the_exec_plugins_user(
        cluster: TokenCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_auditor.controller.main import api_client

    monkeypatch.setenv("KUBECONFIG", exec_kubeconfigs(tmp_path, cluster))
    api = api_client()
    assert api.config.client_cert_data is None and api.config.client_cert_file is None
    pods = api.request("GET", "/api/v1/pods")
    assert pods["kind"] == "PodList"
    review = api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                         body={"apiVersion": "authentication.k8s.io/v1",
                               "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == USER
    assert runs(tmp_path) == 1  # cached until 2099: one run for both requests


def test_a_token_the_api_server_refuses_is_fetched_again_once_then_an_error(
        cluster: TokenCluster, tmp_path: Path) -> None:
    api = ApiClient(load_kubeconfig(exec_kubeconfigs(tmp_path, cluster, token="revoked")),
                    user_agent="test")
    with pytest.raises(APIUnauthorizedError):
        api.request("GET", "/api/v1/pods")
    assert runs(tmp_path) == 2  # at start, and again after the 401


def test_the_operator_logs_in_and_watches_with_the_exec_plugin(
        cluster: TokenCluster, tmp_path: Path) -> None:
    """kopf's login and the operator's own requests, both from KUBECONFIG=a:b: an OOMKilled
    pod is seen by kopf's watch and annotated by the operator's client."""
    cluster.start_controllers()
    cluster.start_kwok()
    install_crds(cluster)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    cluster.create_node(node, gpus=1, labels={"nvidia.com/gpu.present": "true"})
    kubeconfigs = exec_kubeconfigs(tmp_path, cluster)
    operator = OperatorProcess(cluster, name="operator-exec",
                               kubeconfig=Path(kubeconfigs)).start()
    try:
        core = client.CoreV1Api(cluster.api_client())
        ns = f"auth-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": ns}})
        core.create_namespaced_pod(ns, {
            "metadata": {"name": "etl", "labels": {CHAOS: "true"},
                         "annotations": {f"{CHAOS}/reason": "OOMKilled",
                                         f"{CHAOS}/exit-code": "137",
                                         f"{CHAOS}/delay": "1000ms"}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                {"name": "main", "image": "etl:latest",
                 "resources": {"limits": {"memory": "2Gi", "nvidia.com/gpu": "1"}}}]},
        })

        def annotated() -> dict[str, Any] | None:
            found = core.read_namespaced_pod("etl", ns).metadata.annotations or {}
            return found if f"{PREFIX}diagnosis" in found else None

        notes = cluster.wait(annotated, 90, f"{ns}/etl diagnosed")
        assert notes[f"{PREFIX}diagnosis"] == "host-oom-killed"
        assert json.loads(notes[f"{PREFIX}evidence"])["source"] == "termination-state"
        assert runs(tmp_path) >= 1  # kopf logs in with the credential the client fetched
        assert "gpu_auditor_operator_api_requests_total" in operator.metrics()
    finally:
        operator.stop()
