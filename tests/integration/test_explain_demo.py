"""`gpu-auditor explain` and the chart's NOTES commands on the demo's pods, in a real local
control plane (kube-apiserver, controllers, kwok), with the real operator and node agent.

The scenario is `make demo`'s (`devtools.demo.stage`): ml/finetune-7b (fragmentation),
ml/trainer-0 (a raw CUDA OOM on a GPU ml/notebook-1 filled without requesting it),
etl/preprocess (the kernel's OOM killer). Each is read back three ways: in-process through the
CLI, as a kubectl plugin run by a real kubectl (built from its Go module like the control
plane), and through the commands NOTES.txt prints after `helm install`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from devtools import demo
from devtools.localcluster import LocalCluster, default_bin_dir, missing_binaries
from gpu_auditor.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-auditor"
PREFIX = "gpu-auditor.io/"
VENV_BIN = Path(sys.executable).parent


def _need(path: Path, what: str) -> None:
    if not os.access(path, os.X_OK):
        message = f"{what} missing: {path}"
        if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def staged() -> Iterator[LocalCluster]:
    missing = missing_binaries(default_bin_dir())
    if missing:
        _need(default_bin_dir() / missing[0], "control-plane binary")
    with LocalCluster() as cluster:
        demo.stage(cluster)
        yield cluster


def explain(cluster: LocalCluster, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["explain", "--kubeconfig", str(cluster.kubeconfig), *argv], stdout=out,
                stderr=err)
    return code, out.getvalue(), err.getvalue()


def annotations(cluster: LocalCluster, namespace: str, name: str) -> dict[str, str]:
    pod = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(name, namespace)
    return {k: v for k, v in (pod.metadata.annotations or {}).items() if k.startswith(PREFIX)}


def test_explain_prints_the_fragmentation_diagnosis_every_action_and_the_setting(
        staged: LocalCluster) -> None:
    code, out, err = explain(staged, "-n", "ml", "finetune-7b")
    assert (code, err) == (0, "")
    assert "Diagnosis: fragmentation (pytorch, torch 2.11)" in out
    actions = json.loads(annotations(staged, "ml", "finetune-7b")[f"{PREFIX}actions"])
    assert len(actions) >= 2
    for n, action in enumerate(actions, 1):
        assert f"  {n}. {action}" in out
    assert "value: \"expandable_segments:True\"" in out
    assert "Warning CUDAOutOfMemory: [main] fragmentation:" in out


def test_explain_names_the_pod_behind_the_host_pid_on_the_shared_gpu(
        staged: LocalCluster) -> None:
    code, out, _ = explain(staged, "ml/trainer-0")
    assert code == 0
    assert "Diagnosis: gpu-shared" in out
    assert "pid 51904: pod ml/notebook-1" in out
    assert "ml/notebook-1 [jupyter]: NOT allocated this GPU" in out
    assert "ml/trainer-0 [trainer]: allocated this GPU, pids 48211  <- this pod" in out
    assert "from GPUNodeReport gpu-node-1" in out


def test_explain_of_the_oom_kill_gives_the_memory_actions_and_no_gpu_tenants(
        staged: LocalCluster) -> None:
    code, out, _ = explain(staged, "-n", "etl", "preprocess", "--exit-code")
    assert code == 1  # --exit-code: the pod carries a diagnosis
    assert "Diagnosis: host-oom-killed" in out
    assert "at its 16.00 GiB memory limit" in out
    assert "1. raise the container's memory limit" in out
    assert "Tenants of its GPU" not in out


def test_explain_json_carries_the_same_reading(staged: LocalCluster) -> None:
    code, out, _ = explain(staged, "-n", "ml", "trainer-0", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["diagnosis"]["kind"] == "gpu-shared"
    tenants = {t["pod"]: t for t in data["gpus"][0]["tenants"]}
    assert tenants["ml/notebook-1"]["allocated"] == "false"
    assert tenants["ml/trainer-0"]["this_pod"] is True


def test_explain_of_a_missing_pod_is_one_line_and_exit_2(staged: LocalCluster) -> None:
    code, out, err = explain(staged, "-n", "ml", "nobody")
    assert (code, out) == (2, "")
    assert err == "gpu-auditor explain: pod nobody: not found\n"


def test_explain_follows_a_deployments_pod_to_the_deployment(staged: LocalCluster) -> None:
    apps = client.AppsV1Api(staged.api_client())
    labels = {"app": "serve"}
    apps.create_namespaced_deployment("serving", {
        "metadata": {"name": "serve"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeName": "gpu-node-2", "containers": [
                {"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0-runtime"}]}}}})
    core = client.CoreV1Api(staged.api_client())
    pod = staged.wait(lambda: next(iter(core.list_namespaced_pod(
        "serving", label_selector="app=serve").items), None), 60, "the Deployment's pod")
    code, out, _ = explain(staged, "-n", "serving", pod.metadata.name)
    assert code == 0
    replicaset = pod.metadata.owner_references[0].name
    assert f"owned by Deployment/serve <- ReplicaSet/{replicaset}" in out
    assert "No gpu-auditor diagnosis on this pod" in out


def _kubectl(cluster: LocalCluster, *args: str, kubeconfig: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    kubectl = default_bin_dir() / "kubectl"
    _need(kubectl, "kubectl (scripts/lib/go-build.sh: build_kube kubectl)")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(kubectl), *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_kubectl_runs_the_plugin_for_kubectl_gpu_auditor_explain(staged: LocalCluster) -> None:
    listed = _kubectl(staged, "plugin", "list")
    assert f"{VENV_BIN}/kubectl-gpu_auditor" in listed.stdout, listed.stderr
    result = _kubectl(staged, "gpu-auditor", "explain", "-n", "ml", "trainer-0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == explain(staged, "-n", "ml", "trainer-0")[1]


def test_explain_authenticates_through_an_exec_credential_plugin(
        staged: LocalCluster, tmp_path: Path) -> None:
    """A kubeconfig whose user is an `exec` plugin (as EKS, GKE and AKS write them) that hands
    out the admin's client certificate."""
    assert staged.pki is not None
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": staged.pki.admin_cert.read_text(),
                             "clientKeyData": staged.pki.admin_key.read_text()}}
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(credential)}\nEOF\n")
    plugin.chmod(0o755)
    ca = base64.b64encode(staged.pki.ca_cert.read_bytes()).decode()
    kubeconfig = tmp_path / "exec-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "l", "cluster": {"server": staged.server,
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
            "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "l", "user": "u", "namespace": "ml"}}],
    }))
    out, err = io.StringIO(), io.StringIO()
    code = main(["explain", "--kubeconfig", str(kubeconfig), "finetune-7b"], stdout=out,
                stderr=err)
    assert (code, err.getvalue()) == (0, "")
    assert "Diagnosis: fragmentation" in out.getvalue()  # namespace ml from the context


