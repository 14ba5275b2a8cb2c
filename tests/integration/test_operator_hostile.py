"""The operator against hostile input, on a real API server with kwok: forged owner references,
`../` names, node reports that name pods elsewhere, a 300 kB env value, a diagnosis that raises
or never returns.

The operator here is the real one, started with a diagnosis test seam (`main(...,
diagnose_function=...)`): a module written to a temporary folder that passes every log to the
real core, except logs carrying SEAM-RAISE (it raises) or SEAM-HANG (it spins, holding the GIL).
Each call appends a line to a file, so the test counts how often a log was diagnosed.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import sys
import textwrap
import urllib.request
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
GIB = 2**30
BUDGET = 3

SEAM = '''
import os
import re
from gpu_auditor.diagnosis import diagnose as real


def diagnose(text, **options):
    data = text.encode() if isinstance(text, str) else text
    markers = re.findall(rb"SEAM-[A-Z]+ [0-9a-f]{32}", data)
    with open(os.environ["HOSTILE_SEAM_CALLS"], "a") as calls:
        calls.write(b" ".join(markers).decode() + "\\n")
    if b"SEAM-RAISE" in data:
        raise RuntimeError("injected by the test seam")
    if b"SEAM-HANG" in data:
        while True:
            pass
    return real(text, **options)
'''
LAUNCH = ("import sys; from gpu_auditor.controller.main import main; "
          "sys.exit(main(sys.argv[1:], diagnose_function='hostile_seam:diagnose'))")


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    install_crds(kwok_cluster)
    here, there = f"gpu-{uuid.uuid4().hex[:6]}", f"gpu-{uuid.uuid4().hex[:6]}"
    for node in (here, there):
        kwok_cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    seam_dir = tmp_path_factory.mktemp("seam")
    (seam_dir / "hostile_seam.py").write_text(textwrap.dedent(SEAM))
    calls = seam_dir / "calls"
    calls.touch()
    operator = OperatorProcess(kwok_cluster, f"--diagnosis-timeout={BUDGET}",
                               name="operator-hostile")
    operator.component.argv = [sys.executable, "-c", LAUNCH, *operator.argv[3:]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(seam_dir))  # the worker processes import the seam
        patch.setenv("HOSTILE_SEAM_CALLS", str(calls))
        operator.start()
        yield {"cluster": kwok_cluster, "node": here, "other_node": there,
               "operator": operator, "calls": calls}
        operator.stop()


def _api(env: dict[str, Any]) -> client.ApiClient:
    return env["cluster"].api_client()


def _core(env: dict[str, Any]) -> client.CoreV1Api:
    return client.CoreV1Api(_api(env))


@pytest.fixture
def ns(env: dict[str, Any]) -> str:
    name = f"hostile-{uuid.uuid4().hex[:6]}"
    _core(env).create_namespace({"metadata": {"name": name}})
    return name


def corpus_log(name: str) -> str:
    shared = ROOT.parent / "shared" / "corpus" / "oom" / name
    return (shared if shared.exists() else FIXTURES / name).read_text()


def failing_pod(env: dict[str, Any], ns: str, name: str, *, reason: str = "Error",
                exit_code: int = 1, log: str | None = None, tmp_path: Path | None = None,
                container: dict[str, Any] | None = None,
                owners: list[dict[str, Any]] | None = None) -> str:
    """A pod on the GPU node that kwok fails after 1.5 s, with `log` as its log; its UID."""
    spec_container = {"name": "main", "image": "trainer:latest",
                      "resources": {"limits": {"nvidia.com/gpu": "1"}}, **(container or {})}
    metadata: dict[str, Any] = {
        "name": name, "labels": {CHAOS: "true"},
        "annotations": {f"{CHAOS}/reason": reason, f"{CHAOS}/exit-code": str(exit_code),
                        f"{CHAOS}/delay": "1500ms"}}
    if owners:
        metadata["ownerReferences"] = owners
    pod = _core(env).create_namespaced_pod(ns, {
        "metadata": metadata,
        "spec": {"nodeName": env["node"], "containers": [spec_container],
                 "restartPolicy": "Never"}})
    if log is not None:
        assert tmp_path is not None
        path = tmp_path / f"{name}.log"
        path.write_bytes(cri(log))
        env["cluster"].serve_logs(ns, name, current=path)
    return str(pod.metadata.uid)


def running_pod(env: dict[str, Any], ns: str, name: str, node: str) -> str:
    pod = _core(env).create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "notebook"}]}})
    return str(pod.metadata.uid)


def wait_annotated(env: dict[str, Any], ns: str, name: str, key: str = "diagnosis",
                   timeout: float = 60) -> dict[str, str]:
    core = _core(env)

    def annotations() -> dict[str, str] | None:
        found = core.read_namespaced_pod(name, ns).metadata.annotations or {}
        return found if f"{PREFIX}{key}" in found else None

    result: dict[str, str] = env["cluster"].wait(annotations, timeout, f"{ns}/{name} {key}")
    return result


def metric(env: dict[str, Any], name: str, **labels: str) -> float:
    """One sample of the operator's /metrics (0 when absent)."""
    text = env["operator"].metrics()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and match.group(1) == name:
            found = ",".join(sorted((match.group(2) or "").split(",")))
            if found == wanted:
                return float(match.group(3))
    return 0.0


