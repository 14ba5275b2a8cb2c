"""The kubelet pod-resources v1 messages the agent reads: parsed by ``protobuf`` (its C parser,
upb) from the proto's descriptor (``api_descriptor``, in a private pool), then read into plain
frozen values holding only the fields the agent uses.

A hostile answer is bounded twice: by its size (``client.MAX_MESSAGE``, the transport's cap)
and by the work of reading it: at most ``MAX_ITEMS`` pods, containers, device entries, device
IDs, claims and claim devices together, and a time budget checked as they are read. Fields the
agent does not use (cpu_ids, memory, topology, fields a later kubelet adds) are never turned
into Python objects. An answer protobuf refuses, a string that is not UTF-8, or one past a bound
raises ``WireError``: the whole answer is then unusable (allocation unknown), never half read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from node_agent.podresources.api_descriptor import FILE_DESCRIPTOR
from node_agent.podresources.model import (
    ClaimDevice,
    ContainerClaim,
    ContainerDevices,
    PodDevices,
)

# A generous 250-pod node's answer is ~1,500 items (bench/results/podresources_answer.md).
MAX_ITEMS = 100_000
CHECK_EVERY = 1024  # items between two looks at the clock


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be, or one past a bound."""


__all__ = ["ClaimDevice", "ContainerClaim", "ContainerDevices", "PodDevices", "WireError",
           "allocatable_response", "list_response"]


def _classes() -> tuple[Any, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(FILE_DESCRIPTOR)
    get = message_factory.GetMessageClass  # protobuf >= 4.22
    return (get(pool.FindMessageTypeByName("v1.ListPodResourcesResponse")),
            get(pool.FindMessageTypeByName("v1.AllocatableResourcesResponse")))


ListPodResourcesResponse, AllocatableResourcesResponse = _classes()


class _Budget:
    """Counts the items read; WireError past ``MAX_ITEMS`` or the deadline."""

    def __init__(self, deadline: float | None, limit: int = MAX_ITEMS) -> None:
        self.deadline = deadline
        self.left = limit
        self.limit = limit
        self.next_check = CHECK_EVERY

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise WireError(f"more than {self.limit} pods, containers, devices and IDs")
        self.next_check -= n
        if self.next_check <= 0:
            self.next_check = CHECK_EVERY
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise WireError("reading the answer took longer than the deadline allows")

    def items(self, repeated: Any) -> Iterable[Any]:
        """The elements of a repeated field, each counted, never more than the budget."""
        self.take(len(repeated))  # refused before a single element becomes a Python object
        return (x for x in repeated)


def _parse(cls: Any, data: bytes) -> Any:
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:  # RuntimeError: upb's nesting limit
        raise WireError(f"not a {cls.DESCRIPTOR.name}: {err}") from err
    return message


def _strings(values: Any, budget: _Budget) -> tuple[str, ...]:
    try:
        return tuple(budget.items(values))
    except UnicodeDecodeError as err:  # upb checks proto3 strings; kept for other backends
        raise WireError("a string field that is not UTF-8") from err


def _container_devices(entry: Any, container: str, budget: _Budget) -> ContainerDevices:
    return ContainerDevices(container, entry.resource_name, _strings(entry.device_ids, budget))


def _claim(entry: Any, container: str, budget: _Budget) -> ContainerClaim:
    devices = tuple(
        ClaimDevice(d.driver_name, d.pool_name, d.device_name,
                    tuple(c.name for c in budget.items(d.cdi_devices)))
        for d in budget.items(entry.claim_resources))
    return ContainerClaim(container, entry.claim_namespace, entry.claim_name, devices)


def _pod(pod: Any, budget: _Budget) -> PodDevices:
    devices: list[ContainerDevices] = []
    claims: list[ContainerClaim] = []
    for container in budget.items(pod.containers):
        devices += [_container_devices(d, container.name, budget)
                    for d in budget.items(container.devices)]
        claims += [_claim(c, container.name, budget)
                   for c in budget.items(container.dynamic_resources)]
    return PodDevices(pod.namespace, pod.name, tuple(devices), tuple(claims))


def list_response(data: bytes, deadline: float | None = None) -> list[PodDevices]:
    """``ListPodResourcesResponse { repeated PodResources pod_resources = 1; }``"""
    budget = _Budget(deadline)
    message = _parse(ListPodResourcesResponse, data)
    return [_pod(p, budget) for p in budget.items(message.pod_resources)]


def allocatable_response(data: bytes, deadline: float | None = None) -> list[ContainerDevices]:
    """``AllocatableResourcesResponse { repeated ContainerDevices devices = 1; ... }``"""
    budget = _Budget(deadline)
    message = _parse(AllocatableResourcesResponse, data)
    return [_container_devices(d, "", budget) for d in budget.items(message.devices)]
