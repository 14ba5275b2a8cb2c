"""A small Kubernetes API client on the standard library (`http.client` + `ssl`), for both wings.

Both the agent and the operator make a handful of kinds of request; the `kubernetes` package
costs them 41 MiB more RSS per process for that (65.7 MiB after a request, 180 ms to import),
this module 13.6 MiB over a bare interpreter (24.4 MiB, 37 ms), most of it `ssl`, `http.client`
and PyYAML, which any HTTPS client loads (`bench/auth_clients.py`,
bench/results/auth_clients.md; docs/dependencies.md for the decision and what would change
it). The requests each wing makes
live in that wing (`node_agent.kube`, `gpu_auditor.controller.kube`); this is the transport:
config and credentials (`kubeconfig.py`, `credentials.py`), TLS, a proxy as kubectl finds one
(the kubeconfig's `proxy-url`, else `HTTPS_PROXY`/`HTTP_PROXY` unless `NO_PROXY` names the host),
connections kept open for the next request (`MAX_IDLE`), a timeout on the whole request (not
only each socket operation), one retry with fresh
credentials after a 401 when they rotate, a bounded retry when the server says to come back
(429, 503: `Retry-After` honoured, capped), and every failure raised as one class of
`errors.py`, chosen from the status once.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from gpu_auditor.base.credentials import Credential, Credentials
from gpu_auditor.base.errors import APIConnectionError, APIError, ConfigError, from_status
from gpu_auditor.base.kubeconfig import ClusterConfig

_CHUNK = 64 * 1024
MAX_RETRIES = 3
"""Retries of one request the server asked to come back later (client-go makes up to 10)."""
MAX_RETRY_WAIT = 10.0
"""Seconds waited before one retry at most, whatever Retry-After says."""
MAX_RETRIES_WAIT = 20.0
"""Seconds all of one request's retries may wait."""
DEFAULT_RETRY_WAIT = 1.0
"""Seconds waited when the server says 503 or 429 without a Retry-After (client-go's own)."""
SAFE_METHODS = ("GET", "HEAD")
MAX_IDLE = 16
"""Connections kept open after a response for the next request (HTTP keep-alive). A new TLS
connection per request cost a GET 3.1 ms at the median against 1.4 ms on a kept one (local
API server, sequential), and under a burst the handshakes queue on both sides: the operator
writes a hundred annotations at once (bench/results/operator_scale_issue27.md)."""
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
          ConnectionAbortedError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
"""How a kept connection the server closed meanwhile fails: sent again once, on a new one, the
other kept connections dropped (a server that restarted closed them all: the retry had taken the
next kept one, as dead, and an operator's retries failed on them for minutes)."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: host, port and its Proxy-Authorization header (from user:password in the
    URL), if any."""

    host: str
    port: int
    authorization: str | None = None