def wait_metric(env: dict[str, Any], name: str, at_least: float, **labels: str) -> float:
    value: float = env["cluster"].wait(
        lambda: (v := metric(env, name, **labels)) >= at_least and v, 60,
        f"{name}{labels} >= {at_least}")
    return value


def our_events(env: dict[str, Any], ns: str, pod: str) -> list[Any]:
    events = _core(env).list_namespaced_event(ns).items
    return [e for e in events if e.involved_object.name == pod
            and e.source and e.source.component == "gpu-auditor"]


def ours(annotations: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (annotations or {}).items() if k.startswith(PREFIX)}


# -- owner references ------------------------------------------------------------------------


def _settled_job(env: dict[str, Any], ns: str, name: str) -> Any:
    """A suspended Job (no pods of its own), once its controller has written its status."""
    batch = client.BatchV1Api(_api(env))
    batch.create_namespaced_job(ns, {
        "metadata": {"name": name, "annotations": {"team": "ml"}},
        "spec": {"suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}}})

    def settled() -> Any:
        job = batch.read_namespaced_job(name, ns)
        conditions = (job.status.conditions or []) if job.status else []
        return job if any(c.type == "Suspended" for c in conditions) else None

    return env["cluster"].wait(settled, 60, f"job {name} settled")


def _anchor(env: dict[str, Any], ns: str) -> dict[str, Any]:
    """A real owner next to the forged one, so the garbage collector keeps the pod."""
    cm = _core(env).create_namespaced_config_map(ns, {"metadata": {"name": "anchor"}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": cm.metadata.uid}


@contextlib.contextmanager
def garbage_collector_paused(cluster: LocalCluster) -> Iterator[None]:
    """kube-controller-manager stopped, then started again (same flags, same port).

    Its garbage collector strips an owner reference to an object that does not exist with that
    UID (a forged UID, a `../` or `a/b` name: all three gone 0.25 s after the pod's creation,
    measured on this control plane), long before kwok fails the pod: with it running, the
    operator would never see them. A collector that is slow, busy or disabled leaves them there,
    and the operator must not trust them then either."""
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


@pytest.mark.parametrize(("owner_name", "forged_uid", "reason"), [
    ("victim", True, "uid-mismatch"),
    ("victim", False, "not-selected"),  # the Job's real UID, none of its pods' labels
    ("../victim", False, "invalid-reference"),
    ("../../../../batch/v1/namespaces/NS/jobs/victim", False, "invalid-reference"),
])
def test_a_forged_owner_reference_leaves_the_owner_unchanged(
    env: dict[str, Any], ns: str, owner_name: str, forged_uid: bool, reason: str
) -> None:
    job = _settled_job(env, ns, "victim")
    before = metric(env, "gpu_auditor_operator_owner_writes_refused_total", reason=reason)
    uid = str(uuid.uuid4()) if forged_uid else job.metadata.uid
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner_name.replace("NS", ns),
               "uid": uid, "controller": True}, _anchor(env, ns)]
    with garbage_collector_paused(env["cluster"]):
        failing_pod(env, ns, "forger", reason="OOMKilled", exit_code=137, owners=owners)
        assert wait_annotated(env, ns, "forger")[f"{PREFIX}diagnosis"] == "host-oom-killed"
        wait_metric(env, "gpu_auditor_operator_owner_writes_refused_total", before + 1,
                    reason=reason)
        after = client.BatchV1Api(_api(env)).read_namespaced_job("victim", ns)
    assert after.metadata.resource_version == job.metadata.resource_version
    assert after.metadata.annotations == {"team": "ml"}
    assert all(not (f.manager or "").startswith("gpu-auditor")
               for f in after.metadata.managed_fields or [])


# -- node reports ----------------------------------------------------------------------------


def _report(env: dict[str, Any], node: str, spec: dict[str, Any]) -> None:
    api = client.CustomObjectsApi(_api(env))
    body = {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": node},
            "spec": {"nodeName": node, "generatedAt": "2026-11-29T10:00:00Z", **spec}}
    try:
        existing = api.get_cluster_custom_object("gpu-auditor.io", "v1alpha1",
                                                 "gpunodereports", node)
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        api.replace_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports",
                                          node, body)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        api.create_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", body)


def _entry(ns: str, pod: str, uid: str) -> dict[str, Any]:
    return {"namespace": ns, "pod": pod, "podUID": uid, "container": "main",
            "bytes": 60 * GIB, "allocated": "false", "pids": [11]}


def test_a_report_naming_a_pod_on_another_node_changes_nothing_there(
    env: dict[str, Any], ns: str
) -> None:
    system = f"sys-{uuid.uuid4().hex[:6]}"
    _core(env).create_namespace({"metadata": {"name": system}})
    elsewhere_uid = running_pod(env, system, "coredns", env["other_node"])
    local_uid = running_pod(env, ns, "local", env["node"])
    before = {r: metric(env, "gpu_auditor_operator_report_items_ignored_total", reason=r)
              for r in ("other-node", "malformed-pod-ref")}
    bare_uid = str(uuid.uuid4())
    _report(env, env["node"], {
        "gpus": [{"uuid": "GPU-h1", "index": 0, "memoryTotalBytes": 140 * GIB,
                  "memoryFreeBytes": GIB, "pods": [_entry(ns, "local", local_uid),
                                                   _entry(system, "coredns", elsewhere_uid)]}],
        "findings": [{"kind": "unintended-sharing", "gpuUUID": "GPU-h1",
                      "pods": [f"{ns}/local", f"{system}/coredns", bare_uid,
                               f"{system}/../../nodes/x"],
                      "message": "2 pods on GPU-h1"}]})
    assert wait_annotated(env, ns, "local", "gpu-shared-with")[f"{PREFIX}gpu-shared-with"] == (
        f"{system}/coredns")
    wait_metric(env, "gpu_auditor_operator_report_items_ignored_total", before["other-node"] + 1,
                reason="other-node")
    wait_metric(env, "gpu_auditor_operator_report_items_ignored_total",
                before["malformed-pod-ref"] + 2,
                reason="malformed-pod-ref")
    coredns = _core(env).read_namespaced_pod("coredns", system)
    assert ours(coredns.metadata.annotations) == {}
    assert our_events(env, system, "coredns") == []


def test_a_report_whose_name_is_not_its_node_is_ignored(env: dict[str, Any], ns: str) -> None:
    local_uid = running_pod(env, ns, "decoy", env["node"])
    before = metric(env, "gpu_auditor_operator_report_items_ignored_total", reason="name-mismatch")
    api = client.CustomObjectsApi(_api(env))
    api.create_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", {
        "apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
        "metadata": {"name": f"fake-{uuid.uuid4().hex[:6]}"},
        "spec": {"nodeName": env["node"], "generatedAt": "2026-11-29T10:00:00Z",
                 "gpus": [{"uuid": "GPU-h2", "index": 0,
                           "pods": [_entry(ns, "decoy", local_uid),
                                    _entry(ns, "other", str(uuid.uuid4()))]}],
                 "findings": [{"kind": "unintended-sharing", "gpuUUID": "GPU-h2",
                               "pods": [f"{ns}/decoy", f"{ns}/other"]}]}})
    wait_metric(env, "gpu_auditor_operator_report_items_ignored_total", before + 1,
                reason="name-mismatch")
    assert ours(_core(env).read_namespaced_pod("decoy", ns).metadata.annotations) == {}


