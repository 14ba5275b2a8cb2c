"""gpu-auditor probe bootstrap: arm the probe when GPU_AUDITOR_PROBE=1, then run the
sitecustomize this file shadows (see README.md). Kept small and free of imports: Python
compiles it at every start where bytecode is not written (PYTHONDONTWRITEBYTECODE=1)."""


def _gpu_auditor_probe_boot() -> None:
    import os
    import sys

    if os.environ.get("GPU_AUDITOR_PROBE") == "1":
        try:  # noqa: SIM105 (no contextlib import at start-up)
            __import__("gpu_auditor_probe").install()
        except Exception:
            pass
    # The next sitecustomize, as ddtrace's bootstrap finds it: on the sys.path entries after
    # this folder only (a second copy of the probe further on can never lead back here; paths
    # compare as absolute paths, no realpath syscalls), run under the name sitecustomize. Its
    # errors propagate to site, which reports them as it would have without the probe.
    try:
        here = os.path.normcase(os.path.dirname(os.path.abspath(__file__)))
        keys = [os.path.normcase(os.path.abspath(e or os.curdir)) if isinstance(e, str) else ""
                for e in sys.path]  # fmt: skip
        start = keys.index(here) + 1 if here in keys else 0
        rest = [e for e, k in zip(sys.path[start:], keys[start:]) if k and k != here]  # noqa: B905
        # importlib.machinery.PathFinder and importlib.util.module_from_spec live in these two
        # modules, which every interpreter has loaded already; import them only if renamed
        finder = getattr(sys.modules.get("_frozen_importlib_external"), "PathFinder", None)
        if finder is None:
            import importlib.machinery

            finder = importlib.machinery.PathFinder
        spec = finder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        new_module = getattr(sys.modules.get("_frozen_importlib"), "module_from_spec", None)
        if new_module is None:
            import importlib.util

            new_module = importlib.util.module_from_spec
        module = new_module(spec)
    except Exception:
        return
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        raise


_gpu_auditor_probe_boot()
del _gpu_auditor_probe_boot
