"""The agent's HTTP/2 gRPC client against what a hostile or broken server (or a kubelet we have
not seen) could send: hand-made frames from hand-made servers. (HPACK: test_hpack.py; the
protobuf wire format: test_wire.py; the real grpcio server: test_client.py.)"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.podresources import hpack
from node_agent.podresources.h2grpc import GrpcError, unary_call

pytestmark = pytest.mark.unit


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
