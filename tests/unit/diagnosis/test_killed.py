"""A log with no OOM words whose job was killed by signal 9: an action, never a verdict
(killed.py; the lines are the public threads' of evaluation/unworded's d-* logs)."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.killed import killed_by_signal
from gpu_auditor.diagnosis.logtext import QUOTED_CHARS

from .diagnosis_helpers import torch_oom

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("line", [
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
    "(pid: 178) of binary: /usr/bin/python",
    "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 3",
    "Signal 9 (SIGKILL) received by PID 4242",
    "[ERROR] [launch.py:325:sigkill_handler] exits with return code = -9",
    "subprocess.CalledProcessError: Command '[...]' died with <Signals.SIGKILL: 9>.",
    "command terminated with exit code 137",
    "train-0 exited with code 137",
])  # fmt: skip
def test_a_kill_by_signal_9_is_an_action_not_an_oom(line: str) -> None:
    d = diagnose(f"step 1 loss 0.5\nstep 2 loss 0.4\n{line}\n")
    assert not d.detected
    assert d.to_json_dict()["killed_by_signal"] == line
    assert d.recommendation.actions[0].startswith("the job was killed by signal 9 (")
    assert "most often the kernel's OOM killer taking host (CPU) memory" in (
        d.recommendation.actions[0])


@pytest.mark.parametrize("line", [
    "failed (exitcode: -90) local_rank: 0",  # another code
    "failed (exitcode: 1) local_rank: 0",
    "exited with code 1370",
    "Signal 15 (SIGTERM) received by PID 4242",
    "retrying after exit code 13",
])  # fmt: skip
def test_other_exits_say_nothing(line: str) -> None:
    d = diagnose(f"step 1\n{line}\n")
    assert "killed_by_signal" not in d.to_json_dict()
    assert killed_by_signal(line) is None


def test_an_oom_in_the_log_is_the_diagnosis_and_the_kill_is_not_added() -> None:
    oom = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1,
                    unallocated=6.9)
    d = diagnose(oom + "failed (exitcode: -9) local_rank: 0\n")
    assert d.detected and "killed_by_signal" not in d.to_json_dict()


def test_the_last_kill_is_named_cut_and_printable() -> None:
    tail = f"exit code 137\n\x1b[0mx{'y' * 500} failed (exitcode: -9) z\n"
    line = killed_by_signal(tail)
    assert line is not None and len(line) == QUOTED_CHARS
    assert line.startswith("?[0mxyyy")
    assert killed_by_signal("exit code 137") == "exit code 137"


def test_the_line_is_the_kills_own_between_others() -> None:
    tail = "step 9\n  [rank0] exit code 137  \nlauncher: shutting down\nbye"
    assert killed_by_signal(tail) == "[rank0] exit code 137"
    assert killed_by_signal("first exit code 137\nthen exitcode: -9\nend") == "then exitcode: -9"
