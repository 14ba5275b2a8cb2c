"""The shared API client over real TLS to a fake API server: mutual TLS, CA and server-name
checks, errors mapped to one class per HTTP status, timeouts."""

from __future__ import annotations

import contextlib
import socket
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.base import client as client_module
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APINotFoundError,
    ConfigError,
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




# ---- a proxy as kubectl finds one (issue 25) ---------------------------------------------------


@pytest.mark.parametrize(("server", "proxy_url", "env", "expected"), [
    ("https://api.example:6443", None, {"HTTPS_PROXY": "http://p:3128"}, ("p", 3128)),
    ("https://api.example:6443", None, {"https_proxy": "p:3128"}, ("p", 3128)),
    ("http://api.example:8080", None, {"HTTPS_PROXY": "http://p:1", "HTTP_PROXY": "http://q"},
     ("q", 80)),
    ("https://api.example:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ("https://api.example:6443", None, {"HTTPS_PROXY": "http://p:1",
                                        "NO_PROXY": "other.io, example"}, None),
    ("https://api.example:6443", None, {"HTTPS_PROXY": "http://p:1",
                                        "NO_PROXY": ".example"}, None),
    ("https://example:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example"},
     ("p", 1)),  # a leading dot: subdomains only
    ("https://10.0.0.5:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"},
     None),
    ("https://api.example:6443", None, {"HTTPS_PROXY": "http://p:1",
                                        "NO_PROXY": "api.example:443"}, ("p", 1)),
    ("https://127.0.0.1:6443", None, {"HTTPS_PROXY": "http://p:1"}, None),  # loopback: direct
    ("https://127.0.0.1:6443", "http://p:9", {"NO_PROXY": "*"}, ("p", 9)),  # proxy-url wins
    ("https://api.example:6443", None, {}, None),
])
def test_the_proxy_is_found_as_go_finds_it(server: str, proxy_url: str | None,
                                           env: dict[str, str],
                                           expected: tuple[str, int] | None) -> None:
    found = client_module.proxy_for(server, proxy_url, env)
    assert (None if found is None else (found.host, found.port)) == expected


