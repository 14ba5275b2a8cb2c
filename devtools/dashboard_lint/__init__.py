"""Grafana's dashboard-linter rules, in Python: a dev tool the chart's tests run over the
chart's dashboard (`python -m devtools.dashboard_lint [--strict] FILE...`).

A port of github.com/grafana/dashboard-linter (Apache-2.0, its authors') at commit
6d38b915eed828c3164124eaf3b3ab6481f01e78, rewritten from its behaviour and tests rather than
translated line by line. The Go module can no longer be built here: the module proxy does not
serve that version, and it needs grafana/loki (AGPL) for its LogQL rules.

Rules (upstream's names; `lint` runs them in upstream's order):
  template-datasource-rule, template-job-rule, template-instance-rule,
  template-label-promql-rule, template-on-time-change-reload-rule, panel-datasource-rule,
  panel-title-description-rule, panel-units-rule, panel-no-targets-rule, target-promql-rule,
  target-rate-interval-rule, target-job-rule, target-instance-rule, target-counter-agg-rule,
  uneditable-dashboard.
Upstream's quirks are kept where a rule's answer depends on them: an empty `targets` list
counts as targets, any non-null `mappings` (even []) exempts a panel from the units rule, only
a `_total` selector without matchers is checked by the counter rule, the query rules apply
when the *first* datasource template's query is `prometheus`.

Left out, and what happens instead:
- LogQL (target-logql-rule, target-logql-auto-rule): they need Loki's parser. A target of a
  Loki dashboard or datasource is reported as "LogQL query not checked" (a warning under the
  name target-logql-rule, so an error with --strict), never passed in silence.
- The `.lint` configuration (exclusions, downgrades to warnings) and `--fix`: the CLI refuses
  a `.lint` file beside a dashboard rather than lint it differently from upstream.
- PromQL is parsed by the `promql-parser` package (Rust), not Prometheus' Go parser
  (promql.py says how the two are reconciled); parse error texts are the Rust parser's.
  Upstream's template-label-promql-rule accepts whatever Prometheus' parser returns an
  expression for, which includes the part before a syntax error and skips type checks; here
  the argument, or its part before the first top-level comma, must parse and type-check.
- Go reads JSON keys without regard to case ("Title" fills `title`); this port does not.
- Where upstream's Go code would crash (a unit override that is not a string, a `current`
  value that is an empty list), `lint` raises DashboardError.

Severity: upstream's warnings are the two label checks (datasource template label, job and
instance template labels); everything else is an error. Upstream's --strict makes the command
fail on a warning as on an error, and without it the command exits 0 whatever it found;
`lint(..., strict=True)` reports warnings as errors, and the CLI exits 1 on any error.
"""

from devtools.dashboard_lint.cli import main
from devtools.dashboard_lint.model import DashboardError
from devtools.dashboard_lint.runner import RULE_NAMES, Finding, lint

__all__ = ["RULE_NAMES", "DashboardError", "Finding", "lint", "main"]
