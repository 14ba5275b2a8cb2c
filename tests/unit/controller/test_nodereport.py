"""Turning the agent's GPUNodeReport into evidence for a failed pod."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.controller.nodereport import PodSightings, evidence, findings_for_pods

pytestmark = pytest.mark.unit

GIB = 2**30


def _report(*pods: dict[str, Any], findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "nodeName": "gpu-1",
        "gpus": [
            {"uuid": "GPU-a", "index": 0, "memoryTotalBytes": 140 * GIB,
             "memoryFreeBytes": 1 * GIB, "pods": list(pods)},
            {"uuid": "GPU-b", "index": 1, "memoryTotalBytes": 140 * GIB,
             "memoryFreeBytes": 139 * GIB, "pods": []},
        ],
        "findings": findings or [],
    }


def _entry(pod: str, gib: int, **extra: Any) -> dict[str, Any]:
    return {"namespace": "ml", "pod": pod, "container": "main", "bytes": gib * GIB,
            "pids": [100], **extra}


def test_other_pods_on_the_failed_pods_gpu_are_named_with_their_bytes() -> None:
    report = _report(_entry("trainer", 10, allocated=True, growthBytesPerSecond=0.0),
                     _entry("notebook", 120, allocated=False))
    found = evidence(report, "ml/trainer", None)
    assert found is not None
    assert found.gpu_uuid == "GPU-a"
    assert [(p.pod, p.bytes) for p in found.other_pods] == [("notebook", 120 * GIB)]
    assert found.allocated is True


def test_a_pod_whose_process_died_is_found_where_it_was_last_seen() -> None:
    sightings = PodSightings()
    sightings.update(_report(_entry("trainer", 10), _entry("notebook", 120)))
    now = _report(_entry("notebook", 120))  # trainer's process is gone after the OOM
    found = evidence(now, "ml/trainer", sightings.get("ml/trainer"))
    assert found is not None and [p.pod for p in found.other_pods] == ["notebook"]


def test_an_unseen_pod_on_a_multi_gpu_node_gets_no_evidence() -> None:
    assert evidence(_report(_entry("notebook", 120)), "ml/trainer", None) is None


def test_sightings_stay_bounded() -> None:
    sightings = PodSightings(capacity=2)
    for name in ("a", "b", "c"):
        sightings.update(_report(_entry(name, 1)))
    assert sightings.get("ml/a") is None and sightings.get("ml/c") is not None


def test_only_unintended_findings_name_pods_to_annotate() -> None:
    report = _report(findings=[
        {"kind": "unintended-sharing", "gpuUUID": "GPU-a", "pods": ["ml/a", "ml/b"]},
        {"kind": "intended-sharing", "gpuUUID": "GPU-b", "pods": ["ml/c", "ml/d"]},
    ])
    assert [ref for ref, _ in findings_for_pods(report)] == ["ml/a", "ml/b"]
