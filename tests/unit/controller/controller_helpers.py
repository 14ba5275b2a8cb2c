"""The operator's decisions with an in-memory stand-in for the API: the stand-in (FakeKube),
the diagnosis core called inline, a recorded schedule, and the pods and node reports the tests
hand the operator (the real API server is in tests/integration/test_operator.py and
test_operator_hostile.py)."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from gpu_auditor.base.errors import APINotFoundError
from gpu_auditor.base.jobkinds import JobKind
from gpu_auditor.controller.diagnosispool import DiagnosisFailed
from gpu_auditor.controller.kube import LogUnavailable
from gpu_auditor.controller.pod import Pod, Termination, parse_pod
from gpu_auditor.controller.service import OperatorConfig, Services
from gpu_auditor.diagnosis import Diagnosis, diagnose
from gpu_auditor.diagnosis.consequence import FailureReading, read_failure

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "oom" / "corpus"
PREFIX = "gpu-auditor.io/"


class FakeKube:
    """Records what the operator writes; serves pods, a log, a node report and workloads."""

    def __init__(self, pod: dict[str, Any], log: bytes = b"", report: dict[str, Any] | None = None,
                 log_error: str | None = None) -> None:
        self.pod = pod
        self.others: dict[str, dict[str, Any]] = {}
        self.log = log
        self.report = report
        self.log_error = log_error
        self.events: dict[str, tuple[str, str]] = {}
        self.event_creates = 0
        self.patches: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str, str | None]] = []
        self.log_reads = 0
        self.reads: list[tuple[str, str]] = []
        self.workloads: dict[tuple[str, str], dict[str, Any]] = {}
        self.workload_reads: list[tuple[str, str]] = []
        self.workload_patches: list[tuple[str, str, str, dict[str, str | None]]] = []
        self.fail_patch: dict[str, Exception] = {}
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        """(kind, name) -> a distributed job's object (or a link of its chain)."""
        self.object_reads: list[tuple[str, str]] = []
        self.object_patches: list[tuple[str, str, str, dict[str, str | None]]] = []
        self.event_objects: list[tuple[str, str]] = []

    def _pods(self) -> dict[str, dict[str, Any]]:
        pods = dict(self.others)
        if self.pod is not None:
            pods[self.pod["metadata"]["name"]] = self.pod
        return pods

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        pod = self._pods().get(name)
        if pod is None or pod["metadata"]["namespace"] != namespace:
            raise APINotFoundError("gone", status=404)
        return copy.deepcopy(pod)

    def read_log(self, *_: Any, **__: Any) -> bytes:
        self.log_reads += 1
        if self.pod is None:
            raise APINotFoundError("gone", status=404)
        if self.log_error:
            raise LogUnavailable(self.log_error)
        return self.log

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, Any],
                              *, uid: str | None = None) -> None:
        if name in self.fail_patch:
            raise self.fail_patch[name]
        pod = self._pods()[name]
        assert uid is None or pod["metadata"]["uid"] == uid, "the UID precondition would fail"
        self.patches.append(annotations)
        self.patched.append((namespace, name, uid))
        notes = pod["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value

    def post_event(self, about: Any, *, name: str, reason: str, message: str,
                   event_type: str = "Warning") -> bool:
        self.event_creates += 1
        self.event_objects.append((about.kind, about.name))
        if name in self.events:
            return False
        self.events[name] = (reason, message)
        return True

    def read_node_report(self, node: str) -> dict[str, Any] | None:
        return self.report

    def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.workload_reads.append((kind, name))
        if (kind, name) not in self.workloads:
            raise APINotFoundError("gone", status=404)
        return copy.deepcopy(self.workloads[(kind, name)])

    def patch_workload(self, kind: str, namespace: str, name: str, uid: str,
                       annotations: dict[str, str | None]) -> None:
        assert self.workloads[(kind, name)]["metadata"]["uid"] == uid
        self.workload_patches.append((kind, name, uid, annotations))
        notes = self.workloads[(kind, name)]["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():  # a JSON merge patch, as the API server applies
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value


    def read_object(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any]:
        self.object_reads.append((kind.kind, name))
        if (kind.kind, name) not in self.objects:
            raise APINotFoundError("gone", status=404)
        return copy.deepcopy(self.objects[(kind.kind, name)])

    def patch_object(self, kind: JobKind, namespace: str, name: str, uid: str,
                     annotations: dict[str, str | None]) -> None:
        assert self.objects[(kind.kind, name)]["metadata"]["uid"] == uid
        self.object_patches.append((kind.kind, name, uid, annotations))
        notes = self.objects[(kind.kind, name)]["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value


class Inline:
    """The diagnosis core called in this process (the worker processes are tested in
    test_diagnosispool.py); counts calls."""

    def __init__(self, fail: DiagnosisFailed | None = None) -> None:
        self.calls = 0
        self.fail = fail

    def diagnose(self, text: bytes | str, **options: Any) -> Diagnosis:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return diagnose(text, **options)

    def diagnose_reading(self, text: bytes | str, reference: dt.datetime | None,
                         **options: Any) -> tuple[Diagnosis, FailureReading]:
        return self.diagnose(text, **options), read_failure(text, reference)


class Scheduled(list[tuple[float, Callable[[], None]]]):
    """A schedule that records (delay, callback) instead of waiting."""

    def __call__(self, delay: float, callback: Callable[[], None]) -> bool:
        self.append((delay, callback))
        return True


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


JOB_POD_LABELS = {"batch.kubernetes.io/controller-uid": "job-uid", "controller-uid": "job-uid",
                  "batch.kubernetes.io/job-name": "train", "job-name": "train"}
"""What the API server puts on the pods of Job `train` (UID job-uid)."""


def job_pod(terminated: dict[str, Any], *, env: list[dict[str, str]] | None = None,
         restarted: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "main", "restartCount": 1 if restarted else 0}
    if restarted:
        status.update(state={"running": {}}, lastState={"terminated": terminated})
    else:
        status["state"] = {"terminated": terminated}
    return {
        "metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1", "annotations": {},
                     "labels": dict(JOB_POD_LABELS),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                          "uid": "job-uid", "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "trainer", "env": env or [],
             "resources": {"limits": {"memory": "4Gi"}}}]},
        "status": {"containerStatuses": [status]},
    }


