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
REVISED: dict[str, tuple[str, str]] = {
    "context_oom_gpu_full.log": (
        "gpu-shared",
        "issue 24 item 4: a raw CUDA out-of-memory error at the job's first CUDA call "
        "(model.cuda()) names another process from the log alone; the label predates the rule "
        "(its own kind_with_node_data is gpu-shared: another process held all but 64 MiB)",
    ),
    "seed_example_fragmentation.log": (
        "capacity",
        "issue 24 item 2: the triage card's example (not a measured job: no re-run says a setting "
        "fixed it) has 6.90 GiB idle, 9 % of what PyTorch holds, and no step finished in its log; "
        "public threads with 9-18 % idle and no progress were fixed by less work "
        "(evaluation/public a-001, a-010): capacity with fragmentation contributing, no setting",
    ),
}
"""Labels the issue-24 rules read otherwise, with why. The label files are left as their authors
wrote them."""

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
    kind = REVISED[name][0] if name in REVISED else label["kind"]
    assert diagnosis.kind == kind, diagnosis.summary


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
    assert label["kind"] == "unknown"  # as labelled before issue 24 (REVISED)
    assert log_only.kind == "gpu-shared"
    assert log_only.summary.startswith("gpu-shared: the job's first CUDA call failed")
    assert with_node.kind == label["kind_with_node_data"] == "gpu-shared"
    assert with_node.figures.other_processes[0].pod == "trainer-0"
    assert "ml/trainer-0" in with_node.summary


def test_async_backend_log_never_gets_native_only_keys() -> None:
    log = (FIXTURES / "corpus" / "async_backend_oom.log").read_bytes()
    diagnosis = diagnose(log, alloc_conf="backend:cudaMallocAsync")
    assert diagnosis.recommendation.alloc_conf is None
    assert diagnosis.to_json_dict()["backend"] == "cudaMallocAsync"
