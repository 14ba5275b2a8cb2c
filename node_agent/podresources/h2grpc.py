"""One unary gRPC call over HTTP/2 cleartext on a unix socket, with the standard library only.

What the kubelet's pod-resources API needs and nothing more: a new connection per call (the
agent asks every ``--interval`` seconds), one stream, no compression, no TLS. The connection
preface and our SETTINGS open a receive window as large as the largest answer we accept, so the
server never waits for a WINDOW_UPDATE; its SETTINGS and PINGs are acknowledged as HTTP/2 asks.

This replaces grpcio (about 20 MiB of RSS once imported, and a runtime version check against the
generated stubs that broke the agent on a GPU image). Every read is bounded: the whole call by
``timeout``, each frame by the 16 KiB frame size we announce, header blocks by
``MAX_HEADER_BLOCK``, the answer by ``max_message``.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import unquote

from node_agent.podresources.hpack import Decoder, HpackError, encode_headers

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0, 0x1, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
DEFAULT_WINDOW = 65_535
MAX_FRAME = 16_384  # SETTINGS_MAX_FRAME_SIZE: the default, not raised
MAX_HEADER_BLOCK = 64 * 1024
STREAM = 1

# https://grpc.github.io/grpc/core/md_doc_statuscodes.html
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


class GrpcError(Exception):
    """The call failed; ``code`` is a gRPC status name (DEADLINE_EXCEEDED, UNAVAILABLE, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def _status_name(value: str) -> str:
    if value.isdigit() and int(value) < len(STATUS_NAMES):
        return STATUS_NAMES[int(value)]
    return f"status {value[:16]!r}"


class _Conn:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buffer = bytearray()

    def _remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise GrpcError("DEADLINE_EXCEEDED", "no complete answer within the deadline")
        return left

    def send(self, data: bytes) -> None:
        self.sock.settimeout(self._remaining())
        try:
            self.sock.sendall(data)
        except TimeoutError as err:
            raise GrpcError("DEADLINE_EXCEEDED", "sending the request timed out") from err

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self.sock.settimeout(self._remaining())
            try:
                chunk = self.sock.recv(max(65_536, n - len(self.buffer)))
            except TimeoutError as err:
                raise GrpcError("DEADLINE_EXCEEDED", "no complete answer within the "
                                "deadline") from err
            if not chunk:
                raise GrpcError("UNAVAILABLE", "the server closed the connection")
            self.buffer += chunk
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def frame(self) -> tuple[int, int, int, bytes]:
        head = self.read(9)
        length = int.from_bytes(head[:3], "big")
        if length > MAX_FRAME:
            raise GrpcError("INTERNAL", f"HTTP/2 frame of {length} bytes, above {MAX_FRAME}")
        stream = int.from_bytes(head[5:9], "big") & 0x7FFF_FFFF
        return head[3], head[4], stream, self.read(length)


def _unpad(flags: int, payload: bytes, kind: int) -> bytes:
    if flags & PADDED:
        if not payload or payload[0] >= len(payload):
            raise GrpcError("INTERNAL", "bad HTTP/2 padding")
        payload = payload[1:len(payload) - payload[0]]
    if kind == HEADERS and flags & PRIORITY:
        payload = payload[5:]
    return payload


def unary_call(socket_path: str, method: str, request: bytes, *, timeout: float,
               max_message: int, authority: str = "localhost") -> bytes:
    """Call ``method`` (``/package.Service/Method``) with the serialized ``request``; return the
    serialized answer. Raises GrpcError (with the server's status or the client's reason) and
    OSError when the socket cannot be connected."""
    deadline = time.monotonic() + timeout
    # One gRPC message, its 5-byte prefix, slack; at least HTTP/2's default, at most its limit.
    window = min(2**31 - 1, max(DEFAULT_WINDOW, max_message + 5 + MAX_FRAME))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except TimeoutError as err:
            raise GrpcError("DEADLINE_EXCEEDED", "connecting timed out") from err
        conn = _Conn(sock, deadline)
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + \
            struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, window)
        millis = max(1, int(timeout * 1000))
        headers = encode_headers([
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", f"{millis}m"),
            ("user-agent", "gpu-auditor-agent"),
        ])
        message = b"\x00" + struct.pack(">I", len(request)) + request
        grow = window - DEFAULT_WINDOW  # the connection's window, beside each stream's
        conn.send(PREFACE + _frame(SETTINGS, 0, 0, settings)
                  + (_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", grow)) if grow else b"")
                  + _frame(HEADERS, END_HEADERS, STREAM, headers)
                  + _frame(DATA, END_STREAM, STREAM, message))
        return _read_answer(conn, max_message)


def _read_answer(conn: _Conn, max_message: int) -> bytes:
    decoder = Decoder()
    blocks: list[list[tuple[str, str]]] = []
    block = bytearray()
    block_ends_stream = False
    in_headers = False
    body = bytearray()
    while True:
        kind, flags, stream, payload = conn.frame()
        if in_headers and kind != CONTINUATION:
            raise GrpcError("INTERNAL", "HTTP/2 header block interrupted")
        if kind == SETTINGS:
            if not flags & ACK:
                if len(payload) % 6:
                    raise GrpcError("INTERNAL", "malformed HTTP/2 SETTINGS")
                conn.send(_frame(SETTINGS, ACK, 0))
            continue
        if kind == PING:
            if not flags & ACK:
                conn.send(_frame(PING, ACK, 0, payload[:8]))
            continue
        if kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF if len(payload) >= 8 \
                else 0
            if last < STREAM:
                code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else -1
                raise GrpcError("UNAVAILABLE", f"the server refused the stream (GOAWAY {code})")
            continue  # our stream is still answered
        if kind == PUSH_PROMISE:
            raise GrpcError("INTERNAL", "PUSH_PROMISE although push was disabled")
        if stream != STREAM:
            continue  # WINDOW_UPDATE, PRIORITY, unknown frame types, other streams
        if kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big") if len(payload) >= 4 else -1
            # RST_STREAM CANCEL (8) is how a server drops a call past its deadline.
            raise GrpcError("DEADLINE_EXCEEDED" if code == 8 else "UNAVAILABLE",
                            f"stream reset by the server (HTTP/2 error {code})")
        if kind in (HEADERS, CONTINUATION):
            if kind == CONTINUATION and not in_headers:
                raise GrpcError("INTERNAL", "HTTP/2 CONTINUATION without HEADERS")
            if kind == HEADERS:
                block_ends_stream = bool(flags & END_STREAM)
                payload = _unpad(flags, payload, kind)
            block += payload
            if len(block) > 64 * 1024:
                raise GrpcError("RESOURCE_EXHAUSTED", "HTTP/2 header block above 64 KiB")
            in_headers = not flags & END_HEADERS
            if in_headers:
                continue
            try:
                blocks.append(decoder.decode(bytes(block)))
            except HpackError as err:
                raise GrpcError("INTERNAL", f"bad HPACK header block: {err}") from err
            block.clear()
            if block_ends_stream:
                return _result(blocks, body, max_message)
            continue
        if kind == DATA:
            body += _unpad(flags, payload, kind)
            if len(body) > max_message + 5:
                raise GrpcError("RESOURCE_EXHAUSTED", f"answer above {max_message} bytes")
            if flags & END_STREAM:
                return _result(blocks, body, max_message)


def _result(blocks: list[list[tuple[str, str]]], body: bytes | bytearray,
            max_message: int) -> bytes:
    if not blocks:
        raise GrpcError("INTERNAL", "stream ended without response headers")
    first = dict(blocks[0])
    status = first.get(":status", "")
    trailers: dict[str, str] = {}
    for headers in blocks[1:] if len(blocks) > 1 else blocks:  # trailers-only: one block
        trailers.update(headers)
    if status != "200":
        raise GrpcError("UNAVAILABLE" if status in ("502", "503", "504") else "UNKNOWN",
                        f"HTTP status {status[:16]!r}")
    grpc_status = trailers.get("grpc-status")
    if grpc_status is None:
        raise GrpcError("INTERNAL", "answer without grpc-status")
    if grpc_status != "0":
        raise GrpcError(_status_name(grpc_status),
                        unquote(trailers.get("grpc-message", ""))[:512])
    if len(body) < 5:
        raise GrpcError("INTERNAL", "answer without a message")
    if body[0] != 0:
        raise GrpcError("INTERNAL", "compressed answer, although none was asked for")
    length = int.from_bytes(body[1:5], "big")
    if length > max_message:
        raise GrpcError("RESOURCE_EXHAUSTED", f"answer above {max_message} bytes")
    if len(body) != 5 + length:
        raise GrpcError("INTERNAL", "answer is not exactly one gRPC message")
    return bytes(body[5:])
