"""The agent's HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics) and ``/healthz``.

(Named ``http_server`` rather than ``http`` so it can never shadow the standard library.)

Anything that can reach the port can connect, so no client may hold the server: connections
live in one event loop on ``selectors`` (no thread per connection; not asyncio, which with the
``ssl`` module it imports cost the agent ~5 MiB of RSS), and

- a request head must arrive whole within ``head_timeout`` s of the connection (``idle_timeout``
  s after the previous response on a kept-alive one), however slowly its bytes trickle in, and
  be at most ``MAX_HEAD_BYTES`` (else 431);
- a response must be read within ``write_timeout`` s; it is written in 64 KiB pieces, so a
  client that does not read holds one piece of memory, not a copy of the body;
- at most ``max_connections`` are open: a new one closes the one that has waited longest for a
  request head (idle or slow), and is refused only when every connection is mid-response;
- ``/metrics`` bodies are rendered on ``render_threads`` threads, unless ``inline`` says the
  body is cheap now (the pass's families are rendered already: a lookup plus the few live
  ``process_*`` lines), when the loop answers at once, with no thread hand-off; ``/healthz`` is
  answered on the loop itself.

So a slowloris client or a crowd of idle ones cannot starve ``/metrics`` or ``/healthz``, and the
agent's threads are the loop, the render threads and the sampler, whatever the clients do.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


class _Conn:
    """One client connection and where it stands: waiting for a request head
    (``waiting_since`` set), rendering (a worker has it), or writing a response (``out``)."""

    __slots__ = ("buffer", "closed", "deadline", "keep", "out", "sock", "waiting_since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.waiting_since: float | None = None
        self.deadline = 0.0  # of the request head, or of the response being written
        self.out: deque[memoryview] = deque()
        self.keep = False
        self.closed = False


_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class MetricsServer:
    """Serves ``render`` on ``/metrics`` and ``health`` on ``/healthz``. Binds at construction
    (so a bad address fails at start); ``serve_forever`` runs the loop in the calling thread;
    ``shutdown`` (from another thread) stops it."""

    def __init__(self, render: Render, health: Health, address: str, port: int, *,
                 max_connections: int = 64, head_timeout: float = 10.0,
                 idle_timeout: float = 60.0, write_timeout: float = 30.0,
                 render_threads: int = 2, inline: Callable[[], bool] | None = None) -> None:
        self._render = render
        self._inline = inline  # True: /metrics is cheap now (rendered already): no hand-off
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
        self._render_threads = render_threads
        self._jobs: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._done_jobs: deque[tuple[_Conn, Request, int, Sequence[bytes], str]] = deque()
        self._workers: list[threading.Thread] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: set[_Conn] = set()
        self._pending: deque[_Conn] = deque()  # bytes of a next request already read
        self._selector: selectors.BaseSelector | None = None
        self._stopping = False
        self._done = threading.Event()
        self.refused = 0  # connections refused because every slot was mid-response
        self.evicted = 0  # connections closed to make room while waiting for a request

    # -- running --

    def serve_forever(self) -> None:
        try:
            self._run()
        finally:
            for conn in list(self._connections):
                self._close(conn)
            if self._selector is not None:
                self._selector.close()
            self._done.set()

    def _run(self) -> None:
        for i in range(self._render_threads):
            worker = threading.Thread(target=self._work, name=f"render-{i}", daemon=True)
            worker.start()
            self._workers.append(worker)
        sel = self._selector = selectors.DefaultSelector()
        sel.register(self._socket, _READ, None)
        sel.register(self._wake_r, _READ, "wake")
        while not self._stopping:
            for _ in range(min(len(self._pending), 64)):  # pipelined requests, a few per turn
                conn = self._pending.popleft()
                if not conn.closed and conn.waiting_since is not None:
                    self._try_head(conn)
            timeout = 0.0 if self._pending else self._next_timeout()
            for key, mask in sel.select(timeout):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    self._drain_wake()
                else:
                    client: _Conn = key.data
                    if mask & _READ:
                        self._on_read(client)
                    if mask & _WRITE and not client.closed:
                        self._on_write(client)
            self._expire(time.monotonic())

    def shutdown(self) -> None:
        """Stop serving (call from another thread than ``serve_forever``'s) and wait."""
        self._stopping = True
        self._wake()
        if self._selector is not None:
            self._done.wait(10)

    def server_close(self) -> None:
        self._stopping = True
        self._socket.close()
        for _ in self._workers:
            self._jobs.put(None)
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (the loop will look anyway) or closed
            self._wake_w.send(b"x")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self._done_jobs:
            conn, request, status, parts, content_type = self._done_jobs.popleft()
            if not conn.closed:
                self._respond(conn, request.method, status, parts, content_type,
                              request.keep_alive)

    def _next_timeout(self) -> float:
        now = time.monotonic()
        deadlines = [c.deadline for c in self._connections
                     if c.waiting_since is not None or c.out]
        return max(0.0, min(1.0, min(deadlines, default=now + 1.0) - now))

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._connections
                     if (c.waiting_since is not None or c.out) and c.deadline <= now]:
            self._close(conn)  # a head or a response past its deadline

    # -- connections --

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of file descriptors, ...: keep serving the others
                log.warning("accepting a connection failed: %s", err)
                return
            sock.setblocking(False)
            conn = _Conn(sock)
            if not self._admit(conn):
                sock.close()
                continue
            assert self._selector is not None
            self._selector.register(sock, _READ, conn)
            self._wait_for_head(conn, self.head_timeout)

    def _admit(self, conn: _Conn) -> bool:
        if len(self._connections) >= self.max_connections:
            waiting = [c for c in self._connections if c.waiting_since is not None]
            if not waiting:
                self.refused += 1
                return False
            self._close(min(waiting, key=lambda c: c.waiting_since or 0.0))
            self.evicted += 1
        self._connections.add(conn)
        return True

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._connections.discard(conn)
        conn.out.clear()
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
        conn.sock.close()

    def _wait_for_head(self, conn: _Conn, timeout: float) -> None:
        conn.waiting_since = time.monotonic()
        conn.deadline = conn.waiting_since + timeout
        self._modify(conn, _READ)
        if conn.buffer:  # a pipelined request already read: the loop takes it next
            self._pending.append(conn)

    def _modify(self, conn: _Conn, events: int) -> None:
        if self._selector is not None and not conn.closed:
            self._selector.modify(conn.sock, events, conn)

    def _on_read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not chunk:
            self._close(conn)
            return
        conn.buffer += chunk
        if conn.waiting_since is not None:
            self._try_head(conn)

    def _try_head(self, conn: _Conn) -> None:
        try:
            head = _take_head(conn.buffer)
        except BadRequest as err:
            conn.buffer.clear()
            self._respond(conn, "GET", err.status, [str(err).encode() + b"\n"], TEXT, False)
            return
        if head is None:
            return
        conn.waiting_since = None
        try:
            request = parse_head(head)
        except BadRequest as err:
            self._respond(conn, "GET", err.status, [str(err).encode() + b"\n"], TEXT, False)
            return
        self._pause(conn)
        if request.method in ("GET", "HEAD") and request.path == "/metrics":
            if self._inline is not None and self._inline():
                _, _, status, parts, content_type = self._render_metrics(conn, request)
                self._respond(conn, request.method, status, parts, content_type,
                              request.keep_alive)
            else:
                self._jobs.put((conn, request))  # rendered on a worker thread
            return
        status, parts, content_type = self._route(request)
        self._respond(conn, request.method, status, parts, content_type, request.keep_alive)

    def _pause(self, conn: _Conn) -> None:
        """No reading while a request is answered (its bytes wait in the kernel)."""
        if self._selector is not None and not conn.closed:
            self._selector.unregister(conn.sock)

    def _resume(self, conn: _Conn, events: int) -> None:
        if self._selector is None or conn.closed:
            return
        try:
            self._selector.modify(conn.sock, events, conn)
        except KeyError:
            self._selector.register(conn.sock, events, conn)

    def _work(self) -> None:
        """A render thread: /metrics bodies, handed back to the loop."""
        while (job := self._jobs.get()) is not None:
            self._done_jobs.append(self._render_metrics(*job))
            self._wake()

    def _render_metrics(self, conn: _Conn, request: Request
                        ) -> tuple[_Conn, Request, int, Sequence[bytes], str]:
        try:
            body, content_type = self._render(request.accept)
            return conn, request, 200, [body] if isinstance(body, bytes) else body, content_type
        except Exception:
            log.exception("encoding /metrics failed")
            return conn, request, 500, [b"metrics unavailable\n"], TEXT

    def _route(self, request: Request) -> tuple[int, Sequence[bytes], str]:
        if request.method not in ("GET", "HEAD"):
            return 405, [b"only GET and HEAD\n"], TEXT
        if request.path == "/healthz":
            ok, why = self._health()
            return (200 if ok else 503), [(why + "\n").encode()], TEXT
        return 404, [b"not found: try /metrics or /healthz\n"], TEXT

    def _respond(self, conn: _Conn, method: str, status: int, parts: Sequence[bytes],
                 content_type: str, keep_alive: bool) -> None:
        """Start writing one response; it must be sent whole within ``write_timeout``."""
        log.debug("%s %s", method, status)
        length = sum(len(p) for p in parts)
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n")
        if status == 405:
            head += "Allow: GET, HEAD\r\n"
        conn.waiting_since = None
        conn.keep = keep_alive
        conn.out.append(memoryview((head + "\r\n").encode()))
        if method != "HEAD":
            conn.out.extend(memoryview(p) for p in parts if p)
        conn.deadline = time.monotonic() + self.write_timeout
        self._on_write(conn)

    def _on_write(self, conn: _Conn) -> None:
        """Send what the kernel takes, at most CHUNK at a time from the shared body (a client
        that does not read holds no copy of it)."""
        while conn.out:
            piece = conn.out[0]
            try:
                sent = conn.sock.send(piece[:CHUNK])
            except (BlockingIOError, InterruptedError):
                self._resume(conn, _WRITE)
                return
            except OSError:
                self._close(conn)
                return
            if sent == len(piece):
                conn.out.popleft()
            else:
                conn.out[0] = piece[sent:]
        if not conn.keep:
            self._close(conn)  # every byte is with the kernel: it sends them, then the FIN
            return
        self._resume(conn, _READ)
        self._wait_for_head(conn, self.idle_timeout)


