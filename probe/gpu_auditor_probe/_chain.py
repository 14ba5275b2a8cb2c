"""Run the ``sitecustomize`` our own one shadows, so the image's start-up code still runs.

Python imports only the first ``sitecustomize`` on ``sys.path``; putting the probe's folder on
``PYTHONPATH`` puts ours first (Debian and Ubuntu Pythons ship one in the standard library's
folder; some images add one in site-packages). As ddtrace's bootstrap does, we then look for
the next one, on the ``sys.path`` entries after our folder only (so a second copy of the probe
further on can never lead back to us), and execute it as ``sitecustomize``. Its errors propagate
to ``site``, which reports them exactly as it would have without the probe.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~10 ms at interpreter start: only the type checker reads it
if TYPE_CHECKING:
    from typing import Any

NAME = "sitecustomize"


def _key(entry: str) -> str | None:
    """Entries compare as absolute paths (no realpath: a few syscalls each at every start-up; a
    copy reached through a link is only run once more, from where it stands, and stops)."""
    try:
        return os.path.normcase(os.path.abspath(entry or os.curdir))
    except (OSError, ValueError):
        return None


def entries_after(folder: str, path: list[str]) -> list[str]:
    """The ``path`` entries after the first one that is ``folder``, without ``folder`` again."""
    ours = _key(folder)
    keys = [_key(e) if isinstance(e, str) else None for e in path]
    start = keys.index(ours) + 1 if ours in keys else 0
    return [
        e
        for e, k in zip(path[start:], keys[start:])  # noqa: B905 (strict= is 3.10+; jobs run 3.8+)
        if isinstance(e, str) and k != ours
    ]


def find_next(our_file: str, path: list[str] | None = None) -> Any:
    """The spec of the next ``sitecustomize`` after ``our_file``'s folder, or None."""
    from importlib.machinery import PathFinder

    rest = entries_after(
        os.path.dirname(os.path.abspath(our_file)), list(sys.path if path is None else path)
    )
    return PathFinder.find_spec(NAME, rest)


def run_next(our_file: str) -> None:
    """Execute the next ``sitecustomize`` as the module of that name; its errors propagate."""
    try:
        spec = find_next(our_file)
    except Exception:
        return
    if spec is None or spec.loader is None:
        return
    from importlib._bootstrap import module_from_spec  # importlib.util's, without its imports

    module = module_from_spec(spec)
    ours = sys.modules.get(NAME)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules[NAME] = ours
        raise
