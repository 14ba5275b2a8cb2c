"""An `Explanation` as a person reads it (`render`), and as JSON for scripts (`to_json`).

The text answers, in order: what died and why (the diagnosis and its summary), the figures
behind it, who else is on the GPU (by pod, from the node report), what to do (the actions in
order), and the setting to apply as a line to paste. Every string it prints was cleaned when
the explanation was built (`explanation.text`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gpu_auditor.commands.explanation import Context, Event, Explanation, GpuTenants
from gpu_auditor.diagnosis.model import Diagnosis, Figures, OtherProcess
from gpu_auditor.diagnosis.sizes import format_size

HOST_OOM = "host-oom-killed"
ALLOCATED_SAYS = {
    "true": "allocated this GPU",
    "false": "NOT allocated this GPU (no nvidia.com/gpu request for it)",
    "unknown": "allocation unknown (kubelet not reachable)",
    "host": "host process",
}
INDENT = "  "


def _figures(f: Figures) -> list[str]:
    named = (
        ("requested", f.requested_bytes, "the allocation that failed"),
        ("GPU total", f.total_bytes, ""),
        ("GPU free", f.free_bytes, "when it failed"),
        ("this process", f.process_bytes, "in use by the job's process"),
        ("allocated", f.allocated_bytes, "by PyTorch, live tensors"),
        ("reserved, unallocated", f.reserved_unallocated_bytes, "cached by PyTorch, unused"),
        ("allowed", f.allowed_bytes, "the process's cap (memory fraction)"),
    )
    lines = [f"{name:<22} {format_size(v):>12}" + (f"  {why}" if why else "")
             for name, v, why in named if v is not None]
    for p in f.other_processes:
        who = f"pod {_ref(p)}" if p.pod else "not in any pod the node report lists"
        lines.append(f"{'other process':<22} {format_size(p.bytes):>12}  pid {p.pid}: {who}")
    return lines


def _ref(p: OtherProcess) -> str:
    return f"{p.namespace}/{p.pod}" if p.namespace and p.pod else ""


def _diagnosis(d: Diagnosis, c: Context) -> list[str]:
    about = ", ".join(x for x in (d.framework, d.torch_version_hint and
                                  f"torch {d.torch_version_hint}") if x)
    lines = [f"Diagnosis: {d.kind}" + (f" ({about})" if about else "")]
    where = []
    if c.container:
        where.append(f"container {c.container}")
    if c.restart_count is not None:
        where.append(f"restart {c.restart_count}")
    if c.termination_reason or c.exit_code is not None:
        code = f" exit code {c.exit_code}" if c.exit_code is not None else ""
        where.append(f"terminated: {c.termination_reason or '?'}{code and ',' + code}")
    if c.source:
        where.append(f"read from the {c.source}")
    if c.diagnosed_at:
        where.append(f"at {c.diagnosed_at}")
    if where:
        lines.append(INDENT + ", ".join(where))
    if d.summary:
        lines.append(INDENT + d.summary)
    if d.oom_count and d.oom_count > 1:
        lines.append(f"{INDENT}{d.oom_count} out-of-memory errors in the log; this is the last")
    if d.contributing:
        lines.append(f"{INDENT}also contributing: {', '.join(d.contributing)}")
    return lines


def _gpu(g: GpuTenants) -> list[str]:
    index = f"GPU {g.index} " if g.index is not None else "GPU "
    size = ""
    if g.total_bytes:
        size = f": {format_size(g.used_bytes)} of {format_size(g.total_bytes)} used"
        if g.free_bytes is not None:
            size += f", {format_size(g.free_bytes)} free"
    lines = [f"{INDENT}{index}{g.uuid}" + (f" ({g.model})" if g.model else "") + size]
    for t in g.tenants:
        me = "  <- this pod" if t.this_pod else ""
        container = f" [{t.container}]" if t.container else ""
        pids = f", pids {', '.join(map(str, t.pids[:8]))}" if t.pids else ""
        lines.append(f"{INDENT * 2}{format_size(t.bytes):>12}  {t.pod}{container}: "
                     f"{ALLOCATED_SAYS.get(t.allocated.value, t.allocated.value)}{pids}{me}")
    rest = g.unattributed_bytes
    if rest:
        lines.append(f"{INDENT * 2}{format_size(rest):>12}  in no pod the report lists "
                     "(host processes, the driver)")
    return lines


def render(e: Explanation) -> str:
    """The explanation for a person."""
    owner = f", owned by {' <- '.join(reversed(e.owners))}" if e.owners else ", no owner"
    lines = [f"Pod {e.ref}{owner}", f"{INDENT}node {e.node or '(none)'}, phase {e.phase or '?'}"]
    d = e.diagnosis
    if d is None and e.sharing is None and not e.diagnosis_failed:
        lines += ["", "No gpu-auditor diagnosis on this pod (no OOM seen, or the operator does "
                  "not watch its namespace)."]
    if e.diagnosis_failed:
        lines += ["", f"The operator could not diagnose a failure: {e.diagnosis_failed}"]
    if d is not None:
        lines += ["", *_diagnosis(d, e.context or Context())]
        figures = _figures(d.figures)
        if figures:
            lines += ["", "Figures:", *(INDENT + f for f in figures)]
    if e.sharing is not None:
        sh = e.sharing
        lines += ["", f"GPU sharing: {', '.join(sh.findings)} on {', '.join(sh.gpus) or '?'}",
                  f"{INDENT}shared with {', '.join(sh.shared_with) or '(nobody named)'}"]
    if e.gpus:
        lines += ["", f"Tenants of its GPU, from {e.report}:"]
        for g in e.gpus:
            lines += _gpu(g)
    elif e.report and (d is None or d.kind != HOST_OOM):
        lines += ["", f"Tenants of its GPU: {e.report}"]
    if d is not None and d.recommendation.actions:
        lines += ["", "What to do, in order:"]
        lines += [f"{INDENT}{n}. {a}" for n, a in enumerate(d.recommendation.actions, 1)]
    if d is not None and d.alloc_conf_problems:
        lines += ["", "Problems of the job's current allocator setting:"]
        lines += [f"{INDENT}- {p}" for p in d.alloc_conf_problems]
    if e.setting is not None:
        s = e.setting
        if s.set_env_command:
            lines += ["", f"Apply {s.variable}={s.value} to {s.workload}:",
                      INDENT + s.set_env_command, f"{INDENT}or in its pod template:"]
        else:
            to = f" to {s.workload}" if s.workload else ""
            lines += ["", f"Apply {s.variable}={s.value}{to}: {s.no_command}:"]
        lines += [INDENT * 2 + line for line in s.yaml.splitlines()]
    elif e.setting_withheld:
        lines += ["", f"No setting offered: {e.setting_withheld}"]
    lines += event_lines(e.events)
    if e.notes:
        lines += ["", "Not shown:", *(f"{INDENT}- {n}" for n in e.notes)]
    return "\n".join(lines)


def event_lines(events: Sequence[Event]) -> list[str]:
    """The Events block of a pod's or a job's view ([] when there are none)."""
    if not events:
        return []
    lines = ["", "Events from gpu-auditor:"]
    for ev in events:
        times = f" (x{ev.count})" if ev.count > 1 else ""
        lines.append(f"{INDENT}{ev.last_seen}  {ev.type} {ev.reason}{times}: {ev.message}")
    return lines


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def to_json(e: Explanation) -> dict[str, Any]:
    """The explanation as one JSON object (snake_case, like `diagnose --json`), sizes in
    bytes. Its `diagnosis` keeps the keys it has had since 0.2 (the core's diagnosis and the
    operator's context in one object)."""
    out: dict[str, Any] = _plain(e)
    for gpu, typed in zip(out["gpus"], e.gpus, strict=True):
        gpu["unattributed_bytes"] = typed.unattributed_bytes
    out.pop("context")
    out["diagnosis"] = _diagnosis_json(e.diagnosis, e.context or Context()) \
        if e.diagnosis is not None else None
    return out


def _diagnosis_json(d: Diagnosis, c: Context) -> dict[str, Any]:
    f = d.figures
    return {
        "kind": d.kind, "summary": d.summary, "diagnosed_at": c.diagnosed_at,
        "recommended_alloc_conf": d.recommendation.alloc_conf or "",
        "actions": list(d.recommendation.actions), "container": c.container,
        "restart_count": c.restart_count, "exit_code": c.exit_code,
        "termination_reason": c.termination_reason, "source": c.source,
        "framework": d.framework or "", "torch_version_hint": d.torch_version_hint or "",
        "oom_count": d.oom_count or None, "contributing": list(d.contributing),
        "other_pods_on_gpu": list(c.other_pods_on_gpu),
        "current_alloc_conf_problems": list(d.alloc_conf_problems),
        "figures": {
            "requested_bytes": f.requested_bytes, "total_bytes": f.total_bytes,
            "free_bytes": f.free_bytes, "process_bytes": f.process_bytes,
            "allocated_bytes": f.allocated_bytes,
            "reserved_unallocated_bytes": f.reserved_unallocated_bytes,
            "allowed_bytes": f.allowed_bytes,
            "other_processes": [{"pid": p.pid, "bytes": p.bytes, "pod": _ref(p)}
                                for p in f.other_processes],
        },
    }
