"""The chart's admission webhooks: off by default; on, a server without API credentials, the
CA the chart generates in every caBundle and the serving certificate signed by it for the
Service's names, never a refusal of their own, and the opt-in labels the code reads."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from chartlib import Render, only
from cryptography import x509

from gpu_auditor.admission.apply import APPLY_LABEL
from gpu_auditor.admission.inject import PROBE_LABEL
from gpu_auditor.admission.review import CHECK_LABEL
from gpu_auditor.webhook.main import parse_args
from gpu_auditor.webhook.server import ROUTES

pytestmark = pytest.mark.unit

ON = "webhook.enabled=true"
APPLY = "webhook.applyRecommendation.enabled=true"
CONFIG_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def webhooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for o in objects if o["kind"] in CONFIG_KINDS for w in o["webhooks"]]


def test_no_webhook_by_default(render: Render) -> None:
    objects = render()
    assert not webhooks(objects)
    assert not [o for o in objects if "webhook" in o["metadata"]["name"]]


def test_the_serving_certificate_is_signed_by_the_ca_in_every_ca_bundle(render: Render) -> None:
    objects = render(ON)
    secret = only(objects, "Secret", "-webhook-tls")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "rel-gpu-auditor-webhook.gpu-auditor.svc" in names.get_values_for_type(x509.DNSName)
    hooks = webhooks(objects)
    assert len(hooks) == 4
    for hook in hooks:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem
        service = hook["clientConfig"]["service"]
        assert (service["name"], service["namespace"]) == ("rel-gpu-auditor-webhook",
                                                           "gpu-auditor")


def test_every_webhook_ignores_failures_has_no_side_effects_and_a_short_timeout(
    render: Render
) -> None:
    for hook in webhooks(render(ON)):
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert 1 <= hook["timeoutSeconds"] <= 5
        assert hook["admissionReviewVersions"] == ["v1"]
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["key"] == "kubernetes.io/metadata.name"
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", "gpu-auditor"} <= set(excluded["values"])


def test_each_webhook_calls_a_path_the_server_serves(render: Render) -> None:
    paths = sorted(h["clientConfig"]["service"]["path"] for h in webhooks(render(ON, APPLY)))
    assert paths == sorted(ROUTES)
    assert not [h for h in webhooks(render(ON)) if "/apply/" in h["clientConfig"]["service"][
        "path"]]


def test_apply_only_for_pods_or_namespaces_with_the_apply_label(render: Render) -> None:
    hooks = {h["name"]: h for h in webhooks(render(ON, APPLY))}
    pod = hooks["apply-pod.gpu-auditor.io"]
    assert pod["objectSelector"] == {"matchLabels": {APPLY_LABEL: "true"}}
    namespace = hooks["apply-namespace.gpu-auditor.io"]
    assert namespace["namespaceSelector"]["matchExpressions"][1] == {
        "key": APPLY_LABEL, "operator": "In", "values": ["true"]}
    assert namespace["objectSelector"]["matchExpressions"] == [
        {"key": APPLY_LABEL, "operator": "NotIn", "values": ["true", "false"]}]
    for hook in (pod, namespace):
        assert [r["operations"] for r in hook["rules"]] == [["CREATE"]]
        assert [r["resources"] for r in hook["rules"]] == [["pods"]]


def test_apply_gives_the_server_its_own_account_and_the_operators_prefix(render: Render) -> None:
    objects = render(ON, APPLY, "operator.annotationPrefix=audit.example.com/")
    pod = only(objects, "Deployment", "-webhook")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == "rel-gpu-auditor-webhook"
    assert only(objects, "ServiceAccount", "-webhook")["metadata"]["name"] == \
        "rel-gpu-auditor-webhook"
    args = parse_args(pod["containers"][0]["args"])
    assert args.apply_recommendations and args.annotation_prefix == "audit.example.com/"


def test_deny_is_an_opt_in_of_the_namespace_by_the_label_the_docs_name(render: Render) -> None:
    hooks = {h["name"]: h for h in webhooks(render(ON))}
    warn = hooks["alloc-conf.gpu-auditor.io"]["namespaceSelector"]["matchExpressions"][1]
    deny = hooks["alloc-conf-deny.gpu-auditor.io"]["namespaceSelector"]["matchExpressions"][1]
    assert warn == {"key": CHECK_LABEL, "operator": "NotIn", "values": ["deny", "off"]}
    assert deny == {"key": CHECK_LABEL, "operator": "In", "values": ["deny"]}
    assert hooks["alloc-conf-deny.gpu-auditor.io"]["clientConfig"]["service"]["path"] == \
        "/validate/deny"


def test_injection_only_for_pods_or_namespaces_with_the_probe_label(render: Render) -> None:
    hooks = {h["name"]: h for h in webhooks(render(ON))}
    pod = hooks["probe-pod.gpu-auditor.io"]
    assert pod["objectSelector"] == {"matchLabels": {PROBE_LABEL: "true"}}
    namespace = hooks["probe-namespace.gpu-auditor.io"]
    assert namespace["namespaceSelector"]["matchExpressions"][1] == {
        "key": PROBE_LABEL, "operator": "In", "values": ["true"]}
    assert namespace["objectSelector"]["matchExpressions"] == [
        {"key": PROBE_LABEL, "operator": "NotIn", "values": ["true", "false"]}]
    for hook in (pod, namespace):
        assert [r["operations"] for r in hook["rules"]] == [["CREATE"]]
        assert hook["reinvocationPolicy"] == "Never"


def test_validation_covers_pods_and_the_five_workload_kinds(render: Render) -> None:
    hook = next(h for h in webhooks(render(ON)) if h["name"] == "alloc-conf.gpu-auditor.io")
    resources = {r for rule in hook["rules"] for r in rule["resources"]}
    assert resources == {"pods", "deployments", "statefulsets", "daemonsets", "jobs",
                         "cronjobs"}


def test_the_server_has_no_api_credentials_and_accepts_its_args(render: Render) -> None:
    objects = render(ON)
    pod = only(objects, "Deployment", "-webhook")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    [container] = pod["containers"]
    assert container["command"] == ["gpu-auditor-webhook"]
    args = parse_args(container["args"])
    assert (args.port, args.metrics_port) == (8443, 9403)
    assert args.probe_image == "ghcr.io/gpu-auditor/gpu-auditor:0.1.0"
    assert container["volumeMounts"] == [{"name": "tls", "mountPath": "/tls", "readOnly": True}]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_two_replicas_keep_one_up_through_a_drain(render: Render) -> None:
    assert only(render(ON), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert not [o for o in render(ON, "webhook.replicas=1") if o["kind"] == "PodDisruptionBudget"]


def test_cert_manager_issues_the_certificate_and_injects_the_ca(render: Render) -> None:
    objects = render(values=["ci/webhook-cert-manager-values.yaml"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    certificate = only(objects, "Certificate")
    assert certificate["spec"]["secretName"] == "rel-gpu-auditor-webhook-tls"
    assert certificate["spec"]["issuerRef"] == {"name": "platform-ca", "kind": "ClusterIssuer"}
    for config in (o for o in objects if o["kind"] in CONFIG_KINDS):
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "gpu-auditor/rel-gpu-auditor-webhook"
        assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])


def test_cert_manager_without_an_issuer_gets_a_self_signed_one(render: Render) -> None:
    objects = render(ON, "webhook.tls.mode=cert-manager")
    issuer = only(objects, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert only(objects, "Certificate")["spec"]["issuerRef"]["name"] == \
        issuer["metadata"]["name"]


def test_each_webhook_can_be_turned_off(render: Render) -> None:
    kinds = {o["kind"] for o in render(ON, "webhook.validation.enabled=false")}
    assert "ValidatingWebhookConfiguration" not in kinds
    objects = render(ON, "webhook.probeInjection.enabled=false")
    assert "MutatingWebhookConfiguration" not in {o["kind"] for o in objects}
    args = parse_args(only(objects, "Deployment", "-webhook")["spec"]["template"]["spec"]
                      ["containers"][0]["args"])
    assert args.probe_image is None
