"""The webhook's HTTP/1.1 server: asyncio on one thread for every byte a client sends, a few
worker threads for the answers, every resource bounded (`limits`).

Each connection is a coroutine, not a thread: a client that sends a byte every 5 s costs a
socket and a few KB until its deadline, never a thread. A request is read whole (its head with
one `readuntil`, its body with one `readexactly`: no Python loop over the client's bytes)
within one deadline from its first byte, its body's bytes reserved from the buffer pool first;
then it waits, fairly among clients, for a worker and for room in the parse budget; the answer
is written within a deadline. Keep-alive: the API server reuses its connections; an idle one is
closed after IDLE_TIMEOUT, or earlier to make room for a new connection.

Connections are accepted here, not by `asyncio.start_server`: one over a bound is reset
before any object is made for it (a client reconnecting as fast as it is refused costs an
accept and a close). An admitted one gets its transport with TLS from the certificate current
at that moment (`tls.Certificate`: a rotated Secret is served without a restart).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto as sslproto
import collections
import contextlib
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

from .limits import FairGate, Limits, Pool, Rate, parse_cost
from .tls import Certificate

log = logging.getLogger("gpu_auditor.webhook")

ACCEPT_BATCH: Final = 64
"""Connections accepted per turn of the loop (the rest wait in the backlog)."""
TLS_READ: Final = 16 << 10
"""Bytes of one TLS read (asyncio's default, 256 KiB, costs that much RSS per connection)."""
REASONS: Final = ("limit", "deadline", "idle", "too-large", "malformed")
"""Why the server closed a connection (the `reason` of
gpu_auditor_webhook_connections_closed_total): over a connection bound (refused, or closed
while idle to make room), past a deadline, idle too long, a body over its bound, not an HTTP/1.1
request this server reads (or a failed handshake)."""
_STATUS_TEXT: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                       408: "Request Timeout", 411: "Length Required",
                       413: "Content Too Large", 431: "Request Header Fields Too Large",
                       503: "Service Unavailable"}


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    sent: Callable[[], None] | None = field(default=None, compare=False)
    """Called once the response is written (the admission metrics)."""


Handler = Callable[[str, str, bytes], Response]
"""(method, path, body) -> Response; run in a worker thread."""


@dataclass(frozen=True)
class Listener:
    address: tuple[str, int]
    """Bound when the server is made (a port in use fails there); port 0 picks one."""
    handler: Handler
    certificate: Certificate | None = None
    """None: plain HTTP (/metrics, tests)."""
    parse_bodies: bool = True
    """Bodies are JSON the handler parses: bounded by `parse_cost` and the parse budget."""


class Closed(Exception):
    """The connection ends here; `reason` is one of REASONS, or "" when the client ended it."""

    def __init__(self, reason: str = "", response: Response | None = None) -> None:
        super().__init__(reason)
        self.reason, self.response = reason, response


@dataclass(eq=False)
class _Connection:
    client: str
    sock: socket.socket
    writer: asyncio.StreamWriter | None = None
    idle: bool = False

    def abort(self) -> None:
        """Close at once (RST): an evicted, refused or finished connection."""
        if self.writer is not None:
            self.writer.transport.abort()
        else:
            _reset(self.sock)


class _Client:
    """One address's connections, and how many of them are reading or answering a request."""

    def __init__(self, limits: Limits) -> None:
        self.connections: dict[_Connection, None] = {}  # oldest first
        self.active = asyncio.Semaphore(limits.max_client_active)


