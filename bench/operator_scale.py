"""The operator at scale: N running pods on kwok nodes, a burst of OOMKills, latency/RSS/requests.

On a local control plane (etcd + kube-apiserver + kwok; no scheduler: pods are bound with
``spec.nodeName``) this script creates N running pods on fake nodes, then, on the same cluster and
the same N, runs rounds of two operators one after the other:

- ``ours``: ``python -m gpu_auditor.controller.main`` (the real operator: fresh GET, diagnosis,
  Event, annotations), and
- ``baseline``: ``bench/baseline_operator.py``, kopf's floor for the same job (one async
  ``on.event`` handler that patches one annotation through kopf, kopf's default settings).

A round starts the operator, waits for its initial listing (the API server has answered its pod
LIST and the operator's CPU has been quiet for 2 s), then patches B fresh running pods at once
onto kwok's ``pod-container-running-failed`` stage (reason OOMKilled, exit code 137, 300 ms
delay). A watch on those pods in this process records, per pod, when it first sees the container
terminated and when it first sees the ``gpu-auditor.io/diagnosis`` annotation: the difference is
the latency. Each round then stops the operator, deletes the burst's pods and creates fresh
running ones, so every round starts against N running, never-failed pods. ``--repeat`` rounds
per operator and N, in alternating order; latencies are pooled over the rounds. Also measured:

- the operator's RSS (VmRSS from /proc, what psutil reads) after its listing, its peak during the
  burst (sampled every 100 ms) and VmHWM (peak since start, the listing included);
- for ours, ``gpu_auditor_operator_api_requests_total{verb}`` over the burst divided by
  ``gpu_auditor_diagnoses_total`` (kopf's own LIST/WATCH are not in that counter), and the
  ``gpu_auditor_operator_diagnosis_latency_seconds`` histogram as a cross-check (it measures
  from the
  container's ``finishedAt``, which the API serves in whole seconds: it reads up to 1 s high);
- for both, the API server's ``apiserver_request_total`` over the burst for pods and events,
  less this script's own B label patches (kwok's status patches are a subresource, kept apart);
- where the time goes: the API server's audit log (Metadata level, pods and events of the bench
  namespace) times every request of the burst, so each pod's path is split into kwok's status
  patch -> the operator's first request (watch delivery, kopf's queue, the handler thread pool)
  -> GET -> POST Event -> PATCH -> this script's watch seeing the annotation.

    .venv/bin/python bench/operator_scale.py            # N = 1,000 and 5,000; writes bench/results/
    .venv/bin/python bench/operator_scale.py --quick    # N = 200, 1 round each, prints only

Two builds of the operator side by side (issue 12: before and after `kubernetes` left the
operator's install): `--variants ours before`, with `--ours-python`/`--ours-tree` and
`--before-python`/`--before-tree` naming the interpreter (its virtual environment decides what
is installed) and the source tree each runs; `--out-name` keeps the default results file.

Grouped (issue 27, `--grouped`): the running pods are distributed jobs' pods, laid out as the
Kubeflow Trainer lays out a TrainJob's JobSet: per 16 pods a JobSet (the real CRD, from its Go
module: `devtools.localcluster.crds`) owning one Indexed Job of 16 completions, each pod owned by
the Job with the labels JobSet and the Job controller set (no controller runs: the objects are
created as they would make them). A burst fails one pod of each of `--burst` JobSets, so each
OOMKill is also a group's root cause that the operator verifies (a GET of the Job and of the
JobSet) and writes on the JobSet with one Event there, after the pod's own annotation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path[:0] = [str(REPO / "operator"), str(REPO)]  # gpu_auditor; devtools (not installed)

from kubernetes import client  # noqa: E402
from kubernetes.watch.watch import iter_resp_lines  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from devtools.localcluster import LocalCluster  # noqa: E402
from devtools.localcluster.cluster import http_ok  # noqa: E402
from devtools.localcluster.components import OperatorProcess, install_crds  # noqa: E402
from devtools.localcluster.crds import JOBSET, crd_file  # noqa: E402
from devtools.localcluster.process import ClusterError, free_port  # noqa: E402

NAMESPACE = "bench"
KEY = "gpu-auditor.io/diagnosis"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
BURST_LABEL = "bench.gpu-auditor.io/burst"
USER_AGENT = "operator-scale-bench"
MIB = 2**20
WORKERS = 8
"""Threads creating, patching and deleting pods (the API server and kwok share the cores)."""
QUIET_S = 2.0
"""The operator's listing is over once its CPU has stayed under 10% of a core this long."""
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  namespaces: [{NAMESPACE}]
  verbs: [get, patch, create, update]
  resources: [{{group: "", resources: [pods, pods/status, events]}}]
