"""Publishing the GPUNodeReport: create-or-replace, only on material change, rate limited."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.base.errors import APIConflictError, APINotFoundError, APIServerError
from node_agent.model import ERROR_SOURCES
from node_agent.procfs import ProcReader
from node_agent.publisher import ReportPublisher
from node_agent.sampler import Sampler

from .agent_helpers import GIB, GPU0, StaticGpus, fake_pods, gpu

pytestmark = pytest.mark.unit


class FakeCustomObjects:
    """In-memory reports, answering like ``node_agent.kube.AgentApi`` (its error classes)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.down = False
        self._rv = 0

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self._rv)
        self.objects[body["metadata"]["name"]] = body
        return copy.deepcopy(body)

    def read_report(self, name, **_: Any):
        self.calls.append("get")
        if self.down:
            raise APIServerError("HTTP 503: Service Unavailable", status=503)
        if name not in self.objects:
            raise APINotFoundError("HTTP 404: not found", status=404)
        return copy.deepcopy(self.objects[name])

    def create_report(self, body, **_: Any):
        self.calls.append("create")
        return self._next(body)

    def replace_report(self, name, body, **_: Any):
        self.calls.append("replace")
        if self.down:
            raise APIServerError("HTTP 503: Service Unavailable", status=503)
        current = self.objects.get(name)
        if current is None:
            raise APINotFoundError("HTTP 404: not found", status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise APIConflictError("HTTP 409: conflict", status=409)
        return self._next(body)


@pytest.fixture
def world(proc_root: Path):
    gpus = StaticGpus([gpu(0, GPU0, [])])
    sampler = Sampler("node-1", gpus, ProcReader(proc_root), fake_pods())
    api = FakeCustomObjects()
    now = [0.0]
    errors = dict.fromkeys(ERROR_SOURCES, 0)
    publisher = ReportPublisher(api, errors, min_interval=30, clock=lambda: now[0])
    return gpus, sampler, api, now, publisher, errors


def test_first_pass_creates_the_report_named_after_the_node(world) -> None:
    _, sampler, api, _, publisher, _ = world
    assert publisher.maybe_publish(sampler.sample())
    assert api.calls == ["get", "create"]
    assert api.objects["node-1"]["spec"]["nodeName"] == "node-1"


def test_unchanged_reports_are_not_rewritten(world) -> None:
    _, sampler, api, now, publisher, _ = world
    publisher.maybe_publish(sampler.sample())
    now[0] = 100.0
    assert not publisher.maybe_publish(sampler.sample())
    assert api.calls == ["get", "create"]


def test_a_material_change_waits_for_the_minimum_interval_then_replaces(world,
                                                                        proc_root) -> None:
    gpus, sampler, api, now, publisher, _ = world
    publisher.maybe_publish(sampler.sample())
    gpus.gpus = [gpu(0, GPU0, [(1, 8 * GIB)]), gpu(1, "GPU-new", [])]
    now[0] = 10.0
    assert not publisher.maybe_publish(sampler.sample())  # too soon
    now[0] = 31.0
    assert publisher.maybe_publish(sampler.sample())
    assert api.calls[-1] == "replace"
    assert len(api.objects["node-1"]["spec"]["gpus"]) == 2


def test_someone_elses_write_is_resolved_by_rereading(world) -> None:
    _, sampler, api, now, publisher, _ = world
    publisher.maybe_publish(sampler.sample())
    api.objects["node-1"]["metadata"]["resourceVersion"] = "999"  # another writer
    now[0] = 60.0
    assert publisher.maybe_publish(sampler.sample(), force=True)
    assert api.calls[-3:] == ["replace", "get", "replace"]


def test_apiserver_errors_are_counted_and_retried_next_pass(world) -> None:
    _, sampler, api, now, publisher, errors = world
    api.down = True
    assert not publisher.maybe_publish(sampler.sample())
    assert errors["apiserver"] == 1
    api.down = False
    now[0] = 1.0
    assert publisher.maybe_publish(sampler.sample())
    assert "node-1" in api.objects
