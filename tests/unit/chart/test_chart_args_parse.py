"""The arguments the chart passes are ones our programs accept: each container's args go
through the program's own parser (a renamed flag fails here, not in a user's cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chartlib import Render, only

from gpu_auditor.controller.main import parse_args
from node_agent.config import parse as parse_agent_args

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("sets", [(), ("operator.namespaces={ml,serving}",),
                                  ("operator.metricsProxy.enabled=true",)])
def test_the_operator_accepts_the_args_the_chart_gives_it(
    render: Render, sets: tuple[str, ...]
) -> None:
    deployment = only(render(*sets), "Deployment")
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "operator"]
    config = parse_args(container["args"])
    assert config.liveness_port == 8080
    if "operator.metricsProxy.enabled=true" in sets:
        # Behind kube-rbac-proxy, on loopback.
        assert (config.metrics_bind_address, config.metrics_port) == ("127.0.0.1", 9403)
    else:
        assert (config.metrics_bind_address, config.metrics_port) == ("0.0.0.0", 9402)
    if "operator.namespaces={ml,serving}" in sets:
        assert config.namespaces == ("ml", "serving")


@pytest.mark.parametrize("sets", [(), ("agent.report=false", "agent.processLabels=true"),
                                  ("agent.hostPID=false", "agent.metricsProxy.enabled=true")])
def test_the_agent_accepts_the_args_the_chart_gives_it(
    render: Render, sets: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    daemonset = only(render(*sets), "DaemonSet")
    (container,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "agent"]
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # as in every pod
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    args = [a.replace("$(NODE_NAME)", "gpu-node-1") for a in container["args"]]
    if "agent.hostPID=false" in sets:
        # The agent checks that --proc-root is a folder: the chart's mount point is not one here.
        assert "--proc-root=/host/proc" in args
        args = [f"--proc-root={tmp_path}" if a == "--proc-root=/host/proc" else a for a in args]
    config = parse_agent_args(args)
    if "agent.hostPID=false" in sets:
        # Behind kube-rbac-proxy, on loopback.
        assert (config.bind_address, config.port) == ("127.0.0.1", 9411)
    else:
        assert config.port == 9401
        assert str(config.proc_root) == "/proc"
