"""The agent's unary gRPC call (``node_agent.podresources.unary``, HTTP/2 by h2) against what a
hostile or broken server (or a kubelet we have not seen) could send: hand-made frames from
hand-made servers. (The messages: test_messages.py; the real grpcio server: test_client.py.)"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hpack import Encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from node_agent.podresources.unary import GrpcError, status_name, unary_call

pytestmark = pytest.mark.unit


# ---- HTTP/2: hand-made servers -------------------------------------------------------------

def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def block(headers: list[tuple[str, str]]) -> bytes:
    """A header block of literals (a fresh encoder: no reference into the dynamic table)."""
    return Encoder().encode(headers, huffman=False)


OK_HEADERS = frame(1, 0x4, 1, bytes([0x88]) + block([("content-type", "application/grpc")]))
OK_TRAILERS = frame(1, 0x5, 1, block([("grpc-status", "0")]))


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
    ([frame(1, 0x5, 1, bytes([0x88]) + block(
        [("grpc-status", "14"), ("grpc-message", "kubelet%20restarting")]))], "UNAVAILABLE"),
    ([frame(1, 0x5, 1, block([(":status", "404")]))], "UNKNOWN"),
    ([OK_HEADERS, frame(0, 0, 1, b"\x01" + struct.pack(">I", 1) + b"z"), OK_TRAILERS],
     "INTERNAL"),  # compressed, though not asked for
    ([OK_HEADERS, OK_TRAILERS], "INTERNAL"),  # no message
    ([OK_HEADERS, frame(0, 0, 1, grpc_message(b"a") + grpc_message(b"b")), OK_TRAILERS],
     "INTERNAL"),  # two messages for a unary call
    ([OK_HEADERS, frame(0, 0, 1, grpc_message(b"a")),
      frame(1, 0x5, 1, block([("x", "y")]))], "INTERNAL"),  # no grpc-status
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
    server = Server(sock_path, [frame(1, 0x5, 1, bytes([0x88]) + block(
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


# ---- issue 26: what a hostile kubelet sent, each bounded ------------------------------------

@pytest.mark.parametrize("value", [b"\xc2\xb2", b"1" * 4301, b"-1", b" 0", b"0x1", b""])
def test_a_grpc_status_that_is_not_1_to_3_ascii_digits_is_a_grpc_error(
        sock_path: Path, value: bytes) -> None:
    """int() takes a superscript two or raises ValueError past 4,300 digits: the old client let
    that escape the call (and the agent's pass) as a ValueError."""
    encoder = Encoder()
    trailers = encoder.encode([(b"grpc-status", value)], huffman=False)
    server = Server(sock_path, [OK_HEADERS, frame(0, 0, 1, grpc_message(b"")),
                                *[frame(9 if i else 1, 0x4 if i + 16_000 >= len(trailers) else 0,
                                        1, trailers[i:i + 16_000])
                                  for i in range(0, len(trailers), 16_000)][:1],
                                frame(0, 0x1, 1)] if len(trailers) <= 16_000 else
                    [OK_HEADERS, frame(0, 0, 1, grpc_message(b"")), frame(1, 0x5, 1, trailers)])
    with pytest.raises(GrpcError) as caught:
        call(sock_path)
    server.close()
    assert caught.value.code in ("INTERNAL", "RESOURCE_EXHAUSTED")


def test_status_names_are_strict() -> None:
    assert status_name(b"0") == "OK" and status_name(b"14") == "UNAVAILABLE"
    assert status_name(b"99") == "status 99"
    for bad in (b"\xc2\xb2", b"1" * 4301, b"1" * 4, b"", b"+1", "٣".encode()):
        with pytest.raises(GrpcError, match="malformed grpc-status"):
            status_name(bad)


def test_header_blocks_that_never_end_the_stream_are_cut_after_a_few(sock_path: Path) -> None:
    """1,000 informational HEADERS, none ending the stream: the old client kept each block (a
    kubelet sending them for the whole deadline cost +969 MB); now the fifth ends the call."""
    informational = frame(1, 0x4, 1, block([(":status", "100")]))
    server = Server(sock_path, [informational * 1000])
    started = time.monotonic()
    with pytest.raises(GrpcError, match="header blocks") as caught:
        call(sock_path, timeout=2.0)
    assert time.monotonic() - started < 1.0
    assert caught.value.code == "INTERNAL"
    server._sock.close()


def test_a_ping_flood_is_cut_by_count_not_only_by_the_deadline(sock_path: Path) -> None:
    """PINGs the whole deadline long (the server reads our acknowledgements): at most
    MAX_CONTROL frames that carry no answer (and never more than the cap + SLACK bytes), then
    the call ends (RESOURCE_EXHAUSTED), long before the 5 s deadline."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    sock.listen(1)
    sent = [0]

    def serve() -> None:
        conn, _ = sock.accept()
        conn.settimeout(5.0)
        with conn:
            def drain() -> None:
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass

            threading.Thread(target=drain, daemon=True).start()
            with contextlib.suppress(OSError):
                for _ in range(400):  # 3.4 MB of PINGs
                    conn.sendall(frame(6, 0, 0, b"12345678") * 500)
                    sent[0] += 500 * 17

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(GrpcError) as caught:
            call(sock_path, timeout=5.0, max_message=1024)
    finally:
        sock.close()
    assert time.monotonic() - started < 3.0
    assert caught.value.code == "RESOURCE_EXHAUSTED"
    thread.join(5)


def read_frames(conn: socket.socket, buffer: bytearray) -> list[tuple[int, int, bytes]]:
    """Whole frames (type, stream, payload) off the front of ``buffer`` plus what is read."""
    frames = []
    while True:
        while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
            length = int.from_bytes(buffer[:3], "big")
            frames.append((buffer[3], int.from_bytes(buffer[5:9], "big") & 0x7FFF_FFFF,
                           bytes(buffer[9:9 + length])))
            del buffer[:9 + length]
        if frames:
            return frames
        chunk = conn.recv(65536)
        if not chunk:
            return frames
        buffer += chunk


def test_window_updates_are_sent_as_the_answer_is_read(sock_path: Path) -> None:
    """A server that keeps to HTTP/2's default 65,535-byte windows: it sends a window's worth,
    then the rest only after the client's WINDOW_UPDATEs for the stream. The old client opened
    a 16 MiB window at the start and never sent one after data: this server would wait."""
    answer = bytes(range(256)) * 1024  # 256 KiB
    body = grpc_message(answer)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    sock.listen(1)
    updates: list[int] = []

    def serve() -> None:
        conn, _ = sock.accept()
        conn.settimeout(3.0)
        buffer = bytearray()
        with conn:
            conn.recv(24)  # the preface
            conn.sendall(frame(4, 0, 0) + OK_HEADERS)
            sent, window = 0, 65_535
            while sent < len(body):
                while window > 0 and sent < len(body):
                    n = min(16_384, window, len(body) - sent)
                    conn.sendall(frame(0, 0, 1, body[sent:sent + n]))
                    sent += n
                    window -= n
                if sent >= len(body):
                    break
                try:
                    for kind, stream, payload in read_frames(conn, buffer):
                        if kind == 8 and stream == 1:
                            updates.append(int.from_bytes(payload[:4], "big"))
                            window += updates[-1]
                except TimeoutError:
                    return  # no WINDOW_UPDATE came: the client times out
            conn.sendall(OK_TRAILERS)
            with contextlib.suppress(OSError):
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert call(sock_path, timeout=5.0, max_message=1 << 20) == answer
    finally:
        thread.join(5)
        sock.close()
    assert sum(updates) >= len(body) - 65_535


class FedSocket:
    """A socket whose recv hands back a given byte stream (the server's), sends go nowhere."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def recv(self, n: int) -> bytes:
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk

    def sendall(self, data: bytes) -> None:
        pass

    def settimeout(self, timeout: float) -> None:
        pass


frames = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 255), st.integers(0, 3),
                            st.binary(max_size=40)), max_size=12).map(
    lambda fs: b"".join(frame(k, f, s, p) for k, f, s, p in fs))


@given(st.sampled_from([b"", OK_HEADERS, frame(4, 0, 0) + OK_HEADERS]), frames)
@settings(max_examples=400, deadline=None)
def test_any_frames_a_server_sends_end_in_an_answer_or_a_grpc_error(prefix: bytes,
                                                                    data: bytes) -> None:
    """h2's state machine, our bounds, the gRPC frame and trailers: whatever comes, the call
    returns or raises GrpcError (bench/fuzz_agent_parsers.py: a million more)."""
    from node_agent.podresources import unary

    call = unary._Call(FedSocket(prefix + data), time.monotonic() + 10, 1024)  # type: ignore
    call.h2.initiate_connection()
    call.h2.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/x"),
                             (":authority", "k")])
    call.h2.data_to_send()
    try:
        while not call.ended:
            call.read()
        unary._result(call.blocks, bytes(call.body), 1024)
    except GrpcError:
        pass
