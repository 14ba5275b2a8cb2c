"""Property tests: arbitrary input never raises; embedded OOMs are always found."""

from __future__ import annotations

import pytest
from diagnosis_helpers import torch_oom
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import KINDS, diagnose, validate_alloc_conf

pytestmark = pytest.mark.unit

OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
FRAGMENTS = st.sampled_from(
    [
        "CUDA out of memory. ",
        "Tried to allocate ",
        "GPU 0 has a total capacity of ",
        "Process 1 has ",
        "17179869184.00 GiB",
        " is free. ",
        "allowed; ",
        "OOM when allocating tensor",
        "\n",
        "[rank1]: ",
        "2026-01-01T00:00:00Z stdout P ",
        "RESOURCE_EXHAUSTED: Out of memory",
        "CUDA error: out of memory",
        "Cuda failure 'out of memory'",
        "would exceed allowed memory. (out of memory)\n",
        "Requested : ",
        "1e400 GiB",
        "-3 GiB",
        "99999999999999999999 bytes",
        '{"log":"',
        "mem 12.0 GiB\n",
        "Traceback (most recent call last):\n",
        '  File "a.py", line 1, in f\n',
        "KeyError: 'lr'\n",
        "During handling of the above exception, another exception occurred:\n",
        "Exception in thread T:\n",
        "SystemExit: 1\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    diagnosis = diagnose(data)
    assert diagnosis.kind in KINDS
    diagnosis.to_json_dict()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=30)), max_size=40))
def test_oom_shaped_garbage_never_raises(parts: list[str]) -> None:
    diagnosis = diagnose("".join(parts), alloc_conf="".join(parts)[:50], torch_version="2.11")
    assert diagnosis.kind in KINDS
    assert isinstance(diagnosis.summary, str) and diagnosis.summary


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=2000), st.text(max_size=2000))
def test_an_oom_between_any_text_is_found(before: str, after: str) -> None:
    diagnosis = diagnose(before + "\n" + OOM + after)
    assert diagnosis.detected and diagnosis.oom_count >= 1


@given(st.text(max_size=200))
def test_validator_never_raises(value: str) -> None:
    assert isinstance(validate_alloc_conf(value, torch_version="2.11"), list)


def test_a_large_log_with_one_oom_at_the_end_is_diagnosed() -> None:
    noise = ("2026-11-29T19:00:00Z stdout F step 123 loss 0.456 lr 1e-4\n" * 200_000).encode()
    diagnosis = diagnose(noise + OOM.encode())
    assert (diagnosis.kind, diagnosis.oom_count) == ("fragmentation", 1)
