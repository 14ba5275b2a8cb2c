"""Credentials: the service account's rotating token, exec plugins as kubectl runs them (env,
exec info, interactive modes, cache until expiry, errors), and real plugins against a real TLS
server."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.credentials import Credentials, parse_exec_credential, run_bounded
from gpu_auditor.base.errors import APICredentialsError, APIUnauthorizedError, ConfigError
from gpu_auditor.base.kubeconfig import ExecConfig, load_incluster, load_kubeconfig
from node_agent.kube import AgentApi

from ..node_agent.apiserver_helpers import FakeApiServer, Pki, b64, serve
from .base_helpers import V1, exec_user, service_account, write

pytestmark = pytest.mark.unit


def test_incluster_client_rereads_the_rotating_token(tmp_path: Path, pki: Pki,
                                                    tls_server: FakeApiServer) -> None:
    sa = service_account(tmp_path, pki, "token-1")
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


T0 = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)


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
        "users": [{"name": "u", "user": exec_user(**extra)}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    return load_kubeconfig(kc)


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


# -- the plugin as kubectl runs it (issue 26, item 9) ---------------------------------------------


def _plugin_on_path(folder: Path, name: str, token: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f"#!{sys.executable}\nimport json, os\n"
                      "v = json.loads(os.environ['KUBERNETES_EXEC_INFO'])['apiVersion']\n"
                      f"print(json.dumps({{'apiVersion': v, 'kind': 'ExecCredential', "
                      f"'status': {{'token': '{token}'}}}}))\n")
    script.chmod(0o755)
    return script


def _bare_command_config(tmp_path: Path, **extra: Any) -> Any:
    kc = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": V1, "command": "get-token", "interactiveMode": "Never", **extra}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    return load_kubeconfig(kc)


def test_a_path_in_the_plugins_env_never_chooses_its_binary(tmp_path: Path) -> None:
    """`env: [{name: PATH, ...}]` in the kubeconfig chose which binary ran; kubectl looks the
    command up on its own PATH and hands the env to the plugin."""
    _plugin_on_path(tmp_path / "ours", "get-token", "from-our-path")
    _plugin_on_path(tmp_path / "theirs", "get-token", "from-the-kubeconfig")
    cfg = _bare_command_config(tmp_path, env=[{"name": "PATH",
                                               "value": str(tmp_path / "theirs")}])
    creds = Credentials(cfg, environ={"PATH": str(tmp_path / "ours")})
    assert creds.current().token == "from-our-path"


@pytest.mark.parametrize("entry", [".", "", "relative/bin"])
def test_a_plugin_found_through_the_current_directory_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """`.` in PATH ran a plugin from the current directory (Go refuses it: exec.ErrDot)."""
    monkeypatch.chdir(tmp_path)
    _plugin_on_path(tmp_path / (entry or "."), "get-token", "from-cwd")
    with pytest.raises(ConfigError, match="in the current directory through PATH; not run"):
        Credentials(_bare_command_config(tmp_path), environ={"PATH": entry})


def test_a_plugin_that_prints_without_end_is_stopped_at_the_output_bound(tmp_path: Path) -> None:
    """300 MB of output cost 598 MB of RSS: the 1 MiB bound was applied after reading all."""
    script = tmp_path / "flood"
    script.write_text(f"#!{sys.executable}\nimport sys\nwhile True:\n"
                      "    sys.stdout.write('x' * 65536)\n")
    script.chmod(0o755)
    kc = write(tmp_path / "config", {
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "https://h"}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": V1, "command": str(script), "interactiveMode": "Never"}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="more than 1048576 bytes of output"):
        Credentials(load_kubeconfig(kc))
    assert time.perf_counter() - started < 10.0


def test_the_bounded_runner_keeps_one_byte_past_the_limit_and_ends_the_plugin() -> None:
    done = run_bounded([sys.executable, "-c", "print('y' * 100000)"], env=dict(os.environ),
                       stdin=subprocess.DEVNULL, timeout=10.0, limit=1000)
    assert len(done.stdout) == 1001
    quick = run_bounded([sys.executable, "-c", "print('ok')"], env=dict(os.environ),
                        stdin=subprocess.DEVNULL, timeout=10.0)
    assert (quick.returncode, quick.stdout) == (0, b"ok\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded([sys.executable, "-c", "import time; time.sleep(30)"],
                    env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=0.5)
