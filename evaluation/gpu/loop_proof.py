#!/usr/bin/env python3
"""Issue 28's loop on a real GPU, without a cluster: a fragmentation job runs out of memory, is
diagnosed, its owner gets the recommendation and its trial as the operator writes them, the
webhook's own function puts the setting into the retry's pod spec, and the retry runs with
exactly the env that spec gives it.

For each scenario (``frag_pinned``, ``frag_varlen``: evaluation/gpu/scenarios):

1. the first attempt: a Job's pod spec (container ``main``, ``TORCH_VERSION`` of this torch, no
   allocator setting) run as a real process with the env the spec gives (read by
   ``gpu_auditor.base.containerenv``, the kubelet's rules); its log kept;
2. the diagnosis core on that log (``gpu_auditor.diagnosis.diagnose``, the release from the
   spec), and the trial the operator starts on the Job (``controller.outcome.started``, the
   owner's annotations ``recommended-alloc-conf`` and ``recommendation-trial``);
3. the retry's pod spec: the first pod's, as the Job controller makes it (a new name, UID and
   creation time, the same template), sent as an AdmissionReview through the webhook's own
   function (``webhook.applying.Applier``: the pod's owner chain verified against the Job, the
   Job's recommendation merged into the container by ``admission.apply``); the JSON patch of its
   answer applied;
4. the retry run with exactly the env the patched spec gives (no other allocator setting in its
   environment), its log kept;
5. a control: the first attempt's spec run again, to show its OOM comes back without the
   setting;
6. the operator's pure judgement of the retry (``controller.outcome.judge``: completed ->
   fixed; an OOM again -> not-fixed, with the diagnosis it would then write).

Writes ``OUT/loop-proof.json`` (each step's input and result) and ``OUT/logs/*.log``; exit
status 0 when every scenario ends fixed with its control OOM-ing again, 1 otherwise, 2 when a
scenario could not be run. About 5 s per frag_pinned run and 14 s per frag_varlen run on an H200:
well under 3 minutes for both. Needs python3 with torch and an idle CUDA GPU; run from the
repository root:

    PYTHONPATH=operator python3 evaluation/gpu/loop_proof.py --out "$OUT"

``--fake`` runs the same pipeline on any machine: the child prints the real H200 log of the
scenario's baseline (evaluation/gpu/logs) and exits 1, unless its env carries
``expandable_segments:True`` (the unit test runs it so).
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from gpu_auditor.admission.review import parse_review, response
from gpu_auditor.base.containerenv import container_env, known_values
from gpu_auditor.base.jobkinds import JobKind
from gpu_auditor.base.podspec import ALLOC_CONF_VARIABLES
from gpu_auditor.base.trial import trial_annotations
from gpu_auditor.controller.outcome import Attempt, Seen, adjusted, judge, ran_seconds, started
from gpu_auditor.controller.pod import current_alloc_conf
from gpu_auditor.diagnosis import diagnose
from gpu_auditor.webhook.applying import Applier

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "evaluation" / "gpu" / "scenarios"
LOGS = ROOT / "evaluation" / "gpu" / "logs"
PREFIX = "gpu-auditor.io/"
NAMESPACE = "proof"
DEFAULT_SCENARIOS = ("frag_pinned", "frag_varlen")
RUN_TIMEOUT = 60.0

FAKE_CHILD = r"""
import os, sys
conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
print("starting job on NVIDIA H200 (fake) torch 2.11.0+cu130", flush=True)
if "expandable_segments:True" in conf.split(","):
    print("workspace ready; done", flush=True)
    sys.exit(0)
sys.stderr.write(open(sys.argv[1]).read())
sys.exit(1)
"""


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def torch_release(fake: bool) -> str:
    if fake:
        return "2.11.0+cu130"
    import torch  # the driver makes no CUDA context: only the children do

    return str(torch.__version__)


def job_object(name: str, uid: str) -> dict[str, Any]:
    """The Job the pods belong to, as the API server serves it (its generated selector)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "annotations": {}},
            "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                     "backoffLimit": 1}}


