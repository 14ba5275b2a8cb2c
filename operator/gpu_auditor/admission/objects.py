"""The pod specs inside a Kubernetes object: a Pod, the template of a workload, a List's items.

Objects are the tenant's (a manifest file, an AdmissionReview): any shape is accepted, and what
is not of the documented shape has no pod spec.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .findings import NOT_CHECKED, Budget, Finding, OverBudget, check_container, shown

OPT_IN: Final = "true"
OPT_OUT: Final = "false"


def opted_in(pod: Mapping[str, Any], label: str, *, namespace_opted_in: bool) -> bool:
    """The pod's own ``label`` decides (``OPT_IN``/``OPT_OUT``); without one, its namespace's
    opt-in (never by default)."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(label) if isinstance(labels, Mapping) else None
    if value == OPT_IN:
        return True
    if value == OPT_OUT:
        return False
    return namespace_opted_in


TEMPLATE: Final = ("spec", "template", "spec")
POD_SPEC_PATHS: Final[dict[str, tuple[str, ...]]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": TEMPLATE,
    "StatefulSet": TEMPLATE,
    "DaemonSet": TEMPLATE,
    "ReplicaSet": TEMPLATE,
    "ReplicationController": TEMPLATE,
    "Job": TEMPLATE,
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
"""Where each kind keeps its pod spec (the webhook is registered for Pods, Deployments,
StatefulSets, DaemonSets, Jobs and CronJobs; check-manifest reads the others too)."""
MAX_LIST_DEPTH: Final = 4
CONTAINER_LISTS: Final = ("initContainers", "containers")
MAX_CONTAINERS: Final = 128
"""Containers of one pod spec that are checked; the rest are named in one finding (a pod with
more is either hostile or generated, and the API server stops waiting after a few seconds)."""
MAX_OBJECT_FINDINGS: Final = 64
"""Findings of one object; the containers after the one that reaches it are named in one
finding, not checked (an admission response keeps about 14 warnings anyway)."""
VARIABLE: Final = "PYTORCH_CUDA_ALLOC_CONF"
"""The variable a finding about the object as a whole (not one container) names."""
OVER_BUDGET: Final = "not checked past this point: the input's work bound is spent"


@dataclass(frozen=True)
class Checked:
    """One object with a pod spec, and its findings."""

    kind: str
    namespace: str
    name: str
    findings: tuple[Finding, ...]

    @property
    def ref(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name or '(no name)'}"


@dataclass
class _Walk:
    """One document's walk: what it has seen (a YAML alias names the same Python object again),
    each container's findings by identity, and the input's budget."""

    budget: Budget
    seen: set[int] = field(default_factory=set)
    containers: dict[int, list[Finding]] = field(default_factory=dict)

    def first_visit(self, node: object) -> bool:
        if id(node) in self.seen:
            return False
        self.seen.add(id(node))
        return True


def pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec of a Pod or a workload, None for any other kind or shape."""
    kind = obj.get("kind")
    path = POD_SPEC_PATHS.get(kind) if isinstance(kind, str) else None
    node: Any = obj
    for step in path or ():
        node = node.get(step) if isinstance(node, Mapping) else None
    return node if path and isinstance(node, Mapping) else None


def containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field_name in CONTAINER_LISTS:
        items = spec.get(field_name)
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping):
                yield item


def check_spec(spec: Mapping[str, Any], budget: Budget | None = None) -> list[Finding]:
    """The findings of a pod spec's containers: at most MAX_CONTAINERS checked and about
    MAX_OBJECT_FINDINGS kept, the rest named in one finding."""
    return _check_spec(spec, _Walk(budget or Budget()))


def _check_spec(spec: Mapping[str, Any], walk: _Walk) -> list[Finding]:
    findings: list[Finding] = []
    for count, container in enumerate(containers(spec)):
        if count == MAX_CONTAINERS or len(findings) >= MAX_OBJECT_FINDINGS:
            rest = sum(1 for _ in containers(spec)) - count
            why = (f"after the first {MAX_CONTAINERS}" if count == MAX_CONTAINERS else
                   f"after {MAX_OBJECT_FINDINGS} findings")
            findings.append(Finding("*", VARIABLE, NOT_CHECKED,
                                    f"{rest} containers {why} not checked"))
            break
        known = walk.containers.get(id(container))
        if known is None:
            try:
                known = check_container(container, walk.budget)
            except OverBudget:
                findings.append(Finding("*", VARIABLE, NOT_CHECKED, OVER_BUDGET))
                break
            walk.containers[id(container)] = known
        findings += known
    return findings


def check_object(obj: object, budget: Budget | None = None) -> Iterator[Checked]:
    """Each object with a pod spec in ``obj`` (itself, or a List's items, Lists nested up to
    MAX_LIST_DEPTH), with its findings; an object named again (a YAML alias) is checked once.
    ``budget`` bounds the work of a whole input (`Budget.spent` once it ran out: the rest of the
    input is not checked, and the last object's findings say so)."""
    walk = _Walk(budget or Budget())
    try:
        yield from _check_object(obj, 0, walk)
    except OverBudget:
        return


def _check_object(obj: object, depth: int, walk: _Walk) -> Iterator[Checked]:
    if not isinstance(obj, Mapping) or not walk.first_visit(obj):
        return
    walk.budget.spend(1)
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) else ""
    items = obj.get("items")
    if kind.endswith("List") and isinstance(items, list) and depth < MAX_LIST_DEPTH:
        if walk.first_visit(items):
            for item in items:
                yield from _check_object(item, depth + 1, walk)
        return
    spec = pod_spec(obj)
    if spec is None:
        return
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    yield Checked(shown(kind), _name(meta.get("namespace")), _name(meta.get("name")),
                  tuple(_check_spec(spec, walk)))


def _name(value: object) -> str:
    return shown(value) if isinstance(value, str) else ""
