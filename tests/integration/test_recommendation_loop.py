"""Issue 28's loop against the real control plane: kube-apiserver, kube-controller-manager's Job
controller, kwok, the real operator, and `gpu-auditor-webhook --apply-recommendations` served
for real behind the chart's own MutatingWebhookConfiguration.

A Job whose first pod runs out of memory (a real H200 log, evaluation/gpu/logs) gets the
recommendation; with its namespace labelled gpu-auditor.io/apply-recommendation=true the
Job controller's retry is admitted with the setting, an annotation and an Event; the retry
completes: the Job's outcome is fixed and the counter 1, across an operator restart in
between. A second Job whose retry runs out of memory again with the setting: not-fixed, the new
diagnosis says so and recommends nothing, and its third pod gets nothing. Without the label
nothing is injected, and the retry without the setting is not-applied.
"""

from __future__ import annotations

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
from gpu_auditor.admission.apply import APPLY_LABEL
from tests.integration.webhook_support import WebhookProcess, chart_configurations, make_tls

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "evaluation" / "gpu" / "logs"
PREFIX = "gpu-auditor.io/"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
ES = "expandable_segments:True"
CONF = "PYTORCH_CUDA_ALLOC_CONF"
OUTCOMES = "gpu_auditor_recommendation_outcomes_total"