def test_a_proxy_this_client_cannot_speak_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="only http:// proxies"):
        client_module.proxy_for("https://a:1", None, {"HTTPS_PROXY": "https://p:3128"})


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback that tunnels every host to 127.0.0.1 (it resolves
    the names), recording each CONNECT line and its Proxy-Authorization."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, str | None]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        lines = head.decode().split("\r\n")
        target = lines[0].split()[1]
        auth = next((line.split(":", 1)[1].strip() for line in lines[1:]
                     if line.lower().startswith("proxy-authorization:")), None)
        self.connects.append((target, auth))
        upstream = socket.create_connection(("127.0.0.1", int(target.rsplit(":", 1)[1])))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pipe(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.sock.close()


def test_a_request_goes_through_the_kubeconfigs_proxy_url_with_its_credentials(
        pki: Pki, tls_server: FakeApiServer) -> None:
    proxy = ConnectProxy()
    try:
        tls_server.nodes["n"] = {"metadata": {"name": "n"}}
        cfg = ClusterConfig(server=tls_server.url, ca_data=pki.ca.cert.decode(),
                            proxy_url=f"http://me:s%40cret@127.0.0.1:{proxy.port}")
        assert agent(cfg, environ={}).get_node("n", timeout=5)["metadata"]["name"] == "n"
        port = tls_server.url.rsplit(":", 1)[1]
        assert proxy.connects == [(f"127.0.0.1:{port}", "Basic bWU6c0BjcmV0")]  # me:s@cret
    finally:
        proxy.close()


def test_https_proxy_from_the_environment_and_no_proxy(
        pki: Pki, tls_server: FakeApiServer) -> None:
    """The name is the API server's (verified against its certificate through the tunnel);
    the proxy resolves it."""
    proxy = ConnectProxy()
    try:
        tls_server.nodes["n"] = {"metadata": {"name": "n"}}
        port = tls_server.url.rsplit(":", 1)[1]
        cfg = ClusterConfig(server=f"https://kubernetes.default.svc:{port}",
                            ca_data=pki.ca.cert.decode())
        env = {"HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}"}
        assert agent(cfg, environ=env).get_node("n", timeout=5)
        assert proxy.connects == [(f"kubernetes.default.svc:{port}", None)]
        bypassed = agent(cfg, environ={**env, "NO_PROXY": ".svc"})
        with pytest.raises(APIConnectionError):  # direct: the name does not resolve here
            bypassed.get_node("n", timeout=2)
        assert len(proxy.connects) == 1
    finally:
        proxy.close()


# ---- come back later: 429 and 503 (issue 25) -------------------------------------------------


class Scripted:
    """A plain-HTTP server answering each request with the next (status, Retry-After)."""

    def __init__(self, answers: list[tuple[int, str | None]]) -> None:
        self.answers = list(answers)
        self.methods: list[str] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                scripted.methods.append(self.command)
                status, retry_after = scripted.answers.pop(0) if scripted.answers else (200,
                                                                                       None)
                body = b'{"kind": "Status", "message": "busy"}' if status >= 400 else b"{}"
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = _any

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def scripted_client(answers: list[tuple[int, str | None]]) -> tuple[ApiClient, Scripted,
                                                                      list[float]]:
    server = Scripted(answers)
    slept: list[float] = []
    api = ApiClient(ClusterConfig(server=server.url), user_agent="t", environ={},
                    sleep=slept.append)
    return api, server, slept


@pytest.mark.parametrize(("method", "answers", "waits", "ok"), [
    ("GET", [(429, "2")], [2.0], True),
    ("GET", [(503, None), (503, "1")], [1.0, 1.0], True),
    ("POST", [(429, None)], [1.0], True),  # 429: refused unread, any method comes back
    ("POST", [(503, "3")], [3.0], True),  # the server asked: it did not act
    ("POST", [(503, None)], [], False),  # it may have acted: not sent twice
    ("PATCH", [(500, "1")], [], False),  # only 429 and 503
    ("GET", [(429, "3600")] * 5, [10.0, 10.0], False),  # each wait and all waits capped
    ("GET", [(429, "0")] * 5, [0.0, 0.0, 0.0], False),  # at most three retries
    ("GET", [(429, "soon")], [1.0], True),  # only whole seconds are read, as client-go
])
def test_the_server_asking_to_come_back_is_retried_within_bounds(
        method: str, answers: list[tuple[int, str | None]], waits: list[float],
        ok: bool) -> None:
    api, server, slept = scripted_client(answers)
    try:
        if ok:
            api.request(method, "/x", body={} if method != "GET" else None, timeout=5)
        else:
            with pytest.raises(APIError):
                api.request(method, "/x", body={} if method != "GET" else None, timeout=5)
        assert slept == waits
        assert len(server.methods) == len(waits) + 1 and api.retries == len(waits)
    finally:
        server.close()


# ---- kept connections ---------------------------------------------------------------------


class _KeepAlive(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; counts connections; closes each after `serves` requests."""

    protocol_version = "HTTP/1.1"
    connections = 0
    serves = 1000

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1
        self.served = 0

    def do_GET(self) -> None:
        self.served += 1
        body = b'{"kind": "Status"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.served >= self.serves:  # closes it after answering, unannounced
            self.close_connection = True

    do_PATCH = do_GET

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def keep_alive_server(serves: int = 1000) -> Any:
    handler = type("Handler", (_KeepAlive,), {"connections": 0, "serves": serves})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()


def test_requests_one_after_another_share_one_connection() -> None:
    with keep_alive_server() as (server, handler):
        api = ApiClient(ClusterConfig(server=f"http://127.0.0.1:{server.server_port}"),
                        user_agent="test", environ={})
        for _ in range(20):
            api.request("GET", "/api/v1/namespaces/default", timeout=5)
        api.request("PATCH", "/api/v1/namespaces/default", body={"a": 1}, timeout=5)
        assert handler.connections == 1
        api.close()


def test_a_kept_connection_the_server_closed_is_replaced_without_an_error() -> None:
    with keep_alive_server(serves=1) as (server, handler):
        api = ApiClient(ClusterConfig(server=f"http://127.0.0.1:{server.server_port}"),
                        user_agent="test", environ={})
        for _ in range(5):
            time.sleep(0.05)  # the server's close has landed before the next request
            api.request("GET", "/api/v1/namespaces/default", timeout=5)
        assert handler.connections == 5


def _four_at_once(api: ApiClient) -> None:
    """Four GETs at once, each on a connection of its own (none is free for the others)."""
    barrier = threading.Barrier(4)

    def one() -> None:
        barrier.wait()
        api.request("GET", "/api/v1/namespaces/default", timeout=5)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_kept_connections_a_restarted_server_closed_cost_no_error() -> None:
    """Several kept connections, all closed by the server (an API server's restart): the
    request that meets the first goes again on a new one, not on the next dead one, and the
    dead ones are dropped (an operator's retries had failed on them one after another)."""
    with keep_alive_server() as (server, handler):
        api = ApiClient(ClusterConfig(server=f"http://127.0.0.1:{server.server_port}"),
                        user_agent="test", environ={})
        _four_at_once(api)
        kept = len(api._idle)
        assert kept >= 2
        for _, conn in list(api._idle):  # the server side goes away under each of them
            assert conn.sock is not None
            conn.sock.shutdown(socket.SHUT_RDWR)
        for _ in range(3):
            api.request("GET", "/api/v1/namespaces/default", timeout=5)
        assert handler.connections == kept + 1  # one new connection, reused after
        api.close()


def test_at_most_max_idle_connections_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_IDLE", 2)
    with keep_alive_server() as (server, _):
        api = ApiClient(ClusterConfig(server=f"http://127.0.0.1:{server.server_port}"),
                        user_agent="test", environ={})
        _four_at_once(api)
        assert len(api._idle) <= 2
