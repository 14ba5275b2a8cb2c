"""Malformed fake-node files and --proc-root content: a clear one-line error and exit 2 at start,
or (for /proc, read every pass) an unknown pod and a counted error; never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_helpers import write_proc

from node_agent.cli import main

pytestmark = pytest.mark.unit

UID = "3f2a7c1e-8b4d-4e6a-9c21-5d7f0a3b8e41"
CID = "0" * 64
GPU = "gpus:\n- uuid: GPU-a\n  memoryTotalBytes: 100\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main([*argv, "--once"])
    return rc, capsys.readouterr().err


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


def pod(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"namespace": "ml", "name": "a", "uid": UID,
                               "containers": [{"name": "main",
                                               "containerID": f"containerd://{CID}",
                                               "gpus": ["GPU-a"]}]}
    base.update(fields)
    return base


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
