"""``node_agent.nvml_lite`` against a fake ``libnvidia-ml.so.1`` built here from C.

The fake (``fakenvml/fake_nvml.c``) has nvml.h's signatures and struct layouts; our binding and
nvidia-ml-py's ``pynvml``, loaded against the same fake (``LD_LIBRARY_PATH`` in a subprocess,
as both open ``libnvidia-ml.so.1`` by name), must return the same value for every call. A wrong
struct would be a wrong memory figure on a pod, so the figures are also checked literally.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
SOURCE = Path(__file__).resolve().parent / "fakenvml" / "fake_nvml.c"
CC = shutil.which("cc") or shutil.which("gcc")
VARIANTS = {"current": [], "no_v3": ["-DNO_V3"], "no_v2": ["-DNO_V2"], "no_name": ["-DNO_NAME"]}

# Run in a subprocess against the fake: every call of both bindings, errors by class name.
DUMP = r"""
import ctypes, dataclasses, json, sys
mode = sys.argv[1]

def norm(v):
    if v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if hasattr(v, '_fields_'):
        return {f[0]: getattr(v, f[0]) for f in v._fields_}
    return {k: getattr(v, k) for k in ('pid', 'usedGpuMemory', 'gpuInstanceId',
                                       'computeInstanceId')}

def call(f, *a, **k):
    try:
        return ['ok', norm(f(*a, **k))]
    except Exception as err:
        return ['err', type(err).__name__]

def device(m, h, procs):
    return {'uuid': call(m.nvmlDeviceGetUUID, h), 'name': call(m.nvmlDeviceGetName, h),
            'memory_v1': call(m.nvmlDeviceGetMemoryInfo, h),
            'memory_v2': call(m.nvmlDeviceGetMemoryInfo, h, version=m.nvmlMemory_v2),
            'gpu_instance': call(m.nvmlDeviceGetGpuInstanceId, h),
            'compute': call(getattr(m, 'nvmlDeviceGetComputeRunningProcesses' + procs), h),
            'mps': call(getattr(m, 'nvmlDeviceGetMPSComputeRunningProcesses' + procs), h)}

def dump(m, procs=''):
    init = call(m.nvmlInit)
    out = {'init': init, 'count': call(m.nvmlDeviceGetCount), 'gpus': []}
    if init[0] != 'ok':
        return out
    for i in range(out['count'][1]):
        h = m.nvmlDeviceGetHandleByIndex(i)
        g = device(m, h, procs)
        g['mig_mode'] = call(m.nvmlDeviceGetMigMode, h)
        mode = g['mig_mode']
        g['mig_enabled'] = mode[0] == 'ok' and mode[1][0] == m.NVML_DEVICE_MIG_ENABLE
        g['max_mig'] = call(m.nvmlDeviceGetMaxMigDeviceCount, h)
        g['migs'] = []
        for j in range(g['max_mig'][1] if g['max_mig'][0] == 'ok' else 0):
            try:
                mig = m.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except m.NVMLError as err:
                g['migs'].append(['err', type(err).__name__])
                continue
            g['migs'].append(device(m, mig, procs))
        out['gpus'].append(g)
    out['shutdown'] = call(m.nvmlShutdown)
    return out

def reading(m, **kw):
    from node_agent.nvml_source import NvmlSource
    source = NvmlSource(m, **kw) if m is not None else NvmlSource()
    try:
        r = source.sample()
    except Exception as err:
        return {'raised': type(err).__name__}
    return {'binding': source.binding, 'reading': dataclasses.asdict(r)}

def last_call():
    lib = ctypes.CDLL('libnvidia-ml.so.1')
    lib.fake_last_process_call.restype = ctypes.c_char_p
    return lib.fake_last_process_call().decode()

if mode == 'default':  # NvmlSource() as the agent builds it: no pynvml unless it falls back
    out = reading(None)
    out['pynvml_imported'] = 'pynvml' in sys.modules
    print(json.dumps(out))
    raise SystemExit
from node_agent import nvml_lite
import pynvml
out = {'lite': dump(nvml_lite), 'lite_last_call': last_call()}
procs = {'current': '', 'no_v3': '_v2'}.get(mode)
out['pynvml'] = dump(pynvml, procs) if procs is not None else None
out['lite_reading'] = reading(nvml_lite)
out['pynvml_reading'] = reading(pynvml)
codes = [getattr(pynvml, n) for n in dir(pynvml) if n.startswith('NVML_ERROR_')]
out['error_names'] = {str(c): [type(nvml_lite.NVMLError(c)).__name__,
                               type(pynvml.NVMLError(c)).__name__] for c in codes}
