"""`dashboard_lint.targets`: the query rules against upstream's own expectations: cases of
grafana/dashboard-linter's lint/rule_target_*_test.go (Apache-2.0) at 6d38b915eed8, as JSON
dashboards.

Upstream builds its cases as Go structs; here they are the JSON a dashboard would hold, so a
template that upstream leaves without a query gets `"query": ""` (a JSON template of a type other
than adhoc or custom must have one). Where a message embeds the PromQL parser's error, `{parser}`
stands for it: the Rust parser words its errors differently from Prometheus' Go one.
"""

from __future__ import annotations

from typing import Any

import pytest

from .lint_helpers import PROMETHEUS, assert_findings, findings_of, one_panel

pytestmark = pytest.mark.unit


TARGET = "Dashboard 'dashboard', panel 'panel', target idx '0' "
JI = 'job=~"$job",instance=~"$instance"'
PROMQL_TEMPLATES: list[dict[str, Any]] = [
    PROMETHEUS,
    {"type": "interval", "name": "interval", "query": "", "options": [{"value": "1h"}]},
    {"type": "interval", "name": "sampling", "query": "",
     "current": {"value": "$__auto_interval_sampling"}},
    {"type": "resolution", "name": "resolution", "query": "",
     "options": [{"value": "1h"}, {"value": "1h"}]},
]


NO_EXPRESSION = "invalid PromQL query '': {parser}"


@pytest.mark.parametrize("label", ["job", "instance"])
@pytest.mark.parametrize(("expr", "expected"), [
    ('sum(rate(foo{LABEL=~"$LABEL"}[5m]))', None),
    ('sum(rate(foo{LABEL="integrations/bar", LABEL=~"$LABEL"}[5m]))', None),
    ('sum(rate(foo{LABEL=~"$LABEL", LABEL="integrations/bar"}[5m]))', None),
    ("foo(bar.baz))", None),  # an invalid query is target-promql-rule's
    ("sum(rate(foo[5m]))", "invalid PromQL query 'sum(rate(foo[5m]))': LABEL selector not found"),
    ('sum(rate(foo{LABEL="$LABEL"}[5m]))',
     "invalid PromQL query 'sum(rate(foo{LABEL=\"$LABEL\"}[5m]))': LABEL selector is =, not =~"),
    ('sum(rate(foo{LABEL=~"$foo"}[5m]))',
     "invalid PromQL query 'sum(rate(foo{LABEL=~\"$foo\"}[5m]))': "
     "LABEL selector is $foo, not $LABEL"),
])
def test_target_job_and_instance(label: str, expr: str, expected: str | None) -> None:
    panel = {"title": "panel", "type": "singlestat",
             "targets": [{"expr": expr.replace("LABEL", label)}]}
    found = findings_of(f"target-{label}-rule", one_panel(panel, [PROMETHEUS]))
    assert found == ([] if expected is None
                     else [("error", TARGET + expected.replace("LABEL", label))])


@pytest.mark.parametrize(("panel", "expected"), [
    ({"datasource": "foo", "expr": "sum(rate(foo[5m]))"}, None),  # not a query panel
    ({"type": "singlestat", "expr": f"sum(rate(foo{{{JI}}}[$__rate_interval]))"}, None),
    ({"type": "singlestat", "expr": f"sum(rate(foo{{{JI}}}[$__rate_interval]))"
                                    f"/sum(rate(bar{{{JI}}}[$__rate_interval]))"}, None),
    ({"type": "singlestat", "expr": f"sum(rate(foo{{{JI}}}[5m]))"}, "should use $__rate_interval"),
    ({"type": "timeseries", "expr": f"sum(rate(foo{{{JI}}}[5m]))"}, "should use $__rate_interval"),
    ({"type": "singlestat", "expr": f"sum(increase(foo{{{JI}}}[$__range]))"}, None),
    ({"type": "singlestat", "expr": f"sum(irate(foo{{{JI}}}[$__interval]))"},
     "should use $__rate_interval"),
])
def test_target_rate_interval(panel: dict[str, Any], expected: str | None) -> None:
    expr = panel.pop("expr")
    body = {"title": "panel", **panel, "targets": [{"expr": expr}]}
    found = findings_of("target-rate-interval-rule", one_panel(body, [PROMETHEUS]))
    assert found == ([] if expected is None
                     else [("error", f"{TARGET}invalid PromQL query '{expr}': {expected}")])


@pytest.mark.parametrize(("expr", "counter"), [
    ("something_total", "something_total"),
    ("something_total[$__rate_interval]", "something_total"),
    ("increase(something_total[$__rate_interval])", None),
    ("something_total / rate(somethingelse_total[$__rate_interval])", "something_total"),
    ("rate(something_total[$__rate_interval]) / somethingelse_total", "somethingelse_total"),
])
def test_target_counter_agg(expr: str, counter: str | None) -> None:
    panel = {"title": "panel", "datasource": "foo", "targets": [{"expr": expr}]}
    found = findings_of("target-counter-agg-rule", one_panel(panel, []))
    assert found == ([] if counter is None else [
        ("error", f"{TARGET}counter metric '{counter}' is not aggregated with rate, irate, "
                  "or increase")])


@pytest.mark.parametrize(("panel", "expected"), [
    ({"datasource": "foo", "targets": [{"expr": "sum(rate(foo[5m]))"}]}, []),
    ({"type": "singlestat", "targets": [{"expr": "sum(rate(foo[5m]))"}]}, []),
    ({"type": "timeseries", "targets": [{"expr": "foo(bar.baz)"}]},
     ["invalid PromQL query 'foo(bar.baz)': {parser}"]),
    ({"type": "singlestat", "targets": [{"expr": "sum(rate(foo[$__rate_interval])) * $__range_s"}]},
     []),
    ({"type": "singlestat",
      "targets": [{"expr": "sum(rate(foo[$__rate_interval])) * ${__range_s}"}]}, []),
    ({"type": "singlestat", "targets": [
        {"expr": "sum by(${variable:csv}) (rate(foo[$__rate_interval])) * $__range_s"}]}, []),
    ({"type": "singlestat", "targets": [{"expr": "sum (rate(foo[$interval:$resolution]))"}]}, []),
    ({"type": "singlestat", "targets": [{"expr": "increase(foo{}[$sampling])"}]}, []),
    ({"type": "singlestat", "targets": [{"expr": ""}]}, [NO_EXPRESSION]),
    ({"id": 1, "type": "singlestat", "targets": [{"panelId": 2}]},
     ["Invalid panel reference in target", NO_EXPRESSION]),
])
def test_target_promql(panel: dict[str, Any], expected: list[str]) -> None:
    found = findings_of("target-promql-rule", one_panel({"title": "panel", **panel},
                                                        PROMQL_TEMPLATES))
    assert_findings(found, [("error", TARGET + message) for message in expected])


def test_a_target_may_take_its_query_from_another_panel() -> None:
    source = {"id": 2, "type": "timeseries", "title": "source",
              "targets": [{"expr": "sum(rate(foo[5m]))"}]}
    dashboard = one_panel({"id": 1, "title": "panel", "type": "singlestat",
                           "targets": [{"panelId": 2}]}, PROMQL_TEMPLATES)
    dashboard["panels"].append(source)
    assert findings_of("target-promql-rule", dashboard) == []
