"""The diagnosis core as another commit had it, for the benches that print it beside ours
(``hostile_scaling.py``, ``scan_ab.py``, ``fuzz_diagnose.py``)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def merge_base() -> str:
    """The commit this branch left ``main`` at; empty when git cannot say."""
    done = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip()


def extract_core(rev: str, dest: Path) -> Path:
    """``operator/gpu_auditor`` at ``rev``, unpacked under ``dest``; the folder to put on
    ``sys.path`` (``dest/operator``)."""
    archive = subprocess.run(
        ["git", "archive", rev, "operator/gpu_auditor"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return Path(dest) / "operator"
