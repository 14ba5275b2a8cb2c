"""The pod-resources messages (``node_agent.podresources.messages``): what protobuf parses is
read into plain values, the fields the agent uses and no others; anything else, and an answer
past the work budget, is a WireError, never another exception."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node_agent.podresources import messages
from node_agent.podresources.api_descriptor import FILE_DESCRIPTOR
from node_agent.podresources.messages import (
    MAX_ITEMS,
    ClaimDevice,
    ContainerClaim,
    ContainerDevices,
    PodDevices,
    WireError,
    allocatable_response,
    list_response,
)
from tests.podresources.v1 import api_pb2

pytestmark = pytest.mark.unit


def _len(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def test_the_descriptor_is_the_protos() -> None:
    """api_descriptor.py is generated from api.proto (tests/podresources/generate.py): the same
    bytes as protoc's module, so the two cannot drift."""
    assert api_pb2.DESCRIPTOR.serialized_pb == FILE_DESCRIPTOR


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    devices = _len(1, b"nvidia.com/gpu") + _len(2, b"GPU-1") + bytes([3 << 3 | 0, 0x96, 0x01]) \
        + bytes([9 << 3 | 1]) + b"\x00" * 8 + bytes([10 << 3 | 5]) + b"\x00" * 4
    container = _len(1, b"main") + _len(2, devices)
    pod = _len(1, b"p") + _len(2, b"ns") + _len(3, container) + _len(15, b"future field")
    [parsed] = list_response(_len(1, pod))
    assert parsed == PodDevices("ns", "p", (ContainerDevices("main", "nvidia.com/gpu",
                                                             ("GPU-1",)),))


@pytest.mark.parametrize("data", [
    _len(1, _len(1, b"\xff\xfe")),  # not UTF-8
    bytes([1 << 3 | 2, 10]) + b"short",  # runs past the message
    bytes([1 << 3 | 3]),  # a group start, never ended
    bytes([0x08]) + b"\xff" * 11,  # a varint of 11 bytes
    bytes([0x02, 0x00]),  # field number 0
])
def test_bytes_that_are_not_the_message_are_a_wire_error(data: bytes) -> None:
    with pytest.raises(WireError):
        list_response(data)


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, list[PodDevices]]:
    """A ListPodResourcesResponse built with the kubelet's own messages (cpu_ids, memory and
    topology included, which the agent never reads), and what the agent must read from it."""
    pods: list[Any] = []
    expected: list[PodDevices] = []
    for _ in range(draw(st.integers(0, 4))):
        name, namespace = draw(names), draw(names)
        containers, devices, claims = [], [], []
        for _ in range(draw(st.integers(0, 3))):
            cname = draw(names)
            cdevs = [(draw(names), draw(st.lists(names, max_size=3)))
                     for _ in range(draw(st.integers(0, 2)))]
            cclaims = [(draw(names), draw(names),
                        [(draw(names), draw(names), draw(names), draw(st.lists(names, max_size=2)))
                         for _ in range(draw(st.integers(0, 2)))])
                       for _ in range(draw(st.integers(0, 2)))]
            containers.append(api_pb2.ContainerResources(
                name=cname, cpu_ids=draw(st.lists(st.integers(0, 2**40), max_size=4)),
                memory=[api_pb2.ContainerMemory(memory_type="memory", size=2**30)],
                devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids,
                                                  topology=api_pb2.TopologyInfo(
                                                      nodes=[api_pb2.NUMANode(ID=1)]))
                         for r, ids in cdevs],
                dynamic_resources=[api_pb2.DynamicResource(
                    claim_namespace=ns, claim_name=n, claim_resources=[
                        api_pb2.ClaimResource(driver_name=d, pool_name=p, device_name=v,
                                              cdi_devices=[api_pb2.CDIDevice(name=c)
                                                           for c in cdi])
                        for d, p, v, cdi in devs]) for ns, n, devs in cclaims]))
            devices += [ContainerDevices(cname, r, tuple(ids)) for r, ids in cdevs]
            claims += [ContainerClaim(cname, ns, n, tuple(ClaimDevice(d, p, v, tuple(cdi))
                                                          for d, p, v, cdi in devs))
                       for ns, n, devs in cclaims]
        pods.append(api_pb2.PodResources(name=name, namespace=namespace,
                                         containers=containers))
        expected.append(PodDevices(namespace, name, tuple(devices), tuple(claims)))
    data = api_pb2.ListPodResourcesResponse(pod_resources=pods).SerializeToString()
    return data, expected


@given(answers())
@settings(max_examples=200, deadline=None)
def test_every_answer_reads_back_the_fields_the_agent_uses(
        answer: tuple[bytes, list[PodDevices]]) -> None:
    data, expected = answer
    assert list_response(data) == expected


@given(st.binary(max_size=512))
@settings(max_examples=500, deadline=None)
def test_any_bytes_are_an_answer_or_a_wire_error(data: bytes) -> None:
    try:
        list_response(data)
        allocatable_response(data)
    except WireError:
        pass


@pytest.mark.parametrize("shape", ["empty pods", "empty device ids", "empty containers"])
def test_a_1_mib_answer_of_tiny_items_is_refused_by_the_work_budget_quickly(shape: str) -> None:
    """1 MiB (the transport's cap) of the smallest items the message allows: ~500,000 of them.
    The old hand-written decoder read them all (0.3-1.0 s, half a million objects); now they
    are counted before any becomes a Python object, and the answer is refused."""
    size = 1 << 20
    data = {
        "empty pods": _len(1, b"") * (size // 2),
        "empty device ids": _len(1, _len(3, _len(2, _len(2, b"") * (size // 2 - 8)))),
        "empty containers": _len(1, _len(3, b"") * (size // 2 - 8)),
    }[shape]
    started = time.monotonic()
    with pytest.raises(WireError, match=f"more than {MAX_ITEMS}"):
        list_response(data)
    assert time.monotonic() - started < 0.5


def test_reading_stops_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the call's deadline while reading: a WireError, not an answer read late."""
    monkeypatch.setattr(messages, "CHECK_EVERY", 1)
    data = api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(name=f"p{i}", namespace="ns") for i in range(10)]).SerializeToString()
    with pytest.raises(WireError, match="deadline"):
        list_response(data, deadline=time.monotonic() - 1)
    assert len(list_response(data, deadline=time.monotonic() + 10)) == 10
