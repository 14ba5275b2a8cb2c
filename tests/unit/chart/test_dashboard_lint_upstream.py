"""devtools.dashboard_lint against upstream's own expectations: cases of grafana/dashboard-linter's
lint/*_test.go (Apache-2.0) at 6d38b915eed8, one rule at a time, as JSON dashboards.

Upstream builds its cases as Go structs; here they are the JSON a dashboard would hold, so a
template that upstream leaves without a query gets `"query": ""` (a JSON template of a type other
than adhoc or custom must have one). Where a message embeds the PromQL parser's error, `{parser}`
stands for it: the Rust parser words its errors differently from Prometheus' Go one.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from devtools.dashboard_lint import lint
from devtools.dashboard_lint.model import Datasource, DatasourceError, datasource_of
from devtools.dashboard_lint.model import Template as ModelTemplate
from devtools.dashboard_lint.variables import ExpansionError, expand

pytestmark = pytest.mark.unit

PROMETHEUS: dict[str, Any] = {"type": "datasource", "query": "prometheus"}


def findings_of(rule: str, dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in lint(dashboard) if f.rule == rule]


def assert_findings(found: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    assert len(found) == len(expected), found
    for (severity, message), (want_severity, want) in zip(found, expected, strict=True):
        assert severity == want_severity
        before, _, after = want.partition("{parser}")
        pattern = re.escape(before) + (".+" + re.escape(after) if "{parser}" in want else "")
        assert re.fullmatch(pattern, message), (message, want)


def one_panel(panel: dict[str, Any], templates: list[dict[str, Any]],
              title: str = "dashboard") -> dict[str, Any]:
    return {"title": title, "templating": {"list": templates}, "panels": [panel]}


# -- lint/variables_test.go


VARIABLES = [
    ModelTemplate(name="interval", label="", type="", query="", datasource=None, multi=False,
                  all_value="", current={}, options=({"value": "4h"},), refresh=0),
    ModelTemplate(name="resolution", label="", type="", query="", datasource=None, multi=False,
                  all_value="", current={}, options=({"value": "5m"},), refresh=0),
    ModelTemplate(name="var", label="", type="query", query="", datasource=None, multi=False,
                  all_value="", current={"value": "value"}, options=(), refresh=0),
]
RATE = "(rate(cpu{}[$__rate_interval]))"
RATE_DONE = "(rate(cpu{}[8869990787ms]))"


@pytest.mark.parametrize(("expr", "expanded"), [
    ('up{job=~"$job"}', 'up{job=~"$job"}'),
    ('up$var{job=~"$job"}', 'upvar{job=~"$job"}'),
    ("rate(metric{}[$__rate_interval])", "rate(metric{}[8869990787ms])"),
    ("rate(metric{}[${__rate_interval}])", "rate(metric{}[8869990787ms])"),
    ("rate(metric{}[[[__rate_interval]]])", "rate(metric{}[8869990787ms])"),
    ('sum(http_requests_total{method="GET"} @ ${__user.id})',
     'sum(http_requests_total{method="GET"} @ 42)'),
    ('sum(http_requests_total{method="GET"} @ $__from)',
     'sum(http_requests_total{method="GET"} @ 1594671549254)'),
    ('sum(http_requests_total{method="GET"} @ ${__from:date:seconds}000)',
     'sum(http_requests_total{method="GET"} @ 1594671549000)'),
    ('sum(http_requests_total{method="GET"} @ ${__from:date})',
     'sum(http_requests_total{method="GET"} @ 2020-07-13T20:19:09Z)'),
    ('sum(http_requests_total{method="GET"} @ ${__from:date:iso})',
     'sum(http_requests_total{method="GET"} @ 2020-07-13T20:19:09Z)'),
    (f"max by(${{variable:csv}}) {RATE}", f"max by(variable,variable,variable) {RATE_DONE}"),
    (f"max by(${{variable:doublequote}}) {RATE}",
     f'max by("variable","variable","variable") {RATE_DONE}'),
    (f"max by(${{variable:glob}}) {RATE}", f"max by({{variable,variable,variable}}) {RATE_DONE}"),
    (f"max by(${{variable:json}}) {RATE}",
     f'max by(["variable","variable","variable"]) {RATE_DONE}'),
    (f"max by(${{variable:lucene}}) {RATE}",
     f'max by(("variable" OR "variable" OR "variable")) {RATE_DONE}'),
    (f"max by(${{variable:percentencode}}) {RATE}",
     f"max by(variable%2Cvariable%2Cvariable) {RATE_DONE}"),
    (f"max by(${{variable:pipe}}) {RATE}", f"max by(variable|variable|variable) {RATE_DONE}"),
    (f"max by(${{variable:raw}}) {RATE}", f"max by(variable,variable,variable) {RATE_DONE}"),
    (f"max by(${{variable:regex}}) {RATE}", f"max by(variable|variable|variable) {RATE_DONE}"),
    (f"max by(${{variable:singlequote}}) {RATE}",
     f"max by('variable','variable','variable') {RATE_DONE}"),
    (f"max by(${{variable:sqlstring}}) {RATE}",
     f"max by('variable','variable','variable') {RATE_DONE}"),
    (f"max by(${{variable:text}}) {RATE}",
     f"max by(variable + variable + variable) {RATE_DONE}"),
    (f"max by(${{variable:queryparam}}) {RATE}",
     f"max by(var-variable=variable&var-variable=variable&var-variable=variable) {RATE_DONE}"),
])
def test_variables_expand_as_upstream_expands_them(expr: str, expanded: str) -> None:
    assert expand(expr, []) == expanded


def test_dashboard_variables_expand_to_their_current_value_or_first_option() -> None:
    assert expand("max by($var) (rate(cpu{}[$interval:$resolution]))", VARIABLES) \
        == "max by(value) (rate(cpu{}[4h:5m]))"


@pytest.mark.parametrize(("value", "expanded"), [
    ("$__auto_interval_interval", "sum (rate(cpu{}[10s]))"),
    ("$__auto_interval", "sum (rate(cpu{}[10s]))"),
    ("$interval", "sum (rate(cpu{}[interval]))"),  # no endless recursion
])
def test_variables_expand_recursively_without_themselves(value: str, expanded: str) -> None:
    interval = ModelTemplate(name="interval", label="", type="", query="", datasource=None,
                             multi=False, all_value="", current={"value": value}, options=(),
                             refresh=0)
    assert expand("sum (rate(cpu{}[$interval]))", [interval]) == expanded


@pytest.mark.parametrize(("expr", "error"), [
    ('sum(http_requests_total{method="GET"} @ ${__from:date:YYYY-MM})',
     "unsupported momentjs time format: YYYY-MM"),
    (f"max by(${{a:b:c:d}}) {RATE}", "unknown variable format: a:b:c:d"),
])
def test_variables_that_cannot_expand_are_errors(expr: str, error: str) -> None:
    with pytest.raises(ExpansionError, match=f"^{re.escape(error)}$"):
        expand(expr, [])


# -- lint/model_test.go


@pytest.mark.parametrize(("raw", "expected"), [
    ("${datasource}", Datasource("${datasource}", "")),
    ({"uid": "${datasource}"}, Datasource("${datasource}", "")),
    ({"uid": "${datasource}", "type": "${type}"}, Datasource("${datasource}", "${type}")),
])
def test_a_datasource_is_a_uid_or_an_object_with_one(raw: object, expected: Datasource) -> None:
    assert datasource_of(raw) == expected


@pytest.mark.parametrize(("raw", "error"), [
    (1, "invalid type for field 'datasource': 1"),
    ({}, "invalid type for field 'datasource': missing uid field"),
    ({"uid": 1}, "invalid type for field 'datasource': invalid uid field type, should be string"),
])
def test_other_datasource_shapes_are_errors(raw: object, error: str) -> None:
    with pytest.raises(DatasourceError, match=f"^{re.escape(error)}$"):
        datasource_of(raw)


def test_panels_come_from_old_rows_top_level_panels_and_rows_nested_panels() -> None:
    """testdata/dashboard.json's shape: 4 panels, each expr up{job="$job"} (job uses `=`)."""
    timeseries = {"type": "timeseries", "title": "Timeseries",
                  "targets": [{"expr": 'up{job="$job"}'}]}
    dashboard = {"title": "d", "templating": {"list": [PROMETHEUS | {"name": "datasource"}]},
                 "rows": [{"panels": [timeseries]}],
                 "panels": [timeseries, {"type": "row", "title": "Dashboard row",
                                         "panels": [timeseries]}]}
    job = findings_of("target-job-rule", dashboard)
    assert len(job) == 3  # the row itself has no targets
    assert len(findings_of("panel-title-description-rule", dashboard)) == 3


