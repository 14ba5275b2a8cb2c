"""The agent's HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics) and ``/healthz``.

(Named ``http_server`` rather than ``http`` so it can never shadow the standard library.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]
Render = Callable[[str], tuple[bytes, str]]  # Accept header → (body, content type)


def make_server(render: Render, health: Health, address: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body, content_type = render(self.headers.get("Accept", ""))
                except Exception:
                    log.exception("encoding /metrics failed")
                    self._send(500, b"metrics unavailable\n", "text/plain; charset=utf-8")
                    return
                self._send(200, body, content_type)
            elif path == "/healthz":
                ok, why = health()
                self._send(200 if ok else 503, (why + "\n").encode(),
                           "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: try /metrics or /healthz\n",
                           "text/plain; charset=utf-8")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    if ":" in address:
        import socket

        Server.address_family = socket.AF_INET6
    return Server((address, port), Handler)
