"""Scrape latency and RSS of gpu-auditor-agent on fake nodes, beside a naive exporter.

For 1 and 8 GPUs x 8/64/256 processes per GPU (4 processes per pod, 1 pod in 8 on a GPU it did
not request), this script writes a fake node (nvml.yaml, pods.yaml, a /proc directory), starts

- ours:  ``python -m node_agent --nvml-fake ... --proc-root ...`` (sampling every 10 s in a
  background thread; each scrape only turns the latest snapshot into metric families), and
- naive: an exporter in the style many GPU exporters use, run from this file
  (``--serve-naive``): prometheus_client's registry with stateful Gauges that every scrape must
  ``clear()`` and refill, and on every scrape samples the GPUs, re-reads ``/proc/<pid>/{stat,
  cgroup,comm}`` for every process (no cache) and rebuilds the pod mapping (same parsing code as
  ours, from data already in memory: no YAML, no gRPC),

then times full HTTP scrapes of ``/metrics`` (a new TCP connection each, like a cold Prometheus
scrape) and reads each process's RSS (VmRSS) and peak RSS (VmHWM) from ``/proc``.

    .venv/bin/python bench/agent_scrape.py                 # full run, writes bench/results/
    .venv/bin/python bench/agent_scrape.py --scrapes 50    # quicker
    .venv/bin/python bench/agent_scrape.py --report-only   # only the RSS with --report
    .venv/bin/python bench/agent_scrape.py --many --scrapes 50  # 20,000 processes, before/after

With the control-plane binaries (scripts/build-control-plane.sh) it also starts a local
etcd + kube-apiserver and measures the agent *with* ``--report`` (and, in one case, listing
this node's pods from the API server and asking a (missing) kubelet socket over gRPC), the
GPUNodeReport really written; ``--report-only`` runs that part alone and keeps the scrape rows
of the last full run in the results.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
GIB = 2**30
PROCS_PER_POD = 4


# ---- the fake node ------------------------------------------------------------------------


def write_fake_node(root: Path, gpus: int, procs_per_gpu: int) -> tuple[Path, Path]:
    proc = root / "proc"
    proc.mkdir(parents=True)
    gpu_docs: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    pid = 10_000
    for g in range(gpus):
        uuid = f"GPU-{g:08x}-0000-4000-8000-{g:012x}"
        processes = []
        for _ in range(procs_per_gpu // PROCS_PER_POD or 1):
            n = len(pods)
            uid = f"{n:08x}-1111-4222-8333-{n:012x}"
            cid = f"{n:064x}"
            allocated = [] if n % 8 == 7 else [uuid]  # 1 pod in 8 did not request this GPU
            pods.append({"namespace": f"team-{n % 5}", "name": f"job-{n}", "uid": uid,
                         "containers": [{"name": "main", "containerID": f"containerd://{cid}",
                                         "gpus": allocated}]})
            cgroup = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                      f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
            for _ in range(min(PROCS_PER_POD, procs_per_gpu)):
                d = proc / str(pid)
                d.mkdir()
                (d / "cgroup").write_text(cgroup)
                (d / "comm").write_text("python\n")
                rest = ["S"] + ["0"] * 18 + [str(pid * 7)] + ["0"] * 30
                (d / "stat").write_text(f"{pid} (python) {' '.join(rest)}\n")
                processes.append({"pid": pid, "usedBytes": (1 + pid % 7) * 2**28})
                pid += 1
        gpu_docs.append({"index": g, "uuid": uuid, "model": "NVIDIA H200",
                         "memoryTotalBytes": 150754820096, "memoryReservedBytes": 566231040,
                         "processes": processes})
    import yaml

    pods_file = root / "pods.yaml"
    labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing",  # many pods per GPU
              "nvidia.com/gpu.replicas": str(max(1, procs_per_gpu // PROCS_PER_POD))}
    pods_file.write_text(yaml.safe_dump({"node": {"name": "bench-node", "labels": labels},
                                         "pods": pods}))
    nvml = root / "nvml.yaml"
    nvml.write_text(yaml.safe_dump({"pods": "pods.yaml", "gpus": gpu_docs}))
    return nvml, proc


# ---- the naive baseline exporter (run in its own process) ----------------------------------


def serve_naive(nvml: Path, proc_root: Path, port: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import REGISTRY, Gauge, generate_latest

    from node_agent.cgroup import parse_cgroup_file
    from node_agent.fake_source import FakeNvmlSource, load_yaml
    from node_agent.pods import FakePods, allocation_of, parse_fake_pods
    from node_agent.procfs import parse_start_time

    source = FakeNvmlSource(nvml)
    pods_path = nvml.parent / "pods.yaml"
    pods_data = load_yaml(pods_path)
    labels = ["node", "gpu", "uuid", "namespace", "pod", "container", "pod_uid", "allocated"]
    process_bytes = Gauge("gpu_auditor_process_gpu_memory_bytes", "per container", labels)
    total = Gauge("gpu_auditor_gpu_memory_total_bytes", "total", ["node", "gpu", "uuid", "model"])
    used = Gauge("gpu_auditor_gpu_memory_used_bytes", "used", ["node", "gpu", "uuid", "model"])

    def refresh() -> None:
        reading = source.sample()
        view = FakePods(parse_fake_pods(pods_data, pods_path)).view()  # rebuilt every scrape
        process_bytes.clear()
        total.clear()
        used.clear()
        for g in reading.gpus:
            gl = ["bench-node", g.gpu, g.uuid, g.model]
            total.labels(*gl).set(g.total_bytes)
            used.labels(*gl).set(g.used_bytes)
            sums: dict[tuple[str, ...], int] = {}
            for p in g.processes:
                base = proc_root / str(p.pid)
                try:  # no cache: every process, every scrape
                    parse_start_time((base / "stat").read_text())
                    identity = parse_cgroup_file((base / "cgroup").read_text())
                    (base / "comm").read_text()
                except OSError:
                    identity = None
                if identity is None:
                    key = ("", "", "", "", "host")
                else:
                    ref = view.resolve(identity)
                    key = (ref.namespace, ref.pod, ref.container, ref.pod_uid,
                           allocation_of(ref, g.uuid, view.allocations).value)
                sums[key] = sums.get(key, 0) + (p.used_bytes or 0)
            for key, value in sums.items():
                process_bytes.labels("bench-node", g.gpu, g.uuid, *key).set(value)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/metrics":
                refresh()
                body = generate_latest(REGISTRY)
            else:
                body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def serve_static(size: int, port: int) -> None:
    """The noise floor: the same HTTP server class serving constant bytes of the same size."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    payload = b"x" * size

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