- level: None
"""
LATENCY = "gpu_auditor_operator_diagnosis_latency_seconds"
REQUESTS = "gpu_auditor_operator_api_requests_total"


class AuditedCluster(LocalCluster):
    """The local control plane with the API server's audit log on (blocking file backend)."""

    def _apiserver_argv(self) -> list[str]:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [*super()._apiserver_argv(), f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=0"]

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"


# ---- the fleet of pods -------------------------------------------------------------------------


def pod_body(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "bench-worker"}},
        "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "trainer:latest",
                "resources": {"limits": {"memory": "2Gi", "nvidia.com/gpu": "1"},
                              "requests": {"memory": "1Gi", "nvidia.com/gpu": "1"}},
            }],
        },
    }


def parallel(fn: Callable[[str], object], items: Iterable[str]) -> None:
    with ThreadPoolExecutor(WORKERS) as pool:
        for _ in pool.map(fn, items):
            pass


GROUP_SIZE = 16
"""Pods per distributed job in the grouped fleet (`--grouped`)."""


class Fleet:
    """N running pods spread over kwok nodes; burst pods are taken once and replaced after."""

    def __init__(self, cluster: LocalCluster, nodes: int, *, grouped: bool = False) -> None:
        self.cluster = cluster
        api = cluster.api_client()
        api.user_agent = USER_AGENT  # told apart from the operators' requests in the audit log
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.nodes = [f"kwok-{i:03d}" for i in range(nodes)]
        self.fresh: list[str] = []
        self.created = 0
        self.deleted = 0
        self.grouped = grouped
        self.jobs: dict[int, tuple[str, str, str]] = {}
        """Group -> (JobSet UID, Job name, Job UID), in the grouped fleet."""
        self.burst_groups: set[int] = set()

    @property
    def running_target(self) -> int:
        return self.created - self.deleted

    def setup(self) -> None:
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        if self.grouped:
            self.cluster.apply_yaml(crd_file(JOBSET).read_text())
            self.cluster.wait_for_crd(JOBSET.name)
        for node in self.nodes:
            self.cluster.create_node(node, gpus=8, wait_ready=False)
        self.cluster.wait(self._nodes_ready, 120, "kwok nodes Ready")

    def _nodes_ready(self) -> bool:
        items = json.loads(self.core.list_node(_preload_content=False).data)["items"]
        ready = sum(1 for n in items for c in n["status"].get("conditions") or []
                    if c["type"] == "Ready" and c["status"] == "True")
        return ready >= len(self.nodes)

    def grow(self, count: int) -> float:
        """Create `count` pods (round-robin over the nodes), wait until all run; seconds taken."""
        start = time.monotonic()
        names = [f"w-{self.created + i:05d}" for i in range(count)]
        self.created += count

        def create(name: str) -> None:
            number = int(name[2:])
            node = self.nodes[number % len(self.nodes)]
            body = pod_body(name, node)
            if self.grouped:
                body = self.member(body, number // GROUP_SIZE, number % GROUP_SIZE)
            self.core.create_namespaced_pod(NAMESPACE, body, _preload_content=False)

        if self.grouped:
            groups = sorted({int(n[2:]) // GROUP_SIZE for n in names} - set(self.jobs))
            parallel(lambda g: self.make_job(int(g)), [str(g) for g in groups])
        parallel(create, names)
        self.fresh.extend(names)
        self.cluster.wait(lambda: not self._not_running(), 600, f"{count} pods Running",
                          interval=1.0)
        return time.monotonic() - start

    def _not_running(self) -> int:
        data = self.core.list_namespaced_pod(
            NAMESPACE, field_selector="status.phase!=Running", _preload_content=False).data
        return len(json.loads(data)["items"])

    def _count(self) -> int:
        data = self.core.list_namespaced_pod(NAMESPACE, _preload_content=False).data
        return len(json.loads(data)["items"])

    def make_job(self, group: int) -> None:
        """A TrainJob-like JobSet `js-<group>` and its one Indexed Job of GROUP_SIZE pods, as
        the JobSet controller creates the Job (controller reference, labels)."""
        name = f"js-{group:04d}"
        jobset = self.custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets",
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": name}, "spec": {"replicatedJobs": []}})
        uid = jobset["metadata"]["uid"]
        labels = self.jobset_labels(name, uid)
        job = f"{name}-node-0"
        created = self.batch.create_namespaced_job(NAMESPACE, {
            "metadata": {"name": job, "labels": labels, "annotations": labels,
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                              "kind": "JobSet", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"completions": GROUP_SIZE, "parallelism": GROUP_SIZE,
                     "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"restartPolicy": "Never", "containers": [
                                      {"name": "main", "image": "trainer:latest"}]}}},
        }, _preload_content=False)
        self.jobs[group] = (uid, job, json.loads(created.data)["metadata"]["uid"])

    @staticmethod
    def jobset_labels(name: str, uid: str) -> dict[str, str]:
        return {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": uid,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
                "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-global-index": "0",
                "jobset.sigs.k8s.io/restart-attempt": "0"}

    def member(self, body: dict[str, Any], group: int, index: int) -> dict[str, Any]:
        """`body` as the Job controller makes the pod of completion index `index`."""
        jobset_uid, job, job_uid = self.jobs[group]
        meta = body["metadata"]
        meta["labels"] = {**meta["labels"], **self.jobset_labels(f"js-{group:04d}", jobset_uid),
                          "batch.kubernetes.io/controller-uid": job_uid,
                          "controller-uid": job_uid, "batch.kubernetes.io/job-name": job,
                          "job-name": job,
                          "batch.kubernetes.io/job-completion-index": str(index),
                          # kwok completes a Job's pod at once (its pod-complete stage) unless
                          # it carries the failure stage's label; "false" keeps it running
                          CHAOS: "false"}
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                    "uid": job_uid, "controller": True,
                                    "blockOwnerDeletion": True}]
        return body

    def wait_jobs_annotated(self, names: list[str], terminated: dict[str, float],
                            timeout: float = 90.0) -> dict[str, float]:
        """Burst pod -> when this process first saw its JobSet name it as the root cause
        (`root-cause-pod`), polling the JobSets every 0.2 s (the operator decides a group 2 s
        after its last failure, off the burst's path)."""
        wanted = {f"js-{int(n[2:]) // GROUP_SIZE:04d}": n for n in names}
        seen: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while len(seen) < len(wanted) and time.monotonic() < deadline:
            listed = json.loads(self.custom.list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets",
                _preload_content=False).data)["items"]
            now = time.monotonic()
            for item in listed:
                name = item["metadata"]["name"]
                notes = item["metadata"].get("annotations") or {}
                if name in wanted and wanted[name] not in seen and notes.get(
                        "gpu-auditor.io/root-cause-pod") == f"{NAMESPACE}/{wanted[name]}":
                    seen[wanted[name]] = now
            time.sleep(0.2)
        return seen

    def take(self, count: int) -> list[str]:
        if not self.grouped:
            taken, self.fresh = self.fresh[:count], self.fresh[count:]
            return taken
        taken = []  # one pod of each of `count` jobs no burst has failed yet
        for name in self.fresh:
            group = int(name[2:]) // GROUP_SIZE
            if group not in self.burst_groups and len(taken) < count:
                taken.append(name)
                self.burst_groups.add(group)
        self.fresh = [n for n in self.fresh if n not in set(taken)]
        if len(taken) < count:
            raise RuntimeError(f"only {len(taken)} jobs left that no burst has failed")
        return taken

    def replace(self, names: list[str]) -> None:
        """Delete the burst's pods (grace 0: gone at once) and grow back to the same N."""
        parallel(lambda name: self.core.delete_namespaced_pod(
            name, NAMESPACE, grace_period_seconds=0, _preload_content=False), names)
        self.deleted += len(names)
        self.cluster.wait(lambda: self._count() == self.running_target, 60, "burst pods gone")
        self.grow(len(names))


