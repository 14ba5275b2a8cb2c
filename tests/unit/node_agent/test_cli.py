"""The command line: --once on the example node, config errors, and the HTTP endpoints."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver_helpers import b64, kubeconfig, make_pki, serve

from node_agent.cli import build, exposition_for, main
from node_agent.config import parse
from node_agent.http_server import make_server

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/fake-node"
FAKE = ["--nvml-fake", str(EXAMPLE / "nvml.yaml"), "--proc-root", str(EXAMPLE / "proc")]


def test_once_on_the_example_node_shows_the_pod_using_a_gpu_it_did_not_request(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FAKE, "--once"]) == 0
    out = capsys.readouterr().out
    notebook = [line for line in out.splitlines()
                if line.startswith("gpu_auditor_container_gpu_memory_bytes{")
                and 'pod="notebook-1"' in line]
    assert len(notebook) == 1 and 'allocated="false"' in notebook[0]
    assert ('gpu_auditor_sharing_finding{gpu="0",kind="unrequested-gpu-use",namespace="ml",'
            'node="gpu-node-1",pod="notebook-1"') in out
    assert 'allocated="host"' in out


def test_the_documented_console_command_works_as_written() -> None:
    agent = Path(sys.executable).parent / "gpu-auditor-agent"
    if not agent.exists():
        pytest.skip("gpu-auditor-agent is not installed in this environment")
    result = subprocess.run(
        [str(agent), "--nvml-fake", "examples/fake-node/nvml.yaml", "--proc-root",
         "examples/fake-node/proc", "--once"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert 'pod="notebook-1"' in result.stdout and 'allocated="false"' in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval must be in (0, 3600]"),
        (["--nvml-fake", "/nonexistent.yaml"], "--nvml-fake /nonexistent.yaml: no such file"),
        (["--proc-root", "/nonexistent"], "--proc-root /nonexistent: not a directory"),
        (["--port", "70000"], "--port must be 0..65535"),
    ],
)
def test_bad_config_exits_2_with_a_clear_message(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--once"]) == 2
    assert message in capsys.readouterr().err


def test_report_without_any_api_server_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main([*FAKE, "--once", "--report"]) == 2
    assert "--report needs --kubeconfig" in capsys.readouterr().err


def test_a_broken_fake_file_is_a_config_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "nvml.yaml"
    bad.write_text("gpus:\n- index: 0\n  memoryTotalBytes: 1\n")
    assert main(["--nvml-fake", str(bad), "--once"]) == 2
    assert "gpus[0].uuid: required" in capsys.readouterr().err


def test_the_once_mode_does_not_import_the_kubernetes_client() -> None:
    code = ("import sys; from node_agent.cli import main; "
            f"main({[*FAKE, '--once']!r}); "
            "sys.stderr.write(str(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('kubernetes', 'grpc', 'pynvml'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=REPO, check=True)
    assert result.stderr.strip().endswith("[]")


def test_importing_the_cli_does_not_import_the_kubernetes_client() -> None:
    code = ("import sys, node_agent.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=REPO, check=True)
    assert result.stdout.strip() == "[]"


def test_the_agent_with_report_publishes_without_importing_kubernetes(tmp_path: Path) -> None:
    """``python -m node_agent --once --report`` against a fake API server over mutual TLS."""
    pki = make_pki()
    with serve(pki, tmp_path / "server", client_cert_required=True) as api:
        kc = kubeconfig(tmp_path / "kubeconfig", api.url,
                        cluster={"certificate-authority-data": b64(pki.ca.cert)},
                        user={"client-certificate-data": b64(pki.client.cert),
                              "client-key-data": b64(pki.client.key)})
        argv = ["node_agent", *FAKE, "--kubeconfig", str(kc), "--once", "--report"]
        code = ("import runpy, sys\n"
                f"sys.argv = {argv!r}\n"
                "try:\n"
                "    runpy.run_module('node_agent', run_name='__main__', alter_sys=True)\n"
                "except SystemExit as e:\n"
                "    status = e.code\n"
                "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes')\n"
                "sys.stderr.write(f'\\nEXIT {status} KUBERNETES {loaded}\\n')\n")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60, cwd=REPO)
        assert result.stderr.strip().endswith("EXIT 0 KUBERNETES []"), result.stderr
        assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in api.requests] == [
            ("GET", "gpu-node-1"), ("POST", "gpunodereports")]
        (report,) = api.objects.values()
        assert report["spec"]["nodeName"] == "gpu-node-1"


@pytest.fixture
def served() -> Iterator[str]:
    cfg = parse([*FAKE, "--port", "0", "--bind-address", "127.0.0.1", "--interval", "60"])
    agent = build(cfg)
    exposition = exposition_for(agent, cfg)
    agent.run_once()
    server = make_server(lambda accept: exposition.render(accept, agent.latest()), agent.health,
                         "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_serves_metrics_and_healthz(served: str) -> None:
    with urllib.request.urlopen(f"{served}/metrics", timeout=5) as r:
        body = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/plain")
    assert 'gpu_auditor_agent_nvml_up{node="gpu-node-1"} 1' in body
    assert "process_resident_memory_bytes" in body
    with urllib.request.urlopen(f"{served}/healthz", timeout=5) as r:
        assert (r.status, r.read()) == (200, b"ok\n")


def test_http_unknown_path_is_404(served: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{served}/nope", timeout=5)
    assert err.value.code == 404
