"""The agent's name checks: DNS names are the shared base's rules (one definition), the shapes
only the agent reads (cgroup UIDs, container IDs, device IDs) its own."""

from __future__ import annotations

import pytest

from gpu_auditor.base import names as base
from node_agent.dra import is_device_triplet
from node_agent.names import (
    is_container_name,
    is_device_id,
    is_namespace,
    is_pod_name,
    is_pod_uid,
)

pytestmark = pytest.mark.unit

SAMPLES = ["a", "a.b", "a..b", ".a", "a.", "a-", "-a", "A", "a_b", "a" * 63, "a" * 64,
           "a" * 253, "a" * 254, "a." * 126 + "a", "trainer-0", "ns.with.dots", "", "a/b"]


@pytest.mark.parametrize("value", SAMPLES)
def test_pod_and_namespace_names_follow_the_bases_rules(value: str) -> None:
    """node_agent/names.py had its own patterns, which took `a..b` as a pod name."""
    assert is_pod_name(value) == base.is_subdomain(value)
    assert is_namespace(value) == base.is_label(value)
    assert is_container_name(value) == base.is_label(value)


def test_a_subdomain_with_an_empty_label_is_no_name() -> None:
    assert not is_pod_name("a..b") and not is_pod_name("trainer..0")
    assert not is_device_triplet("gpu.nvidia.com", "node..1", "gpu-0")
    assert not is_device_triplet("gpu..nvidia.com", "node-1", "gpu-0")
    assert is_device_triplet("gpu.nvidia.com", "node-1/pool.a", "gpu-0")
    assert not is_device_triplet("g" * 64, "node-1", "gpu-0")  # a driver is at most 63


def test_the_agents_own_shapes() -> None:
    assert is_pod_uid("0a1b2c3d-1111-4222-8333-444455556666")
    assert not is_pod_uid("0A1B2C3D-1111-4222-8333-444455556666")
    assert is_device_id("GPU-0a1b::3") and not is_device_id("-GPU") and not is_device_id("")
