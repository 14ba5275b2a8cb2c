"""Test groups: `unit` (in-process), `integration` (real local control plane), `gpu` (a real
NVIDIA GPU and driver). GPU tests are skipped where no NVIDIA driver is installed, with the
reason shown; ``GPU_AUDITOR_REQUIRE_GPU=1`` (set on a GPU runner) turns that skip into a
failure. An NVML that is installed but fails (a broken driver, a pynvml that does not import)
fails the GPU tests everywhere: it is what they are there to catch, never a reason to skip.
"""

from __future__ import annotations

import functools
import os

import pytest

REQUIRE_GPU = "GPU_AUDITOR_REQUIRE_GPU"
_FAIL = pytest.StashKey[str]()


@functools.cache
def _nvml_state() -> tuple[str, str] | None:
    """None when NVML answers with a GPU; ("absent", why) where no NVIDIA driver is installed;
    ("broken", why) when it is installed and fails."""
    try:
        import pynvml  # nvidia-ml-py, a dependency: failing to import it is a broken install
    except ImportError as exc:
        return "broken", f"pynvml does not import ({exc})"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded) as exc:
        return "absent", f"no NVIDIA driver here (NVML: {type(exc).__name__})"
    except pynvml.NVMLError as exc:
        return "broken", f"NVML is installed but fails: {type(exc).__name__}: {exc}"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return None if count else ("absent", "NVML reports no GPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "gpu" not in item.keywords or (state := _nvml_state()) is None:
            continue
        what, reason = state
        if what == "broken":
            item.stash[_FAIL] = f"gpu test failed: {reason}"
        elif os.environ.get(REQUIRE_GPU) == "1":
            item.stash[_FAIL] = f"gpu test failed: {reason}, and {REQUIRE_GPU}=1"
        else:
            item.add_marker(pytest.mark.skip(reason=f"gpu test skipped: {reason}"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _FAIL in item.stash:
        pytest.fail(item.stash[_FAIL], pytrace=False)
