"""When to attach: after the job imports torch, at CUDA's lazy initialisation; never earlier.

``torch._C._cuda_attach_out_of_memory_observer`` initialises CUDA itself, and CUDA reads
``PYTORCH_CUDA_ALLOC_CONF`` once, at initialisation. Attaching at import time would fix the
allocator settings before the job's code runs (many jobs set the variable after
``import torch``) and would break ``fork`` for DataLoader workers. So:

1. ``_arm`` calls ``on_torch_imported`` right after the job's ``import torch``.
2. ``torch.cuda._lazy_call(attach)`` queues the attachment for the job's first CUDA use (it runs
   at once if CUDA is already initialised). A CPU-only build (``torch.version.cuda`` and
   ``.hip`` both None) is left alone.
3. ``attach`` hands the allocator ``observe``. Where the release has no observer, or the backend
   refuses it (``cudaMallocAsync``), a ``sys.excepthook`` wrapper writes a record that says
   so when the job dies of an out-of-memory error.

Nothing here raises into the job: each entry point catches everything.
"""

from __future__ import annotations

import _thread
import contextlib
import sys
from typing import Any

TORCH = "torch"
MAX_CHAIN = 8  # causes/contexts followed when looking for an OOM behind another exception


class ProbeState:
    """What the probe knows about this process; one instance, shared with ``_record``."""

    def __init__(self) -> None:
        self.status = "ok"
        self.backend: str | None = None
        self.oom_count = 0
        self.queued = False
        self.attached = False
        self.observer_wrote = False
        self.lock = _thread.RLock()  # re-entrant: an OOM inside the observer must not deadlock


STATE = ProbeState()


def on_torch_imported(torch: Any) -> None:
    """Queue ``attach`` for CUDA initialisation; nothing on a build without CUDA or ROCm."""
    if STATE.queued:
        return
    STATE.queued = True
    try:
        version = getattr(torch, "version", None)
        if getattr(version, "cuda", None) is None and getattr(version, "hip", None) is None:
            return
        lazy_call = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
        if lazy_call is None:
            STATE.status = "no-hooks"
            install_excepthook()
            return
        lazy_call(attach)
    except Exception:
        pass


def attach() -> None:
    """At CUDA initialisation (inside ``torch.cuda._lazy_init``): hand the allocator ``observe``."""
    try:
        torch = sys.modules[TORCH]
        from . import _record, _write  # imported now, not on the out-of-memory path

        del _write
        STATE.backend = _record.allocator_backend(torch)
        attach_observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        native = STATE.backend in (None, "native")
        if attach_observer is None:
            STATE.status = "no-hooks"
        elif not native:
            # cudaMallocAsync (and pluggable allocators) refuse observers and never call one;
            # try anyway, in case a later release does, but the record says the snapshot does
            # not describe that pool, and the excepthook below still covers the uncaught OOM
            STATE.status = "async-backend" if STATE.backend == "cudaMallocAsync" else "no-hooks"
            with contextlib.suppress(Exception):
                attach_observer(observe)
        else:
            attach_observer(observe)
            STATE.attached = True
        if not STATE.attached:
            install_excepthook()
    except Exception as exc:
        STATE.status = "error: " + _short(exc)
        with contextlib.suppress(Exception):
            install_excepthook()


def observe(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
    """The allocator's out-of-memory observer: build and publish one record. Never raises."""
    try:
        with STATE.lock:
            STATE.oom_count += 1
            from . import _record, _write

            record = _record.at_oom(
                sys.modules[TORCH], STATE, device, alloc, device_alloc, device_free
            )
            _write.publish(record)
            STATE.observer_wrote = True
    except BaseException:
        pass


def install_excepthook() -> None:
    """Chain ``sys.excepthook``: on an uncaught OOM with no observer record, write a short one."""
    previous = sys.excepthook
    if getattr(previous, "gpu_auditor_probe", False):
        return

    def hook(exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if not STATE.observer_wrote and is_oom(exc):
                from . import _record, _write

                with STATE.lock:
                    STATE.oom_count += 1
                    _write.publish(_record.at_exit(sys.modules.get(TORCH), STATE))
        except BaseException:
            pass
        previous(exc_type, exc, tb)

    hook.gpu_auditor_probe = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def is_oom(exc: Any) -> bool:
    """An out-of-memory error, or one caused by it (a few wrappers deep)."""
    seen = 0
    while exc is not None and seen < MAX_CHAIN:
        names = {c.__name__ for c in type(exc).__mro__}
        if "OutOfMemoryError" in names:
            return True
        text = str(exc)[:2000] if isinstance(exc, Exception) else ""
        if "out of memory" in text or "would exceed allowed memory" in text:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:80]
