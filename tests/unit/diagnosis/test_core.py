"""The entry points at their edges (issue 18, mutation survivors of ``diagnosis/core.py``).

What a caller gets back is pinned whole: the kernel OOM killer's diagnosis (summary, actions and
the JSON ``host`` object), a log with no failure (the release, the settings' problems, a rising
series), every keyword argument of ``diagnose``/``diagnose_stream`` reaching the verdict, the
``backend``/``phase``/``probe`` JSON keys, which probe record belongs to a failure (the same
request within 1 % of it, the record at most 64 KiB before the failure), the figures a retry
loop's last caught OOM gets from its record, and when the growth series is reported.
Real logs where one exists (``tests/fixtures/oom``); literal numbers, never the constants.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.diagnosis import (
    Figures,
    MemorySample,
    NodeEvidence,
    OtherPod,
    core,
    diagnose,
    diagnose_host_oom,
    diagnose_stream,
)
from gpu_auditor.diagnosis.logtext import scan_bytes
from gpu_auditor.diagnosis.proberecord import ProbeRecord, parse_record

from .diagnosis_helpers import PROGRESS

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "oom"
MiB = 1048576
GiB = 1073741824


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# -- the kernel OOM killer: diagnose_host_oom ----------------------------------------------

HOST_FIXES = [
    "raise the container's memory limit (and set the request equal to it)",
    "use fewer DataLoader workers (each worker holds its own copy of the dataset object)",
    "set pin_memory=False or a smaller prefetch_factor (pinned host buffers count against the "
    "limit)",
    "load checkpoints with torch.load(..., mmap=True) or straight to the GPU (map_location='cuda')",
    "a memory-backed /dev/shm (emptyDir medium: Memory) counts against the limit: size it "
    "explicitly",
]
NO_FIGURES: dict[str, Any] = {
    "requested_bytes": None,
    "total_bytes": None,
    "free_bytes": None,
    "process_bytes": None,
    "allocated_bytes": None,
    "reserved_unallocated_bytes": None,
    "allowed_bytes": None,
    "other_processes": [],
}


def test_a_container_killed_at_a_limit_above_its_request_gets_the_whole_host_diagnosis() -> None:
    # exit code left out: an OOMKilled container exits 137 (128 + SIGKILL)
    result = diagnose_host_oom(
        container="trainer", memory_limit_bytes=8589934592, memory_request_bytes=4294967296
    )
    assert result.to_json_dict() == {
        "detected": True,
        "framework": None,
        "kind": "host-oom-killed",
        "contributing": [],
        "figures": NO_FIGURES,
        "torch_version_hint": None,
        "recommendation": {
            "env": None,
            "alloc_conf": None,
            "actions": [
                "the memory request (4.00 GiB) is below the limit (8.00 GiB): the node may be "
                "overcommitted; set request = limit",
                *HOST_FIXES,
            ],
        },
        "summary": "host-oom-killed: container 'trainer' was killed by the kernel OOM killer "
        "(exit 137) at its 8.00 GiB memory limit",
        "oom_count": 1,
        "message": None,
        "alloc_conf_problems": [],
        "host": {
            "container": "trainer",
            "memory_limit_bytes": 8589934592,
            "memory_request_bytes": 4294967296,
            "exit_code": 137,
        },
    }
    assert result.growth is None


@pytest.mark.parametrize("container", [None, ""])
def test_a_container_with_no_limit_no_name_and_no_exit_code_is_the_node_running_out(
    container: str | None,
) -> None:
    result = diagnose_host_oom(
        container=container, memory_limit_bytes=None, memory_request_bytes=None, exit_code=None
    )
    assert (result.detected, result.kind, result.oom_count) == (True, "host-oom-killed", 1)
    assert result.summary == (
        "host-oom-killed: the container was killed by the kernel OOM killer with no memory "
        "limit set: the node itself ran out of memory"
    )
    assert list(result.recommendation.actions) == [
        "the container has no memory limit: the node itself ran out; set requests and limits",
        *HOST_FIXES,
    ]
    assert result.to_json_dict()["host"] == {
        "container": container,
        "memory_limit_bytes": None,
        "memory_request_bytes": None,
        "exit_code": None,
    }


@pytest.mark.parametrize(
    ("container", "limit", "requested", "exit_code", "summary", "first_action"),
    [
        # request = limit: not overcommitted, the generic fixes only
        (
            "loader",
            512 * MiB,
            512 * MiB,
            137,
            "host-oom-killed: container 'loader' was killed by the kernel OOM killer (exit 137) at "
            "its 512.00 MiB memory limit",
            HOST_FIXES[0],
        ),
        # no request: the limit alone, nothing to compare it with
        (
            "loader",
            2 * GiB,
            None,
            9,
            "host-oom-killed: container 'loader' was killed by the kernel OOM killer (exit 9) at "
            "its 2.00 GiB memory limit",
            HOST_FIXES[0],
        ),
        # a request one byte below the limit is overcommitted
        (
            None,
            2 * GiB,
            2 * GiB - 1,
            None,
            "host-oom-killed: the container was killed by the kernel OOM killer at its 2.00 GiB "
            "memory limit",
            "the memory request (2.00 GiB) is below the limit (2.00 GiB): the node may be "
            "overcommitted; set request = limit",
        ),
    ],
)
def test_the_host_summary_and_first_action_follow_the_limit_request_and_exit_code(
    container: str | None,
    limit: int,
    requested: int | None,
    exit_code: int | None,
    summary: str,
    first_action: str,
) -> None:
    result = diagnose_host_oom(
        container=container,
        memory_limit_bytes=limit,
        memory_request_bytes=requested,
        exit_code=exit_code,
    )
    assert result.summary == summary
    assert result.recommendation.actions[0] == first_action
    assert dict(result.extra)["host"] == {
        "container": container,
        "memory_limit_bytes": limit,
        "memory_request_bytes": requested,
        "exit_code": exit_code,
    }


# -- a log with no failure -------------------------------------------------------------------


PROBLEMS_ON_2_9_ASYNC = [
    "expandable_segments is an option of the native allocator; backend:cudaMallocAsync ignores it",
    "Unrecognized CachingAllocator option: per_process_memory_fraction "
    "(per_process_memory_fraction needs torch >= 2.10)",
]
"""What 'expandable_segments:True,per_process_memory_fraction:0.5' gets on torch 2.9.1 with
backend cudaMallocAsync."""


def test_a_log_without_a_failure_still_checks_the_settings_for_its_release_and_backend() -> None:
    result = diagnose(
        "epoch 1 done\nepoch 2 done\n",
        torch_version="2.9.1+cu128",
        alloc_conf="expandable_segments:True,per_process_memory_fraction:0.5",
        backend="cudaMallocAsync",
    )
    problems = PROBLEMS_ON_2_9_ASYNC
    assert result.to_json_dict() == {
        "detected": False,
        "framework": None,
        "kind": "unknown",
        "contributing": [],
        "figures": NO_FIGURES,
        "torch_version_hint": "2.9",
        "recommendation": {
            "env": None,
            "alloc_conf": None,
            "actions": [
                f"the current PYTORCH_CUDA_ALLOC_CONF has problems for this release: {p}"
                for p in problems
            ],
        },
        "summary": "no out-of-memory failure found in the log",
        "oom_count": 0,
        "message": None,
        "alloc_conf_problems": problems,
    }


RISING = tuple(MemorySample(10.0 * i, (60 + 2 * i) * GiB) for i in range(6))
"""60 to 70 GiB in 2 GiB steps every 10 s: a leak series."""


def test_a_log_without_a_failure_but_a_rising_series_reports_the_growth() -> None:
    result = diagnose("epoch 1 done\n", samples=RISING)
    assert (result.detected, result.kind, result.contributing) == (False, "unknown", ("leak",))
    assert result.to_json_dict()["growth"] == {
        "source": "samples",
        "points": 6,
        "first_bytes": 64424509440,
        "last_bytes": 75161927680,
        "growth_bytes": 10737418240,
        "per_unit": 214748364.8,
    }


HANDLED = (
    "WARNING caught an OOM, skipping the batch: torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is "
    "free.\nstep 1 loss 0.5\nTraceback (most recent call last):\n"
    '  File "/app/train.py", line 9, in <module>\n    cfg["lr"]\nKeyError: \'lr\'\n'
)


def test_a_handled_oom_checks_the_settings_and_the_series_like_a_log_without_one() -> None:
    result = diagnose(
        HANDLED,
        torch_version="2.9.1+cu128",
        alloc_conf="expandable_segments:True,per_process_memory_fraction:0.5",
        backend="cudaMallocAsync",
        samples=RISING,
    )
    problems = PROBLEMS_ON_2_9_ASYNC
    out = result.to_json_dict()
    assert out["growth"]["growth_bytes"] == 10737418240
    del out["growth"]
    assert out == {
        "detected": False,
        "framework": None,
        "kind": "unknown",
        "contributing": ["leak"],
        "figures": NO_FIGURES,
        "torch_version_hint": "2.9",
        "recommendation": {
            "env": None,
            "alloc_conf": None,
            "actions": [
                "the job failed with KeyError: 'lr', not for lack of GPU memory: the "
                "out-of-memory error before it was caught and the job went on",
                *(
                    f"the current PYTORCH_CUDA_ALLOC_CONF has problems for this release: {p}"
                    for p in problems
                ),
            ],
        },
        "summary": "no out-of-memory failure ended the job: it went on after the log's last "
        "out-of-memory error and then failed with KeyError: 'lr'",
        "oom_count": 1,
        "message": None,
        "alloc_conf_problems": problems,
        "later_failure": "KeyError: 'lr'",
    }


def test_a_handled_oom_is_read_on_the_failures_own_rank() -> None:
    ranked = "".join(f"[rank1]: {line}\n" for line in HANDLED.splitlines())
    assert diagnose(ranked).detected is False
    # another rank's traceback after rank 1's OOM: a consequence of it, the OOM stays
    other = ranked.replace("[rank1]: Traceback", "[rank0]: Traceback")
    other = "".join(
        line.replace("[rank1]:", "[rank0]:") if i > 1 else line
        for i, line in enumerate(other.splitlines(keepends=True))
    )
    assert diagnose(other).detected is True

# -- the settings, the release and the backend of a failure ----------------------------------

EXPANDABLE_IGNORED = (
    "expandable_segments is an option of the native allocator; backend:cudaMallocAsync ignores it"
)


def test_settings_are_checked_against_the_async_backend_the_message_names() -> None:
    log = fixture("corpus/async_backend_oom.log")
    result = diagnose(log, alloc_conf="expandable_segments:True")
    assert result.alloc_conf_problems == (EXPANDABLE_IGNORED,)
    assert result.to_json_dict()["backend"] == "cudaMallocAsync"


def test_settings_of_a_rocm_failure_are_checked_as_a_rocm_build() -> None:
    result = diagnose(
        fixture("families/rocm_hip_fragmentation.log"), alloc_conf="expandable_segments:True"
    )
    assert result.torch_version_hint == "2.4"
    assert result.alloc_conf_problems == (
        "expandable_segments is not supported on ROCm builds of torch",
    )


def test_a_jax_failure_gets_a_torch_release_only_from_the_caller() -> None:
    log = fixture("corpus/jax_oom.log")
    given = diagnose(log, torch_version="2.11.0+cu130")
    assert (given.framework, given.torch_version_hint) == ("jax", "2.11")
    # a torch banner in a JAX job's log says nothing about the failing framework
    printed = diagnose(b"torch 2.11.0+cu130\n" + log)
    assert (printed.framework, printed.torch_version_hint) == ("jax", None)
    # and PyTorch's allocator backend is no key of a JAX failure
    assert given.to_json_dict()["backend"] is None
    assert printed.to_json_dict()["backend"] is None


TORCH_2_2_MESSAGE = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this "
    "process has 77.93 GiB memory in use. Of the allocated memory 76.50 GiB is allocated by "
    "PyTorch, and 700.00 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)
"""A torch 2.2+ message ('total capacity of', torch.cuda.OutOfMemoryError): >= 2.2."""

FAR = ("step done\n" * 32768).encode()  # 320 KiB: more than the 256 KiB kept before a failure


def test_a_banner_ending_on_the_last_byte_of_the_logs_head_is_read() -> None:
    # the log's first 65536 bytes end with "torch 2.3"; the failure is 320 KiB further on,
    # so only the head holds the banner: 2.3, not just the message's ">=2.2"
    banner = b"\nstarting: torch 2.3"
    head = b"=" * (65536 - len(banner)) + banner
    log = head + b" on NVIDIA A100\n" + FAR + TORCH_2_2_MESSAGE.encode()
    assert scan_bytes(log).head.endswith("torch 2.3")
    assert diagnose(log).torch_version_hint == "2.3"
    assert diagnose(FAR + TORCH_2_2_MESSAGE.encode()).torch_version_hint == ">=2.2"


def test_a_banner_cut_by_the_heads_bound_is_not_read_as_another_release() -> None:
    banner = b"\nstarting: torch 1.1"  # the head ends here; the log goes on "3.1+cu117"
    head = b"=" * (65536 - len(banner)) + banner
    raw = b"RuntimeError: CUDA error: out of memory\n"  # 1.13's raw error: no wording clue
    log = head + b"3.1+cu117 on NVIDIA A100\n" + FAR + raw
    # the head drops the word its bound cut (it used to end "torch 1.1", read as release 1.1)
    assert scan_bytes(log).head.endswith("starting: torch ")
    assert scan_bytes(head + b" on NVIDIA A100\n").head.endswith("torch 1.1")  # a whole word
    result = diagnose(log, alloc_conf="max_split_size_mb:128")
    # torch 1.13 printed its banner and accepts max_split_size_mb (1.10+)
    assert result.torch_version_hint in (None, "1.13")
    assert result.alloc_conf_problems == ()


# -- every keyword argument of diagnose_stream reaches the verdict ---------------------------

GPU_FULL_NODE = NodeEvidence(
    gpu_uuid="GPU-0",
    gpu_total_bytes=150109106995,  # 139.80 GiB, the H200's
    gpu_free_bytes=64 * MiB,
    other_pods=(OtherPod("ml", "trainer-0", 149464861901, pid=872),),  # 139.20 GiB
    allocated=True,
)


def test_diagnose_stream_hands_the_node_report_to_the_verdict() -> None:
    # issue 24: a raw OOM at the first CUDA call is gpu-shared from the log alone; the node
    # report adds who holds the GPU
    log = fixture("corpus/context_oom_gpu_full.log")
    alone = diagnose_stream(io.BytesIO(log))
    assert (alone.kind, "ml/trainer-0" in alone.summary) == ("gpu-shared", False)
    result = diagnose_stream(io.BytesIO(log), node=GPU_FULL_NODE)
    assert result.kind == "gpu-shared"
    assert "ml/trainer-0" in result.summary


def test_diagnose_stream_hands_the_samples_to_the_verdict() -> None:
    # the raw OOM at the first CUDA call is gpu-shared (issue 24), a finding a leak does not
    # take the primary slot from: the samples' rise contributes
    log = fixture("corpus/context_oom_gpu_full.log")
    result = diagnose_stream(io.BytesIO(log), samples=RISING)
    assert (result.kind, result.contributing) == ("gpu-shared", ("leak",))
    assert result.growth is not None and result.growth.source == "samples"


def test_diagnose_stream_hands_the_torch_version_and_the_probe_record_on() -> None:
    # (after steps that finished: the seed message is fragmentation, and gets a setting)
    log = PROGRESS.encode() + fixture("corpus/seed_example_fragmentation.log")
    old = diagnose_stream(io.BytesIO(log), torch_version="1.13")
    assert (old.torch_version_hint, old.recommendation.alloc_conf) == (
        "1.13", "max_split_size_mb:128",
    )  # fmt: skip
    assert diagnose_stream(io.BytesIO(log)).recommendation.alloc_conf == (
        "expandable_segments:True"
    )
    given = diagnose_stream(io.BytesIO(log), probe_record=record(request_bytes=2147483648))
    assert given.to_json_dict()["probe"]["status"] == "ok"
    assert "probe" not in diagnose_stream(io.BytesIO(log)).to_json_dict()


def test_diagnose_stream_hands_the_backend_to_the_settings_check() -> None:
    log = fixture("corpus/seed_example_fragmentation.log")
    native = diagnose_stream(io.BytesIO(log), alloc_conf="expandable_segments:True")
    assert (native.to_json_dict()["backend"], native.alloc_conf_problems) == ("native", ())
    result = diagnose_stream(
        io.BytesIO(log), alloc_conf="expandable_segments:True", backend="cudaMallocAsync"
    )
    assert result.to_json_dict()["backend"] == "cudaMallocAsync"
    assert result.alloc_conf_problems == (EXPANDABLE_IGNORED,)


def test_a_str_log_with_unencodable_characters_is_diagnosed_not_raised() -> None:
    # a log read with errors="surrogateescape" keeps its undecodable bytes as lone surrogates
    # (after steps that finished: fragmentation read at the share for a job that progressed)
    log = PROGRESS + fixture("corpus/seed_example_fragmentation.log").decode()
    log += "tail \udcff\udc80\n"
    result = diagnose(log)
    assert (result.detected, result.kind) == (True, "fragmentation")


# -- the phase and growth a failure reports --------------------------------------------------


def test_the_phase_key_is_the_phase_the_traceback_shows_and_absent_without_one() -> None:
    assert diagnose(fixture("heldout/compile_step.log")).to_json_dict()["phase"] == "backward"
    assert "phase" not in diagnose(fixture("heldout/paged_kv_server.log")).to_json_dict()


def test_a_leak_names_how_much_memory_grew_first() -> None:
    # the job printed gpu_alloc_mb= from 140453 to 141733 (MB) over 21 lines
    result = diagnose(fixture("heldout/leak_step_cache.log"))
    assert result.kind == "leak"
    assert result.recommendation.actions[0] == (
        "memory grew by 1.19 GiB over 21 points: something keeps tensors alive across steps"
    )


def test_growth_beside_another_kind_is_reported_when_leak_contributes() -> None:
    result = diagnose(fixture("heldout/frag_sessions.log"))
    assert result.kind == "fragmentation"
    assert "leak" in result.contributing
    assert result.growth is not None and result.growth.source == "log"


def test_printed_growth_smaller_than_the_shortfall_is_not_reported() -> None:
    # +600 MiB over six steps, then an 8 GiB request with 600 MiB free: the rise did not take
    # the room the failure needed, and figures the job printed are no leak evidence then
    steps = "".join(f"step {10 * i} | mem allocated {30 + 0.12 * i:.2f} GiB\n" for i in range(6))
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 600.00 MiB is free. Including non-PyTorch memory, "
        "this process has 78.56 GiB memory in use. Of the allocated memory 77.10 GiB is "
        "allocated by PyTorch, and 50.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    rising = diagnose(steps + message)
    assert (rising.kind, rising.contributing, rising.growth) == ("capacity", (), None)


# -- which probe record belongs to a failure --------------------------------------------------

BASE_RECORD: dict[str, Any] = {
    "probe": "gpu-auditor",
    "v": 1,
    "status": "ok",
    "torch": "2.11.0+cu130",
    "pid": 4372,
    "rank": None,
    "backend": "native",
    "oom_count": 1,
    "device": 0,
    "request_bytes": 104857600,
    "device_free_bytes": 52428800,
    "device_total_bytes": 84987740160,
    "fraction": None,
    "allowed_bytes": None,
    "allocated_bytes": 83214991360,
    "reserved_bytes": 84351647744,
    "expandable_segments": False,
    "alloc_conf": None,
    "private_pool_bytes": 0,
    "pools": {
        "large": {
            "segments": 26,
            "segment_bytes": 84349550592,
            "free_bytes": 1136656384,
            "largest_free_bytes": 41943040,
            "pending_free_bytes": 0,
            "hist": [0, 0, 3, 6, 16, 1],
        },
        "small": {
            "segments": 1,
            "segment_bytes": 2097152,
            "free_bytes": 2093568,
            "largest_free_bytes": 2091520,
            "pending_free_bytes": 0,
            "hist": [1, 0, 0, 0, 0, 0],
        },
    },
    "live_allocations": 32,
    "top_allocations_bytes": [42949672960],
}


def record_json(**over: Any) -> str:
    return json.dumps({**BASE_RECORD, **over}, separators=(",", ":"))


def record(**over: Any) -> ProbeRecord:
    parsed = parse_record(record_json(**over))
    assert parsed.record is not None, parsed.reason
    return parsed.record


MESSAGE_100_MIB = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in <module>\n'
    "    loss = model(batch).sum()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 50.00 MiB is free. Including non-PyTorch memory, this "
    "process has 79.10 GiB memory in use. Of the allocated memory 77.50 GiB is allocated by "
    "PyTorch, and 1.06 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)
"""A 100.00 MiB request (104857600 bytes): the 1 % tolerance is exactly 1048576 bytes."""


@pytest.mark.parametrize(
    ("request_bytes", "belongs"),
    [
        (104857600, True),
        (104857600 + 1048576, True),  # exactly 1 % above: the printed request's rounding
        (104857600 + 1048577, False),
        (104857600 - 1048576, True),
        (104857600 - 1048577, False),
    ],
)
def test_a_record_belongs_to_the_failure_within_1_percent_of_its_request(
    request_bytes: int, belongs: bool
) -> None:
    line = f"gpu-auditor-probe-record {record_json(request_bytes=request_bytes)}\n"
    result = diagnose(line + MESSAGE_100_MIB)
    assert ("probe" in result.to_json_dict()) is belongs
    assert result.figures.requested_bytes == 104857600


def test_an_ok_record_without_a_request_size_belongs_to_no_failure() -> None:
    line = f"gpu-auditor-probe-record {record_json(request_bytes=None)}\n"
    assert "probe" not in diagnose(line + MESSAGE_100_MIB).to_json_dict()


def test_an_ok_record_does_not_belong_to_a_failure_that_prints_no_request() -> None:
    line = f"gpu-auditor-probe-record {record_json()}\n".encode()
    result = diagnose(line + fixture("corpus/context_oom_gpu_full.log"))
    # a raw OOM at the first CUDA call: gpu-shared since issue 24
    assert (result.kind, result.figures.requested_bytes) == ("gpu-shared", None)
    assert "probe" not in result.to_json_dict()


def test_a_record_the_probe_could_not_fill_belongs_to_any_failure_and_says_why() -> None:
    # an error record carries no request to compare: it is kept, whatever the message asked
    line = f"gpu-auditor-probe-record {record_json(status='error: no allocator hooks')}\n"
    result = diagnose(line + MESSAGE_100_MIB.replace("100.00 MiB", "300.00 MiB", 1))
    assert result.to_json_dict()["probe"]["status"] == "error"
    assert result.to_json_dict()["probe"]["verdict"]["reason"] == (
        "the probe could not read the allocator (error: no allocator hooks)"
    )


def test_a_record_printed_up_to_64_kib_before_the_failure_is_read_and_no_further() -> None:
    traceback = MESSAGE_100_MIB[: MESSAGE_100_MIB.index("torch.OutOfMemoryError")]

    def log(distance: int) -> str:
        # the record's line starts `distance` characters before the failure's line
        line = f"gpu-auditor-probe-record {record_json()}\n"
        gap = distance - len(line) - len(traceback)
        filler = ("-" * 99 + "\n") * (gap // 100) + "-" * (gap % 100 - 1) + "\n"
        return line + filler + MESSAGE_100_MIB

    for distance, read in ((65536, True), (65537, False)):
        text = log(distance)
        hit = scan_bytes(text.encode()).last
        assert hit is not None
        assert hit.precontext.startswith("gpu-auditor-probe-record ")
        assert len(hit.precontext) == distance
        assert ("probe" in diagnose(text).to_json_dict()) is read, distance


# -- the probe key: the record's own verdict beside the message's -----------------------------


def test_a_record_that_contradicts_the_message_is_shown_beside_what_the_message_says() -> None:
    # the message: 6.90 GiB reserved but unallocated for a 2 GiB request, fragmentation (after
    # steps that finished); the record: only 100 MiB free in the large pool's blocks, so no
    # setting would have helped
    rec = record(
        request_bytes=2147483648,
        device_free_bytes=1288490188,
        pools={
            "large": {
                "segments": 26,
                "segment_bytes": 82676023296,
                "free_bytes": 104857600,
                "largest_free_bytes": 52428800,
                "pending_free_bytes": 0,
                "hist": [0, 0, 3, 6, 16, 1],
            }
        },
    )
    log = PROGRESS.encode() + fixture("corpus/seed_example_fragmentation.log")
    result = diagnose(log, probe_record=rec)
    assert result.kind == "capacity"
    assert result.to_json_dict()["probe"] == {
        "status": "ok",
        "verdict": {
            "kind": "capacity-or-leak",
            "reason": "capacity-or-leak: 100.00 MiB free in the large pool's blocks + 1.20 GiB "
            "room fall short of the 2.00 GiB request",
            "pool": "large",
            "request_bytes": 2147483648,
            "cache_free_bytes": 104857600,
            "largest_free_bytes": 52428800,
            "device_free_bytes": 1288490188,
            "allowed_bytes": None,
            "reserved_bytes": 84351647744,
            "cap_room_bytes": None,
            "room_bytes": 1288490188,
            "expandable_segments": False,
        },
        "inference_kind": "fragmentation",
        "disagrees": True,
    }


def test_the_inference_beside_a_record_uses_the_node_report() -> None:
    line = f"gpu-auditor-probe-record {record_json(status='no-hooks')}\n".encode()
    log = line + fixture("corpus/context_oom_gpu_full.log")
    probe = diagnose(log, node=GPU_FULL_NODE).to_json_dict()["probe"]
    assert (probe["status"], probe["inference_kind"], probe["disagrees"]) == (
        "no-hooks",
        "gpu-shared",
        False,
    )


def test_the_inference_beside_a_record_reads_the_node_reports_pods() -> None:
    # a torch 1.x message lists no processes: 6.15 GiB outside PyTorch's 70.50 GiB is unknown
    # from the log alone, the node report's pod holding 6 GiB makes it gpu-shared (the raw OOM
    # of the test above is gpu-shared either way since issue 24)
    one_x = (
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total "
        "capacity; 70.00 GiB already allocated; 1.00 GiB free; 70.50 GiB reserved in total by "
        "PyTorch)\n"
    )
    line = f"gpu-auditor-probe-record {record_json(status='no-hooks')}\n"
    node = NodeEvidence(other_pods=(OtherPod("team-b", "nb", 6 * GiB, pid=7),))
    alone = diagnose(line + one_x).to_json_dict()["probe"]
    with_node = diagnose(line + one_x, node=node).to_json_dict()["probe"]
    assert (alone["inference_kind"], with_node["inference_kind"]) == ("unknown", "gpu-shared")


def test_the_inference_beside_a_record_reads_the_phase() -> None:
    # the seed message after steps that finished is fragmentation; failing in optimizer.step()
    # it is not (the optimizer's state is many tensors that all stay): the inference beside the
    # record reads the phase as the verdict does
    message = fixture("corpus/seed_example_fragmentation.log").decode()
    message = message[message.index("torch.OutOfMemoryError") :]
    line = f"gpu-auditor-probe-record {record_json(status='no-hooks')}\n"
    step = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 90, in <module>\n'
        "    optimizer.step()\n"
    )
    for frames, kind in (("", "fragmentation"), (step, "capacity")):
        result = diagnose(PROGRESS + line + frames + message)
        assert (result.kind, result.to_json_dict()["probe"]["inference_kind"]) == (kind, kind)


def test_the_inference_beside_a_record_uses_the_growth_series() -> None:
    probe = diagnose(fixture("heldout/leak_step_cache.log")).to_json_dict()["probe"]
    assert (probe["verdict"]["kind"], probe["inference_kind"], probe["disagrees"]) == (
        "capacity-or-leak",
        "leak",
        False,
    )


def test_the_inference_beside_a_record_uses_the_phase() -> None:
    # optimizer.step() creating its state: the idle cache is no fix there, whatever it holds
    result = diagnose(fixture("heldout/adamw_first_step.log"))
    probe = result.to_json_dict()["probe"]
    assert (result.kind, probe["inference_kind"], probe["disagrees"]) == (
        "capacity",
        "capacity",
        False,
    )


# -- a retry loop that reached zero: the figures of the last OOM it caught --------------------

RETRY_EXHAUSTED = (
    "evaluating with batch_size=1\n"
    "Traceback (most recent call last):\n"
    '  File "/app/eval.py", line 92, in main\n'
    "    ppl = evaluate()\n"
    '  File "/opt/venv/lib/python3.12/site-packages/accelerate/utils/memory.py", line 183, in '
    "decorator\n"
    '    raise RuntimeError("No executable batch size found, reached zero.")\n'
    "RuntimeError: No executable batch size found, reached zero.\n"
)


def test_a_retry_loop_gets_every_figure_of_its_last_record() -> None:
    # the real log: the last of 24 records the probe wrote before the loop gave up
    result = diagnose(fixture("heldout/retry_batch_search.log"))
    assert result.figures == Figures(
        requested_bytes=17179869184,
        total_bytes=150109880320,
        free_bytes=15396372480,
        allocated_bytes=133518625792,
        reserved_unallocated_bytes=474706944,  # reserved 133993332736 - allocated
        allowed_bytes=None,
        gpu_index=0,
    )


def test_a_retry_loop_under_a_memory_fraction_gets_the_cap_and_device_of_its_record() -> None:
    rec = record(
        device=3,
        request_bytes=17179869184,
        device_free_bytes=15396372480,
        device_total_bytes=150109880320,
        fraction=0.5,
        allowed_bytes=75054940160,
        allocated_bytes=70000000000,
        reserved_bytes=72000000000,
    )
    result = diagnose(RETRY_EXHAUSTED, probe_record=rec)
    assert result.figures == Figures(
        requested_bytes=17179869184,
        total_bytes=150109880320,
        free_bytes=15396372480,
        allocated_bytes=70000000000,
        reserved_unallocated_bytes=2000000000,
        allowed_bytes=75054940160,
        gpu_index=3,
    )
    assert result.kind == "memory-fraction-cap"


@pytest.mark.parametrize(
    ("allocated", "reserved"), [(70000000000, None), (None, 72000000000), (None, None)]
)
def test_a_retry_loops_record_missing_allocated_or_reserved_has_no_unallocated_figure(
    allocated: int | None, reserved: int | None
) -> None:
    rec = record(request_bytes=17179869184, allocated_bytes=allocated, reserved_bytes=reserved)
    result = diagnose(RETRY_EXHAUSTED, probe_record=rec)
    assert (result.detected, result.kind) == (True, "capacity")
    assert result.figures.allocated_bytes == allocated
    assert result.figures.reserved_unallocated_bytes is None
    assert result.to_json_dict()["figures"]["reserved_unallocated_bytes"] is None


def test_an_eviction_for_the_node_s_memory_is_a_host_diagnosis_worded_as_one() -> None:
    message = "The node was low on resource: memory. Container main was using 2519384Ki\x1b"
    d = diagnose_host_oom(container="main", memory_limit_bytes=None, memory_request_bytes=None,
                          evicted=message)
    assert (d.detected, d.kind) == (True, "host-oom-killed")
    assert d.summary == (
        "host-oom-killed: container 'main' was stopped (exit 137) when the kubelet evicted the "
        "pod: the node was low on host (CPU) memory, not GPU memory"
    )
    assert d.recommendation.actions[0].startswith("set the pod's memory request to what it uses")
    assert d.recommendation.actions[1].startswith("the container has no memory limit")
    host = d.to_json_dict()["host"]
    assert host["evicted"] == message.replace("\x1b", "?")
    killed = diagnose_host_oom(container="main", memory_limit_bytes=None, memory_request_bytes=None)
    assert "evicted" not in killed.to_json_dict()["host"]


U016 = Path(__file__).resolve().parents[3] / "evaluation" / "public11" / "logs" / "u-016.log"


def test_a_virtual_address_refusal_checks_the_settings_and_the_series_like_no_oom() -> None:
    """public11 u-016 (addressspace.py), with a kill line after it: no kill is named, the
    settings and the series are checked as for a log without an OOM."""
    text = U016.read_text() + "command terminated with exit code 137\n"
    result = diagnose(
        text,
        torch_version="2.9.1+cu128",
        alloc_conf="expandable_segments:True,per_process_memory_fraction:0.5",
        backend="cudaMallocAsync",
        samples=RISING,
    )
    out = result.to_json_dict()
    assert (out["detected"], out["contributing"], out["torch_version_hint"]) == (
        False, ["leak"], "2.9")
    assert out["growth"]["growth_bytes"] == 10737418240
    assert out["alloc_conf_problems"] == PROBLEMS_ON_2_9_ASYNC
    assert "killed_by_signal" not in out
    assert out["address_space_call"] == (
        "cuMemAddressReserve(&pool_addr, CUDA_POOL_VMM_MAX_SIZE, 0, 0, 0)")
    assert out["recommendation"]["actions"][0].startswith(
        "the out-of-memory code came from reserving virtual address space (cuMemAddressReserve(")


def test_a_kill_s_action_quotes_its_line() -> None:
    d = diagnose("step 1\ncommand terminated with exit code 137\n")
    assert d.recommendation.actions[0].startswith(
        "the job was killed by signal 9 (command terminated with exit code 137)")


def test_a_wrapped_failure_keeps_the_release_the_log_s_head_printed() -> None:
    """The rejoined end is scanned alone (wrapped.py): the release banner at the log's start,
    more than the end's 32 KiB before, still dates the message."""
    head = "torch 1.8.1+cu111\n" + "step 1 loss 0.5 lr 1e-4\n" * 3000
    broken = ("RuntimeError: CUDA out\nof memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB "
              "total capacity; 6.10 GiB already allocated; 13.19 MiB free; 6.24 GiB reserved in "
              "total by PyTorch)\n")
    d = diagnose(head + broken)
    assert d.detected and d.torch_version_hint == "1.8"
    assert diagnose(broken).torch_version_hint == "<=1.9"  # the wording alone


