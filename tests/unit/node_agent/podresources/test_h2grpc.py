"""The agent's HTTP/2 gRPC client, HPACK and protobuf decoding, against what a hostile or broken
server (or a kubelet we have not seen) could send: RFC 7541's own examples for HPACK, hand-made
frames for HTTP/2, hand-made bytes for protobuf. (The real grpcio server: test_agent_podresources
_grpc.py.)"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.podresources import hpack, wire
from node_agent.podresources.h2grpc import GrpcError, unary_call

pytestmark = pytest.mark.unit


# ---- HPACK: RFC 7541 Appendix C ----------------------------------------------------------

def test_integers_of_rfc7541_c1() -> None:
    assert hpack.decode_int(bytes([0x0A]), 0, 5) == (10, 1)
    assert hpack.decode_int(bytes([0x1F, 0x9A, 0x0A]), 0, 5) == (1337, 3)
    assert hpack.decode_int(bytes([0x2A]), 0, 8) == (42, 1)
    assert hpack.encode_int(1337, 5) == bytes([0x1F, 0x9A, 0x0A])


def test_requests_with_huffman_of_rfc7541_c4_share_one_dynamic_table() -> None:
    d = hpack.Decoder()
    assert d.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
        (":method", "GET"), (":scheme", "http"), (":path", "/"),
        (":authority", "www.example.com")]
    assert d.decode(bytes.fromhex("828684be5886a8eb10649cbf")) == [
        (":method", "GET"), (":scheme", "http"), (":path", "/"),
        (":authority", "www.example.com"), ("cache-control", "no-cache")]
    assert d.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")) == [
        (":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
        (":authority", "www.example.com"), ("custom-key", "custom-value")]


def test_the_huffman_code_is_canonical_with_rfc7541_appendix_b_values() -> None:
    codes = hpack.huffman_codes()
    assert codes[ord("0")] == (0x0, 5)
    assert codes[0] == (0x1FF8, 13)
    assert codes[ord("a")] == (0x3, 5)
    assert codes[255] == (0x3FFFFEE, 26)
    assert codes[256] == (0x3FFFFFFF, 30)  # EOS


@pytest.mark.parametrize("block", [
    bytes([0x80]),  # index 0
    bytes([0xFF, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),  # integer beyond 2**32
    bytes([0xBE]),  # dynamic index 62 with an empty table
    bytes([0x00, 0x05, ord("a")]),  # string past the block
    bytes([0x00, 0x81, 0x00, 0x00]),  # Huffman: 8 zero bits are no symbol's end: bad padding
    bytes([0x3F, 0xE2, 0x1F]),  # table size update to 4097, above 4096
    bytes([0x00, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]),  # Huffman EOS inside a string
])
def test_a_bad_header_block_is_an_hpack_error(block: bytes) -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder().decode(block)


def test_encoded_request_headers_decode_back() -> None:
    headers = [(":path", "/v1.PodResourcesLister/List"), ("te", "trailers")]
    assert hpack.Decoder().decode(hpack.encode_headers(headers)) == headers


# ---- protobuf wire format --------------------------------------------------------------------

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


# ---- HTTP/2: hand-made servers -------------------------------------------------------------

def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(payload)) + payload


OK_HEADERS = frame(1, 0x4, 1, bytes([0x88]) + hpack.encode_headers(
    [("content-type", "application/grpc")]))
OK_TRAILERS = frame(1, 0x5, 1, hpack.encode_headers([("grpc-status", "0")]))


class Server:
    """Accepts one connection, reads what the client sends, and answers with ``script``: bytes
    to send, or a float to sleep."""

    def __init__(self, path: Path, script: list[bytes | float], linger: float = 0.0) -> None:
        self.received = bytearray()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(1)
        self._script = script
        self._linger = linger
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn, _ = self._sock.accept()
        conn.settimeout(0.2)
        with conn:
            with contextlib.suppress(TimeoutError):
                self.received += conn.recv(65536)
            for step in self._script:
                try:
                    if isinstance(step, float):
                        time.sleep(step)
                    else:
                        conn.sendall(step)
                except OSError:
                    return
            end = time.monotonic() + self._linger
            while time.monotonic() < end:
                try:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    self.received += chunk
                except TimeoutError:
                    continue
                except OSError:
                    break

    def close(self) -> None:
        self._thread.join(5)
        self._sock.close()


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "h2.sock"


def call(path: Path, timeout: float = 1.0, max_message: int = 1024) -> bytes:
    return unary_call(str(path), "/v1.PodResourcesLister/List", b"", timeout=timeout,
                      max_message=max_message)


def test_settings_and_pings_are_acknowledged_and_the_answer_read(sock_path: Path) -> None:
    server = Server(sock_path, [frame(4, 0, 0, struct.pack(">HI", 3, 100)),
                                frame(6, 0, 0, b"12345678"), OK_HEADERS,
                                frame(0, 0, 1, grpc_message(b"\x0a\x00")), OK_TRAILERS],
                    linger=0.3)
    assert call(sock_path) == b"\x0a\x00"
    server.close()
    sent = bytes(server.received)
    assert sent.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert frame(4, 0x1, 0) in sent  # SETTINGS ACK
    assert frame(6, 0x1, 0, b"12345678") in sent  # PING ACK with the same payload


@pytest.mark.parametrize("script, code", [
    ([], "UNAVAILABLE"),  # closed at once
    ([frame(0, 0, 1, b"x" * 16_385)], "INTERNAL"),  # frame above the size we allow
    ([OK_HEADERS, frame(0, 0, 1, grpc_message(b"y" * 2000))], "RESOURCE_EXHAUSTED"),
    ([frame(1, 0x4, 1, bytes([0x80]))], "INTERNAL"),  # bad HPACK
    ([frame(3, 0, 1, struct.pack(">I", 2))], "UNAVAILABLE"),  # RST_STREAM INTERNAL_ERROR
    ([frame(7, 0, 0, struct.pack(">II", 0, 0))], "UNAVAILABLE"),  # GOAWAY before our stream
    ([frame(1, 0x5, 1, bytes([0x88]) + hpack.encode_headers(
        [("grpc-status", "14"), ("grpc-message", "kubelet%20restarting")]))], "UNAVAILABLE"),
    ([frame(1, 0x5, 1, hpack.encode_headers([(":status", "404")]))], "UNKNOWN"),
    ([OK_HEADERS, frame(0, 0, 1, b"\x01" + struct.pack(">I", 1) + b"z"), OK_TRAILERS],
     "INTERNAL"),  # compressed, though not asked for
    ([OK_HEADERS, OK_TRAILERS], "INTERNAL"),  # no message
    ([OK_HEADERS, frame(0, 0, 1, grpc_message(b"a") + grpc_message(b"b")), OK_TRAILERS],
     "INTERNAL"),  # two messages for a unary call
    ([OK_HEADERS, frame(0, 0, 1, grpc_message(b"a")),
      frame(1, 0x5, 1, hpack.encode_headers([("x", "y")]))], "INTERNAL"),  # no grpc-status
    ([frame(9, 0x4, 1, b"")], "INTERNAL"),  # CONTINUATION without HEADERS
    ([frame(5, 0x4, 1, b"\x00\x00\x00\x02")], "INTERNAL"),  # push, though disabled
])
def test_a_broken_answer_is_a_grpc_error(sock_path: Path, script: list[bytes | float],
                                         code: str) -> None:
    server = Server(sock_path, script)
    with pytest.raises(GrpcError) as caught:
        call(sock_path)
    server.close()
    assert caught.value.code == code


def test_the_grpc_message_is_percent_decoded(sock_path: Path) -> None:
    server = Server(sock_path, [frame(1, 0x5, 1, bytes([0x88]) + hpack.encode_headers(
        [("grpc-status", "14"), ("grpc-message", "kubelet%20restarting")]))])
    with pytest.raises(GrpcError, match="UNAVAILABLE: kubelet restarting"):
        call(sock_path)
    server.close()


@pytest.mark.parametrize("script", [
    [10.0],  # says nothing
    [OK_HEADERS, *[frame(0, 0, 1, b"\x00"), 0.05] * 200],  # trickles, never ends the stream
])
def test_a_server_that_stalls_or_trickles_is_cut_at_the_deadline(
        sock_path: Path, script: list[bytes | float]) -> None:
    server = Server(sock_path, script)
    started = time.monotonic()
    with pytest.raises(GrpcError) as caught:
        call(sock_path, timeout=0.4, max_message=1 << 20)
    assert time.monotonic() - started < 1.5
    assert caught.value.code == "DEADLINE_EXCEEDED"
    server._sock.close()  # the server thread ends when its socket errors