class BoundedServer:
    """Serves `Listener`s until `stop()`; `closed` counts the connections it closed, by
    reason."""

    def __init__(self, listeners: list[Listener], limits: Limits | None = None,
                 on_closed: Callable[[str], None] | None = None) -> None:
        self.listeners = listeners
        self.limits = limits or Limits()
        self.on_closed = on_closed
        self.closed: collections.Counter[str] = collections.Counter()
        self._sockets: list[socket.socket] = []
        try:
            for listener in listeners:
                self._sockets.append(_listening_socket(listener.address, self.limits.backlog))
        except OSError:
            self.close()
            raise
        self.ports = [sock.getsockname()[1] for sock in self._sockets]
        self._clients: dict[str, _Client] = {}
        self._idle: dict[_Connection, None] = {}  # every idle connection, oldest first
        self._open = 0
        self._executor = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="webhook")
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- life ------------------------------------------------------------------------------

    async def serve(self, started: Callable[[], None] | None = None) -> None:
        limits = self.limits
        loop = asyncio.get_running_loop()
        # asyncio's TLS reads into a 256 KiB buffer per connection, zeroed when made: RSS for
        # every idle or handshaking connection. A TLS record is 16 KiB at most; so is our read
        # (the process is the webhook's: no other TLS of ours to slow). Pinned by
        # test_boundedhttp's test_idle_tls_connections_cost_little.
        sslproto.SSLProtocol.max_size = TLS_READ
        self._stop = asyncio.Event()
        self._gate = FairGate(limits.workers)
        self._buffers = Pool(limits.buffer_budget, limits.client_buffer)
        self._work = Rate(limits.work_rate, limits.work_burst)
        for listener, sock in zip(self.listeners, self._sockets, strict=True):
            loop.add_reader(sock.fileno(), self._accept, sock, listener)
        if started is not None:
            started()
        try:
            await self._stop.wait()
        finally:
            for sock in self._sockets:
                loop.remove_reader(sock.fileno())
            for client in list(self._clients.values()):
                for conn in list(client.connections):
                    conn.abort()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._executor.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """From the loop's thread: `serve` returns."""
        if self._stop is not None:
            self._stop.set()

    def close(self) -> None:
        """The listening sockets (after `serve` returned, or when it never ran)."""
        for sock in self._sockets:
            sock.close()

    # -- connections -----------------------------------------------------------------------

    def _accept(self, listening: socket.socket, listener: Listener) -> None:
        """Every connection waiting in the backlog (up to ACCEPT_BATCH a turn): one over a
        bound is reset before any object is made for it; one admitted gets its task."""
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: the backlog keeps them
                log.warning("accept failed: %s", exc)
                return
            client = str(address[0]) if isinstance(address, tuple) and address else "?"
            conn = self._admit(client, sock)
            if conn is None:
                self._count("limit")
                _reset(sock)
                continue
            task = asyncio.create_task(self._start(conn, listener))
            self._tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)

    def _admit(self, client: str, sock: socket.socket) -> _Connection | None:
        """Room for one more connection of ``client``: the oldest idle connection (the
        client's own when it is at its bound, anyone's when the server is) is closed for it."""
        limits = self.limits
        record = self._clients.get(client) or _Client(limits)
        if len(record.connections) >= limits.max_client_connections and \
                not self._evict(c for c in record.connections if c.idle):
            return None
        if self._open >= limits.max_connections and not self._evict(iter(self._idle)):
            return None
        conn = _Connection(client, sock)
        self._clients[client] = record
        record.connections[conn] = None
        self._open += 1
        return conn

    def _evict(self, idle: Iterator[_Connection]) -> bool:
        victim = next(idle, None)
        if victim is None:
            return False
        self._forget(victim)
        self._count("limit")
        victim.abort()
        return True

    def _forget(self, conn: _Connection) -> None:
        record = self._clients.get(conn.client)
        if record is None or conn not in record.connections:
            return
        del record.connections[conn]
        self._idle.pop(conn, None)
        self._open -= 1
        if not record.connections:
            del self._clients[conn.client]

    def _count(self, reason: str) -> None:
        self.closed[reason] += 1
        if self.on_closed is not None:
            self.on_closed(reason)

    async def _start(self, conn: _Connection, listener: Listener) -> None:
        """The connection's transport, with TLS from the certificate current now (the
        handshake within the deadline), then its requests."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self.limits.max_head, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        context = listener.certificate.context() if listener.certificate else None
        try:
            conn.sock.setblocking(False)
            async with asyncio.timeout(self.limits.deadline):
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, conn.sock, ssl=context,
                    ssl_handshake_timeout=self.limits.deadline if context else None)
        except TimeoutError:
            self._closed(conn, "deadline")
            return
        except (OSError, ssl.SSLError, ConnectionError):
            self._closed(conn, "malformed")
            return
        except asyncio.CancelledError:
            self._closed(conn, "")
            raise
        conn.writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._run(conn, reader, listener)

    def _closed(self, conn: _Connection, reason: str) -> None:
        if reason:
            self._count(reason)
        self._forget(conn)
        conn.abort()

    async def _run(self, conn: _Connection, reader: asyncio.StreamReader,
                   listener: Listener) -> None:
        record = self._clients[conn.client]
        active = False
        reason = ""
        try:
            first = b""
            while True:
                async with asyncio.timeout(self.limits.deadline):
                    await record.active.acquire()
                active = True
                if not await self._request(conn, reader, listener, first):
                    break
                record.active.release()
                active = False
                first = await self._wait_idle(conn, reader)
        except Closed as closed:
            reason = closed.reason
            if closed.response is not None and conn.writer is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await _write(conn.writer, closed.response, keep=False)
        except TimeoutError:
            reason = "deadline"
        except (ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError, OSError):
            reason = "malformed" if not reader.at_eof() else ""
        finally:
            if active:
                record.active.release()
            self._closed(conn, reason)

    async def _wait_idle(self, conn: _Connection, reader: asyncio.StreamReader) -> bytes:
        """The first byte of the next request; the connection counts as idle (and may be
        closed for room) until it comes."""
        conn.idle = True
        self._idle[conn] = None
        try:
            async with asyncio.timeout(self.limits.idle_timeout):
                first = await reader.read(1)
        except TimeoutError:
            raise Closed("idle") from None
        finally:
            conn.idle = False
            self._idle.pop(conn, None)
        if not first:
            raise Closed()
        return first

    async def _request(self, conn: _Connection, reader: asyncio.StreamReader,
                       listener: Listener, first: bytes) -> bool:
        """Read, answer and write one request; whether the connection stays open. The head and
        the body are read within one deadline, the body's bytes reserved before it is read."""
        limits = self.limits
        async with asyncio.timeout(limits.deadline):
            head = first + await _read_head(reader, first)
            method, path, length, keep = _parse_head(head, limits)
            await self._buffers.take(conn.client, length)
            try:
                body = await reader.readexactly(length) if length else b""
            except BaseException:
                await self._buffers.give(conn.client, length)
                raise
        try:
            response = await self._answer(conn.client, listener, method, path, body)
            del body
        finally:
            await self._buffers.give(conn.client, length)
        async with asyncio.timeout(limits.deadline):
            assert conn.writer is not None
        await _write(conn.writer, response, keep=keep)
        if response.sent is not None:
            response.sent()
        return keep

    async def _answer(self, client: str, listener: Listener, method: str, path: str,
                      body: bytes) -> Response:
        """The handler's response from a worker thread, in the client's turn (`FairGate`) and
        within its work rate (`Rate`). A body that `parse_cost` says would take more than
        MAX_PARSE_COST to parse is refused unparsed: with WORKERS answering at once, parsing
        holds at most WORKERS times it."""
        cost = parse_cost(body) if listener.parse_bodies and body else 0
        if cost > self.limits.max_parse_cost:
            raise Closed("too-large", Response(413, b'{"error": "body too complex"}'))
        wait = self._work.delay(client, cost)
        if wait > self.limits.deadline:  # its own earlier requests hold it past the deadline
            raise Closed("limit", Response(503, b'{"error": "busy"}'))
        if wait:
            await asyncio.sleep(wait)
        await self._gate.acquire(client)
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, listener.handler, method, path,
                                              body)
        finally:
            self._gate.release(client)


