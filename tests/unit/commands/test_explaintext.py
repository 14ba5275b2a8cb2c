"""`gpu-auditor explain --json`: the explanation as JSON, every figure in bytes."""

from __future__ import annotations

import json

import pytest

from gpu_auditor.base.contract import Allocated
from gpu_auditor.base.nodereport import PodEntry
from gpu_auditor.commands import explaintext
from gpu_auditor.commands.explanation import explain

from .explain_helpers import (
    GIB,
    UID,
    failed_pod,
    node_report,
    operator_annotations,
)

pytestmark = pytest.mark.unit


def test_json_output_is_the_whole_explanation_in_bytes() -> None:
    report = node_report(PodEntry("ml", "finetune-7b-abc12", UID, "main", Allocated.TRUE, 10 * GIB))
    e = explain(failed_pod(operator_annotations("fragmentation.log")), events=[], owners=("Job/j",),
                report=report, report_note="r")
    data = json.loads(json.dumps(explaintext.to_json(e)))
    assert data["diagnosis"]["kind"] == "fragmentation"
    assert data["owners"] == ["Job/j"]
    assert data["gpus"][0]["tenants"][0]["allocated"] == "true"
    assert data["gpus"][0]["unattributed_bytes"] == 90 * GIB
    assert data["setting"]["set_env_command"] == ""  # a Job's pod template is immutable
    assert data["setting"]["no_command"].startswith("a Job's pod template cannot change")
