"""The protobuf wire format of the pod-resources messages, from hand-made bytes: unknown fields
skipped, bytes that are not the message a wire error."""

from __future__ import annotations

import pytest

from node_agent.podresources import wire

pytestmark = pytest.mark.unit


def _len(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    devices = _len(1, b"nvidia.com/gpu") + _len(2, b"GPU-1") + bytes([3 << 3 | 0, 0x96, 0x01]) \
        + bytes([9 << 3 | 1]) + b"\x00" * 8 + bytes([10 << 3 | 5]) + b"\x00" * 4
    container = _len(1, b"main") + _len(2, devices)
    pod = _len(1, b"p") + _len(2, b"ns") + _len(3, container) + _len(15, b"future field")
    [parsed] = wire.list_response(_len(1, pod))
    assert parsed == wire.PodDevices("ns", "p", (wire.ContainerDevices(
        "main", "nvidia.com/gpu", ("GPU-1",)),))


@pytest.mark.parametrize("data, why", [
    (_len(1, _len(1, b"\xff\xfe")), "not UTF-8"),
    (bytes([1 << 3 | 2, 10]) + b"short", "past the message"),
    (bytes([1 << 3 | 3]), "wire type 3"),
    (bytes([0x08]) + b"\xff" * 11, "varint"),
    (_len(1, bytes([1 << 3 | 0, 5])), "numeric wire type"),
    (bytes([0x02, 0x00]), "field number 0"),
])
def test_bytes_that_are_not_the_message_are_a_wire_error(data: bytes, why: str) -> None:
    with pytest.raises(wire.WireError, match=why):
        wire.list_response(data)
