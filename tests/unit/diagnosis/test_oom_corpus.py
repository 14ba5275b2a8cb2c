"""Every real H200 log in the corpus gives its labelled kind and framework.

Reads ``../shared/corpus/oom/labels.json`` when the shared folder is there, and always the copy
under ``tests/fixtures/oom/corpus`` so CI without shared/ still runs these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.diagnosis import NodeEvidence, OtherPod, diagnose, validate_alloc_conf

from .diagnosis_helpers import FIXTURES, GIB, MIB, SHARED_CORPUS, load_labels

pytestmark = pytest.mark.unit

CORPORA = [FIXTURES / "corpus"] + (
    [SHARED_CORPUS] if (SHARED_CORPUS / "labels.json").is_file() else []
)
CASES = [
    pytest.param(directory, name, label, id=f"{directory.parent.name}/{name}")
    for directory in CORPORA
    for name, label in load_labels(directory).items()
]


@pytest.mark.parametrize(("directory", "name", "label"), CASES)
def test_corpus_log_gives_its_labelled_kind_and_framework(
    directory: Path, name: str, label: dict[str, Any]
) -> None:
    diagnosis = diagnose((directory / name).read_bytes())
    assert diagnosis.detected is label["detected"]
    assert diagnosis.framework == label["framework"]
    assert diagnosis.kind == label["kind"], diagnosis.summary


@pytest.mark.parametrize(("directory", "name", "label"), CASES)
def test_corpus_recommendation_contains_no_setting_verified_not_to_help(
    directory: Path, name: str, label: dict[str, Any]
) -> None:
    diagnosis = diagnose((directory / name).read_bytes(), torch_version="2.11")
    recommended = diagnosis.recommendation.alloc_conf
    for setting, outcome in label.get("verified", {}).items():
        if outcome == "fixed":
            assert recommended == setting
        else:
            assert recommended != setting
    if recommended is not None:
        assert validate_alloc_conf(recommended, torch_version="2.11") == []


@pytest.mark.parametrize("directory", CORPORA, ids=lambda d: d.parent.name)
def test_raw_cuda_error_becomes_gpu_shared_with_the_node_report(directory: Path) -> None:
    name = "context_oom_gpu_full.log"
    label = load_labels(directory)[name]
    node = NodeEvidence(
        gpu_uuid="GPU-0",
        gpu_total_bytes=round(139.8 * GIB),
        gpu_free_bytes=64 * MIB,
        other_pods=(OtherPod("ml", "trainer-0", round(139.2 * GIB), pid=872),),
        allocated=True,
    )
    log_only = diagnose((directory / name).read_bytes())
    with_node = diagnose((directory / name).read_bytes(), node=node)
    assert log_only.kind == label["kind"] == "unknown"
    assert with_node.kind == label["kind_with_node_data"] == "gpu-shared"
    assert with_node.figures.other_processes[0].pod == "trainer-0"
    assert "ml/trainer-0" in with_node.summary


def test_async_backend_log_never_gets_native_only_keys() -> None:
    log = (FIXTURES / "corpus" / "async_backend_oom.log").read_bytes()
    diagnosis = diagnose(log, alloc_conf="backend:cudaMallocAsync")
    assert diagnosis.recommendation.alloc_conf is None
    assert diagnosis.to_json_dict()["backend"] == "cudaMallocAsync"
