"""Where the agent's RSS goes, this tree beside a base commit, in one run.

*before* is the agent of a base commit (default: ``385fa18``, the agent before issue 25: its
own NVML binding, HTTP/2, HPACK and protobuf decoder; ``--base b564767`` is the one before
issue 12's footprint work, on grpcio and prometheus_client), extracted with ``git archive``
into a temporary folder; *after* is this tree (pynvml, h2, protobuf). Both run with the
same Python (the dev venv, which has grpcio, protobuf and prometheus_client installed, so the
*before* agent can import them) on the same fake node, in turn, and:

1. **import by import**: VmRSS of a fresh interpreter after each module the agent loads on a real
   node (``/proc/self/status``), in import order;
2. **top allocations**: tracemalloc's largest Python-heap owners after importing the agent's
   real-node modules (Python objects only; shared libraries are in the RSS of step 1);
3. **served**: the agent as a server on a fake node of 8 GPUs x 64 processes (``--nvml-fake``),
   its pods and allocations from a stand-in kubelet — a real grpcio server answering
   ``v1.PodResourcesLister/List`` on a unix socket, in its own process — so the kubelet client
   runs every pass (``--interval 1``). Scrape latency (full HTTP GET /metrics on a new connection
   each, plain and then asking for gzip as Prometheus does) and RSS/peak RSS after the
   scrapes. The fake NVML source does not load libnvidia-ml:
   NVML's own share is measured on a GPU by ``bench/gpu/agent_vs_nvitop.py``.

    .venv/bin/python bench/agent_footprint.py    # writes bench/results/agent_footprint.*
    .venv/bin/python bench/agent_footprint.py --scrapes 100  # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(HERE))

from agent_scrape import (  # noqa: E402
    free_port,
    p50_p99,
    rss_kib,
    scrape,
    wait_ready,
    write_fake_node,
)

BASE = "385fa18"  # the agent before issue 25: nvml_lite, its own HTTP/2, HPACK, wire decoder

# What the agent loads on a real node (NVML, the kubelet, HTTP), as each version spells it.
REAL_NODE = {
    "b564767": ["prometheus_client", "node_agent.cli", "node_agent.nvml_source", "pynvml",
                "grpc", "node_agent.podresources.v1.api_pb2_grpc", "node_agent.http_server"],
    "385fa18": ["node_agent.cli", "node_agent.nvml_source", "node_agent.nvml_lite",
                "node_agent.podresources.client", "node_agent.http_server"],
    "after": ["node_agent.cli", "node_agent.nvml_source", "pynvml", "h2.connection",
              "node_agent.podresources.client", "node_agent.http_server"],
}

_STEPS = r"""
import importlib, json, sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) / 1024
rows = [['(bare interpreter)', rss()]]
for m in sys.argv[1:]:
    importlib.import_module(m)
    rows.append([m, rss()])
print(json.dumps(rows))
"""

_TOP = r"""
import importlib, json, sys, tracemalloc
tracemalloc.start(1)
for m in sys.argv[1:]:
    importlib.import_module(m)
snap = tracemalloc.take_snapshot()
stats = snap.statistics('filename')
total = sum(s.size for s in stats)
by_top = {}
for s in stats:
    f = s.traceback[0].filename
    parts = f.replace('\\', '/').split('/')
    key = next((p for p in reversed(parts[:-1]) if p in ('grpc', 'google', 'prometheus_client',
                'node_agent', 'gpu_auditor', 'yaml', 'asyncio', 'email', 'http', 'pynvml',
                'json', 'logging', 'concurrent', 'encodings', 'importlib', 'collections',
                'urllib', 're', 'ctypes', 'wsgiref')), None) or parts[-1]
    by_top[key] = by_top.get(key, 0) + s.size
print(json.dumps({'total': total, 'top': sorted(by_top.items(), key=lambda kv: -kv[1])[:12]}))
"""

_KUBELET = r"""
import sys, time
from concurrent import futures
import grpc
sys.path.insert(0, sys.argv[2])
from tests.podresources.v1 import api_pb2, api_pb2_grpc

pods = [l.split() for l in open(sys.argv[3]).read().splitlines()]

class Lister(api_pb2_grpc.PodResourcesListerServicer):
    def List(self, request, context):
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(name=name, namespace=ns, containers=[
                api_pb2.ContainerResources(name='main', devices=[api_pb2.ContainerDevices(
                    resource_name='nvidia.com/gpu', device_ids=gpus.split(',') if gpus != '-'
                    else [])])])
            for ns, name, gpus in pods])

