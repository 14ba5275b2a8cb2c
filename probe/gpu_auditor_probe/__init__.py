"""gpu-auditor probe: the CUDA caching allocator's state at an out-of-memory error (README.md).

Armed at interpreter start (``sitecustomize.py`` on ``PYTHONPATH``, or the ``.pth`` line of a
pip install) only when ``GPU_AUDITOR_PROBE=1``. Modules: ``_arm`` waits for the job's own
``import torch`` (the only part loaded at start); ``_hook`` attaches the observer at CUDA's lazy
initialisation and handles an OOM; ``_record`` builds the record; ``_write`` publishes it.
"""

__version__ = "0.1.0"

ENV_SWITCH = "GPU_AUDITOR_PROBE"
ENV_PATH = "GPU_AUDITOR_PROBE_PATH"
ENV_STDERR = "GPU_AUDITOR_PROBE_STDERR"
ENV_MAX_BYTES = "GPU_AUDITOR_PROBE_MAX_BYTES"


def install() -> bool:
    """Arm the probe (once per process; a second call is a no-op). Never raises."""
    try:
        from . import _arm

        _arm.arm()
    except Exception:
        return False
    return True
