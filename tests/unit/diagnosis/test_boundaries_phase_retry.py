"""A retry loop of the job's own that shrank its batch and still ran out: read from the lines it
logged for each caught out-of-memory error, whatever its wording (not only Accelerate's).

Each boundary has a case just inside and one just outside: two reports (one is not a loop), a
size that shrank (equal or growing sizes are not a back-off), an out-of-memory word on the line
(a batch size alone is not a report), a line cut at 4096 characters.
"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.phase import failure_phase

pytestmark = pytest.mark.unit

FINAL = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 3.10 GiB is free. Including non-PyTorch memory, this process "
    "has 76.04 GiB memory in use. Of the allocated memory 75.50 GiB is allocated by PyTorch, and "
    "40.00 MiB is reserved by PyTorch but unallocated.\n"
)
TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in <module>\n'
    "    loss = model(batch)\n"
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1532, '
    "in _call_impl\n"
    "    return forward_call(*args, **kwargs)\n"
)


@pytest.mark.parametrize(
    "lines",
    [
        # a Lightning-style tuner line, a home-made back-off, a tqdm-ish status, JSON records
        ["Batch size 64 failed with OOM, trying batch size 32", "Batch size 32 failed with OOM"],
        ["[WARN] OOM with batch_size: 16 -> halving", "[WARN] OOM with batch_size: 8 -> halving"],
        [
            "Ran out of memory (batch 256); retrying at 128",
            "Ran out of memory (batch 128); retrying at 64",
            "Ran out of memory (batch 64); giving up",
        ],
        [
            '{"event": "cuda_oom", "msg": "CUDA out of memory", "batch_size": 12}',
            '{"event": "cuda_oom", "msg": "CUDA out of memory", "batch_size": 6}',
        ],
        ["reducing batch-size to 24 after an out of memory", "out of memory: batch-size 12"],
        # equal steps are allowed once the sizes shrank overall (a retry at the same size)
        ["OOM at batch 8", "OOM at batch 8", "OOM at batch 4"],
    ],
)
def test_a_shrinking_batch_after_caught_ooms_is_a_retry_loop(lines: list[str]) -> None:
    log = "\n".join(["step 1 loss 2.0", *lines, TB]) + FINAL
    assert failure_phase(log) == "retry-exhausted"


@pytest.mark.parametrize(
    "lines",
    [
        ["Batch size 64 failed with OOM, trying batch size 32"],  # one report is no loop
        ["OOM at batch 8", "OOM at batch 8"],  # the same size twice: no back-off
        ["OOM at batch 4", "OOM at batch 8"],  # growing: a batch *index*, or a tuner going up
        ["skipped batch 17 after OOM", "skipped batch 40 after OOM", "skipped batch 41 (OOM)"],
        ["OOM at batch 8", "OOM at batch 4", "OOM at batch 6"],  # grew again: not a back-off
        ["batch_size=64 done", "batch_size=32 done"],  # no out-of-memory word on the lines
        ["ROOM at batch 8", "ROOM at batch 4"],  # "OOM" only as a word
        ["CUDA out of memory", "CUDA out of memory"],  # no batch size named
        ["out of memory at batch_size=", "out of memory at batch_size="],  # no number
        ["out of memory at batchsize8", "out of memory at batchsize4"],  # not a word boundary
    ],
)
def test_other_lines_are_not_a_retry_loop(lines: list[str]) -> None:
    log = "\n".join(["step 1 loss 2.0", *lines, TB]) + FINAL
    assert failure_phase(log) == "forward"


def test_the_batch_size_is_looked_for_within_sixteen_characters_of_its_word() -> None:
    near = "OOM: batch size" + " " * 16 + "8"  # 16 characters between "size" and the number
    far = "OOM: batch size" + " " * 17 + "8"  # 17
    assert failure_phase(f"{near}\n{near.replace(' 8', ' 4')}\n{TB}{FINAL}") == "retry-exhausted"
    assert failure_phase(f"{far}\n{far.replace(' 8', ' 4')}\n{TB}{FINAL}") == "forward"


def test_a_report_is_read_in_a_lines_first_4096_characters() -> None:
    inside = "x" * 4080 + " OOM batch 8"  # 4092 characters: the size is read
    outside = "x" * 4090 + " OOM batch 8"  # its end is past 4096
    smaller = "OOM batch 4"
    assert failure_phase(f"{inside}\n{smaller}\n{TB}{FINAL}") == "retry-exhausted"
    assert failure_phase(f"{outside}\n{smaller}\n{TB}{FINAL}") == "forward"


def test_the_retry_loop_changes_the_first_action_not_the_verdict() -> None:
    lines = "OOM at batch_size=32, retrying\nOOM at batch_size=16, retrying\n"
    plain = diagnose("step 1\n" + TB + FINAL)
    retried = diagnose("step 1\n" + lines + TB + FINAL)
    assert plain.kind == retried.kind == "capacity"
    assert plain.recommendation.alloc_conf is None and retried.recommendation.alloc_conf is None
    assert plain.recommendation.actions[0].startswith("reduce peak memory: a smaller batch")
    assert retried.recommendation.actions[0].startswith(
        "the job's own retry loop already shrank the batch and still ran out"
    )
    assert not any(a.startswith("reduce peak memory") for a in retried.recommendation.actions)
    assert dict(retried.extra)["phase"] == "retry-exhausted"
