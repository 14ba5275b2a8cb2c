"""The one env reader (`base.containerenv`): a container's variables as the kubelet sets them
(pkg/kubelet/kubelet_pods.go makeEnvironmentVariables, third_party/forked/golang/expansion),
and every reader of an allocator setting going through it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_auditor.admission.findings import UNKNOWN_VALUE, check_container
from gpu_auditor.admission.review import Request, validate
from gpu_auditor.base.containerenv import (
    MAX_EXPANDED,
    EnvValue,
    container_env,
    known_values,
)
from gpu_auditor.base.podspec import torch_version_hint
from gpu_auditor.commands.explanation import _container_variable
from gpu_auditor.controller.pod import AllocConf, current_alloc_conf

pytestmark = pytest.mark.unit

CUDA = "PYTORCH_CUDA_ALLOC_CONF"


def env(*pairs: tuple[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": "main", "env": [{"name": n, "value": v} for n, v in pairs], **more}


def value_of(container: dict[str, Any], name: str) -> str | None:
    return container_env(container)[name].value


# -- duplicates: the last entry of a name wins, everywhere ----------------------------------------


def test_the_last_of_two_entries_of_one_name_wins() -> None:
    c = env(("A", "first"), ("B", "b"), ("A", "second"))
    assert value_of(c, "A") == "second"
    assert known_values(container_env(c)) == {"A": "second", "B": "b"}


def test_a_later_entry_may_expand_the_earlier_value_of_its_own_name() -> None:
    assert value_of(env(("P", "/a"), ("P", "$(P):/b")), "P") == "/a:/b"


def pod_review(*pairs: tuple[str, str], operation: str = "CREATE") -> Request:
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"containers": [env(*pairs)]}}
    return Request(uid="u", operation=operation, obj=pod, old=None, namespace="ml",
                   user="alice")


def test_a_valid_first_copy_no_longer_lets_an_invalid_last_one_through_deny() -> None:
    """Issue 26, item 5: Kubernetes runs the container with the LAST entry; the webhook read
    the first, so in a deny namespace a valid first copy let an invalid last one in (and the
    reverse was refused)."""
    bypass = pod_review((CUDA, "expandable_segments:True"), (CUDA, "expandable_segment:True"))
    refused = validate(bypass, deny=True)
    assert not refused.allowed and "expandable_segment" in (refused.message or "")
    fixed = pod_review((CUDA, "expandable_segment:True"), (CUDA, "expandable_segments:True"))
    assert validate(fixed, deny=True).allowed and validate(fixed, deny=True).result == "clean"


def test_every_reader_of_the_setting_reads_the_last_entry() -> None:
    """One reader: the webhook and check-manifest (`check_container`), the operator
    (`current_alloc_conf`), explain (which variable a snippet replaces), the release."""
    c = env((CUDA, "expandable_segments:True"), (CUDA, "max_split_size_mb:10"),
            ("TORCH_VERSION", "2.0.1"), ("TORCH_VERSION", "2.4.0"))
    [finding] = check_container(c)
    assert (finding.kind == "invalid-value" and "torch 2.4" in finding.message) or \
        "max_split_size_mb" in finding.message
    assert current_alloc_conf(c) == AllocConf("max_split_size_mb:10")
    assert torch_version_hint(c) == "2.4"
    assert _container_variable({"spec": {"containers": [c]}}, "main") == CUDA


# -- $(VAR) expansion, as third_party/forked/golang/expansion ------------------------------------

CONTEXT = [("VAR_A", "A"), ("VAR_B", "B"), ("VAR_C", "C"), ("VAR_REF", "$$(VAR_A)"),
           ("VAR_EMPTY", "")]
"""Defined before the value under test (VAR_REF holds the text `$(VAR_A)`: `$$` escapes)."""


@pytest.mark.parametrize(("value", "expanded"), [
    ("$(VAR_A)", "A"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("___$(VAR_B)___", "___B___"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$(VAR_REF)", "$(VAR_A)"),  # no second round
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),  # undefined: left as written
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$$(VAR_A)", "$$$A"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("${VAR_A}", "${VAR_A}"),
    ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("--$($($($($--", "--$($($($($--"),
    ("$(foo$$var)", "$(foo$$var)"),
    ("\n", "\n"),
    ("$é$(VAR_A)", "$éA"),
])
def test_references_expand_as_the_kubelet_expands_them(value: str, expanded: str) -> None:
    """The cases of k8s.io/kubernetes third_party/forked/golang/expansion/expand_test.go."""
    assert value_of(env(*CONTEXT, ("X", value)), "X") == expanded


def test_a_reference_to_a_later_entry_is_left_as_written() -> None:
    assert value_of(env(("X", "$(LATER)"), ("LATER", "v")), "X") == "$(LATER)"


# -- what the spec does not hold is unknown, never guessed ---------------------------------------


def test_value_from_is_unknown_and_says_which_reference() -> None:
    c = {"env": [{"name": CUDA, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}
    assert container_env(c)[CUDA] == EnvValue(None, "set from valueFrom.configMapKeyRef")


def test_env_from_may_set_a_variable_env_does_not_name() -> None:
    c = {"envFrom": [{"configMapRef": {"name": "base"}}, {"prefix": "X_",
                                                          "secretRef": {"name": "s"}}],
         "env": [{"name": "OTHER", "value": "1"}]}
    got = container_env(c, (CUDA, "X_Y", "OTHER"))
    assert got[CUDA] == EnvValue(None, 'may be set by envFrom ConfigMap "base"', declared=False)
    assert got["X_Y"].unknown == 'may be set by envFrom Secret "s"'  # the later source
    assert got["OTHER"] == EnvValue("1")  # env wins over envFrom
    only_prefixed = {"envFrom": [{"prefix": "X_", "configMapRef": {"name": "c"}}]}
    assert container_env(only_prefixed, (CUDA,)) == {}  # no key of "c" makes that name


@pytest.mark.parametrize(("reference", "why"), [
    ("FROM_CM", 'may be set by envFrom ConfigMap "cm"'),
    ("SECRET", "set from valueFrom.secretKeyRef"),
    ("DB_SERVICE_HOST", "may be set by the kubelet from a Service"),
    ("DB_PORT_5432_TCP_ADDR", "may be set by the kubelet from a Service"),
])
def test_a_value_that_expands_something_unknown_is_unknown(reference: str, why: str) -> None:
    c = {"envFrom": [{"prefix": "FROM_", "configMapRef": {"name": "cm"}}],
         "env": [{"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                 {"name": CUDA, "value": f"$({reference}),expandable_segments:True"}]}
    assert container_env(c)[CUDA] == EnvValue(None, f"expands $({reference}) ({why})")


def test_the_webhook_says_unknown_and_never_refuses_for_it() -> None:
    c = {"name": "main", "envFrom": [{"configMapRef": {"name": "alloc"}}],
         "env": [{"name": CUDA, "value": "$(BASE),expandable_segments:True"}]}
    [finding] = check_container(c)
    assert finding.kind == UNKNOWN_VALUE and not finding.problem
    assert 'value unknown at admission: expands $(BASE) (may be set by envFrom ConfigMap ' \
        '"alloc"); not checked' in finding.message
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [c]}}
    outcome = validate(Request("u", "CREATE", pod, None, "ml", "alice"), deny=True)
    assert outcome.allowed and outcome.result == "warned"
    assert current_alloc_conf(c).value is None and "not read: expands $(BASE)" in \
        str(current_alloc_conf(c).ignored)


def test_without_env_from_the_literal_reference_is_what_torch_gets_and_is_checked() -> None:
    [finding] = check_container(env((CUDA, "$(BASE)")))
    assert finding.kind == "syntax"  # torch's tokenizer on the text `$(BASE)`


def test_entries_of_another_shape_are_skipped_never_made_text() -> None:
    class Bomb:
        def __str__(self) -> str:
            raise AssertionError("str() of a tenant's value")

        __repr__ = __eq__ = __hash__ = __str__  # type: ignore[assignment]

    c = {"env": [Bomb(), {"name": Bomb(), "value": "x"}, {"name": ["x"], "value": "y"},
                 {"name": "A", "value": Bomb()}, {"name": "A", "value": 5},
                 {"name": "B", "value": None}, {"name": "C"}],
         "envFrom": [Bomb(), {"prefix": Bomb(), "configMapRef": {"name": Bomb()}}]}
    assert container_env(c, ("A", "B", "C")) == {
        "B": EnvValue(""), "C": EnvValue(""),
        "A": EnvValue(None, 'may be set by envFrom ConfigMap "?"', declared=False)}


# -- bounded ------------------------------------------------------------------------------------


def test_doubling_references_stop_at_the_bound_and_cost_little() -> None:
    """`A=$(A)$(A)` sixty times would be 2**60 characters: the kubelet builds it; we stop."""
    c = env(("A", "x"), *[("A", "$(A)$(A)")] * 60, (CUDA, "$(A)"))
    start = time.perf_counter()
    got = container_env(c)
    assert time.perf_counter() - start < 0.5
    assert got[CUDA].value is None and "characters" in got[CUDA].unknown


def test_unclosed_references_are_linear() -> None:
    """`$(` with no `)` scanned to the end for each one, as Go's loop does, is quadratic: in
    Python, 8,000 of them take seconds (`kubelet_expand` below); one search per stretch."""
    value = "$(" * 8000
    start = time.perf_counter()
    assert value_of(env(*[("X", value)] * 4), "X") == value
    assert time.perf_counter() - start < 0.5


def test_a_long_expanded_value_is_unknown_not_built() -> None:
    c = env(("A", "a" * 10_000), ("X", "$(A)$(A)"))
    assert container_env(c)["X"].value is None
    assert f"longer than {MAX_EXPANDED}" in container_env(c)["X"].unknown


# -- the property: the kubelet's algorithm, byte by byte, is the oracle --------------------------


def kubelet_expand(value: str, defined: dict[str, str]) -> str:
    """third_party/forked/golang/expansion's Expand, transcribed character by character."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            rest = value[cursor + 1:]
            if rest[0] == "$":
                read, is_var, advance = "$", False, 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                read, is_var, advance = ((rest[1:close], True, close + 1) if close >= 0
                                         else ("$(", False, 1))
            else:
                read, is_var, advance = "$" + rest[0], False, 1
            out.append(defined.get(read, f"$({read})") if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


NAMES = st.sampled_from(["A", "B", "C", "D"])
TEXT = st.text(alphabet="$()AB-_ xé", max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(NAMES, TEXT), max_size=8))
def test_known_values_are_the_kubelets(entries: list[tuple[str, str]]) -> None:
    defined: dict[str, str] = {}
    for name, value in entries:
        defined[name] = kubelet_expand(value, defined) if value else ""
    assert known_values(container_env(env(*entries))) == defined
