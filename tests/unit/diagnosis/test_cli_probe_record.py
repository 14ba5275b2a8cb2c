"""``gpu-auditor diagnose --probe-record FILE``: the probe's record read from a file (as copied
from a pod's termination message), kept apart from the log."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpu_auditor.cli import EXIT_USAGE, main

pytestmark = pytest.mark.unit

HELDOUT = Path(__file__).resolve().parents[2] / "fixtures" / "oom" / "heldout"
MARKER = "gpu-auditor-probe-record "


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.BytesIO(b""))
    return code, out.getvalue(), err.getvalue()


def _split(job: str, tmp_path: Path) -> tuple[Path, Path]:
    """The job's log without the probe's lines, and its last record in a file of its own."""
    lines = (HELDOUT / f"{job}.log").read_text(errors="replace").splitlines()
    log = tmp_path / "job.log"
    log.write_text("\n".join(ln for ln in lines if not ln.startswith(MARKER)) + "\n")
    record = tmp_path / "termination-message"
    record.write_text([ln for ln in lines if ln.startswith(MARKER)][-1] + "\n")
    return log, record


def test_a_record_file_feeds_the_verdict_and_the_json_says_so(tmp_path: Path) -> None:
    log, record = _split("frag_sessions", tmp_path)
    code, out, _ = _run("diagnose", "--json", "--probe-record", str(record), str(log))
    result = json.loads(out)
    assert code == 0
    assert result["kind"] == "fragmentation"
    assert result["probe"]["status"] == "ok"
    assert result["probe"]["verdict"]["kind"] == "fragmentation"
    assert result["summary"].startswith("fragmentation: 6.94 GiB free in the cache's blocks")


def test_without_the_record_file_the_same_log_reads_the_message_alone(tmp_path: Path) -> None:
    log, _ = _split("frag_sessions", tmp_path)
    code, out, _ = _run("diagnose", "--json", str(log))
    result = json.loads(out)
    assert code == 0 and "probe" not in result
    assert result["summary"].startswith("fragmentation: 6.95 GiB reserved but unallocated")


@pytest.mark.parametrize("content", [b"", b"not a record\n", b"gpu-auditor-probe-record {]\n"])
def test_a_file_without_a_usable_record_is_a_usage_error(tmp_path: Path, content: bytes) -> None:
    log, _ = _split("frag_sessions", tmp_path)
    bad = tmp_path / "bad"
    bad.write_bytes(content)
    code, out, err = _run("diagnose", "--probe-record", str(bad), str(log))
    assert code == EXIT_USAGE and out == ""
    assert err.startswith(f"gpu-auditor: {bad} holds no usable probe record: ")


def test_a_missing_record_file_is_a_usage_error(tmp_path: Path) -> None:
    log, _ = _split("frag_sessions", tmp_path)
    code, _, err = _run("diagnose", "--probe-record", str(tmp_path / "absent"), str(log))
    assert code == EXIT_USAGE
    assert "cannot read" in err
