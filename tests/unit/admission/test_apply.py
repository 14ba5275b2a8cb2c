"""An owner's recommended setting merged into its next pod: what an opted-in pod becomes, the
container's own keys winning, nothing guessed, nothing a release rejects."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_auditor.admission.apply import (
    APPLY_LABEL,
    Recommended,
    apply,
    recommended,
    wants_recommendation,
)
from gpu_auditor.base.trial import APPLIED_LIMIT, Outcome, Trial, trial_annotations

from .jsonpatch import apply as patched

pytestmark = pytest.mark.unit

P = "gpu-auditor.io/"
ES = "expandable_segments:True"
APPLIED = f"{P}recommendation-applied"


def pod(*containers: dict[str, Any], labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": "train-", "labels": labels or {}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"kind": "Pod", "metadata": meta, "spec": {"containers": list(containers)}}


def main(*env: dict[str, Any], **fields: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "pytorch/pytorch:2.11.0-cuda13.0",
                                 **fields}
    if env:
        container["env"] = list(env)
    return container


def var(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def trial(**fields: Any) -> Trial:
    base: dict[str, Any] = dict(setting=ES, value=ES, kind="fragmentation", container="main",
                                failed_pod="ml/train-a", release="2.11")
    base.update(fields)
    return Trial(**base)


REC = Recommended("Job train", ES, trial())


def env_of(result: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in result["spec"]["containers"][container].get(
        "env", [])}


@pytest.mark.parametrize(("labels", "namespace", "wanted"), [
    ({}, False, False), ({APPLY_LABEL: "true"}, False, True), ({}, True, True),
    ({APPLY_LABEL: "false"}, True, False), ({APPLY_LABEL: "yes"}, False, False),
])
def test_only_an_opt_in_wants_the_recommendation(labels: dict[str, str], namespace: bool,
                                                 wanted: bool) -> None:
    assert wants_recommendation(pod(main(), labels=labels),
                                namespace_opted_in=namespace) is wanted


# -- what the owner recommends ------------------------------------------------------------------

def owner_notes(value: str | None = ES, t: Trial | None = None) -> dict[str, Any]:
    notes: dict[str, Any] = {} if value is None else {f"{P}recommended-alloc-conf": value}
    if t is not None:
        notes.update({k: v for k, v in trial_annotations(t, P).items() if v is not None})
    return notes


def test_an_open_trial_recommends_its_setting() -> None:
    found = recommended(owner_notes(ES, trial()), P, "Job train")
    assert found == Recommended("Job train", ES, trial())


def test_without_a_trial_the_whole_recommended_value_is_the_setting() -> None:
    found = recommended(owner_notes(f"max_split_size_mb:256,{ES}"), P, "Job train")
    assert found is not None and found.setting == f"{ES},max_split_size_mb:256"


@pytest.mark.parametrize("notes", [
    owner_notes(None), owner_notes(""), owner_notes("expandable_segment:True"),
    owner_notes("x" * 2000), owner_notes(ES, trial(outcome=Outcome.NOT_FIXED, rejected=(ES,))),
    owner_notes(ES, trial(outcome=Outcome.FIXED)),
    owner_notes(ES, trial(setting="max_split_size_mb:512", value="max_split_size_mb:512",
                          rejected=(ES,))),
])
def test_nothing_is_recommended_that_is_not_a_setting_or_did_not_help(
        notes: dict[str, Any]) -> None:
    assert recommended(notes, P, "Job train") is None


def test_a_not_applied_trial_is_still_applied() -> None:
    assert recommended(owner_notes(ES, trial(outcome=Outcome.NOT_APPLIED)), P, "Job x")


# -- the patch ----------------------------------------------------------------------------------

def test_a_container_without_a_setting_gets_the_variable_and_the_pod_the_annotation() -> None:
    done = apply(pod(main(var("A", "1"))), REC, prefix=P, why="pod ml/train-a ran out of "
                 "memory (fragmentation)")
    result = patched(pod(main(var("A", "1"))), done.patch)
    assert env_of(result) == {"A": "1", "PYTORCH_CUDA_ALLOC_CONF": ES}
    assert done.applied == (("main", "PYTORCH_CUDA_ALLOC_CONF", ES),)
    assert result["metadata"]["annotations"][APPLIED] == (
        "main: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (recommended on Job train: pod "
        "ml/train-a ran out of memory (fragmentation))")
    assert done.warnings == ()


def test_a_container_without_env_gets_an_env_list_and_annotations_are_added_beside_others(
) -> None:
    body = pod(main(), annotations={"team": "ml"})
    result = patched(body, apply(body, REC, prefix=P).patch)
    assert env_of(result) == {"PYTORCH_CUDA_ALLOC_CONF": ES}
    assert result["metadata"]["annotations"]["team"] == "ml"


def test_the_containers_own_keys_are_kept_and_win() -> None:
    body = pod(main(var("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6")))
    result = patched(body, apply(body, REC, prefix=P).patch)
    assert env_of(result)["PYTORCH_CUDA_ALLOC_CONF"] == f"garbage_collection_threshold:0.6,{ES}"
    body = pod(main(var("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")))
    done = apply(body, REC, prefix=P)
    assert done.patch == [] and "the container's keys win" in done.warnings[0]


def test_the_last_entry_of_the_variable_is_the_one_changed_and_its_references_kept() -> None:
    body = pod(main(var("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"),
                    var("BASE", "max_split_size_mb:256"),
                    var("PYTORCH_CUDA_ALLOC_CONF", "$(BASE)")))
    done = apply(body, REC, prefix=P)
    assert done.patch[0] == {"op": "replace", "path": "/spec/containers/0/env/2/value",
                             "value": f"$(BASE),{ES}"}
    assert done.applied == (("main", "PYTORCH_CUDA_ALLOC_CONF", f"max_split_size_mb:256,{ES}"),)


def test_a_container_that_runs_with_the_setting_already_is_left_alone_silently() -> None:
    body = pod(main(var("PYTORCH_CUDA_ALLOC_CONF", ES)))
    assert apply(body, REC, prefix=P).patch == []
    assert apply(body, REC, prefix=P).warnings == ()


@pytest.mark.parametrize(("container", "why"), [
    (main({"name": "PYTORCH_CUDA_ALLOC_CONF", "valueFrom": {"configMapKeyRef": {
        "name": "c", "key": "k"}}}), "valueFrom.configMapKeyRef"),
    (main(envFrom=[{"configMapRef": {"name": "base"}}]), 'envFrom ConfigMap "base"'),
    (main(var("PYTORCH_CUDA_ALLOC_CONF", "$(X)"), envFrom=[{"secretRef": {"name": "s"}}]),
     "expands $(X)"),
])
def test_a_setting_unknown_at_admission_is_never_guessed_at(container: dict[str, Any],
                                                           why: str) -> None:
    done = apply(pod(container), REC, prefix=P)
    assert done.patch == [] and why in done.warnings[0]
    assert done.warnings[0].startswith('gpu-auditor: recommended setting not applied to '
                                       'container "main"')


def test_a_key_the_containers_release_rejects_is_never_added() -> None:
    old = main(image="pytorch/pytorch:2.0.1-cuda11.7")
    done = apply(pod(old), REC, prefix=P)
    assert done.patch == [] and "torch 2.0 rejects expandable_segments" in done.warnings[0]
    two = Recommended("Job t", f"{ES},max_split_size_mb:512", trial(
        setting=f"{ES},max_split_size_mb:512"))
    done = apply(pod(old), two, prefix=P)
    assert done.applied == (("main", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512"),)
    assert "rejects expandable_segments" in done.warnings[0]


def test_without_a_release_in_the_spec_the_diagnosis_release_is_checked() -> None:
    bare = main(image="registry.example/train:1")
    done = apply(pod(bare), Recommended("Job t", ES, trial(release="2.0")), prefix=P)
    assert done.patch == [] and "torch 2.0 rejects" in done.warnings[0]
    assert apply(pod(bare), Recommended("Job t", ES, None), prefix=P).patch


def test_pytorch_alloc_conf_is_merged_where_torch_reads_it_and_not_where_it_is_ignored(
) -> None:
    new = pod(main(var("PYTORCH_ALLOC_CONF", "max_split_size_mb:256")))
    assert env_of(patched(new, apply(new, REC, prefix=P).patch)) == {
        "PYTORCH_ALLOC_CONF": f"max_split_size_mb:256,{ES}"}
    old = pod(main(var("PYTORCH_ALLOC_CONF", "max_split_size_mb:256"),
                   image="pytorch/pytorch:2.4.0-cuda12.1"))
    assert env_of(patched(old, apply(old, REC, prefix=P).patch)) == {
        "PYTORCH_ALLOC_CONF": "max_split_size_mb:256", "PYTORCH_CUDA_ALLOC_CONF": ES}


def test_only_the_container_it_was_recommended_for_when_the_pod_has_it() -> None:
    body = pod({"name": "sidecar", "image": "log"}, main())
    result = patched(body, apply(body, REC, prefix=P).patch)
    assert env_of(result, 0) == {} and env_of(result, 1) == {"PYTORCH_CUDA_ALLOC_CONF": ES}
    other = pod({"name": "a", "image": "x"}, {"name": "b", "image": "y"})
    assert len(apply(other, REC, prefix=P).applied) == 2


def test_a_pod_that_carries_the_annotation_already_is_left_alone() -> None:
    body = pod(main(), annotations={APPLIED: "copied"})
    assert apply(body, REC, prefix=P) == apply(body, REC, prefix=P)
    assert apply(body, REC, prefix=P).patch == []


@pytest.mark.parametrize("body", [
    {"kind": "Pod"}, {"kind": "Pod", "spec": {"containers": "x"}},
    pod(main(env="PYTORCH_CUDA_ALLOC_CONF")), pod(main({"value": "x"})),
    {"kind": "Pod", "spec": {"containers": ["not a container"]}},
])
def test_hostile_shapes_change_nothing(body: dict[str, Any]) -> None:
    assert apply(body, REC, prefix=P).patch == []


def test_the_annotation_is_bounded_and_the_patch_serializes() -> None:
    done = apply(pod(main()), REC, prefix=P, why="x" * 2000)
    assert len(done.note.encode()) <= APPLIED_LIMIT
    json.dumps(done.patch)