server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
server.add_insecure_port('unix://' + sys.argv[1])
server.start()
print('READY', flush=True)
server.wait_for_termination()
"""


def extract(commit: str, dest: Path) -> Path:
    data = subprocess.run(["git", "-C", str(REPO), "archive", commit, "node_agent", "operator"],
                          capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    path = dest / "tree.tar"
    path.write_bytes(data)
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return dest


def env_for(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "operator")])
    env.pop("PYTHONSTARTUP", None)
    return env


def py(tree: Path, code: str, *args: str) -> Any:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, env=env_for(tree),
                         capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.splitlines()[-1])


def served(tree: Path, nvml: Path, proc: Path, socket_path: Path, scrapes: int,
           warmup: int) -> dict[str, Any]:
    port = free_port()
    argv = [sys.executable, "-m", "node_agent.cli", "--nvml-fake", str(nvml), "--proc-root",
            str(proc), "--pod-resources-socket", str(socket_path), "--bind-address",
            "127.0.0.1", "--port", str(port), "--interval", "1", "--no-report",
            "--node-name", "bench-node", "--log-level", "WARNING"]
    agent = subprocess.Popen(argv, cwd=tree, env=env_for(tree), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        wait_ready(agent, port, 60)
        time.sleep(2.5)  # two more passes, each asking the stand-in kubelet
        rss_ready = rss_kib(agent.pid)[0] / 1024
        times, body = scrape(port, scrapes, warmup)
        gz_times, gz_body = scrape(port, scrapes, warmup, gzip=True)
        rss, hwm = rss_kib(agent.pid)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    p50, p99 = p50_p99(times)
    gz_p50, gz_p99 = p50_p99(gz_times)
    return {
        "gzip_p50_ms": gz_p50,
        "gzip_p99_ms": gz_p99,
        "gzip_body_bytes": len(gz_body),
        "rss_ready_mib": round(rss_ready, 1),
        "rss_mib": round(rss / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
        "p50_ms": p50,
        "p99_ms": p99,
        "body_bytes": len(body),
        "kubelet_up": b"gpu_auditor_agent_kubelet_up{node=\"bench-node\"} 1" in body,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default=str(RESULTS / "agent_footprint"))
    a = ap.parse_args()
    started = time.time()
    result: dict[str, Any] = {"base": a.base, "python": platform.python_version(),
                              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                                         f"{platform.platform()}"}
    with tempfile.TemporaryDirectory(prefix="agent-footprint-") as tmp:
        trees = {"before": extract(a.base, Path(tmp) / "before"), "after": REPO}
        nvml, proc = write_fake_node(Path(tmp) / "node", 8, 64)
        import yaml

        pods = yaml.safe_load((nvml.parent / "pods.yaml").read_text())["pods"]
        # The kubelet answers for the pods; the agent gets no pods file (real-node path).
        doc = yaml.safe_load(nvml.read_text())
        doc.pop("pods")
        nvml.write_text(yaml.safe_dump(doc))
        listing = Path(tmp) / "kubelet-pods.txt"
        listing.write_text("".join(
            f"{p['namespace']} {p['name']} {','.join(p['containers'][0]['gpus']) or '-'}\n"
            for p in pods))
        sock = Path(tmp) / "kubelet.sock"
        kubelet = subprocess.Popen([sys.executable, "-c", _KUBELET, str(sock), str(REPO),
                                    str(listing)], stdout=subprocess.PIPE, text=True)
        try:
            assert kubelet.stdout is not None
            if kubelet.stdout.readline().strip() != "READY":
                raise RuntimeError("the stand-in kubelet did not start")
            for name, tree in trees.items():
                modules = REAL_NODE[name if name == "after" else a.base]
                result[name] = {
                    "imports": py(tree, _STEPS, *modules),
                    "python_heap": py(tree, _TOP, *modules),
                    "served": served(tree, nvml, proc, sock, a.scrapes, a.warmup),
                }
                print(name, json.dumps(result[name]["served"]), flush=True)
        finally:
            kubelet.terminate()
            kubelet.wait(10)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.time() - started, 1)
    command = "python bench/agent_footprint.py" + (
        f" --scrapes {a.scrapes}" if a.scrapes != 300 else "")
    Path(a.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 0


def markdown(r: dict[str, Any], command: str) -> str:
    b, a = r["before"], r["after"]
    lines = [
        "# Agent footprint: this tree beside a base commit", "",
        f"Command: `{command}`; Python {r['python']}; {r['machine']}; load average at the end "
        f"{r['load_average']} (a shared machine). *before*: the agent of `{r['base']}`; *after*: "
        "this tree (pynvml, h2, protobuf; gzip when asked). Same interpreter, same fake node, "
        "same stand-in kubelet (a real grpcio server answering List), measured one after the "
        "other in one run.", "",
        "## Served: 8 GPUs x 64 processes, pods from the stand-in kubelet every second", "",
        "| | RSS MiB (ready) | RSS MiB (after scrapes) | peak RSS MiB | scrape p50 ms | "
        "scrape p99 ms | body bytes | asking gzip: p50 ms | p99 ms | body bytes | kubelet_up |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, x in (("before", b), ("after", a)):
        s = x["served"]
        lines.append(f"| {name} | {s['rss_ready_mib']} | {s['rss_mib']} | {s['peak_rss_mib']} | "
                     f"{s['p50_ms']} | {s['p99_ms']} | {s['body_bytes']} | {s['gzip_p50_ms']} | "
                     f"{s['gzip_p99_ms']} | {s['gzip_body_bytes']} | {s['kubelet_up']} |")
    lines += ["", "## Import by import (VmRSS of a fresh interpreter, MiB)", ""]
    for name, x in (("before", b), ("after", a)):
        lines.append(f"*{name}*:")
        lines.append("")
        lines.append("| module | RSS MiB | + MiB |")
        lines.append("|---|---|---|")
        previous = None
        for module, rss in x["imports"]:
            delta = "" if previous is None else f"{rss - previous:+.1f}"
            lines.append(f"| `{module}` | {rss:.1f} | {delta} |")
            previous = rss
        lines.append("")
    lines += ["## Python heap after those imports (tracemalloc, by package)", "",
              "| | total MiB | largest owners (MiB) |", "|---|---|---|"]
    for name, x in (("before", b), ("after", a)):
        h = x["python_heap"]
        top = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in h["top"][:8])
        lines.append(f"| {name} | {h['total'] / 2**20:.1f} | {top} |")
    lines += ["", "The fake NVML source does not load libnvidia-ml (the import rows show each "
              "binding's Python module). NVML's own share on a real GPU, and the comparison "
              "with nvitop-exporter: `bench/gpu/agent_vs_nvitop.py` "
              "(`bench/results/gpu-agent-vs-nvitop.md`).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
