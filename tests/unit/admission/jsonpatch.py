"""A minimal RFC 6902 applier (add, replace) for checking the injection's patches in tests."""

from __future__ import annotations

import copy
from typing import Any


def apply(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "add" and isinstance(target, list):
            if last == "-":
                target.append(op["value"])
            else:
                target.insert(int(last), op["value"])
        elif op["op"] == "add":
            assert last not in target, f"add over an existing member {op['path']}"
            target[last] = op["value"]
        elif op["op"] == "replace":
            key: Any = int(last) if isinstance(target, list) else last
            assert isinstance(target, list) or key in target
            target[key] = op["value"]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return doc
