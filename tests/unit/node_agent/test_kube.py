"""The agent's API calls over the shared client, end to end against the fake API server: its
kubeconfig loading, listing pods and publishing its report."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import ConfigError
from gpu_auditor.base.kubeconfig import ClusterConfig, load_kubeconfig
from gpu_auditor.base.nodereport import GROUP, PLURAL, VERSION
from node_agent.kube import AgentApi, api_client
from node_agent.model import ERROR_SOURCES
from node_agent.pods import ApiPods, ClusterPods
from node_agent.procfs import ProcReader
from node_agent.publisher import ReportPublisher
from node_agent.sampler import Sampler

from .agent_helpers import GPU0, UID_A, UID_B, StaticGpus, fake_pods, gpu
from .apiserver_helpers import FakeApiServer, Pki, b64, kubeconfig

pytestmark = pytest.mark.unit


def agent(cfg: ClusterConfig, **kw: object) -> AgentApi:
    return AgentApi(ApiClient(cfg, user_agent="test", **kw))  # type: ignore[arg-type]


def test_an_unreadable_kubeconfig_names_itself(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text("clusters: [unclosed\n")
    with pytest.raises(ConfigError, match=r"cannot load Kubernetes config from .*kc"):
        api_client(str(tmp_path / "kc"))


def test_api_pods_and_the_publisher_over_the_client(pki: Pki, tls_server: FakeApiServer,
                                                    proc_root: Path, tmp_path: Path) -> None:
    tls_server.tokens = {"t"}
    tls_server.nodes["node-1"] = {"metadata": {"name": "node-1", "labels": {
        "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "2"}}}
    tls_server.pods = [
        {"metadata": {"namespace": "ml", "name": "a", "uid": UID_A},
         "spec": {"nodeName": "node-1"},
         "status": {"containerStatuses": [{"name": "main",
                                           "containerID": "containerd://" + "c" * 64}]}},
        {"metadata": {"namespace": "ml", "name": "b", "uid": UID_B},
         "spec": {"nodeName": "node-2"}}]
    kc = kubeconfig(tmp_path / "kc", tls_server.url,
                    cluster={"certificate-authority-data": b64(pki.ca.cert)},
                    user={"token": "t"})
    client = load_kubeconfig(kc)
    view = ClusterPods(None, ApiPods(agent(client), "node-1")).view([UID_A])
    assert view.errors == {}
    assert set(view.index) == {UID_A}
    assert (view.strategy.kind, view.strategy.replicas) == ("time-slicing", 2)
    assert tls_server.requests[0].path == "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1"

    errors = dict.fromkeys(ERROR_SOURCES, 0)
    sampler = Sampler("node-1", StaticGpus([gpu(0, GPU0, [])]), ProcReader(proc_root),
                      fake_pods())
    publisher = ReportPublisher(agent(client), errors, min_interval=0)
    assert publisher.maybe_publish(sampler.sample(), force=True)  # get 404 → create
    key = f"apis/{GROUP}/{VERSION}/{PLURAL}/node-1"
    tls_server.objects[key]["metadata"]["resourceVersion"] = "999"  # someone else wrote
    assert publisher.maybe_publish(sampler.sample(), force=True)  # put 409 → get → put
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in tls_server.requests[2:]] == [
        ("GET", "node-1"), ("POST", PLURAL), ("PUT", "node-1"), ("GET", "node-1"),
        ("PUT", "node-1")]
    assert errors["apiserver"] == 0
    tls_server.tokens = set()  # now every request is refused
    assert not publisher.maybe_publish(sampler.sample(), force=True)
    assert errors["apiserver"] == 1
