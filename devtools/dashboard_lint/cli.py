"""`python -m devtools.dashboard_lint [--strict] FILE...`: findings one per line, grouped by
rule as upstream groups them; exit 0 without an error, 1 with one, 2 when a file is not a
dashboard that can be linted (unreadable, not JSON, not an object, wrong types)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devtools.dashboard_lint.model import DashboardError, json_kind
from devtools.dashboard_lint.runner import Finding, lint

BAD_INPUT = 2


class InputError(Exception):
    """A file that cannot be linted; the message says why."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.dashboard_lint",
        description="Grafana dashboard-linter's rules over dashboard JSON files ('-': stdin).")
    parser.add_argument("--strict", action="store_true",
                        help="report warnings as errors (fail on them)")
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    status = 0
    for name in args.files:
        try:
            findings = lint(read(name), strict=args.strict)
        except (InputError, DashboardError) as e:
            print(f"{name}: {e}", file=sys.stderr)
            status = BAD_INPUT
            continue
        for finding in sorted(findings, key=lambda f: f.rule):
            print(format_finding(finding))
        if any(f.severity == "error" for f in findings):
            status = max(status, 1)
    return status


def format_finding(finding: Finding) -> str:
    return f"[{finding.severity}] {finding.rule}: {finding.message}"


def read(name: str) -> dict[str, Any]:
    """The dashboard object of a file, or InputError."""
    if name == "-":
        text = sys.stdin.read()
    else:
        path = Path(name)
        if (path.parent / ".lint").exists():
            raise InputError(f"{path.parent / '.lint'} exists: upstream would apply its "
                             "exclusions and warnings, which this port does not read")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not JSON: {e}") from None
    if not isinstance(data, dict):
        raise InputError(f"not a dashboard: the JSON is {json_kind(data)}, not an object")
    return data
