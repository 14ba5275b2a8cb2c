"""One container's allocator setting: every class of mistake, worded with a did-you-mean, by
the release the container declares (env, image tag) or the newest rules when it declares none."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.admission.findings import check_container

pytestmark = pytest.mark.unit


def container(image: str = "registry.example/train:latest", **env: str) -> dict[str, Any]:
    return {"name": "main", "image": image,
            "env": [{"name": k, "value": v} for k, v in env.items()]}


def kinds(c: dict[str, Any]) -> list[str]:
    return [f.kind for f in check_container(c)]


@pytest.mark.parametrize("value", [
    "expandable_segments:True",
    "max_split_size_mb:128,garbage_collection_threshold:0.6",
    "backend:cudaMallocAsync",
    "roundup_power2_divisions:[256:1,512:2,>:8]",
])
def test_valid_settings_have_no_finding(value: str) -> None:
    assert check_container(container(PYTORCH_CUDA_ALLOC_CONF=value)) == []


def test_no_allocator_variable_has_no_finding() -> None:
    assert check_container(container(OTHER="expandable_segment:True")) == []
    assert check_container({"name": "x", "env": "not a list"}) == []


def test_unknown_key_says_did_you_mean_and_the_release_it_was_checked_as() -> None:
    [finding] = check_container(container(PYTORCH_CUDA_ALLOC_CONF="expandable_segment:True"))
    assert finding.kind == "unknown-key"
    assert "did you mean expandable_segments?" in finding.message
    assert "torch release unknown, checked as 2.13" in finding.message
    assert finding.text().startswith('container "main": PYTORCH_CUDA_ALLOC_CONF: ')


def test_lower_case_boolean_is_invalid_with_the_right_spelling_suggested() -> None:
    [finding] = check_container(container(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:true"))
    assert finding.kind == "invalid-value"
    assert "got 'true'" in finding.message
    assert "did you mean expandable_segments:True?" in finding.message


@pytest.mark.parametrize(("value", "kind"), [
    ("max_split_size_mb:10", "invalid-value"),
    ("garbage_collection_threshold:1.5", "invalid-value"),
    ("pinned_num_register_threads:3", "invalid-value"),
    ("max_split_size_mb:-1", "ignored"),
    ("backend:cudaMallocAsync,expandable_segments:True", "ignored"),
    ("expandable_segments", "syntax"),
])
def test_each_class_of_mistake(value: str, kind: str) -> None:
    assert kinds(container(PYTORCH_CUDA_ALLOC_CONF=value)) == [kind]


def test_max_split_size_minus_one_is_a_no_op_not_a_diagnosis_problem() -> None:
    [finding] = check_container(container(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:-1"))
    assert "does nothing" in finding.message


def test_release_from_the_image_tag_limits_the_keys() -> None:
    old = container("pytorch/pytorch:2.0.1-cuda11.7-cudnn8-runtime",
                    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    [finding] = check_container(old)
    assert finding.kind == "not-in-release"
    assert "needs torch >= 2.1" in finding.message and "(torch 2.0)" in finding.message
    new = container("pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime",
                    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    assert check_container(new) == []


def test_release_from_env_wins_over_the_newest_rules() -> None:
    c = container(PYTORCH_CUDA_ALLOC_CONF="large_segment_size_mb:64", TORCH_VERSION="2.10.1")
    assert kinds(c) == ["not-in-release"]
    assert kinds(container(PYTORCH_CUDA_ALLOC_CONF="large_segment_size_mb:64")) == []


def test_both_variables_with_different_values_is_a_finding() -> None:
    c = container(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                  PYTORCH_ALLOC_CONF="max_split_size_mb:128")
    [finding] = check_container(c)
    assert finding.kind == "conflicting-variables"
    assert finding.variable == "PYTORCH_ALLOC_CONF"


def test_both_variables_with_the_same_value_are_fine() -> None:
    c = container(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                  PYTORCH_ALLOC_CONF="expandable_segments:True")
    assert check_container(c) == []


def test_the_new_variable_alone_does_nothing_before_2_9() -> None:
    c = container("pytorch/pytorch:2.4.0", PYTORCH_ALLOC_CONF="expandable_segments:True")
    assert kinds(c) == ["ignored"]
    c = container("pytorch/pytorch:2.10.0", PYTORCH_ALLOC_CONF="expandable_segments:True")
    assert kinds(c) == []


def test_a_huge_value_is_reported_not_parsed() -> None:
    [finding] = check_container(container(PYTORCH_CUDA_ALLOC_CONF="a:[" * 100_000))
    assert finding.kind == "not-checked"
    assert "300000 characters" in finding.message


def test_tenant_text_is_echoed_printable_and_bounded() -> None:
    c = container(PYTORCH_CUDA_ALLOC_CONF="\x1b[31m" + "k" * 500 + ":1")
    c["name"] = "n\r\nX-Injected: 1" + "x" * 100
    for finding in check_container(c):
        text = finding.text()
        assert all(" " <= ch <= "~" for ch in text)
        assert len(text) < 320


class Bomb(list):  # type: ignore[type-arg]
    """A YAML alias bomb's stand-in: a value whose text must never be taken."""

    def __str__(self) -> str:
        raise AssertionError("str() of a tenant's non-string value")

    __repr__ = __str__