# -- issue 24, seventh round: vLLM's warm-up, told by its wrapper after the failure ------------

_WARM_UP_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total "
    "capacity of 14.58 GiB of which 33.56 MiB is free. Including non-PyTorch memory, this "
    "process has 14.54 GiB memory in use. Of the allocated memory 13.62 GiB is allocated by "
    "PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.\n"
)
_WARM_UP_WRAPPER = (
    "\nThe above exception was the direct cause of the following exception:\n\n"
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. "
    "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the "
    "engine.\n"
)


def test_vllm_s_wrapper_after_a_pytorch_oom_makes_it_the_engine_s_warm_up() -> None:
    # public18 g-007's shape (a 125M model on a 16 GB card: the budget, not the model)
    d = diagnose(_WARM_UP_OOM + _WARM_UP_WRAPPER)
    out = d.to_json_dict()
    assert (d.detected, d.kind, out["phase"]) == (True, "capacity", "engine-warm-up")
    # without the wrapper the same failure is no warm-up
    assert "phase" not in diagnose(_WARM_UP_OOM).to_json_dict()
    # the sampler's forward frames are the warm-up too
    forward = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1773, in '
        "_call_impl\n    return forward_call(*args, **kwargs)\n"
    )
    assert diagnose(forward + _WARM_UP_OOM + _WARM_UP_WRAPPER).to_json_dict()["phase"] == (
        "engine-warm-up"
    )
    assert diagnose(forward + _WARM_UP_OOM).to_json_dict()["phase"] == "forward"
    # a phase the frames name is kept (the wrapper only fills in for none, or forward)
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 7, in main\n    loss.backward()\n'
    )
    assert diagnose(frames + _WARM_UP_OOM + _WARM_UP_WRAPPER).to_json_dict()["phase"] == (
        "backward"
    )


