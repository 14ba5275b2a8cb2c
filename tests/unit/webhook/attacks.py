"""Hostile clients of the webhook server (issue 26, items 2-3), a good client measured beside
them, and the server as its own process: shared by tests/unit/webhook/test_boundedhttp.py (a
short run of each attack against this tree) and bench/hostile_webhook.py (longer runs, this
tree against an older one).

Every attack is bounded in connections and in time, and runs in a process of its own whose
sockets come from another loopback address than the good client's (127.0.0.2 and up: another
client, as a pod is to the API server). The good client is the API server's part: a fresh TLS
connection per request (connect, handshake, POST of a pod's AdmissionReview, answer), so the
listen backlog, the connection bounds and the handshake are all on its path.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
GOOD_RATE = 20.0
"""Requests per second of the good client (one at a time)."""
GOOD_TIMEOUT = 10.0
CHART_LIMIT_MIB = 128
"""The webhook container's memory limit in the chart (values.yaml webhook.resources)."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    ca_pem: bytes


# -- the server as its own process -------------------------------------------------------------


@dataclass
class Server:
    """`gpu-auditor-webhook` of the tree at ``source`` (its operator/ folder), on loopback."""

    source: Path
    cert_file: Path
    key_file: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    program: tuple[str, ...] = ("-m", "gpu_auditor.webhook.main", "--metrics-port", "0")
    """What the interpreter runs (another server for a baseline: a script and its flags)."""

    def start(self) -> None:
        self.port = _free_port()
        env = {**os.environ, "PYTHONPATH": str(self.source / "operator")}
        self.process = subprocess.Popen(
            [sys.executable, *self.program, "--bind-address", "127.0.0.1",
             "--port", str(self.port), "--cert-file", str(self.cert_file),
             "--key-file", str(self.key_file)],
            env=env, cwd=str(self.source), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"webhook of {self.source} did not start")

    def rss_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in KiB."""
        assert self.process is not None
        values = {}
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        values[line.split(":")[0]] = int(line.split()[1])
        except OSError:
            return 0, 0
        return values.get("VmRSS", 0), values.get("VmHWM", 0)

    def threads(self) -> int:
        assert self.process is not None
        try:
            return len(os.listdir(f"/proc/{self.process.pid}/task"))
        except OSError:
            return 0

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- what is sent --------------------------------------------------------------------------------


def review(containers: int = 3, setting: str = "expandable_segment:True") -> bytes:
    """A pod's AdmissionReview as the API server sends it (a warning comes back)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "u-1",
                        "labels": {"app": "trainer"}},
           "spec": {"containers": [
               {"name": f"c{i}", "image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": setting},
                        *({"name": f"E{j}", "value": "x" * 40} for j in range(20))],
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}
               for i in range(containers)]}}
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE",
                    "namespace": "ml", "userInfo": {"username": "alice"}, "object": pod}},
    ).encode()


def heavy_review() -> bytes:
    """The most checking one pod can ask for: 128 containers, each setting 4 KiB of unknown
    keys (each found, worded and did-you-meant up to the per-container bound)."""
    setting = ",".join(f"k{i:04d}:1" for i in range(600))[:4096]
    return review(containers=128, setting=setting)


def post(path: str, body: bytes, length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
            ).encode() + body


