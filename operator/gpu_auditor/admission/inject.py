"""The probe's injection into an opted-in pod, as a JSON patch (issue 17; probe/README.md).

Only a pod labelled ``gpu-auditor.io/probe=true``, or in a namespace labelled so (the server
learns that from the path the API server calls) and not labelled ``false`` itself, is changed:

- an init container of our image copies ``/opt/gpu-auditor/probe`` into an emptyDir;
- every app container mounts it read-only at the same path and gets ``GPU_AUDITOR_PROBE=1`` and
  ``PYTHONPATH`` with that folder in front (an existing literal value is kept after it), so the
  probe's ``sitecustomize`` arms it at interpreter start;
- a container whose ``terminationMessagePath`` is not the default gets
  ``GPU_AUDITOR_PROBE_PATH`` set to it (the probe writes its record there).

A container that sets ``GPU_AUDITOR_PROBE`` itself to anything but ``1``, mounts something at
the probe's path, takes ``PYTHONPATH`` from a reference (which cannot be prefixed), or has an
env that is not a list of named entries is left as it is, with a warning naming it; so is one
with ``envFrom`` (a ConfigMap or Secret may set ``GPU_AUDITOR_PROBE=0``, and an env entry of
ours would override it) unless its env sets ``GPU_AUDITOR_PROBE=1``: then it gets the probe,
and ``PYTHONPATH=/opt/gpu-auditor/probe:$(PYTHONPATH)``, which kubelet expands from envFrom.
A container whose env sets ``GPU_AUDITOR_PROBE=1`` gets no second entry of it. A pod that
already has the probe's volume is left alone (idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpu_auditor.base.containerenv import container_env

from .findings import shown
from .objects import opted_in

PROBE_LABEL: Final = "gpu-auditor.io/probe"
"""On a pod or a namespace: ``true`` opts in; on a pod, ``false`` opts out of its namespace's."""
VOLUME: Final = "gpu-auditor-probe"
PROBE_DIR: Final = "/opt/gpu-auditor/probe"
COPY_TO: Final = "/probe"
SWITCH: Final = "GPU_AUDITOR_PROBE"
PATH_VARIABLE: Final = "GPU_AUDITOR_PROBE_PATH"
DEFAULT_TERMINATION_PATH: Final = "/dev/termination-log"


@dataclass(frozen=True)
class Injection:
    patch: list[dict[str, Any]]  # [] when nothing is to change
    warnings: tuple[str, ...]
    containers: tuple[str, ...]  # the containers that got the probe


def wants_probe(pod: Mapping[str, Any], *, namespace_opted_in: bool) -> bool:
    """The pod's own label decides; without one, its namespace's opt-in (never by default)."""
    return opted_in(pod, PROBE_LABEL, namespace_opted_in=namespace_opted_in)


def init_container(image: str, pull_policy: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": VOLUME,
        "image": image,
        "command": ["cp", "-R", f"{PROBE_DIR}/.", f"{COPY_TO}/"],
        "volumeMounts": [{"name": VOLUME, "mountPath": COPY_TO}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"memory": "32Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    return container


def inject(pod: Mapping[str, Any], image: str, pull_policy: str | None = None) -> Injection:
    """The patch that brings the probe into ``pod`` (call only where `wants_probe`)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return Injection([], (), ())
    volumes = spec.get("volumes")
    if any(isinstance(v, Mapping) and v.get("name") == VOLUME for v in _list(volumes)):
        return Injection([], (), ())  # injected already (or the owner brought the probe)
    patch: list[dict[str, Any]] = []
    warnings: list[str] = []
    done: list[str] = []
    for index, container in enumerate(_list(spec.get("containers"))):
        if not isinstance(container, Mapping):
            continue
        ops, why = _container_patch(index, container)
        raw = container.get("name")
        name = shown(raw) if isinstance(raw, str) and raw else "?"
        if why:
            warnings.append(f'gpu-auditor: probe not injected into container "{name}": {why}')
        else:
            patch += ops
            done.append(name)
    if not done:
        return Injection([], tuple(warnings), ())
    volume = {"name": VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}
    patch += _append("/spec/volumes", volumes, volume)
    inits = spec.get("initContainers")
    first = init_container(image, pull_policy)
    if isinstance(inits, list) and inits:
        patch.append({"op": "add", "path": "/spec/initContainers/0", "value": first})
    else:
        patch.append({"op": "add", "path": "/spec/initContainers", "value": [first]})
    return Injection(patch, tuple(warnings), tuple(done))


def _container_patch(index: int, container: Mapping[str, Any]) -> tuple[list[dict[str, Any]],
                                                                         str | None]:
    env = container.get("env")
    if env is not None and not isinstance(env, list):
        return [], "its env is not a list"
    entries = env or []
    if not all(isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in entries):
        return [], "its env has an entry without a name"
    named = {e["name"]: (i, e) for i, e in enumerate(entries)}  # the last wins, as in kubelet
    switch = container_env(container, (SWITCH,)).get(SWITCH)  # as the kubelet will set it
    opted_in = switch is not None and switch.declared and switch.value == "1"
    if switch is not None and switch.declared and not opted_in:
        return [], f"it sets {SWITCH} itself"
    if _list(container.get("envFrom")) and not opted_in:
        return [], (f"it takes variables from envFrom, which may set {SWITCH} (an env entry "
                    f"would override it); to take the probe, set {SWITCH}=1 in its env")
    mounts = _list(container.get("volumeMounts"))
    if any(isinstance(m, Mapping) and m.get("mountPath") == PROBE_DIR for m in mounts):
        return [], f"it mounts something at {PROBE_DIR}"
    base = f"/spec/containers/{index}"
    ops: list[dict[str, Any]] = []
    add_env = [] if opted_in else [{"name": SWITCH, "value": "1"}]
    if "PYTHONPATH" in named:
        at, item = named["PYTHONPATH"]
        if not isinstance(item.get("value"), str):
            return [], "its PYTHONPATH comes from a reference, which cannot be prefixed"
        prefixed = f"{PROBE_DIR}:{item['value']}" if item["value"] else PROBE_DIR
        ops.append({"op": "replace", "path": f"{base}/env/{at}/value", "value": prefixed})
    elif _list(container.get("envFrom")):
        # kubelet reads envFrom first and expands $(VAR) in env values from it: envFrom's
        # PYTHONPATH is kept after ours (unset, the reference stays as it is: a harmless path)
        add_env.append({"name": "PYTHONPATH", "value": f"{PROBE_DIR}:$(PYTHONPATH)"})
    else:
        add_env.append({"name": "PYTHONPATH", "value": PROBE_DIR})
    path = container.get("terminationMessagePath")
    if isinstance(path, str) and path and path != DEFAULT_TERMINATION_PATH:
        add_env.append({"name": PATH_VARIABLE, "value": path})
    if isinstance(env, list):
        ops += [{"op": "add", "path": f"{base}/env/-", "value": item} for item in add_env]
    elif add_env:
        ops.append({"op": "add", "path": f"{base}/env", "value": add_env})
    ops += _append(f"{base}/volumeMounts", container.get("volumeMounts"),
                   {"name": VOLUME, "mountPath": PROBE_DIR, "readOnly": True})
    return ops, None


def _append(path: str, current: object, value: dict[str, Any]) -> list[dict[str, Any]]:
    """Add ``value`` to the list at ``path``, creating the list when there is none."""
    if isinstance(current, list):
        return [{"op": "add", "path": f"{path}/-", "value": value}]
    return [{"op": "add", "path": path, "value": [value]}]


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
