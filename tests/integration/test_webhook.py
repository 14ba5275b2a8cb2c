"""The admission webhooks against the real kube-apiserver of the local control plane: the
chart's own webhook configurations (rules, selectors, failurePolicy, timeout), registered with
the test CA and pointed at `gpu-auditor-webhook` served on loopback.

Issue 15's "done when": a Deployment with `expandable_segment:True` is created and the API
response carries our warning; in a namespace opted into deny it is refused with the same text;
with the webhook down it is still created; valid settings get no warning. Issue 17: the probe
is injected only into pods (or namespaces) labelled for it.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.localcluster import LocalCluster
from gpu_auditor.admission.inject import PROBE_DIR, PROBE_LABEL, VOLUME
from gpu_auditor.admission.review import CHECK_LABEL
from tests.integration.webhook_support import (
    PROBE_IMAGE,
    RELEASE_NAMESPACE,
    WebhookProcess,
    chart_configurations,
    make_tls,
)

pytestmark = pytest.mark.integration

BAD = "expandable_segment:True"
OUR_WARNING = ('gpu-auditor: container "train": PYTORCH_CUDA_ALLOC_CONF: Unrecognized key '
               "'expandable_segment' in Accelerator allocator config.; did you mean "
               "expandable_segments?")


@pytest.fixture(scope="module")
def webhook(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[WebhookProcess]:
    folder = tmp_path_factory.mktemp("webhook")
    tls = make_tls(folder / "tls")
    server = WebhookProcess(tls, folder / "webhook.log", f"--probe-image={PROBE_IMAGE}")
    server.start()
    api = client.AdmissionregistrationV1Api(cluster.api_client())
    configs = chart_configurations(cluster, server.url, tls.ca_pem)
    assert {c["kind"] for c in configs} == {"ValidatingWebhookConfiguration",
                                            "MutatingWebhookConfiguration"}
    for config in configs:
        if config["kind"] == "ValidatingWebhookConfiguration":
            api.create_validating_webhook_configuration(config)
        else:
            api.create_mutating_webhook_configuration(config)
    core = client.CoreV1Api(cluster.api_client())
    for name in (RELEASE_NAMESPACE, "webhook-ready"):
        core.create_namespace({"metadata": {"name": name}})
    _wait_until_registered(cluster)
    try:
        yield server
    finally:
        server.stop()
        for config in configs:
            name = config["metadata"]["name"]
            if config["kind"] == "ValidatingWebhookConfiguration":
                api.delete_validating_webhook_configuration(name)
            else:
                api.delete_mutating_webhook_configuration(name)


def _wait_until_registered(cluster: LocalCluster) -> None:
    """The API server picks a new configuration up from its informer: dry-run until both the
    validating and the mutating webhook answer."""
    apps = client.AppsV1Api(cluster.api_client())
    core = client.CoreV1Api(cluster.api_client())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, _, headers = apps.create_namespaced_deployment_with_http_info(
            "webhook-ready", deployment("probe", BAD), dry_run="All")
        pod = core.create_namespaced_pod("webhook-ready", pod_body("probe", {PROBE_LABEL: "true"}),
                                         dry_run="All")
        if warnings(headers) and pod.spec.init_containers:
            return
        time.sleep(0.2)
    raise AssertionError("the webhooks were not called within 30 s")


def deployment(name: str, value: str | None, image: str = "registry.example/train:1"
               ) -> dict[str, Any]:
    env = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": value}] if value is not None else []
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                     {"name": "train", "image": image, "env": env}]}}},
    }


def pod_body(name: str, labels: dict[str, str] | None = None,
             env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "train", "image": "registry.example/train:1",
                                     "env": env or []}]}}


def warnings(headers: Any) -> list[str]:
    """Our warnings in the response's Warning headers (`299 - "text"`, quotes escaped)."""
    raw = headers.get("Warning", "") if headers else ""
    texts = re.findall(r'299 - "((?:[^"\\]|\\.)*)"', raw)
    return [t.replace('\\"', '"').replace("\\\\", "\\") for t in texts
            if t.startswith("gpu-auditor: ")]


def namespace(cluster: LocalCluster, labels: dict[str, str] | None = None) -> str:
    name = f"wh-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(cluster.api_client()).create_namespace(
        {"metadata": {"name": name, "labels": labels or {}}})
    return name


