"""gpu-auditor probe: the CUDA caching allocator's state at the moment of an out-of-memory error.

Loaded at interpreter start (``sitecustomize.py`` on ``PYTHONPATH``, or the ``.pth`` file a pip
install puts in site-packages) and active only when ``GPU_AUDITOR_PROBE=1``. It never imports
torch itself: a post-import hook waits for the job's own ``import torch``, then queues the
attachment of PyTorch's out-of-memory observer for CUDA's lazy initialisation, so the job's
``PYTORCH_CUDA_ALLOC_CONF``, fork safety and start-up time are what they were without it.

When an allocation fails, the observer writes one compact JSON record (``_record``) under 4 KiB
to the termination-message path (``_write``) and one marker line to stderr. Every path is
wrapped: the probe never raises into the job.

Environment:
  GPU_AUDITOR_PROBE=1          switch it on (anything else: off, nothing is done)
  GPU_AUDITOR_PROBE_PATH       where the record goes (default /dev/termination-log, written only
                               when it exists, as kubelet mounts it); empty: no file
  GPU_AUDITOR_PROBE_STDERR=0   do not print the marker line to stderr
  GPU_AUDITOR_PROBE_MAX_BYTES  bound of the record line (default 4000; 1024..4096)
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

ENV_SWITCH = "GPU_AUDITOR_PROBE"
ENV_PATH = "GPU_AUDITOR_PROBE_PATH"
ENV_STDERR = "GPU_AUDITOR_PROBE_STDERR"
ENV_MAX_BYTES = "GPU_AUDITOR_PROBE_MAX_BYTES"

_installed = False


def enabled() -> bool:
    """True when the job opted in with ``GPU_AUDITOR_PROBE=1``."""
    return os.environ.get(ENV_SWITCH, "") == "1"


def install() -> bool:
    """Arm the probe once per process; True when armed now or before. Never raises."""
    global _installed
    if _installed:
        return True
    try:
        from . import _hook

        _hook.arm()
        _installed = True
    except Exception:
        return False
    return True


def install_if_enabled() -> bool:
    """``install()`` when ``GPU_AUDITOR_PROBE=1``; the entry point of the bootstrap files."""
    try:
        return enabled() and install()
    except Exception:
        return False
