"""The command line itself (`gpu_auditor.cli`): check-alloc-conf, --torch-version, the kubectl
plugin's name, and the standard streams closed or broken: one line on stderr, a documented
status.

Issue 11: ``gpu-auditor diagnose -`` with stdin closed (``<&-``) or a broken pipe gave a
traceback and status 1. Status 2 is unreadable input, 3 an unwritable report (``cli`` docstring).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_auditor import cli
from gpu_auditor.cli import main

from ..diagnosis.diagnosis_helpers import torch_oom

pytestmark = pytest.mark.unit

OOM = torch_oom(requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9)
COMMAND = [sys.executable, "-m", "gpu_auditor.cli"]


def shell(script: str, log: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with ``$GA`` the CLI and ``$LOG`` a log holding one OOM."""
    env = dict(os.environ, GA=" ".join(COMMAND), LOG=str(log))
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "job.log"
    path.write_text("step 1\nstep 2\n" + OOM)  # a job that finished steps (progress.py)
    return path


def test_diagnose_with_stdin_closed_says_so_and_exits_2(log: Path) -> None:
    done = shell("$GA diagnose - <&-", log)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "gpu-auditor: cannot read stdin: stdin is closed\n"


def into_a_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with stdout a pipe whose reader is gone before it starts: EPIPE on the first
    write, every time (a reader that exits by itself, like ``| head -1``, races the writer)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [*COMMAND, *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


def test_a_report_into_a_pipe_nobody_reads_says_so_and_exits_3(log: Path) -> None:
    done = into_a_closed_pipe("diagnose", "--json", str(log))
    assert done.returncode == 3
    assert done.stderr == "gpu-auditor: cannot write the report: Broken pipe\n"


def test_check_alloc_conf_into_a_broken_pipe_exits_3_too() -> None:
    done = into_a_closed_pipe("check-alloc-conf", "expandable_segments:True")
    assert done.returncode == 3
    assert done.stderr == "gpu-auditor: cannot write the report: Broken pipe\n"


def test_a_report_with_stdout_closed_says_so_and_exits_3(log: Path) -> None:
    done = shell("$GA diagnose $LOG >&-", log)
    assert done.returncode == 3
    assert done.stderr == "gpu-auditor: cannot write the report: stdout is closed\n"


def test_a_diagnosis_from_stdin_still_works(log: Path) -> None:
    done = shell("$GA diagnose --json - < $LOG", log)
    assert done.returncode == 0 and '"kind": "fragmentation"' in done.stdout


class BrokenOutput(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_in_process_closed_stdin_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["diagnose", "-"], stdout=out, stderr=err) == cli.EXIT_USAGE
    assert err.getvalue() == "gpu-auditor: cannot read stdin: stdin is closed\n"


def test_in_process_output_error_is_exit_3_with_one_line(log: Path) -> None:
    err = io.StringIO()
    assert cli.main(["diagnose", str(log)], stdout=BrokenOutput(), stderr=err) == 3
    assert err.getvalue() == "gpu-auditor: cannot write the report: Broken pipe\n"


def test_the_kubectl_plugin_names_itself_in_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"], prog="kubectl gpu-auditor")
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("usage: kubectl gpu-auditor ")


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.BytesIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_bad_torch_version_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        run("diagnose", "--torch-version", "banana")
    assert exc.value.code == 2


def test_check_alloc_conf_valid_exits_0() -> None:
    code, out, _ = run("check-alloc-conf", "expandable_segments:True", "--torch-version", "2.4")
    assert code == 0 and out.startswith("valid")


def test_check_alloc_conf_invalid_exits_1_with_torchs_message() -> None:
    code, out, _ = run("check-alloc-conf", "expandable_segments:yes")
    assert code == 1
    assert "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'yes'" in out


def test_check_alloc_conf_knows_the_backend() -> None:
    code, _, _ = run("check-alloc-conf", "max_split_size_mb:128", "--backend", "cudaMallocAsync")
    assert code == 1
