"""/metrics three ways at 2,048 series, in one run (issue 25): the agent's own exposition and
server, prometheus-client's exposition in the agent's server, and prometheus-client end to end
(its exposition and its own HTTP server); gzip and plain; and what each server does with a
crowd of idle connections.

The node: the fake source, 8 GPUs x 256 processes, ``--process-labels`` (2,048 per-process
series plus the per-container and per-GPU families), sampling every 10 s. Each variant is its
own process (``--serve``):

- ``ours``: ``gpu-auditor-agent`` as shipped (``exposition.py``: the pass's families rendered
  once, gzip compressed once per pass; ``http_server.py``);
- ``client_python in our server``: the same agent, but /metrics from prometheus-client the way
  its docs say: a custom Collector whose ``collect()`` builds ``GaugeMetricFamily`` /
  ``CounterMetricFamily`` from the latest snapshot on every scrape, ``generate_latest``, and
  ``gzip.compress`` when asked; served by the agent's server (so only the exposition differs);
- ``client_python end to end``: that Collector in a registry served by
  ``prometheus_client.start_http_server`` (its gzip included).

Measured: RSS after the scrapes, scrape p50/p99 (new connection each, plain and
``Accept-Encoding: gzip``), body bytes; then 300 idle connections from another address held
open against each server: its thread count and RSS, and the good client's latency meanwhile.
Also gzip level 1 against 6 on the body (time, size), in this process.

    .venv/bin/python bench/agent_exposition.py                # writes bench/results/
    .venv/bin/python bench/agent_exposition.py --scrapes 100  # quicker
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "bench" / "results"
VARIANTS = ("ours", "client_python in our server", "client_python end to end")


# ---- the servers (each in its own process) -------------------------------------------------

def serve(variant: str, nvml: Path, proc: Path, port: int) -> None:
    sys.path[:0] = [str(REPO), str(REPO / "operator")]
    from node_agent.cli import build, collector_for, exposition_for, server_for
    from node_agent.config import parse

    cfg = parse(["--nvml-fake", str(nvml), "--proc-root", str(proc), "--process-labels",
                 "--bind-address", "127.0.0.1", "--port", str(port), "--no-report",
                 "--log-level", "ERROR", "--max-series-per-gpu", "1000"])
    agent = build(cfg)
    if variant == "ours":
        exposition = exposition_for(agent, cfg)
        agent.run_once()
        agent.start()
        server = server_for(agent, cfg, exposition)
        print("READY", flush=True)
        server.serve_forever()
        return
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    ours = collector_for(agent, cfg)

    class SnapshotCollector:
        """client_python's pattern: fresh families from the latest snapshot on every scrape."""

        def collect(self) -> Iterator[Metric]:
            for family in ours.collect():
                if family.type == "counter":
                    metric: Any = CounterMetricFamily(family.name.removesuffix("_total"),
                                                      family.doc, labels=family.labels)
                else:
                    metric = GaugeMetricFamily(family.name, family.doc, labels=family.labels)
                for values, value in family.samples:
                    metric.add_metric(list(values), value)
                yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector())  # type: ignore[arg-type]
    agent.run_once()
    agent.start()
    if variant == "client_python end to end":
        start_http_server(port, addr="127.0.0.1", registry=registry)
        print("READY", flush=True)
        threading.Event().wait()
        return
    from node_agent.http_server import Body, make_server

    def render(accepts_gzip: bool) -> Body:
        text = generate_latest(registry)
        if accepts_gzip:
            return Body([gzip.compress(text)], CONTENT_TYPE_LATEST, "gzip")
        return Body([text], CONTENT_TYPE_LATEST)

    server = make_server(render, agent.health, "127.0.0.1", port)
    print("READY", flush=True)
    server.serve_forever()


# ---- the client side -----------------------------------------------------------------------

def get(port: int, gzip_ok: bool, source: str = "127.0.0.1") -> tuple[float, int]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                      source_address=(source, 0))
    try:
        conn.request("GET", "/metrics",
                     headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, response.status
        if gzip_ok:
            assert response.getheader("Content-Encoding") == "gzip"
    finally:
        conn.close()
    return time.perf_counter() - started, len(body)


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:", "Threads:")):
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1e3, 3)


def measure(variant: str, nvml: Path, proc: Path, scrapes: int) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", variant,
                              "--nvml", str(nvml), "--proc", str(proc), "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "READY":
            raise RuntimeError(child.stderr.read() if child.stderr else "no READY")
        time.sleep(1.0)
        out: dict[str, Any] = {"rss_ready_mib": round(status(child.pid)["VmRSS"] / 1024, 1)}
        series = 0
        for gz in (False, True):
            for _ in range(10):
                get(port, gz)
            times, size = [], 0
            for _ in range(scrapes):
                dt, size = get(port, gz)
                times.append(dt)
            key = "gzip" if gz else "plain"
            out[key] = {"p50_ms": pct(times, 0.5), "p99_ms": pct(times, 0.99),
                        "mean_ms": round(statistics.mean(times) * 1e3, 3), "body_bytes": size}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        st = status(child.pid)
        out.update({"series": series, "rss_after_scrapes_mib": round(st["VmRSS"] / 1024, 1),
                    "peak_rss_mib": round(st["VmHWM"] / 1024, 1), "threads": st["Threads"]})
        # 300 idle connections from another address, held open
        idle = []
        for _ in range(300):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                idle.append(s)
            except OSError:
                s.close()
        time.sleep(1.0)
        during = [get(port, True)[0] for _ in range(20)]
        st = status(child.pid)
        out["idle_300"] = {"threads": st["Threads"], "rss_mib": round(st["VmRSS"] / 1024, 1),
                           "good_p50_ms": pct(during, 0.5), "good_max_ms": pct(during, 1.0),
                           "still_open": sum(1 for s in idle if _open(s))}
        for s in idle:
            s.close()
        return out
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


