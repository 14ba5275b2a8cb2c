"""One pod's diagnosis, read back for a person: the typed value `explain` prints.

Built once, here, from the objects as the API serves them: the pod (its annotations, owner,
node, containers), the Events the operator posted about it, its owner chain as far as the
user may read it, and its node's GPUNodeReport (already parsed by `base.nodereport`). Nothing
downstream reads the raw dicts.

Everything here is tenant-controlled: whoever may edit a pod may write any annotation, and the
report is writable by any agent's account. So every string is cut to a bound and stripped of
control characters (no escape sequence reaches the user's terminal, no forged line), JSON that
does not parse is said to be unreadable rather than guessed at, and the allocator setting is
offered as a ready-to-paste snippet only when it passes the same validation as
`gpu-auditor check-alloc-conf`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_auditor.base import names
from gpu_auditor.base.containerenv import container_env
from gpu_auditor.base.contract import (
    DEFAULT_ANNOTATION_PREFIX,
    EVENT_COMPONENT,
    Allocated,
    Annotation,
)
from gpu_auditor.base.nodereport import NodeReport
from gpu_auditor.base.podspec import ALLOC_CONF_VARIABLES
from gpu_auditor.diagnosis import ALLOC_CONF_ENV, validate_alloc_conf
from gpu_auditor.diagnosis.model import Diagnosis, Figures, OtherProcess, json_size

TEXT_LIMIT = 2048
"""Characters of one string shown (a summary, an action, an Event message)."""
LIST_LIMIT = 64
"""Items of one list shown (actions, other processes, Events, tenants of a GPU)."""
OPERATOR_REPORTING_COMPONENT = "gpu-auditor.io/operator"
SET_ENV_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "CronJob")
"""Owner kinds whose pod template `kubectl set env` can change. A Job's template is immutable,
a bare pod's env too; other kinds (PyTorchJob, RayCluster...) are edited in their own spec."""


def text(value: object, limit: int = TEXT_LIMIT) -> str:
    """A printable one-line string of at most `limit` characters: control characters (escape
    sequences, newlines) become spaces. Only a string or a number is text: a list or an object
    (deep, or huge: anyone's JSON) is "", never turned into its repr."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    raw = value if isinstance(value, str) else str(value)
    clean = "".join(c if c.isprintable() else " " for c in raw[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value[:LIST_LIMIT] if isinstance(value, list) else []


@dataclass(frozen=True)
class Context:
    """Where and when the operator read the failure it diagnosed: what its `evidence` says
    beside the core's `Diagnosis` (diagnosis/model.py, the one definition of a diagnosis, its
    figures and the other processes), which explain rebuilds from the pod's annotations."""

    diagnosed_at: str = ""
    container: str = ""
    restart_count: int | None = None
    exit_code: int | None = None
    termination_reason: str = ""
    source: str = ""
    other_pods_on_gpu: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sharing:
    """The sharing finding the operator wrote on the pod."""

    findings: tuple[str, ...]
    shared_with: tuple[str, ...]
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class Tenant:
    """One container of a pod on a GPU, from the node report."""

    pod: str
    container: str
    allocated: Allocated
    bytes: int
    pids: tuple[int, ...]
    this_pod: bool


@dataclass(frozen=True)
class GpuTenants:
    uuid: str
    index: int | None
    model: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    tenants: tuple[Tenant, ...]

    @property
    def unattributed_bytes(self) -> int | None:
        """Used memory no listed pod holds (host processes, the driver, pods the agent could
        not name)."""
        if self.used_bytes is None:
            return None
        rest = self.used_bytes - sum(t.bytes for t in self.tenants)
        return rest if rest > 0 else 0


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    count: int
    last_seen: str


@dataclass(frozen=True)
class Setting:
    """The allocator setting to apply, ready to paste."""

    variable: str
    value: str
    container: str
    workload: str
    """`kind/name` of what to change, or "" when only the pod can be recreated."""
    set_env_command: str
    """`kubectl set env` for the workload; "" where it cannot change the pod template."""
    no_command: str
    """Why there is no command (a bare pod, a Job, a kind kubectl does not know)."""
    yaml: str