def pod_of(job: dict[str, Any], command: list[str], release: str) -> dict[str, Any]:
    """A pod of `job` as the Job controller makes it from its template."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{uuid.uuid4().hex[:5]}", "namespace": NAMESPACE,
                         "uid": str(uuid.uuid4()), "creationTimestamp": stamp(now()),
                         "labels": {"batch.kubernetes.io/controller-uid": uid,
                                    "batch.kubernetes.io/job-name": name, "job-name": name},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": name, "uid": uid, "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "pytorch/pytorch", "command": command,
                "env": [{"name": "TORCH_VERSION", "value": release}]}]}}


def retry_of(first: dict[str, Any]) -> dict[str, Any]:
    """The Job controller's next pod: the same template, a new name, UID and creation time."""
    pod = copy.deepcopy(first)
    name = first["metadata"]["labels"]["job-name"]
    pod["metadata"].update(name=f"{name}-{uuid.uuid4().hex[:5]}", uid=str(uuid.uuid4()),
                           creationTimestamp=stamp(now()))
    pod["metadata"].pop("annotations", None)
    return pod


def run(pod: dict[str, Any], log: Path) -> dict[str, Any]:
    """The pod's container as a process: its command, and exactly the env its spec gives (no
    allocator setting from this shell)."""
    container = pod["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if k not in ALLOC_CONF_VARIABLES}
    declared = known_values(container_env(container))
    env.update(declared)
    env["PYTHONUNBUFFERED"] = "1"
    started_at = now()
    t0 = time.monotonic()
    with log.open("wb") as out:
        try:
            rc = subprocess.run(container["command"], stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT, timeout=RUN_TIMEOUT, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = -9
    finished_at = now()
    return {"pod": f"{NAMESPACE}/{pod['metadata']['name']}", "rc": rc,
            "wall_s": round(time.monotonic() - t0, 2), "env": declared,
            "startedAt": stamp(started_at), "finishedAt": stamp(finished_at),
            "log": str(log.relative_to(log.parent.parent))}


def admit(pod: dict[str, Any], job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The retry's AdmissionReview through the webhook's own function; the patched pod and the
    answer (JSON patch decoded)."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "operation": "CREATE",
                          "namespace": NAMESPACE, "object": pod,
                          "userInfo": {"username": "system:serviceaccount:kube-system:"
                                                   "job-controller"}}}

    def read(kind: JobKind, namespace: str, name: str) -> dict[str, Any]:
        if (kind.kind, namespace, name) != ("Job", NAMESPACE, job["metadata"]["name"]):
            raise LookupError(f"no {kind.kind} {namespace}/{name}")
        return job

    outcome = Applier(read, PREFIX)(parse_review(review), namespace_opted_in=True)
    answer = response(review["request"]["uid"], outcome)["response"]
    patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    answer = {**answer, "patch": patch, "result": outcome.result}
    return apply_patch(pod, patch), answer


def apply_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` and `replace`, as the API server applies the webhook's answer."""
    doc = copy.deepcopy(document)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            if op["op"] == "add" and last == "-":
                target.append(op["value"])
            elif op["op"] == "add":
                target.insert(int(last), op["value"])
            else:
                target[int(last)] = op["value"]
        elif op["op"] in ("add", "replace"):
            target[last] = op["value"]
        else:
            raise ValueError(f"unexpected op {op['op']}")
    return doc


def command(scenario: str, fake: bool) -> list[str]:
    if fake:
        return [sys.executable, "-c", FAKE_CHILD, str(LOGS / f"{scenario}__baseline.log")]
    return [sys.executable, str(SCENARIOS / f"{scenario}.py")]


def prove(scenario: str, out: Path, fake: bool, release: str) -> dict[str, Any]:
    logs = out / "logs"
    job = job_object(f"{scenario.replace('_', '-')}-loop", str(uuid.uuid4()))
    first = pod_of(job, command(scenario, fake), release)
    record: dict[str, Any] = {"scenario": scenario, "job": f"{NAMESPACE}/{job['metadata']['name']}"}
    # 1. the first attempt
    attempt = run(first, logs / f"{scenario}__attempt1.log")
    record["attempt1"] = attempt
    text = (logs / f"{scenario}__attempt1.log").read_bytes()
    container = first["spec"]["containers"][0]
    current = current_alloc_conf(container).value
    # 2. the diagnosis and the trial the operator starts on the Job
    diagnosis = diagnose(text, torch_version=release, alloc_conf=current)
    record["diagnosis"] = {"detected": diagnosis.detected, "kind": diagnosis.kind,
                           "summary": diagnosis.summary,
                           "recommended": diagnosis.recommendation.alloc_conf,
                           "release": diagnosis.torch_version_hint}
    trial = started(diagnosis, None, container="main", current=current,
                    failed_pod=attempt["pod"], failed_uid=first["metadata"]["uid"],
                    failed_at=_time(attempt["finishedAt"]),
                    ran_seconds=ran_seconds(_time(attempt["startedAt"]),
                                            _time(attempt["finishedAt"])))
    if trial is None or diagnosis.recommendation.alloc_conf is None:
        record["verdict"] = "no recommendation: nothing to apply"
        return record
    owner = {f"{PREFIX}recommended-alloc-conf": diagnosis.recommendation.alloc_conf,
             **{k: v for k, v in trial_annotations(trial, PREFIX).items() if v is not None}}
    job["metadata"]["annotations"].update(owner)
    record["owner_annotations"] = owner
    # 3. the retry admitted through the webhook's function
    retry, answer = admit(retry_of(first), job)
    record["admission"] = answer
    (out / f"{scenario}__retry-pod.json").write_text(json.dumps(retry, indent=2) + "\n")
    # 4. the retry with exactly its spec's env; 5. the control without the setting
    record["retry"] = run(retry, logs / f"{scenario}__retry.log")
    record["control"] = run(retry_of(first), logs / f"{scenario}__control.log")
    # 6. the operator's judgement of the retry
    retry_text = (logs / f"{scenario}__retry.log").read_bytes()
    retry_conf = current_alloc_conf(retry["spec"]["containers"][0])
    again = diagnose(retry_text, torch_version=release, alloc_conf=retry_conf.value)
    seen = Seen.COMPLETED if record["retry"]["rc"] == 0 else (
        Seen.OOM if again.detected else None)
    judged = judge(trial, Attempt(record["retry"]["pod"], retry["metadata"]["uid"],
                                  _time(retry["metadata"]["creationTimestamp"]),
                                  retry_conf.value, known=retry_conf.ignored is None),
                   seen) if seen is not None else None
    record["judged"] = {"seen": seen, "outcome": judged.trial.outcome if judged else None,
                        "counted": judged.counted if judged else None,
                        "trial": trial_annotations(judged.trial, PREFIX) if judged else None}
    if judged is not None and seen is Seen.OOM:
        record["judged"]["new_summary"] = adjusted(
            again, judged.trial, retry_conf.value, owner=f"Job {job['metadata']['name']}",
            not_fixed_by=record["retry"]["pod"]).summary
    control_oom = diagnose((logs / f"{scenario}__control.log").read_bytes(),
                           torch_version=release).detected
    record["control"]["oom"] = control_oom
    ok = (attempt["rc"] != 0 and diagnosis.kind == "fragmentation"
          and answer["result"] == "applied" and judged is not None
          and judged.trial.outcome == "fixed" and control_oom)
    record["verdict"] = "fixed" if ok else "not proven"
    return record


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    parser.add_argument("--fake", action="store_true", help="no GPU: the child prints the "
                        "scenario's H200 log unless its env carries expandable_segments:True")
    args = parser.parse_args(argv)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    release = torch_release(args.fake)
    result: dict[str, Any] = {"torch": release, "fake": args.fake, "results": [],
                              "command": " ".join(["python3", "evaluation/gpu/loop_proof.py",
                                                   *(argv if argv is not None else sys.argv[1:])])}
    status = 0
    t0 = time.monotonic()
    for scenario in (s.strip() for s in args.scenarios.split(",") if s.strip()):
        try:
            record = prove(scenario, args.out, args.fake, release)
        except (OSError, ValueError, KeyError) as exc:
            record, status = {"scenario": scenario, "error": str(exc)}, 2
        result["results"].append(record)
        if status == 0 and record.get("verdict") != "fixed":
            status = 1
        print(f"{scenario}: {record.get('verdict', record.get('error'))}", flush=True)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (args.out / "loop-proof.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
