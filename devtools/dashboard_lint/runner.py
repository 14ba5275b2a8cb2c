"""`lint`: every rule, in upstream's order, over one dashboard; each finding named by its rule
and worded as upstream words it ("Dashboard 't', panel 'p', target idx '0' ...")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from devtools.dashboard_lint import rules, targets
from devtools.dashboard_lint.model import Dashboard, Panel, Target, read_dashboard
from devtools.dashboard_lint.rules import Found, Severity


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    message: str


def lint(dashboard: Mapping[str, Any], strict: bool = False) -> list[Finding]:
    """Every finding of every rule. `strict` reports warnings as errors: upstream's --strict
    fails on a warning as on an error. Raises DashboardError for a dashboard upstream cannot
    read."""
    d = read_dashboard(dashboard)
    panels = d.all_panels()
    found = []
    for name, dashboard_rule in DASHBOARD_RULES:
        found += [Finding(name, severity, f"Dashboard '{d.title}' {text}")
                  for severity, text in dashboard_rule(d)]
    for name, panel_rule in PANEL_RULES:
        found += [Finding(name, severity, f"{_panel_name(d, p)} {text}")
                  for p in panels for severity, text in panel_rule(d, p)]
    for name, target_rule in TARGET_RULES:
        found += [Finding(name, severity,
                          f"Dashboard '{d.title}', panel '{p.title}', target idx '{t.idx}' {text}")
                  for p in panels for t in p.targets or ()
                  for severity, text in target_rule(d, p, t)]
    for name, dashboard_rule in LAST_RULES:
        found += [Finding(name, severity, f"Dashboard '{d.title}' {text}")
                  for severity, text in dashboard_rule(d)]
    return [replace(f, severity="error") for f in found] if strict else found


def _panel_name(d: Dashboard, p: Panel) -> str:
    if not p.title:
        return f"Dashboard '{d.title}', panel with id '{p.id}'"
    return f"Dashboard '{d.title}', panel '{p.title}'"


DASHBOARD_RULES: tuple[tuple[str, Callable[[Dashboard], Found]], ...] = (
    ("template-datasource-rule", rules.template_datasource),
    ("template-job-rule", rules.required_template("job")),
    ("template-instance-rule", rules.required_template("instance")),
    ("template-label-promql-rule", rules.template_label_promql),
    ("template-on-time-change-reload-rule", rules.template_on_time_change_reload),
)
PANEL_RULES: tuple[tuple[str, Callable[[Dashboard, Panel], Found]], ...] = (
    ("panel-datasource-rule", rules.panel_datasource),
    ("panel-title-description-rule", rules.panel_title_description),
    ("panel-units-rule", rules.panel_units),
    ("panel-no-targets-rule", rules.panel_no_targets),
)
TARGET_RULES: tuple[tuple[str, Callable[[Dashboard, Panel, Target], Found]], ...] = (
    ("target-logql-rule", targets.target_logql),
    ("target-promql-rule", targets.target_promql),
    ("target-rate-interval-rule", targets.target_rate_interval),
    ("target-job-rule", targets.required_matcher("job")),
    ("target-instance-rule", targets.required_matcher("instance")),
    ("target-counter-agg-rule", targets.target_counter_agg),
)
LAST_RULES: tuple[tuple[str, Callable[[Dashboard], Found]], ...] = (
    ("uneditable-dashboard", rules.uneditable),
)
RULE_NAMES = tuple(name for table in (DASHBOARD_RULES, PANEL_RULES, TARGET_RULES, LAST_RULES)
                   for name, _ in table)
