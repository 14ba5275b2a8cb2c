"""Negative tests that prove the operator examined the pod before the test says it wrote nothing
(issue 18): each waits for the sign that the pod was looked at (a line of the operator's log, a
request counter), never for nothing to happen, and each has the positive twin that differs by
the one fact under test.

- an ignored pod: the same pod, its label removed, is diagnosed (the label alone kept it out);
- a pod deleted mid-diagnosis: its failed log read and the retry that found it gone are both in
  the operator's log;
- a log of binary garbage: the operator's log-read counter rose for it, and a log holding a real
  OOM served the same way is diagnosed.
"""

from __future__ import annotations

import os
import re
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


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    install_crds(kwok_cluster)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    kwok_cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    operator = OperatorProcess(kwok_cluster, name="operator-examined").start()
    yield {"cluster": kwok_cluster, "node": node, "operator": operator}
    operator.stop()


@pytest.fixture
def ns(env: dict[str, Any]) -> str:
    name = f"ex-{uuid.uuid4().hex[:6]}"
    core(env).create_namespace({"metadata": {"name": name}})
    return name


def core(env: dict[str, Any]) -> client.CoreV1Api:
    return client.CoreV1Api(env["cluster"].api_client())


def corpus_log(name: str) -> bytes:
    shared = ROOT.parent / "shared" / "corpus" / "oom" / name
    return (shared if shared.exists() else FIXTURES / name).read_bytes()


def serve(env: dict[str, Any], tmp_path: Path, ns: str, pod: str, data: bytes) -> None:
    path = tmp_path / f"{pod}.log"
    path.write_bytes(cri(data))
    env["cluster"].serve_logs(ns, pod, current=path, previous=None)


def failing_pod(env: dict[str, Any], ns: str, name: str, *, reason: str = "Error",
                exit_code: int = 1, labels: dict[str, str] | None = None,
                delay: str = "1500ms") -> None:  # fmt: skip
    core(env).create_namespaced_pod(ns, {
        "metadata": {"name": name, "labels": {CHAOS: "true", **(labels or {})},
                     "annotations": {f"{CHAOS}/reason": reason,
                                     f"{CHAOS}/exit-code": str(exit_code),
                                     f"{CHAOS}/delay": delay}},
        "spec": {"nodeName": env["node"], "restartPolicy": "Never", "containers": [
            {"name": "main", "image": "trainer:latest",
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    })  # fmt: skip


def notes(env: dict[str, Any], ns: str, name: str) -> dict[str, str]:
    found = core(env).read_namespaced_pod(name, ns).metadata.annotations or {}
    return {k: v for k, v in found.items() if k.startswith(PREFIX)}


def wait_annotated(env: dict[str, Any], ns: str, name: str) -> dict[str, str]:
    found: dict[str, str] = env["cluster"].wait(
        lambda: (n := notes(env, ns, name)).get(f"{PREFIX}diagnosis") and n, 60,
        f"{ns}/{name} diagnosed")  # fmt: skip
    return found


def operator_log(env: dict[str, Any]) -> str:
    path: Path = env["operator"].component.log_path
    return path.read_text(errors="replace")


def wait_log(env: dict[str, Any], pattern: str) -> str:
    """The first line of the operator's log that matches."""
    regex = re.compile(pattern)
    line: str = env["cluster"].wait(
        lambda: next((ln for ln in operator_log(env).splitlines() if regex.search(ln)), None),
        60, f"operator log line /{pattern}/")  # fmt: skip
    return line


def metric(env: dict[str, Any], name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in env["operator"].metrics().splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        labelled = match and ",".join(sorted((match.group(2) or "").split(","))) == wanted
        if match and labelled and match.group(1) == name:
            return float(match.group(3))
    return 0.0


def our_events(env: dict[str, Any], ns: str, pod: str) -> list[Any]:
    return [e for e in core(env).list_namespaced_event(ns).items
            if e.involved_object.name == pod and e.source
            and e.source.component == "gpu-auditor"]  # fmt: skip


def test_an_ignored_pod_is_left_alone_until_its_label_goes(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    serve(env, tmp_path, ns, "skipme", corpus_log("frag_pinned_segments.log"))
    failing_pod(env, ns, "skipme", labels={"gpu-auditor.io/ignore": "true"}, delay="200ms")
    env["cluster"].wait(
        lambda: core(env).read_namespaced_pod("skipme", ns).status.phase == "Failed",
        30, "skipme failed")  # fmt: skip
    failing_pod(env, ns, "marker", reason="OOMKilled", exit_code=137, delay="200ms")
    wait_annotated(env, ns, "marker")
    assert notes(env, ns, "skipme") == {}
    assert f"{ns}/skipme" not in operator_log(env)  # the watch never handed it over
    # the twin: the same pod, the same log, without the label, is diagnosed
    core(env).patch_namespaced_pod(
        "skipme", ns, {"metadata": {"labels": {"gpu-auditor.io/ignore": None}}})
    assert wait_annotated(env, ns, "skipme")[f"{PREFIX}diagnosis"] == "fragmentation"


def test_a_pod_deleted_mid_diagnosis_was_read_then_found_gone(
    env: dict[str, Any], ns: str
) -> None:
    failing_pod(env, ns, "ephemeral", delay="200ms")  # no log served: the read fails
    wait_log(env, rf"log of {ns}/ephemeral \[main\] unavailable")  # examined, retry scheduled
    core(env).delete_namespaced_pod("ephemeral", ns, grace_period_seconds=0)
    wait_log(env, rf"retry of {ns}/ephemeral: ")  # the retry looked and found it gone
    assert our_events(env, ns, "ephemeral") == []
    failing_pod(env, ns, "survivor", reason="OOMKilled", exit_code=137, delay="200ms")
    assert wait_annotated(env, ns, "survivor")[f"{PREFIX}diagnosis"] == "host-oom-killed"
    assert env["operator"].component.running


def test_a_log_of_binary_garbage_was_read_and_writes_nothing(
    env: dict[str, Any], ns: str, tmp_path: Path
) -> None:
    reads = metric(env, "gpu_auditor_operator_api_requests_total", verb="get_log")
    serve(env, tmp_path, ns, "garbage", os.urandom(256 * 1024).replace(b"\n", b""))
    failing_pod(env, ns, "garbage", delay="200ms")
    env["cluster"].wait(
        lambda: metric(env, "gpu_auditor_operator_api_requests_total", verb="get_log") > reads,
        60, "the garbage log read")  # fmt: skip
    # the twin, served the same way after it: a real OOM in the log is diagnosed
    serve(env, tmp_path, ns, "twin", corpus_log("frag_pinned_segments.log"))
    failing_pod(env, ns, "twin", delay="200ms")
    assert wait_annotated(env, ns, "twin")[f"{PREFIX}diagnosis"] == "fragmentation"
    assert notes(env, ns, "garbage") == {}
    assert our_events(env, ns, "garbage") == []
    assert metric(env, "gpu_auditor_operator_diagnosis_failures_total", reason="error") == 0
    assert env["operator"].component.running
