"""Plain frozen data: what the callers hand in and what a diagnosis hands back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final


class DiagnosisKind(StrEnum):
    """What a diagnosis says caused the failure (docs/contracts.md). A member is its string, so
    code that still compares with the literal keeps working."""

    FRAGMENTATION = "fragmentation"
    GPU_SHARED = "gpu-shared"
    CAPACITY = "capacity"
    MEMORY_FRACTION_CAP = "memory-fraction-cap"
    LEAK = "leak"
    NON_PYTORCH_MEMORY = "non-pytorch-memory"
    HOST_OOM_KILLED = "host-oom-killed"
    UNKNOWN = "unknown"


KINDS: Final = tuple(DiagnosisKind)
"""Every diagnosis kind, for membership tests (`kind in KINDS`)."""

MAX_JSON_ITEMS: Final = 64
"""Items of one list a `from_json_dict` keeps (the JSON may be anyone's: an annotation, a file)."""

ALLOC_CONF_ENV: Final = "PYTORCH_CUDA_ALLOC_CONF"
"""The variable to set: read by every release (2.10+ also read ``PYTORCH_ALLOC_CONF``, and the
old name wins when both are set; ROCm builds read it before ``PYTORCH_HIP_ALLOC_CONF``)."""


@dataclass(frozen=True)
class OtherPod:
    """A pod (or host process) other than the failed one holding memory on the same GPU."""

    namespace: str | None
    pod: str | None
    bytes: int
    pid: int | None = None


@dataclass(frozen=True)
class NodeEvidence:
    """What the node agent's GPUNodeReport says about the failed pod's GPU."""

    gpu_uuid: str | None = None
    gpu_total_bytes: int | None = None
    gpu_free_bytes: int | None = None
    other_pods: tuple[OtherPod, ...] = ()
    allocated: bool | None = None
    growth_bytes_per_second: float | None = None
    process_bytes: int | None = None


@dataclass(frozen=True)
class MemorySample:
    """The failed container's GPU memory at one time (seconds on any monotonic clock)."""

    t_seconds: float
    bytes: int


@dataclass(frozen=True)
class OtherProcess:
    """Memory another process held on the GPU: from the OOM message or from the node report."""

    pid: int | None
    bytes: int
    namespace: str | None = None
    pod: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid, "bytes": self.bytes}
        if self.namespace is not None or self.pod is not None:
            out["namespace"] = self.namespace
            out["pod"] = self.pod
        return out

    @classmethod
    def from_json_dict(cls, data: object) -> OtherProcess:
        """The inverse of `to_json_dict` (and of the operator's evidence, the same keys); any
        JSON is read, a value not of the shape is absent; ValueError without a size."""
        item = data if isinstance(data, Mapping) else {}
        size = json_size(item.get("bytes"))
        if size is None:
            raise ValueError("an other process without its bytes")
        return cls(pid=json_size(item.get("pid")), bytes=size,
                   namespace=_json_str(item.get("namespace")), pod=_json_str(item.get("pod")))


@dataclass(frozen=True)
class Figures:
    """The numbers behind a diagnosis, in bytes; None when the evidence does not say."""

    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    process_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    allowed_bytes: int | None = None
    other_processes: tuple[OtherProcess, ...] = ()
    private_pool_bytes: int | None = None
    gpu_index: int | None = None

    @property
    def reserved_bytes(self) -> int | None:
        """What PyTorch's caching allocator holds: allocated + reserved-but-unallocated."""
        if self.allocated_bytes is None:
            return None
        return self.allocated_bytes + (self.reserved_unallocated_bytes or 0)

    @property
    def other_bytes(self) -> int:
        return sum(p.bytes for p in self.other_processes)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "requested_bytes": self.requested_bytes,
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "process_bytes": self.process_bytes,
            "allocated_bytes": self.allocated_bytes,
            "reserved_unallocated_bytes": self.reserved_unallocated_bytes,
            "allowed_bytes": self.allowed_bytes,
            "other_processes": [p.to_json_dict() for p in self.other_processes],
        }

    @classmethod
    def from_json_dict(cls, data: object) -> Figures:
        """The inverse of `to_json_dict`, and the reader of the operator's evidence, which
        writes the same figures in camelCase (`requestedBytes`, `otherProcesses`: the
        Kubernetes API's case): either key is read. Any JSON is read: a size that is not a whole
        number of bytes in 0..2**63 is None, an other process without one is left out, at most
        MAX_JSON_ITEMS of them are kept."""
        raw = data if isinstance(data, Mapping) else {}

        def size(snake: str) -> int | None:
            return json_size(raw.get(snake, raw.get(_camel(snake))))

        others = []
        listed = raw.get("other_processes", raw.get("otherProcesses"))
        for item in listed[:MAX_JSON_ITEMS] if isinstance(listed, list) else ():
            try:
                others.append(OtherProcess.from_json_dict(item))
            except ValueError:
                continue
        return cls(
            requested_bytes=size("requested_bytes"), total_bytes=size("total_bytes"),
            free_bytes=size("free_bytes"), process_bytes=size("process_bytes"),
            allocated_bytes=size("allocated_bytes"),
            reserved_unallocated_bytes=size("reserved_unallocated_bytes"),
            allowed_bytes=size("allowed_bytes"), other_processes=tuple(others),
            private_pool_bytes=size("private_pool_bytes"), gpu_index=size("gpu_index"))


