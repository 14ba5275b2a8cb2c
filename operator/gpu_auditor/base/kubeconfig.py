"""Where the API server is and how to authenticate to it, read as kubectl reads it.

- In a pod: the service account (`load_incluster`): `KUBERNETES_SERVICE_HOST`/`_PORT`, the
  mounted CA and the token file (re-read as it rotates: `credentials.py`).
- Elsewhere: kubeconfig files (`load_kubeconfig`). `KUBECONFIG` may name several, separated by
  `os.pathsep`, merged as kubectl merges them: the first file to name a cluster, user or context
  wins it whole, the first `current-context` wins, files in the list that do not exist are
  skipped, and a relative path is relative to the file that wrote it. A user may authenticate
  with a token, a token file, a client certificate, or an `exec` credential plugin
  (`client.authentication.k8s.io/v1` or `v1beta1`, as EKS, GKE and AKS write them).

`load_config` picks one, as the operator and the agent do: an explicit kubeconfig (a flag, or
`$KUBECONFIG`) first, then the service account, then `~/.kube/config`. Only the standard
library, plus PyYAML imported when a kubeconfig is read (both extras install it).

A kubeconfig is read as kubectl reads it, and refused where kubectl refuses it (issue 26): at
most MAX_KUBECONFIG bytes of a file (`KUBECONFIG=/dev/zero` read 2.3 GB), YAML aliases that
expand past MAX_EXPANDED (682 bytes of an alias bomb cost 15.6 s and 1.2 GB; kubectl's YAML
decoder refuses "excessive aliasing") or that contain themselves, and a value of another type
where a string or a boolean belongs (never turned into text).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpu_auditor.base.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
PROXY_SCHEMES = ("http", "https")
"""The `proxy-url` schemes the client speaks (kubectl also takes socks5)."""
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
"""The cluster extension whose `config` an exec plugin gets with `provideClusterInfo`."""
MAX_KUBECONFIG = 16 << 20
"""Bytes of one kubeconfig file read at most (a kubeconfig of 100 clusters with their
certificates is some 500 KB)."""
MAX_EXPANDED = 2 * MAX_KUBECONFIG
"""Nodes plus scalar characters a file's YAML may stand for once its aliases are expanded
(without aliases a file stands for less than twice its size)."""


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig user's `exec` credential plugin."""

    command: str
    api_version: str = EXEC_API_VERSIONS[0]
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = field(default=None, compare=False)
    """`spec.cluster` of the ExecCredential handed to the plugin (`provideClusterInfo`)."""


@dataclass(frozen=True)
class ClusterConfig:
    """Where the API server is and how to authenticate to it (file paths, never key files
    written anywhere)."""

    server: str  # https://host:port[/prefix] (http:// for e.g. kubectl proxy)
    ca_file: Path | None = None
    ca_data: str | None = None  # PEM
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    client_cert_data: bytes | None = None  # PEM
    client_key_data: bytes | None = None  # PEM
    token: str | None = None
    token_file: Path | None = None
    exec: ExecConfig | None = None
    namespace: str | None = None
    """The context's namespace, or the service account's own."""
    where: str = field(default="", compare=False)
    """Where this came from, for messages."""
    proxy_url: str | None = None
    """The cluster's `proxy-url` (http, https or socks5); None: HTTPS_PROXY / NO_PROXY."""


# ---- one kubeconfig, or several merged --------------------------------------------------------


