"""The Kubernetes API client, imported only when the agent talks to the API server.

``kubernetes`` costs tens of MiB of RSS; an agent without ``--report`` and without an API
server (the fake node, benchmarks) never imports it.
"""

from __future__ import annotations

import os
from typing import Any

from node_agent.errors import ConfigError


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def api_client(kubeconfig: str | None) -> Any:
    """An ``ApiClient`` from ``kubeconfig``, else the in-cluster service account."""
    from kubernetes import client
    from kubernetes import config as _config

    config: Any = _config

    try:
        if kubeconfig:
            cfg = client.Configuration()
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        else:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
    except (config.ConfigException, OSError) as err:
        where = kubeconfig or "in-cluster service account"
        raise ConfigError(f"cannot load Kubernetes config from {where}: {err}") from err
    return client.ApiClient(cfg)
