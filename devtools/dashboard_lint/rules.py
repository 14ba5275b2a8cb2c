"""The rules on the dashboard, its templates and its panels: each yields (severity, text), the
text without the "Dashboard 't', panel 'p'" prefix that `lint` puts before it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Literal

from devtools.dashboard_lint import promql
from devtools.dashboard_lint.model import (
    Dashboard,
    DashboardError,
    DatasourceError,
    Panel,
    Template,
    datasource_of,
)
from devtools.dashboard_lint.units import VALID_UNITS
from devtools.dashboard_lint.variables import ExpansionError, expand

Severity = Literal["error", "warning"]
Found = Iterator[tuple[Severity, str]]

QUERY_PANELS = ("singlestat", "gauge", "table", "stat", "state-timeline", "timeseries")
"""The panel types whose queries the PromQL rules read (others may hold anything)."""
CHECKED_PANELS = ("stat", "singlestat", "graph", "table", "timeseries", "gauge")
"""The types the title, units and no-targets rules check (rows, text panels... are not)."""
DATASOURCE_PANELS = ("singlestat", "graph", "table", "timeseries")
TEMPLATED_DATASOURCES = ("$datasource", "${datasource}", "$prometheus_datasource",
                         "${prometheus_datasource}")
LABEL_FUNCTIONS = ("label_names", "label_values", "metrics", "query_result")
_LABEL_QUERY = re.compile(r"([a-z_]+)\((.+)\)")
_WORD = re.compile(r"\w+(?:['’.:]\w+)*")


def prometheus(d: Dashboard) -> bool:
    """Whether the query rules apply: the first datasource template is a Prometheus one."""
    template = d.template_datasource()
    return template is not None and template.query == "prometheus"


def title_case(text: str) -> str:
    """Each word's first letter upper case, the rest lower (Grafana's label convention)."""
    return _WORD.sub(lambda m: m[0][:1].upper() + m[0][1:].lower(), text)


# -- the dashboard and its templates


def template_datasource(d: Dashboard) -> Found:
    sources = d.templates_of_type("datasource")
    if not sources:
        yield "error", "does not have a templated data source"
    for t in sources:
        uid = f"{t.query.lower()}_datasource"
        label = f"{title_case(t.query)} data source"
        name_error = f"templated data source variable named '{t.name}', should be named '{uid}'"
        label_error = (f"templated data source variable labeled '{t.label}', "
                       f"should be labeled '{label}'")
        names, labels = {uid}, {label}
        if len(sources) == 1:
            names.add("datasource")
            labels.add("Data source")
            name_error += ", or 'datasource'"
            label_error += ", or 'Data source'"
        if t.name not in names:
            yield "error", name_error
        if t.label not in labels:
            yield "warning", label_error


def required_template(name: str) -> Callable[[Dashboard], Found]:
    def check(d: Dashboard) -> Found:
        if not prometheus(d):
            return
        t = d.template_named(name)
        if t is None:
            yield "error", f"is missing the {name} template"
            return
        uid = ""
        try:
            uid = datasource_of(t.datasource).uid
        except DatasourceError as e:
            yield "error", f"{name} template has invalid datasource {e}"
        if uid not in TEMPLATED_DATASOURCES:
            yield "error", (f"{name} template should use datasource '$datasource', "
                            f"is currently '{uid}'")
        if t.type != "query":
            yield "error", f"{name} template should be a Prometheus query, is currently '{t.type}'"
        if t.label != title_case(name):
            yield "warning", (f"{name} template should be a labeled '{title_case(name)}', "
                              f"is currently '{t.label}'")
        if not t.multi:
            yield "error", f"{name} template should be a multi select"
        if t.all_value != ".+":
            yield "error", f"{name} template allValue should be '.+', is currently '{t.all_value}'"
    return check


def template_label_promql(d: Dashboard) -> Found:
    if not prometheus(d):
        return
    for t in d.templates:
        if t.type != "query":
            continue
        problem = label_query_problem(t, d.templates)
        if problem is not None:
            yield "error", f"template '{t.name}' invalid templated label '{t.query}': {problem}"


def label_query_problem(t: Template, templates: tuple[Template, ...]) -> str | None:
    """What is wrong with a query variable's `label_values(...)`-style query, if anything.

    Upstream accepts the argument when Prometheus' parser returns an expression, and that
    parser returns what it read before a syntax error: `label_values(up{job="x"}, job)` passes
    on `up{job="x"}` alone. Here: the argument parses, or its part before the first top-level
    comma does.
    """
    m = _LABEL_QUERY.search(t.query)
    if m is None:
        return f"invalid 'query': {t.query}"
    if m[1] not in LABEL_FUNCTIONS:
        return f"invalid 'function': {m[1]}"
    try:
        promql.parse(m[2], templates)
        return None
    except promql.PromQLError as e:
        problem = str(e)
    try:
        expanded = expand(m[2], templates)
    except ExpansionError:
        return problem
    comma = promql.top_level_comma(expanded)
    if comma is not None and promql.parses(expanded[:comma]):
        return None
    return problem


def template_on_time_change_reload(d: Dashboard) -> Found:
    for t in d.templates:
        if t.type == "query" and t.refresh != 2:
            yield "error", (f"templated datasource variable named '{t.name}', should be set to "
                            "be refreshed 'On Time Range Change (value 2)', is currently "
                            f"'{t.refresh}'")


def uneditable(d: Dashboard) -> Found:
    if d.editable:
        yield "error", "is editable, it should be set to 'editable: false'"


# -- panels


def panel_datasource(d: Dashboard, p: Panel) -> Found:
    if p.type not in DATASOURCE_PANELS:
        return
    allowed = {form for t in d.templates_of_type("datasource")
               for form in (f"${t.name}", f"${{{t.name}}}")}
    uid = ""
    try:
        uid = datasource_of(p.datasource).uid
    except DatasourceError as e:
        yield "error", f"has invalid datasource: {e}'"
    if uid not in allowed:
        yield "error", f"does not use a templated datasource, uses '{uid}'"


def panel_title_description(d: Dashboard, p: Panel) -> Found:
    if p.type in CHECKED_PANELS and not (p.title and p.description):
        yield "error", (f"has missing title or description, currently has title '{p.title}' "
                        f"and description: '{p.description}'")


def panel_units(d: Dashboard, p: Panel) -> Found:
    if p.type not in CHECKED_PANELS:
        return
    if p.type == "stat" and _shows_non_numeric_fields(p.options):
        return
    if _has_value_mappings(p):
        return
    unit = _configured_unit(p)
    if unit not in VALID_UNITS:
        yield "error", f"has no or invalid units defined: '{unit}'"


def _shows_non_numeric_fields(options: object) -> bool:
    """A stat panel set to show a non-numeric field (`reduceOptions.fields`) needs no unit.
    Upstream reads the options leniently: a wrong type anywhere in reduceOptions means "no"."""
    reduce = options.get("reduceOptions") if isinstance(options, dict) else None
    if not isinstance(reduce, dict):
        return False
    fields, values, limit = (reduce.get(k) for k in ("fields", "values", "limit"))
    well_typed = (isinstance(fields, str | None) and isinstance(values, bool | None)
                  and (limit is None or (isinstance(limit, int) and not isinstance(limit, bool))))
    return well_typed and bool(fields)


def _has_value_mappings(p: Panel) -> bool:
    """Value mappings (a number shown as text) make a unit moot: a non-null `mappings` in an
    override or in the defaults, even an empty list."""
    if p.field_config is None:
        return False
    if any(prop.id == "mappings" and prop.value is not None
           for override in p.field_config.overrides for prop in override):
        return True
    return p.field_config.mappings is not None


def _configured_unit(p: Panel) -> str:
    """The last unit an override sets, else the defaults' unit."""
    if p.field_config is None:
        return ""
    unit = ""
    for override in p.field_config.overrides:
        for prop in override:
            if prop.id == "unit":
                if not isinstance(prop.value, str):
                    raise DashboardError(f"panel '{p.title}': a unit override's value is not a "
                                         "string (upstream's linter crashes on it)")
                unit = prop.value
    return unit or p.field_config.unit


def panel_no_targets(d: Dashboard, p: Panel) -> Found:
    if p.type in CHECKED_PANELS and p.targets is None:
        yield "error", "has no targets"
