"""Hand-written fixtures, one per message family and per kind (``tests/fixtures/oom/families``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_auditor.diagnosis import diagnose

from .diagnosis_helpers import FIXTURES

pytestmark = pytest.mark.unit

FAMILIES = FIXTURES / "families"
EXPECTED: dict[str, dict[str, Any]] = {
    name: want
    for name, want in json.loads((FAMILIES / "expected.json").read_text()).items()
    if not name.startswith("_")
}


def test_every_fixture_file_has_an_expectation() -> None:
    assert {p.name for p in FAMILIES.glob("*.log")} == set(EXPECTED)


@pytest.mark.parametrize(("name", "want"), sorted(EXPECTED.items()), ids=sorted(EXPECTED))
def test_fixture_gives_its_expected_diagnosis(name: str, want: dict[str, Any]) -> None:
    got = diagnose((FAMILIES / name).read_bytes()).to_json_dict()
    assert (got["detected"], got["framework"], got["kind"]) == (
        want["detected"],
        want["framework"],
        want["kind"],
    ), got["summary"]
    for kind in want.get("contributing", []):
        assert kind in got["contributing"]
    for key in ("oom_count", "torch_version_hint"):
        if key in want:
            assert got[key] == want[key]
    if "alloc_conf" in want:
        assert got["recommendation"]["alloc_conf"] == want["alloc_conf"]
    if got["detected"]:
        assert got["oom_count"] >= 1
        assert got["summary"].startswith(got["kind"] + ":")
    else:
        assert got["oom_count"] == 0
