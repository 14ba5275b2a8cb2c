"""The serving certificate reloaded when its files change: a rotated one served without a
restart, a broken rotation keeping the previous one."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from gpu_auditor.webhook.server import WebhookServer
from tests.integration.webhook_support import Tls, make_tls

from .webhook_helpers import connect

pytestmark = pytest.mark.unit


def test_a_rotated_certificate_is_served_without_a_restart(
    running: WebhookServer, tls: Tls, tmp_path: Path
) -> None:
    conn = connect(running, tls.ca_pem)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    rotated = make_tls(tmp_path / "rotated")  # a new CA and a new pair, as after a rotation
    shutil.copyfile(rotated.cert_file, tls.cert_file)
    shutil.copyfile(rotated.key_file, tls.key_file)
    with pytest.raises(ssl.SSLError):  # the old CA no longer verifies the server
        fresh = connect(running, tls.ca_pem)
        fresh.request("GET", "/healthz")
    fresh = connect(running, rotated.ca_pem)
    fresh.request("GET", "/healthz")
    assert fresh.getresponse().status == 200


def test_a_broken_rotation_keeps_the_previous_certificate(
    running: WebhookServer, tls: Tls
) -> None:
    tls.cert_file.write_text("not a certificate")
    conn = connect(running, tls.ca_pem)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
