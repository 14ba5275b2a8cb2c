"""`gpu-auditor diagnose FILE... | -`: several logs, each reported, and `--exit-code`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_helpers import ROOT

from gpu_auditor.cli import main

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


def test_the_kubectl_plugin_names_itself_in_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"], prog="kubectl gpu-auditor")
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("usage: kubectl gpu-auditor ")


def test_host_pids_of_other_processes_point_to_explain_and_the_node_report() -> None:
    code, out, _ = run("diagnose", str(LOGS / "gpu-shared.log"))
    assert code == 0
    assert "other processes on the GPU are host pids (" in out
    assert "gpu-auditor explain POD" in out and "kubectl get gnr NODE" in out
