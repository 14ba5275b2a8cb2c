"""A container's environment as the kubelet builds it from the spec, as far as the spec tells.

One reader for the operator (a failed pod's allocator setting), the admission webhook and
`check-manifest` (a pod or template before it runs) and `explain`. The rules are the kubelet's
(k8s.io/kubernetes pkg/kubelet/kubelet_pods.go, `makeEnvironmentVariables`, and
third_party/forked/golang/expansion):

- `envFrom` sources are read first (a later source over an earlier one, each key behind the
  source's `prefix`), then `env` in order, each entry over whatever came before under its name:
  of two entries of one name the LAST wins, and `env` wins over `envFrom`;
- a non-empty `value` has its `$(NAME)` references expanded from what is defined so far (envFrom,
  earlier entries), then from the Service variables the kubelet adds; `$$` is a `$`; a reference
  to nothing defined is left as written; a `$(` without `)` is kept as it is;
- an empty `value` with `valueFrom` takes the referenced value (a ConfigMap or Secret key, a
  field of the pod, a resource); an empty `value` without it is the empty string.

What the spec does not hold is *unknown*, never guessed: a `valueFrom`, what an `envFrom`
ConfigMap or Secret may set (no reader here holds their contents: the webhook has no API
access, the operator reads no ConfigMaps or Secrets), a Service variable, and any value that
expands one of those. An entry of another shape (a name that is not a string, a value that is
not a string: the API server refuses both) is skipped and never turned into text.

Bounded: every value is scanned with `str.find` (no per-character Python loop), an expanded
value longer than MAX_EXPANDED is unknown, and a container's expansions produce at most
MAX_EXPANSION characters in all (`$(A)$(A)` repeated doubles a value per entry).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

MAX_EXPANDED: Final = 1 << 14
"""Characters of one expanded value at most; a longer one is unknown (the kubelet would build
it, but every reader stops far below: an allocator setting is checked up to 4,096 characters,
the operator reads 1,024, a release 32)."""
MAX_EXPANSION: Final = 1 << 16
"""Characters all of one container's expansions may produce; past it, the values left to
expand are unknown (a pod of 128 containers then costs at most 8 MiB of string building)."""
MAX_SOURCES: Final = 64
"""envFrom sources told apart; a container with more may have any variable set by them."""
MAX_SERVICE_NAME: Final = 160
"""Characters of a reference looked at as a Service variable (a Service name has at most 63,
a port name 15)."""

_SERVICE_VARIABLE = re.compile(
    r"[A-Z0-9_]+_(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?"
    r"|PORT(?:_[0-9]+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)?)")
"""The names the kubelet gives Service variables (pkg/kubelet/envvars: `<SVC>_SERVICE_HOST`,
`<SVC>_SERVICE_PORT[_<PORT>]`, `<SVC>_PORT[_<n>_<PROTO>[_PROTO|_PORT|_ADDR]]`)."""
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
"""A ConfigMap or Secret key: what an envFrom source can set, behind its prefix."""
_VALUE_FROM: Final = ("configMapKeyRef", "secretKeyRef", "fieldRef", "resourceFieldRef",
                      "fileKeyRef")


@dataclass(frozen=True)
class EnvValue:
    """What one variable holds in the running container, as far as the spec tells."""

    value: str | None
    """The value; None when it cannot be known from the spec (`unknown` says why)."""
    unknown: str = ""
    """Why the value is not known, worded to follow the variable's name ("set from
    valueFrom.configMapKeyRef"); "" when it is."""
    declared: bool = True
    """Named in the container's `env`; False for a variable only an `envFrom` source may set."""

    @property
    def known(self) -> bool:
        return self.value is not None


@dataclass
class _Expansion:
    """What is left of a container's expansion budget (MAX_EXPANSION)."""

    left: int = MAX_EXPANSION


def container_env(container: Mapping[str, Any],
                  wanted: Collection[str] | None = None) -> dict[str, EnvValue]:
    """The container's variables as the kubelet sets them from the spec: those its `env` names
    (each once, the last entry of a name winning), and, of ``wanted``, those only an `envFrom`
    source may set (unknown, `declared` False). ``wanted`` None: every variable `env` names."""
    sources = _env_from(container.get("envFrom"))
    env = container.get("env")
    found: dict[str, EnvValue] = {}
    budget = _Expansion()
    for item in env if isinstance(env, list) else ():
        if not isinstance(item, Mapping):
            continue
        name = item.get("name")
        if not isinstance(name, str):
            continue
        value = item.get("value")
        if isinstance(value, str) and value:
            found[name] = _expand(value, found, sources, budget)
        elif "valueFrom" in item and item.get("valueFrom") is not None:
            found[name] = EnvValue(None, f"set from {_value_from(item.get('valueFrom'))}")
        elif value is None or isinstance(value, str):  # "", null or absent: the empty string
            found[name] = EnvValue("")
        # a value of another type: the API server refuses it; skipped, never made text
    if wanted is None:
        return found
    out = {name: found[name] for name in wanted if name in found}
    for name in wanted:
        if name not in out:
            source = _source_of(name, sources)
            if source:
                out[name] = EnvValue(None, f"may be set by {source}", declared=False)
    return out


