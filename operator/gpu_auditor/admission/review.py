"""An AdmissionReview in, its response out: the validating webhook's decision, pure.

The body is hostile until parsed (`parse_review` raises `ReviewError` for anything that is not
an `admission.k8s.io/v1` AdmissionReview request). Findings become `warnings`, shown by kubectl
and every client; the request is refused only where the namespace opted into deny (the server
learns that from the path the API server calls, see docs/webhook.md), with the same text. On an
update, findings the old object had already are warned about but never refused: an object that
was admitted before its namespace opted in can still be scaled, labelled, or deleted. A pod
that a controller made is never refused either: its template was checked when the workload was
written, and refusing its pods would break a workload admitted before the label (its next pod,
its restarts) without anyone seeing why. "Made by a controller" is an owner reference with
`controller: true` in a request the API server says comes from outside the namespace's tenants
(`_controlled`): anyone who may create a pod may write any owner reference into it, but not
choose the name the API server authenticated them as.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .objects import check_object

API_VERSION: Final = "admission.k8s.io/v1"
CHECK_LABEL: Final = "gpu-auditor.io/alloc-conf-check"
"""On a namespace: ``deny`` refuses invalid settings, ``off`` stops the checks (the chart's
namespaceSelectors read it; the server learns it from the path it is called on)."""
PREFIX: Final = "gpu-auditor: "
MAX_WARNING: Final = 256
"""Characters of one warning (the API server may cut longer ones)."""
MAX_WARNINGS: Final = 3500
"""Characters of all warnings together (the API server keeps about 4 KiB of them)."""
SERVICE_ACCOUNT: Final = "system:serviceaccount:"
SYSTEM_MASTERS: Final = "system:masters"


class ReviewError(ValueError):
    """The body is not an AdmissionReview request this webhook can answer."""


@dataclass(frozen=True)
class Request:
    uid: str
    operation: str
    obj: Mapping[str, Any]
    old: Mapping[str, Any] | None
    namespace: str = ""
    user: str = ""  # userInfo.username: who the API server authenticated
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    allowed: bool
    result: str  # clean | warned | denied
    warnings: tuple[str, ...]
    message: str | None = None
    patch: list[dict[str, Any]] | None = field(default=None)


def parse_review(body: object) -> Request:
    if not isinstance(body, Mapping) or body.get("kind") != "AdmissionReview":
        raise ReviewError("not an AdmissionReview")
    if body.get("apiVersion") != API_VERSION:
        raise ReviewError(f"AdmissionReview apiVersion must be {API_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("AdmissionReview without a request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not 0 < len(uid) <= 128:
        raise ReviewError("AdmissionReview request without a uid")
    obj, old = request.get("object"), request.get("oldObject")
    user = request.get("userInfo")
    user = user if isinstance(user, Mapping) else {}
    groups = user.get("groups")
    return Request(uid=uid, operation=_text(request.get("operation")),
                   obj=obj if isinstance(obj, Mapping) else {},
                   old=old if isinstance(old, Mapping) else None,
                   namespace=_text(request.get("namespace")), user=_text(user.get("username")),
                   groups=tuple(g for g in groups if isinstance(g, str))
                   if isinstance(groups, list) else ())


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def findings_text(obj: Mapping[str, Any]) -> list[str]:
    """Each finding of the object as its warning line, in order, without repeats. All of them,
    not only the ones that fit in MAX_WARNINGS: an update is refused for a line the old object
    did not have, wherever it is; the checks bound them (MAX_FINDINGS per container,
    MAX_OBJECT_FINDINGS per object)."""
    return list(_findings(obj))


def _findings(obj: Mapping[str, Any]) -> dict[str, bool]:
    """`findings_text`'s lines, each with whether it is a problem (refused under deny) or only
    said (an unknown value)."""
    lines: dict[str, bool] = {}  # a dict keeps the order; `in` on a list made this quadratic
    for checked in check_object(obj):
        for finding in checked.findings:
            line = _cut(PREFIX + finding.text(), MAX_WARNING)
            lines[line] = lines.get(line, False) or finding.problem
    return lines


def validate(request: Request, *, deny: bool) -> Outcome:
    """Warnings for every finding; a refusal only with ``deny`` and a problem that is new."""
    found = _findings(request.obj)
    if not found:
        return Outcome(True, "clean", ())
    lines = list(found)
    warnings = _bounded(lines)
    old = set(findings_text(request.old)) if request.old is not None else set()
    new = [line for line, problem in found.items() if problem and line not in old]
    if deny and new and request.operation != "DELETE" and not _controlled(request):
        message = "; ".join(line.removeprefix(PREFIX) for line in new)
        return Outcome(False, "denied", warnings,
                       _cut(f"{PREFIX}{message} (this namespace refuses invalid allocator "
                            "settings; see docs/webhook.md)", MAX_WARNINGS))
    return Outcome(True, "warned", warnings)


def _controlled(request: Request) -> bool:
    """The object has a controller owner reference, and the request is a controller's: a
    control-plane or node identity (kube-controller-manager's `system:kube-controller-manager`
    or its `system:serviceaccount:kube-system:replicaset-controller`...), a service account of
    another namespace (an operator's), or a cluster admin (`system:masters`). A user, or a
    service account of the object's own namespace (any pod there may hold its token), is a
    tenant: its owner reference may name a controller that does not exist, and its object is
    refused like any other (a pure webhook cannot look the owner up)."""
    meta = request.obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    refs = meta.get("ownerReferences")
    if not (isinstance(refs, list) and any(
            isinstance(r, Mapping) and r.get("controller") is True for r in refs)):
        return False
    if SYSTEM_MASTERS in request.groups:
        return True
    user = request.user
    if user.startswith(SERVICE_ACCOUNT):
        account_namespace = user.removeprefix(SERVICE_ACCOUNT).partition(":")[0]
        namespace = request.namespace or _text(meta.get("namespace"))
        return bool(account_namespace) and account_namespace != namespace
    return user.startswith("system:") and user not in ("system:anonymous",)


def response(uid: str, outcome: Outcome) -> dict[str, Any]:
    """The AdmissionReview the API server expects back."""
    answer: dict[str, Any] = {"uid": uid, "allowed": outcome.allowed}
    if outcome.warnings:
        answer["warnings"] = list(outcome.warnings)
    if outcome.message is not None:
        answer["status"] = {"code": 422, "reason": "Invalid", "message": outcome.message}
    if outcome.patch is not None:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(json.dumps(outcome.patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded(lines: list[str]) -> tuple[str, ...]:
    """As many whole lines as fit in MAX_WARNINGS, then one saying how many more."""
    kept: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        if used + len(line) > MAX_WARNINGS - 80:
            kept.append(f"{PREFIX}{len(lines) - i} more findings not shown; run gpu-auditor "
                        "check-manifest on the object")
            break
        kept.append(line)
        used += len(line)
    return tuple(kept)
