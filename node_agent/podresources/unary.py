"""One unary gRPC call over HTTP/2 cleartext on a unix socket, HTTP/2 spoken by python-hyper's
``h2`` (and its ``hpack``).

What the kubelet's pod-resources API needs: a new connection per call (the agent asks every
``--interval`` seconds), one stream, no compression, no TLS. Receive flow control is h2's: the
windows are HTTP/2's defaults and every DATA frame read is acknowledged, so h2 sends
WINDOW_UPDATE as the answer is consumed and a server can never send more than the window ahead
of what was read.

Everything a server sends is bounded before it is believed:

- the whole call by ``timeout`` (connect, send, every read: one deadline, not per read);
- the bytes read from the socket by ``max_message`` plus ``SLACK``: SETTINGS, PING or header
  floods end the call once that much has come;
- frames by HTTP/2's default 16 KiB (h2 refuses larger ones), a header block by h2's 64
  CONTINUATION frames and ``MAX_HEADER_LIST`` decoded bytes, the number of header blocks by
  ``MAX_HEADER_BLOCKS`` (a server answering with HEADERS that never end the stream), frames
  that carry no answer (SETTINGS, PING, WINDOW_UPDATE, ...) by ``MAX_CONTROL``: h2's work is
  per frame, so a flood of 9-byte frames costs far more per byte than the answer does
  (bench/results/fuzz_agent_parsers.md);
- the answer by ``max_message``; one gRPC message, uncompressed, whose length prefix matches;
- ``grpc-status`` must be one to three ASCII digits (``int()`` would take ``²`` or 4,300 digits).

Any violation, and a connection lost mid-call, is a GrpcError; nothing else escapes but
OSError from connecting.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

STREAM = 1
SLACK = 256 * 1024  # bytes read beyond the answer's cap: frame heads, headers, trailers
MAX_HEADER_LIST = 16 * 1024  # decoded bytes of one header block (gRPC's are a few hundred)
MAX_HEADER_BLOCKS = 4  # 1xx responses, the response, the trailers
MAX_CONTROL = 256  # SETTINGS, PING, WINDOW_UPDATE, PRIORITY, unknown frames (a kubelet: ~4)
READ = 64 * 1024

# https://grpc.github.io/grpc/core/md_doc_statuscodes.html
STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
_STATUS = re.compile(rb"[0-9]{1,3}")


class GrpcError(Exception):
    """The call failed; ``code`` is a gRPC status name (DEADLINE_EXCEEDED, UNAVAILABLE, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


def status_name(value: bytes) -> str:
    """A ``grpc-status`` value's name; GrpcError(INTERNAL) unless it is 1-3 ASCII digits."""
    if not _STATUS.fullmatch(value):
        raise GrpcError("INTERNAL", f"malformed grpc-status {value[:16]!r}")
    code = int(value)
    return STATUS_NAMES[code] if code < len(STATUS_NAMES) else f"status {code}"


class _Call:
    """The client side of one stream: h2's state machine plus our bounds."""

    def __init__(self, sock: socket.socket, deadline: float, max_message: int) -> None:
        self.sock = sock
        self.deadline = deadline
        self.max_message = max_message
        self.budget = max_message + SLACK
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
        })
        self.h2.decoder.max_header_list_size = MAX_HEADER_LIST  # before the server's ACK too
        self.blocks: list[dict[bytes, bytes]] = []
        self.body = bytearray()
        self.ended = False
        self.control = 0

    def _remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise GrpcError("DEADLINE_EXCEEDED", "no complete answer within the deadline")
        return left

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if not data:
            return
        self.sock.settimeout(self._remaining())
        try:
            self.sock.sendall(data)
        except TimeoutError as err:
            raise GrpcError("DEADLINE_EXCEEDED", "sending timed out") from err
        except OSError as err:  # the server closed or reset the connection
            raise GrpcError("UNAVAILABLE", f"sending failed: {err.strerror or err}") from err

    def read(self) -> None:
        self.sock.settimeout(self._remaining())
        try:
            chunk = self.sock.recv(min(READ, self.budget))
        except TimeoutError as err:
            raise GrpcError("DEADLINE_EXCEEDED", "no complete answer within the deadline") \
                from err
        except OSError as err:
            raise GrpcError("UNAVAILABLE", f"reading failed: {err.strerror or err}") from err
        if not chunk:
            raise GrpcError("UNAVAILABLE", "the server closed the connection")
        self.budget -= len(chunk)
        try:
            events = self.h2.receive_data(chunk)
        except h2.exceptions.H2Error as err:  # FrameTooLarge, ProtocolError, oversized headers
            raise GrpcError("INTERNAL", f"HTTP/2: {type(err).__name__}: {err}") from err
        except Exception as err:  # hpack/hyperframe errors h2 does not wrap: the same verdict
            raise GrpcError("INTERNAL", f"HTTP/2: {type(err).__name__}: {err}") from err
        for event in events:
            self.on(event)
        self.flush()  # SETTINGS and PING acknowledgements, WINDOW_UPDATEs
        if not self.ended and self.budget <= 0:
            raise GrpcError("RESOURCE_EXHAUSTED", f"more than {self.max_message + SLACK} "
                            "bytes without a complete answer")

    def on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            if event.last_stream_id is None or event.last_stream_id < STREAM:
                raise GrpcError("UNAVAILABLE", "the server refused the stream (GOAWAY "
                                f"{event.error_code})")
            return
        if isinstance(event, (h2.events.RemoteSettingsChanged, h2.events.SettingsAcknowledged,
                              h2.events.PingReceived, h2.events.PingAckReceived,
                              h2.events.WindowUpdated, h2.events.PriorityUpdated,
                              h2.events.UnknownFrameReceived)):
            self.control += 1
            if self.control > MAX_CONTROL:
                raise GrpcError("RESOURCE_EXHAUSTED", f"more than {MAX_CONTROL} HTTP/2 frames "
                                "without the answer")
            return
        if getattr(event, "stream_id", STREAM) not in (STREAM, 0):
            return
        if isinstance(event, h2.events.StreamReset):
            code = int(event.error_code)
            # RST_STREAM CANCEL (8) is how a server drops a call past its deadline.
            raise GrpcError("DEADLINE_EXCEEDED" if code == 8 else "UNAVAILABLE",
                            f"stream reset by the server (HTTP/2 error {code})")
        if isinstance(event, (h2.events.InformationalResponseReceived,
                              h2.events.ResponseReceived, h2.events.TrailersReceived)):
            if len(self.blocks) >= MAX_HEADER_BLOCKS:
                raise GrpcError("INTERNAL", f"more than {MAX_HEADER_BLOCKS} header blocks")
            self.blocks.append(dict(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            self.body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, STREAM)
            if len(self.body) > self.max_message + 5:
                raise GrpcError("RESOURCE_EXHAUSTED", f"answer above {self.max_message} bytes")
        elif isinstance(event, h2.events.StreamEnded):
            self.ended = True


def unary_call(socket_path: str, method: str, request: bytes, *, timeout: float,
               max_message: int, authority: str = "localhost") -> bytes:
    """Call ``method`` (``/package.Service/Method``) with the serialized ``request``; return the
    serialized answer. Raises GrpcError (with the server's status or the client's reason) and
    OSError when the socket cannot be connected."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except TimeoutError as err:
            raise GrpcError("DEADLINE_EXCEEDED", "connecting timed out") from err
        call = _Call(sock, deadline, max_message)
        call.h2.initiate_connection()
        call.h2.send_headers(STREAM, [
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
            ("user-agent", "gpu-auditor-agent"),
        ])
        call.h2.send_data(STREAM, b"\x00" + struct.pack(">I", len(request)) + request,
                          end_stream=True)
        call.flush()
        while not call.ended:
            call.read()
        return _result(call.blocks, bytes(call.body), max_message)


def _result(blocks: list[dict[bytes, bytes]], body: bytes, max_message: int) -> bytes:
    blocks = [b for b in blocks if not b.get(b":status", b"").startswith(b"1")]
    if not blocks:
        raise GrpcError("INTERNAL", "stream ended without response headers")
    status = blocks[0].get(b":status", b"")
    trailers: dict[bytes, bytes] = {}
    for headers in blocks[1:] if len(blocks) > 1 else blocks:  # trailers-only: one block
        trailers.update(headers)
    if status != b"200":
        raise GrpcError("UNAVAILABLE" if status in (b"502", b"503", b"504") else "UNKNOWN",
                        f"HTTP status {status[:16]!r}")
    grpc_status = trailers.get(b"grpc-status")
    if grpc_status is None:
        raise GrpcError("INTERNAL", "answer without grpc-status")
    code = status_name(grpc_status)
    if code != "OK":
        message = unquote(trailers.get(b"grpc-message", b"").decode("ascii", "replace"))
        raise GrpcError(code, message[:512])
    return _message(body, max_message)


def _message(body: bytes, max_message: int) -> bytes:
    """The one message of a unary answer from its gRPC length-prefixed frame."""
    if len(body) < 5:
        raise GrpcError("INTERNAL", f"answer of {len(body)} bytes, not a gRPC message")
    compressed, length = body[0], struct.unpack(">I", body[1:5])[0]
    if compressed:
        raise GrpcError("INTERNAL", "compressed answer although none was asked for")
    if length > max_message:
        raise GrpcError("RESOURCE_EXHAUSTED", f"answer of {length} bytes, above {max_message}")
    if length != len(body) - 5:
        raise GrpcError("INTERNAL", f"gRPC message of {length} bytes in a body of "
                        f"{len(body) - 5}")
    return body[5:]
