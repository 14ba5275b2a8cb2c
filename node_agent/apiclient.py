"""A small Kubernetes API client on the standard library (``http.client`` + ``ssl``).

The agent makes five kinds of request: list this node's pods, read its Node, and get, create or
replace its cluster-scoped GPUNodeReport. The ``kubernetes`` package would cost ~20 MiB of RSS
for that (bench/results/agent_scrape.md); this module costs about 2 MiB.

Config comes from a kubeconfig file (:func:`load_kubeconfig`: the current context's server,
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``tls-server-name``,
``client-certificate(-data)`` / ``client-key(-data)``, ``token`` / ``tokenFile``) or from the
pod's service account (:func:`load_incluster`). Token files are re-read every
``token_refresh`` seconds (projected tokens rotate) and at once on a 401. Every request has a
timeout (the whole request, not only each socket operation). Every failure is an
:class:`ApiError`: ``status`` is the HTTP status, or ``None`` when no response came (connection,
TLS, timeout).
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from node_agent.errors import ConfigError

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
USER_AGENT = "gpu-auditor-agent"
_CHUNK = 64 * 1024


class ApiError(Exception):
    """A failed request. ``status``: the HTTP status, None when there was no response."""

    def __init__(self, status: int | None, reason: str, body: bytes = b"") -> None:
        super().__init__(f"HTTP {status}: {reason}" if status is not None else reason)
        self.status = status
        self.reason = reason
        self.body = body


@dataclass(frozen=True)
class ClusterConfig:
    """Where the API server is and how to authenticate to it (file paths, never key bytes)."""

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


# ---- config ---------------------------------------------------------------------------------


def _named(entries: Any, name: str, kind: str, where: str) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(kind)
            return value if isinstance(value, dict) else {}
    raise ConfigError(f"{where}: no {kind} named {name!r}")


def _b64(value: Any, field: str, where: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as err:
        raise ConfigError(f"{where}: {field} is not valid base64") from err


def parse_kubeconfig(data: Mapping[str, Any], base_dir: Path, where: str = "kubeconfig",
                     context: str | None = None) -> ClusterConfig:
    """The ClusterConfig of ``context`` (default: ``current-context``). Relative file paths are
    relative to ``base_dir`` (the kubeconfig's folder), as kubectl reads them."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: not a kubeconfig (a mapping)")
    name = context or data.get("current-context")
    if not name:
        raise ConfigError(f"{where}: no current-context")
    ctx = _named(data.get("contexts"), str(name), "context", where)
    if not ctx.get("cluster"):
        raise ConfigError(f"{where}: context {name!r} names no cluster")
    cluster = _named(data.get("clusters"), str(ctx["cluster"]), "cluster", where)
    user = _named(data.get("users"), str(ctx["user"]), "user", where) if ctx.get("user") else {}

    server = cluster.get("server")
    if not isinstance(server, str) or urlsplit(server).scheme not in ("https", "http"):
        raise ConfigError(f"{where}: cluster {ctx['cluster']!r} needs an http(s) server URL, "
                          f"got {server!r}")
    if cluster.get("proxy-url"):
        raise ConfigError(f"{where}: proxy-url is not supported by the agent")
    for unsupported in ("exec", "auth-provider", "username", "password"):
        if user.get(unsupported):
            raise ConfigError(f"{where}: user {ctx.get('user')!r}: {unsupported} is not "
                              "supported by the agent; use a token, tokenFile or a client "
                              "certificate")

    def path(key: str) -> Path | None:
        value = (cluster if key == "certificate-authority" else user).get(key)
        if not value:
            return None
        p = Path(str(value)).expanduser()
        return p if p.is_absolute() else base_dir / p

    ca_data = cluster.get("certificate-authority-data")
    cert_data = user.get("client-certificate-data")
    key_data = user.get("client-key-data")
    cfg = ClusterConfig(
        server=server.rstrip("/"),
        ca_file=None if ca_data else path("certificate-authority"),
        ca_data=_b64(ca_data, "certificate-authority-data", where).decode() if ca_data else None,
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=cluster.get("tls-server-name") or None,
        client_cert_file=None if cert_data else path("client-certificate"),
        client_key_file=None if key_data else path("client-key"),
        client_cert_data=_b64(cert_data, "client-certificate-data", where) if cert_data else None,
        client_key_data=_b64(key_data, "client-key-data", where) if key_data else None,
        token=str(user["token"]) if user.get("token") else None,
        token_file=None if user.get("token") else path("tokenFile"),
    )
    has_cert = cfg.client_cert_file is not None or cfg.client_cert_data is not None
    has_key = cfg.client_key_file is not None or cfg.client_key_data is not None
    if has_cert != has_key:
        raise ConfigError(f"{where}: a client certificate needs its key and the other way round")
    return cfg


def load_kubeconfig(path: Path | str, context: str | None = None) -> ClusterConfig:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err}") from err
    return parse_kubeconfig(data or {}, path.resolve().parent, str(path), context)


