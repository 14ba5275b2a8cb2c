"""What one webhook process gives each client (`webhook.limits`): the fair gate to the workers,
the byte pools, the parse-cost bound."""

from __future__ import annotations

import asyncio
import json
import tracemalloc

import pytest

from gpu_auditor.webhook.limits import MAX_PARSE_COST, FairGate, Pool, Rate, parse_cost

from .attacks import bomb, heavy_review, review

pytestmark = pytest.mark.unit


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_the_gate_serves_waiting_clients_in_turn_not_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        gate = FairGate(1, per_client=1)
        order: list[str] = []
        await gate.acquire("first")

        async def one(client: str) -> None:
            await gate.acquire(client)
            order.append(client)
            await asyncio.sleep(0)
            gate.release(client)

        tasks = [asyncio.create_task(one(c)) for c in ["a"] * 5 + ["b", "c"]]
        await asyncio.sleep(0)
        gate.release("first")
        await asyncio.gather(*tasks)
        return order

    assert run(scenario()) == ["a", "b", "c", "a", "a", "a", "a"]


def test_one_client_never_holds_every_worker() -> None:
    async def scenario() -> tuple[int, bool]:
        gate = FairGate(2)  # per client: 1
        await gate.acquire("hostile")
        blocked = asyncio.create_task(gate.acquire("hostile"))
        await asyncio.sleep(0)
        await asyncio.wait_for(gate.acquire("good"), 1.0)  # the second worker is free
        return gate.free, blocked.done()

    assert run(scenario()) == (0, False)


def test_a_waiter_that_gives_up_leaves_no_slot_behind() -> None:
    async def scenario() -> int:
        gate = FairGate(1, per_client=1)
        await gate.acquire("a")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gate.acquire("b"), 0.01)
        gate.release("a")
        await asyncio.wait_for(gate.acquire("c"), 1.0)
        gate.release("c")
        return gate.free

    assert run(scenario()) == 1


def test_a_pool_gives_each_client_its_share_and_waits_for_room() -> None:
    async def scenario() -> tuple[bool, bool]:
        pool = Pool(total=10, per_client=6)
        await pool.take("a", 6)
        over_share = asyncio.create_task(pool.take("a", 1))
        await asyncio.sleep(0)
        await asyncio.wait_for(pool.take("b", 4), 1.0)  # room in the total, in b's share
        waited = not over_share.done()
        await pool.give("a", 6)
        await asyncio.wait_for(over_share, 1.0)
        return waited, pool.used == 5

    assert run(scenario()) == (True, True)
    with pytest.raises(ValueError):
        run(Pool(total=10, per_client=6).take("a", 7))


@pytest.mark.parametrize("body", [
    review(), heavy_review(), bomb(1 << 18), b"[" + b'"ab",' * 50_000 + b'"ab"]',
    b"[" + b"0.5," * 60_000 + b"1]", b"[" + b'{"a":{}},' * 30_000 + b"{}]",
    b"[" + b"1," * 100_000 + b"1]", json.dumps({"k" * 10: ["\u00e9" * 100] * 2000}).encode(),
], ids=["review", "heavy-review", "empty-dicts", "short-strings", "floats", "nested-dicts",
        "small-ints", "escaped-strings"])
def test_parse_cost_is_above_what_json_loads_allocates(body: bytes) -> None:
    tracemalloc.start()
    try:
        json.loads(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= parse_cost(body) <= 12 * peak + 4 * len(body)


def test_a_large_real_review_fits_the_parse_bound_and_a_bomb_of_its_size_does_not() -> None:
    big = review(containers=128)
    assert parse_cost(big) < MAX_PARSE_COST
    assert parse_cost(bomb(3 << 20)) > MAX_PARSE_COST


def test_a_clients_work_past_its_burst_waits_at_its_rate_and_no_one_elses_does() -> None:
    now = [0.0]
    rate = Rate(per_second=10, burst=20, clock=lambda: now[0])
    assert rate.delay("a", 15) == 0.0
    assert rate.delay("a", 15) == pytest.approx(1.0)  # 10 in debt at 10 a second
    assert rate.delay("b", 15) == 0.0  # another client's own bucket
    now[0] = 3.0  # a's debt paid, 20 back
    assert rate.delay("a", 20) == 0.0


def test_the_rate_forgets_clients_whose_bucket_is_full_again() -> None:
    now = [0.0]
    rate = Rate(per_second=1, burst=1, clock=lambda: now[0])
    for client in range(Rate.MAX_CLIENTS):
        rate.delay(client, 1)
    now[0] = 5.0
    rate.delay("new", 1)
    assert len(rate._buckets) == 1