# ---- the operator processes --------------------------------------------------------------------


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


LAUNCH: dict[str, tuple[str, Path]] = {}
"""variant -> (python, source tree) for an operator run from another interpreter or tree."""


class Operator:
    """Ours (OperatorProcess) or the baseline: a child process with a pid and, for ours, metrics."""

    def __init__(self, cluster: LocalCluster, variant: str, name: str) -> None:
        self.variant = variant
        self.ours: OperatorProcess | None = None
        self.metrics_url: str | None = None
        if variant in LAUNCH:
            python, tree = LAUNCH[variant]
            metrics_port, self.liveness_port = free_port(), free_port()
            self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            # -P and -C: the tree's own packages, not the ones of the folder the bench runs in.
            argv = ["env", "-C", str(tree), f"PYTHONPATH={tree / 'operator'}{os.pathsep}{tree}",
                    python, "-P", "-m", "gpu_auditor.controller.main",
                    f"--kubeconfig={cluster.kubeconfig}",
                    f"--metrics-port={metrics_port}", f"--liveness-port={self.liveness_port}"]
            self.component = cluster.add_component(name, argv, start=False)
        elif variant == "ours":
            self.ours = OperatorProcess(cluster, name=name)
            self.component = self.ours.component
            self.liveness_port = self.ours.liveness_port
        else:
            self.liveness_port = free_port()
            argv = [sys.executable, str(REPO / "bench" / "baseline_operator.py"),
                    f"--kubeconfig={cluster.kubeconfig}", f"--liveness-port={self.liveness_port}"]
            self.component = cluster.add_component(name, argv, start=False)

    def start(self) -> None:
        if self.ours is not None:
            self.ours.start(timeout=120)
            return
        self.component.start()
        url = f"http://127.0.0.1:{self.liveness_port}/healthz"
        self.component.wait_until(lambda: http_ok(url), 120, "live")

    @property
    def pid(self) -> int:
        assert self.component.proc is not None
        return self.component.proc.pid

    def metrics(self) -> Samples:
        if self.metrics_url is not None:
            import urllib.request

            with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
                return parse_metrics(r.read().decode())
        return parse_metrics(self.ours.metrics()) if self.ours is not None else {}

    def stop(self) -> None:
        self.component.stop(timeout=20)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in bytes."""
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler(threading.Thread):
    """The highest VmRSS of a process, sampled every `interval` seconds until stop()."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, proc_status(self.pid)["VmRSS"])
            self.stopped.wait(self.interval)

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return max(self.peak, proc_status(self.pid)["VmRSS"])


