"""The agent's HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics) and ``/healthz``.

(Named ``http_server`` rather than ``http`` so it can never shadow the standard library.)

Anything that can reach the port can connect, so no client may hold the server: connections
live in one asyncio event loop (no thread per connection), and

- a request head must arrive whole within ``head_timeout`` s of the connection (``idle_timeout``
  s after the previous response on a kept-alive one), however slowly its bytes trickle in, and
  be at most ``MAX_HEAD_BYTES`` (else 431);
- a response must be read within ``write_timeout`` s; it is written in 64 KiB pieces, so a
  client that does not read holds one piece of memory, not a copy of the body;
- at most ``max_connections`` are open: a new one closes the one that has waited longest for a
  request head (idle or slow), and is refused only when every connection is mid-response;
- ``/metrics`` bodies are rendered on ``render_threads`` threads (a pass's families are rendered
  already, so this is usually a copy); ``/healthz`` is answered on the loop itself.

So a slowloris client or a crowd of idle ones cannot starve ``/metrics`` or ``/healthz``, and the
agent's threads are the loop, the render threads and the sampler, whatever the clients do.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]
# Accept header → (body, or the body's pieces in order, content type)
Render = Callable[[str], tuple[bytes | Sequence[bytes], str]]

MAX_HEAD_BYTES = 8192
MAX_HEADERS = 64
CHUNK = 64 * 1024
TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


class BadRequest(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    keep_alive: bool
    accept: str = ""


def parse_head(head: bytes) -> Request:
    """The request line and the headers we use, from a whole head (CRLF or LF line ends)."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1]:
        raise BadRequest(400, "malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        line = line.rstrip("\r")
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, "malformed header line")
        headers[name.lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = (connection != "close" if parts[2] == "HTTP/1.1"
                  else connection == "keep-alive")
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        keep_alive = False  # a body we will not read: answer, then close
    return Request(parts[0], parts[1].split("?", 1)[0], keep_alive, headers.get("accept", ""))


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    waiting_since: float | None = field(default=None)  # waiting for a request head since


class MetricsServer:
    """Serves ``render`` on ``/metrics`` and ``health`` on ``/healthz``. Binds at construction
    (so a bad address fails at start); ``serve_forever`` runs the loop in the calling thread;
    ``shutdown`` (from another thread) stops it."""

    def __init__(self, render: Render, health: Health, address: str, port: int, *,
                 max_connections: int = 64, head_timeout: float = 10.0,
                 idle_timeout: float = 60.0, write_timeout: float = 30.0,
                 render_threads: int = 2) -> None:
        self._render = render
        self._health = health
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((address, port))
            self._socket.listen(128)
            self._socket.setblocking(False)
        except OSError:
            self._socket.close()
            raise
        self.server_address: tuple[str, int] = self._socket.getsockname()[:2]
        self._executor = ThreadPoolExecutor(render_threads, thread_name_prefix="render")
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._lock = threading.Lock()  # orders shutdown() against the loop's start
        self._stopping = False
        self._done = threading.Event()
        self.refused = 0  # connections refused because every slot was mid-response
        self.evicted = 0  # connections closed to make room while waiting for a request

    # -- running --

    def serve_forever(self) -> None:
        try:
            asyncio.run(self._serve())
        finally:
            self._done.set()

    async def _serve(self) -> None:
        stop = asyncio.Event()
        with self._lock:
            self._loop, self._stop = asyncio.get_running_loop(), stop
            if self._stopping:
                return
        server = await asyncio.start_server(self._handle, sock=self._socket,
                                            limit=MAX_HEAD_BYTES)
        async with server:
            await stop.wait()
        for conn in list(self._connections):
            conn.writer.transport.abort()

    def shutdown(self) -> None:
        """Stop serving (call from another thread than ``serve_forever``'s) and wait."""
        with self._lock:
            self._stopping = True
            loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has closed already
                return
            self._done.wait(10)

    def server_close(self) -> None:
        self._socket.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- one connection --

    def _admit(self, conn: _Connection) -> bool:
        if len(self._connections) >= self.max_connections:
            waiting = [c for c in self._connections if c.waiting_since is not None]
            if not waiting:
                self.refused += 1
                return False
            oldest = min(waiting, key=lambda c: c.waiting_since or 0.0)
            self._connections.discard(oldest)
            oldest.writer.transport.abort()
            self.evicted += 1
        self._connections.add(conn)
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer)
        if not self._admit(conn):
            writer.transport.abort()
            return
        # Pause writing whenever anything is buffered: drain() then waits until the kernel took
        # every byte, so a client that does not read holds at most one CHUNK here.
        writer.transport.set_write_buffer_limits(high=0)
        done = False  # the last response was written whole: close gracefully
        try:
            timeout = self.head_timeout
            while True:
                conn.waiting_since = time.monotonic()
                try:
                    head = await asyncio.wait_for(_read_head(reader), timeout)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                except BadRequest as err:
                    conn.waiting_since = None
                    done = await self._error(writer, err)
                    return
                conn.waiting_since = None
                done, keep = await self._serve_request(writer, head)
                if not keep:
                    return
                timeout = self.idle_timeout
        finally:
            self._connections.discard(conn)
            if done:
                writer.close()  # everything was handed to the kernel already
            else:
                writer.transport.abort()

    async def _error(self, writer: asyncio.StreamWriter, err: BadRequest) -> bool:
        written, _ = await self._respond(writer, "GET", err.status,
                                         [str(err).encode() + b"\n"], TEXT, keep_alive=False)
        return written

    async def _serve_request(self, writer: asyncio.StreamWriter,
                             head: bytes) -> tuple[bool, bool]:
        """Answer one request: (written whole, keep the connection for another)."""
        try:
            request = parse_head(head)
        except BadRequest as err:
            return await self._error(writer, err), False
        status, parts, content_type = await self._route(request)
        log.debug("%s %s %s", request.method, request.path, status)
        return await self._respond(writer, request.method, status, parts, content_type,
                                   keep_alive=request.keep_alive)

    async def _route(self, request: Request) -> tuple[int, Sequence[bytes], str]:
        if request.method not in ("GET", "HEAD"):
            return 405, [b"only GET and HEAD\n"], TEXT
        if request.path == "/metrics":
            loop = asyncio.get_running_loop()
            try:
                body, content_type = await loop.run_in_executor(self._executor, self._render,
                                                                request.accept)
            except Exception:
                log.exception("encoding /metrics failed")
                return 500, [b"metrics unavailable\n"], TEXT
            return 200, [body] if isinstance(body, bytes) else body, content_type
        if request.path == "/healthz":
            ok, why = self._health()
            return (200 if ok else 503), [(why + "\n").encode()], TEXT
        return 404, [b"not found: try /metrics or /healthz\n"], TEXT

    async def _respond(self, writer: asyncio.StreamWriter, method: str, status: int,
                       parts: Sequence[bytes], content_type: str, *,
                       keep_alive: bool) -> tuple[bool, bool]:
        """Write one response within ``write_timeout``: (written whole, keep alive)."""
        length = sum(len(p) for p in parts)
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n")
        if status == 405:
            head += "Allow: GET, HEAD\r\n"
        try:
            await asyncio.wait_for(_write(writer, (head + "\r\n").encode(),
                                          () if method == "HEAD" else parts),
                                   self.write_timeout)
        except (TimeoutError, ConnectionError):
            return False, False
        return True, keep_alive


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """Lines up to the empty one; BadRequest(431) past MAX_HEAD_BYTES or MAX_HEADERS lines."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as err:
            raise BadRequest(431, "request head too large") from err
        size += len(line)
        if size > MAX_HEAD_BYTES or len(lines) > MAX_HEADERS:
            raise BadRequest(431, "request head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:  # blank lines before a request line are allowed (RFC 9112 2.2)
                continue
            return b"".join(lines)
        lines.append(line)


async def _write(writer: asyncio.StreamWriter, head: bytes, parts: Sequence[bytes]) -> None:
    writer.write(head)
    for part in parts:
        view = memoryview(part)
        for start in range(0, len(view), CHUNK):
            writer.write(view[start:start + CHUNK])
            await writer.drain()
    await writer.drain()


def make_server(render: Render, health: Health, address: str, port: int) -> MetricsServer:
    """The server with its default limits (what the agent runs)."""
    return MetricsServer(render, health, address, port)
