"""`dashboard_lint.variables`: Grafana's variables expanded against upstream's own expectations:
cases of grafana/dashboard-linter's lint/variables_test.go (Apache-2.0) at 6d38b915eed8, as JSON
dashboards.

Upstream builds its cases as Go structs; here they are the JSON a dashboard would hold, so a
template that upstream leaves without a query gets `"query": ""` (a JSON template of a type other
than adhoc or custom must have one). Where a message embeds the PromQL parser's error, `{parser}`
stands for it: the Rust parser words its errors differently from Prometheus' Go one.
"""

from __future__ import annotations

import re

import pytest

from devtools.dashboard_lint.model import Template as ModelTemplate
from devtools.dashboard_lint.variables import ExpansionError, expand

pytestmark = pytest.mark.unit


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
