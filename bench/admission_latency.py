"""Admission latency: what the validating webhook adds to the API server's round trip, and where
it should run (issue 15: "served by the operator process or a small Deployment of its own -
measure both and choose").

On a local control plane (etcd + kube-apiserver on loopback), the client creates Deployments
whose container sets `PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True` (the webhook's full path:
a finding, a warning) at a steady rate, one request every 1/rate s on one kept-alive connection,
and times each create from send to response. Three rounds, on the same cluster, same load:

- `baseline`: no webhook registered (the API server's own round trip: authn, admission,
  validation, the etcd write);
- `deployment`: `gpu-auditor-webhook` as its own process (the chart's choice), registered with
  the chart's ValidatingWebhookConfiguration (clientConfig pointed at loopback, TLS with a test
  CA);
- `in-operator`: the same server in a thread of the real operator process
  (`gpu_auditor.controller.main`), which is meanwhile watching pods and diagnosing a stream of
  OOMKilled pods;
- `direct`: no API server in the path: the client posts the AdmissionReview the API server
  would send straight to `gpu-auditor-webhook` (TLS, kept alive): the server's own share.

`--repeat` runs every mode that many times in a rotated order and pools the samples, so a slow
minute of the shared machine does not land on one mode only.

In every round the operator runs with that same stream (a separate process creates pods and
marks them OOMKilled at `--churn` pods/s in their own namespace, where the webhook is off), so
the rounds differ only in where the webhook is served. The webhook's added latency is a round's
p50/p99 minus the baseline's. The machine is shared (2 cores, other engineers' jobs): the
figures carry that noise, and the baseline is measured in the same run for that reason.

    .venv/bin/python bench/admission_latency.py                   # writes bench/results/
    .venv/bin/python bench/admission_latency.py --rate 20 --seconds 30 --churn 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

RESULTS = ROOT / "bench" / "results"
BAD = "expandable_segment:True"


def deployment(name: str) -> bytes:
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "b"}},
                 "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [
                     {"name": "train", "image": "registry.example/train:1",
                      "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": BAD}]}]}}},
    }).encode()


def review(name: str) -> bytes:
    obj = json.loads(deployment(name))
    obj["metadata"]["namespace"] = "bench"
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "operation": "CREATE",
                                   "object": obj}}).encode()


class Client:
    """One kept-alive HTTPS connection to the API server with the admin certificate (or, with
    `port` and `ca_pem`, to the webhook)."""

    def __init__(self, cluster: Any, port: int | None = None, ca_pem: bytes | None = None
                 ) -> None:
        pki = cluster.pki
        if ca_pem is not None:
            context = ssl.create_default_context(cadata=ca_pem.decode())
        else:
            context = ssl.create_default_context(cafile=str(pki.ca_cert))
            context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self.conn = HTTPSConnection("127.0.0.1", port or cluster.api_port, context=context,
                                    timeout=30)

    def request(self, method: str, path: str, body: bytes | None = None
                ) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json"} if body else {}
        self.conn.request(method, path, body, headers)
        response = self.conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()


def create_namespace(client: Client, name: str, labels: dict[str, str] | None = None) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "labels": labels or {}}}).encode()
    status, _, text = client.request("POST", "/api/v1/namespaces", body)
    assert status == 201, text


def measure(client: Client, namespace: str, rate: float, seconds: float, warmup: int,
            latencies: list[float], direct: bool = False) -> dict[str, int]:
    path = "/validate" if direct else f"/apis/apps/v1/namespaces/{namespace}/deployments"
    body = review if direct else deployment
    tag = uuid.uuid4().hex[:6]
    for i in range(warmup):
        client.request("POST", path, body(f"warm-{tag}-{i}"))
    count = int(rate * seconds)
    warned = late = 0
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        else:
            late += 1
        payload = body(f"d-{tag}-{i}")
        sent = time.perf_counter()
        status, headers, text = client.request("POST", path, payload)
        latencies.append(time.perf_counter() - sent)
        if direct:
            assert status == 200 and b'"warnings"' in text, text
            warned += 1
        else:
            assert status == 201, text
            warned += "gpu-auditor: " in headers.get("Warning", "")
    return {"requests": count, "warned": warned, "late_sends": late}


def rss_kib(pid: int) -> int:
    """VmRSS of the process that serves the webhook (the webhook alone, or the operator with
    it), after its round."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def summary(latencies: list[float], counts: list[dict[str, int]]) -> dict[str, Any]:
    latencies = sorted(latencies)
    rss = [c["rss_kib"] for c in counts if "rss_kib" in c]
    return {
        **{key: sum(c[key] for c in counts) for key in ("requests", "warned", "late_sends")},
        **({"server_rss_mib_max": round(max(rss) / 1024, 1)} if rss else {}),
        "rounds": len(counts),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p90_ms": 1000 * latencies[int(len(latencies) * 0.9)],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max_ms": 1000 * latencies[-1],
        "mean_ms": 1000 * statistics.fmean(latencies),
    }


