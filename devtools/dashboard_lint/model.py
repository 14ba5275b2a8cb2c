"""The dashboard as the linter reads it: typed once, from the JSON, with upstream's strictness.

Upstream decodes a dashboard into Go structs, so a field of the wrong JSON type (a number where
a title belongs, a list where `current` belongs) makes the whole dashboard unreadable, while
`null` or a missing key reads as the zero value ("", 0, false, no list). Unknown keys are
ignored. Only the fields some rule reads are kept; `__inputs` and `annotations` are checked for
their types (upstream decodes them) and dropped.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

INT64 = 2**63


class DashboardError(ValueError):
    """Input upstream could not lint either: bad JSON types, or a value its code crashes on."""


@dataclass(frozen=True)
class Datasource:
    uid: str
    type: str


class DatasourceError(ValueError):
    """A datasource reference of a shape upstream rejects (the message is upstream's)."""


@dataclass(frozen=True)
class Template:
    name: str
    label: str
    type: str
    query: str
    """The query text: `query` itself or its `query.query`; "" for adhoc and custom ones."""
    datasource: object
    multi: bool
    all_value: str
    current: Mapping[str, Any]
    options: tuple[Mapping[str, Any], ...]
    refresh: int


@dataclass(frozen=True)
class Target:
    idx: int
    """Its place in the panel's targets: how messages name it."""
    datasource: object
    expr: str
    panel_id: int
    hide: bool


@dataclass(frozen=True)
class OverrideProperty:
    id: str
    value: object


@dataclass(frozen=True)
class FieldConfig:
    unit: str
    mappings: object
    """`defaults.mappings` as written; None when absent or null."""
    overrides: tuple[tuple[OverrideProperty, ...], ...]


@dataclass(frozen=True)
class Panel:
    id: int
    title: str
    description: str
    type: str
    datasource: object
    targets: tuple[Target, ...] | None
    """None when the key is absent or null; an empty list is a list (upstream tells them apart)."""
    panels: tuple[Panel, ...]
    field_config: FieldConfig | None
    options: object

    def with_nested(self) -> Iterator[Panel]:
        """This panel, then the panels inside it (a collapsed row's), depth first."""
        yield self
        for panel in self.panels:
            yield from panel.with_nested()


@dataclass(frozen=True)
class Dashboard:
    title: str
    templates: tuple[Template, ...]
    row_panels: tuple[Panel, ...]
    """The panels of the old top-level `rows` list."""
    panels: tuple[Panel, ...]
    editable: bool

    def all_panels(self) -> list[Panel]:
        """Every panel the rules look at: the old rows' first, then `panels`, nested ones too."""
        return [nested for panel in (*self.row_panels, *self.panels)
                for nested in panel.with_nested()]

    def templates_of_type(self, kind: str) -> list[Template]:
        """Templates of a type, compared without case (as upstream's lookup by type does)."""
        return [t for t in self.templates if t.type.casefold() == kind.casefold()]

    def template_datasource(self) -> Template | None:
        """The first template of type exactly "datasource": the one whose query (prometheus,
        loki...) says which query rules apply."""
        return next((t for t in self.templates if t.type == "datasource"), None)

    def template_named(self, name: str) -> Template | None:
        return next((t for t in self.templates if t.name == name), None)


def datasource_of(raw: object) -> Datasource:
    """A panel's, target's or template's datasource: a plain uid string or a {uid, type} object."""
    if raw is None:
        return Datasource("", "")
    if isinstance(raw, str):
        return Datasource(raw, "")
    if isinstance(raw, dict):
        if "uid" not in raw:
            raise DatasourceError("invalid type for field 'datasource': missing uid field")
        if not isinstance(raw["uid"], str):
            raise DatasourceError("invalid type for field 'datasource': "
                                  "invalid uid field type, should be string")
        kind = raw.get("type", "")
        if not isinstance(kind, str):
            raise DatasourceError("invalid type for field 'datasource': "
                                  "invalid type field type, should be string")
        return Datasource(raw["uid"], kind)
    raise DatasourceError(f"invalid type for field 'datasource': {go_value(raw)}")


def read_dashboard(raw: Mapping[str, Any]) -> Dashboard:
    """The typed dashboard; a Kubernetes-shaped one (`apiVersion`, `spec`) is read from its spec."""
    raw = _unwrap_spec(raw)
    for i, item in enumerate(_objects(raw, "__inputs", "dashboard")):
        for key in ("name", "label", "type", "pluginId"):
            _str(item, key, f"__inputs[{i}]")
    for i, item in enumerate(_objects(_object(raw, "annotations", "dashboard"), "list",
                                      "annotations")):
        _str(item, "name", f"annotations.list[{i}]")
    templating = _object(raw, "templating", "dashboard")
    rows = [_panels(row, f"rows[{i}]") for i, row in enumerate(_objects(raw, "rows", "dashboard"))]
    return Dashboard(
        title=_str(raw, "title", "dashboard"),
        templates=tuple(_template(item, f"templating.list[{i}]")
                        for i, item in enumerate(_objects(templating, "list", "templating"))),
        row_panels=tuple(panel for row in rows for panel in row),
        panels=_panels(raw, "dashboard"),
        editable=_bool(raw, "editable", "dashboard"),
    )


def _unwrap_spec(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Upstream decodes `spec` over the outer object, as long as `apiVersion` is v0* or v1*."""
    if "spec" not in raw:
        return raw
    api_version = _str(raw, "apiVersion", "dashboard")
    if api_version and not api_version.startswith(("v0", "v1")):
        raise DashboardError("unsupported apiVersion")
    spec = raw["spec"]
    if spec is None:
        return raw
    if not isinstance(spec, dict):
        raise DashboardError(f"spec: expected an object, got {json_kind(spec)}")
    merged = dict(raw)
    for key, value in spec.items():
        inner = merged.get(key)
        if key in ("templating", "annotations") and isinstance(value, dict) \
                and isinstance(inner, dict):
            merged[key] = {**inner, **value}  # a struct decoded twice keeps what spec leaves out
        else:
            merged[key] = value
    return merged


def _template(raw: Mapping[str, Any], where: str) -> Template:
    kind = _str(raw, "type", where)
    return Template(
        name=_str(raw, "name", where),
        label=_str(raw, "label", where),
        type=kind,
        query="" if kind in ("adhoc", "custom") else _template_query(raw.get("query"), where),
        datasource=raw.get("datasource"),
        multi=_bool(raw, "multi", where),
        all_value=_str(raw, "allValue", where),
        current=_object(raw, "current", where),
        options=tuple(_objects(raw, "options", where)),
        refresh=_int(raw, "refresh", where),
    )


def _template_query(query: object, where: str) -> str:
    if isinstance(query, str):
        return query
    if isinstance(query, dict):
        inner = query.get("query", "")
        if not isinstance(inner, str):
            raise DashboardError(f"{where}.query.query: expected a string, got "
                                 f"{json_kind(inner)} (upstream's linter crashes on it)")
        return inner
    raise DashboardError(f"{where}: invalid type for field 'query': {go_value(query)}")


def _panels(raw: Mapping[str, Any], where: str) -> tuple[Panel, ...]:
    return tuple(_panel(item, f"{where}.panels[{i}]")
                 for i, item in enumerate(_objects(raw, "panels", where)))


def _panel(raw: Mapping[str, Any], where: str) -> Panel:
    targets = _list(raw, "targets", where)
    return Panel(
        id=_int(raw, "id", where),
        title=_str(raw, "title", where),
        description=_str(raw, "description", where),
        type=_str(raw, "type", where),
        datasource=raw.get("datasource"),
        targets=None if targets is None else tuple(
            _target(_as_object(item, f"{where}.targets[{i}]"), i, f"{where}.targets[{i}]")
            for i, item in enumerate(targets)),
        panels=_panels(raw, where),
        field_config=_field_config(raw, where),
        options=raw.get("options"),
    )


def _target(raw: Mapping[str, Any], idx: int, where: str) -> Target:
    _str(raw, "refId", where)
    return Target(idx=idx, datasource=raw.get("datasource"), expr=_str(raw, "expr", where),
                  panel_id=_int(raw, "panelId", where), hide=_bool(raw, "hide", where))


def _field_config(raw: Mapping[str, Any], where: str) -> FieldConfig | None:
    if raw.get("fieldConfig") is None:
        return None
    config = _object(raw, "fieldConfig", where)
    defaults = _object(config, "defaults", f"{where}.fieldConfig")
    overrides = []
    for i, override in enumerate(_objects(config, "overrides", f"{where}.fieldConfig")):
        at = f"{where}.fieldConfig.overrides[{i}]"
        overrides.append(tuple(
            OverrideProperty(_str(prop, "id", f"{at}.properties[{j}]"), prop.get("value"))
            for j, prop in enumerate(_objects(override, "properties", at))))
    return FieldConfig(unit=_str(defaults, "unit", f"{where}.fieldConfig.defaults"),
                       mappings=defaults.get("mappings"), overrides=tuple(overrides))


def _str(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DashboardError(f"{where}.{key}: expected a string, got {json_kind(value)}")
    return value


def _bool(raw: Mapping[str, Any], key: str, where: str) -> bool:
    value = raw.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise DashboardError(f"{where}.{key}: expected true or false, got {json_kind(value)}")
    return value


def _int(raw: Mapping[str, Any], key: str, where: str) -> int:
    value = raw.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value < INT64:
        raise DashboardError(f"{where}.{key}: expected an integer, got {json_kind(value)}")
    return value


def _list(raw: Mapping[str, Any], key: str, where: str) -> list[Any] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise DashboardError(f"{where}.{key}: expected a list, got {json_kind(value)}")
    return value


def _object(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    return _as_object(raw.get(key), f"{where}.{key}")


def _objects(raw: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    """A list of objects; a null item reads as an empty object (Go's zero value)."""
    return [_as_object(item, f"{where}.{key}[{i}]")
            for i, item in enumerate(_list(raw, key, where) or [])]


def _as_object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DashboardError(f"{where}: expected an object, got {json_kind(value)}")
    return value


def json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def go_value(value: object) -> str:
    """A decoded JSON value as Go's %v prints it (upstream's messages embed some)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(value)
    if isinstance(value, list):
        return "[" + " ".join(go_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_value(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def _go_float(value: float) -> str:
    """The shortest digits that round-trip, in exponent form below 1e-4 and from 1e21 on."""
    number = float(value) if abs(value) < 1e308 else math.inf * (1 if value > 0 else -1)
    if not math.isfinite(number):
        return "NaN" if math.isnan(number) else ("+Inf" if number > 0 else "-Inf")
    sign, digits, exponent = decimal.Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    magnitude = len(text) - 1 + exponent
    prefix = "-" if sign else ""
    if number == 0:
        return prefix + "0"
    if magnitude < -4 or magnitude >= 21:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if magnitude < 0 else '+'}{abs(magnitude):02d}"
    return prefix + format(decimal.Decimal(repr(abs(number))).normalize(), "f")
