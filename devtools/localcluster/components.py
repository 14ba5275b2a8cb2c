"""Our own processes next to the local control plane: the operator and the node agent.

Both run as real child processes (what the demo shows and what the tests restart), with logs in
the cluster's work folder beside the control plane's.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from devtools.localcluster.cluster import LocalCluster, http_ok
from devtools.localcluster.process import free_port

CRD_FILE = (Path(__file__).resolve().parents[2]
            / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml")


def install_crds(cluster: LocalCluster, crd_file: Path = CRD_FILE) -> None:
    """The GPUNodeReport CRD, as the chart ships it."""
    cluster.apply_yaml(crd_file.read_text())
    cluster.wait_for_crd("gpunodereports.gpu-auditor.io")


class OperatorProcess:
    """`gpu-auditor-operator` against the local cluster; `restart()` kills and starts it again."""

    def __init__(self, cluster: LocalCluster, *extra: str, name: str = "operator",
                 kubeconfig: Path | None = None) -> None:
        self.cluster = cluster
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.argv: Sequence[str] = [
            sys.executable, "-m", "gpu_auditor.controller.main",
            f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
            f"--metrics-port={self.metrics_port}", f"--liveness-port={self.liveness_port}",
            *extra,
        ]
        self.component = cluster.add_component(name, list(self.argv), start=False)

    def start(self, timeout: float = 60) -> OperatorProcess:
        self.component.start()
        self.component.wait_until(
            lambda: http_ok(f"http://127.0.0.1:{self.liveness_port}/healthz"), timeout, "live"
        )
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill of the operator would do."""
        if self.component.proc is not None and self.component.running:
            self.component.proc.kill()
            self.component.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.component.stop()

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())


class AgentProcess:
    """`gpu-auditor-agent` on a fake node, publishing its GPUNodeReport to the local cluster."""

    def __init__(self, cluster: LocalCluster, node_name: str, *extra: str) -> None:
        self.port = free_port()
        argv = [
            sys.executable, "-m", "node_agent.cli", f"--node-name={node_name}",
            f"--kubeconfig={cluster.kubeconfig}", "--bind-address=127.0.0.1",
            f"--port={self.port}", "--report", *extra,
        ]
        self.component = cluster.add_component(f"agent-{node_name}", argv, start=False)

    def start(self, timeout: float = 60) -> AgentProcess:
        self.component.start()
        self.component.wait_until(
            lambda: http_ok(f"http://127.0.0.1:{self.port}/healthz"), timeout, "live"
        )
        return self

    def stop(self) -> None:
        self.component.stop()
