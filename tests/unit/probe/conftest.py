"""The probe package lives in ``probe/`` (installed alone, never with gpu-auditor): import it
from there, the way a job does with ``PYTHONPATH=probe``."""

from __future__ import annotations

import sys
from pathlib import Path

PROBE_DIR = Path(__file__).resolve().parents[3] / "probe"
if str(PROBE_DIR) not in sys.path:
    sys.path.append(str(PROBE_DIR))  # appended: the test process's own sitecustomize wins
