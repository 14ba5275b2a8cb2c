"""kopf's login: the operator's own credentials, fetched again each time kopf asks again."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.base.credentials import Credential
from gpu_auditor.base.kubeconfig import ClusterConfig
from gpu_auditor.controller.login import Login

pytestmark = pytest.mark.unit

EXPIRES = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


class FakeCredentials:
    def __init__(self) -> None:
        self.fetched = 0

    def current(self) -> Credential:
        return Credential(token="first", expires_at=EXPIRES)

    def refresh(self) -> Credential:
        self.fetched += 1
        return Credential(cert_pem=b"CERT", key_pem=b"KEY")


class FakeClient:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.credentials = FakeCredentials()


def test_the_first_login_uses_the_clients_credential_with_its_expiry() -> None:
    client: Any = FakeClient(ClusterConfig(server="https://h:6443", ca_file=Path("/ca.crt"),
                                           namespace="gpu-auditor"))
    info = Login(client)()
    assert info.default_namespace == "gpu-auditor"
    assert (info.server, info.ca_path, info.token, info.scheme) == (
        "https://h:6443", "/ca.crt", "first", "Bearer")
    assert info.expiration == EXPIRES
    assert client.credentials.fetched == 0


def test_a_later_login_fetches_afresh_and_may_bring_a_client_certificate() -> None:
    client: Any = FakeClient(ClusterConfig(server="https://h:6443", ca_data="PEM",
                                           client_cert_file=Path("/kc.crt"),
                                           client_key_file=Path("/kc.key")))
    login = Login(client)
    login()
    info = login()  # kopf asks again: the credential was refused or expired
    assert client.credentials.fetched == 1
    assert (info.token, info.certificate_data, info.private_key_data) == (None, b"CERT", b"KEY")
    assert (info.certificate_path, info.private_key_path) == (None, None)
    assert info.ca_data == b"PEM" and info.expiration is None
