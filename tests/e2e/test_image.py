"""Tier 1: the image built from the Dockerfile (scripts/build-image.sh) runs its three entry
points as its non-root user on a read-only root filesystem, does what the tree's code does, and
writes nothing to its root filesystem."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest
from e2e_support import IMAGE_UID, ROOT, Podman

pytestmark = pytest.mark.e2e

ENTRY_POINTS = ("gpu-auditor", "gpu-auditor-agent", "gpu-auditor-operator",
                "gpu-auditor-webhook")
FAKE_NODE = ROOT / "examples" / "fake-node"
LOGS = ROOT / "examples" / "logs"
# The fake node mounted read-only, as the agent reads it in docs/node-agent.md.
AGENT_ONCE = ("gpu-auditor-agent", "--once", "--nvml-fake", "/fake/nvml.yaml",
              "--proc-root", "/fake/proc")
MOUNT_FAKE = ("--volume", f"{FAKE_NODE}:/fake:ro")


def _host(*argv: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The same command from this tree, outside the image."""
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, input=input,
                          cwd=ROOT, timeout=120)


def _stable(exposition: str) -> list[str]:
    """Exposition lines without the ones that measure this run's own duration."""
    return [line for line in exposition.splitlines() if "_duration_seconds" not in line]


def test_the_image_runs_as_uid_65532_and_never_writes_bytecode(podman: Podman) -> None:
    config = podman.inspect()["Config"]
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    result = podman.run("id", "-u")
    assert (result.returncode, result.stdout.strip()) == (0, str(IMAGE_UID)), result.stderr


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_each_entry_point_prints_its_help_on_a_read_only_root(
    podman: Podman, entry_point: str,
) -> None:
    result = podman.run(entry_point, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {entry_point} ")
    assert result.stderr == ""  # no warning about an unwritable cache or bytecode


def test_the_installed_distribution_is_this_trees_version(podman: Podman) -> None:
    # None of the entry points has a --version flag: the installed metadata is the version.
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = podman.run("python", "-c",
                        "import importlib.metadata as m; print(m.version('gpu-auditor'))")
    assert (result.returncode, result.stdout.strip()) == (0, want), result.stderr


def test_the_cli_diagnoses_a_log_on_stdin_exactly_as_the_tree_does(podman: Podman) -> None:
    log = (LOGS / "fragmentation.log").read_text()
    inside = podman.run("gpu-auditor", "diagnose", "--json", "-", input=log)
    outside = _host("-m", "gpu_auditor.cli", "diagnose", "--json", "-", input=log)
    assert inside.returncode == outside.returncode == 0, inside.stderr
    diagnosis = json.loads(inside.stdout)
    assert diagnosis == json.loads(outside.stdout)
    assert diagnosis["kind"] == "fragmentation"


def test_the_agent_samples_the_fake_node_exactly_as_the_tree_does(podman: Podman) -> None:
    inside = podman.run(*AGENT_ONCE, options=MOUNT_FAKE)
    outside = _host("-m", "node_agent.cli", *AGENT_ONCE[1:3], str(FAKE_NODE / "nvml.yaml"),
                    "--proc-root", str(FAKE_NODE / "proc"))
    assert inside.returncode == outside.returncode == 0, inside.stderr
    assert _stable(inside.stdout) == _stable(outside.stdout)
    assert 'allocated="false",container="jupyter"' in inside.stdout


def test_the_operator_without_any_cluster_config_exits_2_with_the_reason(podman: Podman) -> None:
    result = podman.run("gpu-auditor-operator")
    assert result.returncode == 2
    assert result.stderr.startswith("gpu-auditor-operator: ")
    # Every place it looked, named: a pod's service account, $KUBECONFIG, ~/.kube/config.
    assert "no Kubernetes config" in result.stderr
    assert all(where in result.stderr for where in ("not in a pod", "$KUBECONFIG",
                                                     "~/.kube/config"))
    assert "Traceback" not in result.stderr


def test_a_bad_agent_flag_is_a_clear_error_not_a_traceback(podman: Podman) -> None:
    result = podman.run("gpu-auditor-agent", "--once", "--interval", "0")
    assert result.returncode == 2
    assert "--interval must be in (0, 3600]" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command, options", [
    *(((entry, "--help"), ()) for entry in ENTRY_POINTS),
    (("gpu-auditor", "diagnose", "--json", "/logs/capacity.log"),
     ("--volume", f"{LOGS}:/logs:ro")),
    (AGENT_ONCE, MOUNT_FAKE),
    (("gpu-auditor-operator",), ()),
], ids=["cli-help", "agent-help", "operator-help", "webhook-help", "cli-diagnose", "agent-once",
        "operator-no-config"])
def test_nothing_is_written_to_the_root_filesystem(
    podman: Podman, command: tuple[str, ...], options: tuple[str, ...],
) -> None:
    result, written = podman.run_and_diff(*command, options=options)
    assert result.returncode in (0, 2), result.stderr
    assert written == set()


def test_the_injected_init_container_copies_a_probe_that_arms_in_a_job(podman: Podman) -> None:
    """The mutating webhook's init container runs `cp -R /opt/gpu-auditor/probe/. /probe/` as
    the image's user; a job's Python with the injected env then arms the probe."""
    script = ("cp -R /opt/gpu-auditor/probe/. /probe/ && ls /probe /probe/gpu_auditor_probe && "
              "PYTHONPATH=/probe GPU_AUDITOR_PROBE=1 python -c "
              "'import sys; print(\"armed\", \"gpu_auditor_probe\" in sys.modules)'")
    result = podman.run("sh", "-c", script, options=("--tmpfs", "/probe:rw,mode=1777"))
    assert result.returncode == 0, result.stderr
    assert "sitecustomize.py" in result.stdout and "_hook.py" in result.stdout
    assert "armed True" in result.stdout
