"""The operator against a real API server: a silent leak seen through the node's memory series
(issue 10) and a diagnosis built from the OOM probe's record in the termination message (17).

The leak pods run on a Node object no kubelet or kwok manages, and their status is written here
as a kubelet would write it: kwok's stages set a failed run's `startedAt` equal to its
`finishedAt`, and the operator uses only the series points of the failed run (between the two),
so a kwok-failed pod could never show a series. Their termination message holds the log's tail,
as `terminationMessagePolicy: FallbackToLogsOnError` makes the kubelet write it. The probe pod is
a kwok pod whose restarted container's last state holds the probe's record, with the OOM in its
previous log, as a real job with the probe loaded leaves it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
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
H200_LOGS = ROOT / "evaluation/gpu/logs"
PREFIX = "gpu-auditor.io/"
RESTART = "stage.gpu-auditor.io"
GIB = 2**30
NO_EVICTION = [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists",
                "effect": "NoExecute"} for taint in ("not-ready", "unreachable")]
"""The plain node never reports Ready: its pods stay however long the module runs."""


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    install_crds(kwok_cluster)
    core = client.CoreV1Api(kwok_cluster.api_client())
    kwok_node = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(kwok_node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    plain_node = f"gpu-plain-{uuid.uuid4().hex[:6]}"  # no kubelet, no kwok: status is ours
    core.create_node({"metadata": {"name": plain_node,
                                   "labels": {"nvidia.com/gpu.present": "true"}}})
    operator = OperatorProcess(kwok_cluster).start()
    yield {"cluster": kwok_cluster, "kwok_node": kwok_node, "plain_node": plain_node,
           "operator": operator}
    operator.stop()


@pytest.fixture
def ns(env: dict[str, Any]) -> str:
    name = f"series-{uuid.uuid4().hex[:6]}"
    _core(env).create_namespace({"metadata": {"name": name}})
    return name


def _core(env: dict[str, Any]) -> client.CoreV1Api:
    return client.CoreV1Api(env["cluster"].api_client())


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_report(env: dict[str, Any], node: str, entries: list[dict[str, Any]]) -> None:
    api = client.CustomObjectsApi(env["cluster"].api_client())
    body = {"apiVersion": "gpu-auditor.io/v1alpha1", "kind": "GPUNodeReport",
            "metadata": {"name": node},
            "spec": {"nodeName": node, "generatedAt": _rfc3339(time.time()), "nvmlUp": True,
                     "kubeletUp": True,
                     "gpus": [{"uuid": f"GPU-{node}", "index": 0, "model": "NVIDIA H200",
                               "memoryTotalBytes": 150_109_880_320,
                               "memoryUsedBytes": 139 * GIB, "memoryFreeBytes": GIB,
                               "pods": entries}]}}
    try:
        existing = api.get_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports",
                                                 node)
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        api.replace_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", node,
                                          body)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        api.create_cluster_custom_object("gpu-auditor.io", "v1alpha1", "gpunodereports", body)


def _entry(ns: str, pod: str, uid: str, series: dict[str, list[Any]]) -> dict[str, Any]:
    return {"namespace": ns, "pod": pod, "podUID": uid, "container": "main",
            "allocated": "true", "bytes": series["bytes"][-1], "pids": [4242],
            "growthBytesPerSecond": None, "memorySeries": series}


def _series(start: float, end: float, first: int, last: int, n: int = 24) -> dict[str, Any]:
    step = (end - start) / (n - 1)
    return {"times": [round(start + step * i, 3) for i in range(n)],
            "bytes": [first + (last - first) * i // (n - 1) for i in range(n)]}


def _running_pod(env: dict[str, Any], ns: str, name: str) -> str:
    pod = _core(env).create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"nodeName": env["plain_node"], "tolerations": NO_EVICTION,
                 "containers": [{"name": "main", "image": "trainer:latest",
                                 "terminationMessagePolicy": "FallbackToLogsOnError",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })
    return str(pod.metadata.uid)


def _fail(env: dict[str, Any], ns: str, name: str, started: float, finished: float,
          message: str) -> None:
    """The container's end as the kubelet writes it: exit 1, the log's tail as the message."""
    _core(env).patch_namespaced_pod_status(name, ns, {"status": {
        "phase": "Failed",
        "containerStatuses": [{
            "name": "main", "image": "trainer:latest", "imageID": "", "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message,
                                     "startedAt": _rfc3339(started),
                                     "finishedAt": _rfc3339(finished)}}}]}})


def _silent_oom_tail() -> str:
    """A real H200 OOM of a job that printed no memory figure, as the kubelet keeps it."""
    return (H200_LOGS / "capacity_batch__baseline.log").read_text()[-4096:]


def _annotated(env: dict[str, Any], ns: str, name: str, timeout: float = 60) -> dict[str, str]:
    core = _core(env)

    def notes() -> dict[str, str] | None:
        found = core.read_namespaced_pod(name, ns).metadata.annotations or {}
        return found if f"{PREFIX}diagnosis" in found else None

    result: dict[str, str] = env["cluster"].wait(notes, timeout, f"{ns}/{name} diagnosis")
    return result


def _leaking_job(env: dict[str, Any], ns: str, name: str, *, first: int, last: int,
                 report_node: str | None = None) -> dict[str, str]:
    """A job that ran 10 minutes, whose node report showed its memory from `first` to `last`
    bytes, and that then died of a CUDA OOM whose message shows only a full GPU."""
    uid = _running_pod(env, ns, name)
    now = time.time()
    started, finished = now - 600, now
    series = _series(started + 5, finished - 3, first, last)
    _write_report(env, report_node or env["plain_node"], [_entry(ns, name, uid, series)])
    time.sleep(1)  # the report reaches the operator's watch before the failure does
    _fail(env, ns, name, started, finished, _silent_oom_tail())
    return _annotated(env, ns, name)


def test_a_job_that_leaks_silently_is_diagnosed_as_a_leak_from_the_nodes_series(
    env: dict[str, Any], ns: str
) -> None:
    notes = _leaking_job(env, ns, "leaky", first=8 * GIB, last=138 * GIB)
    assert notes[f"{PREFIX}diagnosis"] == "leak"
    assert "rose steadily from 8.00 GiB to 138.00 GiB over 24 samples" in notes[
        f"{PREFIX}summary"]
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["source"] == "termination-message"
    assert evidence["memorySeriesPoints"] == 24
    assert evidence["growth"]["source"] == "samples"
    assert f"{PREFIX}recommended-alloc-conf" not in notes


def test_a_job_whose_series_is_flat_is_not_called_a_leak(env: dict[str, Any], ns: str) -> None:
    notes = _leaking_job(env, ns, "steady", first=138 * GIB, last=138 * GIB)
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["memorySeriesPoints"] == 24 and "growth" not in evidence


def test_a_rising_series_in_another_nodes_report_is_not_evidence(
    env: dict[str, Any], ns: str
) -> None:
    # a report of the kwok node claims the pod (its UID, its name) with a rising series
    notes = _leaking_job(env, ns, "elsewhere", first=8 * GIB, last=138 * GIB,
                         report_node=env["kwok_node"])
    assert notes[f"{PREFIX}diagnosis"] == "capacity"
    assert "memorySeriesPoints" not in json.loads(notes[f"{PREFIX}evidence"])


def test_a_malformed_series_is_ignored_counted_and_harms_nothing(
    env: dict[str, Any], ns: str
) -> None:
    node = env["plain_node"]
    uid = _running_pod(env, ns, "forged")
    forged = {"times": [3.0, 2.0, 1.0], "bytes": [GIB, 2 * GIB, 3 * GIB]}  # time runs backwards
    _write_report(env, node, [_entry(ns, "forged", uid, forged)])
    env["cluster"].wait(lambda: re.search(
        r'gpu_auditor_operator_report_items_ignored_total\{reason="malformed-series"\} [1-9]',
        env["operator"].metrics()), 30, "malformed series counted")
    now = time.time()
    _fail(env, ns, "forged", now - 600, now, _silent_oom_tail())
    assert _annotated(env, ns, "forged")[f"{PREFIX}diagnosis"] == "capacity"
    assert env["operator"].component.running


def _record(name: str) -> str:
    return (H200_LOGS / "probe" / f"{name}__baseline.probe").read_text().strip()


def _log_without_record(name: str) -> bytes:
    text = (H200_LOGS / "probe" / f"{name}__baseline.log").read_text()
    return cri("\n".join(ln for ln in text.splitlines() if "gpu-auditor-probe-record" not in ln))


def test_a_probe_record_in_the_termination_message_builds_the_diagnosis(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    """A real record captured on the H200 (frag_pinned: 161 segments pinned by 8 MiB blocks),
    the job's log without the probe's own stderr line: the record comes from the message."""
    record = _record("frag_pinned")
    assert len(record.encode()) <= 4096
    previous = tmp_path / "previous.log"
    previous.write_bytes(_log_without_record("frag_pinned"))
    current = tmp_path / "current.log"
    current.write_bytes(cri("restarted"))
    _core(env).create_namespaced_pod(ns, {
        "metadata": {"name": "probed", "labels": {f"{RESTART}/restart-after-failure": "true"},
                     "annotations": {f"{RESTART}/reason": "Error", f"{RESTART}/exit-code": "1",
                                     f"{RESTART}/delay": "2s", f"{RESTART}/message": record}},
        "spec": {"nodeName": env["kwok_node"], "restartPolicy": "Always",
                 "containers": [{"name": "main", "image": "trainer:latest",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })
    env["cluster"].serve_logs(ns, "probed", current=current, previous=previous)
    notes = _annotated(env, ns, "probed")
    status = _core(env).read_namespaced_pod("probed", ns).status.container_statuses[0]
    assert status.last_state.terminated.message == record  # the API holds the record as written
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes[f"{PREFIX}recommended-alloc-conf"] == "expandable_segments:True"
    assert "(probe record)" in notes[f"{PREFIX}summary"]
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    assert evidence["source"] == "log"
    assert evidence["probe"] == {"source": "termination-message", "used": True, "status": "ok",
                                 "verdict": "fragmentation", "inferenceKind": "fragmentation",
                                 "disagrees": False}
    assert re.search(r'gpu_auditor_operator_probe_records_total\{result="used"\} [1-9]',
                     env["operator"].metrics())