def test_a_kubernetes_shaped_dashboard_is_read_from_its_spec() -> None:
    spec = {"title": "inner", "editable": True}
    assert findings_of("uneditable-dashboard", {"apiVersion": "v0alpha1", "kind": "Dashboard",
                                                "spec": spec}) \
        == [("error", "Dashboard 'inner' is editable, it should be set to 'editable: false'")]


# -- lint/rule_template_datasource_test.go, rule_template_job_test.go


def ds(name: str, label: str, query: str) -> dict[str, Any]:
    return {"type": "datasource", "name": name, "label": label, "query": query}


@pytest.mark.parametrize(("templates", "expected"), [
    ([], [("error", "Dashboard 'test' does not have a templated data source")]),
    ([ds("foo", "", "")], [
        ("error", "Dashboard 'test' templated data source variable named 'foo', should be named "
                  "'_datasource', or 'datasource'"),
        ("warning", "Dashboard 'test' templated data source variable labeled '', should be "
                    "labeled ' data source', or 'Data source'")]),
    ([ds("datasource", "bar", "bar")], [
        ("warning", "Dashboard 'test' templated data source variable labeled 'bar', should be "
                    "labeled 'Bar data source', or 'Data source'")]),
    ([ds("datasource", "Data source", "prometheus")], []),
    ([ds("datasource", "Prometheus data source", "prometheus")], []),
    ([ds("prometheus_datasource", "Data source", "prometheus")], []),
    ([ds("loki_datasource", "Data source", "loki")], []),
    ([ds("datasource", "Data source", "prometheus"), ds("loki_datasource", "Data source", "loki"),
      ds("influx_datasource", "Data source", "influx")], [
        ("error", "Dashboard 'test' templated data source variable named 'datasource', should be "
                  "named 'prometheus_datasource'"),
        ("warning", "Dashboard 'test' templated data source variable labeled 'Data source', "
                    "should be labeled 'Prometheus data source'"),
        ("warning", "Dashboard 'test' templated data source variable labeled 'Data source', "
                    "should be labeled 'Loki data source'"),
        ("warning", "Dashboard 'test' templated data source variable labeled 'Data source', "
                    "should be labeled 'Influx data source'")]),
    ([ds("prometheus_datasource", "Prometheus data source", "prometheus"),
      ds("loki_datasource", "Loki data source", "loki"),
      ds("influx_datasource", "Influx data source", "influx")], []),
])
def test_template_datasource(templates: list[dict[str, Any]],
                             expected: list[tuple[str, str]]) -> None:
    dashboard = {"title": "test", "templating": {"list": templates}}
    assert findings_of("template-datasource-rule", dashboard) == expected


