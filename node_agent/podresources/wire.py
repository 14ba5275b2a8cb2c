"""The protobuf messages of the kubelet's pod-resources v1 API that the agent reads, decoded by
hand from the wire format (field numbers from ``v1/api.proto``) into plain frozen values.

Only the fields the agent uses are kept; every other field (cpu_ids, memory, topology, fields a
later kubelet adds) is skipped by its wire type, as protobuf itself does. A message that is not
valid protobuf, or a string that is not UTF-8, raises ``WireError``: the whole answer is then
unusable (allocation unknown), never half read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

VARINT, I64, LEN, I32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """Devices of one resource (``nvidia.com/gpu``, ...) a device plugin gave a container."""

    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of a ResourceClaim (DRA): the driver/pool/device triplet names it."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """A ResourceClaim a container uses, with the devices allocated to the claim."""

    container: str
    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True, slots=True)
class PodDevices:
    namespace: str
    name: str
    devices: tuple[ContainerDevices, ...]
    claims: tuple[ContainerClaim, ...] = ()


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("message ends inside a varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field: an int for varints and fixed-size
    fields, the bytes for length-delimited ones."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if kind == VARINT:
            value, pos = _varint(data, pos)
            yield number, kind, value
        elif kind == LEN:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise WireError("field runs past the message")
            yield number, kind, data[pos:pos + length]
            pos += length
        elif kind in (I64, I32):
            size = 8 if kind == I64 else 4
            if pos + size > len(data):
                raise WireError("field runs past the message")
            yield number, kind, int.from_bytes(data[pos:pos + size], "little")
            pos += size
        else:
            raise WireError(f"wire type {kind} (groups are not used by this API)")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise WireError("a string field with a numeric wire type")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as err:
        raise WireError("a string field that is not UTF-8") from err


def _message(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise WireError("a message field with a numeric wire type")
    return value


def container_devices(data: bytes, container: str) -> ContainerDevices:
    resource, ids = "", []
    for number, _, value in fields(data):
        if number == 1:
            resource = _text(value)
        elif number == 2:
            ids.append(_text(value))
    return ContainerDevices(container, resource, tuple(ids))


def claim_device(data: bytes) -> ClaimDevice:
    cdi: list[str] = []
    driver = pool = device = ""
    for number, _, value in fields(data):
        if number == 1:  # CDIDevice { string name = 1; }
            cdi += [_text(v) for n, _, v in fields(_message(value)) if n == 1]
        elif number == 2:
            driver = _text(value)
        elif number == 3:
            pool = _text(value)
        elif number == 4:
            device = _text(value)
    return ClaimDevice(driver, pool, device, tuple(cdi))


def container_claim(data: bytes, container: str) -> ContainerClaim:
    name = namespace = ""
    devices: list[ClaimDevice] = []
    for number, _, value in fields(data):
        if number == 2:
            name = _text(value)
        elif number == 3:
            namespace = _text(value)
        elif number == 4:
            devices.append(claim_device(_message(value)))
    return ContainerClaim(container, namespace, name, tuple(devices))


def pod_resources(data: bytes) -> PodDevices:
    name = namespace = ""
    containers: list[bytes] = []
    for number, _, value in fields(data):
        if number == 1:
            name = _text(value)
        elif number == 2:
            namespace = _text(value)
        elif number == 3:
            containers.append(_message(value))
    devices: list[ContainerDevices] = []
    claims: list[ContainerClaim] = []
    for raw in containers:
        cname, dev_raw, claim_raw = "", [], []
        for number, _, value in fields(raw):
            if number == 1:
                cname = _text(value)
            elif number == 2:
                dev_raw.append(_message(value))
            elif number == 5:
                claim_raw.append(_message(value))
        devices += [container_devices(d, cname) for d in dev_raw]
        claims += [container_claim(c, cname) for c in claim_raw]
    return PodDevices(namespace, name, tuple(devices), tuple(claims))


def list_response(data: bytes) -> list[PodDevices]:
    """``ListPodResourcesResponse { repeated PodResources pod_resources = 1; }``"""
    return [pod_resources(_message(v)) for n, _, v in fields(data) if n == 1]


def allocatable_response(data: bytes) -> list[ContainerDevices]:
    """``AllocatableResourcesResponse { repeated ContainerDevices devices = 1; ... }``"""
    return [container_devices(_message(v), "") for n, _, v in fields(data) if n == 1]