def proxy_for(server: str, proxy_url: str | None, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy to reach ``server`` through, as Go's net/http finds it (kubectl): the
    kubeconfig's `proxy-url` when set; else `HTTPS_PROXY` (an https server) or `HTTP_PROXY`,
    upper case before lower case, unless the host is localhost or a loopback address, or
    `NO_PROXY` names it (`*`, a host and its subdomains, `.domain` for subdomains only, an IP,
    a CIDR, each with an optional port). ConfigError for a proxy URL this client cannot use
    (only http:// proxies: TLS to the proxy itself is not spoken)."""
    try:
        url = urlsplit(server)
        host, port = url.hostname or "", url.port
    except ValueError as err:
        raise ConfigError(f"API server URL {server!r}: {err}") from None
    if proxy_url is None:
        if _loopback(host) or _no_proxy(host, port or (443 if url.scheme == "https" else 80),
                                         _env(environ, "NO_PROXY")):
            return None
        proxy_url = _env(environ, "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY")
        if not proxy_url:
            return None
        where = "HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY"
    else:
        where = "proxy-url"
    if "://" not in proxy_url:
        proxy_url = "http://" + proxy_url  # Go reads a bare host:port as http
    try:
        proxy = urlsplit(proxy_url)
        proxy_port = proxy.port
    except ValueError as err:
        raise ConfigError(f"{where} {proxy_url!r}: {err}") from None
    if proxy.scheme != "http" or not proxy.hostname:
        raise ConfigError(f"{where} {proxy_url!r}: only http:// proxies are supported")
    auth = None
    if proxy.username is not None:
        pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
        auth = "Basic " + base64.b64encode(pair).decode()
    return Proxy(proxy.hostname, proxy_port or 80, auth)


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name) or environ.get(name.lower()) or ""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_proxy(host: str, port: int, rule: str) -> bool:
    host = host.lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in rule.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry and address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").rstrip(".")
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def retry_wait(method: str, status: int, retry_after: str | None) -> float | None:
    """Seconds to wait before the request is sent again, or None: a 429 (the server refused it
    unread: any method) or a 503 (a GET, or any method the server asked to come back with a
    Retry-After, as client-go reads it: it did not act), the server's Retry-After (whole
    seconds, as client-go reads it) capped at MAX_RETRY_WAIT, DEFAULT_RETRY_WAIT without one."""
    if status not in (429, 503):
        return None
    if status == 503 and retry_after is None and method not in SAFE_METHODS:
        return None  # the server may have acted: a write is not sent twice
    seconds = DEFAULT_RETRY_WAIT
    if retry_after is not None and retry_after.strip().isdigit() and len(retry_after) < 10:
        seconds = float(retry_after.strip())
    return min(max(seconds, 0.0), MAX_RETRY_WAIT)



def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """`load_cert_chain` needs files: write them 0600 into a private (0700) temp folder, load,
    and remove them at once (the context keeps the key in memory)."""
    folder = tempfile.mkdtemp(prefix="gpu-auditor-")
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


def ssl_context(cfg: ClusterConfig, credential: Credential | None = None) -> ssl.SSLContext:
    """TLS for `cfg`; an exec plugin's client certificate (`credential`) replaces the
    kubeconfig's own."""
    try:
        ctx = ssl.create_default_context(
            cafile=str(cfg.ca_file) if cfg.ca_file else None, cadata=cfg.ca_data)
        if cfg.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if credential is not None and credential.cert_pem and credential.key_pem:
            _load_cert_chain(ctx, credential.cert_pem, credential.key_pem)
        elif cfg.client_cert_data is not None and cfg.client_key_data is not None:
            _load_cert_chain(ctx, cfg.client_cert_data, cfg.client_key_data)
        elif cfg.client_cert_file is not None and cfg.client_key_file is not None:
            ctx.load_cert_chain(str(cfg.client_cert_file), str(cfg.client_key_file))
    except (OSError, ssl.SSLError, ValueError) as err:
        raise ConfigError(f"TLS config for {cfg.server}: {err}") from err
    return ctx


class _HTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection that may verify the server under another name (tls-server-name),
    through a proxy's CONNECT tunnel when `set_tunnel` was called."""

    def __init__(self, host: str, port: int | None, *, timeout: float,
                 context: ssl.SSLContext, server_name: str | None) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._ctx = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # to the proxy, and its tunnel, when any
        name = self._server_name or getattr(self, "_tunnel_host", None) or self.host
        self.sock = self._ctx.wrap_socket(self.sock, server_hostname=name)


class ApiClient:
    """Synchronous, thread-safe; keeps up to `MAX_IDLE` connections open between requests."""

    def __init__(self, cfg: ClusterConfig, *, user_agent: str,
                 credentials: Credentials | None = None, token_refresh: float = 60.0,
                 environ: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = cfg
        self.user_agent = user_agent
        try:
            url = urlsplit(cfg.server)
            port = url.port
        except ValueError as err:
            raise ConfigError(f"API server URL {cfg.server!r}: {err}") from None
        self._https = url.scheme == "https"
        if not url.hostname:
            raise ConfigError(f"API server URL {cfg.server!r} has no host")
        self._host = url.hostname
        self._port = port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self.proxy = proxy_for(cfg.server, cfg.proxy_url,
                               os.environ if environ is None else environ)
        self._sleep = sleep
        self.retries = 0
        """Requests sent again because the server said to come back (429, 503)."""
        self.credentials = credentials or Credentials(cfg, token_refresh=token_refresh)
        self._lock = threading.Lock()
        self._ssl_for: tuple[bytes | None, bytes | None] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._idle: list[tuple[object, http.client.HTTPConnection]] = []
        if self._https:
            self._context(self.credentials.current())  # a bad TLS config fails at start

    def _context(self, credential: Credential) -> ssl.SSLContext:
        """The TLS context for this credential's certificate (rebuilt when a plugin hands out a
        new one)."""
        key = (credential.cert_pem, credential.key_pem)
        with self._lock:
            if self._ssl is None or self._ssl_for != key:
                self._ssl = ssl_context(self.config, credential)
                self._ssl_for = key
            return self._ssl

    # -- HTTP --

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, timeout: float = 10.0,
                content_type: str = "application/json") -> Any:
        """One request; the decoded JSON response. Raises an `errors.APIError` class."""
        data = self.request_bytes(method, path, query=query, body=body, timeout=timeout,
                                  content_type=content_type)
        try:
            return json.loads(data)
        except ValueError as err:
            raise APIError(f"{method} {path}: the response is not JSON", status=200) from err
        except RecursionError:  # anyone between us and the API server can nest 100,000 deep
            raise APIError(f"{method} {path}: the response is nested too deeply to read",
                           status=200) from None

    def request_bytes(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                      body: Any = None, timeout: float = 10.0,
                      content_type: str = "application/json") -> bytes:
        """One request; the raw response body (e.g. a container log). Raises an
        `errors.APIError` class."""
        payload = None if body is None else json.dumps(body).encode()
        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        credential = self.credentials.current()  # a failing plugin: APICredentialsError
        waited = 0.0
        for attempt in range(MAX_RETRIES + 1):
            status, reason, data, retry_after = self._send(method, url, payload, timeout,
                                                           credential, content_type)
            if status == 401 and self.credentials.rotating:  # rotated or expired meanwhile?
                credential = self.credentials.refresh()
                status, reason, data, retry_after = self._send(method, url, payload, timeout,
                                                               credential, content_type)
            wait = retry_wait(method, status, retry_after)
            if wait is None or attempt == MAX_RETRIES or waited + wait > MAX_RETRIES_WAIT:
                break
            self._sleep(wait)
            waited += wait
            self.retries += 1
        if status >= 400:
            raise from_status(status, _status_message(data) or reason, data)
        return data

    def _send(self, method: str, url: str, payload: bytes | None, timeout: float,
              credential: Credential, content_type: str
              ) -> tuple[int, str, bytes, str | None]:
        """One request on a kept connection (sent again once on a new one when the server had
        closed it), or on a new one."""
        deadline = time.monotonic() + timeout
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if payload is not None:
            headers["Content-Type"] = content_type
        if credential.token:
            headers["Authorization"] = f"Bearer {credential.token}"
        proxy = self.proxy
        context = self._context(credential) if self._https else None
        key = (proxy, context)  # a connection is of one proxy and one client certificate
        if proxy is not None and not self._https:  # an http:// server through a proxy
            url = f"http://{self._host}:{self._port}{url}"
            if proxy.authorization:
                headers["Proxy-Authorization"] = proxy.authorization

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout:g} s")
            return remaining

        for attempt in range(2):
            conn, kept = (self._take(key) if attempt == 0 else None), True
            if conn is None:
                conn, kept = self._connect(context, timeout), False
            try:
                if not kept:
                    conn.connect()
                sock = conn.sock  # kept: conn.sock is dropped when the server closes it
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
                found = (response.status, response.reason, b"".join(chunks),
                         response.getheader("Retry-After"))
                response.close()  # read whole: the connection is free for the next request
            except (OSError, http.client.HTTPException) as err:  # incl. ssl.SSLError, timeouts
                conn.close()
                if kept and attempt == 0 and isinstance(err, _STALE):
                    self._drop(key)  # the server closed the kept ones, this one among them
                    continue  # once more, on a new connection
                what = "timed out" if isinstance(err, TimeoutError | socket.timeout) \
                    else "failed"
                raise APIConnectionError(f"{method} {self.config.server}{url} {what}: "
                                         f"{err or type(err).__name__}") from err
            if response.will_close:
                conn.close()
            else:
                self._keep(key, conn)
            return found
        raise AssertionError("unreachable")  # pragma: no cover

    def _connect(self, context: ssl.SSLContext | None, timeout: float
                 ) -> http.client.HTTPConnection:
        proxy = self.proxy
        where = (proxy.host, proxy.port) if proxy else (self._host, self._port)
        if context is None:
            return http.client.HTTPConnection(*where, timeout=timeout)
        conn = _HTTPSConnection(*where, timeout=timeout, context=context,
                                server_name=self.config.tls_server_name)
        if proxy is not None:
            tunnel = {"Proxy-Authorization": proxy.authorization} \
                if proxy.authorization else None
            conn.set_tunnel(self._host, self._port, headers=tunnel)
        return conn

    def _take(self, key: object) -> http.client.HTTPConnection | None:
        """A kept connection for `key`, the most recently used first."""
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i][0] == key:
                    return self._idle.pop(i)[1]
        return None

    def _drop(self, key: object) -> None:
        """Close the kept connections for `key`."""
        with self._lock:
            dropped = [conn for k, conn in self._idle if k == key]
            self._idle = [(k, conn) for k, conn in self._idle if k != key]
        for conn in dropped:
            conn.close()

    def _keep(self, key: object, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((key, conn))
                return
        conn.close()

    def close(self) -> None:
        """Close the kept connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for _, conn in idle:
            conn.close()


def _status_message(data: bytes) -> str | None:
    """The `message` of a `Status` error body, if that is what came back."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else None