JOB_OK = {"name": "job", "datasource": "$datasource", "type": "query", "label": "Job",
          "multi": True, "allValue": ".+", "query": ""}


@pytest.mark.parametrize(("templates", "expected"), [
    ([], []),  # not a Prometheus dashboard
    ([PROMETHEUS], [("error", "is missing the job template")]),
    ([PROMETHEUS, {"name": "job", "datasource": "foo", "query": ""}], [
        ("error", "job template should use datasource '$datasource', is currently 'foo'"),
        ("error", "job template should be a Prometheus query, is currently ''"),
        ("warning", "job template should be a labeled 'Job', is currently ''"),
        ("error", "job template should be a multi select"),
        ("error", "job template allValue should be '.+', is currently ''")]),
    ([PROMETHEUS, {"name": "job", "datasource": "$datasource", "type": "bar", "query": ""}], [
        ("error", "job template should be a Prometheus query, is currently 'bar'"),
        ("warning", "job template should be a labeled 'Job', is currently ''"),
        ("error", "job template should be a multi select"),
        ("error", "job template allValue should be '.+', is currently ''")]),
    ([PROMETHEUS, {"name": "job", "datasource": "$datasource", "type": "query", "label": "bar",
                   "query": ""}], [
        ("warning", "job template should be a labeled 'Job', is currently 'bar'"),
        ("error", "job template should be a multi select"),
        ("error", "job template allValue should be '.+', is currently ''")]),
    ([PROMETHEUS, JOB_OK, JOB_OK | {"name": "instance", "datasource": "${datasource}",
                                    "label": "Instance"}], []),
])
def test_template_job(templates: list[dict[str, Any]], expected: list[tuple[str, str]]) -> None:
    found = findings_of("template-job-rule", {"title": "test", "templating": {"list": templates}})
    assert found == [(s, f"Dashboard 'test' {m}") for s, m in expected]