@dataclass
class _Merged:
    """The entries of one or more kubeconfig files; each entry remembers its file's folder."""

    current_context: str | None = None
    clusters: dict[str, tuple[Mapping[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[Mapping[str, Any], Path]] = field(default_factory=dict)
    contexts: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def add(self, data: object, base_dir: Path, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: not a kubeconfig (a mapping)")
        current = _string(data, "current-context", where)
        if self.current_context is None and current:
            self.current_context = current
        for kind, into in (("cluster", self.clusters), ("user", self.users)):
            for name, entry in _entries(data, kind, where):
                into.setdefault(name, (entry, base_dir))
        for name, entry in _entries(data, "context", where):
            self.contexts.setdefault(name, entry)


def _entries(data: Mapping[str, Any], kind: str, where: str) -> list[tuple[str, Mapping[str, Any]]]:
    items = data.get(f"{kind}s") or []
    if not isinstance(items, list):
        raise ConfigError(f"{where}: {kind}s must be a list")
    out = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{where}: every entry of {kind}s needs a name")
        value = item.get(kind) or {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: {kind} {item['name']!r} is not a mapping")
        out.append((item["name"], value))
    return out


def _string(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    """A string field of a kubeconfig entry; None when absent; a value of another type is
    refused as kubectl refuses it (never turned into text: an alias can make it any size)."""
    value = entry.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {key} must be a string, not a {type(value).__name__}")


def _url(value: str, name: str, where: str) -> tuple[str, str]:
    """(scheme, host) of a URL whose port, when it has one, is a port; ConfigError else (a
    bracket out of place or a port of letters raised ValueError out of urlsplit)."""
    try:
        url = urlsplit(value)
        _ = url.port
    except ValueError as err:
        raise ConfigError(f"{where}: {name} {value!r} is not a URL: {err}") from None
    return url.scheme, url.hostname or ""


def _flag(entry: Mapping[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: {key} must be true or false")


def _b64(value: object, name: str, where: str) -> bytes:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {name} must be a string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ConfigError(f"{where}: {name} is not valid base64") from err


def _pem(value: object, name: str, where: str) -> str:
    """A base64 field that holds PEM text: decoded, and refused when it is not text (the
    bytes of a wrong base64 string raised UnicodeDecodeError out of the loader)."""
    try:
        return _b64(value, name, where).decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {name} does not hold PEM text") from None


def _path(value: object, base_dir: Path) -> Path | None:
    if not value:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{base_dir}: a path must be a string")
    p = Path(value).expanduser()
    return p if p.is_absolute() else base_dir / p


def _exec(raw: object, user: str, cluster: Mapping[str, Any], server: str, base_dir: Path,
          where: str) -> ExecConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: user {user!r}: exec must be a mapping")
    api_version = raw.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"{where}: user {user!r}: exec apiVersion {api_version!r} is not "
                          f"supported (use {' or '.join(EXEC_API_VERSIONS)})")
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{where}: user {user!r}: exec needs a command")
    if os.sep in command or (os.altsep and os.altsep in command):
        command = str(_path(command, base_dir))  # ./bin/plugin: relative to the kubeconfig
    args = raw.get("args") or []
    env = raw.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: user {user!r}: exec args must be a list of strings")
    if not isinstance(env, list) or not all(
            isinstance(e, Mapping) and isinstance(e.get("name"), str)
            and isinstance(e.get("value"), str) for e in env):
        raise ConfigError(f"{where}: user {user!r}: exec env must be a list of name/value")
    mode = raw.get("interactiveMode")
    if mode is None and api_version == EXEC_API_VERSIONS[0]:
        raise ConfigError(f"{where}: user {user!r}: exec interactiveMode is required in "
                          f"{api_version} (Never, IfAvailable or Always)")
    mode = mode or "IfAvailable"
    if not isinstance(mode, str) or mode not in INTERACTIVE_MODES:
        raise ConfigError(f"{where}: user {user!r}: exec interactiveMode {mode!r} is not one "
                          f"of {', '.join(INTERACTIVE_MODES)}")
    info = None
    if _flag(raw, "provideClusterInfo", f"{where}: user {user!r}: exec"):
        info = _cluster_info(cluster, server, where)
    return ExecConfig(
        command=command, api_version=str(api_version), args=tuple(args),
        env=tuple((e["name"], e["value"]) for e in env), interactive_mode=mode,
        install_hint=_string(raw, "installHint", where) or "", cluster=info,
    )


def _cluster_info(cluster: Mapping[str, Any], server: str, where: str) -> dict[str, Any]:
    """The ExecCredential's `spec.cluster`, in the JSON form kubectl gives a plugin."""
    info: dict[str, Any] = {"server": server}
    for key, out in (("tls-server-name", "tls-server-name"),
                     ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
                     ("proxy-url", "proxy-url"), ("disable-compression", "disable-compression")):
        if cluster.get(key):
            info[out] = cluster[key]
    ca = cluster.get("certificate-authority-data")
    if ca:  # validated here; handed on as the base64 text JSON carries bytes in
        _b64(ca, "certificate-authority-data", where)
        info["certificate-authority-data"] = str(ca)
    extensions = cluster.get("extensions") or []
    for item in extensions if isinstance(extensions, list) else []:
        if isinstance(item, Mapping) and item.get("name") == EXEC_EXTENSION:
            info["config"] = item.get("extension")
    try:  # handed to the plugin as JSON: any value YAML built, but it must be JSON
        json.dumps(info)
    except (TypeError, ValueError, RecursionError) as err:
        raise ConfigError(f"{where}: the cluster's {EXEC_EXTENSION} extension is not JSON "
                          f"({type(err).__name__})") from None
    return info


def _resolve(merged: _Merged, context: str | None, where: str) -> ClusterConfig:
    name = context or merged.current_context
    if not name:
        raise ConfigError(f"{where}: no current-context")
    ctx = merged.contexts.get(name)
    if ctx is None:
        raise ConfigError(f"{where}: no context named {name!r}")
    cluster_name = _string(ctx, "cluster", f"{where}: context {name!r}")
    user_name = _string(ctx, "user", f"{where}: context {name!r}")
    if not cluster_name:
        raise ConfigError(f"{where}: context {name!r} names no cluster")
    if cluster_name not in merged.clusters:
        raise ConfigError(f"{where}: no cluster named {cluster_name!r}")
    cluster, cluster_dir = merged.clusters[cluster_name]
    user: Mapping[str, Any] = {}
    user_dir = cluster_dir
    if user_name:
        if user_name not in merged.users:
            raise ConfigError(f"{where}: no user named {user_name!r}")
        user, user_dir = merged.users[user_name]

    here = f"{where}: cluster {cluster_name!r}"
    server = _string(cluster, "server", here)
    if server is None or _url(server, "server", here)[0] not in ("https", "http"):
        raise ConfigError(f"{here} needs an http(s) server URL, got {server!r}")
    proxy_url = _string(cluster, "proxy-url", here) or None
    if proxy_url is not None:
        scheme, host = _url(proxy_url, "proxy-url", here)
        if scheme not in PROXY_SCHEMES or not host:
            socks = " (socks5 is not supported)" if proxy_url.startswith("socks") else ""
            raise ConfigError(f"{here}: proxy-url must be an http:// or https:// URL{socks}")
    for unsupported in ("auth-provider", "username", "password"):
        if user.get(unsupported):
            raise ConfigError(f"{where}: user {user_name!r}: {unsupported} is not supported; "
                              "use a token, tokenFile, a client certificate or an exec plugin")
    server = server.rstrip("/")
    ca_data = cluster.get("certificate-authority-data")
    cert_data = user.get("client-certificate-data")
    key_data = user.get("client-key-data")
    who = f"{where}: user {user_name!r}"
    token = _string(user, "token", who)
    cfg = ClusterConfig(
        server=server,
        ca_file=None if ca_data else _path(cluster.get("certificate-authority"), cluster_dir),
        ca_data=_pem(ca_data, "certificate-authority-data", where) if ca_data else None,
        insecure_skip_tls_verify=_flag(cluster, "insecure-skip-tls-verify", here),
        tls_server_name=_string(cluster, "tls-server-name", here) or None,
        client_cert_file=None if cert_data else _path(user.get("client-certificate"), user_dir),
        client_key_file=None if key_data else _path(user.get("client-key"), user_dir),
        client_cert_data=_b64(cert_data, "client-certificate-data", where) if cert_data else None,
        client_key_data=_b64(key_data, "client-key-data", where) if key_data else None,
        token=token or None,
        token_file=None if token else _path(user.get("tokenFile"), user_dir),
        exec=(_exec(user["exec"], str(user_name), cluster, server, user_dir, where)
              if user.get("exec") else None),
        namespace=_string(ctx, "namespace", f"{where}: context {name!r}") or None,
        where=where,
        proxy_url=proxy_url,
    )
    has_cert = cfg.client_cert_file is not None or cfg.client_cert_data is not None
    has_key = cfg.client_key_file is not None or cfg.client_key_data is not None
    if has_cert != has_key:
        raise ConfigError(f"{where}: a client certificate needs its key and the other way round")
    return cfg


def parse_kubeconfig(data: Mapping[str, Any], base_dir: Path, where: str = "kubeconfig",
                     context: str | None = None) -> ClusterConfig:
    """The ClusterConfig of `context` (default: `current-context`) in one parsed kubeconfig;
    relative paths are relative to `base_dir` (the kubeconfig's folder)."""
    merged = _Merged()
    merged.add(data, base_dir, where)
    return _resolve(merged, context, where)


def kubeconfig_paths(value: str | os.PathLike[str]) -> list[Path]:
    """The files of a `KUBECONFIG`-style list, in order, each once; empty entries skipped."""
    out: list[Path] = []
    for part in str(value).split(os.pathsep):
        if part.strip():
            path = Path(part.strip()).expanduser()
            if path not in out:
                out.append(path)
    return out


def load_kubeconfig(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                    context: str | None = None) -> ClusterConfig:
    """The ClusterConfig of `context` in one kubeconfig file or several merged (a
    `KUBECONFIG`-style list, or a sequence of paths). Of several, files that do not exist are
    skipped, as kubectl does; a single named file must exist."""
    files = (kubeconfig_paths(paths) if isinstance(paths, str | os.PathLike)
             else [Path(p).expanduser() for p in paths])
    if not files:
        raise ConfigError("no kubeconfig file named")
    where = os.pathsep.join(map(str, files))
    merged = _Merged()
    read = 0
    for path in files:
        if len(files) > 1 and not path.exists():
            continue
        data = read_yaml(path)
        merged.add(data or {}, path.resolve().parent, str(path))
        read += 1
    if not read:
        raise ConfigError(f"none of the kubeconfig files exists: {where}")
    return _resolve(merged, context, where)


def read_yaml(path: Path) -> object:
    """One kubeconfig file's YAML: at most MAX_KUBECONFIG bytes read (a FIFO or a process
    substitution is read too, to that bound), its aliases expanding to at most MAX_EXPANDED and
    never containing themselves. ConfigError for anything else."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_KUBECONFIG + 1)
    except OSError as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err.strerror or err}") from err
    return parse_yaml(raw, f"kubeconfig {path}")


def parse_yaml(raw: bytes, where: str) -> object:
    """`read_yaml` on bytes already read."""
    import yaml

    if len(raw) > MAX_KUBECONFIG:
        raise ConfigError(f"cannot read {where}: larger than {MAX_KUBECONFIG >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {where}: not UTF-8 text") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot read {where}: {err}") from None
    except RecursionError:
        raise ConfigError(f"cannot read {where}: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as err:  # a value YAML cannot construct
        raise ConfigError(f"cannot read {where}: {err}") from None
    finally:
        loader.dispose()


def _expanded_size(root: Any, where: str) -> int:
    """What the YAML graph under ``root`` stands for once every alias is expanded (a node
    counts 1, a scalar also its length), computed once per node: ConfigError past
    MAX_EXPANDED, or for an alias inside its own anchor."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the current path
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            size = 1 + (len(node.value) if isinstance(node.value, str) else 0) + sum(
                sizes[id(child)] for child in children)
            if size > MAX_EXPANDED:
                raise ConfigError(f"{where}: its YAML aliases expand past {MAX_EXPANDED} "
                                  "nodes and characters (kubectl refuses excessive aliasing)")
            sizes[key] = size
            continue
        if key in sizes:
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise ConfigError(f"{where}: a YAML alias refers to its own anchor")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: Any) -> list[Any]:
    value = node.value
    if isinstance(value, str):
        return []
    return [part for item in value for part in (item if isinstance(item, tuple) else (item,))]


def load_incluster(env: Mapping[str, str] | None = None,
                   sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterConfig:
    """The pod's service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, its token and CA."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("in-cluster config needs KUBERNETES_SERVICE_HOST and "
                          "KUBERNETES_SERVICE_PORT")
    token, ca = sa_dir / "token", sa_dir / "ca.crt"
    for f in (token, ca):
        if not f.is_file():
            raise ConfigError(f"in-cluster config: {f} not found (is a service account token "
                              "mounted?)")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        namespace = (sa_dir / "namespace").read_text().strip() or None
    except OSError:
        namespace = None
    return ClusterConfig(server=f"https://{host}:{port}", ca_file=ca, token_file=token,
                         namespace=namespace, where="in-cluster service account")


def in_cluster(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("KUBERNETES_SERVICE_HOST"))


def load_config(kubeconfig: str | os.PathLike[str] | None = None, *,
                env: Mapping[str, str] | None = None,
                sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterConfig:
    """An explicit kubeconfig (a path or a `KUBECONFIG`-style list; else `$KUBECONFIG`), else
    the service account when in a pod, else `~/.kube/config`. Raises ConfigError."""
    env = os.environ if env is None else env
    explicit = kubeconfig or env.get("KUBECONFIG")
    if explicit:
        return load_kubeconfig(explicit)
    if in_cluster(env) and (sa_dir / "token").is_file():
        return load_incluster(env, sa_dir)
    default = Path.home() / ".kube" / "config"
    if default.is_file():
        return load_kubeconfig(default)
    raise ConfigError("no Kubernetes config: not in a pod, no $KUBECONFIG, no ~/.kube/config")
