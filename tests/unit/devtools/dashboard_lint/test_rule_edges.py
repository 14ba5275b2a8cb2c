"""Every rule's edge, through `lint` (rules.py and targets.py together): a small dashboard with no
finding, and for each rule one change that just passes and one that just fails, so each
rule's edge is pinned and no other rule fires on it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devtools.dashboard_lint import RULE_NAMES, lint

pytestmark = pytest.mark.unit

JI = 'job=~"$job", instance=~"$instance"'
CLEAN: dict[str, Any] = {
    "title": "small",
    "editable": False,
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus"},
        {"name": "job", "label": "Job", "type": "query", "datasource": "${datasource}",
         "query": "label_values(up, job)", "multi": True, "allValue": ".+", "refresh": 2},
        {"name": "instance", "label": "Instance", "type": "query",
         "datasource": {"type": "prometheus", "uid": "$datasource"},
         "query": {"query": 'label_values(up{job=~"$job"}, instance)', "refId": "A"},
         "multi": True, "allValue": ".+", "refresh": 2},
    ]},
    "panels": [
        {"type": "timeseries", "id": 1, "title": "rate", "description": "a rate",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "fieldConfig": {"defaults": {"unit": "ops"}},
         "targets": [{"refId": "A",
                      "expr": f"sum(rate(x_total{{{JI}}}[$__rate_interval]))"}]},
        {"type": "row", "title": "a collapsed row", "collapsed": True, "panels": [
            {"type": "stat", "id": 3, "title": "nested", "description": "inside the row",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "fieldConfig": {"defaults": {"unit": "bytes"}},
             "targets": [{"refId": "A", "expr": f"max(x_bytes{{{JI}}})"}]},
        ]},
    ],
}
EXPR = ("panels", 0, "targets", 0, "expr")
NESTED = ("panels", 1, "panels", 0)
JOB = ("templating", "list", 1)
INSTANCE = ("templating", "list", 2)

CASES: list[tuple[str, tuple[Any, ...], object, set[str]]] = [
    # template-job-rule, template-instance-rule
    ("allValue .+", (*JOB, "allValue"), ".+", set()),
    ("allValue .*", (*JOB, "allValue"), ".*", {"template-job-rule"}),
    ("instance multi", (*INSTANCE, "multi"), True, set()),
    ("instance single", (*INSTANCE, "multi"), False, {"template-instance-rule"}),
    ("job from ${datasource}", (*JOB, "datasource"), "${datasource}", set()),
    ("job from a fixed datasource", (*JOB, "datasource"), "prometheus", {"template-job-rule"}),
    ("job label Job", (*JOB, "label"), "Job", set()),
    ("job label job", (*JOB, "label"), "job", {"template-job-rule"}),
    ("job a query", (*JOB, "type"), "query", set()),
    ("job a custom list", (*JOB, "type"), "custom", {"template-job-rule"}),
    ("no instance variable", (*INSTANCE, "name"), "node", {"template-instance-rule"}),
    # template-on-time-change-reload-rule
    ("refresh 2", (*JOB, "refresh"), 2, set()),
    ("refresh 1", (*JOB, "refresh"), 1, {"template-on-time-change-reload-rule"}),
    # template-label-promql-rule
    ("label_values(metric, label)", (*JOB, "query"), "label_values(up, job)", set()),
    ("label_values(broken, label)", (*JOB, "query"), "label_values(up{, job)",
     {"template-label-promql-rule"}),
    ("an unknown function", (*JOB, "query"), "labels_values(up, job)",
     {"template-label-promql-rule"}),
    ("query_result(expr)", (*JOB, "query"), "query_result(count by (job) (up))", set()),
    # template-datasource-rule
    ("datasource label Data source", ("templating", "list", 0, "label"), "Data source", set()),
    ("datasource label Datasource", ("templating", "list", 0, "label"), "Datasource",
     {"template-datasource-rule"}),
    ("datasource named prometheus_datasource", ("templating", "list", 0, "name"),
     "prometheus_datasource", {"panel-datasource-rule"}),  # the panels use ${datasource}
    ("datasource named ds", ("templating", "list", 0, "name"), "ds",
     {"template-datasource-rule", "panel-datasource-rule"}),
    # panel-datasource-rule (not checked on stat panels)
    ("panel on $datasource", ("panels", 0, "datasource"), "$datasource", set()),
    ("panel on a fixed datasource", ("panels", 0, "datasource"), "prometheus",
     {"panel-datasource-rule"}),
    ("stat panel on a fixed datasource", (*NESTED, "datasource"), "prometheus", set()),
    # panel-title-description-rule, a row's nested panel included
    ("description", ("panels", 0, "description"), "a rate", set()),
    ("no description", ("panels", 0, "description"), "", {"panel-title-description-rule"}),
    ("nested panel without a description", (*NESTED, "description"), "",
     {"panel-title-description-rule"}),
    ("row without a description", ("panels", 1, "description"), "", set()),
    # panel-units-rule
    ("unit bytes", (*NESTED, "fieldConfig", "defaults", "unit"), "bytes", set()),
    ("unit bytez", (*NESTED, "fieldConfig", "defaults", "unit"), "bytez", {"panel-units-rule"}),
    ("no unit", ("panels", 0, "fieldConfig"), None, {"panel-units-rule"}),
    ("no unit but value mappings", ("panels", 0, "fieldConfig"),
     {"defaults": {"mappings": []}}, set()),
    ("a unit override", ("panels", 0, "fieldConfig"),
     {"defaults": {"unit": "bytez"}, "overrides": [{"properties": [{"id": "unit",
                                                                     "value": "s"}]}]}, set()),
    ("a unit override sz", ("panels", 0, "fieldConfig"),
     {"defaults": {"unit": "s"}, "overrides": [{"properties": [{"id": "unit",
                                                                 "value": "sz"}]}]},
     {"panel-units-rule"}),
    ("stat of a text field without a unit", NESTED,
     {"type": "stat", "title": "version", "description": "the version",
      "datasource": "${datasource}", "options": {"reduceOptions": {"fields": "/^version$/"}},
      "targets": [{"expr": f"x_build_info{{{JI}}}"}]}, set()),
    ("stat of numbers without a unit", NESTED,
     {"type": "stat", "title": "version", "description": "the version",
      "datasource": "${datasource}", "options": {"reduceOptions": {"fields": ""}},
      "targets": [{"expr": f"x_build_info{{{JI}}}"}]}, {"panel-units-rule"}),
    # panel-no-targets-rule
    ("empty targets list", ("panels", 0, "targets"), [], set()),
    ("no targets", ("panels", 0, "targets"), None, {"panel-no-targets-rule"}),
    # target-promql-rule
    ("valid PromQL", EXPR, f"sum(x{{{JI}}})", set()),
    ("invalid PromQL", EXPR, f"sum(x{{{JI}}}", {"target-promql-rule"}),
    ("an experimental function", EXPR, f"sort_by_label(x{{{JI}}}, \"a\")",
     {"target-promql-rule"}),
    # target-rate-interval-rule
    ("rate over $__rate_interval", EXPR, f"rate(x_total{{{JI}}}[$__rate_interval])", set()),
    ("rate over ${__rate_interval}", EXPR, f"rate(x_total{{{JI}}}[${{__rate_interval}}])", set()),
    ("rate over 5m", EXPR, f"rate(x_total{{{JI}}}[5m])", {"target-rate-interval-rule"}),
    ("irate over 5m", EXPR, f"irate(x_total{{{JI}}}[5m])", {"target-rate-interval-rule"}),
    ("increase over 5m", EXPR, f"increase(x_total{{{JI}}}[5m])", set()),
    ("rate over $__interval", EXPR, f"rate(x_total{{{JI}}}[$__interval])",
     {"target-rate-interval-rule"}),
    ("a range in parentheses", EXPR, f"rate((x_total{{{JI}}}[$__range]))",
     {"target-rate-interval-rule"}),
    ("a range of 2^32 ms", EXPR, f"rate(x_total{{{JI}}}[4294967296ms])",
     {"target-rate-interval-rule"}),  # parsed at its length, not wrapped round to 0
    ("a range of 292 years", EXPR, f"max_over_time(x{{{JI}}}[292y])", set()),
    ("a range of 293 years", EXPR, f"max_over_time(x{{{JI}}}[293y])", {"target-promql-rule"}),
    ("rate over 5m in a nested panel", (*NESTED, "targets", 0, "expr"),
     f"max(rate(x_total{{{JI}}}[5m]))", {"target-rate-interval-rule"}),
    # target-job-rule, target-instance-rule
    ('job=~"$job"', EXPR, f"sum(x{{{JI}}})", set()),
    ('job="$job"', EXPR, 'sum(x{job="$job", instance=~"$instance"})', {"target-job-rule"}),
    ('instance=~"$node"', EXPR, 'sum(x{job=~"$job", instance=~"$node"})', {"target-instance-rule"}),
    ("a second selector without matchers", EXPR, f"sum(x{{{JI}}}) / sum(y)",
     {"target-job-rule", "target-instance-rule"}),
    ('0.1\'s up{job="gpu-auditor-agent"}', EXPR, 'sum(up{job="gpu-auditor-agent"})',
     {"target-job-rule", "target-instance-rule"}),
    # target-counter-agg-rule: only a counter without matchers is checked (upstream's way)
    ("a counter in rate", EXPR, "sum(rate(x_total[$__rate_interval]))",
     {"target-job-rule", "target-instance-rule"}),
    ("a counter without rate", EXPR, "sum(x_total)",
     {"target-counter-agg-rule", "target-job-rule", "target-instance-rule"}),
    ("a counter in delta", EXPR, "sum(delta(x_total[$__rate_interval]))",
     {"target-counter-agg-rule", "target-job-rule", "target-instance-rule"}),
    ("a counter with matchers, without rate", EXPR, f"sum(x_total{{{JI}}})", set()),
    # uneditable-dashboard
    ("editable false", ("editable",), False, set()),
    ("editable true", ("editable",), True, {"uneditable-dashboard"}),
    # target-logql-rule: a Loki dashboard's queries are reported as not checked
    ("a Loki dashboard", ("templating", "list", 0, "query"), "loki", {"target-logql-rule"}),
]


def changed(path: tuple[Any, ...], value: object) -> dict[str, Any]:
    dashboard = copy.deepcopy(CLEAN)
    parent: Any = dashboard
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return dashboard


def test_the_small_dashboard_has_no_finding() -> None:
    assert lint(CLEAN, strict=True) == []


@pytest.mark.parametrize(("path", "value", "rules"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_a_change_finds_exactly_its_rules(path: tuple[Any, ...], value: object,
                                          rules: set[str]) -> None:
    assert {f.rule for f in lint(changed(path, value))} == rules


def test_every_rule_has_a_failing_case() -> None:
    failing = {rule for *_, rules in CASES for rule in rules}
    assert failing == set(RULE_NAMES)


def test_the_label_checks_are_warnings_and_strict_makes_them_errors() -> None:
    dashboard = changed((*JOB, "label"), "job")
    assert [(f.severity, f.message) for f in lint(dashboard)] == [
        ("warning", "Dashboard 'small' job template should be a labeled 'Job', "
                    "is currently 'job'")]
    assert [f.severity for f in lint(dashboard, strict=True)] == ["error"]


def test_loki_queries_are_not_checked_warnings() -> None:
    found = lint(changed(("templating", "list", 0, "query"), "loki"))
    assert [(f.severity, f.message.split(" LogQL")[0]) for f in found] == [
        ("warning", "Dashboard 'small', panel 'rate', target idx '0'"),
        ("warning", "Dashboard 'small', panel 'nested', target idx '0'")]
    assert all("LogQL query not checked" in f.message for f in found)


def test_a_nested_panel_is_named_in_its_finding() -> None:
    (finding,) = lint(changed((*NESTED, "description"), ""))
    assert finding.message == ("Dashboard 'small', panel 'nested' has missing title or "
                               "description, currently has title 'nested' and description: ''")