# -- lint/rule_template_label_promql_test.go, rule_template_on_time_change_reload_test.go


def namespaces(query: str, refresh: int = 2) -> dict[str, Any]:
    return {"name": "namespaces", "datasource": "$datasource", "query": query, "type": "query",
            "label": "job", "refresh": refresh}


@pytest.mark.parametrize(("templates", "expected"), [
    ([{"type": "datasource", "query": "foo"}], []),  # not a Prometheus dashboard
    ([PROMETHEUS, namespaces('label_values(up{job=~"$job"}, namespace)')], []),
    ([PROMETHEUS, namespaces("label_values(up{, namespace)")],
     ["Dashboard 'test' template 'namespaces' invalid templated label "
      "'label_values(up{, namespace)': {parser}"]),
    ([PROMETHEUS, namespaces("foo(up, namespace)")],
     ["Dashboard 'test' template 'namespaces' invalid templated label 'foo(up, namespace)': "
      "invalid 'function': foo"]),
    ([PROMETHEUS, namespaces("foo")],
     ["Dashboard 'test' template 'namespaces' invalid templated label 'foo': "
      "invalid 'query': foo"]),
    ([PROMETHEUS,
      namespaces("query_result(max by(namespaces) (max_over_time(memory{}[$__range])))")], []),
])
def test_template_label_promql(templates: list[dict[str, Any]], expected: list[str]) -> None:
    found = findings_of("template-label-promql-rule",
                        {"title": "test", "templating": {"list": templates}})
    assert_findings(found, [("error", message) for message in expected])


@pytest.mark.parametrize(("refresh", "expected"), [
    (2, []),
    (1, [("error", "Dashboard 'test' templated datasource variable named 'namespaces', should "
                   "be set to be refreshed 'On Time Range Change (value 2)', is currently '1'")]),
])
def test_template_on_time_change_reload(refresh: int, expected: list[tuple[str, str]]) -> None:
    templates = [PROMETHEUS, namespaces('label_values(up{job=~"$job"}, namespace)', refresh)]
    dashboard = {"title": "test", "templating": {"list": templates}}
    assert findings_of("template-on-time-change-reload-rule", dashboard) == expected


def test_uneditable() -> None:
    assert findings_of("uneditable-dashboard", {"title": "test", "editable": False}) == []
    assert findings_of("uneditable-dashboard", {"title": "test", "editable": True}) \
        == [("error", "Dashboard 'test' is editable, it should be set to 'editable: false'")]


# -- lint/rule_panel_*_test.go


@pytest.mark.parametrize(("panel", "templates", "expected"), [
    ({"type": "singlestat", "datasource": "foo", "title": "bar"}, [],
     ["Dashboard 'test', panel 'bar' does not use a templated datasource, uses 'foo'"]),
    ({"type": "singlestat", "datasource": "$datasource"}, [ds("datasource", "", "")], []),
    ({"type": "singlestat", "datasource": "${datasource}"}, [ds("datasource", "", "")], []),
    ({"type": "singlestat", "datasource": "$prometheus_datasource"},
     [ds("prometheus_datasource", "", "")], []),
    ({"type": "singlestat", "datasource": "${prometheus_datasource}"},
     [ds("prometheus_datasource", "", "")], []),
])
def test_panel_datasource(panel: dict[str, Any], templates: list[dict[str, Any]],
                          expected: list[str]) -> None:
    found = findings_of("panel-datasource-rule", one_panel(panel, templates, "test"))
    assert found == [("error", message) for message in expected]


