"""The shared API client: kubeconfig and in-cluster config, real TLS round-trips to a fake API
server, token rotation, timeouts and errors mapped to one class per HTTP status; the agent's
requests over it."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import GPU0, UID_A, UID_B, StaticGpus, fake_pods, gpu
from apiserver_helpers import FakeApiServer, Pki, b64, kubeconfig, make_pki, serve

from gpu_auditor.base import client as client_module
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.credentials import Credentials
from gpu_auditor.base.errors import (
    APIConflictError,
    APIConnectionError,
    APINotFoundError,
    APIUnauthorizedError,
    ConfigError,
)
from gpu_auditor.base.kubeconfig import (
    ClusterConfig,
    load_incluster,
    load_kubeconfig,
    parse_kubeconfig,
)
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION
from node_agent.kube import AgentApi, api_client
from node_agent.model import ERROR_SOURCES
from node_agent.pods import ApiPods, ClusterPods
from node_agent.procfs import ProcReader
from node_agent.publisher import ReportPublisher
from node_agent.sampler import Sampler


def agent(cfg: ClusterConfig, **kw: object) -> AgentApi:
    return AgentApi(ApiClient(cfg, user_agent="test", **kw))  # type: ignore[arg-type]

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def tls_server(pki: Pki, tmp_path: Path) -> Iterator[FakeApiServer]:
    with serve(pki, tmp_path / "server") as state:
        yield state


@pytest.fixture
def mtls_server(pki: Pki, tmp_path: Path) -> Iterator[FakeApiServer]:
    with serve(pki, tmp_path / "server", client_cert_required=True) as state:
        yield state


# ---- kubeconfig parsing -------------------------------------------------------------------


def _config(**user: object) -> dict[str, object]:
    return {
        "current-context": "b",
        "clusters": [{"name": "c1", "cluster": {"server": "https://one:6443"}},
                     {"name": "c2", "cluster": {"server": "https://two:443/prefix/",
                                                "certificate-authority": "ca.pem",
                                                "tls-server-name": "kubernetes"}}],
        "users": [{"name": "u1", "user": {"token": "t1"}}, {"name": "u2", "user": user}],
        "contexts": [{"name": "a", "context": {"cluster": "c1", "user": "u1"}},
                     {"name": "b", "context": {"cluster": "c2", "user": "u2"}}],
    }


def test_kubeconfig_uses_the_current_context_and_resolves_relative_paths() -> None:
    cfg = parse_kubeconfig(_config(**{"client-certificate": "u.crt",
                                      "client-key": "/abs/u.key"}), Path("/home/x/.kube"))
    assert cfg == ClusterConfig(
        server="https://two:443/prefix", ca_file=Path("/home/x/.kube/ca.pem"),
        tls_server_name="kubernetes", client_cert_file=Path("/home/x/.kube/u.crt"),
        client_key_file=Path("/abs/u.key"))
    other = parse_kubeconfig(_config(), Path("/"), context="a")
    assert (other.server, other.token, other.ca_file) == ("https://one:6443", "t1", None)


def test_kubeconfig_data_fields_are_decoded_and_token_file_is_kept_as_a_path() -> None:
    data = _config(**{"client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY"),
                      "tokenFile": "tok"})
    data["clusters"][1]["cluster"].update(  # type: ignore[index]
        {"certificate-authority-data": b64(b"CA PEM"), "insecure-skip-tls-verify": True})
    cfg = parse_kubeconfig(data, Path("/k"))
    assert (cfg.ca_file, cfg.ca_data, cfg.insecure_skip_tls_verify) == (None, "CA PEM", True)
    assert (cfg.client_cert_data, cfg.client_key_data) == (b"CERT", b"KEY")
    assert (cfg.client_cert_file, cfg.token, cfg.token_file) == (None, None, Path("/k/tok"))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("current-context"), "no current-context"),
    (lambda d: d.update({"current-context": "zzz"}), "no context named 'zzz'"),
    (lambda d: d["users"][1]["user"].update({"exec": {"command": "aws"}}),
     "exec apiVersion None is not supported"),
    (lambda d: d["users"][1]["user"].update({"exec": {
        "command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}),
     "interactiveMode is required"),
    (lambda d: d["users"][1]["user"].update({"auth-provider": {"name": "gcp"}}),
     "auth-provider is not supported"),
    (lambda d: d["clusters"][1]["cluster"].update({"server": "ftp://x"}),
     r"needs an http\(s\) server URL"),
    (lambda d: d["users"][1]["user"].update({"client-certificate": "u.crt"}),
     "needs its key"),
    (lambda d: d["users"][1]["user"].update({"client-key-data": "%%%"}), "not valid base64"),
])
def test_bad_kubeconfigs_are_clear_config_errors(change: object, message: str) -> None:
    data = _config()
    change(data)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=message):
        parse_kubeconfig(data, Path("/"), "kc.yaml")


def test_an_unreadable_kubeconfig_names_itself(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text("clusters: [unclosed\n")
    with pytest.raises(ConfigError, match=r"cannot load Kubernetes config from .*kc"):
        api_client(str(tmp_path / "kc"))


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


# ---- in-cluster ---------------------------------------------------------------------------


def _service_account(tmp_path: Path, pki: Pki, token: str) -> Path:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(token + "\n")
    (sa / "ca.crt").write_bytes(pki.ca.cert)
    return sa


def test_incluster_config_needs_the_env_and_the_mounted_token(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_incluster({}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="token not found"):
        load_incluster(env, tmp_path)
    sa = _service_account(tmp_path, pki, "t")
    assert load_incluster(env, sa) == ClusterConfig(
        server="https://[fd00::1]:443", ca_file=sa / "ca.crt", token_file=sa / "token")


def test_incluster_client_rereads_the_rotating_token(tmp_path: Path, pki: Pki,
                                                    tls_server: FakeApiServer) -> None:
    sa = _service_account(tmp_path, pki, "token-1")
    port = tls_server.url.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    now = [0.0]
    cfg = load_incluster(env, sa)
    client = AgentApi(ApiClient(cfg, user_agent="test", credentials=Credentials(
        cfg, token_refresh=60, clock=lambda: now[0])))
    tls_server.tokens = {"token-1"}
    client.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert tls_server.requests[-1].headers["Authorization"] == "Bearer token-1"

    (sa / "token").write_text("token-2\n")  # the kubelet rotated it; both valid for a while
    tls_server.tokens = {"token-1", "token-2"}
    now[0] = 30.0
    client.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert tls_server.requests[-1].headers["Authorization"] == "Bearer token-1"  # not yet
    now[0] = 61.0
    client.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert tls_server.requests[-1].headers["Authorization"] == "Bearer token-2"

    # A 401 re-reads the file at once and retries the request once.
    (sa / "token").write_text("token-3\n")
    tls_server.tokens = {"token-3"}
    now[0] = 62.0
    client.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert [r.headers["Authorization"] for r in tls_server.requests[-2:]] == [
        "Bearer token-2", "Bearer token-3"]
    tls_server.tokens = {"something-else"}
    with pytest.raises(APIUnauthorizedError) as err:
        client.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert err.value.status == 401


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


# ---- the agent's users of the client, end to end ------------------------------------------


def test_api_pods_and_the_publisher_over_the_client(pki: Pki, tls_server: FakeApiServer,
                                                    proc_root: Path, tmp_path: Path) -> None:
    tls_server.tokens = {"t"}
    tls_server.nodes["node-1"] = {"metadata": {"name": "node-1", "labels": {
        "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "2"}}}
    tls_server.pods = [
        {"metadata": {"namespace": "ml", "name": "a", "uid": UID_A},
         "spec": {"nodeName": "node-1"},
         "status": {"containerStatuses": [{"name": "main",
                                           "containerID": "containerd://" + "c" * 64}]}},
        {"metadata": {"namespace": "ml", "name": "b", "uid": UID_B},
         "spec": {"nodeName": "node-2"}}]
    kc = kubeconfig(tmp_path / "kc", tls_server.url,
                    cluster={"certificate-authority-data": b64(pki.ca.cert)},
                    user={"token": "t"})
    client = load_kubeconfig(kc)
    view = ClusterPods(None, ApiPods(agent(client), "node-1")).view([UID_A])
    assert view.errors == {}
    assert set(view.index) == {UID_A}
    assert (view.strategy.kind, view.strategy.replicas) == ("time-slicing", 2)
    assert tls_server.requests[0].path == "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1"

    errors = dict.fromkeys(ERROR_SOURCES, 0)
    sampler = Sampler("node-1", StaticGpus([gpu(0, GPU0, [])]), ProcReader(proc_root),
                      fake_pods())
    publisher = ReportPublisher(agent(client), errors, min_interval=0)
    assert publisher.maybe_publish(sampler.sample(), force=True)  # get 404 → create
    key = f"apis/{GROUP}/{VERSION}/{PLURAL}/node-1"
    tls_server.objects[key]["metadata"]["resourceVersion"] = "999"  # someone else wrote
    assert publisher.maybe_publish(sampler.sample(), force=True)  # put 409 → get → put
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in tls_server.requests[2:]] == [
        ("GET", "node-1"), ("POST", PLURAL), ("PUT", "node-1"), ("GET", "node-1"),
        ("PUT", "node-1")]
    assert errors["apiserver"] == 0
    tls_server.tokens = set()  # now every request is refused
    assert not publisher.maybe_publish(sampler.sample(), force=True)
    assert errors["apiserver"] == 1
