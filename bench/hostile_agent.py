"""The agent's port under attack (issue 26): a good client's /metrics and /healthz latency during
each attack, beside the same client without one, and the agent's RSS, for the agent of a base
commit (*before*) and this tree (*after*), in one run.

Every pod can reach the agent's port, so the attackers are what a pod can do: connections that
stream blank lines, trickle a head a byte a second, connect and say nothing, pipeline requests
and never read, send oversized heads, or connect and close in a loop. They run in their own
process (``--attacker``, one selector loop), from other loopback addresses (``127.0.0.2`` for
one pod, ``127.0.1.x`` for many), so the agent sees other clients than the good one
(``127.0.0.1``). Each attack runs against a freshly started agent (the fake node: 8 GPUs x 64
processes, pods from its file, sampling every 10 s) for ``--seconds`` s after one second of
warm-up; the good client alternates GET /metrics and GET /healthz on new connections, 20 ms
apart, each with a 5 s timeout (the chart's probe timeout: a timeout counts as 5 s and a
failure). RSS is the agent's VmRSS sampled every 100 ms (peak); "kernel TCP" is
``/proc/net/sockstat``'s TCP memory at its peak minus before, both ends of every loopback
connection together.

    .venv/bin/python bench/hostile_agent.py                      # writes bench/results/
    .venv/bin/python bench/hostile_agent.py --seconds 3 --only pipelining   # quicker
    git worktree add --detach /tmp/agent-before 385fa18          # the base tree (default)

Done when (issue 26): under each attack the good client's p99 stays under 100 ms on both paths
and the agent's RSS within the chart's limit (128 MiB, charts/gpu-auditor/values.yaml).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "bench" / "results"
BEFORE = Path("/tmp/agent-before")
BASE = "385fa18"
TIMEOUT = 5.0
LIMIT_MIB = 128


@dataclass(frozen=True)
class Attack:
    name: str
    kind: str  # newlines, trickle, idle, pipeline, bighead, churn
    conns: int
    sources: int = 1  # client addresses (1: one pod)


ATTACKS = [
    Attack("none", "none", 0),
    Attack("blank-line streams, 60 connections from one pod", "newlines", 60),
    Attack("blank-line streams, 60 pods", "newlines", 60, 60),
    Attack("slowloris: 200 connections, a byte a second", "trickle", 200),
    Attack("idle: 500 connections that send nothing", "idle", 500),
    Attack("pipelining: 100 connections, 10,000 requests each, never reading", "pipeline", 100),
    Attack("pipelining: 100 pods, never reading", "pipeline", 100, 100),
    Attack("oversized heads: 32 connections", "bighead", 32),
    Attack("connect/close churn: 16 loops", "churn", 16),
]


# ---- the attacker (its own process) --------------------------------------------------------

def source_address(i: int, sources: int) -> str:
    return "127.0.0.2" if sources <= 1 else f"127.0.1.{1 + i % sources}"


def attacker(kind: str, conns: int, sources: int, port: int, seconds: float) -> None:
    """One selector loop holding ``conns`` hostile connections for ``seconds``; a connection
    the agent closes is opened again."""
    sel = selectors.DefaultSelector()
    payload = {"newlines": b"\n" * 65536,
               "pipeline": b"GET /metrics HTTP/1.1\r\n\r\n" * 10_000,
               "bighead": b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
               "trickle": b"GET /metrics HTTP/1.1\r\nX-Slow: "}.get(kind, b"")
    opened = [0]
    end = time.monotonic() + seconds

    def open_one(i: int) -> None:
        s = socket.socket()
        if kind == "pipeline":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((source_address(i, sources), 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        opened[0] += 1
        events = selectors.EVENT_WRITE if kind in ("newlines", "pipeline", "bighead") \
            else selectors.EVENT_READ
        sel.register(s, events | selectors.EVENT_READ, [i, 0, payload])

    def reopen(key: selectors.SelectorKey) -> None:
        sel.unregister(key.fileobj)
        key.fileobj.close()  # type: ignore[union-attr]
        if time.monotonic() < end:
            open_one(key.data[0])

    if kind == "churn":
        def loop(i: int) -> None:
            while time.monotonic() < end:
                with socket.socket() as s:
                    s.bind((source_address(i, sources), 0))
                    try:
                        s.connect(("127.0.0.1", port))
                        opened[0] += 1
                    except OSError:
                        time.sleep(0.01)
        threads = [threading.Thread(target=loop, args=(i,)) for i in range(conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"opened": opened[0]}), flush=True)
        return
    for i in range(conns):
        open_one(i)
    next_trickle = time.monotonic() + 1.0
    while time.monotonic() < end:
        for key, mask in sel.select(0.1):
            s: socket.socket = key.fileobj  # type: ignore[assignment]
            if mask & selectors.EVENT_READ:
                try:
                    data = s.recv(65536) if kind != "pipeline" else b"x"
                except (BlockingIOError, InterruptedError):
                    data = b"x"
                except OSError:
                    data = b""
                if not data or kind == "bighead":
                    reopen(key)
                    continue
            if mask & selectors.EVENT_WRITE:
                i, sent, chunk = key.data
                try:
                    n = s.send(chunk[sent:] if kind != "newlines" else chunk)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    reopen(key)
                    continue
                key.data[1] = sent + n
                if kind != "newlines" and key.data[1] >= len(chunk):
                    sel.modify(s, selectors.EVENT_READ, key.data)
        if kind == "trickle" and time.monotonic() >= next_trickle:
            next_trickle += 1.0
            for key in list(sel.get_map().values()):
                try:
                    key.fileobj.send(payload if key.data[1] == 0 else b"a")  # type: ignore
                    key.data[1] += 1
                except OSError:
                    reopen(key)
    print(json.dumps({"opened": opened[0]}), flush=True)


# ---- the agent, the good client, the meters ------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_node(root: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE))
    from agent_scrape import write_fake_node

    return write_fake_node(root, 8, 64)


def start_agent(tree: Path, nvml: Path, proc: Path, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "operator")])
    agent = subprocess.Popen(
        [sys.executable, "-m", "node_agent.cli", "--nvml-fake", str(nvml), "--proc-root",
         str(proc), "--bind-address", "127.0.0.1", "--port", str(port), "--no-report",
         "--interval", "10", "--log-level", "ERROR"],
        cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if good_get(port, "/healthz")[1]:
                return agent
        except OSError:
            pass
        time.sleep(0.1)
    agent.kill()
    raise RuntimeError(f"the agent of {tree} did not start")


def good_get(port: int, path: str) -> tuple[float, bool]:
    """One GET on a new connection from 127.0.0.1: (seconds, answered 200)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT,
                                      source_address=("127.0.0.1", 0))
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
        response = conn.getresponse()
        response.read()
        ok = response.status == 200
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        conn.close()
    elapsed = time.perf_counter() - started
    return (elapsed if ok else max(elapsed, TIMEOUT)), ok


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tcp_mem_pages() -> int:
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            parts = line.split()
            return int(parts[parts.index("mem") + 1])
    return 0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def measure(tree: Path, attack: Attack, nvml: Path, proc: Path, seconds: float
            ) -> dict[str, Any]:
    port = free_port()
    agent = start_agent(tree, nvml, proc, port)
    rss_ready = rss_kib(agent.pid)
    mem0 = tcp_mem_pages()
    peaks = {"rss": rss_ready, "tcp": mem0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peaks["rss"] = max(peaks["rss"], rss_kib(agent.pid))
            peaks["tcp"] = max(peaks["tcp"], tcp_mem_pages())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    hostile = None
    if attack.kind != "none":
        hostile = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--attacker", attack.kind,
             "--conns", str(attack.conns), "--sources", str(attack.sources), "--port",
             str(port), "--seconds", str(seconds + 1.5)], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
    times: dict[str, list[float]] = {"/metrics": [], "/healthz": []}
    failures = {"/metrics": 0, "/healthz": 0}
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        path = ("/metrics", "/healthz")[i % 2]
        i += 1
        elapsed, ok = good_get(port, path)
        times[path].append(elapsed)
        failures[path] += not ok
        time.sleep(0.02)
    opened = None
    if hostile is not None:
        out, _ = hostile.communicate(timeout=60)
        opened = json.loads(out.splitlines()[-1])["opened"] if out.strip() else None
    stop.set()
    sampler.join()
    alive = agent.poll() is None
    agent.terminate()
    try:
        agent.wait(10)
    except subprocess.TimeoutExpired:
        agent.kill()
    result: dict[str, Any] = {"rss_ready_mib": round(rss_ready / 1024, 1),
                              "rss_peak_mib": round(peaks["rss"] / 1024, 1),
                              "kernel_tcp_peak_mib": round((peaks["tcp"] - mem0) * 4 / 1024, 1),
                              "attacker_connections": opened, "agent_alive": alive}
    for path, xs in times.items():
        key = path.strip("/")
        result[key] = {"n": len(xs), "failed": failures[path],
                       "p50_ms": round(pct(xs, 0.5) * 1e3, 2),
                       "p99_ms": round(pct(xs, 0.99) * 1e3, 2),
                       "max_ms": round(max(xs) * 1e3, 2) if xs else None}
    return result


