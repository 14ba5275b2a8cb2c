"""`gpu-auditor diagnose FILE... | -`: the report, its JSON, several logs each reported,
`--exit-code`, unreadable input, and `--probe-record`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_auditor.cli import EXIT_USAGE, main

from ..diagnosis.diagnosis_helpers import FIXTURES, ROOT

pytestmark = pytest.mark.unit

LOGS = ROOT / "examples" / "logs"
FRAG, CAPACITY = LOGS / "fragmentation.log", LOGS / "capacity.log"
NO_OOM = b"epoch 1 loss 0.3\nepoch 2 loss 0.2\n"


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.BytesIO(stdin))
    return code, out.getvalue(), err.getvalue()


def test_two_files_are_each_reported_in_the_order_given() -> None:
    code, out, err = run("diagnose", str(FRAG), str(CAPACITY))
    assert (code, err) == (0, "")
    first, second = out.split("\n\n")
    assert first.startswith(f"{FRAG}: fragmentation")
    assert second.startswith(f"{CAPACITY}: capacity")


def test_json_of_several_files_is_a_list_with_each_source() -> None:
    code, out, _ = run("diagnose", "--json", str(FRAG), "-", stdin=NO_OOM)
    data = json.loads(out)
    assert code == 0
    assert [d["source"] for d in data] == [str(FRAG), "stdin"]
    assert data[0]["kind"] == "fragmentation"
    assert data[1]["detected"] is False


def test_json_of_one_file_stays_one_object() -> None:
    data = json.loads(run("diagnose", "--json", str(FRAG))[1])
    assert isinstance(data, dict) and data["source"] == str(FRAG)


def test_an_unreadable_file_is_said_and_the_others_still_reported(tmp_path: Path) -> None:
    missing = tmp_path / "gone.log"
    code, out, err = run("diagnose", str(missing), str(FRAG))
    assert code == 2
    assert err.count("\n") == 1 and f"cannot read {missing}" in err
    assert f"{FRAG}: fragmentation" in out


def test_an_unreadable_file_in_json_is_an_error_entry(tmp_path: Path) -> None:
    missing = tmp_path / "gone.log"
    code, out, _ = run("diagnose", "--json", str(FRAG), str(missing))
    data = json.loads(out)
    assert code == 2
    assert data[1] == {"source": str(missing), "error": "No such file or directory"}


def test_exit_code_is_1_when_an_oom_is_found_and_0_when_none() -> None:
    assert run("diagnose", "--exit-code", str(FRAG))[0] == 1
    assert run("diagnose", "--exit-code", "-", stdin=NO_OOM)[0] == 0
    assert run("diagnose", "--exit-code", "-", str(FRAG), stdin=NO_OOM)[0] == 1


def test_without_exit_code_an_oom_still_exits_0() -> None:
    assert run("diagnose", str(FRAG))[0] == 0


def test_bad_input_exits_2_even_when_another_file_holds_an_oom(tmp_path: Path) -> None:
    assert run("diagnose", "--exit-code", str(FRAG), str(tmp_path / "x.log"))[0] == 2


def test_stdin_named_twice_is_a_usage_error() -> None:
    code, out, err = run("diagnose", "-", "-", stdin=NO_OOM)
    assert (code, out) == (2, "") and "once" in err


def test_a_probe_record_with_several_files_is_a_usage_error(tmp_path: Path) -> None:
    record = tmp_path / "message"
    record.write_text("x")
    code, _, err = run("diagnose", "--probe-record", str(record), str(FRAG), str(CAPACITY))
    assert code == 2 and "--probe-record" in err


def test_the_kubectl_logs_pipe_of_the_readme_works_as_a_real_process() -> None:
    """`kubectl logs --previous POD | gpu-auditor diagnose -`: a real pipe into the console
    script's module, and `--exit-code` reaching the shell."""
    log = FRAG.read_bytes()
    result = subprocess.run([sys.executable, "-m", "gpu_auditor.cli", "diagnose", "--exit-code",
                             "-"], input=log, capture_output=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode().startswith("stdin: fragmentation")


def test_host_pids_of_other_processes_point_to_explain_and_the_node_report() -> None:
    code, out, _ = run("diagnose", str(LOGS / "gpu-shared.log"))
    assert code == 0
    assert "other processes on the GPU are host pids (" in out
    assert "gpu-auditor explain POD" in out and "kubectl get gnr NODE" in out


# The ``gpu-auditor`` command line: output, JSON shape and exit codes.

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


# --probe-record: the probe's record beside the log.

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