@dataclass(frozen=True)
class Growth:
    """A steadily rising memory series: the evidence for ``leak``."""

    source: str  # "samples" (node agent), "log" (figures the job printed), "node-rate"
    points: int
    first_bytes: int
    last_bytes: int
    per_unit: float  # bytes per second ("samples", "node-rate") or per logged line ("log")

    @property
    def growth_bytes(self) -> int:
        return self.last_bytes - self.first_bytes

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "points": self.points,
            "first_bytes": self.first_bytes,
            "last_bytes": self.last_bytes,
            "growth_bytes": self.growth_bytes,
            "per_unit": round(self.per_unit, 3),
        }


@dataclass(frozen=True)
class OomEvent:
    """One parsed out-of-memory failure (the last in the log)."""

    family: str
    framework: str | None
    message: str
    figures: Figures
    backend: str | None = None  # "native", "cudaMallocAsync"; None when the wording does not say
    rocm: bool = False
    rank: str | None = None


@dataclass(frozen=True)
class Recommendation:
    """``env=alloc_conf`` when an allocator setting helps, and the concrete actions."""

    env: str | None = None
    alloc_conf: str | None = None
    actions: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        return {"env": self.env, "alloc_conf": self.alloc_conf, "actions": list(self.actions)}

    @classmethod
    def from_json_dict(cls, data: object) -> Recommendation:
        """The inverse of `to_json_dict`; any JSON is read (a value not of the shape is
        absent, at most MAX_JSON_ITEMS actions)."""
        raw = data if isinstance(data, Mapping) else {}
        return cls(env=_json_str(raw.get("env")), alloc_conf=_json_str(raw.get("alloc_conf")),
                   actions=_json_strings(raw.get("actions")))


@dataclass(frozen=True)
class Diagnosis:
    """One primary kind, the contributing kinds, the evidence and the fix."""

    detected: bool
    framework: str | None
    kind: str
    contributing: tuple[str, ...]
    figures: Figures
    torch_version_hint: str | None
    recommendation: Recommendation
    summary: str
    oom_count: int = 0
    message: str | None = None
    alloc_conf_problems: tuple[str, ...] = ()
    growth: Growth | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def to_json_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` object (the issue's keys plus a few extra ones)."""
        out: dict[str, Any] = {
            "detected": self.detected,
            "framework": self.framework,
            "kind": self.kind,
            "contributing": list(self.contributing),
            "figures": self.figures.to_json_dict(),
            "torch_version_hint": self.torch_version_hint,
            "recommendation": self.recommendation.to_json_dict(),
            "summary": self.summary,
            "oom_count": self.oom_count,
            "message": self.message,
            "alloc_conf_problems": list(self.alloc_conf_problems),
        }
        if self.growth is not None:
            out["growth"] = self.growth.to_json_dict()
        for key, value in self.extra:
            out[key] = value
        return out

    @classmethod
    def from_json_dict(cls, data: object) -> Diagnosis:
        """The inverse of `to_json_dict` (`gpu-auditor diagnose --json`, and what `explain`
        rebuilds from a pod's annotations). Any JSON is read: a value not of the shape is
        absent (a kind that is not a string is `unknown`), lists keep MAX_JSON_ITEMS strings;
        `growth` and the extra keys are not read back."""
        raw = data if isinstance(data, Mapping) else {}
        return cls(
            detected=raw.get("detected") is True,
            framework=_json_str(raw.get("framework")),
            kind=_json_str(raw.get("kind")) or DiagnosisKind.UNKNOWN,
            contributing=_json_strings(raw.get("contributing")),
            figures=Figures.from_json_dict(raw.get("figures")),
            torch_version_hint=_json_str(raw.get("torch_version_hint")),
            recommendation=Recommendation.from_json_dict(raw.get("recommendation")),
            summary=_json_str(raw.get("summary")) or "",
            oom_count=json_size(raw.get("oom_count")) or 0,
            message=_json_str(raw.get("message")),
            alloc_conf_problems=_json_strings(raw.get("alloc_conf_problems")),
        )


def json_size(value: object) -> int | None:
    """A count or size read from JSON: a whole number in 0..2**63 (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        return None
    return value


def _json_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _json_strings(value: object) -> tuple[str, ...]:
    items = value[:MAX_JSON_ITEMS] if isinstance(value, list) else []
    return tuple(v for v in items if isinstance(v, str))


def _camel(snake: str) -> str:
    first, *rest = snake.split("_")
    return first + "".join(word.capitalize() for word in rest)
