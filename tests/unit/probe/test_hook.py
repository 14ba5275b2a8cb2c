"""When the probe attaches and what it does at an OOM (``_hook``): queued at import, attached at
CUDA's initialisation, never on a CPU-only build; each OOM replaces the record; an uncaught OOM
without an observer still leaves one. Real start-ups with ``PYTHONPATH=probe`` and a fake
``torch``, then the observer in this process."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_auditor_probe import _hook

from gpu_auditor.diagnosis.proberecord import find_record, record_verdict

from .probe_helpers import (
    ON,
    OOM_TWICE,
    PROBE_DIR,
    GiB,
    MiB,
    fake_torch,
    make_fake_torch,
    run_python,
    state,
)

pytestmark = pytest.mark.unit


UNCAUGHT = (
    "import torch\n"
    "torch.cuda._lazy_init()\n"
    "raise torch.cuda.OutOfMemoryError('Allocation on device 0 would exceed allowed memory.')\n"
)


def test_attach_is_queued_at_import_and_runs_at_cuda_initialisation(tmp_path: Path) -> None:
    code = (
        "import sys, importlib\n"
        "torch = importlib.import_module('torch')\n"
        "import gpu_auditor_probe\n"
        "gpu_auditor_probe.install()  # a second install is a no-op\n"
        "from gpu_auditor_probe import _hook\n"
        "print(len(torch.observers), len(torch.cuda._queued_calls),\n"
        "      any(getattr(f, 'gpu_auditor_probe', 0) for f in sys.meta_path),\n"
        "      'exec_module' in vars(torch.__spec__.loader))\n"
        "torch.cuda._lazy_init()\n"
        "print(len(torch.observers), torch.observers[0] is _hook.observe, _hook.STATE.status)\n"
    )
    env = {**ON, "FAKE_TORCH_CUDA": "12.4"}
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["0 1 False False", "1 True ok"]


def test_a_build_without_cuda_is_left_alone(tmp_path: Path) -> None:
    code = "import torch\nprint(len(torch.cuda._queued_calls))\n"
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=ON)
    assert (proc.returncode, proc.stdout.strip()) == (0, "0")


def test_each_oom_replaces_the_record_with_the_next_count(tmp_path: Path) -> None:
    target = tmp_path / "termination-log"
    target.write_text("what the job wrote before\n" * 300)
    env = {**ON, "FAKE_TORCH_CUDA": "12.4", "GPU_AUDITOR_PROBE_PATH": str(target)}
    code = OOM_TWICE.format(req=1 * GiB, free=640 * MiB)
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None"  # the observer returns nothing into the allocator
    content = target.read_bytes()
    assert content.count(b"\n") == 1 and len(content) <= 4000
    parsed = find_record(content)
    assert parsed is not None and parsed.record is not None, parsed
    record = parsed.record
    assert (record.oom_count, record.request_bytes, record.device_free_bytes) == (2, GiB, 640 * MiB)
    assert (record.torch_version, record.status, record.backend) == ("9.9.9+fake", "ok", "native")
    # the fake snapshot: 100 segments of 20 MiB, each 12 MiB free beside 8 MiB live
    assert record.large is not None
    assert (record.large.free_bytes, record.large.largest_free_bytes) == (1200 * MiB, 12 * MiB)
    # need 384 MiB of the 1200 MiB cache (0.32 <= 0.40): a setting reclaims that much
    assert record_verdict(record).kind == "fragmentation"
    assert proc.stderr.count("gpu-auditor-probe-record ") == 2  # one marker line per OOM


def test_without_a_path_the_record_goes_to_stderr_only(tmp_path: Path) -> None:
    env = {**ON, "FAKE_TORCH_CUDA": "12.4", "GPU_AUDITOR_PROBE_PATH": ""}
    code = OOM_TWICE.format(req=1 * GiB, free=0)
    proc = run_python(
        code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    parsed = find_record(proc.stderr)
    assert parsed is not None and parsed.record is not None and parsed.record.oom_count == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torch"]


def test_stderr_line_can_be_switched_off(tmp_path: Path) -> None:
    target = tmp_path / "record"
    env = {**ON, "FAKE_TORCH_CUDA": "12.4", "GPU_AUDITOR_PROBE_PATH": str(target),
           "GPU_AUDITOR_PROBE_STDERR": "0"}  # fmt: skip
    proc = run_python(
        OOM_TWICE.format(req=GiB, free=0),
        pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)],
        env=env,
    )
    assert proc.returncode == 0 and "gpu-auditor-probe-record" not in proc.stderr
    assert find_record(target.read_bytes()) is not None


@pytest.mark.parametrize(
    ("env", "status"),
    [
        ({"FAKE_TORCH_BACKEND": "cudaMallocAsync", "FAKE_TORCH_REFUSE": "1"}, "async-backend"),
        ({"FAKE_TORCH_NO_HOOKS": "1"}, "no-hooks"),
    ],
)
def test_without_an_observer_an_uncaught_oom_still_leaves_a_record_saying_why(
    tmp_path: Path, env: dict[str, str], status: str
) -> None:
    target = tmp_path / "record"
    full = {**ON, **env, "FAKE_TORCH_CUDA": "12.4", "GPU_AUDITOR_PROBE_PATH": str(target)}
    proc = run_python(UNCAUGHT, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=full)
    assert proc.returncode == 1
    assert "OutOfMemoryError: Allocation on device 0" in proc.stderr  # the job's traceback stays
    parsed = find_record(target.read_bytes())
    assert parsed is not None and parsed.record is not None
    record = parsed.record
    assert (record.status, record.allocated_bytes, record.reserved_bytes) == (
        status,
        5 * GiB,
        7 * GiB,
    )
    assert (record.device_free_bytes, record.device_total_bytes) == (3 * GiB, 140 * GiB)
    assert record_verdict(record).kind == "unknown"


def test_an_uncaught_error_that_is_not_an_oom_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "record"
    env = {
        **ON,
        "FAKE_TORCH_CUDA": "12.4",
        "FAKE_TORCH_NO_HOOKS": "1",
        "GPU_AUDITOR_PROBE_PATH": str(target),
    }
    code = "import torch\ntorch.cuda._lazy_init()\nraise ValueError('bad batch')\n"
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env)
    assert proc.returncode == 1 and "ValueError: bad batch" in proc.stderr
    assert not target.exists()


# The observer and what counts as an OOM, in this process with a fake torch.

def test_the_observer_never_raises_whatever_torch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    broken = fake_torch([], snapshot_error=SystemExit(3))
    monkeypatch.setitem(sys.modules, "torch", broken)
    monkeypatch.setenv("GPU_AUDITOR_PROBE_PATH", "/nonexistent-dir/record")
    monkeypatch.setenv("GPU_AUDITOR_PROBE_STDERR", "0")
    monkeypatch.setattr(_hook, "STATE", state(count=0))
    assert _hook.observe(0, 2 * GiB, 140 * GiB, 0) is None
    monkeypatch.delitem(sys.modules, "torch")
    assert _hook.observe(0, 2 * GiB, 140 * GiB, 0) is None  # torch gone: KeyError, swallowed
    assert _hook.STATE.oom_count == 2


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("CUDA error: out of memory"), True),
        (RuntimeError("Allocation on device 0 would exceed allowed memory. (out of memory)"), True),
        (type("OutOfMemoryError", (RuntimeError,), {})("x"), True),
        (ValueError("shape mismatch"), False),
        (MemoryError(), False),  # host memory: not ours
    ],
)
def test_is_oom(exc: BaseException, expected: bool) -> None:
    assert _hook.is_oom(exc) is expected


def test_an_oom_wrapped_by_another_error_is_recognised() -> None:
    try:
        try:
            raise RuntimeError("CUDA out of memory.")
        except RuntimeError as inner:
            raise ValueError("step failed") from inner
    except ValueError as outer:
        assert _hook.is_oom(outer)
