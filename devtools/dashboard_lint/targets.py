"""The rules on each target (query) of each panel: each yields (severity, text), the text
without the "Dashboard 't', panel 'p', target idx 'i'" prefix that `lint` puts before it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import promql_parser as pp

from devtools.dashboard_lint import promql
from devtools.dashboard_lint.model import Dashboard, DatasourceError, Panel, Target, datasource_of
from devtools.dashboard_lint.rules import QUERY_PANELS, Found, prometheus


def target_logql(d: Dashboard, p: Panel, t: Target) -> Found:
    """The LogQL rules are not ported: a Loki query is reported as not checked, never passed."""
    if t.hide or p.type not in QUERY_PANELS:
        return
    template = d.template_datasource()
    loki = template is not None and template.query == "loki"
    if not loki:
        with contextlib.suppress(DatasourceError):
            loki = datasource_of(t.datasource).type == "loki"
    if loki:
        yield "warning", ("LogQL query not checked: this port has no LogQL rules "
                          "(upstream's target-logql-rule, target-logql-auto-rule)")


def target_promql(d: Dashboard, p: Panel, t: Target) -> Found:
    if not prometheus(d) or p.type not in QUERY_PANELS:
        return
    if not t.expr and t.panel_id > 0:
        if any(other.id == t.panel_id for other in d.panels):
            return  # a query taken from another panel
        yield "error", "Invalid panel reference in target"
    try:
        promql.parse(t.expr, d.templates)
    except promql.PromQLError as e:
        yield "error", f"invalid PromQL query '{t.expr}': {e}"


def target_rate_interval(d: Dashboard, p: Panel, t: Target) -> Found:
    if not prometheus(d) or p.type not in QUERY_PANELS:
        return
    node = _parsed(t, d)
    if node is None:
        return

    def visit(n: promql.Node, parents: tuple[promql.Node, ...]) -> str | None:
        if not isinstance(n, pp.MatrixSelector) or n.range == promql.RATE_INTERVAL:
            return None
        if not parents:
            return None  # a bare foo[5m]: allowed
        parent = parents[-1]
        if not isinstance(parent, pp.Call):
            return f"invalid PromQL query '{t.expr}': $__rate_interval used in non-rate function"
        if parent.func.name not in ("rate", "irate"):
            return None
        return f"invalid PromQL query '{t.expr}': should use $__rate_interval"

    error = promql.walk(node, visit)
    if error is not None:
        yield "error", error


def required_matcher(label: str) -> Callable[[Dashboard, Panel, Target], Found]:
    def check(d: Dashboard, p: Panel, t: Target) -> Found:
        if not prometheus(d):
            return
        node = _parsed(t, d)
        if node is None:
            return
        for selector in promql.vector_selectors(node):
            problem = _matcher_problem(selector, label)
            if problem is not None:
                yield "error", f"invalid PromQL query '{t.expr}': {problem}"
    return check


def _matcher_problem(selector: pp.VectorSelector, label: str) -> str | None:
    """None when some `label=~"$label"` is there; else what the last matcher on the label is."""
    problem = f"{label} selector not found"
    for m in selector.matchers.matchers:
        if m.name != label:
            continue
        op = promql.matcher_op(m)
        if op == "=~" and m.value == f"${label}":
            return None
        if op != "=~":
            problem = f"{label} selector is {op}, not =~"
        if m.value != f"${label}":
            problem = f"{label} selector is {m.value}, not ${label}"
    return problem


def target_counter_agg(d: Dashboard, p: Panel, t: Target) -> Found:
    """Upstream tests the selector as printed, matchers included: `foo_total{job="x"}` does not
    end in _total, so only a counter without matchers (or @, offset) is checked. Kept so."""
    node = _parsed(t, d)
    if node is None:
        return

    def visit(n: promql.Node, parents: tuple[promql.Node, ...]) -> str | None:
        if not isinstance(n, pp.VectorSelector):
            return None
        text = promql.selector_text(n)
        if not text.endswith("_total"):
            return None
        ranged = (len(parents) >= 2 and isinstance(parents[-1], pp.MatrixSelector)
                  and isinstance(parents[-2], pp.Call)
                  and parents[-2].func.name in ("rate", "irate", "increase"))
        return None if ranged else (f"counter metric '{text}' is not aggregated with rate, "
                                    "irate, or increase")

    error = promql.walk(node, visit)
    if error is not None:
        yield "error", error


def _parsed(t: Target, d: Dashboard) -> promql.Node | None:
    """The target's query parsed, or None: an invalid query is target-promql-rule's finding."""
    try:
        return promql.parse(t.expr, d.templates)
    except promql.PromQLError:
        return None
