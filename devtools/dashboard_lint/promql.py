"""PromQL for the rules: a query parsed (variables expanded first), its nodes walked with their
ancestors, a selector printed as Prometheus prints it.

The parser is the `promql-parser` package (Rust, its own port of Prometheus' grammar) where
upstream links Prometheus' Go parser. Where the two are known to differ, this module brings the
Rust one to the Go one's answers:
- a duration's number must fit 32 bits in the Rust lexer (a longer one wraps round), and the
  sample value of `$__rate_interval` (8869990787ms) does not: such a duration is rewritten in
  days, hours, minutes, seconds and milliseconds (the same length) before parsing, and one
  past Prometheus' longest (about 292 years) is an error, as in Prometheus;
- experimental functions (and `limitk`, `limit_ratio`) are refused, as Prometheus refuses them
  unless a feature flag enables them;
- `or` between matcher groups inside braces is a Rust-only extension: refused.
Error texts are the Rust parser's, not Prometheus'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta

import promql_parser as pp

from devtools.dashboard_lint.model import Template
from devtools.dashboard_lint.variables import RATE_INTERVAL_MS, ExpansionError, expand

Node = pp.Expr
Visit = Callable[[Node, tuple[Node, ...]], "str | None"]
"""Called with a node and its ancestors (the root first); a string stops the walk as an error."""

RATE_INTERVAL = timedelta(milliseconds=RATE_INTERVAL_MS)
"""The range `[$__rate_interval]` parses to."""
_U32 = 2**32 - 1
_DURATION = re.compile(r"(?<![\w.])(?:\d+(?:ms|[smhdwy]))+(?![\w.])")
_PART = re.compile(r"(\d+)(ms|[smhdwy])")
_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_MAX_MS = (2**63 - 1) // 10**6
"""Prometheus' longest duration (a Go time.Duration), in milliseconds."""
_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
       "w": 7 * 86_400_000, "y": 365 * 86_400_000}
_EXPERIMENTAL_AGGREGATIONS = ("limitk", "limit_ratio")
_OPS = ((pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"),
        (pp.MatchOp.NotRe, "!~"))
"""Pairs, not a dict: the binding's MatchOp values cannot be hashed."""


class PromQLError(ValueError):
    """The query does not parse (or a variable in it does not expand)."""


def parse(expr: str, templates: Sequence[Template]) -> Node:
    """A target's or variable's query, its variables expanded, parsed."""
    try:
        text = expand(expr, templates)
    except ExpansionError as e:
        raise PromQLError(f"could not expand variables: {e}") from None
    return parse_expanded(text)


def parse_expanded(text: str) -> Node:
    try:
        node = pp.parse(_short_durations(text))
    except ValueError as e:
        raise PromQLError(str(e)) from None
    _refuse_non_prometheus(node)
    return node


def parses(text: str) -> bool:
    try:
        parse_expanded(text)
    except PromQLError:
        return False
    return True


def walk(node: Node, visit: Visit, parents: tuple[Node, ...] = ()) -> str | None:
    """Depth first, a node before its children, in Prometheus' order of children; the first
    error ends the walk."""
    error = visit(node, parents)
    if error is not None:
        return error
    for child in children(node):
        error = walk(child, visit, (*parents, node))
        if error is not None:
            return error
    return None


def children(node: Node) -> list[Node]:
    if isinstance(node, pp.AggregateExpr):
        return [n for n in (node.expr, node.param) if isinstance(n, pp.Expr)]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.Call):
        return [arg for arg in node.args if isinstance(arg, pp.Expr)]
    if isinstance(node, pp.SubqueryExpr | pp.ParenExpr | pp.UnaryExpr):
        return [node.expr]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def vector_selectors(node: Node) -> Iterator[pp.VectorSelector]:
    if isinstance(node, pp.VectorSelector):
        yield node
    for child in children(node):
        yield from vector_selectors(child)


def matcher_op(matcher: pp.Matcher) -> str:
    return next(text for op, text in _OPS if matcher.op == op)


