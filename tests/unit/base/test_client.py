"""The shared API client over real TLS to a fake API server: mutual TLS, CA and server-name
checks, errors mapped to one class per HTTP status, timeouts."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from gpu_auditor.base import client as client_module
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import (
    APIConflictError,
    APIConnectionError,
    APINotFoundError,
)
from gpu_auditor.base.kubeconfig import (
    ClusterConfig,
)
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION
from node_agent.kube import AgentApi, api_client

from ..node_agent.apiserver_helpers import FakeApiServer, Pki, b64, kubeconfig, make_pki


def agent(cfg: ClusterConfig, **kw: object) -> AgentApi:
    return AgentApi(ApiClient(cfg, user_agent="test", **kw))  # type: ignore[arg-type]

pytestmark = pytest.mark.unit


# ---- real TLS round-trips -----------------------------------------------------------------


def test_kubeconfig_with_client_certificate_data_does_mutual_tls(
        pki: Pki, mtls_server: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mtls_server.nodes["node-1"] = {"metadata": {"name": "node-1", "labels": {"a": "b"}}}
    kc = kubeconfig(tmp_path / "kc", mtls_server.url,
                    cluster={"certificate-authority-data": b64(pki.ca.cert)},
                    user={"client-certificate-data": b64(pki.client.cert),
                          "client-key-data": b64(pki.client.key)})
    written: list[tuple[str, int]] = []
    real = client_module.ssl.SSLContext.load_cert_chain

    def spy(ctx: object, certfile: str, keyfile: str) -> None:
        for p in (certfile, keyfile, str(Path(keyfile).parent)):
            written.append((p, stat.S_IMODE(Path(p).stat().st_mode)))
        real(ctx, certfile, keyfile)  # type: ignore[arg-type]

    monkeypatch.setattr(client_module.ssl.SSLContext, "load_cert_chain", spy)
    client = api_client(str(kc))
    assert [mode for _, mode in written] == [0o600, 0o600, 0o700]
    assert not any(Path(p).exists() for p, _ in written)  # removed once loaded
    assert client.get_node("node-1", timeout=5)["metadata"]["labels"] == {"a": "b"}
    request = mtls_server.requests[-1]
    assert (request.method, request.path) == ("GET", "/api/v1/nodes/node-1")
    assert "Authorization" not in request.headers


def test_without_the_client_certificate_the_mtls_server_refuses(
        pki: Pki, mtls_server: FakeApiServer) -> None:
    client = agent(ClusterConfig(server=mtls_server.url, ca_data=pki.ca.cert.decode()))
    with pytest.raises(APIConnectionError) as err:
        client.get_node("node-1", timeout=5)
    assert err.value.status is None


def test_a_server_signed_by_another_ca_is_rejected_unless_verification_is_skipped(
        tls_server: FakeApiServer, tmp_path: Path) -> None:
    other = make_pki()
    (tmp_path / "other-ca.crt").write_bytes(other.ca.cert)
    kc = kubeconfig(tmp_path / "kc", tls_server.url,
                    cluster={"certificate-authority": "other-ca.crt"}, user={"token": "t"})
    with pytest.raises(APIConnectionError, match="CERTIFICATE_VERIFY_FAILED") as err:
        api_client(str(kc)).list_pods(field_selector="spec.nodeName=x", timeout=5)
    assert err.value.status is None
    insecure = kubeconfig(tmp_path / "kc2", tls_server.url,
                          cluster={"insecure-skip-tls-verify": True}, user={"token": "t"})
    assert api_client(str(insecure)).list_pods(field_selector="spec.nodeName=x",
                                               timeout=5)["items"] == []
    assert tls_server.requests[-1].headers["Authorization"] == "Bearer t"


def test_tls_server_name_verifies_the_certificate_under_that_name(
        pki: Pki, tls_server: FakeApiServer) -> None:
    good = agent(ClusterConfig(server=tls_server.url, ca_data=pki.ca.cert.decode(),
                               tls_server_name="kubernetes.default.svc"))
    assert good.list_pods(field_selector="spec.nodeName=x", timeout=5)["kind"] == "PodList"
    bad = agent(ClusterConfig(server=tls_server.url, ca_data=pki.ca.cert.decode(),
                              tls_server_name="elsewhere.example"))
    with pytest.raises(APIConnectionError, match=r"match|mismatch"):
        bad.list_pods(field_selector="spec.nodeName=x", timeout=5)


# ---- errors and timeouts ------------------------------------------------------------------


def test_http_errors_carry_the_status_and_the_servers_message(
        pki: Pki, tls_server: FakeApiServer) -> None:
    client = agent(ClusterConfig(server=tls_server.url, ca_data=pki.ca.cert.decode()))
    with pytest.raises(APINotFoundError) as err:
        client.read_report("missing", timeout=5)
    assert (err.value.status, str(err.value)) == (404, 'HTTP 404: "missing" not found')
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNodeReport",
            "metadata": {"name": "n1"}}
    created = client.create_report(body, timeout=5)
    with pytest.raises(APIConflictError):
        client.create_report(body, timeout=5)
    created["metadata"]["resourceVersion"] = "stale"
    with pytest.raises(APIConflictError):
        client.replace_report("n1", created, timeout=5)
    assert tls_server.requests[-1].path == f"/apis/{GROUP}/{VERSION}/{PLURAL}/n1"


def test_a_slow_server_times_out_within_the_request_timeout(
        pki: Pki, tls_server: FakeApiServer) -> None:
    client = agent(ClusterConfig(server=tls_server.url, ca_data=pki.ca.cert.decode()))
    tls_server.delay = 2.0
    t0 = time.monotonic()
    with pytest.raises(APIConnectionError, match="timed out") as err:
        client.get_node("n", timeout=0.3)
    assert err.value.status is None
    assert time.monotonic() - t0 < 1.5


def test_nothing_listening_is_an_error_without_status(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = agent(ClusterConfig(server=f"http://127.0.0.1:{port}"))
    with pytest.raises(APIConnectionError) as err:
        client.get_node("n", timeout=2)
    assert err.value.status is None


