"""An owner's recommended allocator setting put into its next pod, as a JSON patch (issue 28).

Only a pod labelled ``gpu-auditor.io/apply-recommendation=true``, or of a namespace labelled so
(the server learns that from the path the API server calls) and not labelled ``false`` itself,
is changed, and only when its owner, verified link by link (`ownerchain`), carries a
`recommended-alloc-conf` whose trial (`base.trial`) is still open and not one that did not help.
Off by default.

In the container the recommendation was made for (every app container when the pod has none of
that name), the keys the recommendation sets are merged into the setting torch reads, key by
key, the container's own keys winning:

- a container whose env sets neither ``PYTORCH_CUDA_ALLOC_CONF`` nor ``PYTORCH_ALLOC_CONF`` gets
  ``PYTORCH_CUDA_ALLOC_CONF`` with the keys;
- one that sets the variable torch reads (the old name when both are set) gets the keys its
  value lacks appended to that entry's value (the last entry of the name: the one the kubelet
  keeps), so its own keys and any ``$(VAR)`` in it stay as they are;
- one whose setting is not known at admission (``valueFrom``, an ``envFrom`` source that may set
  it, a reference to one) is left as it is, with a warning: never guessed at;
- a key the container's torch release rejects (its spec's release, else the one the diagnosis
  settled on) is never added, and said.

The pod gets the annotation ``recommendation-applied`` saying what was set and why; the operator
posts the Event (the webhook calls nothing but the owner reads). A pod that carries the
annotation already is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_auditor.base.containerenv import container_env, known_values
from gpu_auditor.base.contract import Annotation
from gpu_auditor.base.podspec import ALLOC_CONF_VARIABLES, TORCH_VARIABLES, release_hint
from gpu_auditor.base.trial import (
    APPLIED_LIMIT,
    VALUE_LIMIT,
    Trial,
    entries,
    has_setting,
    parse_trial,
    rejects,
    release_range,
    render,
)
from gpu_auditor.diagnosis import allocconf
from gpu_auditor.diagnosis.torchversion import TorchRange, parse_torch_version

from .findings import shown
from .objects import opted_in

APPLY_LABEL: Final = "gpu-auditor.io/apply-recommendation"
"""On a namespace or a pod (template): ``true`` opts in; on a pod, ``false`` opts out of its
namespace's."""
CUDA_VARIABLE, GENERIC_VARIABLE = ALLOC_CONF_VARIABLES
GENERIC_FROM: Final = (2, 9)
"""The first torch release that reads `PYTORCH_ALLOC_CONF` (when the old name is not set)."""
WARNING: Final = "gpu-auditor: recommended setting not applied"


@dataclass(frozen=True)
class Recommended:
    """What a verified owner recommends for its next pods."""

    owner: str
    """How the owner is named in the pod's annotation (`Job train`)."""
    setting: str
    """The keys to merge in (`expandable_segments:True`)."""
    trial: Trial | None
    """The owner's trial of it, when the operator recorded one."""


@dataclass(frozen=True)
class Application:
    patch: list[dict[str, Any]]
    """The JSON patch; [] when nothing is to change."""
    warnings: tuple[str, ...]
    applied: tuple[tuple[str, str, str], ...]
    """(container, variable, the value it now has) for each container that got the keys."""
    note: str = ""
    """The `recommendation-applied` annotation written on the pod ("" when nothing)."""


def wants_recommendation(pod: Mapping[str, Any], *, namespace_opted_in: bool) -> bool:
    """The pod's own label decides; without one, its namespace's opt-in (never by default)."""
    return opted_in(pod, APPLY_LABEL, namespace_opted_in=namespace_opted_in)


def recommended(annotations: Mapping[str, Any], prefix: str, owner: str) -> Recommended | None:
    """What an owner's annotations recommend for its next pods; None when nothing may be
    applied: no `recommended-alloc-conf` (or one that is not a setting of keys torch has), a
    trial already decided, or a setting that did not help this owner."""
    value = annotations.get(f"{prefix}{Annotation.RECOMMENDED_ALLOC_CONF}")
    if not isinstance(value, str) or not 0 < len(value) <= VALUE_LIMIT:
        return None
    found = entries(value)
    if not found or any(k not in allocconf.KEYS for k in found):
        return None
    trial = parse_trial(annotations, prefix)
    if trial is not None and has_setting(value, trial.setting):
        if not trial.applicable():
            return None
        return Recommended(owner, trial.setting, trial)
    setting = render(found)
    if trial is not None and rejects(trial.rejected, setting):
        return None
    return Recommended(owner, setting, trial)


