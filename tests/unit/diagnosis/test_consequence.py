"""consequence.read_failure: a peer's death in a log, told from a failure of the process's own."""

from __future__ import annotations

import datetime as dt

import pytest

from gpu_auditor.diagnosis.consequence import CONSEQUENCE_KINDS, TAIL_CHARS, read_failure

pytestmark = pytest.mark.unit

FINISHED = dt.datetime(2026, 11, 29, 10, 0, 6, tzinfo=dt.UTC)
WATCHDOG = ("[rank1]:[E1129 10:00:04.833 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before "
            "timing out.")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
       "total capacity of 79.10 GiB of which 1.00 GiB is free.")


@pytest.mark.parametrize("line, kind", [
    (WATCHDOG, "nccl-timeout"),
    ("[Rank 0] Timeout at NCCL work: 4, last enqueued NCCL work: 4", "nccl-timeout"),
    ("Observed flight recorder dump signal from another rank via TCPStore.", "nccl-timeout"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
     "process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A "
     "call failed possibly due to a network error or a remote process exiting prematurely.",
     "nccl-peer-error"),
    ("NCCL WARN socketProgress: Connection closed by remote peer w-0<41234>", "nccl-peer-error"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
     "peer [10.0.0.7]:23456", "gloo-peer-closed"),
    ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely "
     "closed. Did the remote server shutdown or crash?", "store-closed"),
    ("WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting "
     "down workers", "signalled"),
    ("Received Signals.SIGTERM death signal, shutting down workers", "signalled"),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 17 got signal: 15",
     "signalled"),
])
def test_a_peer_or_collective_gone_reads_as_its_consequence_kind(line: str, kind: str) -> None:
    assert kind in CONSEQUENCE_KINDS
    assert read_failure(f"epoch 3\n{line}\nTraceback (most recent call last):\n").consequence \
        == kind


def test_a_log_that_holds_an_oom_is_no_consequence_whatever_follows_it() -> None:
    found = read_failure(f"{OOM}\n{WATCHDOG}\n")
    assert found.consequence is None and found.line is not None
    assert found.line.startswith("torch.OutOfMemoryError")


def test_a_failure_of_another_kind_reads_as_nothing() -> None:
    assert read_failure("Traceback (most recent call last):\nValueError: bad shard\n") == \
        read_failure("")


def test_the_glog_stamp_on_the_failure_line_dates_it_with_the_reference_year() -> None:
    found = read_failure(WATCHDOG + "\n", FINISHED)
    assert found.at == dt.datetime(2026, 11, 29, 10, 0, 4, 833000, tzinfo=dt.UTC)
    assert found.rank == 1


def test_a_glog_stamp_of_december_in_a_january_log_is_of_the_year_before() -> None:
    found = read_failure("[E1231 23:59:59.500 x.cpp:1] Watchdog caught collective operation "
                         "timeout", dt.datetime(2027, 1, 1, 0, 0, 1, tzinfo=dt.UTC))
    assert found.at == dt.datetime(2026, 12, 31, 23, 59, 59, 500000, tzinfo=dt.UTC)


def test_without_a_reference_a_glog_stamp_is_not_dated() -> None:
    assert read_failure(WATCHDOG).at is None


def test_an_iso_stamp_with_a_zone_is_read_in_utc() -> None:
    found = read_failure("2026-11-29T11:00:03.250+01:00 ERROR Connection closed by peer x\n")
    assert found.at == dt.datetime(2026, 11, 29, 10, 0, 3, 250000, tzinfo=dt.UTC)


def test_a_stamp_printed_elsewhere_does_not_date_the_failure() -> None:
    log = f"2026-11-29 09:00:00,000 INFO epoch 1\n{OOM}\n"
    assert read_failure(log, FINISHED).at is None


def test_torchelastics_root_cause_block_gives_the_time_and_the_global_rank() -> None:
    log = (f"[rank27]: {OOM}\ntrain.py FAILED\nFailures:\n  <NO_OTHER_FAILURES>\n"
           "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-29_10:00:02\n"
           "  host      : w-3\n  rank      : 27 (local_rank: 3)\n  exitcode  : 1 (pid: 55)\n")
    found = read_failure(log, FINISHED)
    assert found.at == dt.datetime(2026, 11, 29, 10, 0, 2, tzinfo=dt.UTC)
    assert found.rank == 27


def test_only_the_logs_end_is_read() -> None:
    found = read_failure(WATCHDOG + "\n" + "x" * TAIL_CHARS)
    assert found.consequence is None


def test_control_characters_of_the_line_are_not_echoed() -> None:
    found = read_failure("\x1b[31mConnection closed by peer\x07 10.0.0.1\n")
    assert found.line is not None and "\x1b" not in found.line and "\x07" not in found.line


def test_a_date_inside_a_longer_number_is_no_date() -> None:
    """Digits before the year: an id or a counter, not a time stamp (12026 is no year)."""
    assert read_failure("12026-11-29 10:00:00 Connection closed by peer").at is None
    assert read_failure("id=2026-11-29 10:00:00 Connection closed by peer").at is not None


def test_an_impossible_date_is_no_date() -> None:
    assert read_failure("2026-13-45 10:00:00 Connection closed by peer").at is None


def test_bytes_that_do_not_decode_are_read_all_the_same() -> None:
    assert read_failure(b"\xff\xfe Connection closed by peer\n").consequence == "gloo-peer-closed"
