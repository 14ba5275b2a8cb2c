"""The command line: --once on the example node, config errors, and the HTTP endpoints."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.cli import build, exposition_for, main, server_for
from node_agent.config import parse

from .agent_helpers import write_proc
from .apiserver_helpers import b64, kubeconfig, make_pki, serve

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
    server = server_for(agent, cfg, exposition)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


OPENMETRICS = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"


def test_http_serves_metrics_and_healthz(served: str) -> None:
    request = urllib.request.Request(f"{served}/metrics", headers={"Accept": OPENMETRICS})
    with urllib.request.urlopen(request, timeout=5) as r:
        body = r.read().decode()
        # No negotiation: the text format 0.0.4 whatever the Accept header (Prometheus lists
        # OpenMetrics first); the body is not OpenMetrics.
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert r.headers["Content-Encoding"] is None
    assert "# EOF" not in body
    assert 'gpu_auditor_agent_nvml_up{node="gpu-node-1"} 1' in body
    assert "process_resident_memory_bytes" in body
    with urllib.request.urlopen(f"{served}/healthz", timeout=5) as r:
        assert (r.status, r.read()) == (200, b"ok\n")


def test_http_unknown_path_is_404(served: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{served}/nope", timeout=5)
    assert err.value.code == 404


# Malformed fake-node files and --proc-root content: a clear one-line error and exit 2 at start,
# or (for /proc, read every pass) an unknown pod and a counted error; never a traceback.

UID = "3f2a7c1e-8b4d-4e6a-9c21-5d7f0a3b8e41"
CID = "0" * 64
GPU = "gpus:\n- uuid: GPU-a\n  memoryTotalBytes: 100\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main([*argv, "--once"])
    return rc, capsys.readouterr().err


def pod(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"namespace": "ml", "name": "a", "uid": UID,
                               "containers": [{"name": "main",
                                               "containerID": f"containerd://{CID}",
                                               "gpus": ["GPU-a"]}]}
    base.update(fields)
    return base


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"gpus:\n- uuid: GPU-\xff\n", "not UTF-8 text (byte 18)", id="not-utf8"),
        pytest.param(b"gpus: " + b"[" * 20000 + b"]" * 20000, "not valid YAML: ",
                     id="nested-20000-deep"),
        pytest.param(b"gpus:\n\t- x\n", "not valid YAML: found character that cannot start "
                     "any token (line 2, column 1)", id="tab"),
        pytest.param(b"gpus:\n- uuid: \"GPU-a\\n\\u0000\"\n  memoryTotalBytes: 1\n",
                     "gpus[0].uuid: required", id="uuid-with-control-characters"),
        pytest.param(b"gpus:\n- uuid: GPU-" + b"a" * 93 + b"\n  memoryTotalBytes: 1\n",
                     "gpus[0].uuid: required", id="uuid-97-characters"),
        pytest.param(b"gpus:\n- uuid: GPU-a\n  memoryTotalBytes: 9223372036854775808\n",
                     "memoryTotalBytes: expected an integer in [0, 9223372036854775807]",
                     id="bytes-2-to-the-63"),
        pytest.param(GPU.encode() + b"  processes: [{pid: 4194305, usedBytes: 1}]\n",
                     "pid: expected an integer in [1, 4194304], got 4194305", id="pid-too-big"),
        pytest.param(GPU.encode() + b"  processes: [{pid: 0}]\n",
                     "pid: expected an integer in [1, 4194304], got 0", id="pid-0"),
        pytest.param(GPU.encode() + b"  index: 65536\n", "index: expected an integer in "
                     "[0, 65535]", id="index-too-big"),
        pytest.param(GPU.encode() + b"  fail: maybe\n", "fail: must be true or false",
                     id="fail-not-a-bool"),
        pytest.param(GPU.encode() + b"  model: [1]\n", "model: expected a string",
                     id="model-a-list"),
        pytest.param(b"pods: \"a\\u0000b\"\ngpus: []\n", "pods: not a usable file name",
                     id="pods-ref-with-nul"),
        pytest.param(b"pods: [x]\ngpus: []\n", "pods must name a file", id="pods-ref-a-list"),
    ],
)
def test_a_malformed_fake_nvml_file_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
        message: str) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_bytes(content)
    rc, err = run(["--nvml-fake", str(f)], capsys)
    assert rc == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert message in err


def test_a_fake_file_over_16_mib_is_refused_unread(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_bytes(b"#" * (16 * 2**20) + b"\n")  # 16 MiB + 1 byte
    rc, err = run(["--nvml-fake", str(f)], capsys)
    assert rc == 2 and "larger than 16 MiB" in err


@pytest.mark.parametrize(
    ("pods_doc", "message"),
    [
        pytest.param({"node": {"labels": ["a", "b"]}}, "node.labels must map names to strings",
                     id="labels-a-list"),
        pytest.param({"node": {"labels": {"a": {"b": 1}}}}, "node.labels must map names to",
                     id="label-value-a-mapping"),
        pytest.param({"node": {"name": "Bad Name"}}, "node.name must be a DNS subdomain",
                     id="node-name"),
        pytest.param({"pods": [pod(containers=5)]}, "pods[0].containers: must be a list",
                     id="containers-an-int"),
        pytest.param({"pods": [pod(uid="c")]}, "pods[0].uid: required, a lowercase UUID",
                     id="uid-not-a-uuid"),
        pytest.param({"pods": [pod(name="x" * 254)]}, "pods[0].name: required",
                     id="name-254-characters"),
        pytest.param({"pods": [pod(namespace="ml\x1b[2J")]}, "pods[0].namespace: required",
                     id="namespace-control-characters"),
        pytest.param({"pods": [pod(mirrorHash=5)]}, "pods[0].mirrorHash: 32 lowercase hex",
                     id="mirror-hash-an-int"),
        pytest.param({"pods": [pod(containers=[{"name": "x", "containerID": [1]}])]},
                     "containers[0].containerID: <runtime>://<64 hex digits>",
                     id="container-id-a-list"),
        pytest.param({"pods": [pod(containers=[{"name": "x", "gpus": [1, {"a": "b"}]}])]},
                     "containers[0].gpus: a list of device IDs", id="gpus-not-strings"),
        pytest.param({"pods": [pod(containers=[{"name": "x", "gpus": ["GPU-" + "a" * 125]}])]},
                     "containers[0].gpus: a list of device IDs", id="device-id-129-characters"),
        pytest.param({"pods": [pod(containers=[{"gpus": []}])]}, "containers[0].name: required",
                     id="container-without-a-name"),
        pytest.param({"kubeletUp": "yes"}, "kubeletUp must be true or false", id="kubelet-up"),
    ],
)
def test_a_malformed_fake_pods_file_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], pods_doc: dict[str, object],
        message: str) -> None:
    import yaml

    (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods_doc))
    f = tmp_path / "nvml.yaml"
    f.write_text("pods: pods.yaml\n" + GPU)
    rc, err = run(["--nvml-fake", str(f)], capsys)
    assert rc == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert message in err


def test_an_unreadable_proc_root_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "proc"
    root.mkdir(mode=0)
    if os.geteuid() == 0:  # root reads any directory: make access() answer as for a user
        real_access = os.access
        monkeypatch.setattr("node_agent.config.os.access",
                            lambda p, mode: False if Path(p) == root else real_access(p, mode))
    rc, err = run(["--proc-root", str(root)], capsys)
    assert rc == 2 and f"--proc-root {root}: not readable by uid " in err


def test_hostile_proc_root_content_is_unknown_pods_and_proc_errors_never_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every file a pass reads, broken in a different way; --once still exits 0."""
    root = tmp_path / "proc"
    root.mkdir()
    broken = {
        11: ("stat", b"\xff\xfe\x00 binary"),
        12: ("stat", b"12 (x) S " + b"9" * 4000),
        13: ("cgroup", b"0::/" + b"a" * 70000),
        14: ("cgroup", None),  # a FIFO
        15: ("comm", None),  # a link to /dev/zero
        16: ("cgroup", b"\x00\x01\x02"),
    }
    for pid, (name, content) in broken.items():
        write_proc(root, pid)
        target = root / str(pid) / name
        target.unlink()
        if content is not None:
            target.write_bytes(content)
        elif name == "cgroup":
            os.mkfifo(target)
        else:
            target.symlink_to("/dev/zero")
    (root / "17").write_text("a file where a pid directory should be")
    procs = ", ".join(f"{{pid: {p}, usedBytes: 1048576}}" for p in [*broken, 17])
    nvml = tmp_path / "nvml.yaml"
    nvml.write_text(f"{GPU}  processes: [{procs}]\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    rc = main(["--nvml-fake", str(nvml), "--pods-fake", str(pods), "--proc-root", str(root),
               "--node-name", "n", "--once"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err
    assert ('gpu_auditor_container_gpu_memory_bytes{allocated="unknown",container="",gpu="0",'
            'namespace="",node="n",pod="",pod_uid="",uuid="GPU-a"} 7340032') in out
    assert 'gpu_auditor_agent_errors_total{node="n",source="proc"} 6\n' in out
    assert 'allocated="host"' not in out


def test_a_port_in_use_is_a_config_error_not_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "examples/fake-node"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["--nvml-fake", str(example / "nvml.yaml"), "--proc-root",
                   str(example / "proc"), "--bind-address", "127.0.0.1", "--port", str(port),
                   "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2 and f"cannot serve on 127.0.0.1:{port}: " in err and "Traceback" not in err


def test_http_serves_metrics_gzipped_to_a_scraper_that_accepts_it(served: str) -> None:
    plain_request = urllib.request.Request(f"{served}/metrics")
    request = urllib.request.Request(f"{served}/metrics",
                                     headers={"Accept-Encoding": "gzip, deflate"})
    with urllib.request.urlopen(request, timeout=5) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        assert r.headers["Vary"] == "Accept-Encoding"
        packed = r.read()
    with urllib.request.urlopen(plain_request, timeout=5) as r:
        plain = r.read()
    text = gzip.decompress(packed)
    assert len(packed) < len(plain) / 3
    assert text.split(b"# HELP process_")[0] == plain.split(b"# HELP process_")[0]