# ---- measuring ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str, gzip: bool = False) -> bytes:
    """The body as sent (still compressed when ``gzip`` asked for it and the server obliged)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "gzip"} if gzip else {})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        return body
    finally:
        conn.close()


def rss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def wait_ready(proc: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    """Until the agent answers /healthz; its stderr as the error if it dies or times out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            get(port, "/healthz")
            return
        except (OSError, RuntimeError) as err:
            if proc.poll() is not None or time.monotonic() > deadline:
                why = proc.stderr.read().decode() if proc.stderr else "died"
                raise RuntimeError(why) from err
            time.sleep(0.05)


def scrape(port: int, scrapes: int, warmup: int, gzip: bool = False
           ) -> tuple[list[float], bytes]:
    """``warmup`` untimed scrapes of /metrics, then ``scrapes`` timed ones 5 ms apart: the
    sorted times in ms and the last body (``gzip``: asking for it, as Prometheus does)."""
    body = b""
    for _ in range(warmup):
        body = get(port, "/metrics", gzip)
    times = []
    for _ in range(scrapes):
        t0 = time.perf_counter()
        body = get(port, "/metrics", gzip)
        times.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.005)
    return sorted(times), body


def p50_p99(times: list[float]) -> tuple[float, float]:
    """Median and 99th percentile (nearest rank) of sorted times, rounded to microseconds."""
    return (round(statistics.median(times), 3),
            round(times[min(len(times) - 1, int(len(times) * 0.99))], 3))