# -- NOTES.txt --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notes(staged: LocalCluster) -> list[str]:
    """The NOTES helm prints after an install into this cluster (a dry run: the demo's
    operator is the one at work)."""
    result = staged.helm("install", "notes", str(CHART), "--namespace", "gpu-auditor",
                         "--dry-run=client")
    text = result.stdout.split("NOTES:", 1)[1]
    return [line.strip() for line in text.splitlines()]


def _line(notes: list[str], start: str) -> str:
    found = [line for line in notes if line.startswith(start)]
    assert len(found) == 1, f"one NOTES line starting {start!r}, got {found}"
    return found[0]


def test_the_notes_kubectl_command_prints_every_annotation_whole(
        staged: LocalCluster, notes: list[str]) -> None:
    command = _line(notes, "kubectl -n NAMESPACE get pod POD -o go-template=")
    argv = shlex.split(command.replace("NAMESPACE", "ml").replace(" POD ", " finetune-7b "))
    result = _kubectl(staged, *argv[1:])
    assert result.returncode == 0, result.stderr
    printed = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert printed == annotations(staged, "ml", "finetune-7b")
    assert len(json.loads(printed[f"{PREFIX}actions"])) >= 2  # the old command cut the 2nd
    assert json.loads(printed[f"{PREFIX}evidence"])["container"] == "main"


def test_the_notes_explain_command_runs(staged: LocalCluster, notes: list[str]) -> None:
    command = _line(notes, "gpu-auditor explain ")
    argv = shlex.split(command.replace("NAMESPACE", "etl").replace("POD", "preprocess"))
    result = subprocess.run([str(VENV_BIN / argv[0]), *argv[1:]], capture_output=True,
                            text=True, timeout=60,
                            env={**os.environ, "KUBECONFIG": str(staged.kubeconfig)})
    assert result.returncode == 0, result.stderr
    assert "Diagnosis: host-oom-killed" in result.stdout


def test_the_notes_event_commands_list_the_operators_events(
        staged: LocalCluster, notes: list[str]) -> None:
    cuda = _kubectl(staged, *shlex.split(_line(
        notes, "kubectl get events -A --field-selector reason=CUDAOutOfMemory"))[1:])
    killed = _kubectl(staged, *shlex.split(_line(
        notes, "kubectl get events -A --field-selector reason=OOMKilled"))[1:])
    assert cuda.returncode == 0 and killed.returncode == 0, cuda.stderr + killed.stderr
    assert "finetune-7b" in cuda.stdout and "trainer-0" in cuda.stdout
    assert "preprocess" in killed.stdout and "finetune-7b" not in killed.stdout
