"""Shared pieces for the probe tests: a fake ``torch`` (a package on disk, for real
interpreter start-ups, and an in-process object for the record builder) and snapshot segments
shaped like ``torch.cuda.memory._snapshot()``'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MiB = 1024**2
GiB = 1024**3
PROBE_DIR = Path(__file__).resolve().parents[3] / "probe"


def segment(
    blocks: list[tuple[int, str]],
    *,
    segment_type: str = "large",
    device: int = 0,
    pool_id: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """One snapshot segment from (size, state) blocks; its size is their sum."""
    return {
        "device": device,
        "address": 0,
        "total_size": sum(size for size, _ in blocks),
        "allocated_size": sum(size for size, state in blocks if state == "active_allocated"),
        "stream": 0,
        "segment_type": segment_type,
        "segment_pool_id": pool_id,
        "is_expandable": False,
        "blocks": [{"size": s, "requested_size": s, "state": st, "frames": []} for s, st in blocks],
    }


def pinned_segments(count: int) -> list[dict[str, Any]]:
    """frag_pinned's pattern: each 20 MiB segment keeps one live 8 MiB block, 12 MiB free."""
    return [segment([(8 * MiB, "active_allocated"), (12 * MiB, "inactive")]) for _ in range(count)]


def fake_torch(
    segments: list[dict[str, Any]],
    *,
    total: int = 140 * GiB,
    allocated: int = 0,
    reserved: int = 0,
    fraction: float | None = None,
    settings: dict[str, Any] | None = None,
    backend: str = "native",
    snapshot_error: Exception | None = None,
) -> Any:
    """An object with the few torch calls the record builder makes."""

    def snapshot() -> dict[str, Any]:
        if snapshot_error is not None:
            raise snapshot_error
        out: dict[str, Any] = {"segments": segments, "device_traces": []}
        if settings is not None:
            out["allocator_settings"] = settings
        return out

    def get_fraction(device: int) -> float:
        if fraction is None:
            raise RuntimeError("no such call on this release")
        return fraction

    stats = {"allocated_bytes.all.current": allocated, "reserved_bytes.all.current": reserved}
    cuda = SimpleNamespace(
        mem_get_info=lambda device=None: (1 * GiB, total),
        memory_stats=lambda device=None: dict(stats),
        memory=SimpleNamespace(_snapshot=snapshot),
        get_allocator_backend=lambda: backend,
        is_initialized=lambda: True,
        current_device=lambda: 0,
    )
    return SimpleNamespace(
        __version__="2.11.0+cu130",
        cuda=cuda,
        _C=SimpleNamespace(_cuda_getMemoryFraction=get_fraction),
    )


FAKE_TORCH_INIT = textwrap.dedent(
    '''
    """A stand-in for torch on disk: what the probe's hook and attach touch, nothing more."""
    import os, sys, types
    __version__ = "9.9.9+fake"
    version = types.SimpleNamespace(cuda=os.environ.get("FAKE_TORCH_CUDA") or None, hip=None)
    observers = []

    def _attach(cb):
        if os.environ.get("FAKE_TORCH_REFUSE"):
            raise RuntimeError("cudaMallocAsync does not yet support attachOutOfMemoryObserver")
        observers.append(cb)

    _C = types.SimpleNamespace()
    if not os.environ.get("FAKE_TORCH_NO_HOOKS"):
        _C._cuda_attach_out_of_memory_observer = _attach
    _C._cuda_getMemoryFraction = lambda device: 1.0
    from . import cuda
    '''
)

FAKE_TORCH_CUDA = textwrap.dedent(
    """
    import os
    _queued_calls = []
    _initialized = False

    def _lazy_call(fn, **kwargs):
        if _initialized:
            fn()
        else:
            _queued_calls.append(fn)

    def _lazy_init():
        global _initialized
        if not _initialized:
            _initialized = True
            for fn in _queued_calls:
                fn()

    def is_initialized():
        return _initialized

    def current_device():
        return 0

    def get_allocator_backend():
        return os.environ.get("FAKE_TORCH_BACKEND", "native")

    def mem_get_info(device=None):
        return (3 * 2**30, 140 * 2**30)

    def memory_stats(device=None):
        return {"allocated_bytes.all.current": 5 * 2**30, "reserved_bytes.all.current": 7 * 2**30}

    class OutOfMemoryError(RuntimeError):
        pass

    class memory:
        @staticmethod
        def _snapshot():
            blocks = [{"size": 8 << 20, "state": "active_allocated"},
                      {"size": 12 << 20, "state": "inactive"}]
            seg = {"device": 0, "total_size": 20 << 20, "segment_type": "large",
                   "segment_pool_id": (0, 0), "blocks": blocks}
            return {"segments": [dict(seg) for _ in range(100)],
                    "allocator_settings": {"expandable_segments": False,
                                           "PYTORCH_CUDA_ALLOC_CONF": ""}}
    """
)


def make_fake_torch(root: Path) -> Path:
    """Write the fake torch package under ``root``; return ``root`` (put it on PYTHONPATH)."""
    pkg = root / "torch"
    (pkg / "cuda").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH_INIT)
    (pkg / "cuda" / "__init__.py").write_text(FAKE_TORCH_CUDA)
    return root


def run_python(
    code: str,
    *,
    pythonpath: list[Path | str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter with only the given PYTHONPATH and probe variables."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("GPU_AUDITOR_", "FAKE_TORCH_"))
    }
    clean.pop("PYTHONPATH", None)
    clean["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean, cwd=cwd, timeout=60
    )


# -- real interpreter start-ups ----------------------------------------------------------------

ON = {"GPU_AUDITOR_PROBE": "1"}
STATE = (
    "import sys, json\n"
    "hooks = [type(f).__name__ for f in sys.meta_path if getattr(f, 'gpu_auditor_probe', 0)]\n"
    "mods = sorted(m for m in sys.modules if m == 'torch' or m.startswith('gpu_auditor_probe'))\n"
    "print(json.dumps({'hooks': hooks, 'modules': mods}))\n"
)
"""Run in the started interpreter: the probe's finders on sys.meta_path and its loaded modules."""


def state_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
OOM_TWICE = (
    "import torch\n"
    "torch.cuda._lazy_init()\n"
    "observe = torch.observers[0]\n"
    "print(observe(0, {req}, 140 * 2**30, {free}))\n"
    "observe(0, {req}, 140 * 2**30, {free})\n"
)
"""A job that hits two OOMs (``.format(req=..., free=...)``)."""


def state(backend: str | None = "native", status: str = "ok", count: int = 1) -> Any:
    """The probe's state (``_hook.ProbeState``) at an OOM."""
    from gpu_auditor_probe import _hook

    s = _hook.ProbeState()
    s.backend, s.status, s.oom_count = backend, status, count
    return s