def wait_listed(cluster: LocalCluster, op: Operator, lists_before: float,
                timeout: float = 300) -> None:
    """Return once the API server answered the operator's pod LIST and its CPU went quiet."""
    start = time.monotonic()
    while apiserver_requests(cluster).get("LIST pods", 0.0) <= lists_before:
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{op.variant}: no pod LIST after {timeout}s")
        time.sleep(0.5)
    quiet_since, last = time.monotonic(), cpu_seconds(op.pid)
    while time.monotonic() - quiet_since < QUIET_S:
        time.sleep(0.5)
        used = cpu_seconds(op.pid)
        if used - last > 0.05:  # more than 10% of a core over the last half second
            quiet_since = time.monotonic()
        last = used
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{op.variant}: still busy after {timeout}s")


# ---- metrics -----------------------------------------------------------------------------------


def parse_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def apiserver_requests(cluster: LocalCluster) -> dict[str, float]:
    """apiserver_request_total for pods and events (and the grouped fleet's jobs and jobsets),
    by `VERB resource[/subresource]`."""
    response = cluster.api_client().call_api("GET", f"{cluster.server}/metrics")
    response.read()
    lines = [line for line in response.data.decode().splitlines()
             if line.startswith("apiserver_request_total{")]
    totals: dict[str, float] = {}
    for (_, labels), value in parse_metrics("\n".join(lines) + "\n").items():
        found = dict(labels)
        if found.get("resource") not in ("pods", "events", "jobs", "jobsets"):
            continue
        key = f"{found['verb']} {found['resource']}"
        if found.get("subresource"):
            key += f"/{found['subresource']}"
        totals[key] = totals.get(key, 0.0) + value
    return totals


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in sorted(after)
            if after[k] - before.get(k, 0.0)}


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (sample, labels), value in samples.items():
        if sample == name:
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + value
    return out


def buckets_delta(after: Samples, before: Samples) -> dict[str, float]:
    """The latency histogram's cumulative buckets over the burst, by `le`."""
    return {dict(labels)["le"]: value - before.get((sample, labels), 0.0)
            for (sample, labels), value in after.items() if sample == f"{LATENCY}_bucket"}


