"""The ``gpu-auditor`` command line: output, JSON shape and exit codes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from diagnosis_helpers import FIXTURES, ROOT

from gpu_auditor.cli import main

pytestmark = pytest.mark.unit

FRAG_LOG = ROOT / "examples" / "logs" / "fragmentation.log"
ISSUE_KEYS = {
    "detected",
    "framework",
    "kind",
    "contributing",
    "figures",
    "torch_version_hint",
    "recommendation",
    "summary",
}
FIGURE_KEYS = {
    "requested_bytes",
    "total_bytes",
    "free_bytes",
    "process_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "allowed_bytes",
    "other_processes",
}


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.BytesIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_diagnose_example_prints_kind_summary_and_setting() -> None:
    code, out, _ = run("diagnose", str(FRAG_LOG))
    assert code == 0
    assert "fragmentation (pytorch, torch 2.11)" in out
    assert "set: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out


def test_json_output_has_every_key_of_the_issue() -> None:
    code, out, _ = run("diagnose", "--json", str(FRAG_LOG))
    data = json.loads(out)
    assert code == 0
    assert set(data) >= ISSUE_KEYS
    assert set(data["figures"]) >= FIGURE_KEYS
    assert set(data["recommendation"]) == {"env", "alloc_conf", "actions"}
    assert data["figures"]["requested_bytes"] == round(4.2 * 2**30)


def test_json_other_processes_are_pid_and_bytes() -> None:
    _, out, _ = run("diagnose", "--json", str(FIXTURES / "corpus" / "shared_gpu_other_process.log"))
    assert json.loads(out)["figures"]["other_processes"] == [
        {"pid": 872, "bytes": round(125.87 * 2**30)}
    ]


def test_stdin_is_read_with_a_dash_and_by_default() -> None:
    data = FRAG_LOG.read_bytes()
    assert run("diagnose", "-", stdin=data)[1] == run("diagnose", stdin=data)[1]
    assert "fragmentation" in run("diagnose", stdin=data)[1]


def test_log_without_oom_exits_zero_and_says_so() -> None:
    code, out, _ = run("diagnose", "--json", stdin=b"epoch 1 ok\n")
    assert code == 0 and json.loads(out)["detected"] is False


def test_alloc_conf_and_torch_version_flags_reach_the_recommendation() -> None:
    _, out, _ = run(
        "diagnose",
        "--json",
        "--torch-version",
        "2.0",
        "--alloc-conf",
        "garbage_collection_threshold:0.7",
        str(FRAG_LOG),
    )
    assert json.loads(out)["recommendation"]["alloc_conf"] == (
        "garbage_collection_threshold:0.7,max_split_size_mb:128"
    )


def test_missing_file_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    code, out, err = run("diagnose", str(tmp_path / "nope.log"))
    assert (code, out) == (2, "")
    assert "cannot read" in err and "No such file" in err


def test_directory_exits_2(tmp_path: Path) -> None:
    code, _, err = run("diagnose", str(tmp_path))
    assert code == 2 and "Is a directory" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "secret.log"
    path.write_text("x")
    path.chmod(0)
    code, _, err = run("diagnose", str(path))
    assert code == 2 and "Permission denied" in err


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