# -- the tenth round: what may follow a HAMi refusal read as the log's end ---------------------


def test_a_tail_of_hamis_own_lines_is_the_logs_end_even_indented() -> None:
    assert core._ends_at("")
    assert core._ends_at("  [HAMI-core Info(1:1:memory.c:509)]: orig free=0\n\n")


def test_the_jobs_output_after_a_carriage_return_is_not_hamis() -> None:
    assert not core._ends_at("[HAMI-core Info(1:1:memory.c:509)]: x\rstep 5 loss 1.0\n")


def test_a_tail_as_long_as_half_the_kept_end_is_not_read_as_the_logs_end() -> None:
    line = "[HAMI-core Warn(1:1:utils.c:9)]: lock shrreg timeout\n"
    short = line * ((core.ENDS_AT_MAX_CHARS - 1) // len(line))
    assert core._ends_at(short)
    whole = line * (core.ENDS_AT_MAX_CHARS // len(line))
    exact = whole + "\n" * (core.ENDS_AT_MAX_CHARS - len(whole))  # HAMi's lines, blank ones
    assert len(exact) == core.ENDS_AT_MAX_CHARS and not core._ends_at(exact)


def test_hamis_own_failure_got_past_says_so_with_its_own_action() -> None:
    d = diagnose("[HAMI-core ERROR (pid:7 thread=1 allocator.c:115)]: cuMemoryAllocate failed "
                 "res=2\nstep 301 loss 1.2\nstep 302 loss 1.1\n")
    assert not d.detected
    assert d.summary == (
        "no out-of-memory failure ended the job: HAMi's allocation on the card it shares between "
        "pods failed once and the job went on (PyTorch frees its cache and retries)")
    assert d.recommendation.actions == (core.HAMI_CARD_HANDLED_ACTION,)
    assert d.to_json_dict()["handled_refusal"].startswith("[HAMI-core ERROR")
