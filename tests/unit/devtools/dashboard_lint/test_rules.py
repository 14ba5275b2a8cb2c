"""`dashboard_lint.rules`: the dashboard, template and panel rules against upstream's own
expectations: cases of grafana/dashboard-linter's lint/rule_template_*_test.go,
rule_panel_*_test.go, rule_uneditable_test.go (Apache-2.0) at 6d38b915eed8, as JSON dashboards.

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


def ds(name: str, label: str, query: str) -> dict[str, Any]:
    return {"type": "datasource", "name": name, "label": label, "query": query}


JOB_OK = {"name": "job", "datasource": "$datasource", "type": "query", "label": "Job",
          "multi": True, "allValue": ".+", "query": ""}


def namespaces(query: str, refresh: int = 2) -> dict[str, Any]:
    return {"name": "namespaces", "datasource": "$datasource", "query": query, "type": "query",
            "label": "job", "refresh": refresh}


VALUE_MAPPINGS = [{"type": "value", "options": {"1": {"text": "OK", "color": "green", "index": 0},
                                                "2": {"text": "Problem", "color": "red",
                                                      "index": 1}}}]


NO_UNIT = "Dashboard 'test', panel 'bar' has no or invalid units defined: ''"


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