def create(cluster: LocalCluster, ns: str, body: dict[str, Any]) -> list[str]:
    apps = client.AppsV1Api(cluster.api_client())
    _, status, headers = apps.create_namespaced_deployment_with_http_info(ns, body)
    assert status == 201
    return warnings(headers)


# -- validation ---------------------------------------------------------------------------------


def test_a_bad_setting_is_created_and_the_response_carries_our_warning(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster)
    assert create(cluster, ns, deployment("train", BAD)) == [
        OUR_WARNING + " (torch release unknown, checked as 2.13; set TORCH_VERSION to check "
        "yours)"]
    assert client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("train", ns)


def test_valid_settings_get_no_warning(cluster: LocalCluster, webhook: WebhookProcess) -> None:
    ns = namespace(cluster)
    assert create(cluster, ns, deployment("fine", "expandable_segments:True")) == []
    assert create(cluster, ns, deployment("none", None)) == []


def test_the_torch_release_of_the_image_tag_is_used(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster)
    body = deployment("old", "expandable_segments:True", image="pytorch/pytorch:2.0.1-cuda11.7")
    [warning] = create(cluster, ns, body)
    assert "expandable_segments needs torch >= 2.1" in warning and "(torch 2.0)" in warning


def test_a_namespace_opted_into_deny_refuses_with_the_same_message(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster, {CHECK_LABEL: "deny"})
    with pytest.raises(ApiException) as refused:
        create(cluster, ns, deployment("train", BAD))
    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert 'admission webhook "alloc-conf-deny.gpu-auditor.io" denied the request' in message
    assert OUR_WARNING.removeprefix("gpu-auditor: ") in message
    assert create(cluster, ns, deployment("fine", "expandable_segments:True")) == []


def test_a_namespace_opted_out_and_the_release_namespace_are_not_checked(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    assert create(cluster, namespace(cluster, {CHECK_LABEL: "off"}),
                  deployment("train", BAD)) == []
    assert create(cluster, RELEASE_NAMESPACE, deployment("own", BAD)) == []


def test_pods_and_every_workload_kind_are_checked(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster)
    template = deployment("t", BAD)["spec"]["template"]
    core = client.CoreV1Api(cluster.api_client())
    batch = client.BatchV1Api(cluster.api_client())
    _, _, headers = core.create_namespaced_pod_with_http_info(
        ns, pod_body("p", env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": BAD}]))
    assert len(warnings(headers)) == 1
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {**template, "spec": {**template["spec"],
                                                      "restartPolicy": "Never"}}}}
    _, _, headers = batch.create_namespaced_job_with_http_info(ns, job)
    assert len(warnings(headers)) == 1
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": job["spec"]}}}
    _, _, headers = batch.create_namespaced_cron_job_with_http_info(ns, cron)
    assert len(warnings(headers)) == 1


def test_an_update_is_checked_too(cluster: LocalCluster, webhook: WebhookProcess) -> None:
    ns = namespace(cluster)
    create(cluster, ns, deployment("train", "expandable_segments:True"))
    apps = client.AppsV1Api(cluster.api_client())
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "train", "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF",
                                   "value": "expandable_segments:true"}]}]}}}}
    _, _, headers = apps.patch_namespaced_deployment_with_http_info("train", ns, patch)
    [warning] = warnings(headers)
    assert "did you mean expandable_segments:True?" in warning


