"""Helpers for the base's tests: kubeconfig files, exec users and a mounted service account."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..node_agent.apiserver_helpers import Pki

V1 = "client.authentication.k8s.io/v1"


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def exec_user(**extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": V1, "command": "./bin/get-token", "args": ["--cluster", "x"],
                     "env": [{"name": "PROFILE", "value": "ml"}],
                     "interactiveMode": "Never", **extra}}


def service_account(tmp_path: Path, pki: Pki, token: str) -> Path:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(token + "\n")
    (sa / "ca.crt").write_bytes(pki.ca.cert)
    return sa