def load_incluster(env: Mapping[str, str] | None = None,
                   sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterConfig:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, its token and CA."""
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
    return ClusterConfig(server=f"https://{host}:{port}", ca_file=ca, token_file=token)


# ---- TLS ------------------------------------------------------------------------------------


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` needs files: write them 0600 into a private (0700) temp folder, load,
    and remove them at once (the context keeps the key in memory)."""
    folder = tempfile.mkdtemp(prefix="gpu-auditor-agent-")
    try:
        paths = []
        for name, data in (("client.crt", cert), ("client.key", key)):
            p = os.path.join(folder, name)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(p)
        ctx.load_cert_chain(paths[0], paths[1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ssl_context(cfg: ClusterConfig) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(
            cafile=str(cfg.ca_file) if cfg.ca_file else None, cadata=cfg.ca_data)
        if cfg.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.client_cert_data is not None and cfg.client_key_data is not None:
            _load_cert_chain(ctx, cfg.client_cert_data, cfg.client_key_data)
        elif cfg.client_cert_file is not None and cfg.client_key_file is not None:
            ctx.load_cert_chain(str(cfg.client_cert_file), str(cfg.client_key_file))
    except (OSError, ssl.SSLError, ValueError) as err:
        raise ConfigError(f"TLS config for {cfg.server}: {err}") from err
    return ctx


class _HTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that may verify the server under another name (tls-server-name)."""

    def __init__(self, host: str, port: int | None, *, timeout: float,
                 context: ssl.SSLContext, server_name: str | None) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._ctx = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._ctx.wrap_socket(self.sock,
                                          server_hostname=self._server_name or self.host)


# ---- the client -----------------------------------------------------------------------------


class ApiClient:
    """Synchronous, thread-safe; a new connection per request (the agent makes a few a minute)."""

    def __init__(self, cfg: ClusterConfig, *, token_refresh: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 user_agent: str = USER_AGENT) -> None:
        self.config = cfg
        self.user_agent = user_agent
        url = urlsplit(cfg.server)
        self._https = url.scheme == "https"
        if not url.hostname:
            raise ConfigError(f"API server URL {cfg.server!r} has no host")
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._ssl = ssl_context(cfg) if self._https else None
        self._token_refresh = token_refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._token = cfg.token
        self._token_read: float | None = None
        if cfg.token_file is not None:
            try:
                self._token = self._read_token(cfg.token_file)
            except OSError as err:
                raise ConfigError(f"cannot read token file {cfg.token_file}: {err}") from err
            self._token_read = clock()

    @staticmethod
    def _read_token(path: Path) -> str:
        return path.read_text().strip()

    def _bearer(self, force: bool = False) -> str | None:
        """The token, re-read from its file when older than ``token_refresh`` (or ``force``)."""
        path = self.config.token_file
        if path is None:
            return self._token
        with self._lock:
            now = self._clock()
            if force or self._token_read is None or now - self._token_read >= self._token_refresh:
                try:
                    self._token = self._read_token(path)
                except OSError as err:  # keep the last one; the server will say if it expired
                    log.warning("cannot re-read token file %s: %s", path, err)
                self._token_read = now
            return self._token

    # -- HTTP --

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, timeout: float = 10.0,
                content_type: str = "application/json") -> Any:
        """One request; the decoded JSON response. Raises ApiError."""
        data = self.request_bytes(method, path, query=query, body=body, timeout=timeout,
                                  content_type=content_type)
        try:
            return json.loads(data)
        except ValueError as err:
            raise ApiError(200, f"{method} {path}: the response is not JSON") from err

    def request_bytes(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                      body: Any = None, timeout: float = 10.0,
                      content_type: str = "application/json") -> bytes:
        """One request; the raw response body (e.g. a container log). Raises ApiError."""
        payload = None if body is None else json.dumps(body).encode()
        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        status, reason, data = self._send(method, url, payload, timeout, self._bearer(),
                                          content_type)
        if status == 401 and self.config.token_file is not None:  # rotated meanwhile?
            status, reason, data = self._send(method, url, payload, timeout,
                                              self._bearer(force=True), content_type)
        if status >= 400:
            raise ApiError(status, _status_message(data) or reason, data)
        return data

    def _send(self, method: str, url: str, payload: bytes | None, timeout: float,
              token: str | None, content_type: str = "application/json",
              ) -> tuple[int, str, bytes]:
        deadline = time.monotonic() + timeout
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if payload is not None:
            headers["Content-Type"] = content_type
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn: http.client.HTTPConnection
        if self._ssl is not None:
            conn = _HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl,
                                    server_name=self.config.tls_server_name)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout:g} s")
            return remaining

        try:
            conn.connect()
            sock = conn.sock  # kept: conn.sock is dropped when the server closes the connection
            assert sock is not None
            sock.settimeout(left())
            conn.request(method, url, body=payload, headers=headers)
            sock.settimeout(left())
            response = conn.getresponse()
            chunks = []
            while True:
                sock.settimeout(left())
                chunk = response.read1(_CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
            return response.status, response.reason, b"".join(chunks)
        except (OSError, http.client.HTTPException) as err:  # incl. ssl.SSLError, timeouts
            what = "timed out" if isinstance(err, (TimeoutError, socket.timeout)) else "failed"
            raise ApiError(None, f"{method} {self.config.server}{url} {what}: "
                           f"{err or type(err).__name__}") from err
        finally:
            conn.close()

    # -- the calls the agent makes --

    def list_pods(self, *, field_selector: str, timeout: float = 10.0) -> dict[str, Any]:
        """A PodList (raw JSON) over all namespaces."""
        result: dict[str, Any] = self.request("GET", "/api/v1/pods",
                                              query={"fieldSelector": field_selector},
                                              timeout=timeout)
        return result

    def get_node(self, name: str, *, timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/api/v1/nodes/{quote(name, safe='')}",
                                              timeout=timeout)
        return result

    def get_cluster_object(self, group: str, version: str, plural: str, name: str, *,
                           timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET", f"{_objects(group, version, plural)}/{quote(name, safe='')}", timeout=timeout)
        return result

    def create_cluster_object(self, group: str, version: str, plural: str,
                              body: Mapping[str, Any], *, timeout: float = 10.0
                              ) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", _objects(group, version, plural),
                                              body=body, timeout=timeout)
        return result

    def replace_cluster_object(self, group: str, version: str, plural: str, name: str,
                               body: Mapping[str, Any], *, timeout: float = 10.0
                               ) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PUT", f"{_objects(group, version, plural)}/{quote(name, safe='')}", body=body,
            timeout=timeout)
        return result


def _objects(group: str, version: str, plural: str) -> str:
    return f"/apis/{quote(group, safe='')}/{quote(version, safe='')}/{quote(plural, safe='')}"


def _status_message(data: bytes) -> str | None:
    """The ``message`` of a ``Status`` error body, if that is what came back."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else None
