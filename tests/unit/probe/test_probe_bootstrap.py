"""Real interpreter start-ups with ``PYTHONPATH=probe``: what is armed, when it attaches, what it
writes, and that the image's own ``sitecustomize`` still runs. A fake ``torch`` package stands
in for the real one (no GPU here); the GPU scripts under ``evaluation/gpu`` run the real thing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from probe_helpers import PROBE_DIR, GiB, MiB, make_fake_torch, run_python

from gpu_auditor.diagnosis.proberecord import find_record, record_verdict

pytestmark = pytest.mark.unit

ON = {"GPU_AUDITOR_PROBE": "1"}
STATE = (
    "import sys, json\n"
    "hooks = [type(f).__name__ for f in sys.meta_path if getattr(f, 'gpu_auditor_probe', 0)]\n"
    "mods = sorted(m for m in sys.modules if m == 'torch' or m.startswith('gpu_auditor_probe'))\n"
    "print(json.dumps({'hooks': hooks, 'modules': mods}))\n"
)


def state_of(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_without_the_switch_nothing_is_armed_and_nothing_imported() -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR]))
    assert out == {"hooks": [], "modules": []}


@pytest.mark.parametrize("value", ["0", "true", "yes", " 1", ""])
def test_only_the_exact_value_1_switches_it_on(value: str) -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR], env={"GPU_AUDITOR_PROBE": value}))
    assert out["hooks"] == []


def test_switched_on_it_waits_for_torch_without_importing_it() -> None:
    out = state_of(run_python(STATE, pythonpath=[PROBE_DIR], env=ON))
    assert out == {
        "hooks": ["TorchImportHook"],
        "modules": ["gpu_auditor_probe", "gpu_auditor_probe._arm"],
    }


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


def test_torch_imported_late_inside_a_function_is_still_seen(tmp_path: Path) -> None:
    code = (
        "import json, collections, email.message\n"
        "def main():\n"
        "    import torch\n"
        "    return torch\n"
        "torch = main()\n"
        "torch.cuda._lazy_init()\n"
        "print(len(torch.observers))\n"
    )
    env = {**ON, "FAKE_TORCH_CUDA": "12.4"}
    proc = run_python(code, pythonpath=[PROBE_DIR, make_fake_torch(tmp_path)], env=env)
    assert (proc.returncode, proc.stdout.strip()) == (0, "1")


OOM_TWICE = (
    "import torch\n"
    "torch.cuda._lazy_init()\n"
    "observe = torch.observers[0]\n"
    "print(observe(0, {req}, 140 * 2**30, {free}))\n"
    "observe(0, {req}, 140 * 2**30, {free})\n"
)


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


UNCAUGHT = (
    "import torch\n"
    "torch.cuda._lazy_init()\n"
    "raise torch.cuda.OutOfMemoryError('Allocation on device 0 would exceed allowed memory.')\n"
)


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


# -- the image's own sitecustomize ----------------------------------------------------------


def image_sitecustomize(folder: Path, body: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os\nIMAGE = True\nprint('image sitecustomize ran', flush=True)\n" + body
    )
    return folder


CHECK_CHAIN = "import sitecustomize, sys\nprint(getattr(sitecustomize, 'IMAGE', False))\n"


@pytest.mark.parametrize("switch", [{}, ON])
def test_the_shadowed_sitecustomize_runs_once_and_keeps_its_name(tmp_path: Path, switch) -> None:
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN, pythonpath=[PROBE_DIR, other], env=switch)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["image sitecustomize ran", "True"]


def test_a_second_copy_of_the_probe_further_on_never_loops(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(PROBE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN + STATE, pythonpath=[PROBE_DIR, copy, other], env=ON)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert lines[:2] == ["image sitecustomize ran", "True"]
    assert json.loads(lines[2])["hooks"] == ["TorchImportHook"]  # armed once


def test_an_image_sitecustomize_that_fails_is_reported_as_python_would(tmp_path: Path) -> None:
    other = image_sitecustomize(tmp_path / "image", "raise KeyError('CONFIG')\n")
    proc = run_python(STATE, pythonpath=[PROBE_DIR, other], env=ON)
    assert proc.returncode == 0
    assert (
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nKeyError: 'CONFIG'"
        in proc.stderr
    )
    assert json.loads(proc.stdout.strip().split("\n")[-1])["hooks"] == ["TorchImportHook"]


def test_an_image_sitecustomize_before_ours_on_the_path_is_the_one_python_runs(
    tmp_path: Path,
) -> None:
    other = image_sitecustomize(tmp_path / "image")
    proc = run_python(CHECK_CHAIN + STATE, pythonpath=[other, PROBE_DIR], env=ON)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().split("\n")[-1])["hooks"] == []  # ours never ran


@pytest.mark.parametrize("python", ["python3.8", "python3.12"])
def test_the_probe_runs_on_the_pythons_jobs_use(tmp_path: Path, python: str) -> None:
    import shutil
    import subprocess

    found = [str(p) for p in sorted(Path.home().glob(f".pyenv/versions/*/bin/{python}"))]
    found += [w for w in [shutil.which(python)] if w]
    usable = [e for e in found if subprocess.run([e, "-V"], capture_output=True).returncode == 0]
    if not usable:
        pytest.skip(f"{python} is not installed here")
    exe = usable[0]
    target = tmp_path / "record"
    other = image_sitecustomize(tmp_path / "image")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("GPU_AUDITOR_")}
    env.update(ON, FAKE_TORCH_CUDA="12.4", GPU_AUDITOR_PROBE_PATH=str(target))
    env["PYTHONPATH"] = f"{PROBE_DIR}:{make_fake_torch(tmp_path)}:{other}"
    code = OOM_TWICE.format(req=GiB, free=0)
    proc = subprocess.run([exe, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("image sitecustomize ran\n")
    parsed = find_record(target.read_bytes())
    assert parsed is not None and parsed.record is not None and parsed.record.oom_count == 2