def bomb(size: int) -> bytes:
    """`[{},{},...]` of about ``size`` bytes: some 25 bytes of Python objects per byte."""
    count = max(size // 3, 1)
    return b"[" + b"{}," * (count - 1) + b"{}]"


# -- the good client -----------------------------------------------------------------------------


@dataclass
class Measured:
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        return {"requests": len(self.latencies_ms) + len(self.errors),
                "errors": len(self.errors), "error_examples": sorted(set(self.errors))[:3],
                "p50_ms": _round(self.percentile(0.5)), "p99_ms": _round(self.percentile(0.99)),
                "max_ms": _round(max(self.latencies_ms, default=0.0))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def good_client(target: Target, seconds: float, rate: float = GOOD_RATE) -> Measured:
    """One admission at a time at ``rate`` per second, each on a fresh TLS connection; an
    error or a timeout is counted, its time kept out of the latencies."""
    context = ssl.create_default_context(cadata=target.ca_pem.decode())
    body = review()
    measured = Measured()
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        due = start + n / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        n += 1
        began = time.perf_counter()
        conn = http.client.HTTPSConnection(target.host, target.port, context=context,
                                           timeout=GOOD_TIMEOUT)
        try:
            conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read())
            if response.status != 200 or not answer["response"].get("warnings"):
                raise RuntimeError(f"HTTP {response.status}")
            measured.latencies_ms.append((time.perf_counter() - began) * 1000)
        except Exception as exc:  # every failure is a finding of the bench
            measured.errors.append(type(exc).__name__)
        finally:
            conn.close()
    return measured


# -- the attacks (each in a process of its own) --------------------------------------------------


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    run: Callable[[Target, float, str], None]


def _connect(target: Target, source: str, tls: bool = True,
             timeout: float = 10.0) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect((target.host, target.port))
    if not tls:
        return sock
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context.wrap_socket(sock)


def _until(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() < end


def _threads(count: int, work: Callable[[], None]) -> None:
    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def slow_bodies(target: Target, seconds: float, source: str, *, connections: int = 8,
                declared: int = 16 << 20, interval: float = 1.0) -> None:
    """The issue's first: 16 MiB bodies, all but their end sent at once, then a byte a
    second."""
    going = _until(seconds)
    most = b" " * (declared - 1024)

    def one() -> None:
        while going():
            with contextlib.suppress(OSError):
                sock = _connect(target, source)
                sock.sendall(post("/validate", b"", length=declared))
                sock.sendall(most)
                while going():
                    sock.sendall(b"[")
                    time.sleep(interval)
            time.sleep(0.2)

    _threads(connections, one)


def stalled_bodies(target: Target, seconds: float, source: str, *, connections: int = 32,
                   size: int = 3 << 20) -> None:
    """Bodies at the accepted maximum, sent but for their last byte, then held."""
    going = _until(seconds)
    chunk = b" " * (size - 1)

    def one() -> None:
        while going():
            with contextlib.suppress(OSError):
                sock = _connect(target, source)
                sock.sendall(post("/validate", b"", length=size))
                sock.sendall(chunk)
                while going() and sock.recv(1):  # until the server ends it
                    pass
            time.sleep(0.2)

    _threads(connections, one)


def json_bombs(target: Target, seconds: float, source: str, *, connections: int = 2,
               size: int = 16 << 20) -> None:
    """The issue's second: `[{},{},...]` bodies, sent whole, again and again."""
    going = _until(seconds)
    request = post("/validate", bomb(size))

    def one() -> None:
        while going():
            with contextlib.suppress(OSError):
                sock = _connect(target, source, timeout=30.0)
                sock.sendall(request)
                sock.recv(65536)
                sock.close()

    _threads(connections, one)


def near_bound_bombs(target: Target, seconds: float, source: str) -> None:
    """The largest `[{},...]` the bounded server still parses (`limits.MAX_PARSE_COST`), from
    four connections, again and again: memory and CPU, within the bounds."""
    from gpu_auditor.webhook.limits import MAX_PARSE_COST, parse_cost

    size = 64 << 10
    while parse_cost(bomb(size * 2)) <= MAX_PARSE_COST:
        size *= 2
    json_bombs(target, seconds, source, connections=4, size=size)


def slowloris(target: Target, seconds: float, source: str, *, connections: int = 1000,
              interval: float = 5.0) -> None:
    """The issue's third: a request head sent a byte every 5 s, on many connections."""
    going = _until(seconds)
    socks: list[socket.socket] = []
    for _ in range(connections):
        if not going():
            break
        with contextlib.suppress(OSError):
            sock = _connect(target, source, timeout=2.0)
            sock.sendall(b"P")
            socks.append(sock)
    head = b"OST /validate HTTP/1.1\r\nX: " + b"a" * 1000
    i = 0
    while going():
        for sock in list(socks):
            try:
                sock.sendall(head[i % len(head):i % len(head) + 1])
            except OSError:
                socks.remove(sock)
        i += 1
        time.sleep(min(interval, max(0.0, seconds / 4)))
    for sock in socks:
        sock.close()


def stalled_handshakes(target: Target, seconds: float, source: str, *,
                       connections: int = 1000) -> None:
    """Connections that never send a ClientHello, opened again as they are closed."""
    going = _until(seconds)
    socks: list[socket.socket] = []
    while going():
        while len(socks) < connections and going():
            try:
                socks.append(_connect(target, source, tls=False, timeout=2.0))
            except OSError:
                break
        time.sleep(0.2)
        alive = []
        for sock in socks:
            sock.setblocking(False)
            try:
                gone = sock.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            (sock.close() if gone else alive.append(sock))
        socks = alive
    for sock in socks:
        sock.close()


def connection_flood(target: Target, seconds: float, source: str, *,
                     connections: int = 2000) -> None:
    """Connections opened as fast as they are accepted, each completing its handshake and then
    idle, held to the end."""
    going = _until(seconds)
    socks: list[socket.socket] = []
    while going() and len(socks) < connections:
        with contextlib.suppress(OSError):
            socks.append(_connect(target, source, timeout=2.0))
    while going():
        time.sleep(0.1)
    for sock in socks:
        sock.close()


def no_read(target: Target, seconds: float, source: str, *, connections: int = 16) -> None:
    """Valid requests pipelined without ever reading an answer."""
    going = _until(seconds)
    request = post("/validate", review())

    def one() -> None:
        while going():
            with contextlib.suppress(OSError):
                sock = _connect(target, source, timeout=5.0)
                while going():
                    sock.sendall(request)
            time.sleep(0.2)

    _threads(connections, one)


def heavy_valid(target: Target, seconds: float, source: str, *, connections: int = 4) -> None:
    """Valid reviews of the most checking a pod can ask for, back to back."""
    going = _until(seconds)
    request = post("/validate", heavy_review())

    def one() -> None:
        with contextlib.suppress(OSError):
            sock = _connect(target, source, timeout=30.0)
            while going():
                sock.sendall(request)
                answer = sock.recv(1 << 20)
                if not answer:
                    sock = _connect(target, source, timeout=30.0)

    _threads(connections, one)


ATTACKS: dict[str, Attack] = {a.name: a for a in (
    Attack("slow-bodies", "8 connections sending 16 MiB bodies but their last KiB, then a byte "
           "a second", slow_bodies),
    Attack("stalled-bodies", "32 connections sending a 3 MiB body but its last byte, then "
           "holding it", stalled_bodies),
    Attack("json-bombs", "2 connections posting 16 MiB of `[{},...]` again and again",
           json_bombs),
    Attack("near-bound-bombs", "4 connections posting the largest `[{},...]` the bounded "
           "server parses, again and again", near_bound_bombs),
    Attack("slowloris", "1,000 connections sending a request head a byte every 5 s",
           slowloris),
    Attack("stalled-handshakes", "1,000 connections that never send a ClientHello",
           stalled_handshakes),
    Attack("connection-flood", "2,000 connections opened as fast as accepted, then idle",
           connection_flood),
    Attack("no-read", "16 connections pipelining valid requests, never reading an answer",
           no_read),
    Attack("heavy-valid", "4 connections posting 128-container reviews of 4 KiB settings of "
           "unknown keys, back to back", heavy_valid),
)}


def _attack_main(name: str, target: Target, seconds: float, source: str) -> None:
    sys.path[:0] = [str(ROOT / "operator")]
    with contextlib.suppress(Exception):
        ATTACKS[name].run(target, seconds, source)


@dataclass
class Result:
    attack: str
    good: dict[str, Any]
    rss_peak_mib: float
    hwm_mib: float
    threads_peak: int


def measure(server: Server, target: Target, attack: str | None, seconds: float,
            source: str = "127.0.0.2", warmup: float = 1.0) -> Result:
    """The good client for ``seconds`` while ``attack`` runs (None: alone), the server's RSS
    and threads sampled every 50 ms."""
    process = None
    if attack is not None:
        ctx = multiprocessing.get_context("spawn")
        process = ctx.Process(target=_attack_main,
                              args=(attack, target, seconds + warmup + 1.0, source))
        process.start()
        time.sleep(warmup)
    peak_rss, peak_threads = 0, 0
    sampling = threading.Event()

    def sample() -> None:
        nonlocal peak_rss, peak_threads
        while not sampling.is_set():
            peak_rss = max(peak_rss, server.rss_kib()[0])
            peak_threads = max(peak_threads, server.threads())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        good = good_client(target, seconds)
    finally:
        sampling.set()
        sampler.join()
        if process is not None:
            process.join(timeout=seconds + 30)
            if process.is_alive():
                process.kill()
    return Result(attack or "none", good.summary(), round(peak_rss / 1024, 1),
                  round(server.rss_kib()[1] / 1024, 1), peak_threads)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
