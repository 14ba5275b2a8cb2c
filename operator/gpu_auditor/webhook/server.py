"""The HTTPS server the API server calls: one path per registration (docs/webhook.md).

    /validate           warnings for invalid allocator settings (every namespace not opted out)
    /validate/deny      the same, refused (namespaces labelled to deny)
    /inject/pod         the probe, for pods labelled gpu-auditor.io/probe=true
    /inject/namespace   the probe, for pods of namespaces labelled so
    /apply/pod          an owner's recommended setting, for pods labelled
                        gpu-auditor.io/apply-recommendation=true (`applying`; with
                        --apply-recommendations only)
    /apply/namespace    the same, for pods of namespaces labelled so
    /healthz            200 (GET; the readiness and liveness probes)

`answer` is the whole decision, from path and body to status and body, without sockets. Any
error of our own is answered with an allowed response (counted as `error`): the webhook never
stands between a tenant and the API server, whatever the API server's failurePolicy. The bytes
on the wire, and every bound on them, are `boundedhttp`'s and `limits`' (issue 26).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gpu_auditor.admission.inject import inject, wants_probe
from gpu_auditor.admission.review import (
    Outcome,
    ReviewError,
    parse_review,
    response,
    validate,
)

from .applying import Applier
from .boundedhttp import BoundedServer, Handler, Listener, Response
from .limits import Limits
from .metrics import ADMISSION_DURATION, ADMISSION_REQUESTS, CONNECTIONS_CLOSED
from .tls import Certificate

log = logging.getLogger("gpu_auditor.webhook")

@dataclass(frozen=True)
class Route:
    webhook: str
    inject: bool = False
    deny: bool = False
    namespace_opted_in: bool = False
    apply: bool = False


ROUTES: Final[dict[str, Route]] = {
    "/validate": Route("validate"),
    "/validate/deny": Route("validate-deny", deny=True),
    "/inject/pod": Route("inject-pod", inject=True),
    "/inject/namespace": Route("inject-namespace", inject=True, namespace_opted_in=True),
    "/apply/pod": Route("apply-pod", apply=True),
    "/apply/namespace": Route("apply-namespace", apply=True, namespace_opted_in=True),
}


@dataclass(frozen=True)
class Settings:
    probe_image: str | None = None
    """The image whose /opt/gpu-auditor/probe the init container copies; None: no injection."""
    probe_pull_policy: str | None = None
    apply: Applier | None = None
    """Puts owners' recommended settings into their next pods; None: the apply paths change
    nothing."""


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
        if route.apply:
            outcome = settings.apply(request, namespace_opted_in=route.namespace_opted_in) \
                if settings.apply is not None else Outcome(True, "skipped", ())
        else:
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


def _admission(settings: Settings) -> Handler:
    def handle(method: str, path: str, body: bytes) -> Response:
        if method == "GET":
            if path == "/healthz":
                return Response(200, b"ok\n", "text/plain")
            return Response(404, b"not found\n", "text/plain")
        start = time.perf_counter()
        reply = answer(path, body, settings)

        def sent() -> None:
            if reply.webhook:
                ADMISSION_DURATION.labels(reply.webhook).observe(time.perf_counter() - start)
                ADMISSION_REQUESTS.labels(reply.webhook, reply.result).inc()

        return Response(reply.status, reply.body, sent=sent)

    return handle


def _metrics(method: str, path: str, body: bytes) -> Response:
    if method == "GET" and path.partition("?")[0] == "/metrics":
        return Response(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
    return Response(404, b"not found\n", "text/plain")


class WebhookServer:
    """The admission webhooks over HTTPS (and /metrics over HTTP when ``metrics_address`` is
    given) on one `BoundedServer`: the sockets are bound here, `serve_forever` runs them in the
    calling thread until `shutdown` (from any thread)."""

    def __init__(self, address: tuple[str, int], certificate: Certificate | None,
                 settings: Settings, *, metrics_address: tuple[str, int] | None = None,
                 limits: Limits | None = None) -> None:
        self.certificate, self.settings = certificate, settings
        listeners = [Listener(address, _admission(settings), certificate)]
        if metrics_address is not None:
            listeners.append(Listener(metrics_address, _metrics, parse_bodies=False))
        self.server = BoundedServer(listeners, limits, on_closed=_closed)
        self.server_port = self.server.ports[0]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done = threading.Event()
        self._started = threading.Event()

    @property
    def metrics_port(self) -> int | None:
        return self.server.ports[1] if len(self.server.ports) > 1 else None

    def serve_forever(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            await self.server.serve(started=self._started.set)

        try:
            asyncio.run(run())
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop serving and wait until `serve_forever` has returned."""
        self._started.wait(timeout=10.0)
        if self._loop is not None and not self._done.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self.server.stop)
            self._done.wait(timeout=10.0)

    def server_close(self) -> None:
        self.server.close()


def _closed(reason: str) -> None:
    CONNECTIONS_CLOSED.labels(reason).inc()
