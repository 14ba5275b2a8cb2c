"""The agent's sampling loop: its health, a failing pass, and the heap trimmer it runs after a
pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.agent import Agent
from node_agent.procfs import ProcReader
from node_agent.sampler import Sampler

from .agent_helpers import GPU0, StaticGpus, fake_pods, gpu

pytestmark = pytest.mark.unit


def test_the_heap_trimmer_is_only_where_ctypes_is_loaded_and_runs_after_a_pass(
        proc_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from node_agent.agent import heap_trimmer

    snapshot = Sampler("n", StaticGpus([gpu(0, GPU0, [])]), ProcReader(proc_root),
                       fake_pods()).sample()
    monkeypatch.delitem(sys.modules, "ctypes", raising=False)
    assert heap_trimmer() is None
    import ctypes  # noqa: F401  (what pynvml loads on a real node)

    trimmer = heap_trimmer()
    assert trimmer is not None
    trimmer(snapshot)  # glibc's malloc_trim(0): returns, changes nothing observable here


# -- the sampling loop's health --------------------------------------------------------------


def test_health_is_bad_before_the_first_pass_and_when_passes_stop(proc_root: Path) -> None:
    now = [0.0]
    sampler = Sampler("n", StaticGpus(), ProcReader(proc_root), fake_pods())
    agent = Agent(sampler, interval=10, clock=lambda: now[0])
    assert agent.health() == (False, "no sampling pass finished yet")
    agent.run_once()
    assert agent.health() == (True, "ok")
    now[0] = 31.0
    ok, why = agent.health()
    assert not ok and "last sampling pass 31 s ago" in why


def test_a_failing_pass_keeps_the_previous_snapshot(proc_root: Path) -> None:
    sampler = Sampler("n", StaticGpus(), ProcReader(proc_root), fake_pods())
    agent = Agent(sampler, interval=10)
    first = agent.run_once()

    def boom() -> None:
        raise RuntimeError("unexpected")

    sampler.sample = boom  # type: ignore[method-assign]
    assert agent.run_once() is first and agent.latest() is first
