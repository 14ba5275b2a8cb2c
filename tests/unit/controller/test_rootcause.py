"""rootcause: which pod of a distributed job failed first, and whether that was an OOM."""

from __future__ import annotations

import datetime as dt

import pytest

from gpu_auditor.controller.rootcause import (
    TOLERANCE,
    WINDOW,
    Failure,
    Read,
    decide,
    incidents,
    verdicts,
)

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)


def failure(pod: str, seconds: float, read: Read, how: str = "", *, index: int | None = None,
            log_at: float | None = None, restart: int = 0) -> Failure:
    return Failure("ml", pod, f"uid-{pod}", "main", restart, T0 + dt.timedelta(seconds=seconds),
                   read, how or str(read),
                   log_at=None if log_at is None else T0 + dt.timedelta(seconds=log_at),
                   index=index)


def test_the_oom_that_came_first_is_the_root_and_the_nccl_timeouts_point_at_it() -> None:
    root = failure("w-3", 0, Read.OOM, "capacity", index=3)
    peers = [failure(f"w-{i}", 5, Read.CONSEQUENCE, "nccl-timeout", index=i)
             for i in range(16) if i != 3]
    (verdict,) = verdicts([*peers, root])
    assert verdict.root is root
    assert {f.pod for f in verdict.consequences} == {f.pod for f in peers}
    assert verdict.after_root(peers[0]) == dt.timedelta(seconds=5)


def test_a_job_whose_first_failure_is_not_an_oom_gets_no_root() -> None:
    first = failure("w-0", 0, Read.OTHER, "exit code 1")
    later_oom = failure("w-1", 30, Read.OOM, "capacity")
    (verdict,) = verdicts([later_oom, failure("w-2", 5, Read.CONSEQUENCE), first])
    assert verdict.root is None and verdict.first is first


def test_a_consequence_never_causes_but_one_long_before_the_oom_was_the_first_failure() -> None:
    early = failure("w-0", 0, Read.CONSEQUENCE, "nccl-peer-error")
    oom = failure("w-1", TOLERANCE.total_seconds() + 1, Read.OOM)
    verdict = decide(incidents([early, oom])[0])
    assert verdict.root is None and verdict.first is early


def test_a_consequence_a_little_before_the_oom_still_points_at_it() -> None:
    # the OOM rank's launcher took a few seconds to stop; its peers failed meanwhile
    early = failure("w-0", 0, Read.CONSEQUENCE, "nccl-peer-error")
    oom = failure("w-1", 4, Read.OOM)
    (verdict,) = verdicts([early, oom])
    assert verdict.root is oom and verdict.consequences == (early,)
    assert verdict.after_root(early) == dt.timedelta(seconds=-4)


def test_an_unread_failure_long_before_the_oom_leaves_the_cause_unknown() -> None:
    (verdict,) = verdicts([failure("w-0", 0, Read.UNREAD), failure("w-1", 60, Read.OOM)])
    assert verdict.root is None


def test_unread_failures_after_the_root_point_at_it() -> None:
    root = failure("w-0", 0, Read.OOM)
    unread = failure("w-1", 8, Read.UNREAD, "exit code 1")
    assert verdicts([root, unread])[0].consequences == (unread,)


def test_only_consequences_leave_the_incident_undecided() -> None:
    (verdict,) = verdicts([failure("w-0", 0, Read.CONSEQUENCE), failure("w-1", 1, Read.UNREAD)])
    assert (verdict.first, verdict.root) == (None, None)


def test_at_equal_times_the_oom_comes_first_then_the_lower_index() -> None:
    other = failure("a", 0, Read.OTHER, index=0)
    oom_high, oom_low = failure("b", 0, Read.OOM, index=7), failure("c", 0, Read.OOM, index=2)
    (verdict,) = verdicts([other, oom_high, oom_low])
    assert verdict.root is oom_low
    assert verdict.oom_too == (oom_high,) and verdict.others == (other,)


def test_the_logs_own_stamp_orders_failures_of_the_same_second() -> None:
    late_in_the_second = failure("a", 0, Read.OOM, index=0, log_at=0.9)
    early_in_the_second = failure("b", 0, Read.OOM, index=5, log_at=0.1)
    assert verdicts([late_in_the_second, early_in_the_second])[0].root is early_in_the_second


def test_a_log_stamp_a_day_away_from_the_termination_is_not_believed() -> None:
    odd = failure("a", 10, Read.OOM, log_at=-3 * 86400.0)
    assert odd.when == T0 + dt.timedelta(seconds=10)


def test_failures_past_the_window_start_a_new_incident() -> None:
    first = failure("w-0", 0, Read.OOM)
    again = failure("w-1", WINDOW.total_seconds() + 60, Read.OOM, restart=1)
    found = verdicts([again, first, failure("w-2", 5, Read.CONSEQUENCE)])
    assert [v.root for v in found] == [first, again]
    assert len(found[0].consequences) == 1 and found[1].consequences == ()


def test_a_remembered_root_gives_way_to_the_same_failure_read_again() -> None:
    remembered = Failure("ml", "w-0", "uid-w-0", "main", 0, T0, Read.OOM, "capacity",
                         remembered=True)
    live = failure("w-0", 0, Read.OOM, "capacity")
    (incident,) = incidents([remembered, live])
    assert incident == (live,)


def test_a_failure_without_a_time_is_left_out() -> None:
    timeless = Failure("ml", "x", "uid-x", "main", 0, None, Read.OOM, "capacity")
    assert verdicts([timeless]) == []
