#!/usr/bin/env python3
"""Run held-out set D on a real GPU with set B's runner: baseline, expandable_segments, each fix.

Twenty-one runs (seven jobs x three variants), one process each, variant-major; output as set B's
runner writes it: ``DIR/heldout_d.json``, ``DIR/logs/<scenario>__<variant>.log``,
``DIR/gpu-heldout-d.tar.gz``. Needs python3 with torch and an otherwise idle CUDA GPU sized like an
H200 (~140 GiB: the jobs size their ballasts from ``torch.cuda.mem_get_info()``, but some needs
are fixed sizes chosen for that total); no CuPy, no network.

    python3 evaluation/gpu/heldout_d/run.py --out DIR [--deadline-s 240] [--only a,b]
    python3 evaluation/gpu/heldout_d/run.py --out DIR --dry-run-cpu   # tiny sizes, no GPU
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> ModuleType:
    """Import a file under its own module name (both folders have a ``scenarios.py``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    runner = _load("heldout_b_run", HERE.parent / "heldout_b" / "run.py")
    scenarios = _load("heldout_d_scenarios", HERE / "scenarios.py").SCENARIOS
    return runner.main(runner.Suite("heldout_d", HERE, scenarios, deadline_s=240.0))


if __name__ == "__main__":
    sys.exit(main())