async def _read_head(reader: asyncio.StreamReader, first: bytes) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise Closed("malformed", Response(431, b'{"error": "headers too large"}')) from None
    except asyncio.IncompleteReadError as eof:
        raise Closed("malformed" if first or eof.partial else "") from None


def _parse_head(head: bytes, limits: Limits) -> tuple[str, str, int, bool]:
    """(method, path, body length, keep-alive) of a request head; `Closed` with the answer for
    one this server does not read."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or \
            not parts[1].startswith(b"/"):
        raise Closed("malformed", Response(400, b'{"error": "not an HTTP/1.1 request"}'))
    method, path = parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise Closed("malformed", Response(400, b'{"error": "bad header"}'))
        key = name.lower()
        if key in headers and key in (b"content-length", b"transfer-encoding"):
            raise Closed("malformed", Response(400, b'{"error": "repeated length"}'))
        headers[key] = value.strip()
    if b"transfer-encoding" in headers:
        raise Closed("malformed", Response(411, b'{"error": "Content-Length required"}'))
    raw_length = headers.get(b"content-length", b"0")
    if not raw_length.isdigit() or len(raw_length) > 12:
        raise Closed("malformed", Response(400, b'{"error": "bad Content-Length"}'))
    length = int(raw_length)
    if length > limits.max_body:
        raise Closed("too-large", Response(413, b'{"error": "body length"}'))
    if method not in ("GET", "POST"):
        raise Closed("malformed", Response(405, b'{"error": "method"}'))
    connection = headers.get(b"connection", b"").lower()
    keep = (parts[2] == b"HTTP/1.1" and connection != b"close") or connection == b"keep-alive"
    return method, path, length, keep


async def _write(writer: asyncio.StreamWriter, response: Response, *, keep: bool) -> None:
    reason = _STATUS_TEXT.get(response.status, "")
    head = (f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode("ascii")
    writer.write(head + response.body)
    await writer.drain()


def _reset(sock: socket.socket) -> None:
    """Close with a RST: nothing lingers in TIME_WAIT for a refused client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _listening_socket(address: tuple[str, int], backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
