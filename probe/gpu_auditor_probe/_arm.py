"""Waiting for torch without importing it: the only module of the probe loaded at start-up.

``arm()`` puts a finder first on ``sys.meta_path`` that answers only for ``torch``: it finds the
spec through the other finders, wraps that one loader's ``exec_module``, and removes itself, so
later imports pay nothing. After torch has executed, ``_hook.on_torch_imported`` runs (its
import costs nothing beside torch's). No typing or threading imports here, and no
``from __future__``: each costs start-up time in every Python process of the container.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TORCH = "torch"
MARK = "gpu_auditor_probe"  # attribute naming our finder in sys.meta_path
_armed: "list[bool]" = []  # non-empty once arm() ran: a second install() is a no-op


class TorchImportHook:
    """A meta path finder that calls ``_hook.on_torch_imported(torch)`` once torch executed."""

    gpu_auditor_probe = True

    def __init__(self) -> None:
        self._busy = False

    def find_spec(self, name: str, path: "Any" = None, target: "Any" = None) -> "Any":
        if name != TORCH or self._busy:
            return None
        try:
            return self._wrap(self._find_elsewhere(name, path, target))
        except Exception:
            return None  # the normal finders run next, as if we were not there

    def _find_elsewhere(self, name: str, path: "Any", target: "Any") -> "Any":
        self._busy = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    return spec
            return None
        finally:
            self._busy = False

    def _wrap(self, spec: "Any") -> "Any":
        loader = getattr(spec, "loader", None) if spec is not None else None
        original = getattr(loader, "exec_module", None)
        if loader is None or original is None:
            return None

        def exec_module(module: "Any") -> None:
            try:
                original(module)
            finally:
                try:  # noqa: SIM105 (no contextlib import at start-up)
                    del loader.exec_module  # the loader is the job's again
                except Exception:
                    pass
            torch_imported(module)

        loader.exec_module = exec_module  # a loader without __dict__ raises: left unwrapped
        remove()
        return spec


def torch_imported(torch: "Any") -> None:
    try:
        from . import _hook

        _hook.on_torch_imported(torch)
    except Exception:
        pass


def remove() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, MARK, False)]


def arm() -> None:
    """Wait for torch, or act now if the job (or the image) already imported it. Once."""
    if _armed:
        return
    _armed.append(True)
    torch = sys.modules.get(TORCH)
    if torch is not None and hasattr(torch, "cuda"):
        torch_imported(torch)
        return
    sys.meta_path.insert(0, TorchImportHook())
