"""The pod specs inside an object: each object and container checked once however often a YAML
alias names it, and the work of one input bounded whatever its aliases multiply."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.admission.objects import check_object

pytestmark = pytest.mark.unit

BAD = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segment:True"}]


def pod(name: str = "p", *containers: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [{"name": "c", "env": BAD}]}}


class Bomb(list):  # type: ignore[type-arg]
    """A YAML alias bomb's stand-in: a value whose text must never be taken."""

    def __str__(self) -> str:
        raise AssertionError("str() of a tenant's non-string value")

    __repr__ = __str__


def test_a_kind_that_is_not_a_string_is_no_kind() -> None:
    """`kind: *a7` (10**8 elements from 410 bytes of YAML) was str()-ed: 31.6 s."""
    assert list(check_object({"kind": Bomb(), "spec": {"containers": []}})) == []
    assert list(check_object({"kind": Bomb(), "items": [pod()]})) == []
