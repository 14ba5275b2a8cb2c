"""The agent's HTTP endpoints: ``/metrics`` (the Prometheus text format 0.0.4, gzip when the
scraper accepts it) and ``/healthz``.

(Named ``http_server`` rather than ``http`` so it can never shadow the standard library.)

Every pod can reach the agent's port, so no client may hold the server. Connections live in one
event loop on ``selectors`` (no thread per connection), and every dimension is bounded:

- **time**: a request head must arrive whole within ``head_timeout`` s of the connection
  (``idle_timeout`` s after the previous response on a kept-alive one), however its bytes
  trickle in; a response must be taken within ``write_timeout`` s;
- **bytes**: a head (blank lines before it included) is at most ``MAX_HEAD_BYTES`` and
  ``MAX_HEADERS`` lines (else 431); no more than that is read while waiting for one, and
  nothing is read while a request is answered (pipelined requests wait in the kernel);
- **work per byte**: the head is found and split by C code (``bytes.find``, ``split``,
  ``lstrip``) from where the last search ended; nothing a client sends is looked at one byte at
  a time in Python;
- **connections**: at most ``max_per_client`` from one address (a new one past that is refused
  at once with a reset, its others kept: a crowd reconnecting costs an accept and a close, not
  an eviction) and ``max_connections`` in all: a new connection then closes one that is waiting
  for a request head, or one whose response has made no progress for ``stall_timeout`` s, of
  the address holding the most (so a crowd cannot push another client out); it is refused only
  when every slot is busy writing to a client that reads. At most half the slots may wait on a
  client that does not take its response (the kernel's buffers full): past that, the one
  waiting longest is closed, so clients that never read, from however many addresses, leave
  the other half to those that do;
- **kernel memory**: accepted sockets get ``SNDBUF`` and ``RCVBUF`` (the kernel doubles them,
  and no longer grows them), so a client that sends requests and never reads pins at most
  ~ (``SNDBUF`` + ``RCVBUF``) x 2 of the node's memory per slot instead of the megabytes TCP
  autotuning would give it;
- **accepting**: ``TCP_DEFER_ACCEPT`` (Linux): the kernel hands over a connection only once
  it has sent something (a request, or its FIN), so clients that connect and say nothing never
  reach the loop; one already closed is read at once and closed; a listen backlog of
  ``BACKLOG`` (a dropped SYN costs a client a 1 s retransmit) and at most ``ACCEPTS_PER_TURN``
  accepts before the open connections get a turn;
- **threads**: the loop, ``render_threads`` render threads (unless ``inline`` says the body is
  cheap now: the pass's families are rendered already, and the loop answers at once), the
  sampler. ``/healthz`` is answered on the loop itself.

Per request, few system calls: a request that came whole with the connection (the usual case
under ``TCP_DEFER_ACCEPT``) is answered before the selector ever watches the socket, the
selector is told only of changes, and a response leaves in one ``sendmsg`` (head and body
pieces gathered, ``TCP_NODELAY``): one segment for a small body, one wake-up of the client.
bench/results/agent_scrape_latency.md: 11 system calls a scrape where there were 23.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import selectors
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]

MAX_HEAD_BYTES = 8192
MAX_HEADERS = 64
CHUNK = 64 * 1024
SNDBUF = 64 * 1024
RCVBUF = 16 * 1024
ACCEPTS_PER_TURN = 256
BACKLOG = 1024  # a connect storm (a crowd evicted, reconnecting) must not drop a SYN: 1 s
TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
_BLANK = b"\r\n"
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, keeps no TIME_WAIT
_SENDMSG = hasattr(socket.socket, "sendmsg")  # a gathering write (not on Windows)


@dataclass(frozen=True, slots=True)
class Body:
    """A response body: its pieces in order (shared, never copied per client), its media type,
    and its Content-Encoding (``gzip``) if any."""

    parts: Sequence[bytes]
    content_type: str
    encoding: str | None = None
    vary: bool = False  # the body depends on Accept-Encoding


# gzip accepted by the client → the /metrics body
Render = Callable[[bool], Body]


class BadRequest(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    keep_alive: bool
    gzip: bool = False  # Accept-Encoding allows gzip


MAX_CODINGS = 16  # Accept-Encoding items read (a scraper sends two or three)


def accepts_gzip(value: str) -> bool:
    """Whether an Accept-Encoding value allows gzip (``gzip`` or ``*`` with a q above 0); only
    the first ``MAX_CODINGS`` items count."""
    allowed: dict[str, bool] = {}
    for item in value.lower().split(",", MAX_CODINGS)[:MAX_CODINGS]:
        coding, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";", 4)[:4]:
            name, _, number = param.strip().partition("=")
            if name == "q":
                try:
                    q = float(number)
                except ValueError:
                    q = 0.0
        allowed[coding.strip()] = q > 0
    return allowed.get("gzip", allowed.get("x-gzip", allowed.get("*", False)))


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
    return Request(parts[0], parts[1].split("?", 1)[0], keep_alive,
                   accepts_gzip(headers.get("accept-encoding", "")))


def take_head(buffer: bytearray, scanned: int) -> tuple[bytes | None, int]:
    """Remove and return a whole request head from ``buffer`` (blank lines before the request
    line skipped, and counted in its size), with 0; or (None, how far the search got) while
    incomplete, to start the next search there. BadRequest(431) past MAX_HEAD_BYTES or
    MAX_HEADERS lines. Every scan is a C loop (``lstrip``, ``find``, ``count``)."""
    start = len(buffer) - len(buffer.lstrip(_BLANK)) if buffer.startswith((b"\r", b"\n")) else 0
    limit = MAX_HEAD_BYTES + 3  # a head that ends just at the limit, with its blank line
    ends = [e for e in (buffer.find(b"\n\r\n", max(start, scanned - 2), limit),
                        buffer.find(b"\n\n", max(start, scanned - 1), limit)) if e >= 0]
    if not ends:
        if len(buffer) > MAX_HEAD_BYTES:
            raise BadRequest(431, "request head too large")
        return None, len(buffer)
    end = min(ends)
    stop = end + (3 if buffer.startswith(b"\n\r\n", end) else 2)
    if stop > limit:
        raise BadRequest(431, "request head too large")
    head = bytes(buffer[start:end + 1])
    if head.count(b"\n") > MAX_HEADERS + 1:
        raise BadRequest(431, "request head too large")
    del buffer[:stop]
    return head, 0


class _Conn:
    """One client connection and where it stands: waiting for a request head
    (``waiting_since`` set), rendering (a worker has it), or writing a response (``out``)."""

    __slots__ = ("blocked_since", "buffer", "client", "closed", "deadline", "events", "keep",
                 "out", "progress", "scanned", "sock", "waiting_since")

    def __init__(self, sock: socket.socket, client: str) -> None:
        self.sock = sock
        self.client = client
        self.buffer = bytearray()
        self.scanned = 0  # how far the buffer was searched for the head's end
        self.waiting_since: float | None = None
        self.deadline = 0.0  # of the request head, or of the response being written
        self.progress = 0.0  # when the response being written last moved
        self.blocked_since: float | None = None  # the kernel took no more of the response
        self.out: deque[memoryview] = deque()
        self.keep = False
        self.closed = False
        self.events = 0  # what the selector watches it for (0: not registered)


_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class MetricsServer:
    """Serves ``render`` on ``/metrics`` and ``health`` on ``/healthz``. Binds at construction
    (so a bad address fails at start); ``serve_forever`` runs the loop in the calling thread;
    ``shutdown`` (from another thread) stops it."""

    def __init__(self, render: Render, health: Health, address: str, port: int, *,
                 max_connections: int = 64, max_per_client: int = 8,
                 head_timeout: float = 10.0, idle_timeout: float = 60.0,
                 write_timeout: float = 10.0, stall_timeout: float = 2.0,
                 render_threads: int = 2, inline: Callable[[bool], bool] | None = None) -> None:
        self._render = render
        self._inline = inline  # True: /metrics is cheap now (rendered already): no hand-off
        self._health = health
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.stall_timeout = stall_timeout
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # inherited by accepted sockets, set before the handshake (window scaling)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            # inherited too: the last piece of a response goes out without waiting for the
            # client to acknowledge the one before it (Nagle), whatever its size
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if hasattr(socket, "TCP_DEFER_ACCEPT"):  # Linux: a connection that sends nothing
                # is not handed over (the kernel holds it): an idle crowd costs the loop
                # nothing; the client's side is connected all the same (a TCP probe passes)
                self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT,
                                        max(1, int(head_timeout)))
            self._socket.bind((address, port))
            self._socket.listen(BACKLOG)
            self._socket.setblocking(False)
        except OSError:
            self._socket.close()
            raise
        self.server_address: tuple[str, int] = self._socket.getsockname()[:2]
        self._render_threads = render_threads
        self._jobs: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._done_jobs: deque[tuple[_Conn, Request, int, Body]] = deque()
        self._workers: list[threading.Thread] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: set[_Conn] = set()
        self._blocked: set[_Conn] = set()  # waiting on a client to take its response
        self.max_blocked = max(1, max_connections // 2)
        self._per_client: Counter[str] = Counter()
        self._pending: deque[_Conn] = deque()  # bytes of a next request already read
        self._selector: selectors.BaseSelector | None = None
        self._stopping = False
        self._done = threading.Event()
        self.accepted = 0  # connections the kernel handed over
        self.refused = 0  # connections refused because every slot was busy
        self.evicted = 0  # connections closed to make room

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
            conn, request, status, body = self._done_jobs.popleft()
            if not conn.closed:
                self._respond(conn, request.method, status, body, request.keep_alive)

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
        for _ in range(ACCEPTS_PER_TURN):  # then the connections already open get a turn
            try:
                sock, address = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of file descriptors, ...: keep serving the others
                log.warning("accepting a connection failed: %s", err)
                return
            self.accepted += 1
            client = str(address[0])
            if self._per_client[client] >= self.max_per_client:
                self._refuse(sock)  # its own connections stay; it only loses this one
                continue
            sock.setblocking(False)
            conn = _Conn(sock, client)
            if not self._admit(conn):
                self._refuse(sock)
                continue
            conn.waiting_since = time.monotonic()
            conn.deadline = conn.waiting_since + self.head_timeout
            # what came with the handshake (a request, or already EOF): under TCP_DEFER_ACCEPT
            # most often the whole request, answered before the selector ever sees the socket
            self._on_read(conn)
            if not conn.closed and conn.waiting_since is not None and not conn.events:
                self._watch(conn, _READ)  # the rest of its head is still to come

    def _victim(self, among: list[_Conn]) -> _Conn | None:
        """Of these connections, one that may be closed to make room: waiting for a request
        head, or writing without progress for ``stall_timeout`` s; of the client holding the
        most, the one that waited (or stalled) longest."""
        now = time.monotonic()
        idle = [c for c in among if c.waiting_since is not None]
        if idle:
            return min(idle, key=lambda c: (-self._per_client[c.client], c.waiting_since or 0.0))
        stalled = [c for c in among if c.out and now - c.progress >= self.stall_timeout]
        if stalled:
            return min(stalled, key=lambda c: (-self._per_client[c.client], c.progress))
        return None

    def _refuse(self, sock: socket.socket) -> None:
        """Close a connection we will not serve at once, with a reset: no TIME_WAIT left
        behind for each of a crowd's reconnections."""
        self.refused += 1
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        sock.close()

    def _admit(self, conn: _Conn) -> bool:
        if len(self._connections) >= self.max_connections:
            victim = self._victim(list(self._connections))
            if victim is None:
                return False
            with contextlib.suppress(OSError):  # it owes nobody a response: reset it
                victim.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self._close(victim)
            self.evicted += 1
        self._connections.add(conn)
        self._per_client[conn.client] += 1
        return True

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn in self._connections:
            self._connections.discard(conn)
            self._per_client[conn.client] -= 1
            if self._per_client[conn.client] <= 0:
                del self._per_client[conn.client]
        self._blocked.discard(conn)
        conn.out.clear()
        conn.buffer = bytearray()
        if self._selector is not None and conn.events:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
        conn.sock.close()

    def _wait_for_head(self, conn: _Conn, timeout: float) -> None:
        conn.waiting_since = time.monotonic()
        conn.deadline = conn.waiting_since + timeout
        conn.scanned = 0
        self._watch(conn, _READ)
        if conn.buffer:  # a pipelined request already read: the loop takes it next
            self._pending.append(conn)

    def _watch(self, conn: _Conn, events: int) -> None:
        """Have the selector watch the connection for these events (0: not at all); a system
        call only when that changes (never a KeyError: its message is the socket's repr, two
        more system calls)."""
        if self._selector is None or conn.closed or conn.events == events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif conn.events:
            self._selector.modify(conn.sock, events, conn)
        else:
            self._selector.register(conn.sock, events, conn)
        conn.events = events

    def _on_read(self, conn: _Conn) -> None:
        if conn.waiting_since is None:  # answering: the next request waits in the kernel
            return
        try:  # never more than one head's worth beyond what is buffered already
            chunk = conn.sock.recv(max(1, MAX_HEAD_BYTES + 1 - len(conn.buffer)))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not chunk:
            self._close(conn)
            return
        conn.buffer += chunk
        self._try_head(conn)

    def _try_head(self, conn: _Conn) -> None:
        try:
            head, conn.scanned = take_head(conn.buffer, conn.scanned)
        except BadRequest as err:
            conn.buffer.clear()
            self._respond(conn, "GET", err.status, Body([str(err).encode() + b"\n"], TEXT),
                          False)
            return
        if head is None:
            return
        conn.waiting_since = None
        try:
            request = parse_head(head)
        except BadRequest as err:
            self._respond(conn, "GET", err.status, Body([str(err).encode() + b"\n"], TEXT),
                          False)
            return
        self._watch(conn, 0)  # no reading while it is answered (its bytes wait in the kernel)
        if request.method in ("GET", "HEAD") and request.path == "/metrics":
            if self._inline is not None and self._inline(request.gzip):
                _, _, status, body = self._render_metrics(conn, request)
                self._respond(conn, request.method, status, body, request.keep_alive)
            else:
                self._jobs.put((conn, request))  # rendered on a worker thread
            return
        status, body = self._route(request)
        self._respond(conn, request.method, status, body, request.keep_alive)

    def _work(self) -> None:
        """A render thread: /metrics bodies, handed back to the loop."""
        while (job := self._jobs.get()) is not None:
            self._done_jobs.append(self._render_metrics(*job))
            self._wake()

    def _render_metrics(self, conn: _Conn, request: Request
                        ) -> tuple[_Conn, Request, int, Body]:
        try:
            return conn, request, 200, dataclasses.replace(self._render(request.gzip), vary=True)
        except Exception:
            log.exception("encoding /metrics failed")
            return conn, request, 500, Body([b"metrics unavailable\n"], TEXT)

    def _route(self, request: Request) -> tuple[int, Body]:
        if request.method not in ("GET", "HEAD"):
            return 405, Body([b"only GET and HEAD\n"], TEXT)
        if request.path == "/healthz":
            ok, why = self._health()
            return (200 if ok else 503), Body([(why + "\n").encode()], TEXT)
        return 404, Body([b"not found: try /metrics or /healthz\n"], TEXT)

    def _respond(self, conn: _Conn, method: str, status: int, body: Body,
                 keep_alive: bool) -> None:
        """Start writing one response; it must be sent whole within ``write_timeout``."""
        log.debug("%s %s", method, status)
        length = sum(len(p) for p in body.parts)
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {body.content_type}\r\nContent-Length: {length}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n")
        if body.encoding:
            head += f"Content-Encoding: {body.encoding}\r\n"
        if body.vary:
            head += "Vary: Accept-Encoding\r\n"
        if status == 405:
            head += "Allow: GET, HEAD\r\n"
        conn.waiting_since = None
        conn.keep = keep_alive
        conn.out.append(memoryview((head + "\r\n").encode()))
        if method != "HEAD":
            conn.out.extend(memoryview(p) for p in body.parts if p)
        conn.deadline = time.monotonic() + self.write_timeout
        conn.progress = time.monotonic()
        self._on_write(conn)

    def _block(self, conn: _Conn) -> None:
        """The kernel takes no more of this response: wait for the client, unless half the
        slots wait already; then the one waiting longest gives its slot up."""
        if conn.blocked_since is None:
            conn.blocked_since = time.monotonic()
            self._blocked.add(conn)
        if len(self._blocked) > self.max_blocked:
            oldest = min(self._blocked, key=lambda c: c.blocked_since or 0.0)
            self._close(oldest)
            self.evicted += 1
            if oldest is conn:
                return
        self._watch(conn, _WRITE)

    def _on_write(self, conn: _Conn) -> None:
        """Send what the kernel takes, at most CHUNK at a time from the shared body (a client
        that does not read holds no copy of it): the head and the body's pieces in one
        ``sendmsg``, so a small response leaves in one segment (no segment the client must
        acknowledge before Nagle lets the rest go; one wake-up of the client, not three)."""
        out = conn.out
        while out:
            try:
                sent = self._send(conn.sock, out)
            except (BlockingIOError, InterruptedError):
                self._block(conn)
                return
            except OSError:
                self._close(conn)
                return
            conn.progress = time.monotonic()
            while sent:
                piece = out[0]
                if sent >= len(piece):
                    sent -= len(piece)
                    out.popleft()
                else:
                    out[0] = piece[sent:]
                    sent = 0
        self._blocked.discard(conn)
        conn.blocked_since = None
        if not conn.keep:
            self._close(conn)  # every byte is with the kernel: it sends them, then the FIN
            return
        self._wait_for_head(conn, self.idle_timeout)

    @staticmethod
    def _send(sock: socket.socket, out: deque[memoryview]) -> int:
        """One system call: the first pieces of ``out``, CHUNK bytes at most."""
        if len(out) == 1 or not _SENDMSG:
            return sock.send(out[0][:CHUNK])
        buffers, size = [], 0
        for piece in out:
            if size + len(piece) >= CHUNK:
                buffers.append(piece[:CHUNK - size])
                break
            buffers.append(piece)
            size += len(piece)
        return sock.sendmsg(buffers)


def make_server(render: Render, health: Health, address: str, port: int,
                inline: Callable[[bool], bool] | None = None) -> MetricsServer:
    """The server with its default limits (what the agent runs)."""
    return MetricsServer(render, health, address, port, inline=inline)
