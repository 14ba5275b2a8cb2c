"""The `diagnose --json` object, key by key: the contract the CLI, the operator and users' scripts
read (mutation survivors of model.py's ``to_json_dict`` methods: a renamed key, a dropped value or
another rounding went unnoticed while every test read the typed fields instead).

Every expected dict is written out whole with literal values, so a key renamed, added or lost
fails here.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.model import (
    Diagnosis,
    Figures,
    Growth,
    OtherProcess,
    Recommendation,
)

pytestmark = pytest.mark.unit

MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process "
    "has 77.73 GiB memory in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
    "7.00 GiB is reserved by PyTorch but unallocated."
)


def test_growth_json_names_every_figure_and_rounds_the_rate_to_three_places() -> None:
    growth = Growth("log", points=7, first_bytes=1000, last_bytes=4500, per_unit=12.34567)
    assert growth.to_json_dict() == {
        "source": "log",
        "points": 7,
        "first_bytes": 1000,
        "last_bytes": 4500,
        "growth_bytes": 3500,
        "per_unit": 12.346,
    }
    # round half to even at the third place, and a whole rate stays a float
    assert Growth("samples", 5, 0, 1, 0.0005).to_json_dict()["per_unit"] == 0.001
    assert Growth("samples", 5, 0, 1, 0.12349).to_json_dict()["per_unit"] == 0.123
    whole = Growth("node-rate", 5, 0, 1, 2.0).to_json_dict()["per_unit"]
    assert whole == 2.0 and isinstance(whole, float)


def test_another_process_names_its_pod_only_when_the_node_knew_either_half() -> None:
    assert OtherProcess(pid=7, bytes=1024).to_json_dict() == {"pid": 7, "bytes": 1024}
    assert OtherProcess(7, 1024, namespace="team-a", pod="trainer-0").to_json_dict() == {
        "pid": 7,
        "bytes": 1024,
        "namespace": "team-a",
        "pod": "trainer-0",
    }
    # either half alone still shows both keys (the other as null), so readers see one shape
    assert OtherProcess(7, 1024, namespace="team-a").to_json_dict() == {
        "pid": 7,
        "bytes": 1024,
        "namespace": "team-a",
        "pod": None,
    }
    assert OtherProcess(None, 1024, pod="trainer-0").to_json_dict() == {
        "pid": None,
        "bytes": 1024,
        "namespace": None,
        "pod": "trainer-0",
    }


def test_a_diagnosis_json_is_the_whole_contract_with_growth_and_extras() -> None:
    diagnosis = Diagnosis(
        detected=True,
        framework="pytorch",
        kind="leak",
        contributing=("fragmentation",),
        figures=Figures(
            requested_bytes=2048,
            total_bytes=8192,
            free_bytes=1024,
            process_bytes=7000,
            allocated_bytes=6000,
            reserved_unallocated_bytes=500,
            allowed_bytes=None,
            other_processes=(OtherProcess(9, 100, "ns", "p"),),
        ),
        torch_version_hint=">=2.4",
        recommendation=Recommendation("PYTORCH_CUDA_ALLOC_CONF", "x", ("a",)),
        summary="s",
        oom_count=3,
        message="the message",
        alloc_conf_problems=("bad",),
        growth=Growth("log", 6, 100, 400, 1.0),
        extra=(("phase", "forward"), ("rank", "2")),
    )
    assert diagnosis.to_json_dict() == {
        "detected": True,
        "framework": "pytorch",
        "kind": "leak",
        "contributing": ["fragmentation"],
        "figures": {
            "requested_bytes": 2048,
            "total_bytes": 8192,
            "free_bytes": 1024,
            "process_bytes": 7000,
            "allocated_bytes": 6000,
            "reserved_unallocated_bytes": 500,
            "allowed_bytes": None,
            "other_processes": [{"pid": 9, "bytes": 100, "namespace": "ns", "pod": "p"}],
        },
        "torch_version_hint": ">=2.4",
        "recommendation": {"env": "PYTORCH_CUDA_ALLOC_CONF", "alloc_conf": "x", "actions": ["a"]},
        "summary": "s",
        "oom_count": 3,
        "message": "the message",
        "alloc_conf_problems": ["bad"],
        "growth": {
            "source": "log",
            "points": 6,
            "first_bytes": 100,
            "last_bytes": 400,
            "growth_bytes": 300,
            "per_unit": 1.0,
        },
        "phase": "forward",
        "rank": "2",
    }


def test_without_growth_the_key_is_absent_not_null() -> None:
    out = Diagnosis(
        detected=False,
        framework=None,
        kind="unknown",
        contributing=(),
        figures=Figures(),
        torch_version_hint=None,
        recommendation=Recommendation(),
        summary="no out-of-memory failure found in the log",
    ).to_json_dict()
    assert "growth" not in out
    assert out["message"] is None
    assert sorted(out) == [
        "alloc_conf_problems",
        "contributing",
        "detected",
        "figures",
        "framework",
        "kind",
        "message",
        "oom_count",
        "recommendation",
        "summary",
        "torch_version_hint",
    ]


def test_a_real_message_reaches_the_json_verbatim() -> None:
    out = json.loads(json.dumps(diagnose(MESSAGE + "\n").to_json_dict()))
    assert out["message"] == MESSAGE
    assert out["figures"]["requested_bytes"] == 2 * 1024**3


# -- from_json_dict: the same JSON read back (explain reads the pod's annotations this way) ------


def test_a_diagnosis_reads_back_from_its_own_json() -> None:
    diagnosis = diagnose(MESSAGE)
    back = Diagnosis.from_json_dict(json.loads(json.dumps(diagnosis.to_json_dict())))
    # to_json_dict leaves out the GPU's index and the private pools: the rest comes back
    assert back.figures == dataclasses.replace(diagnosis.figures, gpu_index=None,
                                               private_pool_bytes=None)
    assert back.recommendation == diagnosis.recommendation
    assert (back.kind, back.summary, back.contributing, back.detected, back.oom_count) == (
        diagnosis.kind, diagnosis.summary, diagnosis.contributing, True, diagnosis.oom_count)


def test_figures_read_the_operators_camel_case_evidence_too() -> None:
    evidence = {"requestedBytes": 2, "totalBytes": 10, "freeBytes": 1, "processBytes": 7,
                "allocatedBytes": 5, "reservedUnallocatedBytes": 1, "allowedBytes": None,
                "otherProcesses": [{"pid": 9, "bytes": 3, "namespace": "ml", "pod": "p"}]}
    assert Figures.from_json_dict(evidence) == Figures(
        requested_bytes=2, total_bytes=10, free_bytes=1, process_bytes=7, allocated_bytes=5,
        reserved_unallocated_bytes=1, other_processes=(OtherProcess(9, 3, "ml", "p"),))


@pytest.mark.parametrize("junk", [None, [], "x", 5, {"figures": [1], "kind": 3,
                                                      "recommendation": "r", "oom_count": -1,
                                                      "contributing": "capacity"}])
def test_json_of_another_shape_reads_as_absent_never_raises(junk: object) -> None:
    back = Diagnosis.from_json_dict(junk)
    assert (back.kind, back.figures, back.recommendation, back.oom_count, back.contributing) == (
        "unknown", Figures(), Recommendation(), 0, ())


def test_sizes_are_whole_bytes_and_lists_are_bounded() -> None:
    figures = Figures.from_json_dict({
        "requested_bytes": True, "total_bytes": 2**63, "free_bytes": 1.5, "process_bytes": -1,
        "other_processes": [{"pid": 1}, {"pid": 2, "bytes": 5}, *([{"bytes": 1}] * 100)]})
    assert (figures.requested_bytes, figures.total_bytes, figures.free_bytes,
            figures.process_bytes) == (None, None, None, None)
    assert figures.other_processes[0] == OtherProcess(2, 5)
    assert len(figures.other_processes) == 63  # 64 read, the one without bytes left out
    assert Growth is not None  # growth is not read back (the operator writes part of it)


# -- every field back, each by its own key (CI's mutation run on 59a6230: 53 survivors here, a key
# misspelt or a field dropped in from_json_dict, because the round trip above compared a few) ---

EVERY_FIELD = Diagnosis(
    detected=True,
    framework="jax",
    kind="fragmentation",
    contributing=("capacity", "other-process"),
    figures=Figures(requested_bytes=1, total_bytes=2, free_bytes=3, process_bytes=4,
                    allocated_bytes=5, reserved_unallocated_bytes=6, allowed_bytes=7,
                    other_processes=(OtherProcess(8, 9, "ml", "trainer-0"),
                                     OtherProcess(None, 10))),
    torch_version_hint="2.1 or later",
    recommendation=Recommendation(env="PYTORCH_CUDA_ALLOC_CONF",
                                  alloc_conf="expandable_segments:True", actions=("a", "b")),
    summary="the summary",
    oom_count=11,
    message="the message",
    alloc_conf_problems=("p1", "p2"),
)


def test_every_field_the_json_writes_reads_back_as_it_was() -> None:
    back = Diagnosis.from_json_dict(json.loads(json.dumps(EVERY_FIELD.to_json_dict())))
    assert back == EVERY_FIELD


def test_the_two_figures_json_leaves_out_are_read_from_either_case() -> None:
    for raw in ({"private_pool_bytes": 12, "gpu_index": 3, "allowed_bytes": 7},
                {"privatePoolBytes": 12, "gpuIndex": 3, "allowedBytes": 7}):
        assert Figures.from_json_dict(raw) == Figures(private_pool_bytes=12, gpu_index=3,
                                                      allowed_bytes=7)


def test_zero_is_a_size_and_gpu_zero_an_index() -> None:
    figures = Figures.from_json_dict({"free_bytes": 0, "gpu_index": 0})
    assert (figures.free_bytes, figures.gpu_index) == (0, 0)


def test_a_diagnosis_without_a_summary_reads_an_empty_one() -> None:
    assert Diagnosis.from_json_dict({"kind": "capacity"}).summary == ""


@pytest.mark.parametrize("item", [{"pid": 1}, [1, 2], "bytes", None])
def test_another_process_without_its_bytes_is_a_value_error_that_says_so(item: object) -> None:
    with pytest.raises(ValueError) as raised:
        OtherProcess.from_json_dict(item)
    assert str(raised.value) == "an other process without its bytes"