@dataclass(frozen=True)
class Explanation:
    namespace: str
    pod: str
    uid: str
    node: str
    owners: tuple[str, ...]
    """The owner chain, nearest first, as `Kind/name`."""
    phase: str
    diagnosis: Diagnosis | None
    """The operator's diagnosis, in the core's own type (rebuilt from the annotations)."""
    context: Context | None
    """Where and when it was read (set with `diagnosis`)."""
    diagnosis_failed: str
    sharing: Sharing | None
    gpus: tuple[GpuTenants, ...]
    report: str
    """Where the GPU tenants come from (`GPUNodeReport <node>, generated <t>`), or why none."""
    events: tuple[Event, ...]
    setting: Setting | None
    setting_withheld: str
    notes: tuple[str, ...] = field(default=())
    """What could not be read, said once each."""
    malformed: tuple[str, ...] = field(default=())
    """The operator's annotations that are not of their shape (not JSON, nested too deeply, a
    list where an object belongs): the explanation is printed without them, and explain exits
    2 (docs/explain.md)."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.pod}"


# -- reading the annotations -------------------------------------------------------------------


def _json(raw: str | None, what: str, notes: list[str], malformed: list[str]) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        why = "not valid JSON"
    except RecursionError:  # nested past the parser's depth: 100,000 `[` is 100 KB
        why = "nested too deeply to read"
    notes.append(f"the {what} annotation is {why}; not shown")
    malformed.append(f"the {what} annotation is {why}")
    return None


def _strings(value: object, limit: int = TEXT_LIMIT) -> list[str]:
    return [text(v, limit) for v in _list(value) if isinstance(v, str)]


def _named(p: OtherProcess) -> OtherProcess:
    """An other process, its pod named only when both names are Kubernetes names."""
    if names.is_label(p.namespace) and names.is_subdomain(p.pod):
        return p
    return OtherProcess(p.pid, p.bytes)


def read_diagnosis(ours: Mapping[str, str], notes: list[str],
                   malformed: list[str] | None = None) -> tuple[Diagnosis, Context] | None:
    """The diagnosis annotations (without their prefix) as the core's `Diagnosis` and the
    operator's `Context`; None without one. An annotation not of its shape is left out, said in
    `notes` and listed in `malformed`."""
    kind = ours.get(Annotation.DIAGNOSIS)
    if kind is None:
        return None
    bad: list[str] = [] if malformed is None else malformed
    actions = _json(ours.get(Annotation.ACTIONS), "actions", notes, bad)
    evidence = _json(ours.get(Annotation.EVIDENCE), "evidence", notes, bad)
    if actions is not None and not isinstance(actions, list):
        notes.append("the actions annotation is not a JSON list; not shown")
        bad.append("the actions annotation is not a JSON list")
    if evidence is not None and not isinstance(evidence, Mapping):
        notes.append("the evidence annotation is not a JSON object; not shown")
        bad.append("the evidence annotation is not a JSON object")
    ev = _map(evidence)
    diagnosis = Diagnosis.from_json_dict({
        "detected": True, "kind": text(kind, 64), "summary": text(ours.get(Annotation.SUMMARY)),
        "framework": text(ev.get("framework"), 64) or None,
        "torch_version_hint": text(ev.get("torchVersionHint"), 32) or None,
        "contributing": _strings(ev.get("contributing")), "oom_count": ev.get("oomCount"),
        "figures": ev.get("figures"),
        "recommendation": {
            "alloc_conf": text(ours.get(Annotation.RECOMMENDED_ALLOC_CONF), 1024) or None,
            "actions": _strings(actions)},
        "alloc_conf_problems": _strings(ev.get("currentAllocConfProblems")),
    })
    figures = diagnosis.figures
    diagnosis = dataclasses.replace(diagnosis, figures=dataclasses.replace(
        figures, other_processes=tuple(_named(p) for p in figures.other_processes)))
    exit_code = ev.get("exitCode")
    context = Context(
        diagnosed_at=text(ours.get(Annotation.DIAGNOSED_AT), 64),
        container=text(ev.get("container"), 63),
        restart_count=json_size(ev.get("restartCount")),
        exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool)
        and -2**31 <= exit_code < 2**32 else None,
        termination_reason=text(ev.get("terminationReason"), 128),
        source=text(ev.get("source"), 128),
        other_pods_on_gpu=tuple(_strings(ev.get("otherPodsOnGPU"))),
    )
    return diagnosis, context


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(text(p, 256) for p in (value or "").split(",") if p.strip())[:LIST_LIMIT]


def read_sharing(ours: Mapping[str, str]) -> Sharing | None:
    if Annotation.SHARING_FINDING not in ours:
        return None
    return Sharing(findings=_split(ours.get(Annotation.SHARING_FINDING)),
                   shared_with=_split(ours.get(Annotation.GPU_SHARED_WITH)),
                   gpus=_split(ours.get(Annotation.SHARING_GPU)))


def our_annotations(pod: Mapping[str, Any], prefix: str) -> dict[str, str]:
    """The pod's annotations under `prefix`, the prefix cut off; non-string values skipped."""
    raw = _map(_map(pod.get("metadata")).get("annotations"))
    return {k[len(prefix):]: v for k, v in raw.items()
            if isinstance(k, str) and k.startswith(prefix) and isinstance(v, str)}


