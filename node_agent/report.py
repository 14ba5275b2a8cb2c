"""Pure building of the GPUNodeReport body, and the test for a material change.

The shape is the one in docs/contracts.md (``spec`` only; the agent is its only writer).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from node_agent.model import Allocated, ContainerUsage, GpuUsage, Snapshot

GROUP = "gpu-auditor.io"
VERSION = "v1alpha1"
PLURAL = "gpunodereports"
KIND = "GPUNodeReport"

# A pod's (or GPU's) bytes changed materially when it moved by more than both of these.
MATERIAL_BYTES = 256 * 2**20
MATERIAL_RATIO = 0.10
# A container's pids in the report, lowest first: a tenant decides how many processes it runs.
MAX_PIDS_PER_ENTRY = 64

_ALLOCATED = {Allocated.TRUE: True, Allocated.FALSE: False}


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _pod_entry(c: ContainerUsage) -> dict[str, Any]:
    assert c.pod is not None
    growth = c.growth_bytes_per_second
    return {
        "namespace": c.pod.namespace,
        "pod": c.pod.pod,
        "podUID": c.pod.pod_uid,
        "container": c.pod.container,
        "allocated": _ALLOCATED.get(c.allocated),
        "bytes": c.used_bytes,
        "pids": list(c.pids[:MAX_PIDS_PER_ENTRY]),
        "growthBytesPerSecond": round(growth, 3) if growth is not None else None,
    }


def _gpu_entry(u: GpuUsage) -> dict[str, Any]:
    g = u.gpu
    pods = [_pod_entry(c) for c in u.containers if c.pod is not None]
    pods.sort(key=lambda p: (p["namespace"], p["pod"], p["podUID"], p["container"]))
    return {
        "uuid": g.uuid,
        "index": g.index,
        "model": g.model,
        "memoryTotalBytes": g.total_bytes,
        "memoryUsedBytes": g.used_bytes,
        "memoryFreeBytes": g.free_bytes,
        "pods": pods,
    }


def build_spec(s: Snapshot) -> dict[str, Any]:
    """The ``spec`` of the node's GPUNodeReport. Host processes are not listed (no pod)."""
    return {
        "nodeName": s.node,
        "generatedAt": rfc3339(s.taken_at),
        "sharingStrategy": s.strategy.kind,
        "replicas": s.strategy.replicas,
        "nvmlUp": s.nvml_up,
        "kubeletUp": s.kubelet_up,
        "gpus": [_gpu_entry(u) for u in sorted(s.gpus, key=lambda u: (u.gpu.index, u.gpu.gpu))],
        "findings": [
            {"kind": f.kind, "gpuUUID": f.gpu_uuid, "pods": list(f.pods), "message": f.message}
            for f in s.findings
        ],
    }


def build_body(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A whole GPUNodeReport object named after the node."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": spec["nodeName"],
                     "labels": {"app.kubernetes.io/managed-by": "gpu-auditor-agent"}},
        "spec": dict(spec),
    }


def _essence(spec: Mapping[str, Any]) -> Any:
    """Everything but the figures that move all the time (times, bytes, rates, messages)."""
    gpus = [
        (g["uuid"], g["index"], g["model"], g["memoryTotalBytes"],
         tuple((p["namespace"], p["pod"], p["podUID"], p["container"], p["allocated"])
               for p in g["pods"]))
        for g in spec.get("gpus", [])
    ]
    findings = [(f["kind"], f["gpuUUID"], tuple(f["pods"])) for f in spec.get("findings", [])]
    return (spec.get("nodeName"), spec.get("sharingStrategy"), spec.get("replicas"),
            spec.get("nvmlUp"), spec.get("kubeletUp"), gpus, findings)


def _moved(old: int, new: int) -> bool:
    delta = abs(new - old)
    return delta > MATERIAL_BYTES and delta > MATERIAL_RATIO * max(old, 1)


def material_change(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """True when the report says something new: other GPUs, pods, allocations, findings or
    health, or a GPU's / pod's bytes moved by more than 256 MiB and 10 %."""
    if old is None or _essence(old) != _essence(new):
        return True
    for g_old, g_new in zip(old["gpus"], new["gpus"], strict=True):
        if _moved(g_old["memoryUsedBytes"], g_new["memoryUsedBytes"]):
            return True
        for p_old, p_new in zip(g_old["pods"], g_new["pods"], strict=True):
            if _moved(p_old["bytes"], p_new["bytes"]):
                return True
    return False