# -- bounded annotations ---------------------------------------------------------------------


def test_a_300_kb_env_value_still_gets_a_valid_bounded_annotation(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    value = "garbage_collection_threshold:0.6," + "x" * 299_967
    failing_pod(env, ns, "bloated", log=corpus_log("frag_pinned_segments_fullgpu.log"),
                tmp_path=tmp_path,
                container={"env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}]})
    notes = ours(wait_annotated(env, ns, "bloated"))
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["currentAllocConf"] == ("PYTORCH_CUDA_ALLOC_CONF not read: 300000 "
                                            "characters, over the 1024-character limit")
    assert all(isinstance(a, str) for a in json.loads(notes[f"{PREFIX}actions"]))
    assert sum(len(k) + len(v.encode()) for k, v in notes.items()) <= 16 * 1024
    (event,) = env["cluster"].wait(lambda: our_events(env, ns, "bloated"), 30, "event")
    assert "xxxx" not in event.message and len(event.message) <= 1024


# -- a diagnosis that fails ------------------------------------------------------------------


def _seam_calls(env: dict[str, Any], marker: str) -> int:
    return sum(marker in line for line in env["calls"].read_text().splitlines())


@pytest.mark.parametrize(("marker", "reason", "said"), [
    ("SEAM-RAISE", "error", "main/0: error: RuntimeError: injected by the test seam"),
    ("SEAM-HANG", "timeout", f"main/0: timeout: no answer within the {BUDGET} s budget"),
])
def test_a_diagnosis_that_raises_or_overruns_is_recorded_once_and_not_retried_hot(
    env: dict[str, Any], ns: str, tmp_path: Path, marker: str, reason: str, said: str
) -> None:
    marker_line = f"{marker} {uuid.uuid4().hex}"
    before = metric(env, "gpu_auditor_operator_diagnosis_failures_total", reason=reason)
    failing_pod(env, ns, "doomed", log=f"step 1\n{marker_line}\n", tmp_path=tmp_path)
    notes = wait_annotated(env, ns, "doomed", "diagnosis-failed")
    assert notes[f"{PREFIX}diagnosis-failed"] == said
    assert notes[f"{PREFIX}diagnosed-key"] == "main/0"
    assert f"{PREFIX}diagnosis" not in notes
    # More events of that pod (three label changes), then a marker pod created after them: once
    # the marker is diagnosed, the watch has delivered the doomed pod's events before it.
    core = _core(env)
    for i in range(3):
        core.patch_namespaced_pod("doomed", ns, {"metadata": {"labels": {"poke": str(i)}}})
    failing_pod(env, ns, "marker", reason="OOMKilled", exit_code=137)
    wait_annotated(env, ns, "marker")
    assert metric(env, "gpu_auditor_operator_diagnosis_failures_total", reason=reason) == before + 1
    assert _seam_calls(env, marker_line) == 1
    assert env["operator"].component.running


def test_after_a_restart_a_failed_diagnosis_is_not_started_again(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    marker_line = f"SEAM-RAISE {uuid.uuid4().hex}"
    failing_pod(env, ns, "doomed", log=f"{marker_line}\n", tmp_path=tmp_path)
    wait_annotated(env, ns, "doomed", "diagnosis-failed")
    env["operator"].restart()  # a fresh process: kopf lists every pod again
    failing_pod(env, ns, "marker", reason="OOMKilled", exit_code=137)
    wait_annotated(env, ns, "marker")
    assert _seam_calls(env, marker_line) == 1
    assert metric(env, "gpu_auditor_operator_diagnosis_failures_total", reason="error") == 0
