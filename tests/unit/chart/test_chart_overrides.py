"""The overrides prometheus-community charts' users expect (issue 25): `namespaceOverride` moves
every namespaced object (and every name that carries the namespace), `global.imageRegistry`
puts every image behind one registry; both on rendered output."""

from __future__ import annotations

from typing import Any

import pytest
from chartlib import Render, only

pytestmark = pytest.mark.unit

EVERYTHING = ("webhook.enabled=true", "serviceMonitor.enabled=true", "prometheusRule.enabled=true",
              "dashboards.enabled=true", "networkPolicy.enabled=true",
              "agent.metricsProxy.enabled=true", "operator.metricsProxy.enabled=true",
              "agent.service.enabled=true", "operator.service.enabled=true")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition", "Namespace"}


def images(objects: list[dict[str, Any]]) -> set[str]:
    found = set()
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec)
        for field in ("containers", "initContainers"):
            found |= {c["image"] for c in pod.get(field) or []}
        for c in pod.get("containers") or []:
            found |= {a.split("=", 1)[1] for a in c.get("args") or []
                      if isinstance(a, str) and a.startswith("--probe-image=")}
    return found


def test_namespace_override_moves_every_namespaced_object(render: Render) -> None:
    objects = render(*EVERYTHING, "namespaceOverride=gpu-system", namespace="release-ns")
    namespaced = [o for o in objects if o["kind"] not in CLUSTER_SCOPED]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"gpu-system"}
    text = repr(objects)
    assert "release-ns" not in text  # subjects, DNS names, webhook services, SA users too
    webhook = only(objects, "ValidatingWebhookConfiguration")
    for entry in webhook["webhooks"]:
        assert entry["clientConfig"]["service"]["namespace"] == "gpu-system"
        excluded = entry["namespaceSelector"]["matchExpressions"]
        assert any("gpu-system" in e.get("values", []) for e in excluded)


def test_without_namespace_override_the_release_namespace_is_used(render: Render) -> None:
    objects = render(*EVERYTHING, namespace="release-ns")
    assert {o["metadata"]["namespace"] for o in objects
            if o["kind"] not in CLUSTER_SCOPED} == {"release-ns"}


def test_global_image_registry_puts_every_image_behind_one_registry(render: Render) -> None:
    default = images(render(*EVERYTHING, "webhook.probeInjection.enabled=true"))
    assert default == {"ghcr.io/gpu-auditor/gpu-auditor:0.1.0",
                       "quay.io/brancz/kube-rbac-proxy:v0.21.0"}
    mirrored = images(render(*EVERYTHING, "webhook.probeInjection.enabled=true",
                             "global.imageRegistry=mirror.example.com:5000"))
    assert mirrored == {"mirror.example.com:5000/gpu-auditor/gpu-auditor:0.1.0",
                        "mirror.example.com:5000/brancz/kube-rbac-proxy:v0.21.0"}


def test_a_repository_with_its_own_registry_host_is_used_as_it_is(render: Render) -> None:
    """What README says to set (`image.repository=registry.example.com/gpu-auditor`) keeps
    meaning that image, with or without a global registry."""
    for extra in ((), ("global.imageRegistry=mirror.example.com",)):
        got = images(render("image.repository=registry.example.com/gpu-auditor",
                            "image.tag=0.1.0", *extra))
        assert got == {"registry.example.com/gpu-auditor:0.1.0"}
    assert images(render("image.repository=localhost/gpu-auditor")) == {
        "localhost/gpu-auditor:0.1.0"}
    digest = "sha256:" + "a" * 64
    assert images(render(f"image.digest={digest}", "global.imageRegistry=m.example")) == {
        f"m.example/gpu-auditor/gpu-auditor@{digest}"}


def test_the_schema_refuses_a_namespace_override_that_is_not_a_namespace(helm: Any) -> None:
    from chartlib import CHART, KUBE_VERSION, run_helm

    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set", "namespaceOverride=Not_A_Namespace", check=False)
    assert result.returncode != 0 and "namespaceOverride" in result.stderr