def histogram_quantile(q: float, buckets: dict[str, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets {le: count}."""
    ordered = sorted((float(le), count) for le, count in buckets.items())
    total = ordered[-1][1] if ordered else 0
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = le, count
    return lower


# ---- one burst ---------------------------------------------------------------------------------


def oom_terminated(pod: dict[str, Any]) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if ((status.get("state") or {}).get("terminated") or {}).get("reason") == "OOMKilled":
            return True
    return False


class BurstWatch(threading.Thread):
    """Our own watch on the burst's pods: first sight of the OOMKill and of the annotation."""

    def __init__(self, core: client.CoreV1Api, burst: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.core, self.expected = core, expected
        self.selector = f"{BURST_LABEL}={burst}"
        self.terminated: dict[str, float] = {}
        self.annotated: dict[str, float] = {}
        self.annotated_wall: dict[str, float] = {}
        self.done = threading.Event()
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=self.selector,
                                          _preload_content=False)
        self.resource_version = json.loads(listed.data)["metadata"]["resourceVersion"]
        self.response: Any = None

    def run(self) -> None:
        try:
            self.response = self.core.list_namespaced_pod(
                NAMESPACE, label_selector=self.selector, watch=True,
                resource_version=self.resource_version, timeout_seconds=900,
                _preload_content=False)
            for line in iter_resp_lines(self.response):
                now, wall = time.monotonic(), time.time()
                pod = json.loads(line)["object"]
                name = pod["metadata"]["name"]
                if name not in self.terminated and oom_terminated(pod):
                    self.terminated[name] = now
                if name not in self.annotated and KEY in (pod["metadata"].get("annotations")
                                                          or {}):
                    self.annotated[name], self.annotated_wall[name] = now, wall
                if len(self.annotated) >= self.expected:
                    break
        finally:
            self.done.set()

    def close(self) -> None:
        if self.response is not None:
            self.response.close()


def fail_pods(core: client.CoreV1Api, names: list[str], burst: str) -> None:
    """Put each pod on kwok's failure stage: OOMKilled, exit code 137, after 300 ms."""
    body = {"metadata": {
        "labels": {CHAOS: "true", BURST_LABEL: burst},
        "annotations": {f"{CHAOS}/reason": "OOMKilled", f"{CHAOS}/exit-code": "137",
                        f"{CHAOS}/message": "OOMKilled", f"{CHAOS}/delay": "300ms",
                        f"{CHAOS}/jitter-delay": "300ms"},
    }}
    parallel(lambda name: core.patch_namespaced_pod(name, NAMESPACE, body,
                                                    _preload_content=False), names)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = math.ceil(len(ordered) * q / 100)
    return ordered[min(max(rank, 1), len(ordered)) - 1]


# ---- where the time goes: the audit log --------------------------------------------------------


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def audit_requests(path: Path, offset: int, names: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The audit log's requests since `offset` on the burst's pods (and their Events), by pod."""
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with path.open() as log:
        log.seek(offset)
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            name = str(ref.get("name") or "")
            pod = name.split(".gpu-auditor.")[0] if ref.get("resource") == "events" else name
            if pod not in found:
                continue
            agent = str(event.get("userAgent") or "")
            found[pod].append({
                "what": f"{event['verb']} {ref.get('resource')}"
                        + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                "by": "bench" if agent.startswith(USER_AGENT) else
                      "kwok" if ref.get("subresource") == "status" else "operator",
                "received": _ts(event["requestReceivedTimestamp"]),
                "done": _ts(event["stageTimestamp"]),
            })
    return found


def breakdown(requests: dict[str, list[dict[str, Any]]],
              seen: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per step of each pod's path, p50 and p99 in ms over the burst's pods."""
    steps: dict[str, list[float]] = {}

    def add(step: str, seconds: float) -> None:
        steps.setdefault(step, []).append(seconds * 1000)

    for pod, calls in requests.items():
        status = next((c for c in calls if c["by"] == "kwok"), None)
        mine = [c for c in calls if c["by"] == "operator"]
        if status is None or not mine or pod not in seen:
            continue
        previous, label = status["done"], "kwok status PATCH"
        for call in sorted(mine, key=lambda c: c["received"]):
            add(f"{label} done -> {call['what']} received", call["received"] - previous)
            add(f"{call['what']} (server)", call["done"] - call["received"])
            previous, label = call["done"], call["what"]
        add(f"{label} done -> annotation seen by the bench watch", seen[pod] - previous)
        add("total: kwok status PATCH done -> annotation seen", seen[pod] - status["done"])
    return {step: {"p50_ms": round(percentile(v, 50), 1), "p99_ms": round(percentile(v, 99), 1),
                   "n": len(v)} for step, v in steps.items()}


# ---- one round ---------------------------------------------------------------------------------


def run_round(cluster: AuditedCluster, fleet: Fleet, variant: str, n: int, rep: int,
              burst_size: int, burst_timeout: float) -> dict[str, Any]:
    for attempt in range(3):  # the machine is shared: a free port may be taken meanwhile
        op = Operator(cluster, variant, f"{variant}-{n}-{rep}" + (f"-{attempt}" if attempt
                                                                 else ""))
        lists_before = apiserver_requests(cluster).get("LIST pods", 0.0)
        started = time.monotonic()
        try:
            op.start()
            break
        except ClusterError as exc:
            if "already in use" not in str(exc) or attempt == 2:
                raise
            print(f"# {variant}: a port was taken meanwhile; starting it again", flush=True)
    try:
        wait_listed(cluster, op, lists_before)
        listing_s = time.monotonic() - started - QUIET_S
        after_listing = proc_status(op.pid)
        cpu_listing = cpu_seconds(op.pid)
        names = fleet.take(burst_size)
        watch = BurstWatch(fleet.core, f"{variant}-{n}-{rep}", len(names))
        ours_before, api_before = op.metrics(), apiserver_requests(cluster)
        audit_offset = cluster.audit_log.stat().st_size
        sampler = RssSampler(op.pid)
        sampler.start()
        watch.start()
        fail_pods(fleet.core, names, f"{variant}-{n}-{rep}")
        watch.done.wait(burst_timeout)
        watch.close()
        jobs_seen = fleet.wait_jobs_annotated(names, watch.terminated) if (
            fleet.grouped and variant == "ours") else {}
        time.sleep(1.0)  # let the last requests land in the counters
        peak = sampler.stop()
        ours_after, api_after = op.metrics(), apiserver_requests(cluster)
        end = proc_status(op.pid)
        cpu_burst = cpu_seconds(op.pid) - cpu_listing
    finally:
        op.stop()
    fleet.replace(names)

    latencies = [watch.annotated[p] - watch.terminated[p] for p in names
                 if p in watch.annotated and p in watch.terminated]
    api = delta(api_after, api_before)
    writes = {k: v for k, v in api.items()
              if k.split()[0] not in ("LIST", "WATCH") and "/status" not in k}
    writes["PATCH pods"] = writes.get("PATCH pods", 0.0) - len(names)  # our label patches
    row: dict[str, Any] = {
        "variant": variant, "n": n, "rep": rep, "burst": len(names),
        "terminated_seen": len(watch.terminated), "annotated_seen": len(watch.annotated),
        "listing_s": round(listing_s, 2), "listing_cpu_s": round(cpu_listing, 2),
        "latencies_ms": sorted(round(s * 1000, 1) for s in latencies),
        "job_latencies_ms": sorted(round((jobs_seen[p] - watch.terminated[p]) * 1000, 1)
                                   for p in names if p in jobs_seen and p in watch.terminated),
        "rss_after_listing_mib": round(after_listing["VmRSS"] / MIB, 1),
        "rss_peak_burst_mib": round(peak / MIB, 1),
        "rss_hwm_mib": round(end["VmHWM"] / MIB, 1),
        "burst_cpu_s": round(cpu_burst, 2),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "apiserver_requests_over_burst": api,
        "operator_requests_apiserver": {k: v for k, v in writes.items() if v},
        "breakdown": breakdown(audit_requests(cluster.audit_log, audit_offset, set(names)),
                               watch.annotated_wall),
    }
    if variant in ("ours", "before"):
        row["api_requests_by_verb"] = delta(by_label(ours_after, REQUESTS, "verb"),
                                            by_label(ours_before, REQUESTS, "verb"))
        row["api_requests_during_listing"] = sum(by_label(ours_before, REQUESTS,
                                                          "verb").values())
        row["diagnoses"] = sum(delta(by_label(ours_after, "gpu_auditor_diagnoses_total", "kind"),
                                     by_label(ours_before, "gpu_auditor_diagnoses_total",
                                              "kind")).values())
        row["latency_histogram_buckets"] = buckets_delta(ours_after, ours_before)
    lat = row["latencies_ms"]
    print(json.dumps({k: v for k, v in row.items() if k not in ("latencies_ms", "breakdown",
                                                                 "latency_histogram_buckets")}
                     | {"p50_ms": percentile(lat, 50) if lat else None,
                        "p99_ms": percentile(lat, 99) if lat else None}), flush=True)
    return row


# ---- summary and report ------------------------------------------------------------------------


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (N, operator): latencies pooled over the rounds, RSS medians."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        for variant in ("ours", "before", "baseline"):
            mine = [r for r in rows if r["n"] == n and r["variant"] == variant]
            if not mine:
                continue
            lat = [v / 1000 for r in mine for v in r["latencies_ms"]]
            writes: dict[str, float] = {}
            for r in mine:
                for k, v in r["operator_requests_apiserver"].items():
                    writes[k] = writes.get(k, 0.0) + v
            annotated = sum(r["annotated_seen"] for r in mine)
            line: dict[str, Any] = {
                "n": n, "variant": variant, "rounds": len(mine),
                "bursts": sum(r["burst"] for r in mine), "annotated": annotated,
                "latency_p50_s": round(percentile(lat, 50), 3) if lat else None,
                "latency_p99_s": round(percentile(lat, 99), 3) if lat else None,
                "latency_max_s": round(max(lat), 3) if lat else None,
                "latency_mean_s": round(statistics.fmean(lat), 3) if lat else None,
                "job_annotated": sum(len(r.get("job_latencies_ms", [])) for r in mine),
                "job_latency_p50_s": _pct([v / 1000 for r in mine
                                           for v in r.get("job_latencies_ms", [])], 50),
                "job_latency_p99_s": _pct([v / 1000 for r in mine
                                           for v in r.get("job_latencies_ms", [])], 99),
                "rss_after_listing_mib": statistics.median(r["rss_after_listing_mib"]
                                                           for r in mine),
                "rss_peak_burst_mib": statistics.median(r["rss_peak_burst_mib"] for r in mine),
                "rss_peak_burst_range_mib": [min(r["rss_peak_burst_mib"] for r in mine),
                                             max(r["rss_peak_burst_mib"] for r in mine)],
                "rss_hwm_mib": statistics.median(r["rss_hwm_mib"] for r in mine),
                "listing_s": statistics.median(r["listing_s"] for r in mine),
                "loadavg_1m": [min(r["loadavg_1m"] for r in mine),
                               max(r["loadavg_1m"] for r in mine)],
                "apiserver_requests_per_diagnosis": round(sum(writes.values()) / annotated, 2)
                if annotated else None,
                "apiserver_requests": writes,
            }
            if variant in ("ours", "before"):
                verbs: dict[str, float] = {}
                buckets: dict[str, float] = {}
                for r in mine:
                    for k, v in r["api_requests_by_verb"].items():
                        verbs[k] = verbs.get(k, 0.0) + v
                    for k, v in r["latency_histogram_buckets"].items():
                        buckets[k] = buckets.get(k, 0.0) + v
                diagnoses = sum(r["diagnoses"] for r in mine)
                line.update({
                    "diagnoses": diagnoses, "api_requests_by_verb": verbs,
                    "api_requests_per_diagnosis": round(sum(verbs.values()) / diagnoses, 2)
                    if diagnoses else None,
                    "api_requests_during_listing": sum(r["api_requests_during_listing"]
                                                       for r in mine),
                    "histogram_p50_s": histogram_quantile(0.5, buckets),
                    "histogram_p99_s": histogram_quantile(0.99, buckets),
                })
            out.append(line)
    return out


def _pct(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 3) if values else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _get(summary: list[dict[str, Any]], n: int, variant: str) -> dict[str, Any] | None:
    return next((s for s in summary if s["n"] == n and s["variant"] == variant), None)


def table(summary: list[dict[str, Any]]) -> str:
    head = ("| N | ours p50 (s) | ours p99 (s) | ours RSS listed / burst peak (MiB) "
            "| ours API req/diag | baseline p50 (s) | baseline p99 (s) "
            "| baseline RSS listed / burst peak (MiB) | p50 ratio | p99 ratio "
            "| RSS ratio (peak) |\n" + "|---" * 11 + "|\n")
    lines = []
    for n in sorted({s["n"] for s in summary}):
        ours, base = _get(summary, n, "ours"), _get(summary, n, "baseline")
        if ours is None or base is None:
            continue
        lines.append(
            f"| {n:,} | {ours['latency_p50_s']:.3f} | {ours['latency_p99_s']:.3f} "
            f"| {ours['rss_after_listing_mib']:.0f} / {ours['rss_peak_burst_mib']:.0f} "
            f"| {ours['api_requests_per_diagnosis']} "
            f"| {base['latency_p50_s']:.3f} | {base['latency_p99_s']:.3f} "
            f"| {base['rss_after_listing_mib']:.0f} / {base['rss_peak_burst_mib']:.0f} "
            f"| {_ratio(ours['latency_p50_s'], base['latency_p50_s'])} "
            f"| {_ratio(ours['latency_p99_s'], base['latency_p99_s'])} "
            f"| {_ratio(ours['rss_peak_burst_mib'], base['rss_peak_burst_mib'])} |")
    return head + "\n".join(lines) + "\n"


def details(summary: list[dict[str, Any]]) -> str:
    head = ("| N | operator | rounds x burst | annotated | max (s) | mean (s) "
            "| burst peak RSS range (MiB) | VmHWM (MiB) | start -> listed (s) "
            "| API server requests per diagnosis | operator's histogram p50 / p99 (s) "
            "| job object annotated p50 / p99 (s) | load avg 1 min |\n" + "|---" * 13 + "|\n")
    lines = []
    for s in summary:
        hist = "-"
        if s.get("histogram_p50_s") is not None:
            hist = f"{s['histogram_p50_s']:.2f} / {s['histogram_p99_s']:.2f}"
        low, high = s["rss_peak_burst_range_mib"]
        requests = ", ".join(f"{k} {v:.0f}" for k, v in s["apiserver_requests"].items() if v)
        job = "-"
        if s.get("job_latency_p50_s") is not None:
            job = (f"{s['job_latency_p50_s']:.2f} / {s['job_latency_p99_s']:.2f} "
                   f"({s['job_annotated']} jobs)")
        lines.append(
            f"| {s['n']:,} | {s['variant']} | {s['rounds']} x {s['bursts'] // s['rounds']} "
            f"| {s['annotated']} | {s['latency_max_s']} | {s['latency_mean_s']} "
            f"| {low:.0f}-{high:.0f} | {s['rss_hwm_mib']:.0f} | {s['listing_s']:.1f} "
            f"| {s['apiserver_requests_per_diagnosis']} ({requests}) | {hist} | {job} "
            f"| {s['loadavg_1m'][0]:.1f}-{s['loadavg_1m'][1]:.1f} |")
    return head + "\n".join(lines) + "\n"


def steps(rows: list[dict[str, Any]]) -> str:
    """The audit-log breakdown of the last round of each (N, operator)."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        for variant in ("ours", "before", "baseline"):
            mine = [r for r in rows if r["n"] == n and r["variant"] == variant]
            if not mine or not mine[-1]["breakdown"]:
                continue
            out.append(f"N = {n:,}, {variant} (round {mine[-1]['rep']}):\n\n"
                       "| step | p50 (ms) | p99 (ms) | pods |\n|---|---|---|---|\n")
            for step, v in mine[-1]["breakdown"].items():
                out.append(f"| {step} | {v['p50_ms']} | {v['p99_ms']} | {v['n']} |\n")
            out.append("\n")
    return "".join(out)


def markdown(meta: dict[str, Any], summary: list[dict[str, Any]],
             rows: list[dict[str, Any]]) -> str:
    return (
        "# Operator at scale: latency, RSS and API requests under a burst of OOMKills\n\n"
        f"Command: `{meta['command']}` ({meta['wall_s']:.0f} s wall; {meta['cpus']} CPUs "
        "shared with etcd, kube-apiserver, kwok and this script; "
        f"Python {meta['python']}, kopf {meta['kopf']}, kubernetes client "
        f"{meta['kubernetes']}; {meta['nodes']} kwok nodes; {meta['repeat']} rounds of "
        f"{meta['burst']} OOMKills per operator and N; the machine's 1-minute load average "
        "is in the second table). Quick check: "
        "`.venv/bin/python bench/operator_scale.py --quick`.\n\n"
        "Latency: from this script's watch first seeing the container terminated to it first "
        "seeing the `gpu-auditor.io/diagnosis` annotation, pooled over the rounds. RSS: medians "
        "over the rounds. API req/diag: ours' `gpu_auditor_operator_api_requests_total` over the "
        "burst / `gpu_auditor_diagnoses_total` (kopf's own LIST/WATCH not included).\n\n"
        + ("Grouped fleet (`--grouped`): every 16 running pods are one distributed job's (a "
           "JobSet, the real CRD, owning an Indexed Job of 16 completions; the pods with the "
           "labels and owner references JobSet and the Job controller set), and each burst "
           "pod is a different job's first failure: ours writes the pod's annotation, then "
           "decides the job 2 s later, verifies the chain (GET Job, GET JobSet), annotates the "
           "JobSet and posts one Event on it. The round waits for every JobSet's annotation "
           "(its latency from the termination seen: 'job object annotated') before it stops "
           "the operator, so the requests per diagnosis count the job's too.\n\n"
           if meta.get("grouped") else "")
        + table(summary) + "\n" + details(summary)
        + "\nWhere the time goes (API server audit log; last round of each):\n\n" + steps(rows)
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000],
                   help="numbers of running pods, ascending (default: 1000 5000)")
    p.add_argument("--burst", type=int, default=100, help="pods OOMKilled at once (default 100)")
    p.add_argument("--repeat", type=int, default=5, help="rounds per operator and N (default 5)")
    p.add_argument("--nodes", type=int, default=50, help="kwok nodes (default 50)")
    p.add_argument("--variants", nargs="+", default=["ours", "baseline"],
                   choices=["ours", "before", "baseline"])
    for variant in ("ours", "before"):
        p.add_argument(f"--{variant}-python", help=f"interpreter of the {variant!r} operator")
        p.add_argument(f"--{variant}-tree", type=Path,
                       help=f"source tree of the {variant!r} operator (default: this one)")
    p.add_argument("--out-name", default="operator_scale",
                   help="results file stem under bench/results/ (default operator_scale)")
    p.add_argument("--burst-timeout", type=float, default=180.0)
    p.add_argument("--quick", action="store_true",
                   help="N=200, burst 50, 1 round, 5 nodes; prints only")
    p.add_argument("--grouped", action="store_true",
                   help="the pods are distributed jobs' (a JobSet and an Indexed Job per 16 "
                        "pods); each burst pod is a different job's root cause")
    p.add_argument("--no-save", action="store_true", help="print only, do not write results")
    p.add_argument("--keep", action="store_true", help="keep the cluster's logs")
    args = p.parse_args()
    if args.quick:
        args.sizes, args.burst, args.repeat, args.nodes, args.no_save = [200], 50, 1, 5, True
    if sorted(args.sizes) != args.sizes:
        p.error("--sizes must be ascending")
    for variant in ("ours", "before"):
        python, tree = getattr(args, f"{variant}_python"), getattr(args, f"{variant}_tree")
        if python or tree or variant == "before":
            LAUNCH[variant] = (python or sys.executable, (tree or REPO).resolve())

    wall = time.monotonic()
    rows: list[dict[str, Any]] = []
    setup: dict[str, float] = {}
    cluster = AuditedCluster(keep=args.keep)
    with cluster:
        cluster.start_kwok()
        install_crds(cluster)
        fleet = Fleet(cluster, args.nodes, grouped=args.grouped)
        fleet.setup()
        for n in args.sizes:
            grown = n - fleet.running_target
            setup[f"create_{n}_s"] = round(fleet.grow(grown), 1)
            print(f"# {n} pods running ({grown} created in {setup[f'create_{n}_s']} s)",
                  flush=True)
            for rep in range(args.repeat):
                order = args.variants if rep % 2 == 0 else list(reversed(args.variants))
                for variant in order:
                    rows.append(run_round(cluster, fleet, variant, n, rep, args.burst,
                                          args.burst_timeout))
    summary = summarize(rows)
    meta = {
        "command": " ".join([".venv/bin/python bench/operator_scale.py", *sys.argv[1:]]),
        "wall_s": round(time.monotonic() - wall, 1), "setup": setup, "burst": args.burst,
        "repeat": args.repeat, "nodes": args.nodes, "cpus": os.cpu_count(),
        "grouped": args.grouped,
        "python": platform.python_version(), "kopf": importlib.metadata.version("kopf"),
        "kubernetes": importlib.metadata.version("kubernetes"),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    print(table(summary) + "\n" + details(summary) + "\n" + steps(rows))
    print(f"wall time {meta['wall_s']} s")
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        meta["launch"] = {k: [v[0], str(v[1])] for k, v in LAUNCH.items()}
        (RESULTS / f"{args.out_name}.json").write_text(
            json.dumps({"meta": meta, "summary": summary, "rounds": rows}, indent=1) + "\n")
        (RESULTS / f"{args.out_name}.md").write_text(markdown(meta, summary, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