# -- the node report -----------------------------------------------------------------------------


def gpu_tenants(report: NodeReport, uid: str, sharing: Sharing | None,
                others: Sequence[OtherProcess]) -> tuple[GpuTenants, ...]:
    """The GPUs the pod is on (by UID in the report), or the report names in its finding, or
    that hold a process the OOM message names, each with every pod on it."""
    pids = {p.pid for p in others if p.pid is not None}
    wanted = {g.uuid for g in report.gpus
              if any(e.uid == uid or pids & set(e.pids) for e in g.pods)}
    if sharing is not None:
        wanted |= set(sharing.gpus)
    out = []
    for gpu in report.gpus:
        if gpu.uuid not in wanted:
            continue
        tenants = tuple(
            Tenant(pod=e.ref or f"(pod UID {e.uid})", container=e.container,
                   allocated=e.allocated, bytes=e.bytes, pids=e.pids, this_pod=e.uid == uid)
            for e in sorted(gpu.pods, key=lambda e: -e.bytes)[:LIST_LIMIT])
        out.append(GpuTenants(uuid=text(gpu.uuid, 128), index=gpu.index, model=text(gpu.model),
                              total_bytes=gpu.total_bytes, used_bytes=gpu.used_bytes,
                              free_bytes=gpu.free_bytes, tenants=tenants))
    return tuple(out)


def name_processes(figures: Figures, report: NodeReport | None) -> Figures:
    """The OOM message's other processes, each named by the pod the report lists its pid
    under (host pids: the agent reads them from the node, as the message does)."""
    if report is None or not figures.other_processes:
        return figures
    by_pid = {pid: e for _, e in report.pod_entries() for pid in e.pids if e.ref}
    named = []
    for p in figures.other_processes:
        entry = by_pid.get(p.pid) if p.pid is not None and not p.pod else None
        named.append(p if entry is None else OtherProcess(p.pid, p.bytes, entry.namespace,
                                                          entry.pod))
    return dataclasses.replace(figures, other_processes=tuple(named))


# -- Events and the setting ----------------------------------------------------------------------


def read_events(items: object, uid: str) -> tuple[Event, ...]:
    """The operator's Events about this pod (this UID), oldest first."""
    events = []
    for raw in items if isinstance(items, list) else []:
        raw = _map(raw)
        involved = _map(raw.get("involvedObject"))
        ours = (_map(raw.get("source")).get("component") == EVENT_COMPONENT
                or raw.get("reportingComponent") == OPERATOR_REPORTING_COMPONENT)
        if not ours or (uid and involved.get("uid") not in (uid, None)):
            continue
        when = raw.get("lastTimestamp") or raw.get("eventTime") or raw.get("firstTimestamp")
        events.append(Event(type=text(raw.get("type"), 32), reason=text(raw.get("reason"), 64),
                            message=text(raw.get("message")),
                            count=json_size(raw.get("count")) or 1, last_seen=text(when, 64)))
    events.sort(key=lambda e: e.last_seen)
    return tuple(events[-LIST_LIMIT:])