def known_values(values: Mapping[str, EnvValue]) -> dict[str, str]:
    """The variables whose value is known, and their values."""
    return {name: v.value for name, v in values.items() if v.value is not None}


def _env_from(raw: object) -> list[tuple[str, str]]:
    """(prefix, how the source is named) of each envFrom source; past MAX_SOURCES, one source
    of every name (any variable may come from one of them)."""
    items = raw if isinstance(raw, list) else []
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        prefix = item.get("prefix")
        prefix = prefix if isinstance(prefix, str) else ""
        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = item.get(field)
            if isinstance(ref, Mapping):
                name = ref.get("name")
                shown = _printable(name, 63) if isinstance(name, str) else "?"
                out.append((prefix, f'envFrom {kind} "{shown}"'))
        if len(out) > MAX_SOURCES:
            return [("", f"one of its {len(items)} envFrom sources")]
    return out


def _source_of(name: str, sources: list[tuple[str, str]]) -> str:
    """The last envFrom source that may set ``name`` (the kubelet reads them in order, a later
    one over an earlier one), or "": a source sets its keys (ConfigMap or Secret keys) behind
    its prefix."""
    for prefix, source in reversed(sources):
        if name.startswith(prefix) and _CONFIG_KEY.fullmatch(name, len(prefix)):
            return source
    return ""


def _value_from(raw: object) -> str:
    if isinstance(raw, Mapping):
        for kind in _VALUE_FROM:
            if kind in raw:
                return f"valueFrom.{kind}"
    return "valueFrom"


def _expand(value: str, defined: Mapping[str, EnvValue], sources: list[tuple[str, str]],
            budget: _Expansion) -> EnvValue:
    """`value` with its `$(NAME)` references expanded as the kubelet expands them."""
    dollar = value.find("$")
    if dollar < 0 or dollar == len(value) - 1:
        return EnvValue(value)  # nothing to expand (a trailing `$` stays)
    parts: list[str] = []
    size = 0
    checkpoint = 0
    closer = -2  # the next ")" after the cursor, searched once per stretch: linear overall
    while 0 <= dollar < len(value) - 1:
        piece = value[checkpoint:dollar]
        after = value[dollar + 1]
        if after == "$":  # `$$`: one `$`
            piece += "$"
            checkpoint = dollar + 2
        elif after == "(":
            if closer != -1 and closer < dollar + 2:
                closer = value.find(")", dollar + 2)
            if closer == -1:  # no `)` after it: kept as written
                piece += "$("
                checkpoint = dollar + 2
            else:
                name = value[dollar + 2:closer]
                resolved = _reference(name, defined, sources)
                if resolved.value is None:
                    return EnvValue(None, f"expands $({_printable(name, 63)}) "
                                          f"({resolved.unknown})")
                piece += resolved.value
                checkpoint = closer + 1
        else:  # a `$` that starts nothing: kept, with the character after it
            piece += value[dollar:dollar + 2]
            checkpoint = dollar + 2
        parts.append(piece)
        size += len(piece)
        if size > MAX_EXPANDED or size > budget.left:
            return _too_long(size, budget)
        dollar = value.find("$", checkpoint)
    parts.append(value[checkpoint:])
    size += len(parts[-1])
    if size > MAX_EXPANDED or size > budget.left:
        return _too_long(size, budget)
    budget.left -= size
    return EnvValue("".join(parts))


def _too_long(size: int, budget: _Expansion) -> EnvValue:
    """An expansion stopped at ``size`` characters, its work charged to the container's."""
    over_budget = size > budget.left
    budget.left = max(budget.left - size, 0)
    if over_budget:
        return EnvValue(None, f"not expanded: the container's $(...) references expand past "
                              f"{MAX_EXPANSION} characters")
    return EnvValue(None, f"longer than {MAX_EXPANDED} characters once its $(...) references "
                          "are expanded")


def _reference(name: str, defined: Mapping[str, EnvValue],
               sources: list[tuple[str, str]]) -> EnvValue:
    """What `$(name)` stands for at this point of the env: a variable defined before it (or
    its own earlier value), else one an envFrom source or a Service may set (unknown), else
    nothing: the reference stays as written."""
    if name in defined:
        return defined[name]
    source = _source_of(name, sources)
    if source:
        return EnvValue(None, f"may be set by {source}")
    if len(name) <= MAX_SERVICE_NAME and _SERVICE_VARIABLE.fullmatch(name):
        return EnvValue(None, "may be set by the kubelet from a Service")
    return EnvValue(f"$({name})")


def _printable(text: str, limit: int) -> str:
    """A tenant's name fit to quote: printable ASCII (others as ?), at most ``limit``."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."