def make_services(kube: FakeKube, diagnoser: Inline | None = None,
              schedule: Scheduled | None = None) -> Services:
    return Services(kube=kube, config=OperatorConfig(),  # type: ignore[arg-type]
                    diagnoser=diagnoser if diagnoser is not None else Inline(),
                    schedule=schedule if schedule is not None else Scheduled())


ERROR = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def running(name: str, uid: str, node: str = "gpu-1", namespace: str = "ml") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid, "annotations": {}},
            "spec": {"nodeName": node, "containers": [{"name": "main"}]}, "status": {}}


def report_entry(ref: str, uid: str) -> dict[str, Any]:
    namespace, _, pod = ref.partition("/")
    return {"namespace": namespace, "pod": pod, "podUID": uid, "container": "main",
            "bytes": 2**30, "allocated": "true"}


def sharing(*refs: str, uids: dict[str, str] | None = None, node: str = "gpu-1",
             kind: str = "unintended-sharing", extra: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    uids = uids or {}
    entries = [report_entry(ref, uids.get(ref, f"uid-{ref.partition('/')[2]}")) for ref in refs]
    return {"metadata": {"name": node}, "spec": {
        "nodeName": node, "gpus": [{"uuid": "GPU-a", "index": 0, "pods": entries}],
        "findings": [{"kind": kind, "gpuUUID": "GPU-a", "pods": list(refs),
                      "message": f"{len(refs)} pods on GPU-a"}, *(extra or [])]}}


def report_kube(*pods: dict[str, Any]) -> FakeKube:
    kube = FakeKube(None)  # type: ignore[arg-type]
    kube.others = {p["metadata"]["name"]: p for p in pods}
    return kube


# -- the node's memory series and the OOM probe's record (issue 10, issue 17) ----------------------

H200_LOGS = Path(__file__).resolve().parents[3] / "evaluation/gpu/logs"
GIB = 2**30
FINISHED = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)
END = FINISHED.timestamp()


def rising(n: int = 20, end: float = END - 2) -> dict[str, list[Any]]:
    """A leak: 10 GiB to 138 GiB, one point every 5 s, the last just before the failure."""
    return {"times": [end - 5.0 * (n - 1 - i) for i in range(n)],
            "bytes": [10 * GIB + (128 * GIB * i) // (n - 1) for i in range(n)]}


def flat(n: int = 20) -> dict[str, list[Any]]:
    return {"times": [END - 2 - 5.0 * (n - 1 - i) for i in range(n)], "bytes": [138 * GIB] * n}


def report_with(series: Any, *, node: str = "gpu-1", uid: str = "uid-1",
                  container: str = "main") -> dict[str, Any]:
    entry: dict[str, Any] = {"namespace": "ml", "pod": "train-x", "podUID": uid,
                             "container": container, "allocated": "true", "bytes": 138 * GIB,
                             "pids": [7]}
    if series is not None:
        entry["memorySeries"] = series
    return {"metadata": {"name": node}, "spec": {
        "nodeName": node, "gpus": [{"uuid": "GPU-h200", "index": 0,
                                    "memoryTotalBytes": 150_109_880_320,
                                    "memoryFreeBytes": 11 * GIB, "pods": [entry]}]}}


def record_of(name: str) -> str:
    """The probe's record of an H200 run (evaluation/gpu/logs/probe)."""
    return (H200_LOGS / "probe" / f"{name}__baseline.probe").read_text().strip()


def fragmentation_kube(pod: dict[str, Any]) -> FakeKube:
    return FakeKube(pod, log=(FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes())


# -- the pod view, as annotations and the pod's tests build it ------------------------------------


def termination(container: str = "main", restart: int = 3, reason: str = "Error") -> Termination:
    return Termination(container=container, restart_count=restart, reason=reason, exit_code=1,
                       message="", finished_at=None, previous=False)  # fmt: skip


def pod(annotations: dict[str, str] | None = None, *, uid: str = "uid-1",
        name: str = "train-x") -> Pod:  # fmt: skip
    return parse_pod({"metadata": {"namespace": "ml", "name": name, "uid": uid,
                                   "annotations": annotations or {}}}, PREFIX)  # fmt: skip
