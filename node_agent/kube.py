"""The API client, built only when the agent talks to the API server.

The client is :mod:`node_agent.apiclient` (standard library only; the ``kubernetes`` package is
never imported by the agent). It is imported lazily all the same (~2 MiB): an agent without
``--report`` and without an API server (the fake node, benchmarks) does not load it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node_agent.apiclient import ApiClient


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def api_client(kubeconfig: str | None) -> ApiClient:
    """An ``ApiClient`` from ``kubeconfig``, else the in-cluster service account.

    Raises ``ConfigError`` (with where the config came from) when it cannot be loaded."""
    from node_agent.apiclient import ApiClient, load_incluster, load_kubeconfig
    from node_agent.errors import ConfigError

    where = kubeconfig or "in-cluster service account"
    try:
        return ApiClient(load_kubeconfig(kubeconfig) if kubeconfig else load_incluster())
    except ConfigError as err:
        raise ConfigError(f"cannot load Kubernetes config from {where}: {err}") from err
