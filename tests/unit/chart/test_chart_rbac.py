"""The chart grants what the code calls, and nothing else.

docs/install.md's table "What each component calls" is the one list (apicalls.py reads it).
Here it is held against the chart (the Roles and ClusterRoles it renders, for the default values
and every ci/*-values.yaml) and against the code (every function that sends a request to the API
server, found in the source's syntax tree, with the verbs its HTTP methods imply; every kopf
handler; the kopf machinery the operator leaves switched on). A grant no row asks for, a row no
code makes, or a request no row names fails a test here.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from apicalls import (
    CHART,
    ROOT,
    Call,
    Triple,
    chart_values,
    expected_rbac,
    lookup,
    read_table,
)
from chartlib import Render, only

pytestmark = pytest.mark.unit

CI_VALUES = sorted(f"ci/{p.name}" for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE_NAMESPACE = "gpu-auditor"


@pytest.fixture(scope="module")
def calls() -> list[Call]:
    return read_table()


# -- the table itself --------------------------------------------------------------------------

def test_the_table_has_rows_for_both_components_and_names_real_values(
    calls: list[Call],
) -> None:
    assert {c.component for c in calls} == {"agent", "kube-rbac-proxy", "operator"}
    defaults = chart_values()
    for call in calls:
        if call.when != "always":
            lookup(defaults, call.when)  # raises for a value the chart does not have
        assert call.verbs and call.resources, call


def test_a_table_without_its_columns_is_refused() -> None:
    text = "### What each component calls\n\n| who | what |\n|---|---|\n| agent | pods |\n"
    with pytest.raises(ValueError, match="columns"):
        read_table(text)


# -- the table against the chart ---------------------------------------------------------------

def rendered_rbac(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str | None],
                                                         set[Triple]]:
    out: dict[tuple[str, str, str | None], set[Triple]] = {}
    for obj in objects:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        name = obj["metadata"]["name"]
        if obj["kind"] == "ClusterRole" and name.endswith("-metrics"):
            continue  # the scrapers' role, bound to no one by the chart (its own test below)
        suffix = "-" + name.rsplit("-", 1)[1]
        namespace = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        out[(obj["kind"], suffix, namespace)] = {
            (group, resource, verb) for rule in obj["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}
    return out


@pytest.mark.parametrize("values_file", [None, *CI_VALUES])
def test_the_chart_grants_exactly_the_table(
    render: Render, calls: list[Call], values_file: str | None,
) -> None:
    files = [values_file] if values_file else []
    objects = render(values=files, namespace=RELEASE_NAMESPACE)
    expected = expected_rbac(calls, chart_values(files), RELEASE_NAMESPACE)
    assert rendered_rbac(objects) == expected


@pytest.mark.parametrize("sets, values", [
    ({"agent.report": False}, ("agent.report=false",)),
    ({"agent.metricsProxy.enabled": True}, ("agent.metricsProxy.enabled=true",)),
    ({"operator.namespaces": ["ml", "gpu-auditor"]}, ("operator.namespaces={ml,gpu-auditor}",)),
])
def test_the_chart_grants_exactly_the_table_for_each_switch(
    render: Render, calls: list[Call], sets: dict[str, Any], values: tuple[str, ...],
) -> None:
    expected = expected_rbac(calls, chart_values(sets=sets), RELEASE_NAMESPACE)
    assert rendered_rbac(render(*values, namespace=RELEASE_NAMESPACE)) == expected


def test_an_agent_without_reports_may_not_touch_them(render: Render) -> None:
    role = only(render("agent.report=false"), "ClusterRole", "-agent")
    assert all("gpu-auditor.io" not in rule["apiGroups"] for rule in role["rules"])


def test_namespaced_mode_makes_roles_and_keeps_only_cluster_scoped_grants_cluster_wide(
    render: Render,
) -> None:
    objects = render(values=["ci/namespaced-values.yaml"])
    cluster = rendered_rbac(objects)[("ClusterRole", "-operator", None)]
    assert {resource for _, resource, _ in cluster} == {
        "gpunodereports", "customresourcedefinitions", "namespaces"}
    for namespace in ("ml", "research"):
        binding = only([o for o in objects if o["metadata"].get("namespace") == namespace],
                       "RoleBinding", "-operator")
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "auditor-operator"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "auditor-operator",
                                        "namespace": "gpu-auditor"}]


def test_each_service_account_is_bound_to_its_own_roles(render: Render) -> None:
    objects = render(values=["ci/locked-down-values.yaml"])
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = binding["roleRef"]["name"]
        (subject,) = binding["subjects"]
        assert subject["name"] in accounts and subject["namespace"] == "gpu-auditor"
        component = "agent" if role.endswith(("-agent", "-proxyauth")) else "operator"
        assert subject["name"] == f"rel-gpu-auditor-{component}", (role, subject)
        assert any(o["kind"] == binding["roleRef"]["kind"] and o["metadata"]["name"] == role
                   for o in objects)


def test_the_scrapers_role_reads_only_metrics_and_is_bound_to_no_one(render: Render) -> None:
    objects = render("agent.metricsProxy.enabled=true")
    role = only(objects, "ClusterRole", "-metrics")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [b for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and b["roleRef"]["name"] == role["metadata"]["name"]]


def test_no_role_grants_wildcards_secrets_deletes_or_escalation(render: Render) -> None:
    for values_file in [None, *CI_VALUES]:
        objects = render(values=[values_file] if values_file else [])
        for triples in rendered_rbac(objects).values():
            for group, resource, verb in triples:
                assert "*" not in (group, resource, verb)
                assert resource != "secrets"
                assert verb not in ("delete", "deletecollection", "escalate", "bind",
                                    "impersonate")


def test_every_rbac_rule_says_why_in_a_comment() -> None:
    for template in ("agent-rbac.yaml", "operator-rbac.yaml"):
        lines = (CHART / "templates" / template).read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(("- apiGroups:", "- nonResourceURLs:")):
                above = lines[i - 1].strip()
                assert above.startswith("#"), f"{template}:{i + 1}: rule without a comment"


# -- the table against the code ----------------------------------------------------------------

SOURCES = {"agent": ROOT / "node_agent",
           "operator": ROOT / "operator" / "gpu_auditor" / "controller"}
# The transport itself: it sends whatever method its callers name.
TRANSPORT = {f"gpu_auditor.base.client.ApiClient.{name}"
             for name in ("request", "request_bytes", "_send")}
METHOD_VERBS = {"GET": {"get", "list"}, "POST": {"create"}, "PUT": {"update"},
                "PATCH": {"patch"}, "DELETE": {"delete", "deletecollection"}}
# kopf's own requests, switched on unless the operator's settings switch them off.
KOPF_CALLS = {
    "kopf._core.reactor.observation.resource_observer": ({"list", "watch"}, "scanning.disabled"),
    "kopf._core.reactor.observation.namespace_observer": ({"list", "watch"}, "scanning.disabled"),
    "kopf._cogs.clients.events.post_event": ({"create"}, "posting.enabled"),
}


@dataclass
class CodeCalls:
    """What one component's source sends: request sites (function -> HTTP methods) and kopf
    handlers (function -> the plural it watches)."""

    sites: dict[str, set[str]] = field(default_factory=dict)
    handlers: dict[str, str] = field(default_factory=dict)
    non_literal: list[str] = field(default_factory=list)
    settings_off: set[str] = field(default_factory=set)


def _module_name(path: Path) -> str:
    source_root = ROOT / "operator" if path.is_relative_to(ROOT / "operator") else ROOT
    return ".".join(path.relative_to(source_root).with_suffix("").parts)


def _kopf_decorator(node: ast.expr) -> ast.Call | None:
    if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("kopf.on."):
        return node
    return None


def _walk(tree: ast.AST, module: str, out: CodeCalls) -> None:
    def constant(node: ast.expr) -> object:
        """A decorator argument: a literal, or a module constant (imported only then)."""
        if isinstance(node, ast.Constant):
            return node.value
        return getattr(importlib.import_module(module), ast.unparse(node))

    def visit(node: ast.AST, stack: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = ".".join([module, *stack, child.name])
                if not isinstance(child, ast.ClassDef):
                    for decorator in filter(None, map(_kopf_decorator, child.decorator_list)):
                        if ast.unparse(decorator.func) not in ("kopf.on.startup",
                                                               "kopf.on.login"):
                            args = [constant(a) for a in decorator.args]
                            out.handlers[qualname] = str(args[-1])
                visit(child, [*stack, child.name])
                continue
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr in ("request", "request_bytes")):
                qualname = ".".join([module, *stack])
                if qualname not in TRANSPORT:
                    first = child.args[0] if child.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        out.sites.setdefault(qualname, set()).add(first.value)
                    else:
                        out.non_literal.append(f"{qualname}: {ast.unparse(child)[:80]}")
            if isinstance(child, ast.Assign) and isinstance(child.value, ast.Constant):
                for target in child.targets:
                    text = ast.unparse(target)
                    if text.endswith("settings.scanning.disabled") and child.value.value is True:
                        out.settings_off.add("scanning.disabled")
                    if text.endswith("settings.posting.enabled") and child.value.value is False:
                        out.settings_off.add("posting.enabled")
            visit(child, stack)

    visit(tree, [])


@pytest.fixture(scope="module")
def code() -> dict[str, CodeCalls]:
    out = {}
    for component, folder in SOURCES.items():
        found = CodeCalls()
        for path in sorted(folder.rglob("*.py")):
            if "_pb2" in path.name:
                continue
            _walk(ast.parse(path.read_text()), _module_name(path), found)
        out[component] = found
    return out


def _rows(calls: list[Call], component: str) -> Iterator[Call]:
    wanted = ("agent",) if component == "agent" else ("operator",)
    return (c for c in calls if c.component in wanted)


def test_the_code_finder_sees_requests_and_handlers(code: dict[str, CodeCalls]) -> None:
    # Not a list of today's calls (the table is): that the finder finds any at all.
    assert code["agent"].sites and code["operator"].sites and code["operator"].handlers
    assert all(methods <= METHOD_VERBS.keys()
               for c in code.values() for methods in c.sites.values())


@pytest.mark.parametrize("component", ["agent", "operator"])
def test_every_request_names_its_method_literally(
    code: dict[str, CodeCalls], component: str,
) -> None:
    assert code[component].non_literal == [], (
        "a request whose HTTP method is not a literal: the RBAC check cannot tell its verb")


@pytest.mark.parametrize("component", ["agent", "operator"])
def test_every_request_of_the_code_is_in_the_table(
    calls: list[Call], code: dict[str, CodeCalls], component: str,
) -> None:
    found = code[component]
    for site, methods in found.sites.items():
        rows = [c for c in _rows(calls, component) if site in c.callers]
        assert rows, (f"{site} sends {sorted(methods)} but no row of docs/install.md's table "
                      "names it: add the row and the grant")
        verbs = {v for row in rows for v in row.verbs}
        for method in methods:
            assert verbs & METHOD_VERBS[method], (
                f"{site} sends {method}, but the table gives it only {sorted(verbs)}")
    for handler, plural in found.handlers.items():
        rows = [c for c in _rows(calls, component) if handler in c.callers]
        assert rows, f"kopf handler {handler} watches {plural}; no row names it"
        assert {(r.resources, frozenset(r.verbs)) for r in rows} == {
            ((plural,), frozenset({"list", "watch"}))}, (handler, plural)


@pytest.mark.parametrize("component", ["agent", "operator"])
def test_every_row_of_the_table_is_a_call_the_code_makes(
    calls: list[Call], code: dict[str, CodeCalls], component: str,
) -> None:
    found = code[component]
    for row in _rows(calls, component):
        assert row.callers, f"{row}: names no code"
        implied: set[str] = set()
        for caller in row.callers:
            if caller in found.sites:
                implied |= {v for m in found.sites[caller] for v in METHOD_VERBS[m]}
            elif caller in found.handlers:
                implied |= {"list", "watch"}
            elif caller in KOPF_CALLS:
                verbs, switch = KOPF_CALLS[caller]
                module, _, name = caller.rpartition(".")
                assert callable(getattr(importlib.import_module(module), name, None)), (
                    f"{caller} is not in the installed kopf")
                assert switch not in found.settings_off, (
                    f"the operator sets settings.{switch} so {caller} never runs: drop the row")
                implied |= verbs
            else:
                pytest.fail(f"the table names {caller}, which sends no request in {component}'s"
                            " code: drop the row and its grant, or name the function that does")
        unused = set(row.verbs) - implied
        assert not unused, f"{row.resources} {sorted(unused)}: no call of {row.callers} needs it"
