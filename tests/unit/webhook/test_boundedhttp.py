"""The webhook's bounded HTTP/1.1 server (`webhook.boundedhttp`, issue 26 items 2-3): each bound
on a server in this process (small limits, fast), then every attack of `attacks.py` against
`gpu-auditor-webhook` as its own process, beside a good client."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_auditor.webhook.limits import BACKLOG, Limits
from gpu_auditor.webhook.server import WebhookServer

from .attacks import (
    ATTACKS,
    CHART_LIMIT_MIB,
    ROOT,
    Server,
    Target,
    bomb,
    measure,
    post,
    review,
)
from .webhook_helpers import SETTINGS

pytestmark = pytest.mark.unit

SMALL = Limits(max_body=1 << 20, max_parse_cost=4 << 20, buffer_budget=4 << 20,
               client_buffer=2 << 20, max_connections=8, max_client_connections=4,
               max_client_active=2, deadline=0.5, idle_timeout=1.0, workers=2, backlog=64)


@contextlib.contextmanager
def serving(limits: Limits = SMALL, *, metrics: bool = False) -> Iterator[WebhookServer]:
    server = WebhookServer(("127.0.0.1", 0), None, SETTINGS, limits=limits,
                           metrics_address=("127.0.0.1", 0) if metrics else None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def connect(server: WebhookServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.settimeout(5.0)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.server_port))
    return sock


def answer_of(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of one response (the connection is then closed by us)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before an answer")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1]), body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def validate(server: WebhookServer) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    try:
        conn.request("POST", "/validate", review(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert json.loads(response.read())["response"]["warnings"]
        return response.status
    finally:
        conn.close()


# -- time: one deadline for a request's head and body, not one per read ------------------------


def test_a_head_sent_a_byte_at_a_time_is_closed_at_its_deadline() -> None:
    """The old server's 10 s timeout was per read: a byte every 5 s held a thread forever."""
    with serving() as server:
        sock = connect(server)
        started = time.monotonic()
        closed = False
        for byte in b"POST /validate HTTP/1.1\r\nX: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)
            if time.monotonic() - started > 3:
                break
        assert closed or closed_within(sock, 1.0)
        assert time.monotonic() - started < 1.5  # the deadline is 0.5 s
        assert server.server.closed["deadline"] == 1


def test_a_body_sent_slowly_is_closed_at_the_same_deadline_as_its_head() -> None:
    with serving() as server:
        sock = connect(server)
        sock.sendall(post("/validate", b"", length=1000))
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(40):
                sock.sendall(b" ")
                time.sleep(0.05)
        assert closed_within(sock, 1.0) and time.monotonic() - started < 1.5


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    with serving() as server:
        sock = connect(server)
        sock.sendall(post("/validate", review()))
        assert answer_of(sock)[0] == 200
        assert not closed_within(sock, 0.5)  # kept alive for the next request
        assert closed_within(sock, 1.5)
        time.sleep(0.05)
        assert server.server.closed["idle"] == 1


# -- bytes: the body's bound, its parse cost --------------------------------------------------


def test_a_body_over_the_bound_is_refused_before_it_is_read() -> None:
    with serving() as server:
        sock = connect(server)
        sock.sendall(post("/validate", b"", length=(1 << 20) + 1))
        assert answer_of(sock)[0] == 413


def test_a_json_bomb_within_the_length_bound_is_refused_unparsed() -> None:
    """2 x 16 MiB of `[{},...]` took the old server to 902 MB; 1 MiB of it parses to 26 MB."""
    with serving() as server:
        sock = connect(server)
        sock.sendall(post("/validate", bomb(1 << 20)))
        status, body = answer_of(sock)
        assert status == 413 and b"complex" in body
        assert closed_within(sock, 1.0) and server.server.closed["too-large"] == 1
        assert validate(server) == 200


@pytest.mark.parametrize(("head", "status"), [
    (b"POST /validate HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", 431),
    (b"POST /validate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"POST /validate HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"\r\n\r\n", 400),
    (b"GARBAGE\r\n\r\n", 400),
    (b"PUT /validate HTTP/1.1\r\n\r\n", 405),
])
def test_a_request_this_server_does_not_read_is_answered_and_closed(head: bytes,
                                                                    status: int) -> None:
    with serving() as server:
        sock = connect(server)
        sock.sendall(head)
        assert answer_of(sock)[0] == status
        assert closed_within(sock, 1.0)


# -- connections: per client, in all; the backlog; threads ----------------------------------------