@pytest.mark.parametrize(("panel", "expected"), [
    ({"type": "singlestat", "id": 1, "title": "", "description": ""},
     ["Dashboard 'test', panel with id '1' has missing title or description, currently has "
      "title '' and description: ''"]),
    ({"type": "singlestat", "id": 2, "title": "title", "description": ""},
     ["Dashboard 'test', panel 'title' has missing title or description, currently has title "
      "'title' and description: ''"]),
    ({"type": "singlestat", "id": 3, "title": "", "description": "description"},
     ["Dashboard 'test', panel with id '3' has missing title or description, currently has "
      "title '' and description: 'description'"]),
    ({"type": "singlestat", "id": 1, "datasource": "foo", "title": "testpanel",
      "description": "testdescription"}, []),
])
def test_panel_title_description(panel: dict[str, Any], expected: list[str]) -> None:
    found = findings_of("panel-title-description-rule", one_panel(panel, [], "test"))
    assert found == [("error", message) for message in expected]


VALUE_MAPPINGS = [{"type": "value", "options": {"1": {"text": "OK", "color": "green", "index": 0},
                                                "2": {"text": "Problem", "color": "red",
                                                      "index": 1}}}]
NO_UNIT = "Dashboard 'test', panel 'bar' has no or invalid units defined: ''"


@pytest.mark.parametrize(("extra", "expected"), [
    ({"fieldConfig": {"defaults": {"unit": "MyInvalidUnit"}}},
     ["Dashboard 'test', panel 'bar' has no or invalid units defined: 'MyInvalidUnit'"]),
    ({}, [NO_UNIT]),
    ({"fieldConfig": {}}, [NO_UNIT]),
    ({"fieldConfig": {"defaults": {"unit": "short"}}}, []),
    ({"fieldConfig": {"defaults": {"unit": "none"}}}, []),
    ({"type": "stat", "options": {"reduceOptions": {"fields": "/^version$/"}}}, []),
    ({"type": "stat", "options": {"reduceOptions": {"fields": ""}}}, [NO_UNIT]),
    ({"fieldConfig": {"defaults": {"mappings": VALUE_MAPPINGS}}}, []),
    ({"fieldConfig": {"overrides": [{"properties": [{"id": "mappings",
                                                     "value": VALUE_MAPPINGS}]}]}}, []),
])
def test_panel_units(extra: dict[str, Any], expected: list[str]) -> None:
    panel = {"type": "singlestat", "datasource": "foo", "title": "bar"} | extra
    found = findings_of("panel-units-rule", one_panel(panel, [], "test"))
    assert found == [("error", message) for message in expected]


def test_panel_no_targets() -> None:
    panel = {"type": "singlestat", "datasource": "foo", "title": "bar"}
    assert findings_of("panel-no-targets-rule", one_panel(panel, [], "test")) \
        == [("error", "Dashboard 'test', panel 'bar' has no targets")]
    with_target = panel | {"targets": [{"expr": "sum(rate(foo[5m]))"}]}
    assert findings_of("panel-no-targets-rule", one_panel(with_target, [], "test")) == []


# -- lint/rule_target_*_test.go


TARGET = "Dashboard 'dashboard', panel 'panel', target idx '0' "


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


JI = 'job=~"$job",instance=~"$instance"'


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


PROMQL_TEMPLATES: list[dict[str, Any]] = [
    PROMETHEUS,
    {"type": "interval", "name": "interval", "query": "", "options": [{"value": "1h"}]},
    {"type": "interval", "name": "sampling", "query": "",
     "current": {"value": "$__auto_interval_sampling"}},
    {"type": "resolution", "name": "resolution", "query": "",
     "options": [{"value": "1h"}, {"value": "1h"}]},
]
NO_EXPRESSION = "invalid PromQL query '': {parser}"


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