@pytest.fixture(scope="module")
def env(kwok_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    cluster = kwok_cluster
    install_crds(cluster)
    node = f"gpu-{uuid.uuid4().hex[:6]}"
    cluster.create_node(node, gpus=8, labels={"nvidia.com/gpu.present": "true"})
    folder = tmp_path_factory.mktemp("apply")
    tls = make_tls(folder / "tls")
    webhook = WebhookProcess(tls, folder / "webhook.log", "--apply-recommendations",
                             f"--kubeconfig={cluster.kubeconfig}")
    webhook.start()
    configs = [c for c in chart_configurations(
        cluster, webhook.url, tls.ca_pem, "webhook.applyRecommendation.enabled=true",
        "webhook.validation.enabled=false", "webhook.probeInjection.enabled=false")]
    assert [c["metadata"]["name"] for c in configs] == ["gpu-auditor-webhook-apply"]
    admission = client.AdmissionregistrationV1Api(cluster.api_client())
    admission.create_mutating_webhook_configuration(configs[0])
    operator = OperatorProcess(cluster, name="operator-trials").start()
    state = {"cluster": cluster, "node": node, "webhook": webhook, "operator": operator,
             "logs": folder}
    try:
        _wait_until_registered(state)
        yield state
    finally:
        operator.stop()
        webhook.stop()
        admission.delete_mutating_webhook_configuration(configs[0]["metadata"]["name"])


def _core(env: dict[str, Any]) -> client.CoreV1Api:
    return client.CoreV1Api(env["cluster"].api_client())


def namespace(env: dict[str, Any], *, apply: bool) -> str:
    name = f"loop-{uuid.uuid4().hex[:6]}"
    labels = {APPLY_LABEL: "true"} if apply else {}
    _core(env).create_namespace({"metadata": {"name": name, "labels": labels}})
    return name


def _wait_until_registered(env: dict[str, Any]) -> None:
    """The API server picks the configuration up from its informer: dry-run pods in a labelled
    namespace until the webhook counts one."""
    ns = namespace(env, apply=True)
    body = {"metadata": {"name": "ready"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _core(env).create_namespaced_pod(ns, body, dry_run="All")
        if _sample(env["webhook"].metrics(), "gpu_auditor_webhook_admission_requests_total",
                   webhook="apply-namespace", result="skipped"):
            return
        time.sleep(0.2)
    raise AssertionError("the apply webhook was not called within 30 s")


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def make_job(env: dict[str, Any], ns: str, name: str, backoff: int) -> None:
    client.BatchV1Api(env["cluster"].api_client()).create_namespaced_job(ns, {
        "metadata": {"name": name},
        "spec": {"backoffLimit": backoff, "template": {
            # kwok completes a Job's pod at once unless it carries its failure stage's label:
            # "false" keeps each pod running until the test fails or completes it
            "metadata": {"labels": {CHAOS: "false"}},
            "spec": {"nodeName": env["node"], "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    })


def pods_of(env: dict[str, Any], ns: str, job: str) -> list[Any]:
    found = _core(env).list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    return sorted(found, key=lambda p: p.metadata.creation_timestamp)


def running(env: dict[str, Any], ns: str, job: str, count: int) -> Any:
    """The job's `count`-th pod, once it runs."""
    def ready() -> Any:
        found = pods_of(env, ns, job)
        return found[count - 1] if len(found) >= count and \
            found[count - 1].status.phase == "Running" else None

    return env["cluster"].wait(ready, 90, f"pod {count} of {ns}/{job} running")


def fail(env: dict[str, Any], ns: str, pod: str, log: str) -> None:
    """Serve a real log as the container's, then put the pod on kwok's failure stage."""
    path = env["logs"] / f"{ns}-{pod}.log"
    path.write_bytes(cri((LOGS / log).read_bytes()))
    env["cluster"].serve_logs(ns, pod, current=path)
    _core(env).patch_namespaced_pod(pod, ns, {"metadata": {
        "labels": {CHAOS: "true"},
        "annotations": {f"{CHAOS}/reason": "Error", f"{CHAOS}/exit-code": "1",
                        f"{CHAOS}/delay": "500ms", f"{CHAOS}/jitter-delay": "500ms"}}})


def complete(env: dict[str, Any], ns: str, pod: str) -> None:
    """kwok's completion stage takes the pod once it no longer carries the failure label."""
    _core(env).patch_namespaced_pod(pod, ns, {"metadata": {"labels": {CHAOS: None}}})


def job_notes(env: dict[str, Any], ns: str, job: str) -> dict[str, str]:
    found = client.BatchV1Api(env["cluster"].api_client()).read_namespaced_job(job, ns)
    return dict(found.metadata.annotations or {})


def wait_job(env: dict[str, Any], ns: str, job: str, key: str, value: str | None = None
             ) -> dict[str, str]:
    def ready() -> dict[str, str] | None:
        notes = job_notes(env, ns, job)
        return notes if f"{PREFIX}{key}" in notes and (
            value is None or notes[f"{PREFIX}{key}"] == value) else None

    result: dict[str, str] = env["cluster"].wait(ready, 60, f"{ns}/{job} {key}={value}")
    return result


def pod_notes(env: dict[str, Any], ns: str, pod: str) -> dict[str, str]:
    return dict(_core(env).read_namespaced_pod(pod, ns).metadata.annotations or {})


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in (pod.spec.containers[0].env or [])}


def events(env: dict[str, Any], ns: str, reason: str) -> list[Any]:
    return [e for e in _core(env).list_namespaced_event(ns).items if e.reason == reason]


def outcomes(env: dict[str, Any], outcome: str) -> float:
    return _sample(env["operator"].metrics(), OUTCOMES, kind="fragmentation", setting=ES,
                   outcome=outcome)


# -- the loop ----------------------------------------------------------------------------------

def test_the_retry_gets_the_setting_completes_and_the_outcome_is_fixed(
        env: dict[str, Any]) -> None:
    cluster: LocalCluster = env["cluster"]
    ns = namespace(env, apply=True)
    make_job(env, ns, "train", backoff=2)
    first = running(env, ns, "train", 1).metadata.name
    fail(env, ns, first, "frag_pinned__baseline.log")
    notes = wait_job(env, ns, "train", "recommended-alloc-conf")
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES
    assert notes[f"{PREFIX}diagnosis"] == "fragmentation"
    trial = json.loads(notes[f"{PREFIX}recommendation-trial"])
    assert (trial["setting"], trial["failedPod"]) == (ES, f"{ns}/{first}")
    # the Job controller's retry, admitted through the webhook with the setting
    retry = running(env, ns, "train", 2)
    assert env_of(retry) == {CONF: ES}
    applied = retry.metadata.annotations[f"{PREFIX}recommendation-applied"]
    assert applied == (f"main: {CONF}={ES} (recommended on Job train: pod {ns}/{first} ran out "
                       "of memory (fragmentation))")
    [event] = cluster.wait(lambda: events(env, ns, "RecommendationApplied"), 30,
                           "the RecommendationApplied Event")
    assert (event.involved_object.name, event.type) == (retry.metadata.name, "Normal")
    assert event.message == f"Set {applied}"
    # the state is on the objects: an operator restarted here misses nothing
    env["operator"].restart()
    complete(env, ns, retry.metadata.name)
    notes = wait_job(env, ns, "train", "recommendation-outcome", "fixed")
    assert json.loads(notes[f"{PREFIX}recommendation-trial"])["judgedPod"] == \
        f"{ns}/{retry.metadata.name}"
    # the owner is written first, then its Event, then the pod that decided it
    cluster.wait(lambda: pod_notes(env, ns, retry.metadata.name).get(
        f"{PREFIX}recommendation-outcome") == "fixed", 30, "the retry's outcome on the pod")
    assert cluster.wait(lambda: outcomes(env, "fixed") == 1, 30, "the counter at 1")
    [outcome] = cluster.wait(lambda: events(env, ns, "RecommendationOutcome"), 30,
                             "the Job's outcome Event")
    assert (outcome.involved_object.kind, outcome.type) == ("Job", "Normal")
    assert re.match(rf"{ES} \(recommended after {ns}/{first}'s fragmentation\) fixed the "
                    "failure", outcome.message)


def test_a_retry_that_runs_out_of_memory_again_is_not_fixed_and_never_gets_it_again(
        env: dict[str, Any]) -> None:
    cluster: LocalCluster = env["cluster"]
    ns = namespace(env, apply=True)
    before = outcomes(env, "not-fixed")
    make_job(env, ns, "tune", backoff=2)
    first = running(env, ns, "tune", 1).metadata.name
    fail(env, ns, first, "frag_varlen__baseline.log")
    wait_job(env, ns, "tune", "recommended-alloc-conf")
    retry = running(env, ns, "tune", 2)
    assert env_of(retry) == {CONF: ES}
    # the setting applied, the job runs out of memory again (a real H200 run with it)
    fail(env, ns, retry.metadata.name, "capacity_batch__alloc_expandable_segments_True.log")
    notes = wait_job(env, ns, "tune", "recommendation-outcome", "not-fixed")
    assert f"{PREFIX}recommended-alloc-conf" not in notes
    assert json.loads(notes[f"{PREFIX}recommendation-trial"])["rejected"] == [ES]
    retried = pod_notes(env, ns, retry.metadata.name)
    assert retried[f"{PREFIX}diagnosis"] == "capacity"
    assert retried[f"{PREFIX}summary"].endswith(f"({ES} was applied and did not help)")
    assert json.loads(retried[f"{PREFIX}actions"])[0] == (
        f"{CONF} with {ES} was applied to {ns}/{retry.metadata.name} and did not help: it is "
        "not recommended again for Job tune")
    assert f"{PREFIX}recommended-alloc-conf" not in retried
    assert cluster.wait(lambda: outcomes(env, "not-fixed") == before + 1, 30, "counted")
    [outcome] = cluster.wait(lambda: events(env, ns, "RecommendationOutcome"), 30, "Event")
    assert outcome.type == "Warning" and "did not help" in outcome.message
    # and never again for that Job: its third pod is admitted as its template says
    third = running(env, ns, "tune", 3)
    assert env_of(third) == {}
    assert f"{PREFIX}recommendation-applied" not in (third.metadata.annotations or {})


def test_without_the_label_nothing_is_injected_and_the_retry_is_not_applied(
        env: dict[str, Any]) -> None:
    cluster: LocalCluster = env["cluster"]
    ns = namespace(env, apply=False)
    before = outcomes(env, "not-applied")
    make_job(env, ns, "plain", backoff=1)
    first = running(env, ns, "plain", 1).metadata.name
    fail(env, ns, first, "frag_pinned__baseline.log")
    wait_job(env, ns, "plain", "recommended-alloc-conf")
    retry = running(env, ns, "plain", 2)
    assert env_of(retry) == {}
    assert f"{PREFIX}recommendation-applied" not in (retry.metadata.annotations or {})
    notes = wait_job(env, ns, "plain", "recommendation-outcome", "not-applied")
    assert notes[f"{PREFIX}recommended-alloc-conf"] == ES  # still recommended: never tried
    assert cluster.wait(lambda: outcomes(env, "not-applied") == before + 1, 30, "counted")
    assert not events(env, ns, "RecommendationApplied")