def measure(argv: list[str], port: int, scrapes: int, warmup: int, *, cwd: Path = REPO,
            ready_timeout: float = 60.0) -> dict[str, Any]:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(proc, port, ready_timeout)
        times, body = scrape(port, scrapes, warmup)
        rss, hwm = rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    p50, p99 = p50_p99(times)
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": round(times[-1], 3),
        "rss_mib": round(rss / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
        "body_bytes": len(body),
        "series": series_count(body),
        "samples": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
    }


def series_count(body: bytes) -> int:
    """Per-process series (``--process-labels``), else per-container ones (the naive exporter
    names its per-container family as the agent's per-process one was named before 0.2)."""
    lines = body.splitlines()
    process = sum(1 for line in lines if line.startswith(b"gpu_auditor_process_gpu_memory_bytes{"))
    return process or sum(1 for line in lines
                          if line.startswith(b"gpu_auditor_container_gpu_memory_bytes{"))


def import_rss(modules: list[str], then: str = "pass") -> float:
    code = (f"import {', '.join(modules)}; {then}; import pathlib; print([l for l in "
            "pathlib.Path('/proc/self/status').read_text().splitlines() "
            "if l.startswith('VmRSS')][0].split()[1])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return round(int(out.strip()) / 1024, 1)


def run(scrapes: int, warmup: int) -> dict[str, Any]:
    rows = []
    cases = [(g, p, False, 10.0) for g in (1, 8) for p in (8, 64, 256)]
    cases += [(8, 256, True, 10.0), (8, 256, False, 0.5)]
    for gpus, procs, process_labels, interval in cases:
        with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
            nvml, proc = write_fake_node(Path(tmp), gpus, procs)
            port = free_port()
            ours_argv = [sys.executable, "-m", "node_agent", "--nvml-fake", str(nvml),
                         "--proc-root", str(proc), "--bind-address", "127.0.0.1",
                         "--port", str(port), "--interval", str(interval), "--no-report",
                         "--log-level", "WARNING"]
            if process_labels:
                ours_argv.append("--process-labels")
            # Scrapes are paced 5 ms apart; with --interval 0.5 sampling passes (tens of ms
            # at 8 x 256) run during the scrapes: the worst case for scrape latency.
            ours = measure(ours_argv, port, scrapes, warmup)
            row: dict[str, Any] = {"gpus": gpus, "procs_per_gpu": procs,
                                   "process_labels": process_labels, "interval_s": interval,
                                   "ours": ours}
            port = free_port()
            static_argv = [sys.executable, str(Path(__file__).resolve()), "--serve-static",
                           str(ours["body_bytes"]), str(port)]
            row["static_floor"] = measure(static_argv, port, scrapes, warmup)
            if not process_labels and interval == 10.0:
                port = free_port()
                naive_argv = [sys.executable, str(Path(__file__).resolve()), "--serve-naive",
                              str(nvml), str(proc), str(port)]
                row["naive"] = measure(naive_argv, port, scrapes, warmup)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"scrapes": scrapes, "warmup": warmup, "rows": rows}


REAL_NODE = ["node_agent.cli", "node_agent.http_server", "node_agent.nvml_source", "pynvml",
             "node_agent.podresources.client"]


def imports() -> dict[str, float]:
    # The API client configured as in a pod: a CA file and a token file (contents don't matter).
    tmp = tempfile.mkdtemp(prefix="agent-bench-sa-")
    Path(tmp, "token").write_text("x")
    Path(tmp, "ca.crt").write_bytes(ssl_ca_pem())
    configure = ("from gpu_auditor.base.client import ApiClient; "
                 "from gpu_auditor.base.kubeconfig import load_incluster; "
                 "from pathlib import Path; "
                 "ApiClient(load_incluster({'KUBERNETES_SERVICE_HOST': '10.0.0.1', "
                 f"'KUBERNETES_SERVICE_PORT': '443'}}, Path({tmp!r})), user_agent='bench')")
    return {
        "agent, fake node (what the rows above run)": import_rss(
            ["node_agent.cli", "node_agent.http_server"]),
        "agent, real node (+ pynvml, the pod-resources client)": import_rss(REAL_NODE),
        "agent, real node with --report (+ gpu_auditor.base.client, configured in-cluster)":
            import_rss([*REAL_NODE, "gpu_auditor.base.client", "node_agent.kube"], configure),
        "for comparison: real node + the kubernetes client (what --report imported before)":
            import_rss([*REAL_NODE, "kubernetes.client", "kubernetes.config"]),
    }


