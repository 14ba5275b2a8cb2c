"""The probe's injection: what an opted-in pod becomes, and that nothing else is touched."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.admission.inject import PROBE_DIR, PROBE_LABEL, VOLUME, inject, wants_probe

from .jsonpatch import apply

pytestmark = pytest.mark.unit

IMAGE = "ghcr.io/gpu-auditor/gpu-auditor:0.1.0"


def pod(*containers: dict[str, Any], labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "labels": labels or {}},
            "spec": {"containers": list(containers), **spec}}


def train(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "image": "img", "terminationMessagePath": "/dev/termination-log",
            **fields}


@pytest.mark.parametrize(("labels", "namespace", "wanted"), [
    ({}, False, False),
    ({PROBE_LABEL: "true"}, False, True),
    ({}, True, True),
    ({PROBE_LABEL: "false"}, True, False),
    ({PROBE_LABEL: "True"}, False, False),
    ({PROBE_LABEL: "yes"}, False, False),
])
def test_only_an_opt_in_wants_the_probe(labels: dict[str, str], namespace: bool,
                                        wanted: bool) -> None:
    assert wants_probe(pod(train(), labels=labels), namespace_opted_in=namespace) is wanted


def test_a_bare_container_gets_volume_mount_env_and_an_init_container_that_copies() -> None:
    done = inject(pod(train()), IMAGE, "IfNotPresent")
    result = apply(pod(train()), done.patch)
    spec = result["spec"]
    assert spec["volumes"] == [{"name": VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    [init] = spec["initContainers"]
    assert init["image"] == IMAGE and init["imagePullPolicy"] == "IfNotPresent"
    assert init["command"] == ["cp", "-R", f"{PROBE_DIR}/.", "/probe/"]
    assert init["volumeMounts"] == [{"name": VOLUME, "mountPath": "/probe"}]
    assert init["securityContext"]["runAsNonRoot"] is True
    [container] = spec["containers"]
    assert container["env"] == [{"name": "GPU_AUDITOR_PROBE", "value": "1"},
                                {"name": "PYTHONPATH", "value": PROBE_DIR}]
    assert container["volumeMounts"] == [{"name": VOLUME, "mountPath": PROBE_DIR,
                                          "readOnly": True}]
    assert done.containers == ("train",) and done.warnings == ()


def test_existing_lists_are_appended_to_and_pythonpath_is_prefixed() -> None:
    original = pod(
        train(env=[{"name": "PYTHONPATH", "value": "/app:/lib"}, {"name": "X", "value": "1"}],
              volumeMounts=[{"name": "data", "mountPath": "/data"}]),
        initContainers=[{"name": "fetch", "image": "busybox"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    result = apply(original, inject(original, IMAGE).patch)
    spec = result["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["data", VOLUME]
    assert [c["name"] for c in spec["initContainers"]] == [VOLUME, "fetch"]
    env = spec["containers"][0]["env"]
    assert env[0] == {"name": "PYTHONPATH", "value": f"{PROBE_DIR}:/app:/lib"}
    assert env[1:] == [{"name": "X", "value": "1"}, {"name": "GPU_AUDITOR_PROBE", "value": "1"}]
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == ["data", VOLUME]


def test_a_custom_termination_message_path_is_where_the_probe_writes() -> None:
    original = pod(train(terminationMessagePath="/tmp/why"))
    env = apply(original, inject(original, IMAGE).patch)["spec"]["containers"][0]["env"]
    assert {"name": "GPU_AUDITOR_PROBE_PATH", "value": "/tmp/why"} in env


@pytest.mark.parametrize(("fields", "why"), [
    ({"env": [{"name": "GPU_AUDITOR_PROBE", "value": "0"}]}, "sets GPU_AUDITOR_PROBE itself"),
    ({"env": [{"name": "PYTHONPATH", "valueFrom": {"configMapKeyRef": {"name": "c",
                                                                         "key": "k"}}}]},
     "comes from a reference"),
    ({"volumeMounts": [{"name": "x", "mountPath": PROBE_DIR}]}, f"mounts something at "
                                                                f"{PROBE_DIR}"),
])
def test_a_container_that_cannot_take_the_probe_is_left_with_a_warning(
    fields: dict[str, Any], why: str
) -> None:
    done = inject(pod(train(**fields)), IMAGE)
    assert done.patch == [] and done.containers == ()
    [warning] = done.warnings
    assert 'container "train"' in warning and why in warning


def test_other_containers_still_get_it_when_one_cannot() -> None:
    original = pod(train(env=[{"name": "GPU_AUDITOR_PROBE", "value": "0"}]),
                   {"name": "second", "image": "img"})
    done = inject(original, IMAGE)
    assert done.containers == ("second",) and len(done.warnings) == 1
    result = apply(original, done.patch)
    assert result["spec"]["containers"][0]["env"] == [{"name": "GPU_AUDITOR_PROBE",
                                                       "value": "0"}]


def test_a_pod_that_has_the_probe_volume_is_not_injected_twice() -> None:
    once = apply(pod(train()), inject(pod(train()), IMAGE).patch)
    assert inject(once, IMAGE).patch == []


def test_a_pod_without_a_spec_is_left_alone() -> None:
    assert inject({"kind": "Pod"}, IMAGE).patch == []


def test_a_container_with_env_from_is_left_with_a_warning_saying_how_to_opt_in() -> None:
    """envFrom may set the opt-out GPU_AUDITOR_PROBE=0 (or PYTHONPATH): an env entry of ours
    wins over envFrom, so injecting overrode both, silently."""
    original = pod(train(envFrom=[{"configMapRef": {"name": "app-env"}}]),
                   {"name": "second", "image": "img"})
    done = inject(original, IMAGE)
    assert done.containers == ("second",)
    [warning] = done.warnings
    assert warning == ('gpu-auditor: probe not injected into container "train": it takes '
                       "variables from envFrom, which may set GPU_AUDITOR_PROBE (an env entry "
                       "would override it); to take the probe, set GPU_AUDITOR_PROBE=1 in its "
                       "env")
    assert apply(original, done.patch)["spec"]["containers"][0] == original["spec"][
        "containers"][0]


def test_env_from_with_the_switch_set_in_env_keeps_env_from_s_pythonpath() -> None:
    """kubelet reads envFrom first and expands $(VAR) in env values from it (kuberuntime's
    makeEnvironmentVariables: tmpEnv from envFrom, then expansion.MappingFuncFor(tmpEnv, ...))."""
    original = pod(train(envFrom=[{"configMapRef": {"name": "app-env"}}],
                         env=[{"name": "GPU_AUDITOR_PROBE", "value": "1"}]))
    done = inject(original, IMAGE)
    assert done.containers == ("train",) and done.warnings == ()
    env = apply(original, done.patch)["spec"]["containers"][0]["env"]
    assert env == [{"name": "GPU_AUDITOR_PROBE", "value": "1"},
                   {"name": "PYTHONPATH", "value": f"{PROBE_DIR}:$(PYTHONPATH)"}]


def test_env_from_and_a_literal_pythonpath_prefix_the_literal() -> None:
    original = pod(train(envFrom=[{"secretRef": {"name": "s"}}],
                         env=[{"name": "PYTHONPATH", "value": "/app"},
                              {"name": "GPU_AUDITOR_PROBE", "value": "1"}]))
    env = apply(original, inject(original, IMAGE).patch)["spec"]["containers"][0]["env"]
    assert env == [{"name": "PYTHONPATH", "value": f"{PROBE_DIR}:/app"},
                   {"name": "GPU_AUDITOR_PROBE", "value": "1"}]


def test_a_container_that_switches_the_probe_on_itself_gets_no_second_switch() -> None:
    original = pod(train(env=[{"name": "GPU_AUDITOR_PROBE", "value": "1"}]))
    env = apply(original, inject(original, IMAGE).patch)["spec"]["containers"][0]["env"]
    assert env == [{"name": "GPU_AUDITOR_PROBE", "value": "1"},
                   {"name": "PYTHONPATH", "value": PROBE_DIR}]


@pytest.mark.parametrize(("env", "why"), [
    ([{"name": ["not", "hashable"], "value": "x"}], "its env has an entry without a name"),
    ([{"name": {"a": 1}}], "its env has an entry without a name"),
    (["PYTHONPATH=/x"], "its env has an entry without a name"),
    ({"PYTHONPATH": "/x"}, "its env is not a list"),
])
def test_an_env_of_another_shape_is_skipped_with_a_warning_not_a_crash(
    env: object, why: str
) -> None:
    """An unhashable name raised TypeError: the server answered error (and allowed)."""
    done = inject(pod(train(env=env), {"name": "second", "image": "img", "env": []}), IMAGE)
    assert done.containers == ("second",)
    [warning] = done.warnings
    assert warning.endswith(f'"train": {why}')


def test_a_container_name_that_is_not_a_string_is_not_made_text() -> None:
    done = inject(pod(train(name=["x"] * 3, env=[{"name": "GPU_AUDITOR_PROBE",
                                                     "value": "0"}])), IMAGE)
    assert done.warnings == ('gpu-auditor: probe not injected into container "?": it sets '
                             "GPU_AUDITOR_PROBE itself",)


@pytest.mark.parametrize(("env", "injected"), [
    ([{"name": "GPU_AUDITOR_PROBE", "value": "0"}, {"name": "GPU_AUDITOR_PROBE", "value": "1"}],
     True),  # the last entry is the one the container runs with
    ([{"name": "GPU_AUDITOR_PROBE", "value": "1"}, {"name": "GPU_AUDITOR_PROBE", "value": "0"}],
     False),
    ([{"name": "ON", "value": "1"}, {"name": "GPU_AUDITOR_PROBE", "value": "$(ON)"}], True),
    ([{"name": "GPU_AUDITOR_PROBE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
     False),  # unknown here: left alone, as one that sets it itself
])
def test_the_switch_is_read_as_the_kubelet_sets_it(env: list[dict[str, Any]],
                                                    injected: bool) -> None:
    done = inject(pod(train(env=env)), IMAGE)
    assert bool(done.patch) is injected
    assert injected or "it sets GPU_AUDITOR_PROBE itself" in done.warnings[0]