def _open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def gzip_levels(nvml: Path, proc: Path) -> dict[str, Any]:
    sys.path[:0] = [str(REPO), str(REPO / "operator")]
    from node_agent.cli import build, collector_for
    from node_agent.config import parse
    from node_agent.exposition import render

    cfg = parse(["--nvml-fake", str(nvml), "--proc-root", str(proc), "--process-labels",
                 "--once", "--max-series-per-gpu", "1000"])
    agent = build(cfg)
    agent.run_once()
    text = render(collector_for(agent, cfg).collect())
    out: dict[str, Any] = {"text_bytes": len(text)}
    for level in (1, 6, 9):
        times = []
        for _ in range(20):
            started = time.perf_counter()
            c = zlib.compressobj(level, zlib.DEFLATED, 31)
            packed = c.compress(text) + c.flush()
            times.append(time.perf_counter() - started)
        out[f"level_{level}"] = {"bytes": len(packed),
                                 "ms_median": round(statistics.median(times) * 1e3, 2)}
    return out


def markdown(r: dict[str, Any], command: str) -> str:
    lines = [
        "# /metrics at 2,048 series: the agent's exposition and server beside prometheus-client",
        "", f"Command: `{command}`; Python {r['python']}; {r['machine']}; prometheus-client "
        f"{r['prometheus_client']}; load average at the end {r['load_average']} (a shared "
        "machine). Fake node 8 GPUs x 256 processes with `--process-labels`; "
        f"{r['scrapes']} scrapes each way on new connections after 10 warm-up ones. See the "
        "script's docstring for the three variants.", "",
        "| variant | series | plain p50 ms | plain p99 ms | plain bytes | gzip p50 ms | gzip p99 "
        "ms | gzip bytes | RSS MiB ready | RSS MiB after scrapes | peak RSS MiB | threads |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"| {name} | {v['series']} | {v['plain']['p50_ms']} | {v['plain']['p99_ms']} | "
            f"{v['plain']['body_bytes']:,} | {v['gzip']['p50_ms']} | {v['gzip']['p99_ms']} | "
            f"{v['gzip']['body_bytes']:,} | {v['rss_ready_mib']} | {v['rss_after_scrapes_mib']}"
            f" | {v['peak_rss_mib']} | {v['threads']} |")
    lines += ["", "## 300 idle connections held open from another address", "",
              "| variant | threads | RSS MiB | idle connections still open | good client p50 ms "
              "| good client max ms |", "|---|---|---|---|---|---|"]
    for name, v in r["variants"].items():
        i = v["idle_300"]
        lines.append(f"| {name} | {i['threads']} | {i['rss_mib']} | {i['still_open']} | "
                     f"{i['good_p50_ms']} | {i['good_max_ms']} |")
    g = r["gzip_levels"]
    lines += ["", f"## gzip levels on the {g['text_bytes']:,}-byte body (median of 20)", "",
              "| level | bytes | ms |", "|---|---|---|"]
    lines += [f"| {k.split('_')[1]} | {v['bytes']:,} | {v['ms_median']} |"
              for k, v in g.items() if k.startswith("level_")]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", choices=VARIANTS)
    ap.add_argument("--nvml", type=Path)
    ap.add_argument("--proc", type=Path)
    ap.add_argument("--port", type=int)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--out", default=str(RESULTS / "agent_exposition"))
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.nvml, a.proc, a.port)
        return 0
    import importlib.metadata

    sys.path.insert(0, str(HERE))
    from agent_scrape import write_fake_node

    result: dict[str, Any] = {"python": platform.python_version(), "scrapes": a.scrapes,
                              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                              "prometheus_client": importlib.metadata.version(
                                  "prometheus-client"), "variants": {}}
    with tempfile.TemporaryDirectory(prefix="agent-exposition-") as tmp:
        nvml, proc = write_fake_node(Path(tmp), 8, 256)
        for variant in VARIANTS:
            result["variants"][variant] = measure(variant, nvml, proc, a.scrapes)
            print(variant, json.dumps(result["variants"][variant]), flush=True)
        result["gzip_levels"] = gzip_levels(nvml, proc)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    command = "python bench/agent_exposition.py" + "".join(f" {x}" for x in sys.argv[1:])
    Path(a.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
