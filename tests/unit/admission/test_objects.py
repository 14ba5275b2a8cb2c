"""The pod specs inside an object: each object and container checked once however often a YAML
alias names it, and the work of one input bounded whatever its aliases multiply."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.admission.objects import MAX_OBJECT_FINDINGS, check_object

pytestmark = pytest.mark.unit

BAD = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segment:True"}]


def pod(name: str = "p", *containers: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [{"name": "c", "env": BAD}]}}


def test_findings_of_one_object_stop_at_the_bound_and_name_the_containers_left() -> None:
    many = ",".join(f"k{i}:1" for i in range(20))  # 8 findings a container
    [found] = check_object(pod("p", *[{"name": f"c{i}", "env": [
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": many}]} for i in range(20)]))
    assert len(found.findings) == MAX_OBJECT_FINDINGS + 1
    assert found.findings[-1].kind == "not-checked"
    assert found.findings[-1].message == "12 containers after 64 findings not checked"


class Bomb(list):  # type: ignore[type-arg]
    """A YAML alias bomb's stand-in: a value whose text must never be taken."""

    def __str__(self) -> str:
        raise AssertionError("str() of a tenant's non-string value")

    __repr__ = __str__


def test_a_kind_that_is_not_a_string_is_no_kind() -> None:
    """`kind: *a7` (10**8 elements from 410 bytes of YAML) was str()-ed: 31.6 s."""
    assert list(check_object({"kind": Bomb(), "spec": {"containers": []}})) == []
    assert list(check_object({"kind": Bomb(), "items": [pod()]})) == []
