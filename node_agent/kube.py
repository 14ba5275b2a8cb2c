"""The agent's requests to the API server, over the shared client (`gpu_auditor.base.client`).

Six kinds of request: list this node's pods, read its Node, list its ResourceSlices (DRA), and
get, create or replace its cluster-scoped GPUNodeReport (docs/install.md lists each with its
grant). The client is built
only when the agent talks to the API server and imported lazily all the same (it brings `ssl`;
its cost: docs/dependencies.md): an agent without `--report` and without an API server (the
fake node, benchmarks) does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_auditor.base.kubeconfig import in_cluster
from gpu_auditor.base.names import segment
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION

if TYPE_CHECKING:
    from gpu_auditor.base.client import ApiClient

__all__ = ["AgentApi", "api_client", "in_cluster"]

USER_AGENT = "gpu-auditor-agent"
REPORTS = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class AgentApi:
    """The calls the agent makes, nothing else. Failures raise `base.errors` classes."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def list_pods(self, *, field_selector: str, timeout: float = 10.0) -> dict[str, Any]:
        """A PodList (raw JSON) over all namespaces."""
        result: dict[str, Any] = self.client.request(
            "GET", "/api/v1/pods", query={"fieldSelector": field_selector}, timeout=timeout)
        return result

    def list_resource_slices(self, *, field_selector: str,
                             timeout: float = 10.0) -> dict[str, Any]:
        """A ResourceSliceList (raw JSON, ``resource.k8s.io/v1``): the DRA devices of a node."""
        result: dict[str, Any] = self.client.request(
            "GET", RESOURCE_SLICES, query={"fieldSelector": field_selector}, timeout=timeout)
        return result

    def get_node(self, name: str, *, timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request(
            "GET", f"/api/v1/nodes/{segment(name)}", timeout=timeout)
        return result

    def read_report(self, name: str, *, timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request(
            "GET", f"{REPORTS}/{segment(name)}", timeout=timeout)
        return result

    def create_report(self, body: Any, *, timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request("POST", REPORTS, body=body,
                                                     timeout=timeout)
        return result

    def replace_report(self, name: str, body: Any, *, timeout: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = self.client.request(
            "PUT", f"{REPORTS}/{segment(name)}", body=body, timeout=timeout)
        return result


def api_client(kubeconfig: str | None) -> AgentApi:
    """The agent's API from `kubeconfig` (a file, or a `KUBECONFIG`-style list), else the
    in-cluster service account. Raises ConfigError (saying where the config came from)."""
    from gpu_auditor.base.client import ApiClient
    from gpu_auditor.base.errors import ConfigError
    from gpu_auditor.base.kubeconfig import load_incluster, load_kubeconfig

    where = kubeconfig or "in-cluster service account"
    try:
        config = load_kubeconfig(kubeconfig) if kubeconfig else load_incluster()
        return AgentApi(ApiClient(config, user_agent=USER_AGENT))
    except ConfigError as err:
        raise ConfigError(f"cannot load Kubernetes config from {where}: {err}") from err
