"""Kubernetes config: kubeconfig files (one or several, merged as kubectl merges them),
data fields, exec users, the namespace, and the in-cluster service account."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.base.errors import ConfigError
from gpu_auditor.base.kubeconfig import (
    ClusterConfig,
    load_config,
    load_incluster,
    load_kubeconfig,
    parse_kubeconfig,
)

from ..node_agent.apiserver_helpers import Pki, b64
from .base_helpers import exec_user, service_account, write

pytestmark = pytest.mark.unit


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


def test_incluster_config_needs_the_env_and_the_mounted_token(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_incluster({}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="token not found"):
        load_incluster(env, tmp_path)
    sa = service_account(tmp_path, pki, "t")
    assert load_incluster(env, sa) == ClusterConfig(
        server="https://[fd00::1]:443", ca_file=sa / "ca.crt", token_file=sa / "token")


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


def test_an_exec_user_is_read_with_its_command_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    kc = write(tmp_path / "config", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://h:443", "certificate-authority-data": b64(b"CA"),
            "extensions": [{"name": "client.authentication.k8s.io/exec",
                            "extension": {"audience": "k8s"}}]}}],
        "users": [{"name": "u", "user": exec_user(provideClusterInfo=True)}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]})
    plugin = load_kubeconfig(kc).exec
    assert plugin is not None
    assert plugin.command == str(tmp_path / "bin" / "get-token")
    assert (plugin.args, plugin.env, plugin.interactive_mode) == (
        ("--cluster", "x"), (("PROFILE", "ml"),), "Never")
    assert plugin.cluster == {"server": "https://h:443", "certificate-authority-data": b64(b"CA"),
                              "config": {"audience": "k8s"}}


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


# -- what kubectl refuses, refused (issue 26, item 9) ---------------------------------------------

ALIAS_BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
current-context: *h
"""


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """682 bytes of aliases cost 15.6 s and 1.2 GB (the context name was made text); kubectl's
    YAML decoder refuses excessive aliasing."""
    path = tmp_path / "bomb"
    path.write_text(ALIAS_BOMB)
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases expand past"):
        load_kubeconfig(path)
    assert time.perf_counter() - started < 1.0


def test_a_value_of_another_type_where_a_string_belongs_is_refused_not_made_text(
    tmp_path: Path
) -> None:
    data = _config()
    data["current-context"] = ["b"] * 3
    with pytest.raises(ConfigError, match="current-context must be a string, not a list"):
        load_kubeconfig(write(tmp_path / "c", data))
    data = _config()
    data["contexts"][1]["context"]["namespace"] = {"a": 1}  # type: ignore[index]
    with pytest.raises(ConfigError, match="namespace must be a string"):
        load_kubeconfig(write(tmp_path / "c", data))


def test_an_alias_inside_its_own_anchor_is_a_config_error_not_a_traceback(
    tmp_path: Path
) -> None:
    """A recursive alias in the exec extension with provideClusterInfo ended in a traceback
    (the ExecCredential could not be made JSON)."""
    path = tmp_path / "recursive"
    path.write_text("""\
current-context: x
clusters:
- name: c
  cluster:
    server: https://h
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: &loop {a: [*loop]}
users:
- name: u
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: p, interactiveMode: Never,
           provideClusterInfo: true}
contexts:
- name: x
  context: {cluster: c, user: u}
""")
    with pytest.raises(ConfigError, match="refers to its own anchor"):
        load_kubeconfig(path)


def test_a_kubeconfig_that_never_ends_is_read_to_a_bound(tmp_path: Path) -> None:
    """KUBECONFIG=/dev/zero read 2.3 GB and died of MemoryError."""
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        load_kubeconfig("/dev/zero")
    assert time.perf_counter() - started < 5.0


def test_nesting_past_the_parser_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "deep"
    path.write_text("current-context: " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(path)


def test_proxy_url_is_read_and_a_scheme_the_client_cannot_speak_is_refused() -> None:
    data = _config()
    data["clusters"][1]["cluster"]["proxy-url"] = "http://proxy.example:3128"  # type: ignore[index]
    assert parse_kubeconfig(data, Path("/")).proxy_url == "http://proxy.example:3128"
    data["clusters"][1]["cluster"]["proxy-url"] = "socks5://proxy:1080"  # type: ignore[index]
    with pytest.raises(ConfigError, match="socks5 is not supported"):
        parse_kubeconfig(data, Path("/"))


# -- any bytes: a config or ConfigError (issue 26; the full run: bench/fuzz_operator_parsers.py)

YAML_PIECES = st.sampled_from(["current-context: x\n", "clusters:\n", "- name: c\n",
                               "  cluster: {server: https://h}\n", "users: [{name: u}]\n",
                               "&a ", "*a", "[*a, *a]", "{", "}", "[", "]", "- ", ": ",
                               "!!binary ", "? ", "'", "\"", "~", "2023-02-30",
                               "contexts: [{name: x, context: {cluster: c}}]\n", "\n"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=512), st.lists(YAML_PIECES, max_size=40).map(
    lambda parts: "".join(parts).encode())))
def test_any_bytes_are_a_config_or_a_config_error(data: bytes) -> None:
    from gpu_auditor.base.kubeconfig import parse_yaml

    try:
        parsed = parse_yaml(data, "fuzzed")
        parse_kubeconfig(parsed if isinstance(parsed, dict) else {}, Path("/tmp"), "fuzzed")
    except ConfigError:
        pass


@pytest.mark.parametrize(("field", "url"), [("server", "https://ap[i.example:6443"),
                                            ("server", "https://h:port"),
                                            ("proxy-url", "http://proxy].example:3128")])
def test_a_url_urlsplit_cannot_read_is_a_config_error_not_a_traceback(field: str,
                                                                     url: str) -> None:
    """Found by bench/fuzz_operator_parsers.py: ValueError out of urlsplit."""
    data = _config()
    data["clusters"][1]["cluster"][field] = url  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"is not a URL|needs an http"):
        parse_kubeconfig(data, Path("/"))


def test_certificate_authority_data_that_is_not_pem_text_is_a_config_error() -> None:
    """Found by bench/fuzz_operator_parsers.py: its bytes raised UnicodeDecodeError."""
    data = _config()
    data["clusters"][1]["cluster"]["certificate-authority-data"] = "YrE="  # type: ignore[index]
    with pytest.raises(ConfigError, match="does not hold PEM text"):
        parse_kubeconfig(data, Path("/"))