def ssl_ca_pem() -> bytes:
    """A self-signed CA certificate (for configuring the client; never connected to)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


# ---- RSS with --report, against a real (local) API server ----------------------------------


def report_rss(scrapes: int, warmup: int) -> dict[str, Any] | None:
    """The agent daemon writing its GPUNodeReport to a local kube-apiserver; RSS after the
    report was written, ~20 passes and the scrapes. None without the control-plane binaries."""
    sys.path[:0] = [str(REPO / "operator"), str(REPO)]  # devtools is not installed
    from devtools.localcluster import LocalCluster, default_bin_dir, missing_binaries
    from gpu_auditor.base.client import ApiClient
    from gpu_auditor.base.errors import APINotFoundError
    from gpu_auditor.base.kubeconfig import load_kubeconfig
    from node_agent.kube import AgentApi

    missing = missing_binaries(default_bin_dir())
    if missing:
        print(f"skipping the --report RSS: no {', '.join(missing)} in {default_bin_dir()}",
              file=sys.stderr)
        return None
    import yaml

    crd = yaml.safe_load((REPO / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml")
                         .read_text())
    rows = []
    with LocalCluster() as cluster:
        api = ApiClient(load_kubeconfig(cluster.kubeconfig), user_agent="bench")
        reports = AgentApi(api)
        api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
        cluster.wait_for_crd(crd["metadata"]["name"])
        # A node with a full node's worth of pods (kubelet default max-pods: 110) for ApiPods.
        api.request("POST", "/api/v1/nodes", body={"metadata": {"name": "bench-node", "labels": {
            "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "8"}}})
        for i in range(110):
            api.request("POST", "/api/v1/namespaces/default/pods", body={
                "metadata": {"name": f"job-{i}", "labels": {"app": "bench", "job": str(i)}},
                "spec": {"nodeName": "bench-node", "containers": [
                    {"name": "main", "image": "example.invalid/trainer:1",
                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        cases = [(1, 8, True), (8, 256, True), (8, 256, False)]
        for gpus, procs, fake_pods in cases:
            with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
                nvml, proc = write_fake_node(Path(tmp), gpus, procs)
                if not fake_pods:  # pods from the API server, allocations from the kubelet
                    doc = yaml.safe_load(nvml.read_text())
                    doc.pop("pods")
                    nvml.write_text(yaml.safe_dump(doc))
                node = f"bench-{gpus}x{procs}-fake" if fake_pods else "bench-node"
                port = free_port()
                argv = [sys.executable, "-m", "node_agent", "--nvml-fake", str(nvml),
                        "--proc-root", str(proc), "--bind-address", "127.0.0.1",
                        "--port", str(port), "--interval", "0.5", "--report",
                        "--report-min-interval", "0", "--node-name", node,
                        "--kubeconfig", str(cluster.kubeconfig),
                        "--pod-resources-socket", str(Path(tmp) / "no-kubelet.sock"),
                        "--log-level", "ERROR"]
                proc_ = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE)
                try:
                    deadline = time.monotonic() + 60
                    while True:
                        try:
                            report = reports.read_report(node, timeout=5)
                            break
                        except APINotFoundError as err:
                            if proc_.poll() is not None or time.monotonic() > deadline:
                                raise RuntimeError(proc_.stderr.read().decode()
                                                   if proc_.stderr else "died") from err
                            time.sleep(0.1)
                    time.sleep(10)  # ~20 more passes (and report writes, when changed)
                    times = []
                    for i in range(warmup + scrapes):
                        t0 = time.perf_counter()
                        get(port, "/metrics")
                        if i >= warmup:
                            times.append((time.perf_counter() - t0) * 1000)
                        time.sleep(0.005)
                    rss, hwm = rss_kib(proc_.pid)
                finally:
                    proc_.terminate()
                    proc_.wait(timeout=10)
                times.sort()
                rows.append({
                    "gpus": gpus, "procs_per_gpu": procs,
                    "pods_from": "fake pods file" if fake_pods else
                    "API server (110 pods on the node) + kubelet gRPC (socket absent)",
                    "report_written": report["spec"]["nodeName"] == node,
                    "rss_mib": round(rss / 1024, 1), "peak_rss_mib": round(hwm / 1024, 1),
                    "p50_ms": round(statistics.median(times), 3),
                    "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3),
                })
                print(json.dumps(rows[-1]), flush=True)
    return {"apiserver": "local etcd + kube-apiserver (devtools.localcluster), kubeconfig "
                         "with a client certificate", "interval_s": 0.5, "rows": rows}


# ---- 20,000 processes: the agent before and after the series cap ---------------------------


# 20,000 processes (5,000 pods), and for scale a busy but ordinary node (8 x 256: under the cap)
MANY_CASES = [(8, 256, False), (8, 2500, False), (8, 2500, True)]

# Python memory the agent itself allocates (tracemalloc), after the fake files are loaded: a
# pass, the exposition rendered, three more passes and renders. Leaves the harness out.
TRACED = """
import gc, json, sys, tracemalloc
from node_agent.cli import build, exposition_for
from node_agent.config import parse
cfg = parse(sys.argv[1:])
agent = build(cfg)
tracemalloc.start()
agent.run_once()
exposition = exposition_for(agent, cfg)
exposition.prime(agent.latest())
for _ in range(3):
    agent.run_once()
    exposition.render("", agent.latest())
