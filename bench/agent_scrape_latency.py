#!/usr/bin/env python3
"""Scrape latency of gpu-auditor-agent built from several source trees, in ONE run, on one fake
node: the trees' agents run side by side and are scraped in turn (the order shuffled each
round), so load on a shared machine falls on all of them alike.

Each scrape is what bench/gpu/agent_vs_nvitop.py does on the H200: ``urllib.request.urlopen``
of ``/metrics``, a new TCP connection, no keep-alive, no Accept-Encoding, the body read whole.

    .venv/bin/python bench/agent_scrape_latency.py --tree old=/tmp/agent-old --tree new=.
    .venv/bin/python bench/agent_scrape_latency.py --tree new=. --scrapes 2000 --gpus 1 \\
        --procs 12 --out-json a.json

A tree is a checkout of this repository (``git worktree add --detach /tmp/agent-old 13fdd4e``);
its agent runs as ``python -m node_agent.cli --nvml-fake <node> --proc-root <fake proc>
--bind-address 127.0.0.1 --port P --no-report`` from that tree (default flags otherwise, as on
the H200). Also timed per tree: the ``connect()`` alone (until the kernel completes the
handshake) and the time to the response's first byte, so the server's share of a scrape shows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from agent_scrape import free_port, write_fake_node  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    """The q-quantile with linear interpolation (as bench/gpu/agent_vs_nvitop.py computes it)."""
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def urllib_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def first_byte(port: int) -> tuple[float, float]:
    """(connect, first response byte) times in s of one raw GET /metrics on a new connection."""
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    t1 = time.perf_counter()
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        s.recv(1)
        t2 = time.perf_counter()
        while s.recv(65536):
            pass
    finally:
        s.close()
    return t1 - t0, t2 - t1


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 0.5) * 1e3, 3), "p90_ms": round(pct(xs, 0.9) * 1e3, 3),
            "p99_ms": round(pct(xs, 0.99) * 1e3, 3), "max_ms": round(max(xs) * 1e3, 3),
            "mean_ms": round(statistics.mean(xs) * 1e3, 3)}


def start(tree: Path, nvml: Path, proc_root: Path, port: int, extra: list[str],
          nvml_lib: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "operator")]))
    if nvml_lib:  # the real binding over a libnvidia-ml.so.1 there, the host's /proc, no
        # kubelet socket: what the agent runs on the H200 in bench/gpu/agent_vs_nvitop.py
        env["LD_LIBRARY_PATH"] = nvml_lib
        source = ["--proc-root", "/proc", "--node-name", "bench"]
    else:
        source = ["--nvml-fake", str(nvml), "--proc-root", str(proc_root)]
    return subprocess.Popen(
        [sys.executable, "-m", "node_agent.cli", *source, "--bind-address", "127.0.0.1",
         "--port", str(port), "--no-report", *extra], cwd=tree, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


_FLOOR = r"""
import socket, sys
body = open(sys.argv[1], "rb").read()
response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[2])))
listener.listen(128)
while True:
    conn, _ = listener.accept()
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(8192)
        if not chunk:
            break
        head += chunk
    conn.sendall(response)
    conn.close()
"""


def start_floor(body: Path, port: int) -> subprocess.Popen[bytes]:
    """The floor: a blocking accept/recv/sendall/close loop answering constant bytes (the
    agent's body), one send per response: what a scrape costs here with no server work."""
    return subprocess.Popen([sys.executable, "-c", _FLOOR, str(body), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(proc: subprocess.Popen[bytes], url: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            urllib_get(url)
            return
        except OSError as err:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((proc.stderr.read() if proc.stderr else b"").decode()) from err
            time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--procs", type=int, default=12, help="processes per GPU")
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--gap-ms", type=float, default=0.0, help="sleep between two scrapes")
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="an extra flag for every agent (repeat)")
    ap.add_argument("--nvml-lib", metavar="DIR",
                    help="run the agents on NVML through a libnvidia-ml.so.1 in DIR (e.g. "
                    "tests/unit/node_agent/fakenvml/fake_nvml.c built there) instead of the "
                    "fake source")
    ap.add_argument("--floor", action="store_true",
                    help="also scrape the floor: constant bytes (the first tree's body) from a "
                    "minimal blocking server")
    ap.add_argument("--out-json")
    a = ap.parse_args()
    trees = {}
    for spec in a.tree:
        name, _, path = spec.partition("=")
        trees[name] = Path(path).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        nvml, proc_root = write_fake_node(Path(tmp), a.gpus, a.procs)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        urls: dict[str, str] = {}
        ports: dict[str, int] = {}
        try:
            for name, tree in trees.items():
                ports[name] = free_port()
                urls[name] = f"http://127.0.0.1:{ports[name]}/metrics"
                procs[name] = start(tree, nvml, proc_root, ports[name], a.agent_arg,
                                    a.nvml_lib)
            for name in trees:
                wait_ready(procs[name], urls[name])
            if a.floor:
                first = next(iter(trees))
                body = Path(tmp) / "body"
                body.write_bytes(urllib_get(urls[first]))
                ports["floor"] = free_port()
                urls["floor"] = f"http://127.0.0.1:{ports['floor']}/metrics"
                procs["floor"] = start_floor(body, ports["floor"])
                wait_ready(procs["floor"], urls["floor"])
            names = list(procs)
            sizes = {}
            for name in names:
                for _ in range(a.warmup):
                    sizes[name] = len(urllib_get(urls[name]))
            lat: dict[str, list[float]] = {n: [] for n in names}
            conn: dict[str, list[float]] = {n: [] for n in names}
            ttfb: dict[str, list[float]] = {n: [] for n in names}
            order = list(names)
            cpu0 = {n: cpu_s(procs[n].pid) for n in names}
            rng = random.Random(25)
            for _ in range(a.scrapes):
                rng.shuffle(order)
                for name in order:
                    t0 = time.perf_counter()
                    urllib_get(urls[name])
                    lat[name].append(time.perf_counter() - t0)
                    if a.gap_ms:
                        time.sleep(a.gap_ms / 1e3)
                rng.shuffle(order)
                for name in order:
                    c, f = first_byte(ports[name])
                    conn[name].append(c)
                    ttfb[name].append(f)
            cpu = {n: (cpu_s(procs[n].pid) - cpu0[n]) / (2 * a.scrapes) for n in names}
        finally:
            for p in procs.values():
                p.terminate()
                p.wait(10)
    res = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
           "python": sys.version.split()[0], "cpus": os.cpu_count(),
           "platform": platform.platform(), "load_avg_end": os.getloadavg(),
           "node": (f"libnvidia-ml.so.1 from {a.nvml_lib}, /proc" if a.nvml_lib
                    else f"{a.gpus} GPU x {a.procs} processes (fake NVML)"),
           "scrapes": a.scrapes, "trees": {n: str(t) for n, t in trees.items()},
           "results": {n: {"urllib": summary(lat[n]), "connect": summary(conn[n]),
                           "first_byte": summary(ttfb[n]), "body_bytes": sizes[n],
                           "cpu_ms_per_scrape": round(cpu[n] * 1e3, 3)}
                       for n in names}}
    print(json.dumps(res, indent=1))
    if a.out_json:
        Path(a.out_json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
