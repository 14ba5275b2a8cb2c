"""Pure sharing findings: which GPUs are shared by pods, and whether the node means it.

- ``unrequested-gpu-use``: a pod's process on a GPU the kubelet did not allocate to that pod
  (e.g. ``NVIDIA_VISIBLE_DEVICES=all`` without a GPU request).
- ``unintended-sharing``: processes of two or more pods on one GPU (or one MIG instance) on a
  node that does not share GPUs.
- ``intended-sharing``: the same on a node whose labels say time-slicing or MPS, or where every
  pod on the GPU was allocated it through a ResourceClaim (DRA: one claim shared by several
  pods, or a device the scheduler gave to several claims); reported, not a problem. A pod on
  that GPU without such a claim makes it unintended again (and is ``unrequested-gpu-use``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from node_agent.model import (
    Allocated,
    Allocations,
    Finding,
    FindingKind,
    GpuUsage,
    NodeSharing,
    SharingStrategy,
)

STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"


MAX_REPLICAS = 4096
MESSAGE_PODS = 8  # pods named in a finding's message (its pods field lists them all)


def replicas_from(value: object) -> int:
    """``nvidia.com/gpu.replicas`` as a number in [1, MAX_REPLICAS]: a label any node admin (or
    a tool) writes, so anything but plain ASCII digits is 1 and a huge number is clamped."""
    if not (isinstance(value, str) and value.isascii() and value.isdigit()):
        return 1
    digits = value.lstrip("0")
    if len(digits) > len(str(MAX_REPLICAS)):  # not parsed: a 10,000-digit label stays cheap
        return MAX_REPLICAS
    return min(MAX_REPLICAS, max(1, int(digits or "0")))


def _label(labels: Mapping[str, str], key: str, default: str) -> str:
    value = labels.get(key, default)
    return value.strip().lower()[:64] if isinstance(value, str) else default


def strategy_from(labels: Mapping[str, str], allocations: Allocations | None) -> NodeSharing:
    """The node's sharing strategy from GPU feature discovery labels; without labels, guessed
    from the kubelet's device IDs (``<UUID>::<n>`` replicas → time-slicing, MIG ids → mig)."""
    replicas = replicas_from(labels.get(REPLICAS_LABEL, "1"))
    kind = _label(labels, STRATEGY_LABEL, "")
    if kind in (SharingStrategy.TIME_SLICING, SharingStrategy.MPS):
        return NodeSharing(SharingStrategy(kind), replicas)
    if _label(labels, MIG_STRATEGY_LABEL, "none") not in ("", "none"):
        return NodeSharing(SharingStrategy.MIG, replicas)
    if kind == SharingStrategy.NONE:
        return NodeSharing(SharingStrategy.NONE, replicas)
    if allocations is not None and allocations.replicated:
        return NodeSharing(SharingStrategy.TIME_SLICING, replicas)
    if allocations is not None and allocations.mig:
        return NodeSharing(SharingStrategy.MIG, replicas)
    return NodeSharing(SharingStrategy.NONE, replicas)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _claims_text(claims: Iterable[str]) -> str:
    names = sorted(claims)
    text = ", ".join(names[:MESSAGE_PODS])
    return text + (f" and {len(names) - MESSAGE_PODS} more" if len(names) > MESSAGE_PODS else "")


def _dra_sharing(gpu_uuid: str, pods: Iterable[str],
                 allocations: Allocations | None) -> str | None:
    """Why the sharing is intended under DRA, when every pod got this GPU through a claim."""
    if allocations is None or not allocations.claims:
        return None
    per_pod = [allocations.claims.get((pod, gpu_uuid)) for pod in pods]
    if not all(per_pod):
        return None
    sets = [c for c in per_pod if c]
    common = frozenset.intersection(*sets)
    if common:
        return f"sharing ResourceClaim {_claims_text(common)}"
    return f"each allocated it by a ResourceClaim ({_claims_text(frozenset().union(*sets))})"


def findings_for(usage: GpuUsage, strategy: NodeSharing,
                 allocations: Allocations | None = None) -> list[Finding]:
    """Findings for one GPU from who uses it and what each pod was allocated."""
    gpu = usage.gpu
    bytes_by_pod: dict[str, int] = {}
    unrequested: dict[str, int] = {}
    for c in usage.containers:
        if c.pod is None:
            continue
        key = c.pod.key
        bytes_by_pod[key] = bytes_by_pod.get(key, 0) + c.used_bytes
        if c.allocated is Allocated.FALSE:
            unrequested[key] = unrequested.get(key, 0) + c.used_bytes
    out: list[Finding] = []
    for key, used in sorted(unrequested.items()):
        out.append(Finding(
            kind=FindingKind.UNREQUESTED_GPU_USE, gpu=gpu.gpu, gpu_uuid=gpu.uuid, pods=(key,),
            message=f"{key} uses {_gib(used)} on GPU {gpu.gpu} ({gpu.uuid}) "
                    f"that it was not allocated",
        ))
    if len(bytes_by_pod) >= 2:
        pods = tuple(sorted(bytes_by_pod))
        largest = sorted(pods, key=lambda k: (-bytes_by_pod[k], k))
        shares = ", ".join(f"{k} {_gib(bytes_by_pod[k])}" for k in largest[:MESSAGE_PODS])
        if len(largest) > MESSAGE_PODS:
            shares += f" and {len(largest) - MESSAGE_PODS} more"
        dra = _dra_sharing(gpu.uuid, pods, allocations)
        if dra is not None:
            kind = FindingKind.INTENDED_SHARING
            why = dra
        elif strategy.allows_sharing:
            kind = FindingKind.INTENDED_SHARING
            why = f"shared by {strategy.kind} (replicas {strategy.replicas})"
        else:
            kind = FindingKind.UNINTENDED_SHARING
            why = f"node does not share GPUs (strategy {strategy.kind})"
        out.append(Finding(
            kind=kind, gpu=gpu.gpu, gpu_uuid=gpu.uuid, pods=pods,
            message=f"{len(pods)} pods on GPU {gpu.gpu} ({gpu.uuid}), {why}: {shares}",
        ))
    return out


def findings(usages: Iterable[GpuUsage], strategy: NodeSharing,
             allocations: Allocations | None = None) -> tuple[Finding, ...]:
    return tuple(f for u in usages for f in findings_for(u, strategy, allocations))
