"""The pod specs inside an object: each object and container checked once however often a YAML
alias names it, and the work of one input bounded whatever its aliases multiply."""

from __future__ import annotations

from typing import Any

import pytest

import gpu_auditor.admission.objects as objects
from gpu_auditor.admission.findings import MAX_WORK, Budget
from gpu_auditor.admission.objects import MAX_OBJECT_FINDINGS, OVER_BUDGET, check_object

pytestmark = pytest.mark.unit

BAD = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segment:True"}]


def pod(name: str = "p", *containers: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [{"name": "c", "env": BAD}]}}


def listing(*items: Any) -> dict[str, Any]:
    return {"kind": "List", "items": list(items)}


@pytest.fixture
def checked_containers(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every container handed to check_container (the work counter)."""
    seen: list[object] = []
    real = objects.check_container

    def counting(container: Any, budget: Any = None) -> Any:
        seen.append(container)
        return real(container, budget)

    monkeypatch.setattr(objects, "check_container", counting)
    return seen


def test_one_pod_named_64000_times_by_aliases_is_checked_once(
    checked_containers: list[object]
) -> None:
    """The shape a 1.4 KB file's aliases make (Lists of Lists of one pod, 40 wide): 64,000
    pods, 12.4 s and 16 MB of output before."""
    p = pod()
    l1 = listing(*[p] * 40)
    l2 = listing(*[l1] * 40)
    l3 = listing(*[l2] * 40)
    assert len(list(check_object(l3))) == 1
    assert len(checked_containers) == 1


def test_equal_but_distinct_objects_are_each_checked(checked_containers: list[object]) -> None:
    found = list(check_object(listing(pod("a"), pod("a"), listing(pod("b")))))
    assert [c.name for c in found] == ["a", "a", "b"] and len(checked_containers) == 3


def test_one_items_list_shared_by_many_lists_is_walked_once(
    checked_containers: list[object]
) -> None:
    items = [pod(f"p{i}") for i in range(10)]
    shared = [{"kind": "List", "items": items} for _ in range(1000)]
    assert len(list(check_object(listing(*shared)))) == 10
    assert len(checked_containers) == 10


def test_a_container_named_again_is_checked_once_and_reported_each_time(
    checked_containers: list[object]
) -> None:
    c = {"name": "c", "env": BAD}
    [found] = check_object(pod("p", *[c] * 5))
    assert len(found.findings) == 5 and len(checked_containers) == 1


def test_findings_of_one_object_stop_at_the_bound_and_name_the_containers_left() -> None:
    many = ",".join(f"k{i}:1" for i in range(20))  # 8 findings a container
    [found] = check_object(pod("p", *[{"name": f"c{i}", "env": [
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": many}]} for i in range(20)]))
    assert len(found.findings) == MAX_OBJECT_FINDINGS + 1
    assert found.findings[-1].kind == "not-checked"
    assert found.findings[-1].message == "12 containers after 64 findings not checked"


def test_distinct_containers_sharing_one_long_env_list_stop_at_the_work_bound(
    checked_containers: list[object]
) -> None:
    """A YAML alias gives 1,000 containers one 100,000-entry env list: 10**8 entries to read
    from a file of about 2 MB. The budget stops it after about MAX_WORK of them."""
    env = [{"name": f"V{i}", "value": "x"} for i in range(100_000)] + BAD
    pods = [pod(f"p{i}", {"name": "c", "env": env}) for i in range(1000)]
    budget = Budget()
    found = list(check_object(listing(*pods), budget))
    assert budget.spent
    assert len(checked_containers) == MAX_WORK // 100_001 + 1 < 1000
    assert found[-1].findings[-1].message == OVER_BUDGET
    assert list(check_object(pod(), budget)) == []  # the rest of the input: not checked


def test_a_fresh_budget_does_not_stop_an_ordinary_input() -> None:
    budget = Budget()
    assert len(list(check_object(listing(*[pod(f"p{i}") for i in range(2000)]), budget))) \
        == 2000
    assert not budget.spent


class Bomb(list):  # type: ignore[type-arg]
    """A YAML alias bomb's stand-in: a value whose text must never be taken."""

    def __str__(self) -> str:
        raise AssertionError("str() of a tenant's non-string value")

    __repr__ = __str__


def test_a_kind_that_is_not_a_string_is_no_kind() -> None:
    """`kind: *a7` (10**8 elements from 410 bytes of YAML) was str()-ed: 31.6 s."""
    assert list(check_object({"kind": Bomb(), "spec": {"containers": []}})) == []
    assert list(check_object({"kind": Bomb(), "items": [pod()]})) == []
