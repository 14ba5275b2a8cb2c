"""Helpers for the webhook's tests: the server running on loopback with a certificate of its
own, and a client that trusts it."""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_auditor.webhook import tls as tls_mod
from gpu_auditor.webhook.server import Settings, WebhookServer
from gpu_auditor.webhook.tls import Certificate
from tests.integration.webhook_support import Tls, make_tls

SETTINGS = Settings(probe_image="img:probe")


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def running(tls: Tls, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookServer]:
    monkeypatch.setattr(tls_mod, "CHECK_EVERY", 0.0)
    server = WebhookServer(("127.0.0.1", 0), Certificate(str(tls.cert_file),
                                                         str(tls.key_file)), SETTINGS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def connect(server: WebhookServer, ca_pem: bytes) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return http.client.HTTPSConnection("127.0.0.1", server.server_port, context=context,
                                       timeout=10)