def selector_text(selector: pp.VectorSelector) -> str:
    """As Prometheus prints a vector selector: name, matchers sorted in braces, @, offset."""
    labels = sorted(f"{m.name}{matcher_op(m)}{_go_quote(m.value)}"
                    for m in selector.matchers.matchers
                    if not (m.name == "__name__" and m.op == pp.MatchOp.Equal
                            and m.value == selector.name and m.value))
    text = (selector.name or "") + ("{" + ",".join(labels) + "}" if labels else "")
    at = selector.at
    if at is not None:
        if at.type == pp.AtModifierType.Start:
            text += " @ start()"
        elif at.type == pp.AtModifierType.End:
            text += " @ end()"
        elif at.at is not None:
            text += f" @ {at.at.timestamp():.3f}"
    offset = selector.offset
    if offset:
        text += (" offset -" + duration_text(-offset) if offset < timedelta(0)
                 else " offset " + duration_text(offset))
    return text


def duration_text(duration: timedelta) -> str:
    """Prometheus' way: 90d rather than 12w6d (years and weeks only when exact)."""
    ms = duration // timedelta(milliseconds=1)
    if ms == 0:
        return "0s"
    text = ""
    for unit, exact in (("y", True), ("w", True), ("d", False), ("h", False), ("m", False),
                        ("s", False), ("ms", False)):
        size = _MS[unit]
        if (exact and ms % size) or ms < size:
            continue
        text += f"{ms // size}{unit}"
        ms %= size
    return text


def _short_durations(text: str) -> str:
    """Durations with a number past 2^32-1 rewritten in units small enough for the Rust lexer
    (which would wrap them round); quoted strings are left alone."""
    def fix(m: re.Match[str]) -> str:
        parts = [(int(n), unit) for n, unit in _PART.findall(m[0])]
        ms = sum(n * _MS[unit] for n, unit in parts)
        if ms > _MAX_MS:
            raise PromQLError(f"duration out of range: {m[0]}")
        in_order = [_UNITS.index(u) for _, u in parts] == sorted({_UNITS.index(u)
                                                                  for _, u in parts})
        if all(n <= _U32 for n, _ in parts) or not in_order:
            return m[0]  # fine as it is, or not a duration Prometheus reads either
        short = []
        for unit in ("d", "h", "m", "s", "ms"):
            if ms >= _MS[unit]:
                short.append(f"{ms // _MS[unit]}{unit}")
                ms %= _MS[unit]
        return "".join(short)
    return "".join(piece if quoted else _DURATION.sub(fix, piece)
                   for piece, quoted in _split_quoted(text))


def _split_quoted(text: str) -> Iterator[tuple[str, bool]]:
    """The text cut into runs outside and inside PromQL strings ("...", '...', `...`)."""
    start = i = 0
    while i < len(text):
        quote = text[i]
        if quote not in "\"'`":
            i += 1
            continue
        yield text[start:i], False
        end = i + 1
        while end < len(text) and text[end] != quote:
            end += 2 if text[end] == "\\" and quote != "`" else 1
        end = min(end + 1, len(text))
        yield text[i:end], True
        start = i = end
    yield text[start:], False


def _refuse_non_prometheus(node: Node) -> None:
    def visit(n: Node, _: tuple[Node, ...]) -> str | None:
        if isinstance(n, pp.Call) and n.func.experimental:
            return f'function "{n.func.name}" is not enabled (experimental in Prometheus)'
        if isinstance(n, pp.AggregateExpr) and str(n.op) in _EXPERIMENTAL_AGGREGATIONS:
            return f"{n.op}() is experimental in Prometheus and not enabled"
        if isinstance(n, pp.VectorSelector) and n.matchers.or_matchers:
            return "'or' between label matchers is not PromQL"
        return None
    error = walk(node, visit)
    if error is not None:
        raise PromQLError(error)


def _go_quote(value: str) -> str:
    """Near enough to Go's strconv.Quote for label values: JSON's escapes, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False)


def top_level_comma(text: str) -> int | None:
    """Where the first comma outside brackets and strings is, if anywhere."""
    depth = offset = 0
    for piece, quoted in _split_quoted(text):
        if not quoted:
            for i, char in enumerate(piece):
                if char in "([{":
                    depth += 1
                elif char in ")]}":
                    depth -= 1
                elif char == "," and depth == 0:
                    return offset + i
        offset += len(piece)
    return None
