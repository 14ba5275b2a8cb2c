"""Bounded JSON objects: fields that do not fit are named, not cut; numbers JSON cannot carry
become null."""

from __future__ import annotations

import json

import pytest

from gpu_auditor.controller import bounded

pytestmark = pytest.mark.unit


def test_evidence_fields_that_do_not_fit_are_named_not_cut() -> None:
    text = bounded.json_object([(f"f{i}", "z" * 1000) for i in range(10)], 5120,
                               string_limit=1024, list_limit=1536)
    value = json.loads(text)
    assert len(text) == 5089
    assert list(value) == ["f0", "f1", "f2", "f3", "f4", "leftOut"]
    assert value["leftOut"] == {"fields": ["f5", "f6", "f7", "f8", "f9"]}


def test_numbers_json_cannot_carry_become_null() -> None:
    text = bounded.json_object([("nan", float("nan")), ("inf", float("-inf")),
                                ("huge", 10**4000), ("ok", 2**63 - 1)], 5120,
                               string_limit=1024, list_limit=1536)
    assert json.loads(text) == {"nan": None, "inf": None, "huge": None, "ok": 2**63 - 1}
