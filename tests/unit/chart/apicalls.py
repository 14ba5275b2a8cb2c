"""The table of the Kubernetes API calls each component makes, read from docs/install.md ("What
each component calls"), and what the chart's RBAC must be for given values.

One table, three checks: the chart's rendered Roles and ClusterRoles (test_chart_rbac.py), the
code's requests (test_chart_rbac.py, from the source's syntax tree) and a real API server
(tests/integration/test_chart_install.py, with each ServiceAccount's own token).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "install.md"
CHART = ROOT / "charts" / "gpu-auditor"
HEADING = "### What each component calls"
COLUMNS = ["component", "when", "scope", "API group", "resource", "verbs", "called by"]
COMPONENTS = ("agent", "kube-rbac-proxy", "operator", "webhook")
PROXY = "kube-rbac-proxy"  # runs beside a component, with that component's ServiceAccount
SCOPES = ("cluster", "watched", "release namespace")

Triple = tuple[str, str, str]  # (API group, resource, verb); "" is the core group


@dataclass(frozen=True)
class Call:
    """One row of the table."""

    component: str
    when: str  # "always", or a dotted chart value that must be truthy
    scope: str
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    callers: tuple[str, ...]  # dotted names of functions (ours or kopf's)

    def applies(self, values: Mapping[str, Any]) -> bool:
        """`auto` (a distributed job's kind: on where the cluster serves its CRD) is off here:
        these renders give helm no API versions (test_chart_job_kinds.py gives some)."""
        if self.when == "always":
            return True
        value = lookup(values, self.when)
        return value != "auto" and bool(value)

    def triples(self) -> set[Triple]:
        return {(self.group, r, v) for r in self.resources for v in self.verbs}


def host(when: str) -> str | None:
    """The component a kube-rbac-proxy row's switch belongs to (`agent.metricsProxy.enabled`:
    the agent), or None."""
    first = when.split(".", 1)[0]
    return first if first in ("agent", "operator") and "." in when else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _names(cell: str) -> list[str]:
    return [n.strip("`") for n in re.split(r",\s*", cell.strip()) if n.strip()]


def read_table(text: str | None = None) -> list[Call]:
    """The rows of the table; a malformed table raises ValueError saying where."""
    text = DOC.read_text() if text is None else text
    if HEADING not in text:
        raise ValueError(f"{DOC.name}: no section {HEADING!r}")
    lines = text[text.index(HEADING):].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ValueError(f"{DOC.name}: no table under {HEADING!r}")
    if _cells(lines[start]) != COLUMNS:
        raise ValueError(f"{DOC.name}: table columns {_cells(lines[start])}, want {COLUMNS}")
    calls = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        component, when, scope, group, resources, verbs, called_by = _cells(line)
        if component not in COMPONENTS or scope not in SCOPES:
            raise ValueError(f"{DOC.name}: bad row {line!r}")
        if component == PROXY and host(when.strip("`")) is None:
            raise ValueError(f"{DOC.name}: a {PROXY} row is switched on by agent.* or "
                             f"operator.* (the component it runs beside): {line!r}")
        calls.append(Call(
            component=component, when=when.strip("`"), scope=scope,
            group="" if group == "core" else group,
            resources=tuple(_names(resources)), verbs=tuple(_names(verbs)),
            callers=tuple(re.findall(r"`([A-Za-z_][\w.]*)`", called_by)),
        ))
    if not calls:
        raise ValueError(f"{DOC.name}: the table under {HEADING!r} has no rows")
    return calls


# -- chart values ------------------------------------------------------------------------------

def lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise KeyError(f"{dotted}: no such chart value")
        node = node[key]
    return node


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def chart_values(values_files: Iterable[str] = (), sets: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """values.yaml with the given files (relative to the chart) and dotted keys merged over it,
    as helm merges them (maps merge, anything else replaces)."""
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for name in values_files:
        _merge(values, yaml.safe_load((CHART / name).read_text()) or {})
    for dotted, value in (sets or {}).items():
        *parents, leaf = dotted.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return values


# -- what the chart's RBAC must be -------------------------------------------------------------

# (kind, name suffix, namespace or None) -> the triples that object grants
Expected = dict[tuple[str, str, str | None], set[Triple]]


def expected_rbac(calls: Iterable[Call], values: Mapping[str, Any], release_namespace: str
                  ) -> Expected:
    """The Roles and ClusterRoles the chart must render for `values`, with their grants."""
    if not values["rbac"]["create"]:
        return {}
    out: Expected = {}

    def add(kind: str, suffix: str, namespace: str | None, triples: set[Triple]) -> None:
        if triples:
            out.setdefault((kind, suffix, namespace), set()).update(triples)

    live = [c for c in calls if c.applies(values)]
    namespaces = list(values["operator"]["namespaces"])
    for call in live:
        # One ClusterRole for the proxies' reviews, bound to each component that runs one.
        if call.component == PROXY and values[str(host(call.when))]["enabled"]:
            add("ClusterRole", "-proxyauth", None, call.triples())
    if values["agent"]["enabled"]:
        for call in live:
            if call.component == "agent":
                add("ClusterRole", "-agent", None, call.triples())
    if values["webhook"]["enabled"] and values["webhook"]["applyRecommendation"]["enabled"]:
        for call in live:  # the owner reads of webhook.applyRecommendation, and nothing else
            if call.component == "webhook":
                add("ClusterRole", "-webhook", None, call.triples())
    if values["operator"]["enabled"]:
        for call in (c for c in live if c.component == "operator"):
            if call.scope == "cluster" or (call.scope == "watched" and not namespaces):
                add("ClusterRole", "-operator", None, call.triples())
            elif call.scope == "watched":
                for namespace in namespaces:
                    add("Role", "-operator", namespace, call.triples())
            elif release_namespace not in namespaces:  # release namespace
                add("Role", "-events", release_namespace, call.triples())
    return out


# The RBAC objects bound to each ServiceAccount, by name suffix; -proxyauth only to a
# component that runs kube-rbac-proxy.
BOUND_TO = {"agent": ("-agent",), "operator": ("-operator", "-events"), "webhook": ("-webhook",)}


def granted(account: str, namespace: str | None, expected: Expected,
            values: Mapping[str, Any]) -> set[Triple]:
    """What `account` ("agent", "operator" or "webhook") may do in `namespace` (None: across all
    namespaces, or on cluster-scoped resources) under the RBAC of `expected` for `values`."""
    proxy = values[account].get("metricsProxy", {}).get("enabled")
    bound = BOUND_TO[account] + (("-proxyauth",) if proxy else ())
    return {t for (kind, suffix, ns), triples in expected.items()
            if suffix in bound
            and (kind == "ClusterRole" or (namespace is not None and ns == namespace))
            for t in triples}
