"""The HTTPS server the API server calls: one path per registration (docs/webhook.md).

    /validate           warnings for invalid allocator settings (every namespace not opted out)
    /validate/deny      the same, refused (namespaces labelled to deny)
    /inject/pod         the probe, for pods labelled gpu-auditor.io/probe=true
    /inject/namespace   the probe, for pods of namespaces labelled so
    /healthz            200 (GET; the readiness and liveness probes)

`answer` is the whole decision, from path and body to status and body, without sockets. Any
error of our own is answered with an allowed response (counted as `error`): the webhook never
stands between a tenant and the API server, whatever the API server's failurePolicy.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from gpu_auditor.admission.inject import inject, wants_probe
from gpu_auditor.admission.review import (
    Outcome,
    ReviewError,
    parse_review,
    response,
    validate,
)

from .metrics import ADMISSION_DURATION, ADMISSION_REQUESTS
from .tls import Certificate

log = logging.getLogger("gpu_auditor.webhook")

MAX_BODY: Final = 16 << 20
"""Bytes of a request body read at most: an AdmissionReview of an update carries the object
twice, and the API server takes objects up to 3 MiB."""
IO_TIMEOUT: Final = 10.0
"""Seconds a connection may stall in the TLS handshake or a read (the API server's webhook
timeout is shorter: it has given up by then)."""


@dataclass(frozen=True)
class Route:
    webhook: str
    inject: bool = False
    deny: bool = False
    namespace_opted_in: bool = False


ROUTES: Final[dict[str, Route]] = {
    "/validate": Route("validate"),
    "/validate/deny": Route("validate-deny", deny=True),
    "/inject/pod": Route("inject-pod", inject=True),
    "/inject/namespace": Route("inject-namespace", inject=True, namespace_opted_in=True),
}


@dataclass(frozen=True)
class Settings:
    probe_image: str | None = None
    """The image whose /opt/gpu-auditor/probe the init container copies; None: no injection."""
    probe_pull_policy: str | None = None


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    webhook: str
    result: str


def answer(path: str, body: bytes, settings: Settings) -> Reply:
    route = ROUTES.get(path.partition("?")[0])
    if route is None:
        return Reply(404, b'{"error": "no such webhook"}', "", "")
    try:
        request = parse_review(json.loads(body))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, ReviewError, deep nesting
        reason = str(exc) if isinstance(exc, ReviewError) else "body is not JSON"
        return Reply(400, json.dumps({"error": reason}).encode(), route.webhook, "bad-request")
    try:
        outcome = _inject(request.obj, route, settings) if route.inject and \
            request.operation == "CREATE" else (
            validate(request, deny=route.deny) if not route.inject
            else Outcome(True, "skipped", ()))
    except Exception:  # our own bug: allow, count, log; never stand in the way
        log.exception("admission request %s on %s failed; allowed", request.uid, path)
        outcome = Outcome(True, "error", ())
    body_out = json.dumps(response(request.uid, outcome), separators=(",", ":")).encode()
    return Reply(200, body_out, route.webhook, outcome.result)


def _inject(pod: Any, route: Route, settings: Settings) -> Outcome:
    if (settings.probe_image is None or pod.get("kind") != "Pod"
            or not wants_probe(pod, namespace_opted_in=route.namespace_opted_in)):
        return Outcome(True, "skipped", ())
    done = inject(pod, settings.probe_image, settings.probe_pull_policy)
    if not done.patch:
        return Outcome(True, "skipped", done.warnings)
    return Outcome(True, "injected", done.warnings, patch=done.patch)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    server: WebhookServer

    def setup(self) -> None:
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._send(413 if length > MAX_BODY else 411, b'{"error": "body length"}')
            self.close_connection = True
            return
        body = self.rfile.read(length)
        start = time.perf_counter()
        reply = answer(self.path, body, self.server.settings)
        self._send(reply.status, reply.body)
        if reply.webhook:
            ADMISSION_DURATION.labels(reply.webhook).observe(time.perf_counter() - start)
            ADMISSION_REQUESTS.labels(reply.webhook, reply.result).inc()

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class WebhookServer(ThreadingHTTPServer):
    """One thread per connection; TLS with the certificate current at accept time."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], certificate: Certificate | None,
                 settings: Settings) -> None:
        self.certificate, self.settings = certificate, settings
        super().__init__(address, Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        sock.settimeout(IO_TIMEOUT)
        # The headers and the body go out in two writes: without this, Nagle's algorithm holds
        # the body until the API server's delayed ACK (40 ms on Linux) on every request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.certificate is None:
            return sock, address
        wrapped = self.certificate.context().wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False)  # handshake in the thread
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)
