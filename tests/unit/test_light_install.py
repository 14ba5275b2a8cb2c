"""`pip install gpu-auditor` is the CLI and the pure core with no dependency; the services come
with the extras. Checked on the wheel itself: its file list (no dev-only code: the local
control plane and the demo live in devtools/), its metadata, then a fresh virtual environment
that installs it (offline: there is nothing else to fetch) and runs `gpu-auditor diagnose`."""

from __future__ import annotations

import email
import importlib.util
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("kopf", "kubernetes", "grpcio", "nvidia-ml-py", "protobuf", "prometheus-client",
         "pyyaml", "h2")
LOG = ROOT / "tests" / "fixtures" / "oom" / "corpus" / "frag_pinned_segments_fullgpu.log"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for part in ("pyproject.toml", "README.md"):
        if (ROOT / part).exists():
            shutil.copy2(ROOT / part, source / part)
    # The source folders a checkout's `pip install .` sees, devtools/ included: it must stay out.
    for folder in ("operator", "node_agent", "devtools"):
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out)]
    if importlib.util.find_spec("setuptools") is not None:
        argv.append("--no-build-isolation")
    result = subprocess.run([*argv, str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("gpu_auditor-*.whl")
    return built


def requirements(wheel: Path) -> list[tuple[str, str | None]]:
    """(requirement name, the extra it belongs to or None) from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(zf.read(name))
    out = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        project = requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        extra = None
        if "extra ==" in marker:
            extra = marker.split("extra ==")[1].strip().strip("'\"")
        out.append((project.lower(), extra))
    return out


def test_the_wheel_holds_the_installed_packages_and_no_dev_only_code(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names}
    (info,) = [top for top in tops if top.endswith(".dist-info")]
    assert tops == {"gpu_auditor", "node_agent", info}
    assert {"gpu_auditor/cli.py", "gpu_auditor/base/client.py", "gpu_auditor/controller/main.py",
            "gpu_auditor/diagnosis/__init__.py", "node_agent/cli.py", "gpu_auditor/py.typed",
            } <= set(names)
    dev_only = [name for name in names
                if "localcluster" in name or "kwok" in name or "devtools" in name
                or name.rsplit("/", 1)[-1] == "demo.py"]
    assert dev_only == []


def test_the_wheel_requires_nothing_without_an_extra(wheel: Path) -> None:
    found = requirements(wheel)
    assert [r for r in found if r[1] is None] == []
    extras = {extra for _, extra in found}
    assert {"agent", "operator", "test", "dev"} <= extras


def test_each_extra_brings_what_its_service_imports(wheel: Path) -> None:
    found = requirements(wheel)
    agent = {name for name, extra in found if extra == "agent"}
    operator = {name for name, extra in found if extra == "operator"}
    assert agent == {"nvidia-ml-py", "h2", "protobuf", "pyyaml"}  # docs/dependencies.md
    assert {"kopf", "prometheus-client", "pyyaml"} <= operator
    assert "kubernetes" not in agent | operator
    assert {extra for name, extra in found if name == "kubernetes"} == {"test"}


def test_a_fresh_venv_with_the_wheel_alone_diagnoses_a_log(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--quiet",
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr  # offline: nothing else
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    assert [name for name in HEAVY if f"{name}==" in listed.replace("_", "-")] == []

    diagnose = subprocess.run([str(env_dir / "bin" / "gpu-auditor"), "diagnose", "--json",
                               str(LOG)], capture_output=True, text=True, timeout=120)
    assert diagnose.returncode == 0, diagnose.stderr
    assert '"kind": "fragmentation"' in diagnose.stdout
    base = subprocess.run([str(python), "-c", "import gpu_auditor.base.client, "
                           "gpu_auditor.base.nodereport, gpu_auditor.base.kubeconfig; print('ok')"],
                          capture_output=True, text=True, timeout=60)
    assert base.stdout.strip() == "ok", base.stderr
    for dev_only in ("devtools", "gpu_auditor.localcluster", "gpu_auditor.demo"):
        absent = subprocess.run([str(python), "-c", f"import {dev_only}"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert "ModuleNotFoundError" in absent.stderr, (dev_only, absent.stderr)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    explain = subprocess.run([str(env_dir / "bin" / "kubectl-gpu_auditor"), "explain", "p"],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    assert explain.returncode == 2
    assert "pip install 'gpu-auditor[kubectl]'" in explain.stderr, explain.stderr
    # Each service names its extra when it is missing (the agent: nvidia-ml-py for NVML), exit 2
    # with one line, never a traceback.
    for argv, extra in ((["gpu-auditor-operator", "--help"], "operator"),
                        (["gpu-auditor-agent", "--once"], "agent")):
        missing = subprocess.run([str(env_dir / "bin" / argv[0]), *argv[1:]],
                                 capture_output=True, text=True, timeout=60)
        assert missing.returncode != 0
        assert f"pip install 'gpu-auditor[{extra}]'" in missing.stderr, missing.stderr
        assert "Traceback" not in missing.stderr
