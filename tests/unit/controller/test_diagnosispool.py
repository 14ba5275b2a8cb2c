"""The diagnosis in worker processes: answers as the core would, and a worker that raises,
overruns its budget, dies or answers nonsense is a recorded failure, never a stuck operator.

These start real worker processes (`python -m gpu_auditor.controller.diagnosischild`); the stand-in
diagnoses are standard-library functions named as `module:function`, so nothing test-only has to
be importable in the worker.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_auditor.controller.diagnosispool import DiagnosisFailed, DiagnosisPool
from gpu_auditor.diagnosis import diagnose

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "oom" / "corpus"


@pytest.fixture
def pools() -> Iterator[list[DiagnosisPool]]:
    made: list[DiagnosisPool] = []
    yield made
    for pool in made:
        pool.close()


def _pool(pools: list[DiagnosisPool], **kw: object) -> DiagnosisPool:
    pool = DiagnosisPool(**kw)  # type: ignore[arg-type]
    pools.append(pool)
    return pool


def test_a_worker_answers_what_the_core_answers_and_is_kept(pools: list[DiagnosisPool]) -> None:
    pool = _pool(pools, size=1, budget=30)
    log = (FIXTURE / "frag_pinned_segments_fullgpu.log").read_bytes()
    first = pool.diagnose(log, alloc_conf="garbage_collection_threshold:0.6")
    again = pool.diagnose(log, alloc_conf="garbage_collection_threshold:0.6")
    assert first == again == diagnose(log, alloc_conf="garbage_collection_threshold:0.6")
    assert len(pool.pids()) == 1


def test_a_computation_past_the_budget_is_killed_and_the_next_one_gets_a_fresh_worker(
    pools: list[DiagnosisPool]
) -> None:
    # math.factorial of 10**7 holds the GIL in C for far longer than the 0.5 s budget: the
    # kind of stall a thread could only stop waiting for.
    pool = _pool(pools, size=1, budget=0.5, function="math:factorial")
    with pytest.raises(DiagnosisFailed, match="the diagnosis returned int"):
        pool.diagnose(5)  # type: ignore[arg-type]  # the worker is up (and kept)
    (stuck,) = pool.pids()
    with pytest.raises(DiagnosisFailed) as caught:
        pool.diagnose(10**7)  # type: ignore[arg-type]
    assert (caught.value.reason, caught.value.detail) == (
        "timeout", "no answer within the 0.5 s budget")
    assert pool.pids() == []
    with pytest.raises(ProcessLookupError):
        os.kill(stuck, 0)  # killed and reaped
    with pytest.raises(DiagnosisFailed, match="returned int"):
        pool.diagnose(5)  # type: ignore[arg-type]
    assert len(pool.pids()) == 1 and pool.pids() != [stuck]


def test_an_exception_in_the_diagnosis_is_reported_and_the_worker_kept(
    pools: list[DiagnosisPool]
) -> None:
    pool = _pool(pools, size=1, budget=30, function="json:loads")
    with pytest.raises(DiagnosisFailed) as caught:
        pool.diagnose(b"[" * 100_000 + b"x")
    assert caught.value.reason == "error"
    assert caught.value.detail.startswith(("RecursionError", "JSONDecodeError"))
    assert len(caught.value.detail) <= 200
    assert len(pool.pids()) == 1


def test_a_worker_that_dies_is_a_crash_and_is_replaced(pools: list[DiagnosisPool]) -> None:
    pool = _pool(pools, size=1, budget=30, function="os:_exit")
    with pytest.raises(DiagnosisFailed) as caught:
        pool.diagnose(3)  # type: ignore[arg-type]
    assert caught.value.reason == "crashed"
    assert caught.value.detail.endswith("exited (3)")
    assert pool.pids() == []


def test_an_answer_that_is_not_a_diagnosis_is_an_error(pools: list[DiagnosisPool]) -> None:
    pool = _pool(pools, size=1, budget=30, function="builtins:len")
    with pytest.raises(DiagnosisFailed) as caught:
        pool.diagnose(b"abc")
    assert (caught.value.reason, caught.value.detail) == (
        "error", "the diagnosis returned int")


def test_a_stuck_worker_does_not_block_the_other_and_close_ends_it(
    pools: list[DiagnosisPool]
) -> None:
    pool = _pool(pools, size=2, budget=600, function="math:factorial")
    results: list[str] = []

    def stuck() -> None:
        try:
            pool.diagnose(10**9)  # type: ignore[arg-type]
        except DiagnosisFailed as exc:
            results.append(exc.reason)

    thread = threading.Thread(target=stuck)
    thread.start()
    while not pool.pids():
        time.sleep(0.05)
    with pytest.raises(DiagnosisFailed, match="returned int"):  # answered, by the other worker
        pool.diagnose(10)  # type: ignore[arg-type]
    assert results == [] and len(pool.pids()) == 2
    pool.close()  # at operator shutdown: the stuck worker is killed, its caller told
    thread.join()
    assert results == ["crashed"] and pool.pids() == []
