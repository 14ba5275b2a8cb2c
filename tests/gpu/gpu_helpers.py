"""What the GPU tests share: torch with CUDA, checked once in a child process (this process
never creates a CUDA context), and a skip that a GPU runner turns into a failure.

``GPU_AUDITOR_REQUIRE_GPU=1``: every reason to skip a GPU test (no driver, no CUDA device, no
torch) fails it instead. ``GPU_AUDITOR_REQUIRE_TORCH=1``: a missing torch fails it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest


def skip_or_fail(reason: str, *, torch: bool = False) -> None:
    switches = ["GPU_AUDITOR_REQUIRE_GPU"] + (["GPU_AUDITOR_REQUIRE_TORCH"] if torch else [])
    on = [s for s in switches if os.environ.get(s) == "1"]
    if on:
        pytest.fail(f"gpu test failed: {reason}, and {on[0]}=1", pytrace=False)
    pytest.skip(f"gpu test skipped: {reason}")


@functools.cache
def _torch_cuda() -> tuple[str, bool] | None:
    """None when torch sees a CUDA device; else (reason, whether torch itself is missing)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        missing = "ModuleNotFoundError" in probe.stderr
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"torch is not importable ({last})", missing
    if probe.stdout.strip() != "True":
        return "torch reports no CUDA device", False
    return None


def require_torch_cuda() -> None:
    found = _torch_cuda()
    if found is not None:
        reason, missing = found
        skip_or_fail(reason, torch=missing)
