"""A real Prometheus scrapes the agent on its fake node and evaluates the chart's alert rules;
every PromQL expression of the dashboard and the rules must run, and the dashboard's panels
must show data. A static target shaped as NVIDIA dcgm-exporter renders its series (the fake
node's GPUs, its host label `Hostname`) stands beside it, with the dcgm interop recording rules
loaded, so the dashboard's dcgm row and the interop rules run on real Prometheus too.

The agent runs on examples/fake-node (fake NVML, fake /proc, fake pods and kubelet). No operator
runs here, so queries over the operator's metrics alone (diagnoses, sharing findings annotated,
log fetch failures, diagnosis latency, the operator's `up`) are accepted with no data: they must
still run without error. Prometheus is Debian's `prometheus` package (scripts/install-tools.sh).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.localcluster.cluster import http_ok
from devtools.localcluster.process import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-auditor"
RULES = CHART / "files" / "prometheus-rules.yaml"
INTEROP_RULES = CHART / "files" / "dcgm-interop-rules.yaml"
DASHBOARD = CHART / "files" / "dashboards" / "gpu-auditor.json"
FAKE_NODE = ROOT / "examples" / "fake-node"

# What Grafana sends for its variables with "All" selected.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                     "$node": ".*", "$uuid": ".*", "$namespace": ".*",
                     "$cluster": ".*", "$job": ".+", "$instance": ".+"}
OPERATOR_METRICS = {"gpu_auditor_diagnoses_total", "gpu_auditor_sharing_findings_total",
                    "gpu_auditor_operator_log_fetch_failures_total",
                    "gpu_auditor_operator_diagnosis_latency_seconds_bucket",
                    "gpu_auditor_operator_diagnosis_latency_seconds_count",
                    "gpu_auditor_recommendation_outcomes_total"}
MIB = 2**20


def dcgm_exposition() -> bytes:
    """The fake node's GPUs as dcgm-exporter 4.x renders them (gpu, UUID, pci_bus_id, device,
    modelName, Hostname, then its Labels), values in MiB: what a cluster with both runs."""
    fake = yaml.safe_load((FAKE_NODE / "nvml.yaml").read_text())
    node = yaml.safe_load((FAKE_NODE / "pods.yaml").read_text())["node"]["name"]
    lines = []
    for field, help_text in (("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
                             ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")):
        lines += [f"# HELP {field} {help_text}", f"# TYPE {field} gauge"]
        for gpu in fake["gpus"]:
            used = sum(p["usedBytes"] for p in gpu["processes"]) // MIB
            value = used if field == "DCGM_FI_DEV_FB_USED" else 40 + 10 * gpu["index"]
            lines.append(
                f'{field}{{gpu="{gpu["index"]}",UUID="{gpu["uuid"]}",pci_bus_id="00000000:'
                f'{0x18 + gpu["index"]:02x}:00.0",device="nvidia{gpu["index"]}",'
                f'modelName="{gpu["model"]}",Hostname="{node}",'
                f'DCGM_FI_DRIVER_VERSION="570.86.15"}} {value}')
    return ("\n".join(lines) + "\n").encode()


@contextlib.contextmanager
def serving(body: bytes) -> Iterator[int]:
    """A static /metrics on a free loopback port, in a thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Prometheus:
    url: str
    log: Path

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as err:  # 400 carries the parse error as JSON
            return json.load(err)

    def query(self, expr: str) -> dict[str, Any]:
        return dict(self.api("/api/v1/query", query=expr))


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wait(predicate: Any, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; log tail:\n{_tail(log)}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        message = ("prometheus not found (Debian package `prometheus`; "
                   "run scripts/install-tools.sh)")
        if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    work = tmp_path_factory.mktemp("prometheus")
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    agent_port, prom_port = free_port(), free_port()
    agent_log, prom_log = work / "agent.log", work / "prometheus.log"
    agent_argv = [sys.executable, "-m", "node_agent",
                  "--nvml-fake", str(FAKE_NODE / "nvml.yaml"),
                  "--proc-root", str(FAKE_NODE / "proc"),
                  "--bind-address", "127.0.0.1", "--port", str(agent_port),
                  "--interval", "1", "--no-report"]
    dcgm = contextlib.ExitStack()
    dcgm_port = dcgm.enter_context(serving(dcgm_exposition()))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES), str(INTEROP_RULES)],
        "scrape_configs": [{"job_name": "gpu-auditor-agent",
                            "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
                           {"job_name": "nvidia-dcgm-exporter",
                            "static_configs": [{"targets": [f"127.0.0.1:{dcgm_port}"]}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom_argv = [binary, f"--config.file={work / 'prometheus.yml'}",
                 f"--storage.tsdb.path={work / 'data'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with agent_log.open("wb") as alog, prom_log.open("wb") as plog:
            procs.append(subprocess.Popen(agent_argv, cwd=ROOT, env=env, stdout=alog,
                                          stderr=subprocess.STDOUT))
            _wait(lambda: http_ok(f"http://127.0.0.1:{agent_port}/healthz"), 30,
                  "the agent's /healthz", agent_log)
            procs.append(subprocess.Popen(prom_argv, cwd=work, env=env, stdout=plog,
                                          stderr=subprocess.STDOUT))
        prom = Prometheus(f"http://127.0.0.1:{prom_port}", prom_log)
        _wait(lambda: http_ok(f"{prom.url}/-/ready"), 30, "Prometheus ready", prom_log)

        def scraped_a_few_times() -> bool:
            result = prom.query('count_over_time(up{job="gpu-auditor-agent"}[1m])')
            samples = result["data"]["result"]
            return bool(samples) and float(samples[0]["value"][1]) >= 4

        _wait(scraped_a_few_times, 45, "four scrapes of the agent", prom_log)
        yield prom
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        dcgm.close()


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every dashboard target and variable query."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for p in (panel, *panel.get("panels", [])):
            out += [(p["title"], t["expr"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*), *\w+\)", variable["definition"])
            assert match, variable["definition"]
            out.append((f"variable {variable['name']}", match.group(1)))
    return out


def to_promql(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return expr


def operator_only(expr: str) -> bool:
    names = set(re.findall(r"\bgpu_auditor_[a-z0-9_]+", expr))
    return bool(names) and names <= OPERATOR_METRICS


def rule_expressions() -> list[tuple[str, str]]:
    groups = [g for f in (RULES, INTEROP_RULES) for g in yaml.safe_load(f.read_text())["groups"]]
    return [(r.get("alert") or r["record"], r["expr"]) for g in groups for r in g["rules"]]


def test_every_dashboard_panel_query_runs_and_agent_panels_show_data(
    prometheus: Prometheus,
) -> None:
    empty_operator_panels = []
    for title, expr in dashboard_queries():
        result = prometheus.query(to_promql(expr))
        assert result["status"] == "success", f"{title}: {expr}\n{result}"
        if result["data"]["result"]:
            continue
        assert operator_only(expr), f"panel {title!r} shows no data: {expr}"
        empty_operator_panels.append(title)
    # Exactly the operator's panels may be empty here (no operator runs in this test).
    assert set(empty_operator_panels) == {
        "CUDA OOM diagnoses by kind", "Diagnoses in the selected range",
        "Sharing findings annotated", "Diagnosis latency", "Log fetch failures", "Operator up",
        "Recommendation precision", "Recommendation outcomes",
        "Outcomes by setting in the selected range",
    }


def test_every_rule_expression_runs(prometheus: Prometheus) -> None:
    for name, expr in rule_expressions():
        result = prometheus.query(expr)
        assert result["status"] == "success", f"{name}: {result}"


def test_the_dcgm_interop_rules_join_the_two_exporters_on_a_real_prometheus(
    prometheus: Prometheus,
) -> None:
    """Our used bytes and dcgm's (MiB x 1048576) agree GPU by GPU once both are on our keys;
    our per-pod series carry dcgm's keys and join DCGM_FI_DEV_FB_USED."""
    fake = yaml.safe_load((FAKE_NODE / "nvml.yaml").read_text())

    def diff() -> dict[str, float]:
        result = prometheus.query("gpu_auditor_gpu_memory_used_bytes - on (node, gpu) "
                                  "group_left () gpu_auditor:dcgm_fb_used_bytes")
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in result["data"]["result"]}

    _wait(lambda: len(diff()) == len(fake["gpus"]), 20, "the interop rules", prometheus.log)
    for gpu, gap in diff().items():
        assert abs(gap) < MIB, f"GPU {gpu}: ours and dcgm's differ by {gap} bytes"
    shares = prometheus.query(
        "gpu_auditor:container_gpu_memory_mib:dcgm_labels / on (Hostname, gpu, GPU_I_ID) "
        "group_left () max by (Hostname, gpu, GPU_I_ID) (DCGM_FI_DEV_FB_USED)")["data"]["result"]
    pods = {r["metric"].get("pod", "") for r in shares}  # "": host processes
    assert {"trainer-0", "notebook-1"} <= pods
    assert all(0 < float(r["value"][1]) <= 1 for r in shares)


def test_prometheus_loads_and_evaluates_every_rule_without_error(prometheus: Prometheus) -> None:
    def evaluated() -> list[dict[str, Any]]:
        groups = prometheus.api("/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if all(r.get("lastEvaluation", "").startswith("2") for r in rules) else []

    _wait(lambda: bool(evaluated()), 20, "every rule evaluated", prometheus.log)
    rules = evaluated()
    assert {r["name"] for r in rules} == {name for name, _ in rule_expressions()}
    for rule in rules:
        assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"


def test_the_fake_node_s_sharing_and_unrequested_use_raise_their_alerts(
    prometheus: Prometheus,
) -> None:
    """examples/fake-node: ml/notebook-1 uses GPU 0 without a request, beside ml/trainer-0."""

    def pending() -> set[tuple[str, str, str]]:
        alerts = prometheus.api("/api/v1/alerts")["data"]["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("namespace", ""),
                 a["labels"].get("pod", "")) for a in alerts}

    expected = {
        ("GPUUnintendedSharing", "ml", "trainer-0"),
        ("GPUUnintendedSharing", "ml", "notebook-1"),
        ("GPUUsedWithoutRequest", "ml", "notebook-1"),
    }
    _wait(lambda: expected <= pending(), 20, f"alerts {expected}", prometheus.log)
    assert pending() == expected
