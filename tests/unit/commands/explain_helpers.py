"""Helpers for the `explain` tests: a failed pod, the annotations the operator's own writer
(`controller.annotations`) puts on it for a real diagnosis of an example log, and a node report
through the agent's writer and the base's parser."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from gpu_auditor.base.nodereport import Gpu, NodeReport, PodEntry, parse_report, to_body, to_spec
from gpu_auditor.controller import annotations as writer
from gpu_auditor.controller.pod import Termination, parse_pod
from gpu_auditor.diagnosis import diagnose_stream

LOGS = Path(__file__).resolve().parents[3] / "examples" / "logs"
PREFIX = "gpu-auditor.io/"
UID, OTHER_UID = "11111111-2222-3333-4444-555555555555", "99999999-2222-3333-4444-555555555555"
GIB = 2**30


def failed_pod(annotations: dict[str, str], *, owners: list[dict[str, Any]] | None = None,
               env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": "finetune-7b-abc12", "uid": UID,
                     "annotations": annotations, "ownerReferences": owners or []},
        "spec": {"nodeName": "gpu-node-1",
                 "containers": [{"name": "main", "env": env or []}]},
        "status": {"phase": "Failed"},
    }


def operator_annotations(log: str, pod: dict[str, Any] | None = None) -> dict[str, str]:
    with open(LOGS / log, "rb") as f:
        diagnosis = diagnose_stream(f)
    termination = Termination(container="main", restart_count=0, reason="Error", exit_code=1,
                              message="", finished_at=None, previous=False)
    typed = parse_pod(pod or failed_pod({}), PREFIX)
    written = writer.diagnosis_annotations(
        diagnosis, termination, typed, prefix=PREFIX, previous_keys=[], source="log",
        now=dt.datetime(2026, 12, 1, 4, 0, tzinfo=dt.UTC))
    return {k: v for k, v in written.annotations.items() if v is not None}


def node_report(*entries: PodEntry, used: int = 100 * GIB) -> NodeReport:
    gpu = Gpu(uuid="GPU-aaaa", index=0, model="NVIDIA H200", total_bytes=140 * GIB,
              used_bytes=used, free_bytes=140 * GIB - used, pods=entries)
    return parse_report(to_body(to_spec(NodeReport(node="gpu-node-1", gpus=(gpu,),
                                                   generated_at="2026-12-01T04:00:00Z"))))
