"""kopf's login from the base's config: the same kubeconfig files (several merged), exec
credential plugins and service account as the operator's own requests.

kopf's built-in logins read one kind of kubeconfig user (a token or certificate) and would
otherwise import the `kubernetes` package (20-30 MiB of RSS). kopf calls this at start, again
when every credential it holds was refused (a 401) and when one expires (`expiration`, the exec
credential's `expirationTimestamp`): each later call fetches a fresh credential.
"""

from __future__ import annotations

from typing import Any

import kopf

from gpu_auditor.base.client import ApiClient


class Login:
    """The operator's one ApiClient, as kopf's credentials."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._calls = 0

    def __call__(self, **_: Any) -> kopf.ConnectionInfo:
        self._calls += 1
        credentials = self.client.credentials
        credential = credentials.current() if self._calls == 1 else credentials.refresh()
        cfg = self.client.config
        cert = credential.cert_pem or cfg.client_cert_data
        key = credential.key_pem or cfg.client_key_data
        return kopf.ConnectionInfo(
            server=cfg.server,
            ca_path=str(cfg.ca_file) if cfg.ca_file else None,
            ca_data=cfg.ca_data.encode() if cfg.ca_data else None,
            insecure=cfg.insecure_skip_tls_verify or None,
            scheme="Bearer" if credential.token else None,
            token=credential.token,
            certificate_path=None if cert else _path(cfg.client_cert_file),
            certificate_data=cert,
            private_key_path=None if key else _path(cfg.client_key_file),
            private_key_data=key,
            # kopf drops the credential at this time and logs in again (this handler).
            expiration=credential.expires_at,
            default_namespace=cfg.namespace,  # where kopf posts Events of cluster objects
        )


def _path(value: object) -> str | None:
    return str(value) if value else None