def test_the_metrics_count_requests_by_result(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    before = _count(webhook.metrics(), "validate", "warned")
    create(cluster, namespace(cluster), deployment("train", BAD))
    text = webhook.metrics()
    assert _count(text, "validate", "warned") == before + 1
    assert 'gpu_auditor_webhook_admission_duration_seconds_count{webhook="validate"}' in text


def _count(text: str, webhook: str, result: str) -> float:
    line = f'gpu_auditor_webhook_admission_requests_total{{result="{result}",webhook="{webhook}"}}'
    match = re.search(re.escape(line) + r" ([0-9.e+]+)", text)
    assert match, f"{line} not in metrics"
    return float(match.group(1))


# -- probe injection ---------------------------------------------------------------------------


def _read_pod(cluster: LocalCluster, ns: str, name: str) -> Any:
    return client.CoreV1Api(cluster.api_client()).read_namespaced_pod(name, ns)


def _create_pod(cluster: LocalCluster, ns: str, body: dict[str, Any]) -> Any:
    client.CoreV1Api(cluster.api_client()).create_namespaced_pod(ns, body)
    return _read_pod(cluster, ns, body["metadata"]["name"])


def _injected(pod: Any) -> bool:
    return any(v.name == VOLUME for v in pod.spec.volumes or [])


def test_a_labelled_pod_gets_the_probe(cluster: LocalCluster, webhook: WebhookProcess) -> None:
    ns = namespace(cluster)
    pod = _create_pod(cluster, ns, pod_body("train", {PROBE_LABEL: "true"},
                                            env=[{"name": "PYTHONPATH", "value": "/app"}]))
    [init] = pod.spec.init_containers
    assert init.image == PROBE_IMAGE and init.command[-2:] == [f"{PROBE_DIR}/.", "/probe/"]
    [container] = pod.spec.containers
    env = {e.name: e.value for e in container.env}
    assert env == {"PYTHONPATH": f"{PROBE_DIR}:/app", "GPU_AUDITOR_PROBE": "1"}
    [mount] = container.volume_mounts
    assert (mount.name, mount.mount_path, mount.read_only) == (VOLUME, PROBE_DIR, True)
    assert container.termination_message_path == "/dev/termination-log"


def test_an_unlabelled_pod_is_never_touched(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster)
    for labels in (None, {PROBE_LABEL: "false"}, {PROBE_LABEL: "yes"}):
        pod = _create_pod(cluster, ns, pod_body(f"p-{uuid.uuid4().hex[:6]}", labels))
        assert not _injected(pod) and not pod.spec.init_containers
        assert not pod.spec.containers[0].env


def test_a_labelled_namespace_injects_every_pod_but_one_that_opts_out(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    ns = namespace(cluster, {PROBE_LABEL: "true"})
    assert _injected(_create_pod(cluster, ns, pod_body("plain")))
    assert _injected(_create_pod(cluster, ns, pod_body("labelled", {PROBE_LABEL: "true"})))
    assert not _injected(_create_pod(cluster, ns, pod_body("out", {PROBE_LABEL: "false"})))


def test_no_injection_in_the_release_namespace(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    pod = _create_pod(cluster, RELEASE_NAMESPACE, pod_body("own", {PROBE_LABEL: "true"}))
    assert not _injected(pod)


# -- the webhook down (last: it stops the server) --------------------------------------------


def test_with_the_webhook_down_objects_are_still_created(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    webhook.stop()
    try:
        deny = namespace(cluster, {CHECK_LABEL: "deny"})
        assert create(cluster, deny, deployment("train", BAD)) == []
        pod = _create_pod(cluster, deny, pod_body("p", {PROBE_LABEL: "true"}))
        assert not _injected(pod)
    finally:
        webhook.start()


# -- the chart's certificate on install and upgrade (the lookup that keeps it) -----------------


def test_helm_upgrade_keeps_the_certificate_until_it_is_due_for_renewal(
    cluster: LocalCluster
) -> None:
    """helm genCA/genSignedCert run on every render: an upgrade must reuse the Secret (or the
    pods would serve a certificate the new caBundle does not sign until kubelet syncs the
    volume) until renewDays before expiry, and then make a new pair."""
    from tests.integration.webhook_support import CHART

    ns, release = namespace(cluster), "whcert"
    base = ["--namespace", ns, "--set", "webhook.enabled=true",
            "--set", "webhook.validation.enabled=false",
            "--set", "webhook.probeInjection.enabled=false",
            "--set", "agent.enabled=false", "--set", "operator.enabled=false",
            "--set", "tests.enabled=false", "--skip-crds"]
    core = client.CoreV1Api(cluster.api_client())
    secret_name = f"{release}-gpu-auditor-webhook-tls"
    try:
        cluster.helm("install", release, str(CHART), *base)
        first = core.read_namespaced_secret(secret_name, ns).data
        cluster.helm("upgrade", release, str(CHART), *base)
        assert core.read_namespaced_secret(secret_name, ns).data == first
        # renewDays above the validity: the pair is due, the upgrade makes a new one
        cluster.helm("upgrade", release, str(CHART), *base, "--set", "webhook.tls.renewDays=400")
        renewed = core.read_namespaced_secret(secret_name, ns).data
        assert renewed["ca.crt"] != first["ca.crt"] and renewed["tls.key"] != first["tls.key"]
    finally:
        cluster.helm("uninstall", release, "--namespace", ns, check=False)
