"""Where users run the operator: several kubeconfig files merged as kubectl merges them, and exec
credential plugins (cached until they expire, run again after a 401)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_helpers import FakeApiServer, Pki, b64, make_pki, serve

from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.credentials import Credentials, parse_exec_credential
from gpu_auditor.base.errors import APICredentialsError, APIUnauthorizedError, ConfigError
from gpu_auditor.base.kubeconfig import ExecConfig, load_config, load_kubeconfig
from node_agent.kube import AgentApi

pytestmark = pytest.mark.unit

V1 = "client.authentication.k8s.io/v1"
T0 = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# ---- several files --------------------------------------------------------------------------


def test_the_first_file_to_name_an_entry_wins_it_whole_and_the_first_current_context_wins(
        tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write(tmp_path / "a" / "config", {
        "current-context": "dev",
        "users": [{"name": "me", "user": {"tokenFile": "token-a"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "me"}}],
    })
    b = write(tmp_path / "b" / "config", {
        "current-context": "prod",
        "clusters": [{"name": "c", "cluster": {"server": "https://c:6443",
                                               "certificate-authority": "ca.pem"}}],
        "users": [{"name": "me", "user": {"token": "from-b"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "other", "user": "me"}},
                     {"name": "prod", "context": {"cluster": "c", "user": "me"}}],
    })
    cfg = load_kubeconfig(f"{a}{os.pathsep}{b}")
    assert cfg.server == "https://c:6443"
    assert cfg.ca_file == tmp_path / "b" / "ca.pem"  # relative to the file that wrote it
    assert (cfg.token, cfg.token_file) == (None, tmp_path / "a" / "token-a")  # a's user, whole
    other_order = load_kubeconfig([b, a])
    assert (other_order.token, other_order.token_file) == ("from-b", None)


def test_a_missing_file_in_the_list_is_skipped_but_a_single_named_file_must_exist(
        tmp_path: Path) -> None:
    real = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "http://h"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}]})
    missing = tmp_path / "nope"
    assert load_kubeconfig(f"{missing}{os.pathsep}{os.pathsep}{real}").server == "http://h"
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(missing)
    with pytest.raises(ConfigError, match="none of the kubeconfig files exists"):
        load_kubeconfig(f"{missing}{os.pathsep}{tmp_path / 'nope2'}")


def test_an_explicit_kubeconfig_wins_over_the_service_account(tmp_path: Path) -> None:
    kc = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "http://h"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}]})
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    (sa / "ca.crt").write_text("ca")
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert load_config(env={**pod, "KUBECONFIG": str(kc)}, sa_dir=sa).server == "http://h"
    assert load_config(env=pod, sa_dir=sa).server == "https://10.0.0.1:443"


# ---- exec plugins: what kubectl hands them -------------------------------------------------


def _exec_user(**extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": V1, "command": "./bin/get-token", "args": ["--cluster", "x"],
                     "env": [{"name": "PROFILE", "value": "ml"}],
                     "interactiveMode": "Never", **extra}}


def test_an_exec_user_is_read_with_its_command_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    kc = write(tmp_path / "config", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://h:443", "certificate-authority-data": b64(b"CA"),
            "extensions": [{"name": "client.authentication.k8s.io/exec",
                            "extension": {"audience": "k8s"}}]}}],
        "users": [{"name": "u", "user": _exec_user(provideClusterInfo=True)}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    plugin = load_kubeconfig(kc).exec
    assert plugin is not None
    assert plugin.command == str(tmp_path / "bin" / "get-token")
    assert (plugin.args, plugin.env, plugin.interactive_mode) == (
        ("--cluster", "x"), (("PROFILE", "ml"),), "Never")
    assert plugin.cluster == {"server": "https://h:443", "certificate-authority-data": b64(b"CA"),
                              "config": {"audience": "k8s"}}


class FakePlugin:
    """Stands for subprocess.run: records what it was given, answers an ExecCredential."""

    def __init__(self, status: dict[str, Any] | None = None, returncode: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.tokens = iter(f"token-{i}" for i in range(1, 100))
        self.status = status
        self.returncode = returncode
        self.expires: dt.datetime | None = None

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append({"argv": argv, **kw})
        status = dict(self.status) if self.status is not None else {"token": next(self.tokens)}
        if self.expires is not None:
            status["expirationTimestamp"] = self.expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        out = json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": status})
        return subprocess.CompletedProcess(argv, self.returncode, out.encode(), b"")


def _exec_config(tmp_path: Path, **extra: Any) -> Any:
    kc = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
        "users": [{"name": "u", "user": _exec_user(**extra)}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    return load_kubeconfig(kc)


def test_the_plugin_gets_its_env_and_the_exec_info_and_no_terminal(tmp_path: Path) -> None:
    plugin = FakePlugin()
    creds = Credentials(_exec_config(tmp_path, provideClusterInfo=True), run=plugin,
                        environ={"PATH": "/bin", "PROFILE": "default"},
                        stdin_is_terminal=lambda: True)
    assert creds.current().token == "token-1"
    (call,) = plugin.calls
    assert call["argv"] == [str(tmp_path / "bin" / "get-token"), "--cluster", "x"]
    assert call["env"]["PATH"] == "/bin" and call["env"]["PROFILE"] == "ml"
    info = json.loads(call["env"]["KUBERNETES_EXEC_INFO"])
    assert info == {"apiVersion": V1, "kind": "ExecCredential",
                    "spec": {"interactive": False, "cluster": {"server": "https://h"}}}
    assert call["stdin"] == subprocess.DEVNULL  # interactiveMode Never, even with a terminal


def test_interactive_modes_follow_the_terminal(tmp_path: Path) -> None:
    plugin = FakePlugin()
    Credentials(_exec_config(tmp_path, interactiveMode="IfAvailable"), run=plugin,
                stdin_is_terminal=lambda: True)
    assert plugin.calls[-1]["stdin"] is None  # passed on: the plugin may prompt
    assert json.loads(plugin.calls[-1]["env"]["KUBERNETES_EXEC_INFO"])["spec"] == {
        "interactive": True}
    with pytest.raises(ConfigError, match="interactiveMode Always needs a terminal"):
        Credentials(_exec_config(tmp_path, interactiveMode="Always"), run=plugin,
                    stdin_is_terminal=lambda: False)


def test_an_exec_credential_is_kept_until_ten_seconds_before_it_expires(tmp_path: Path) -> None:
    plugin = FakePlugin()
    plugin.expires = T0 + dt.timedelta(seconds=300)
    now = [T0]
    creds = Credentials(_exec_config(tmp_path), run=plugin, now=lambda: now[0])
    assert creds.current().token == "token-1"
    assert creds.current().expires_at == T0 + dt.timedelta(seconds=300)
    now[0] = T0 + dt.timedelta(seconds=289)
    assert creds.current().token == "token-1" and creds.exec_runs == 1
    now[0] = T0 + dt.timedelta(seconds=290)
    plugin.expires = T0 + dt.timedelta(seconds=900)
    assert creds.current().token == "token-2" and creds.exec_runs == 2
    assert creds.current().token == "token-2" and creds.exec_runs == 2


def test_without_an_expiry_the_credential_is_kept_until_the_server_refuses_it(
        tmp_path: Path) -> None:
    plugin = FakePlugin()
    now = [T0]
    creds = Credentials(_exec_config(tmp_path), run=plugin, now=lambda: now[0])
    now[0] = T0 + dt.timedelta(days=365)
    assert creds.current().token == "token-1"
    assert creds.refresh().token == "token-2"  # what a 401 does
    assert creds.exec_runs == 2


@pytest.mark.parametrize(("output", "message"), [
    (b"not json", "not JSON"),
    (json.dumps({"apiVersion": V1, "kind": "Other", "status": {"token": "t"}}).encode(),
     "not an ExecCredential"),
    (json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                 "kind": "ExecCredential", "status": {"token": "t"}}).encode(), "asks for"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": {}}).encode(),
     "neither a token nor a client certificate"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential",
                 "status": {"clientCertificateData": "PEM"}}).encode(), "needs its key"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential",
                 "status": {"token": "t", "expirationTimestamp": "soon"}}).encode(),
     "not RFC 3339"),
])
def test_a_bad_plugin_answer_is_a_clear_error(output: bytes, message: str) -> None:
    with pytest.raises(APICredentialsError, match=message):
        parse_exec_credential(output, ExecConfig(command="p", api_version=V1))


def test_a_failing_or_missing_plugin_fails_at_start_with_its_install_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exited with status 1"):
        Credentials(_exec_config(tmp_path), run=FakePlugin(returncode=1))
    cfg = _exec_config(tmp_path, installHint="install it with: brew install get-token")
    with pytest.raises(ConfigError, match=r"not found \(install it with: brew install get-token\)"):
        Credentials(cfg)  # ./bin/get-token does not exist


# ---- a real plugin against a real TLS server ------------------------------------------------


PLUGIN = """\
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
runs = pathlib.Path(sys.argv[1])
n = len(runs.read_text().splitlines()) + 1 if runs.exists() else 1
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
status = {"token": f"exec-token-{n}"} if sys.argv[2] == "token" else {
    "clientCertificateData": pathlib.Path(sys.argv[3]).read_text(),
    "clientKeyData": pathlib.Path(sys.argv[4]).read_text()}
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": status}))
"""


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def tls_server(pki: Pki, tmp_path: Path) -> Iterator[FakeApiServer]:
    with serve(pki, tmp_path / "server") as state:
        yield state


def _plugin_kubeconfigs(tmp_path: Path, server: str, pki: Pki, *args: str) -> str:
    """KUBECONFIG=a:b: the exec user in a, the cluster and context in b."""
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    a = write(tmp_path / "a.yaml", {"users": [{"name": "u", "user": {"exec": {
        "apiVersion": V1, "command": sys.executable, "interactiveMode": "Never",
        "args": [str(script), str(tmp_path / "runs"), *args]}}}]})
    b = write(tmp_path / "b.yaml", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": b64(pki.ca.cert)}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    return f"{a}{os.pathsep}{b}"


def test_a_real_plugin_token_is_sent_and_run_again_after_a_401(
        tmp_path: Path, pki: Pki, tls_server: FakeApiServer) -> None:
    api = AgentApi(ApiClient(load_kubeconfig(_plugin_kubeconfigs(
        tmp_path, tls_server.url, pki, "token")), user_agent="test"))
    tls_server.tokens = {"exec-token-1"}
    assert api.list_pods(field_selector="spec.nodeName=n", timeout=5)["kind"] == "PodList"
    assert tls_server.requests[-1].headers["Authorization"] == "Bearer exec-token-1"
    tls_server.tokens = {"exec-token-2"}  # the first one was revoked
    api.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert [r.headers["Authorization"] for r in tls_server.requests[-2:]] == [
        "Bearer exec-token-1", "Bearer exec-token-2"]
    tls_server.tokens = {"never"}
    with pytest.raises(APIUnauthorizedError):
        api.list_pods(field_selector="spec.nodeName=n", timeout=5)
    assert len((tmp_path / "runs").read_text().splitlines()) == 3


def test_a_real_plugin_client_certificate_does_mutual_tls(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "c.pem").write_bytes(pki.client.cert)
    (tmp_path / "k.pem").write_bytes(pki.client.key)
    with serve(pki, tmp_path / "server", client_cert_required=True) as server:
        server.nodes["n"] = {"metadata": {"name": "n"}}
        api = AgentApi(ApiClient(load_kubeconfig(_plugin_kubeconfigs(
            tmp_path, server.url, pki, "cert", str(tmp_path / "c.pem"),
            str(tmp_path / "k.pem"))), user_agent="test"))
        assert api.get_node("n", timeout=5)["metadata"]["name"] == "n"
        assert "Authorization" not in server.requests[-1].headers


def test_the_namespace_comes_from_the_context_or_the_service_account(tmp_path: Path) -> None:
    kc = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "http://h"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "namespace": "ml"}}]})
    assert load_kubeconfig(kc).namespace == "ml"
    sa = tmp_path / "sa"
    sa.mkdir()
    for name, text in (("token", "t"), ("ca.crt", "ca"), ("namespace", "gpu-auditor\n")):
        (sa / name).write_text(text)
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert load_config(env=pod, sa_dir=sa).namespace == "gpu-auditor"