def test_a_clients_connections_past_its_bound_are_reset_its_idle_ones_first() -> None:
    with serving() as server:
        idle = []
        for _ in range(4):  # max_client_connections
            sock = connect(server, "127.0.0.2")
            sock.sendall(post("/validate", review()))
            assert answer_of(sock)[0] == 200
            idle.append(sock)
        fresh = connect(server, "127.0.0.2")  # room made: the oldest idle one is closed
        fresh.sendall(post("/validate", review()))
        assert answer_of(fresh)[0] == 200
        assert closed_within(idle[0], 1.0) and not closed_within(idle[1], 0.1)
        busy = [connect(server, "127.0.0.3") for _ in range(4)]
        for sock in busy:
            sock.sendall(b"POST")  # a request begun: not idle
        time.sleep(0.1)
        refused = connect(server, "127.0.0.3")
        assert closed_within(refused, 1.0)
        assert validate(server) == 200  # another client is still served


def test_the_server_keeps_room_for_another_client_while_one_holds_its_share() -> None:
    with serving() as server:
        hostile = [connect(server, "127.0.0.2") for _ in range(4)]
        for sock in hostile:
            sock.sendall(post("/validate", b"", length=1 << 20))  # reserve, never send
        started = time.perf_counter()
        assert validate(server) == 200
        assert time.perf_counter() - started < 0.3


def test_slow_connections_cost_no_thread() -> None:
    before = threading.active_count()
    limits = Limits(deadline=5.0, max_client_connections=200, max_connections=400)
    with serving(limits) as server:
        socks = [connect(server, "127.0.0.2") for _ in range(150)]
        for sock in socks:
            sock.sendall(b"P")
        time.sleep(0.3)
        assert validate(server) == 200
        assert threading.active_count() <= before + 1 + limits.workers  # the loop + workers


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_the_listen_backlog_is_not_five() -> None:
    """A backlog of 5 dropped SYNs: good clients waited 1.03 s for their connect."""
    with serving(Limits()) as server:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{server.server_port}"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert int(out[2]) >= min(BACKLOG, 128)  # Send-Q of a listening socket: its backlog


def test_metrics_are_served_by_the_same_bounded_server() -> None:
    with serving(metrics=True) as server:
        assert server.metrics_port
        conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=5)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        assert 'gpu_auditor_webhook_connections_closed_total{reason="deadline"}' in text
        assert "gpu_auditor_webhook_admission_requests_total" in text


# -- every attack against the real process, beside a good client -----------------------------------


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Target]]:
    from tests.integration.webhook_support import make_tls

    tls = make_tls(tmp_path_factory.mktemp("tls"))
    server = Server(ROOT, tls.cert_file, tls.key_file)
    yield server, Target("127.0.0.1", 0, tls.ca_pem)
    server.stop()


def test_idle_tls_connections_cost_little(webhook: tuple[Server, Target]) -> None:
    """100 idle TLS connections: +28 MiB with asyncio's 256 KiB read buffer per connection
    (zeroed when made), +4.1 MiB reading 16 KiB at a time (a TLS record's most); this test run
    both ways."""
    from .attacks import _connect

    server, target = webhook
    server.stop()
    server.start()
    target = Target(target.host, server.port, target.ca_pem)
    warm = [_connect(target, "127.0.0.3") for _ in range(20)]  # the first handshakes' caches
    time.sleep(0.5)
    before = server.rss_kib()[0]
    socks = [_connect(target, "127.0.0.2") for _ in range(100)]
    time.sleep(1.0)
    try:
        grown = server.rss_kib()[0] - before
        assert grown < 10 * 1024, f"100 idle TLS connections: +{grown} KiB"
    finally:
        for sock in socks + warm:
            sock.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("attack", ["none", *sorted(ATTACKS)])
def test_a_good_client_stays_fast_and_the_server_small_under_each_attack(
    webhook: tuple[Server, Target], attack: str, tmp_path: Path
) -> None:
    """Under each attack a good client gets every answer, none past its timeout, and the
    server's RSS stays within the chart's limit; "none" is the same client alone. Its latency
    (issue 26's p99 under 100 ms) is the bench's to measure, old beside new, never a timed
    assertion here: bench/hostile_webhook.py, bench/results/hostile_servers-webhook.md."""
    server, target = webhook
    server.stop()
    server.start()  # a fresh process per attack: its peak RSS is the attack's
    target = Target(target.host, server.port, target.ca_pem)
    result = measure(server, target, None if attack == "none" else attack, seconds=3.0)
    assert result.good["requests"] > 0 and result.good["errors"] == 0, result
    assert result.rss_peak_mib < CHART_LIMIT_MIB and result.hwm_mib < CHART_LIMIT_MIB, result
