"""Test groups: `unit` (in-process), `integration` (real local control plane), `gpu` (a real
NVIDIA GPU and driver). GPU tests are skipped here unless NVML initialises, with the reason shown.
"""

from __future__ import annotations

import functools

import pytest


@functools.cache
def _nvml_unavailable_reason() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:
        return f"no NVIDIA GPU here (NVML: {type(exc).__name__}: {exc})"
    return None if count else "NVML reports no GPU"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "gpu" in item.keywords and (reason := _nvml_unavailable_reason()):
            item.add_marker(pytest.mark.skip(reason=f"gpu test skipped: {reason}"))