def test_a_value_that_is_not_a_string_is_absent_and_never_made_text() -> None:
    """A manifest's alias can make a 10**8-element list of any field; its str() took 31 s for
    410 bytes of YAML. The API server refuses a non-string env value, so it reads as unset."""
    bomb = Bomb()
    assert check_container({"name": "main", "env": [
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": bomb}]}) == []
    assert check_container({"name": "main", "env": [
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": 128}]}) == []
    [finding] = check_container({"name": bomb, "image": bomb, "env": [
        {"name": "TORCH_VERSION", "value": 2.1},
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segment:True"}]})
    assert finding.container == "?" and "torch release unknown" in finding.message


def many_unknown_keys(count: int, prefix: str = "k") -> str:
    return ",".join(f"{prefix}{i:03d}:1" for i in range(count))


def test_a_setting_with_many_problems_shows_eight_and_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """572 unknown keys made 572 findings and 572 difflib searches per container (0.08 s each
    container: 64 containers kept the webhook busy for 16 s)."""
    import gpu_auditor.admission.findings as findings

    searched: list[str] = []
    real = findings.difflib.get_close_matches

    def counting(word: str, *args: Any, **kwargs: Any) -> list[str]:
        searched.append(word)
        return real(word, *args, **kwargs)

    monkeypatch.setattr(findings.difflib, "get_close_matches", counting)
    result = check_container(container(PYTORCH_CUDA_ALLOC_CONF=many_unknown_keys(572)))
    assert len(result) == findings.MAX_FINDINGS == 8
    assert [f.kind for f in result] == ["unknown-key"] * 7 + ["not-checked"]
    assert result[-1].message.startswith("565 more findings in this setting not shown")
    assert searched == [f"k{i:03d}" for i in range(7)]


def test_a_conflict_takes_one_of_the_eight() -> None:
    c = container(PYTORCH_CUDA_ALLOC_CONF=many_unknown_keys(20), PYTORCH_ALLOC_CONF="x:1")
    result = check_container(c)
    assert len(result) == 8 and result[0].kind == "conflicting-variables"
    assert result[-1].message.startswith("14 more findings")


def test_eight_problems_are_all_shown() -> None:
    result = check_container(container(PYTORCH_CUDA_ALLOC_CONF=many_unknown_keys(8)))
    assert [f.kind for f in result] == ["unknown-key"] * 8


def test_a_long_unknown_key_is_not_searched_for_a_did_you_mean(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpu_auditor.admission.findings as findings

    def never(*_: Any, **__: Any) -> list[str]:
        raise AssertionError("difflib on a key no known key can be close to")

    monkeypatch.setattr(findings.difflib, "get_close_matches", never)
    [finding] = check_container(container(PYTORCH_CUDA_ALLOC_CONF="x" * 3000 + ":1"))
    assert finding.kind == "unknown-key" and "did you mean" not in finding.message
