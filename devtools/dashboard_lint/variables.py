"""Grafana variables in a query replaced by sample values, so the query parses as PromQL.

Outside double-quoted strings, `$name`, `${name}`, `${name:format}`, `${name:kind:format}` and
`[[name]]` are replaced: Grafana's global variables by fixed, unlikely values (so a rule can tell
`$__rate_interval` from a range someone typed), a dashboard variable by its current value or
else its first option (expanded again, without itself), anything else by its own name in the
requested format. Inside double quotes nothing changes: `job=~"$job"` keeps the text `$job`,
which is what the job and instance rules look for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

from devtools.dashboard_lint.model import DashboardError, Template, go_value

RATE_INTERVAL_MS = 8869990787
"""What `$__rate_interval` becomes (milliseconds): a range nobody writes by hand."""
AUTO_INTERVAL = "10s"

_SAMPLE_TIME = datetime(2020, 7, 13, 20, 19, 9, 254000, tzinfo=UTC)
GLOBALS: Mapping[str, str | int | datetime] = {
    "__rate_interval": f"{RATE_INTERVAL_MS}ms",
    "__interval": "4867856611ms",
    "__interval_ms": "7781188786",
    "__range_ms": "6737667980",
    "__range_s": "9397795485",
    "__range": "6069770749ms",
    "__dashboard": "AwREbnft",
    "__from": _SAMPLE_TIME,
    "__to": _SAMPLE_TIME,
    "__name": "name",
    "__org": 42,
    "__org.name": "orgname",
    "__user.id": 42,
    "__user.login": "user",
    "__user.email": "user@test.com",
    "timeFilter": "time > now() - 7d",
    "__timeFilter": "time > now() - 7d",
    "__auto": "12345ms",
}
"""Upstream's sample values, kept exactly: the rules compare against them."""

_VARIABLE = re.compile(r"\$([0-9A-Za-z_]+)|\$\{([^}]+)\}|\[\[([^\[\]]+)\]\]")


class ExpansionError(ValueError):
    """A variable that cannot be expanded (an unknown format, a value of the wrong type)."""


def expand(expr: str, templates: Sequence[Template]) -> str:
    """The query with its variables replaced; the double-quoted parts are left as they are."""
    parts = expr.split('"')
    for i in range(0, len(parts), 2):
        parts[i] = _VARIABLE.sub(
            lambda m: _sample(next(g for g in m.groups() if g is not None), templates), parts[i])
    return '"'.join(parts)


def _sample(spec: str, templates: Sequence[Template]) -> str:
    fields = spec.split(":")
    if len(fields) > 3:
        raise ExpansionError(f"unknown variable format: {spec}")
    name = fields[0]
    kind = fields[1] if len(fields) == 3 else ""
    form = fields[-1] if len(fields) > 1 else ""
    if name in GLOBALS:
        return _formatted(name, GLOBALS[name], kind, form)
    if name.startswith("__auto_interval"):
        return AUTO_INTERVAL
    others = [t for t in templates if t.name != name]
    for template in templates:
        if template.name != name:
            continue
        current = _value(template.current)
        if current:
            return expand(current, others)
        if template.options:
            return expand(_value(template.options[0]), others)
    return _formatted(name, name, kind, form)


def _value(raw: Mapping[str, Any]) -> str:
    """A variable's `value` (the first one of a multi-value); its `text` must be well-formed
    too, as upstream reads both."""
    _field(raw, "text")
    return _field(raw, "value")


def _field(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key, "")
    if isinstance(value, list):
        if not value or not isinstance(value[0], str):
            raise DashboardError(f"a variable's {key} {go_value(value)} does not start with a "
                                 "string (upstream's linter crashes on it)")
        return value[0]
    if not isinstance(value, str):
        raise ExpansionError(f"invalid type for field '{key}': {go_value(value)}")
    return value


def _formatted(name: str, value: str | int | datetime, kind: str, form: str) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return _time(value, kind, form)
    # a list variable is sampled as three copies of its value, joined as the format says
    copies = [value] * 3
    joined = {
        "csv": ",".join(copies),
        "doublequote": '"' + '","'.join(copies) + '"',
        "glob": "{" + ",".join(copies) + "}",
        "json": _go_json(copies),
        "lucene": '("' + '" OR "'.join(copies) + '")',
        "percentencode": quote_plus(",".join(copies), safe=""),
        "pipe": "|".join(copies),
        "raw": ",".join(copies),
        "regex": "|".join(copies),
        "singlequote": "'" + "','".join(copies) + "'",
        "sqlstring": "'" + "','".join(copies) + "'",
        "text": " + ".join(copies),
        "queryparam": "&".join(f"{quote_plus('var-' + name, safe='')}={quote_plus(c, safe='')}"
                               for c in copies),
    }
    return joined.get(form, value)


def _time(value: datetime, kind: str, form: str) -> str:
    iso = value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "date":
        if form == "seconds":
            return str(int(value.timestamp()))
        if form == "iso":
            return iso
        raise ExpansionError(f"unsupported momentjs time format: {form}")
    return iso if form == "date" else str(round(value.timestamp() * 1000))


def _go_json(values: list[str]) -> str:
    """As Go's encoder writes it: compact, UTF-8 kept, <, > and & escaped."""
    text = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text