# -- the operator's load: OOMKilled pods in their own namespace --------------------------------


def churn(kubeconfig_server: str, ca: str, cert: str, key: str, port: int, rate: float) -> None:
    """Create pods and mark each OOMKilled, `rate` per second, until killed (a subprocess)."""
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    conn = HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    base = "/api/v1/namespaces/churn/pods"
    i = 0
    start = time.perf_counter()
    while True:
        due = start + i / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        name = f"oom-{i}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"containers": [{"name": "main", "image": "img"}]}}
        conn.request("POST", base, json.dumps(pod), {"Content-Type": "application/json"})
        conn.getresponse().read()
        finished = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {"status": {"phase": "Failed", "containerStatuses": [{
            "name": "main", "ready": False, "restartCount": 0, "image": "img", "imageID": "",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                     "startedAt": finished, "finishedAt": finished}}}]}}
        conn.request("PATCH", f"{base}/{name}/status", json.dumps(status),
                     {"Content-Type": "application/strategic-merge-patch+json"})
        conn.getresponse().read()
        i += 1


def serve_in_operator(argv: list[str]) -> None:
    """The webhook server in a thread of the operator process, then the operator itself."""
    split = argv.index("--")
    from gpu_auditor.controller.main import main as operator_main
    from gpu_auditor.webhook.main import build, parse_args

    server = build(parse_args(argv[:split]))
    threading.Thread(target=server.serve_forever, daemon=True, name="webhook").start()
    sys.exit(operator_main(argv[split + 1:]))


# -- the rounds ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client as kclient

    from devtools.localcluster import LocalCluster
    from devtools.localcluster.components import OperatorProcess
    from devtools.localcluster.process import free_port
    from tests.integration.webhook_support import (
        WebhookProcess,
        chart_configurations,
        make_tls,
    )

    rounds: dict[str, Any] = {}
    with LocalCluster() as cluster:
        work = cluster.workdir
        crd = ROOT / "charts/gpu-auditor/crds/gpunodereports.gpu-auditor.io.yaml"
        cluster.apply_yaml(crd.read_text())  # the operator waits for it
        cluster.wait_for_crd("gpunodereports.gpu-auditor.io")
        tls = make_tls(work / "webhook-tls")
        api = Client(cluster)
        create_namespace(api, "churn", {"gpu-auditor.io/alloc-conf-check": "off"})
        assert cluster.pki is not None
        churner = subprocess.Popen([
            sys.executable, __file__, "--churn-only", str(args.churn), cluster.server,
            str(cluster.pki.ca_cert), str(cluster.pki.admin_cert), str(cluster.pki.admin_key),
            str(cluster.api_port)])
        admission = kclient.AdmissionregistrationV1Api(cluster.api_client())

        def register(url: str) -> list[str]:
            names = []
            for config in chart_configurations(cluster, url, tls.ca_pem,
                                               "webhook.probeInjection.enabled=false"):
                config["metadata"]["name"] += f"-{uuid.uuid4().hex[:6]}"
                admission.create_validating_webhook_configuration(config)
                names.append(config["metadata"]["name"])
            wait_registered(api)
            return names

        def unregister(names: list[str]) -> None:
            for name in names:
                admission.delete_validating_webhook_configuration(name)
            time.sleep(2)  # the API server's informer drops it

        def one_round(mode: str, latencies: list[float]) -> dict[str, int]:
            ns = f"bench-{mode}-{uuid.uuid4().hex[:6]}"
            create_namespace(api, ns)
            names: list[str] = []
            server = None
            if mode == "in-operator":
                port = free_port()
                operator = cluster.add_component(f"operator-with-webhook-{ns}", [
                    sys.executable, __file__, "--serve-in-operator",
                    "--bind-address=127.0.0.1", f"--port={port}",
                    f"--cert-file={tls.cert_file}", f"--key-file={tls.key_file}",
                    "--metrics-port=0", "--",
                    f"--kubeconfig={cluster.kubeconfig}", "--metrics-port=0",
                    f"--liveness-port={free_port()}"])
                time.sleep(args.settle)
                names = register(f"https://127.0.0.1:{port}")
            else:
                op = OperatorProcess(cluster, "--metrics-port=0", name=f"operator-{ns}")
                op.start()
                operator = op.component
                if mode in ("deployment", "direct"):
                    server = WebhookProcess(tls, work / "webhook.log", "--metrics-port=0")
                    server.start()
                if mode == "deployment" and server is not None:
                    names = register(server.url)
                time.sleep(args.settle)
            client = Client(cluster, server.port, tls.ca_pem) if mode == "direct" and \
                server is not None else api
            counted = measure(client, ns, args.rate, args.seconds, args.warmup, latencies,
                              direct=mode == "direct")
            pid = server.process.pid if server is not None and server.process else (
                operator.proc.pid if mode == "in-operator" and operator.proc else None)
            if pid is not None:
                counted["rss_kib"] = rss_kib(pid)
            if names:
                unregister(names)
            operator.stop()
            if server is not None:
                server.stop()
            return counted

        samples: dict[str, list[float]] = {mode: [] for mode in args.modes}
        counts: dict[str, list[dict[str, int]]] = {mode: [] for mode in args.modes}
        order = list(args.modes)
        try:
            for repeat in range(args.repeat):
                for mode in order[repeat % len(order):] + order[:repeat % len(order)]:
                    counts[mode].append(one_round(mode, samples[mode]))
                    print(mode, repeat, json.dumps(counts[mode][-1]),
                          json.dumps(summary(samples[mode], counts[mode])), flush=True)
            for mode in args.modes:
                rounds[mode] = summary(samples[mode], counts[mode])
        finally:
            churner.kill()
            churner.wait()
    return rounds


