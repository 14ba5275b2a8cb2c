"""The HTTP server against hostile clients, over real sockets: idle and half-open connections,
slowloris trickles, oversized heads, clients that never read; /metrics and /healthz stay up and
the thread count stays fixed."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest

from node_agent.http_server import MetricsServer

pytestmark = pytest.mark.unit

BODY = b"gpu_auditor_agent_nvml_up 1\n"


@contextmanager
def serving(render: Callable[[str], tuple[Any, str]] | None = None,
            **limits: Any) -> Iterator[MetricsServer]:
    server = MetricsServer(render or (lambda accept: (BODY, "text/plain; version=0.0.4")),
                           lambda: (True, "ok"), "127.0.0.1", 0, **limits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        assert not thread.is_alive()


def get(server: MetricsServer, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def connect(server: MetricsServer, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", server.server_address[1]))
    return s


def closed_by_server(s: socket.socket, within: float) -> bool:
    """True when the server closes (EOF or reset) before ``within`` s pass."""
    s.settimeout(within)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_metrics_and_healthz_answer_while_200_idle_connections_are_open() -> None:
    """200 connections that never send a byte, against 16 slots and a 30 s head timeout: each
    new one closes the longest-waiting idle one, so real requests still get in."""
    with serving(max_connections=16, head_timeout=30.0) as server:
        threads_before = threading.active_count()
        idle = [connect(server) for _ in range(200)]
        try:
            assert get(server, "/healthz") == (200, b"ok\n")
            assert get(server, "/metrics") == (200, BODY)
            assert threading.active_count() - threads_before <= 2  # the render threads at most
            assert server.evicted >= 200 - 16
        finally:
            for s in idle:
                s.close()


def test_an_idle_connection_is_closed_at_the_head_timeout() -> None:
    with serving(head_timeout=0.3) as server, closing(connect(server)) as s:
        assert closed_by_server(s, within=5.0)


def test_a_slowloris_trickle_is_cut_at_the_head_deadline_not_per_byte() -> None:
    """One byte every 0.1 s would pass a per-read timeout forever; the head has 0.5 s whole."""
    with serving(head_timeout=0.5) as server, closing(connect(server)) as s:
        head = b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 100 + b"\r\n\r\n"
        sent = 0
        try:
            for byte in head:  # 134 bytes: 13 s at this pace
                s.send(bytes([byte]))
                sent += 1
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < len(head)
        assert closed_by_server(s, within=5.0)


def test_a_head_over_8_kib_gets_431_and_is_closed() -> None:
    with serving() as server, closing(connect(server)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 8192 + b"\r\n\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 431 ")
        assert closed_by_server(s, within=5.0)


def test_many_small_header_lines_are_bounded_too() -> None:
    with serving() as server, closing(connect(server)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 65 + b"\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 431 ")


def drain(s: socket.socket, within: float) -> int | None:
    """Read what the server sent until it closes; the byte count, or None if it never closed."""
    s.settimeout(within)
    total = 0
    try:
        while chunk := s.recv(1 << 20):
            total += len(chunk)
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return None
    return total


def test_a_client_that_never_reads_holds_no_thread_and_is_dropped_at_the_write_timeout() -> None:
    """An 8 MiB body to 10 clients with 4 KiB receive buffers that read nothing: the server
    keeps serving others, and gives up on them after write_timeout (1 s)."""
    big = b"x" * (8 * 2**20)
    with serving(lambda accept: ([big], "text/plain"), write_timeout=1.0) as server:
        threads_before = threading.active_count()
        stuck = [connect(server, rcvbuf=4096) for _ in range(10)]
        try:
            for s in stuck:
                s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            time.sleep(0.3)
            assert get(server, "/healthz") == (200, b"ok\n")
            assert threading.active_count() - threads_before <= 2
            time.sleep(1.5)  # past the write timeout: they were cut off
            for s in stuck:
                received = drain(s, within=5.0)
                assert received is not None and received < len(big)
        finally:
            for s in stuck:
                s.close()


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    with serving() as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        try:
            for path in ("/metrics", "/healthz", "/metrics"):
                conn.request("GET", path)
                response = conn.getresponse()
                assert response.status == 200 and response.read()
                assert response.getheader("Connection") == "keep-alive"
        finally:
            conn.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /metrics HTTP/1.0\n\n", b"200"),  # LF line ends
        (b"\r\nGET /healthz HTTP/1.1\r\n\r\n", b"200"),  # a blank line first is allowed
        (b"GET /nope HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405"),
        (b"GET /metrics\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", b"400"),
        (b"\x00\xff\xfe garbage \x01\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
    ],
)
def test_request_parsing(request_bytes: bytes, status: bytes) -> None:
    with serving() as server, closing(connect(server)) as s:
        s.sendall(request_bytes)
        s.settimeout(5)
        assert s.recv(4096).split(b" ", 2)[1] == status


def test_head_gets_the_headers_without_the_body() -> None:
    with serving() as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        try:
            conn.request("HEAD", "/metrics")
            response = conn.getresponse()
            assert response.status == 200
            assert response.getheader("Content-Length") == str(len(BODY))
            assert response.read() == b""
        finally:
            conn.close()


def test_a_render_failure_is_a_500_and_the_server_keeps_going() -> None:
    def broken(accept: str) -> tuple[bytes, str]:
        raise RuntimeError("boom")

    with serving(broken) as server:
        assert get(server, "/metrics") == (500, b"metrics unavailable\n")
        assert get(server, "/healthz") == (200, b"ok\n")


def test_when_every_slot_is_mid_response_a_new_connection_is_refused_not_queued() -> None:
    """2 slots, both writing a body nobody reads: the third connection is closed at once."""
    big = b"x" * (8 * 2**20)
    with serving(lambda accept: ([big], "text/plain"), max_connections=2,
                 write_timeout=30.0) as server:
        stuck = [connect(server, rcvbuf=4096) for _ in range(2)]
        try:
            for s in stuck:
                s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            time.sleep(0.3)
            with closing(connect(server)) as third:
                assert closed_by_server(third, within=5.0)
            assert server.refused >= 1
        finally:
            for s in stuck:
                s.close()


def test_pipelined_requests_are_answered_in_order_without_deep_recursion() -> None:
    """2,000 requests in one send (~52 KiB): answered one after another from the buffer, in
    order, by the loop (not by recursion), and /healthz still answers another client."""
    with serving() as server, closing(connect(server)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n" * 1999 + b"GET /nope HTTP/1.1\r\n\r\n")
        s.settimeout(10)
        received = b""
        while received.count(b"HTTP/1.1 ") < 2000:
            chunk = s.recv(1 << 20)
            assert chunk
            received += chunk
        assert received.count(b"HTTP/1.1 200 OK") == 1999
        assert received.rindex(b"HTTP/1.1 404 ") > received.rindex(b"HTTP/1.1 200 ")
        assert get(server, "/healthz") == (200, b"ok\n")


def test_the_server_imports_neither_asyncio_nor_ssl() -> None:
    import subprocess
    import sys

    code = ("import sys, node_agent.http_server, node_agent.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'asyncio', 'ssl'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_metrics_are_answered_on_the_loop_when_inline_says_they_are_cheap() -> None:
    """A rendered pass is a lookup: no hand-off to a render thread (and back) for it."""
    where: list[str] = []

    def render(accept: str) -> tuple[bytes, str]:
        where.append(threading.current_thread().name)
        return BODY, "text/plain; version=0.0.4"

    cheap = [True]
    with serving(render) as server:
        server._inline = lambda: cheap[0]
        assert get(server, "/metrics") == (200, BODY)
        cheap[0] = False
        assert get(server, "/metrics") == (200, BODY)
    assert not where[0].startswith("render-") and where[1].startswith("render-")
