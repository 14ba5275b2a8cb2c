"""A fake GPU source read from YAML (``--nvml-fake FILE``), so the agent runs without a GPU.

Format (documented in docs/node-agent.md)::

    pods: pods.yaml            # optional: the fake node's pods and allocations (see pods.py)
    nvmlUp: true               # false: behave as if libnvidia-ml were missing
    gpus:
    - index: 0
      uuid: GPU-...
      model: NVIDIA H200
      memoryTotalBytes: 150000000000
      memoryReservedBytes: 0   # optional
      memoryUsedBytes: ...     # optional: the processes' bytes (NVML v2 'used' excludes reserved)
      memoryFreeBytes: ...     # optional: total - used - reserved
      fail: false              # true: this GPU's NVML calls fail (dropped, counted)
      processes:
      - {pid: 4242, usedBytes: 1073741824}   # usedBytes may be null (NVML: not available)

The file is re-read when its modification time changes, so a demo can change it live.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gpu_auditor.base.errors import ConfigError
from node_agent.model import GpuSample, NvmlReading, ProcessSample
from node_agent.names import is_gpu_uuid

log = logging.getLogger(__name__)


MAX_FILE_BYTES = 16 * 2**20
MAX_GPUS = 1024  # 8 GPUs x 7 MIG instances is 56
MAX_PROCESSES_PER_GPU = 100_000
MAX_PID = 2**22  # the kernel's PID_MAX_LIMIT
MAX_BYTES = 2**63 - 1  # the report's fields are int64
MAX_INDEX = 65535

def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from ``path``; every failure is a one-line ConfigError."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from err
    try:
        import yaml  # only the fake node reads YAML: a real node's agent never imports it
    except ImportError as err:
        raise ConfigError(f"{path}: reading it needs PyYAML, in the agent extra: "
                          "pip install 'gpu-auditor[agent]'") from err

    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present; capped
    try:
        data = yaml.load(text, Loader=loader)  # CSafeLoader or SafeLoader: safe
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(err)}") from err
    except RecursionError as err:
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def _one_line(err: Exception) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def _int(value: Any, where: str, *, optional: bool = False, minimum: int = 0,
         maximum: int = MAX_BYTES) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise ConfigError(f"{where}: expected an integer in [{minimum}, {maximum}], got {shown}")
    return value


def _text(value: Any, where: str, limit: int) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected a string")
    text = str(value)
    if not text or len(text) > limit or not text.isprintable():
        raise ConfigError(f"{where}: expected 1 to {limit} printable characters")
    return text


def parse_fake_gpus(data: dict[str, Any], path: Path) -> tuple[bool, tuple[GpuSample, ...],
                                                               frozenset[str]]:
    """(nvmlUp, GPUs, UUIDs of GPUs marked ``fail``) from the parsed file."""
    up = data.get("nvmlUp", True)
    if not isinstance(up, bool):
        raise ConfigError(f"{path}: nvmlUp must be true or false")
    raw = data.get("gpus", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: gpus must be a list")
    if len(raw) > MAX_GPUS:
        raise ConfigError(f"{path}: gpus: more than {MAX_GPUS}")
    gpus: list[GpuSample] = []
    failing: set[str] = set()
    seen: set[str] = set()
    for i, g in enumerate(raw):
        where = f"{path}: gpus[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(f"{where}: expected a mapping")
        index = _int(g.get("index", i), f"{where}.index", maximum=MAX_INDEX)
        uuid = g.get("uuid")
        if not is_gpu_uuid(uuid):
            raise ConfigError(f"{where}.uuid: required, up to 96 letters, digits, '.', '_' or "
                              "'-' (e.g. GPU-...)")
        assert isinstance(uuid, str)
        if uuid in seen:
            raise ConfigError(f"{where}.uuid: {uuid} appears twice")
        seen.add(uuid)
        procs = _processes(g.get("processes", []), where)
        total = _int(g.get("memoryTotalBytes"), f"{where}.memoryTotalBytes")
        reserved = _int(g.get("memoryReservedBytes", 0), f"{where}.memoryReservedBytes")
        assert total is not None and reserved is not None and index is not None
        used = _int(g.get("memoryUsedBytes"), f"{where}.memoryUsedBytes", optional=True)
        if used is None:
            used = min(MAX_BYTES, sum(p.used_bytes or 0 for p in procs))
        free = _int(g.get("memoryFreeBytes"), f"{where}.memoryFreeBytes", optional=True)
        if free is None:
            free = max(0, total - used - reserved)
        fail = g.get("fail", False)
        if not isinstance(fail, bool):
            raise ConfigError(f"{where}.fail: must be true or false")
        gpus.append(
            GpuSample(
                gpu=_text(g.get("gpu", str(index)), f"{where}.gpu", 32),
                index=index,
                uuid=uuid,
                model=_text(g.get("model", "Fake GPU"), f"{where}.model", 96),
                total_bytes=total,
                used_bytes=used,
                free_bytes=free,
                reserved_bytes=reserved,
                processes=procs,
                mig=uuid.startswith("MIG-"),
            )
        )
        if fail:
            failing.add(uuid)
    return up, tuple(gpus), frozenset(failing)


def _processes(raw: Any, where: str) -> tuple[ProcessSample, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.processes: must be a list")
    if len(raw) > MAX_PROCESSES_PER_GPU:
        raise ConfigError(f"{where}.processes: more than {MAX_PROCESSES_PER_GPU}")
    out: list[ProcessSample] = []
    for j, p in enumerate(raw):
        w = f"{where}.processes[{j}]"
        if not isinstance(p, dict):
            raise ConfigError(f"{w}: expected a mapping with pid and usedBytes")
        pid = _int(p.get("pid"), f"{w}.pid", minimum=1, maximum=MAX_PID)
        assert pid is not None
        out.append(ProcessSample(pid=pid, used_bytes=_int(p.get("usedBytes"), f"{w}.usedBytes",
                                                          optional=True)))
    return tuple(out)


class FakeNvmlSource:
    """Serves the GPUs of a YAML file as NVML would; reloads the file when it changes."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._mtime = self.path.stat().st_mtime_ns if self.path.exists() else 0
        data = load_yaml(self.path)
        self.pods_ref: object = data.get("pods")  # the fake pods file named in it, if any
        self._up, self._gpus, self._failing = parse_fake_gpus(data, self.path)

    def _reload_if_changed(self) -> int:
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime == self._mtime:
                return 0
            self._mtime = mtime
            data = load_yaml(self.path)
            self._up, self._gpus, self._failing = parse_fake_gpus(data, self.path)
        except (OSError, ConfigError) as err:
            log.warning("fake NVML file not reloaded, keeping the previous one: %s", err)
            return 1
        return 0

    def sample(self) -> NvmlReading:
        errors = self._reload_if_changed()
        if not self._up:
            return NvmlReading(up=False, errors=errors)
        gpus = tuple(g for g in self._gpus if g.uuid not in self._failing)
        return NvmlReading(up=True, gpus=gpus, errors=errors + len(self._failing))