def _container_variable(pod: Mapping[str, Any], container: str) -> str:
    """The allocator variable the container sets already (so the snippet replaces it), else
    the one torch has read longest."""
    for c in _list(_map(pod.get("spec")).get("containers")):
        if _map(c).get("name") != container:
            continue
        env = container_env(_map(c), ALLOC_CONF_VARIABLES)
        for variable in ALLOC_CONF_VARIABLES:
            if variable in env and env[variable].declared:
                return variable
    return ALLOC_CONF_ENV


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def setting(pod: Mapping[str, Any], namespace: str, diagnosis: Diagnosis | None,
            context: Context | None, owners: Sequence[str]) -> tuple[Setting | None, str]:
    """The setting as a `kubectl set env` line and an env snippet for the owning workload, or
    why none is offered."""
    if diagnosis is None or not diagnosis.recommendation.alloc_conf:
        return None, ""
    value = diagnosis.recommendation.alloc_conf
    problems = validate_alloc_conf(value, torch_version=diagnosis.torch_version_hint or None)
    if problems:
        return None, f"the recommended value {value!r} does not validate: {problems[0]}"
    named = context.container if context is not None else ""
    container = named if names.is_label(named) else ""
    variable = _container_variable(pod, container)
    workload = owners[-1] if owners else ""  # the outermost: a Deployment, not its ReplicaSet
    kind = workload.split("/", 1)[0]
    command, why = "", ""
    if kind in SET_ENV_KINDS:
        c_flag = f" -c {container}" if container else ""
        command = (f"kubectl -n {namespace} set env {workload.lower()}{c_flag} "
                   f"{variable}={_shell_quote(value)}")
    elif not workload:
        why = "the pod has no owner and a pod's env cannot change; recreate it with"
    elif kind == "Job":
        why = "a Job's pod template cannot change; recreate the Job with"
    else:
        why = f"edit the pod template in the {kind}'s spec"
    yaml = (f"containers:\n  - name: {container or '<container>'}\n    env:\n"
            f"      - name: {variable}\n        value: {json.dumps(value)}")
    return Setting(variable=variable, value=value, container=container, workload=workload,
                   set_env_command=command, no_command=why, yaml=yaml), ""


# -- the whole ----------------------------------------------------------------------------------


def explain(pod: Mapping[str, Any], *, events: object, owners: Sequence[str],
            report: NodeReport | None, report_note: str,
            prefix: str = DEFAULT_ANNOTATION_PREFIX,
            notes: Sequence[str] = ()) -> Explanation:
    """The explanation of one pod from what the API served (see `podreads`)."""
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    namespace, name = text(meta.get("namespace"), 63), text(meta.get("name"), 253)
    uid = text(meta.get("uid"), 64)
    said = list(notes)
    malformed: list[str] = []
    ours = our_annotations(pod, prefix)
    read = read_diagnosis(ours, said, malformed)
    diagnosis, context = read if read is not None else (None, None)
    sharing = read_sharing(ours)
    if diagnosis is not None:
        diagnosis = dataclasses.replace(diagnosis,
                                        figures=name_processes(diagnosis.figures, report))
    gpus = (gpu_tenants(report, uid, sharing,
                        diagnosis.figures.other_processes if diagnosis else ())
            if report is not None else ())
    chosen, withheld = setting(pod, namespace, diagnosis, context, owners)
    return Explanation(
        namespace=namespace, pod=name, uid=uid, node=text(spec.get("nodeName"), 253),
        owners=tuple(text(o, 320) for o in owners),
        phase=text(_map(pod.get("status")).get("phase"), 32),
        diagnosis=diagnosis, context=context,
        diagnosis_failed=text(ours.get(Annotation.DIAGNOSIS_FAILED)),
        sharing=sharing, gpus=gpus, report=text(report_note), events=read_events(events, uid),
        setting=chosen, setting_withheld=text(withheld), notes=tuple(text(n) for n in said),
        malformed=tuple(malformed),
    )
