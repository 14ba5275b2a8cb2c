"""The fake GPU source (--nvml-fake): GPUs from a file, reloaded when it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_auditor.base.errors import ConfigError
from node_agent.fake_source import FakeNvmlSource

pytestmark = pytest.mark.unit

GPU_YAML = """
gpus:
- index: 0
  uuid: GPU-a
  memoryTotalBytes: 1000
  memoryReservedBytes: 100
  processes: [{pid: 1, usedBytes: 300}, {pid: 2, usedBytes: null}]
- index: 1
  uuid: GPU-b
  memoryTotalBytes: 1000
  fail: true
"""


def test_fake_gpus_derive_used_and_free_and_drop_failing_ones(tmp_path: Path) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_text(GPU_YAML)
    reading = FakeNvmlSource(f).sample()
    assert reading.up and reading.errors == 1
    (g,) = reading.gpus
    assert (g.uuid, g.used_bytes, g.free_bytes, g.reserved_bytes) == ("GPU-a", 300, 600, 100)
    assert [p.used_bytes for p in g.processes] == [300, None]


def test_nvml_up_false_behaves_like_a_missing_library(tmp_path: Path) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_text("nvmlUp: false\n" + GPU_YAML)
    reading = FakeNvmlSource(f).sample()
    assert not reading.up and reading.gpus == ()


def test_the_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_text(GPU_YAML)
    source = FakeNvmlSource(f)
    f.write_text(GPU_YAML.replace("usedBytes: 300", "usedBytes: 500"))
    os.utime(f, ns=(1, 1))  # make sure the mtime differs
    (g,) = source.sample().gpus
    assert g.processes[0].used_bytes == 500


def test_a_bad_reload_keeps_the_previous_gpus_and_counts_an_error(tmp_path: Path) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_text(GPU_YAML)
    source = FakeNvmlSource(f)
    f.write_text("gpus: [not: [valid")
    os.utime(f, ns=(1, 1))
    reading = source.sample()
    assert [g.uuid for g in reading.gpus] == ["GPU-a"] and reading.errors == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: {}", "gpus must be a list"),
        ("gpus:\n- uuid: GPU-a\n  memoryTotalBytes: -1\n",
         r"memoryTotalBytes: expected an integer in \[0, 9223372036854775807\], got -1"),
        ("gpus:\n- uuid: GPU-a\n  memoryTotalBytes: 1\n  processes: [{pid: x}]\n",
         r"processes\[0\].pid"),
        ("- a list", "expected a mapping at the top level"),
    ],
)
def test_bad_fake_files_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "nvml.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        FakeNvmlSource(f)