def wait_registered(api: Client, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    create_namespace(api, ns := f"ready-{uuid.uuid4().hex[:6]}")
    while time.monotonic() < deadline:
        _, headers, _ = api.request(
            "POST", f"/apis/apps/v1/namespaces/{ns}/deployments?dryRun=All", deployment("r"))
        if "gpu-auditor: " in headers.get("Warning", ""):
            return
        time.sleep(0.2)
    raise SystemExit("the webhook was not called within 30 s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--churn-only":
        rate, _server, ca, cert, key, port = sys.argv[2:8]
        churn(_server, ca, cert, key, int(port), float(rate))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-in-operator":
        serve_in_operator(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="creates per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per round")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--churn", type=float, default=5.0, help="OOMKilled pods per second")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds between the operator's start and the measurement")
    parser.add_argument("--modes", nargs="+",
                        default=["baseline", "deployment", "in-operator", "direct"])
    parser.add_argument("--repeat", type=int, default=2, help="rounds per mode, rotated")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    rounds = run(args)
    base = rounds.get("baseline")
    result = {
        "command": "python " + " ".join(["bench/admission_latency.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "note": "shared 2-core machine; other engineers' jobs ran meanwhile"},
        "settings": {"rate_per_s": args.rate, "seconds_per_round": args.seconds,
                     "repeat": args.repeat, "churn_per_s": args.churn},
        "rounds": rounds,
        "added_ms": {mode: {q: round(r[q] - base[q], 2) for q in ("p50_ms", "p99_ms")}
                     for mode, r in rounds.items()
                     if base and mode not in ("baseline", "direct")},
    }
    print(json.dumps(result, indent=2))
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "admission_latency.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "admission_latency.md").write_text(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Admission latency: the validating webhook on the API server's round trip",
        "",
        f"Command: `{result['command']}` ({result['date']}, {result['machine']['cpus']} CPUs, "
        f"{result['machine']['note']}). Settings: {json.dumps(result['settings'])}.",
        "",
        "| mode | requests | warned | late sends | p50 ms | p90 ms | p99 ms | max ms | "
        "added p50 ms | added p99 ms | server RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in result["rounds"].items():
        added = result["added_ms"].get(mode, {})
        lines.append(
            f"| {mode} | {r['requests']} | {r['warned']} | {r['late_sends']} | "
            f"{r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} | "
            f"{added.get('p50_ms', '')} | {added.get('p99_ms', '')} | "
            f"{r.get('server_rss_mib_max', '')} |")
    lines += ["", "`direct` is the webhook alone (no API server in the path); `added` is a "
              "mode's figure minus the baseline's, both pooled over the rotated rounds.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
