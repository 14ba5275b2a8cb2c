"""A `JobView` as a person reads it (`render`), and as JSON for scripts (`to_json`).

The text answers, in order: which pod failed first, its rank, and of what (the root cause's
diagnosis); the figures behind it; what to do; where to set the recommended setting; which
pods failed after it and how each read; the operator's Events about the job.
"""

from __future__ import annotations

from typing import Any

from gpu_auditor.commands.explaintext import (
    INDENT,
    _diagnosis,
    _diagnosis_json,
    _figures,
    _plain,
    event_lines,
)
from gpu_auditor.commands.explanation import Context
from gpu_auditor.commands.jobview import JobView


def render(v: JobView) -> str:
    """The job view for a person."""
    lines = [v.ref]
    if v.diagnosis is None or not v.root_pod:
        lines += ["", "No root cause on this job: none of its failures seen came first as an "
                  "out-of-memory error (or the operator does not group this kind, or does not "
                  "watch its namespace)."]
    else:
        rank = f"rank {v.rank}" if v.rank else "rank unknown"
        where = f" ({v.position})" if v.position else ""
        at = f", failed at {v.failed_at}" if v.failed_at else ""
        lines += [f"{INDENT}root cause: pod {v.root_pod}, {rank}{where}{at}", "",
                  *_diagnosis(v.diagnosis, v.context or Context())]
        figures = _figures(v.diagnosis.figures)
        if figures:
            lines += ["", "Figures:", *(INDENT + f for f in figures)]
        if v.diagnosis.recommendation.actions:
            lines += ["", "What to do, in order:"]
            lines += [f"{INDENT}{n}. {a}"
                      for n, a in enumerate(v.diagnosis.recommendation.actions, 1)]
        if v.setting:
            lines += ["", f"Apply it: {v.setting}"]
        elif v.setting_withheld:
            lines += ["", f"No setting offered: {v.setting_withheld}"]
        lines += ["", _consequences_head(v)]
        for pod in v.consequence_pods:
            lines.append(f"{INDENT}{pod.pod}  {pod.says}")
        if v.consequence_pods_left:
            lines.append(f"{INDENT}... and {v.consequence_pods_left} more")
    others = [p for p in v.own_ooms if p.pod != v.root_pod]
    if others:
        lines += ["", "Pods with a diagnosis of their own:"]
        lines += [f"{INDENT}{p.pod}  {p.says}" for p in others]
    lines += event_lines(v.events)
    if v.notes:
        lines += ["", "Not shown:", *(f"{INDENT}- {n}" for n in v.notes)]
    return "\n".join(lines)


def _consequences_head(v: JobView) -> str:
    count = v.consequence_count if v.consequence_count is not None else len(v.consequence_pods)
    how = ", ".join(f"{n} {kind}" for kind, n in v.consequences)
    head = f"Consequences: {count} pod{'s' if count != 1 else ''} failed after it" + (
        f" ({how})" if how else "")
    extra = [f"{v.own_oom_count} ran out of memory on their own" if v.own_oom_count else "",
             f"{v.other_failure_count} failed of something else" if v.other_failure_count
             else ""]
    return "; ".join([head, *(e for e in extra if e)]) + (":" if v.consequence_pods else "")


def to_json(v: JobView) -> dict[str, Any]:
    """The job view as one JSON object (snake_case, like `explain --json`), sizes in bytes."""
    out: dict[str, Any] = _plain(v)
    out["consequences"] = [{"how": how, "pods": n} for how, n in v.consequences]
    out.pop("context")
    out["diagnosis"] = _diagnosis_json(v.diagnosis, v.context or Context()) \
        if v.diagnosis is not None else None
    return out
