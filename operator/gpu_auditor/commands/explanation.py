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
    sequences, newlines) become spaces."""
    if value is None:
        return ""
    raw = value if isinstance(value, str) else str(value)
    clean = "".join(c if c.isprintable() else " " for c in raw[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def _size(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        return None
    return value


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value[:LIST_LIMIT] if isinstance(value, list) else []


@dataclass(frozen=True)
class OtherProcess:
    """A process the OOM message names on the same GPU, and the pod the node report puts it
    in (when it does)."""

    pid: int
    bytes: int | None
    pod: str = ""


@dataclass(frozen=True)
class Figures:
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    process_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    allowed_bytes: int | None = None
    other_processes: tuple[OtherProcess, ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    """What the operator wrote on the pod."""

    kind: str
    summary: str = ""
    diagnosed_at: str = ""
    recommended_alloc_conf: str = ""
    actions: tuple[str, ...] = ()
    container: str = ""
    restart_count: int | None = None
    exit_code: int | None = None
    termination_reason: str = ""
    source: str = ""
    framework: str = ""
    torch_version_hint: str = ""
    oom_count: int | None = None
    contributing: tuple[str, ...] = ()
    other_pods_on_gpu: tuple[str, ...] = ()
    current_alloc_conf_problems: tuple[str, ...] = ()
    figures: Figures = Figures()


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

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.pod}"


# -- reading the annotations -------------------------------------------------------------------


def _json(raw: str | None, what: str, notes: list[str]) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        notes.append(f"the {what} annotation is not valid JSON; not shown")
        return None


def _figures(raw: Mapping[str, Any]) -> Figures:
    others = []
    for item in _list(raw.get("otherProcesses")):
        item = _map(item)
        pid = _size(item.get("pid"))
        if pid is None:
            continue
        pod = ""
        if names.is_label(item.get("namespace")) and names.is_subdomain(item.get("pod")):
            pod = f"{item['namespace']}/{item['pod']}"
        others.append(OtherProcess(pid=pid, bytes=_size(item.get("bytes")), pod=pod))
    return Figures(
        requested_bytes=_size(raw.get("requestedBytes")),
        total_bytes=_size(raw.get("totalBytes")),
        free_bytes=_size(raw.get("freeBytes")),
        process_bytes=_size(raw.get("processBytes")),
        allocated_bytes=_size(raw.get("allocatedBytes")),
        reserved_unallocated_bytes=_size(raw.get("reservedUnallocatedBytes")),
        allowed_bytes=_size(raw.get("allowedBytes")),
        other_processes=tuple(others),
    )


def _strings(value: object) -> tuple[str, ...]:
    return tuple(text(v) for v in _list(value) if isinstance(v, str))


def read_diagnosis(ours: Mapping[str, str], notes: list[str]) -> Diagnosis | None:
    """The diagnosis annotations (without their prefix) as a typed value; None without one."""
    kind = ours.get(Annotation.DIAGNOSIS)
    if kind is None:
        return None
    actions = _json(ours.get(Annotation.ACTIONS), "actions", notes)
    evidence = _json(ours.get(Annotation.EVIDENCE), "evidence", notes)
    if actions is not None and not isinstance(actions, list):
        notes.append("the actions annotation is not a JSON list; not shown")
    if evidence is not None and not isinstance(evidence, Mapping):
        notes.append("the evidence annotation is not a JSON object; not shown")
    ev = _map(evidence)
    return Diagnosis(
        kind=text(kind, 64),
        summary=text(ours.get(Annotation.SUMMARY)),
        diagnosed_at=text(ours.get(Annotation.DIAGNOSED_AT), 64),
        recommended_alloc_conf=text(ours.get(Annotation.RECOMMENDED_ALLOC_CONF), 1024),
        actions=_strings(actions),
        container=text(ev.get("container"), 63) if isinstance(ev.get("container"), str) else "",
        restart_count=_size(ev.get("restartCount")),
        exit_code=ev.get("exitCode") if isinstance(ev.get("exitCode"), int)
        and not isinstance(ev.get("exitCode"), bool) else None,
        termination_reason=text(ev.get("terminationReason"), 128),
        source=text(ev.get("source"), 128),
        framework=text(ev.get("framework"), 64),
        torch_version_hint=text(ev.get("torchVersionHint"), 32),
        oom_count=_size(ev.get("oomCount")),
        contributing=_strings(ev.get("contributing")),
        other_pods_on_gpu=_strings(ev.get("otherPodsOnGPU")),
        current_alloc_conf_problems=_strings(ev.get("currentAllocConfProblems")),
        figures=_figures(_map(ev.get("figures"))),
    )


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
    pids = {p.pid for p in others}
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
    by_pid = {pid: e.ref for _, e in report.pod_entries() for pid in e.pids if e.ref}
    named = tuple(OtherProcess(p.pid, p.bytes, p.pod or by_pid.get(p.pid, ""))
                  for p in figures.other_processes)
    return Figures(**{**figures.__dict__, "other_processes": named})


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
                            message=text(raw.get("message")), count=_size(raw.get("count")) or 1,
                            last_seen=text(when, 64)))
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
            owners: Sequence[str]) -> tuple[Setting | None, str]:
    """The setting as a `kubectl set env` line and an env snippet for the owning workload, or
    why none is offered."""
    if diagnosis is None or not diagnosis.recommended_alloc_conf:
        return None, ""
    value = diagnosis.recommended_alloc_conf
    problems = validate_alloc_conf(value, torch_version=diagnosis.torch_version_hint or None)
    if problems:
        return None, f"the recommended value {value!r} does not validate: {problems[0]}"
    container = diagnosis.container if names.is_label(diagnosis.container) else ""
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
    ours = our_annotations(pod, prefix)
    diagnosis = read_diagnosis(ours, said)
    sharing = read_sharing(ours)
    if diagnosis is not None:
        diagnosis = Diagnosis(**{**diagnosis.__dict__,
                                 "figures": name_processes(diagnosis.figures, report)})
    gpus = (gpu_tenants(report, uid, sharing,
                        diagnosis.figures.other_processes if diagnosis else ())
            if report is not None else ())
    chosen, withheld = setting(pod, namespace, diagnosis, owners)
    return Explanation(
        namespace=namespace, pod=name, uid=uid, node=text(spec.get("nodeName"), 253),
        owners=tuple(text(o, 320) for o in owners),
        phase=text(_map(pod.get("status")).get("phase"), 32),
        diagnosis=diagnosis,
        diagnosis_failed=text(ours.get(Annotation.DIAGNOSIS_FAILED)),
        sharing=sharing, gpus=gpus, report=text(report_note), events=read_events(events, uid),
        setting=chosen, setting_withheld=text(withheld), notes=tuple(text(n) for n in said),
    )