out['error_texts'] = {str(c): [str(nvml_lite.NVMLError(c)), str(pynvml.NVMLError(c))]
                      for c in codes if c != 0}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) to build the fake libnvidia-ml.so.1")
    root = tmp_path_factory.mktemp("fakenvml")
    out = {}
    for name, flags in VARIANTS.items():
        (root / name).mkdir()
        subprocess.run([CC, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags, "-o",
                        str(root / name / "libnvidia-ml.so.1"), str(SOURCE)], check=True,
                       timeout=60)
        out[name] = root / name
    return out


def _env(lib_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "operator")])
    return env


def _run(lib_dir: Path, mode: str) -> Any:
    done = subprocess.run([sys.executable, "-c", DUMP, mode], env=_env(lib_dir), cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def runs(libs: dict[str, Path]) -> dict[str, Any]:
    return {name: _run(path, name) for name, path in libs.items() if name != "no_name"}


def _procs(result: list[Any]) -> list[tuple[int, int | None]]:
    assert result[0] == "ok", result
    return [(p["pid"], p["usedGpuMemory"]) for p in result[1]]


def test_every_call_returns_what_pynvml_returns_from_the_same_library(runs: dict) -> None:
    lite, ref = runs["current"]["lite"], runs["current"]["pynvml"]
    assert lite == ref
    assert runs["current"]["lite_last_call"] == "nvmlDeviceGetMPSComputeRunningProcesses_v3"


def test_the_figures_are_the_fake_drivers_own(runs: dict) -> None:
    """Literal values from fake_nvml.c: the structs are read at the right offsets."""
    gpu0, gpu1, gpu2 = runs["current"]["lite"]["gpus"]
    assert runs["current"]["lite"]["count"] == ["ok", 3]
    assert gpu0["uuid"] == ["ok", "GPU-0a1b2c3d-0000-4000-8000-000000000000"]
    assert gpu0["name"] == ["ok", "NVIDIA H200"]
    assert gpu0["memory_v2"] == ["ok", {"version": 0x02000028, "total": 150754820096,
                                        "reserved": 570621952, "free": 139611545600,
                                        "used": 10572652544}]
    assert gpu0["memory_v1"] == ["ok", {"total": 150754820096, "free": 139611545600,
                                        "used": 10572652544 + 570621952}]
    assert _procs(gpu0["compute"]) == [(4101, 1713373184), (4102, 2787115008), (4103, None)]
    assert [p["gpuInstanceId"] for p in gpu0["compute"][1]] == [0xFFFFFFFF] * 3
    assert _procs(gpu0["mps"]) == [(4200, 524288000)]
    assert gpu0["mig_mode"] == ["err", "NVMLError_NotSupported"]
    assert gpu1["mig_mode"] == ["ok", [1, 1]] and gpu1["mig_enabled"]
    assert gpu1["max_mig"] == ["ok", 7]
    mig0, mig1, mig2 = gpu1["migs"][:3]
    assert mig1 == ["err", "NVMLError_NotFound"]
    assert mig0["gpu_instance"] == ["ok", 1] and mig2["gpu_instance"] == ["ok", 5]
    assert [(p["pid"], p["usedGpuMemory"], p["gpuInstanceId"], p["computeInstanceId"])
            for p in mig0["compute"][1]] == [(5101, 1073741824, 1, 0), (5102, 1040187392, 1, 0)]
    assert mig2["memory_v2"] == ["err", "NVMLError_NotSupported"]
    assert mig2["memory_v1"] == ["ok", {"total": 10737418240, "free": 10703863808,
                                        "used": 33554432}]
    assert gpu2["mig_mode"] == ["ok", [0, 1]] and not gpu2["mig_enabled"]
    assert gpu2["compute"] == ["ok", []]
    assert gpu2["mps"] == ["err", "NVMLError_NotSupported"]


def test_the_agents_reading_is_the_same_through_either_binding(runs: dict) -> None:
    lite, ref = runs["current"]["lite_reading"], runs["current"]["pynvml_reading"]
    assert lite["binding"] == "node_agent.nvml_lite" and ref["binding"] == "pynvml"
    assert lite["reading"] == ref["reading"]
    gpus = {g["gpu"]: g for g in lite["reading"]["gpus"]}
    assert sorted(gpus) == ["0", "1/1", "1/5", "2"]
    assert gpus["1/5"]["reserved_bytes"] == 0 and gpus["1/5"]["used_bytes"] == 33554432
    assert [(p["pid"], p["used_bytes"]) for p in gpus["0"]["processes"]] == [
        (4101, 1713373184), (4102, 2787115008), (4103, None), (4200, 524288000)]


def test_an_older_driver_without_v3_is_asked_through_v2(runs: dict) -> None:
    old = runs["no_v3"]
    assert old["lite"] == old["pynvml"]  # pynvml's explicit _v2 calls
    assert old["lite_last_call"] == "nvmlDeviceGetMPSComputeRunningProcesses_v2"
    assert old["lite_reading"]["reading"] == runs["current"]["lite_reading"]["reading"]
    # pynvml 13.x asks _v3 only and raises outside NVMLError: what the fallback avoids
    assert old["pynvml_reading"] == {"raised": "NVMLLibraryMismatchError"}


def test_an_old_driver_with_only_v1_calls_uses_the_v1_structs(runs: dict) -> None:
    v1 = runs["no_v2"]
    assert v1["lite_last_call"] == "nvmlDeviceGetMPSComputeRunningProcesses"
    gpu0 = v1["lite"]["gpus"][0]
    assert gpu0["memory_v2"] == ["err", "NVMLError_FunctionNotFound"]
    assert _procs(gpu0["compute"]) == [(4101, 1713373184), (4102, 2787115008), (4103, None)]
    assert [p["gpuInstanceId"] for p in gpu0["compute"][1]] == [None] * 3
    cur = runs["current"]["lite"]["gpus"][1]["migs"][0]["compute"]
    assert _procs(v1["lite"]["gpus"][1]["migs"][0]["compute"]) == _procs(cur)
    # the agent falls back to memory v1: no reserved figure, used includes it
    gpus = {g["gpu"]: g for g in v1["lite_reading"]["reading"]["gpus"]}
    assert gpus["0"]["reserved_bytes"] == 0
    assert gpus["0"]["used_bytes"] == 10572652544 + 570621952
    assert [(p["pid"], p["used_bytes"]) for p in gpus["0"]["processes"]] == [
        (4101, 1713373184), (4102, 2787115008), (4103, None), (4200, 524288000)]


def test_error_classes_and_texts_match_pynvml(runs: dict) -> None:
    names = runs["current"]["error_names"]
    assert len(names) >= 30
    assert all(lite == ref for lite, ref in names.values()), names
    assert names["13"] == ["NVMLError_FunctionNotFound", "NVMLError_FunctionNotFound"]
    assert names["18"][0] == "NVMLError_LibRmVersionMismatch"
    texts = runs["current"]["error_texts"]
    assert all(lite == ref for lite, ref in texts.values()), texts


def test_the_memory_v2_version_is_sizeof_and_2_shifted_24() -> None:
    from node_agent import nvml_lite

    assert nvml_lite.nvmlMemory_v2 == 0x02000028
    assert nvml_lite.nvmlMemory_v2 == 40 | 2 << 24


def test_the_default_source_uses_our_binding_without_importing_pynvml(
        libs: dict[str, Path]) -> None:
    out = _run(libs["current"], "default")
    assert out["binding"] == "node_agent.nvml_lite"
    assert not out["pynvml_imported"]
    assert out["reading"]["up"] and len(out["reading"]["gpus"]) == 4


def test_a_library_missing_a_call_we_need_falls_back_to_pynvml(libs: dict[str, Path]) -> None:
    out = _run(libs["no_name"], "default")
    assert out["binding"] == "pynvml" and out["pynvml_imported"]
    # pynvml initialises, but every GPU fails on the missing nvmlDeviceGetName: counted
    assert out["reading"]["up"] and out["reading"]["gpus"] == []
    assert out["reading"]["errors"] == 3


def test_without_the_library_nvml_is_down_and_says_so(tmp_path: Path) -> None:
    out = _run(tmp_path, "default")  # an empty directory: no libnvidia-ml.so.1
    assert out["binding"] == "node_agent.nvml_lite"
    assert out["reading"]["up"] is False and not out["pynvml_imported"]


@pytest.mark.parametrize("binding", ["lite", "pynvml"])
def test_the_agent_once_against_the_fake_library(libs: dict[str, Path], binding: str) -> None:
    example = REPO / "examples/fake-node"
    done = subprocess.run(
        [sys.executable, "-m", "node_agent", "--pods-fake", str(example / "pods.yaml"),
         "--proc-root", str(example / "proc"), "--once", "--nvml-binding", binding],
        env=_env(libs["current"]), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ('gpu_auditor_gpu_memory_reserved_bytes{gpu="1/5",model="NVIDIA A100-SXM4-80GB MIG '
            '1g.10gb",node="gpu-node-1",uuid="MIG-aaaaaaaa-2222-5222-9222-000000000005"} 0'
            ) in done.stdout
    assert 'gpu_auditor_gpu_memory_total_bytes{gpu="0",model="NVIDIA H200"' in done.stdout
    assert "gpu_auditor_agent_nvml_up{node=\"gpu-node-1\"} 1" in done.stdout