gc.collect()
now, peak = tracemalloc.get_traced_memory()
print(json.dumps({"retained_mib": round(now / 2**20, 1), "peak_mib": round(peak / 2**20, 1)}))
"""


def traced(cwd: Path, argv: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", TRACED, *argv], cwd=cwd, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def many(scrapes: int, warmup: int, baseline_ref: str) -> dict[str, Any]:
    """The same 20,000-process fake node served by three agents in one run:

    - *before*: ``node_agent`` as of ``baseline_ref`` (``git archive``), no cap;
    - *after, uncapped*: this tree with ``--max-series-per-gpu 100000``: what changed besides
      the cap (libyaml for the fake files, shared cgroup objects, the new HTTP server);
    - *after*: this tree with its defaults (256 series per GPU and family).
    """
    ref = subprocess.run(["git", "rev-parse", "--short", baseline_ref], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agent-bench-base-") as base:
        archive = subprocess.run(["git", "archive", ref, "node_agent"], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        for gpus, procs, process_labels in MANY_CASES:
            with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
                nvml, proc = write_fake_node(Path(tmp), gpus, procs)
                row: dict[str, Any] = {"gpus": gpus, "procs_per_gpu": procs,
                                       "processes": gpus * procs,
                                       "pods": gpus * max(1, procs // PROCS_PER_POD),
                                       "process_labels": process_labels}
                for name, cwd, extra in (("before", Path(base), []),
                                         ("after_uncapped", REPO,
                                          ["--max-series-per-gpu", "100000"]),
                                         ("after", REPO, [])):
                    port = free_port()
                    argv = [sys.executable, "-m", "node_agent", "--nvml-fake", str(nvml),
                            "--proc-root", str(proc), "--bind-address", "127.0.0.1",
                            "--port", str(port), "--interval", "10", "--no-report",
                            "--log-level", "WARNING", *extra]
                    if process_labels:
                        argv.append("--process-labels")
                    started = time.monotonic()
                    row[name] = measure(argv, port, scrapes, warmup, cwd=cwd,
                                        ready_timeout=300)
                    row[name]["ready_s"] = round(time.monotonic() - started, 1)
                    row[name]["traced"] = traced(cwd, argv[3:])
                rows.append(row)
                print(json.dumps(row), flush=True)
    return {"baseline_ref": ref, "scrapes": scrapes, "warmup": warmup, "rows": rows}


def many_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# The agent at 20,000 GPU processes: before and after the series cap",
        "",
        f"Command: `{result['command']}`; Python {result['python']}; {result['machine']}; "
        f"load average at the end {result['load_average_at_end']} (a shared machine). "
        f"{result['scrapes']} timed scrapes after {result['warmup']} warm-up ones per agent, "
        "RSS (VmRSS) and peak RSS (VmHWM) read after the scrapes.",
        "",
        "A fake node of 8 GPUs x 2,500 processes (4 processes per pod: 5,000 pods, 1 pod in 8 "
        "on a GPU it did not request, time-slicing labels), and for scale one of 8 x 256 "
        "(512 pods: under the cap, so only the new HTTP server and parsing differ), served in "
        "the same run by: "
        f"*before*: `node_agent` at `{result['baseline_ref']}` (no cap); *after, uncapped*: "
        "this tree with `--max-series-per-gpu 100000` (isolates what changed besides the cap: "
        "libyaml for the fake files, shared cgroup objects, the asyncio HTTP server); *after*: "
        "this tree with its defaults (at most 256 series per GPU in each per-pod family).",
        "",
        "The fake source parses two YAML files (0.8 MB of processes, 1.3 MB of pods) at start; "
        "on a real node NVML and the API server stand in their place, so part of every RSS "
        "figure here is the fake harness, not the agent.",
        "",
        "*traced*: Python memory the agent's own code holds after the fake files are loaded "
        "(tracemalloc over a pass, the exposition rendered, three more passes and renders; "
        "retained at the end / peak): the part that does not depend on the fake harness.",
        "",
        "| GPUs x procs/GPU, labels | agent | series (memory family) | body bytes | "
        "scrape p50 ms | p99 ms | RSS MiB | peak RSS MiB | traced retained / peak MiB | "
        "ready s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        label = f"{r['gpus']} x {r['procs_per_gpu']}, " + (
            "--process-labels" if r["process_labels"] else "default")
        for name, title in (("before", "before"), ("after_uncapped", "after, uncapped"),
                            ("after", "after (cap 256/GPU)")):
            m = r[name]
            t = m["traced"]
            lines.append(f"| {label} | {title} | {m['series']} | {m['body_bytes']:,} | "
                         f"{m['p50_ms']} | {m['p99_ms']} | {m['rss_mib']} | "
                         f"{m['peak_rss_mib']} | {t['retained_mib']} / {t['peak_mib']} | "
                         f"{m['ready_s']} |")
    lines.append("")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Agent scrape latency and RSS (fake source)",
        "",
        f"Command: `{result['command']}` — {result['scrapes']} timed scrapes after "
        f"{result['warmup']} warm-up ones, each a full HTTP GET /metrics on a new connection; "
        f"Python {result['python']}; {result['machine']}; load average at the end "
        f"{result['load_average_at_end']} (a shared machine: other processes ran meanwhile).",
        "",
        "*ours*: gpu-auditor-agent (sampling in a background thread, scrapes read the latest "
        "snapshot). *naive*: stateful Gauges in prometheus_client's default registry, cleared "
        "and refilled on every scrape, re-reading /proc for every process and rebuilding the "
        "pod mapping on every scrape (see the script's docstring). Scrapes are 5 ms apart; ours "
        "samples every 10 s (the default) unless the row says otherwise. Targets: p99 < 10 ms "
        "at 8 x 256, RSS < 60 MiB.",
        "",
        "*floor*: the same HTTP server class returning constant bytes of ours' body size: what "
        "a scrape costs on this machine with no metrics work at all.",
        "",
        "| GPUs x procs/GPU | series | ours p50 ms | ours p99 ms | ours RSS MiB | "
        "naive p50 ms | naive p99 ms | naive RSS MiB | floor p50 ms | floor p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        o, n = r["ours"], r.get("naive")
        label = f"{r['gpus']} x {r['procs_per_gpu']}"
        if r["process_labels"]:
            label += " (--process-labels)"
        if r["interval_s"] != 10.0:
            label += f" (--interval {r['interval_s']}: passes during scrapes)"
        naive = (f"{n['p50_ms']} | {n['p99_ms']} | {n['rss_mib']}" if n else "— | — | —")
        f = r["static_floor"]
        lines.append(f"| {label} | {o['series']} | {o['p50_ms']} | {o['p99_ms']} | "
                     f"{o['rss_mib']} | {naive} | {f['p50_ms']} | {f['p99_ms']} |")
    if result.get("import_command", result["command"]) != result["command"]:
        lines += ["", f"(The table above is from the last full run, `{result['command']}`; "
                  f"what follows is from `{result['import_command']}`, load average at its end "
                  f"{result.get('report', {}).get('load_average_at_end')}.)"]
    report = result.get("report")
    if report:
        lines += [
            "", "## With `--report`, against a real API server", "",
            f"Command: `{report['command']}`; {report['apiserver']}; the agent samples every "
            f"{report['interval_s']} s, its GPUNodeReport is written before RSS is read (after "
            "~20 more passes and the scrapes). The agent talks to the API server with "
            "the shared base's client (`gpu_auditor.base.client`, standard library); `kubernetes` "
            "is not imported "
            "(tests/unit/node_agent/test_cli.py checks that). NVML is the fake source in "
            "every row: a real node adds pynvml and libnvidia-ml once initialised (the import "
            "figures below; NVML's own share: bench/gpu/agent_vs_nvitop.py); the kubelet client "
            "(last row) is node_agent/podresources on h2 and protobuf (docs/dependencies.md).",
            "",
            "| GPUs x procs/GPU | pods from | report written | RSS MiB | peak RSS MiB | "
            "p50 ms | p99 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in report["rows"]:
            lines.append(f"| {r['gpus']} x {r['procs_per_gpu']} | {r['pods_from']} | "
                         f"{r['report_written']} | {r['rss_mib']} | {r['peak_rss_mib']} | "
                         f"{r['p50_ms']} | {r['p99_ms']} |")
    lines += ["", "RSS right after import (no data), by what the agent loads"
              f" (measured with the `{result['import_command']}` run):", ""]
    for what, mib in result["import_rss_mib"].items():
        lines.append(f"- {what}: {mib} MiB")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-static":
        serve_static(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-naive":
        serve_naive(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scrapes", type=int, default=500)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--no-save", action="store_true", help="print only, do not write results")
    p.add_argument("--many", action="store_true",
                   help="only the 20,000-process node (and 8 x 256), before (--baseline-ref) "
                   "and after the series cap; writes bench/results/agent_scrape_20k.{json,md}")
    p.add_argument("--baseline-ref", default="959ef6f",
                   help="git ref of the 'before' agent for --many (default: the commit before "
                   "the series cap and the HTTP server limits)")
    p.add_argument("--report-only", action="store_true",
                   help="only the RSS with --report against a local API server and the import "
                   "RSS; the scrape rows are kept from the last saved full run")
    a = p.parse_args()
    command = "python bench/agent_scrape.py " + " ".join(sys.argv[1:])
    meta = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
    }
    if a.many:
        result = {"command": command, **meta, **many(a.scrapes, a.warmup, a.baseline_ref),
                  "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
        text = many_markdown(result)
        print(text)
        if not a.no_save:
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / "agent_scrape_20k.json").write_text(json.dumps(result, indent=2) + "\n")
            (RESULTS / "agent_scrape_20k.md").write_text(text)
        return 0
    if a.report_only:
        result = json.loads((RESULTS / "agent_scrape.json").read_text())
    else:
        result = {"command": command, **meta, **run(a.scrapes, a.warmup)}
        result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["import_rss_mib"] = imports()
    result["import_command"] = command
    report = report_rss(min(a.scrapes, 200), a.warmup)
    if report is not None:
        result["report"] = {"command": command, **meta, **report,
                            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    text = markdown(result)
    print(text)
    if not a.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "agent_scrape.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "agent_scrape.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