def run(trees: dict[str, Path], attacks: list[Attack], seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="hostile-agent-") as tmp:
        nvml, proc = write_node(Path(tmp))
        for attack in attacks:
            for name, tree in trees.items():
                out[name][attack.name] = measure(tree, attack, nvml, proc, seconds)
                print(name, attack.name, json.dumps(out[name][attack.name]), flush=True)
    return out


def held(r: dict[str, Any]) -> bool:
    return (r["metrics"]["p99_ms"] < 100 and r["healthz"]["p99_ms"] < 100
            and r["metrics"]["failed"] == 0 and r["healthz"]["failed"] == 0
            and r["rss_peak_mib"] <= LIMIT_MIB and r["agent_alive"])


def markdown(result: dict[str, Any], command: str) -> str:
    lines = [
        "# The agent's port under attack: before and after (issue 26)", "",
        f"Command: `{command}`; Python {result['python']}; {result['machine']}; load average "
        f"at the end {result['load_average']} (a shared 2-core machine: the attackers, the good "
        f"client and the agent share it). *before*: the agent of `{result['base']}`; *after*: "
        "this tree. Each row: a freshly started agent (fake node, 8 GPUs x 64 processes), the "
        "attack running, a good client from 127.0.0.1 alternating GET /metrics (gzip) and "
        f"GET /healthz on new connections for {result['seconds']} s; a request that fails or "
        "takes 5 s (the chart's probe timeout) counts as 5,000 ms and a failure. Held: both "
        f"p99 < 100 ms, no failure, peak RSS <= {LIMIT_MIB} MiB (the chart's limit).", "",
        "| attack | tree | /metrics p50 ms | /metrics p99 ms | /healthz p50 ms | /healthz p99 "
        "ms | failed | agent RSS peak MiB | kernel TCP peak MiB | attacker connections | held |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = list(next(iter(result["trees"].values())))
    for attack in names:
        for tree, rows in result["trees"].items():
            r = rows[attack]
            lines.append(
                f"| {attack} | {tree} | {r['metrics']['p50_ms']} | {r['metrics']['p99_ms']} | "
                f"{r['healthz']['p50_ms']} | {r['healthz']['p99_ms']} | "
                f"{r['metrics']['failed'] + r['healthz']['failed']} | {r['rss_peak_mib']} | "
                f"{r['kernel_tcp_peak_mib']} | {r['attacker_connections'] or ''} | "
                f"{'yes' if held(r) else '**no**'} |")
    lines += ["", "Kernel TCP memory is the whole machine's (both ends of the loopback "
              "connections), peak minus the value before the attack.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attacker")
    ap.add_argument("--conns", type=int, default=0)
    ap.add_argument("--sources", type=int, default=1)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--before", type=Path, default=BEFORE,
                    help=f"the base tree (git worktree add --detach {BEFORE} {BASE})")
    ap.add_argument("--no-before", action="store_true", help="this tree only")
    ap.add_argument("--only", help="attacks whose name contains this")
    ap.add_argument("--out", default=str(RESULTS / "hostile_servers-agent"))
    a = ap.parse_args()
    if a.attacker:
        attacker(a.attacker, a.conns, a.sources, a.port, a.seconds)
        return 0
    trees = {} if a.no_before else {"before": a.before}
    trees["after"] = REPO
    attacks = [x for x in ATTACKS if not a.only or x.kind == "none" or a.only in x.name]
    base = subprocess.run(["git", "-C", str(a.before), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or BASE
    result = {"python": platform.python_version(), "seconds": a.seconds, "base": base,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "trees": run(trees, attacks, a.seconds)}
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    command = "python bench/hostile_agent.py" + "".join(
        f" {flag}" for flag in sys.argv[1:])
    Path(a.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