def _take_head(buffer: bytearray) -> bytes | None:
    """Remove and return a whole request head (lines up to the empty one, blank lines before
    the request line skipped) from ``buffer``; None while incomplete; BadRequest(431) past
    MAX_HEAD_BYTES or MAX_HEADERS lines."""
    start = 0
    while buffer.startswith(b"\r\n", start) or buffer.startswith(b"\n", start):
        start += 2 if buffer.startswith(b"\r\n", start) else 1
    pos, lines = start, 0
    while True:
        end = buffer.find(b"\n", pos)
        if end < 0:
            if len(buffer) - start > MAX_HEAD_BYTES:
                raise BadRequest(431, "request head too large")
            del buffer[:start]
            return None
        if end + 1 - start > MAX_HEAD_BYTES or lines > MAX_HEADERS:
            raise BadRequest(431, "request head too large")
        if end == pos or (end == pos + 1 and buffer[pos] == 0x0D):  # an empty line
            head = bytes(buffer[start:pos])
            del buffer[:end + 1]
            return head
        lines += 1
        pos = end + 1


def make_server(render: Render, health: Health, address: str, port: int,
                inline: Callable[[], bool] | None = None) -> MetricsServer:
    """The server with its default limits (what the agent runs)."""
    return MetricsServer(render, health, address, port, inline=inline)
