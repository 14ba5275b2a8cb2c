"""The Dockerfile, checked without a container engine: its stages and user as designed, and
the commands it and the chart run exist as console scripts of the wheel it builds."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from chartlib import ROOT, Render

pytestmark = pytest.mark.unit

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built as the first stage does: from a copy of what it COPYs (the repo stays
    clean, and no stale build/ folder leaks into the wheel)."""
    context = tmp_path_factory.mktemp("context")
    for instruction, arguments in stages()[0]:
        if instruction == "COPY":
            *sources, _ = arguments.split()
            for source in sources:
                path = ROOT / source
                if path.is_dir():
                    shutil.copytree(path, context / source,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                elif path.exists():  # README.md may not be written yet
                    shutil.copy2(path, context / source)
    out = tmp_path_factory.mktemp("wheel")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out)]
    if importlib.util.find_spec("setuptools") is not None:
        argv.append("--no-build-isolation")  # offline and fast; the Dockerfile isolates
    result = subprocess.run([*argv, str(context)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("gpu_auditor-*.whl")
    return built


def console_scripts(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(name).decode())
    return dict(parser["console_scripts"])


def test_the_image_is_built_in_two_stages_on_python_3_12_slim() -> None:
    args = {a for i, a in instructions() if i == "ARG"}
    assert "PYTHON_IMAGE=python:3.12-slim" in args
    froms = [a for i, a in instructions() if i == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE} AS runtime"]


def test_the_first_stage_builds_only_the_wheel() -> None:
    build = stages()[0]
    runs = [a for i, a in build if i == "RUN"]
    assert runs == ["pip wheel --no-deps --wheel-dir /wheels ."]


def test_the_runtime_stage_installs_the_wheel_with_its_dependencies() -> None:
    runtime = stages()[1]
    assert ("COPY", "--from=build /wheels /tmp/wheels") in runtime
    (install,) = [a for i, a in runtime if i == "RUN" and "pip install" in a]
    assert "/tmp/wheels/gpu_auditor-*.whl" in install and "--no-deps" not in install


def test_the_runtime_stage_installs_both_services_extras() -> None:
    """`pip install gpu-auditor` alone has neither service's dependencies (issue 12)."""
    runtime = stages()[1]
    (install,) = [a for i, a in runtime if i == "RUN" and "pip install" in a]
    assert "[agent,operator]" in install


def test_the_image_runs_as_the_numeric_non_root_user_65532() -> None:
    runtime = stages()[1]
    users = [a for i, a in runtime if i == "USER"]
    assert users == ["65532:65532"]  # numeric, so runAsNonRoot can verify it
    assert any("useradd" in a and "--uid 65532" in a for i, a in runtime if i == "RUN")
    last_user = max(n for n, (i, _) in enumerate(runtime) if i == "USER")
    assert not [i for i, _ in runtime[last_user:] if i == "RUN"], "RUN after USER"


def test_the_build_context_holds_what_the_first_stage_copies() -> None:
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    assert ignore[0] == "*", "the context starts empty and lists what goes in"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for instruction, arguments in stages()[0]:
        if instruction == "COPY":
            *sources, _ = arguments.split()
            for source in sources:
                assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"
                if source != "README.md":  # the lead's; the wheel builds without it here
                    assert (ROOT / source).exists(), source


def test_every_command_the_dockerfile_runs_is_a_console_script_of_the_wheel(
    wheel: Path,
) -> None:
    scripts = console_scripts(wheel)
    named = {m for i, a in instructions() if i in ("RUN", "CMD", "ENTRYPOINT")
             for m in re.findall(r"\bgpu-auditor(?:-[a-z]+)*\b", a)}
    assert {"gpu-auditor-agent", "gpu-auditor-operator"} <= named
    assert named <= scripts.keys(), named - scripts.keys()


def test_every_console_script_s_module_is_in_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        files = set(zf.namelist())
    for script, target in console_scripts(wheel).items():
        module = target.split(":")[0].replace(".", "/")
        assert f"{module}.py" in files, f"{script} -> {target}: {module}.py not in the wheel"


def test_the_chart_runs_console_scripts_of_the_wheel(wheel: Path, render: Render) -> None:
    scripts = console_scripts(wheel)
    for obj in render():
        if obj["kind"] in ("DaemonSet", "Deployment"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                assert c["command"][0] in scripts, c["command"]


def test_the_runtime_stage_carries_the_probe_where_the_injection_copies_it_from() -> None:
    """The mutating webhook's init container copies /opt/gpu-auditor/probe (issue 17)."""
    from gpu_auditor.admission.inject import PROBE_DIR

    copies = [a for i, a in stages()[1] if i == "COPY" and "--from" not in a]
    assert f"probe/sitecustomize.py {PROBE_DIR}/" in copies
    assert f"probe/gpu_auditor_probe/ {PROBE_DIR}/gpu_auditor_probe/" in copies
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for source in ("probe/sitecustomize.py", "probe/gpu_auditor_probe/"):
        assert f"!{source}" in ignore and (ROOT / source).exists()
