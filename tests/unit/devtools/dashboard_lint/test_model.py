"""`dashboard_lint.model`: datasources and panels read from a dashboard against upstream's own
expectations: cases of grafana/dashboard-linter's lint/model_test.go (Apache-2.0) at
6d38b915eed8, as JSON dashboards.

Upstream builds its cases as Go structs; here they are the JSON a dashboard would hold, so a
template that upstream leaves without a query gets `"query": ""` (a JSON template of a type other
than adhoc or custom must have one). Where a message embeds the PromQL parser's error, `{parser}`
stands for it: the Rust parser words its errors differently from Prometheus' Go one.
"""

from __future__ import annotations

import re

import pytest

from devtools.dashboard_lint.model import Datasource, DatasourceError, datasource_of

from .lint_helpers import PROMETHEUS, findings_of

pytestmark = pytest.mark.unit


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
