"""A small Kubernetes API client on the standard library (`http.client` + `ssl`), for both wings.

Both the agent and the operator make a handful of kinds of request; the `kubernetes` package
would cost them 20-30 MiB of RSS for that (bench/results/auth_clients.md), this module about
2 MiB. The requests each wing makes live in that wing (`node_agent.kube`,
`gpu_auditor.controller.kube`); this is the transport: config and credentials
(`kubeconfig.py`, `credentials.py`), TLS, a timeout on the whole request (not only each socket
operation), one retry with fresh credentials after a 401 when they rotate, and every failure
raised as one class of `errors.py`, chosen from the status once.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from gpu_auditor.base.credentials import Credential, Credentials
from gpu_auditor.base.errors import APIConnectionError, APIError, ConfigError, from_status
from gpu_auditor.base.kubeconfig import ClusterConfig

_CHUNK = 64 * 1024


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


class ApiClient:
    """Synchronous, thread-safe; a new connection per request (a few a minute, or a handful
    per diagnosis)."""

    def __init__(self, cfg: ClusterConfig, *, user_agent: str,
                 credentials: Credentials | None = None, token_refresh: float = 60.0) -> None:
        self.config = cfg
        self.user_agent = user_agent
        url = urlsplit(cfg.server)
        self._https = url.scheme == "https"
        if not url.hostname:
            raise ConfigError(f"API server URL {cfg.server!r} has no host")
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self.credentials = credentials or Credentials(cfg, token_refresh=token_refresh)
        self._lock = threading.Lock()
        self._ssl_for: tuple[bytes | None, bytes | None] | None = None
        self._ssl: ssl.SSLContext | None = None
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
        status, reason, data = self._send(method, url, payload, timeout, credential,
                                          content_type)
        if status == 401 and self.credentials.rotating:  # rotated or expired meanwhile?
            status, reason, data = self._send(method, url, payload, timeout,
                                              self.credentials.refresh(), content_type)
        if status >= 400:
            raise from_status(status, _status_message(data) or reason, data)
        return data

    def _send(self, method: str, url: str, payload: bytes | None, timeout: float,
              credential: Credential, content_type: str) -> tuple[int, str, bytes]:
        deadline = time.monotonic() + timeout
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if payload is not None:
            headers["Content-Type"] = content_type
        if credential.token:
            headers["Authorization"] = f"Bearer {credential.token}"
        conn: http.client.HTTPConnection
        if self._https:
            conn = _HTTPSConnection(self._host, self._port, timeout=timeout,
                                    context=self._context(credential),
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
            what = "timed out" if isinstance(err, TimeoutError | socket.timeout) else "failed"
            raise APIConnectionError(f"{method} {self.config.server}{url} {what}: "
                                     f"{err or type(err).__name__}") from err
        finally:
            conn.close()


def _status_message(data: bytes) -> str | None:
    """The `message` of a `Status` error body, if that is what came back."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else None