def apply(pod: Mapping[str, Any], recommendation: Recommended, *, prefix: str,
          why: str = "") -> Application:
    """The patch that merges `recommendation` into `pod`'s containers (call only where
    `wants_recommendation`). `why`: the reason the annotation gives (the failure it answers)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    annotations = meta.get("annotations")
    key = f"{prefix}{Annotation.RECOMMENDATION_APPLIED}"
    if isinstance(annotations, Mapping) and key in annotations:
        return Application([], (), ())  # applied already (or copied: left as it is)
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list):
        return Application([], (), ())
    wanted = recommendation.trial.container if recommendation.trial else ""
    named = [c for c in containers if isinstance(c, Mapping) and c.get("name") == wanted]
    patch: list[dict[str, Any]] = []
    warnings: list[str] = []
    applied: list[tuple[str, str, str]] = []
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping) or (named and container.get("name") != wanted):
            continue
        ops, done, why_not = _container(index, container, recommendation)
        name = container.get("name")
        label = shown(name) if isinstance(name, str) and name else "?"
        if why_not:
            warnings.append(f'{WARNING} to container "{label}": {why_not}')
        if done is not None:
            patch += ops
            applied.append((label, *done))
    if not patch:
        return Application([], tuple(warnings), tuple(applied))
    note = applied_note(applied, recommendation, why)
    if isinstance(annotations, Mapping):
        patch.append({"op": "add", "path": f"/metadata/annotations/{_pointer(key)}",
                      "value": note})
    else:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {key: note}})
    return Application(patch, tuple(warnings), tuple(applied), note)


def applied_note(applied: list[tuple[str, str, str]], recommendation: Recommended,
                 why: str) -> str:
    """The pod's `recommendation-applied`: each container's variable and value, then whose
    recommendation it is and why (at most APPLIED_LIMIT bytes)."""
    parts = "; ".join(f"{c}: {v}={value}" for c, v, value in applied)
    text = f"{parts} (recommended on {recommendation.owner}"
    text += f": {why})" if why else ")"
    data = text.encode("ascii", "replace")
    return text if len(data) <= APPLIED_LIMIT else data[: APPLIED_LIMIT - 3].decode() + "..."


def _container(index: int, container: Mapping[str, Any], recommendation: Recommended
               ) -> tuple[list[dict[str, Any]], tuple[str, str] | None, str | None]:
    """(ops, (variable, new value) or None, why nothing or only part was added)."""
    env = container.get("env")
    if env is not None and not isinstance(env, list):
        return [], None, "its env is not a list"
    items = env or []
    if not all(isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in items):
        return [], None, "its env has an entry without a name"
    values = container_env(container, ALLOC_CONF_VARIABLES)
    release, named = _release(container, recommendation.trial)
    variable = next((v for v in ALLOC_CONF_VARIABLES if v in values), None)
    if variable == GENERIC_VARIABLE and release.surely_below(GENERIC_FROM):
        variable = None  # torch before 2.9 ignores PYTORCH_ALLOC_CONF: not what it reads
    current: str | None = None
    if variable is not None:
        read = values[variable]
        if read.value is None:
            return [], None, f"its {variable} is not known at admission ({read.unknown})"
        current = read.value
    own = entries(current)
    wanted = entries(recommendation.setting)
    added = {k: v for k, v in wanted.items() if k not in own}
    if not added:
        if has_setting(current, recommendation.setting):
            return [], None, None  # it runs with the setting already
        return [], None, (f"its own {variable} sets {', '.join(sorted(wanted))} (the "
                          "container's keys win)")
    merged = render({**added, **own})
    bad = allocconf.check(merged, release).bad_keys & added.keys()
    note = None
    if bad:
        note = f"torch {named} rejects {', '.join(sorted(bad))}"
        added = {k: v for k, v in added.items() if k not in bad}
        if not added:
            return [], None, note
    keys = render(added)
    base = f"/spec/containers/{index}/env"
    if variable is None or not values[variable].declared:
        entry = {"name": CUDA_VARIABLE, "value": keys}
        op = {"op": "add", "path": f"{base}/-", "value": entry} if isinstance(env, list) \
            else {"op": "add", "path": base, "value": [entry]}
        return [op], (CUDA_VARIABLE, keys), note
    at = max(i for i, e in enumerate(items) if e["name"] == variable)  # the kubelet keeps the last
    raw = items[at].get("value")
    raw = raw if isinstance(raw, str) else ""
    value = f"{raw},{keys}" if raw else keys
    return ([{"op": "replace", "path": f"{base}/{at}/value", "value": value}],
            (variable, f"{current},{keys}" if current else keys), note)


def _release(container: Mapping[str, Any], trial: Trial | None) -> tuple[TorchRange, str]:
    """The container's torch release (its env or image tag), else the trial's; and its name."""
    hint = release_hint(known_values(container_env(container, TORCH_VARIABLES)),
                        container.get("image"))
    parsed = parse_torch_version(hint)
    if parsed is not None:
        return TorchRange.exact(parsed), hint or ""
    if trial is not None and trial.release:
        return release_range(trial.release), trial.release
    return TorchRange(), "(release unknown)"


def _pointer(key: str) -> str:
    """`key` as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
