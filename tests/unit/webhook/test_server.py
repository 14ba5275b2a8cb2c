"""The webhook server: its decision from path and body (`answer`), then the real HTTPS server
on loopback."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpu_auditor.webhook import server as server_mod
from gpu_auditor.webhook.server import Settings, WebhookServer, answer
from tests.integration.webhook_support import Tls

from .webhook_helpers import SETTINGS, connect

pytestmark = pytest.mark.unit


def review(obj: dict[str, Any], operation: str = "CREATE") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-7", "operation": operation,
                                   "object": obj}}).encode()


def bad_pod(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"labels": labels or {}}, "spec": {"containers": [
        {"name": "c", "image": "i",
         "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:true"}]}]}}


def body(reply: server_mod.Reply) -> dict[str, Any]:
    return dict(json.loads(reply.body)["response"])


def test_validate_warns_and_deny_refuses() -> None:
    warned = answer("/validate", review(bad_pod()), SETTINGS)
    assert (warned.status, warned.webhook, warned.result) == (200, "validate", "warned")
    assert body(warned)["allowed"] is True and body(warned)["uid"] == "u-7"
    denied = answer("/validate/deny", review(bad_pod()), SETTINGS)
    assert (denied.result, body(denied)["allowed"]) == ("denied", False)


def test_inject_only_a_labelled_pod_on_the_pod_path() -> None:
    skipped = answer("/inject/pod", review(bad_pod()), SETTINGS)
    assert skipped.result == "skipped" and "patch" not in body(skipped)
    injected = answer("/inject/pod", review(bad_pod({"gpu-auditor.io/probe": "true"})),
                      SETTINGS)
    assert injected.result == "injected"
    patch = json.loads(base64.b64decode(body(injected)["patch"]))
    assert any(op["path"] == "/spec/initContainers" for op in patch)


def test_the_namespace_path_injects_unless_the_pod_opts_out() -> None:
    assert answer("/inject/namespace", review(bad_pod()), SETTINGS).result == "injected"
    out = review(bad_pod({"gpu-auditor.io/probe": "false"}))
    assert answer("/inject/namespace", out, SETTINGS).result == "skipped"


def test_an_unhashable_env_name_is_a_skip_with_a_warning_not_an_error() -> None:
    """It raised TypeError in inject(): answered as our own error (allowed, no warning)."""
    pod = bad_pod({"gpu-auditor.io/probe": "true"})
    pod["spec"]["containers"][0]["env"].append({"name": ["PYTHONPATH"], "value": "/x"})
    reply = answer("/inject/pod", review(pod), SETTINGS)
    assert reply.result == "skipped" and "patch" not in body(reply)
    assert body(reply)["warnings"] == ['gpu-auditor: probe not injected into container "c": '
                                       "its env has an entry without a name"]


def test_no_probe_image_means_no_injection() -> None:
    labelled = review(bad_pod({"gpu-auditor.io/probe": "true"}))
    assert answer("/inject/pod", labelled, Settings()).result == "skipped"


def test_injection_is_on_create_only() -> None:
    labelled = review(bad_pod({"gpu-auditor.io/probe": "true"}), operation="UPDATE")
    assert answer("/inject/pod", labelled, SETTINGS).result == "skipped"


@pytest.mark.parametrize("raw", [b"", b"{", b"[" * 100_000 + b"]" * 100_000, b"1" * 5000,
                                 b'{"kind": "AdmissionReview"}', "é".encode("latin-1")])
def test_a_body_that_is_not_a_review_is_a_400(raw: bytes) -> None:
    reply = answer("/validate", raw, SETTINGS)
    assert (reply.status, reply.result) == (400, "bad-request")
    assert "error" in json.loads(reply.body)


def test_an_unknown_path_is_a_404_and_counts_nothing() -> None:
    reply = answer("/mutate", review(bad_pod()), SETTINGS)
    assert (reply.status, reply.webhook) == (404, "")


def test_our_own_failure_allows_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(server_mod, "validate", broken)
    reply = answer("/validate/deny", review(bad_pod()), SETTINGS)
    assert reply.result == "error" and body(reply)["allowed"] is True


# -- the HTTPS server ---------------------------------------------------------------------------


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_server_answers_over_tls_on_one_kept_alive_connection(
    running: WebhookServer, tls: Tls
) -> None:
    before = sample("gpu_auditor_webhook_admission_requests_total", webhook="validate",
                    result="warned")
    conn = connect(running, tls.ca_pem)
    for _ in range(3):
        conn.request("POST", "/validate", review(bad_pod()),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["response"]["warnings"]
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"
    assert sample("gpu_auditor_webhook_admission_requests_total", webhook="validate",
                  result="warned") == before + 3


def test_a_body_over_the_limit_is_refused_without_reading_it(
    running: WebhookServer, tls: Tls
) -> None:
    conn = connect(running, tls.ca_pem)
    conn.putrequest("POST", "/validate")
    conn.putheader("Content-Length", str(64 << 20))
    conn.endheaders()
    assert conn.getresponse().status == 413


def test_a_client_that_never_finishes_its_handshake_does_not_block_others(
    running: WebhookServer, tls: Tls
) -> None:
    stalled = socket.create_connection(("127.0.0.1", running.server_port))
    try:
        conn = connect(running, tls.ca_pem)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
    finally:
        stalled.close()


# -- any body: an answer, never an exception (issue 26; the full run: bench/fuzz_operator_parsers)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.sampled_from(sorted(server_mod.ROUTES)))
def test_any_bytes_get_an_answer_never_an_exception(body: bytes, path: str) -> None:
    reply = answer(path, body, SETTINGS)
    assert reply.status in (200, 400)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="$()ABC:_,x", max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["name", "value", "env", "envFrom", "valueFrom",
                                       "containers", "spec", "kind", "prefix",
                                       "PYTORCH_CUDA_ALLOC_CONF"]), children, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from(sorted(server_mod.ROUTES)),
       st.sampled_from(["CREATE", "UPDATE"]))
def test_any_review_shaped_json_gets_an_allowed_or_refused_answer(
    spec: object, path: str, operation: str
) -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "operation": operation,
                          "object": {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec},
                          "oldObject": {"kind": "Pod", "spec": spec}}}
    reply = answer(path, json.dumps(review).encode(), SETTINGS)
    assert reply.status == 200 and reply.result != "error"
