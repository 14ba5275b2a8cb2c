"""Property tests over hostile logs: diagnose() never raises, never stalls, never lies in bounds.

Generators, one per class of issue 11: deeply nested docker-json, runs of digits inside every
message family (``tests/fixtures/hostile/digit_slots.json``), lines far longer than 64 KiB with
no newline, carriage-return progress bars, CRI and docker-json framing, invalid UTF-8 and NULs.

Each example runs under a hypothesis ``deadline``: a fuzzing guard against a stall (the old
patterns took seconds to minutes on one line of digits), not a speed claim; speed is measured
in bench/hostile_scaling.py and bench/fuzz_diagnose.py.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_auditor.diagnosis import KINDS, Diagnosis, diagnose, scan_bytes, validate_alloc_conf

from .diagnosis_helpers import GIB, ROOT, torch_oom

pytestmark = pytest.mark.unit

MAX_FIGURE = 2**64  # sizes.MAX_SIZE_BYTES, written out: a boundary is a literal in a test
SLOTS: dict[str, dict[str, Any]] = {
    name: slot
    for name, slot in json.loads(
        Path(ROOT / "tests" / "fixtures" / "hostile" / "digit_slots.json").read_text()
    ).items()
    if not name.startswith("_")
}
OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
GUARD = settings(
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)

# --- generators -------------------------------------------------------------------------------

digit_runs = st.one_of(
    st.one_of(st.integers(1, 8000), st.sampled_from([21, 4301, 20_000])).map(lambda n: "9" * n),
    st.integers(1, 3000).map(lambda n: "1" + "0" * n),
    st.integers(1, 1500).map(lambda n: ",".join(["999"] * n)),
    st.integers(1, 3000).map(lambda n: "1." + "5" * n),
    st.text(alphabet="0123456789", min_size=1, max_size=200),
)
family_with_digits = st.builds(
    lambda name, digits: SLOTS[name]["log"].replace("{D}", digits),
    st.sampled_from(sorted(SLOTS)),
    digit_runs,
)
leak_series_with_digits = st.builds(
    lambda digits, n: "".join(f"step {i} mem {digits}{i} GiB\n" for i in range(n)),
    digit_runs,
    st.integers(1, 12),
)
deep_json = st.builds(
    lambda depth, bracket, tail: '{"log":' + bracket * depth + tail,
    st.integers(1, 200_000),
    st.sampled_from(["[", "{", '["', '{"a":']),
    st.sampled_from(["", "\n", '"', OOM]),
)
noise_units = st.sampled_from(
    [
        "x",
        "9",
        " ",
        "\rEpoch 1:  42%|####      | 420/1000 [00:42<00:58, 9.99it/s]",
        "\r",
        "mem 12.5 GiB ",
        "memory",
        "Error ",
        "INTERNAL ",
        "RESOURCE_EXHAUSTED: ",
        "total capacity; ",
        "reserved in total by PyTorch) ",
        "allocate ",
        "Process 1 has ",
        "\x00",
        "\ufffd",
        "é",
    ]
)
# hypothesis favours small integers: name the sizes around the 64 KiB line limit outright
lengths = st.one_of(
    st.integers(1, 300_000), st.sampled_from([65_535, 65_536, 65_537, 66_560, 131_072, 300_000])
)
long_noise = st.builds(lambda unit, n: (unit * n)[:400_000], noise_units, lengths)
keyword_free_noise = st.builds(
    lambda unit, n: unit * n,
    st.sampled_from(["x", "9", " ", "\rEpoch 1:  42%|####  | 420/1000 [00:42<00:58]", "é"]),
    lengths,
)
raw_bytes = st.binary(max_size=4096).map(lambda b: b.decode("utf-8", errors="surrogateescape"))
pieces = st.one_of(
    family_with_digits, leak_series_with_digits, deep_json, long_noise, raw_bytes, st.just(OOM)
)
separators = st.sampled_from(["", "\n", "\r", "\r\n", " "])


def cri(line: str, stream: str = "stderr", tag: str = "F") -> str:
    return f"2026-11-29T19:00:00.123456789Z {stream} {tag} {line}"


def docker(line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-11-29T19:00:00Z"})


def frame(text: str, how: str) -> str:
    lines = text.split("\n")
    if how == "cri":
        return "\n".join(cri(line) for line in lines)
    if how == "cri-partial":  # every line split in two CRI records, P then F
        return "\n".join(
            cri(line[: len(line) // 2], tag="P") + "\n" + cri(line[len(line) // 2 :])
            for line in lines
        )
    if how == "docker":
        return "\n".join(docker(line) for line in lines)
    return text


framings = st.sampled_from(["plain", "cri", "cri-partial", "docker"])


@st.composite
def hostile_logs(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.tuples(pieces, separators), min_size=1, max_size=5))
    text = "".join(piece + separator for piece, separator in parts)
    return frame(text, draw(framings)).encode("utf-8", errors="surrogateescape")


# --- what every diagnosis must satisfy --------------------------------------------------------


def assert_valid(diagnosis: Diagnosis) -> None:
    assert diagnosis.kind in KINDS
    assert isinstance(diagnosis.summary, str) and diagnosis.summary
    assert diagnosis.oom_count >= 0 and (diagnosis.oom_count > 0 or not diagnosis.detected)
    if diagnosis.oom_count > 0 and not diagnosis.detected:  # a failure read as no OOM says why
        reasons = {"later_failure", "address_space_call", "impossible_request", "handled_refusal",
                   "zero_request", "allocation_limit", "skipped_batch"}
        assert reasons & set(diagnosis.to_json_dict()), diagnosis.summary
    figures = diagnosis.figures
    values = [
        figures.requested_bytes,
        figures.total_bytes,
        figures.free_bytes,
        figures.process_bytes,
        figures.allocated_bytes,
        figures.reserved_unallocated_bytes,
        figures.allowed_bytes,
        figures.private_pool_bytes,
        *(p.bytes for p in figures.other_processes),
    ]
    if diagnosis.growth is not None:
        values += [diagnosis.growth.first_bytes, diagnosis.growth.last_bytes]
    for value in values:
        assert value is None or 0 <= value <= MAX_FIGURE, value
    as_json = json.dumps(diagnosis.to_json_dict(), allow_nan=False)
    assert json.loads(as_json) == diagnosis.to_json_dict()


# --- the properties ---------------------------------------------------------------------------


@settings(GUARD, max_examples=120)
@given(hostile_logs())
def test_any_hostile_log_gives_a_valid_bounded_diagnosis(log: bytes) -> None:
    assert_valid(diagnose(log))


@settings(GUARD, max_examples=60)
@given(family_with_digits, framings)
def test_a_digit_run_in_any_message_family_is_never_an_error(log: str, how: str) -> None:
    diagnosis = diagnose(frame(log, how))
    assert_valid(diagnosis)


@settings(GUARD, max_examples=50)
@given(hostile_logs(), framings)
def test_a_real_oom_after_hostile_noise_is_still_found(noise: bytes, how: str) -> None:
    # a quiet stretch longer than the 16 KiB de-duplication window, then the real failure
    quiet = ("step 1 loss 0.5\n" * 1100).rstrip("\n")
    tail = frame(quiet + "\n" + OOM.rstrip("\n"), how).encode()
    diagnosis = diagnose(noise + b"\n" + tail + b"\n")
    assert_valid(diagnosis)
    assert diagnosis.figures.requested_bytes == 2 * GIB
    assert diagnosis.message is not None
    assert diagnosis.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")


@settings(GUARD, max_examples=50)
@given(keyword_free_noise, st.sampled_from(["", " ", "\r", "\x00"]), st.sampled_from(["", "\n"]))
def test_a_real_oom_on_the_same_line_as_any_long_output_is_found(
    noise: str, separator: str, end: str
) -> None:
    diagnosis = diagnose(noise + separator + OOM.rstrip("\n") + end)
    assert_valid(diagnosis)
    assert diagnosis.oom_count == 1
    assert diagnosis.figures.requested_bytes == 2 * GIB


@settings(GUARD, max_examples=40)
@given(hostile_logs(), st.integers(min_value=512, max_value=300_000))
def test_a_hostile_log_gives_the_same_scan_in_any_chunk_size(log: bytes, chunk: int) -> None:
    assert scan_bytes(log, chunk_bytes=chunk) == scan_bytes(log)


@settings(GUARD, max_examples=30)
@given(deep_json, st.integers(0, 3))
def test_nested_json_in_docker_framing_never_recurses(line: str, copies: int) -> None:
    assert_valid(diagnose((line + "\n") * copies + OOM))


alloc_conf_values = st.one_of(
    st.builds(
        lambda key, digits: f"{key}:{digits}",
        st.sampled_from(
            [
                "max_split_size_mb",
                "garbage_collection_threshold",
                "roundup_power2_divisions",
                "pinned_num_register_threads",
                "per_process_memory_fraction",
                "expandable_segments",
            ]
        ),
        digit_runs.map(lambda d: d[:20_000]),
    ),
    st.integers(1, 20_000).map(lambda n: "roundup_power2_divisions:" + "[" * n),
    st.integers(1, 5_000).map(lambda n: "a:b," * n),
    st.text(max_size=500),
)
torch_versions = st.one_of(
    st.none(),
    st.sampled_from(["2.11", "1.9", "2.0.1+cu118"]),
    digit_runs.map(lambda d: d[:5000] + "." + d[:5000]),
    st.text(max_size=50),
)


@settings(GUARD, max_examples=60)
@given(alloc_conf_values, torch_versions, st.sampled_from([None, "native", "cudaMallocAsync"]))
def test_a_hostile_alloc_conf_or_release_never_raises(
    alloc_conf: str, torch_version: str | None, backend: str | None
) -> None:
    diagnosis = diagnose(OOM, alloc_conf=alloc_conf, torch_version=torch_version, backend=backend)
    assert_valid(diagnosis)
    assert diagnosis.figures.requested_bytes == 2 * GIB


# Property tests: arbitrary input never raises; embedded OOMs are always found.

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
