"""Boundary tables for the pod view (``controller/pod.py``, issue 18): everything the operator
reads from a pod body, each bound from both sides with literal numbers, and one whole pod read
field by field.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from gpu_auditor.controller.pod import (
    AllocConf,
    Container,
    OwnerReference,
    Termination,
    controller_reference,
    current_alloc_conf,
    parse_pod,
    parse_quantity,
    requests_gpu,
    terminations,
)

pytestmark = pytest.mark.unit

PREFIX = "gpu-auditor.io/"
UTC = dt.UTC


def status(restarts: object = 0, **terminated: object) -> dict[str, Any]:
    return {"name": "main", "restartCount": restarts, "state": {"terminated": terminated}}


def pod_with(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"containerStatuses": list(statuses)}}


def test_a_whole_pod_read_field_by_field() -> None:
    body = {
        "metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1",
                     "ownerReferences": [
                         {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "u0"},
                         {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                          "uid": "job-uid", "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "pytorch/pytorch:2.4.0-cuda12.1",
             "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}],
             "resources": {"limits": {"memory": "4Gi"}, "requests": {"memory": "1Gi"}}}]},
        "status": {"containerStatuses": [
            {"name": "main", "restartCount": 2,
             "state": {"terminated": {"reason": "Error", "exitCode": 1, "message": "m",
                                      "finishedAt": "2026-11-29T10:00:00Z",
                                      "startedAt": "2026-11-29T09:00:00Z"}}}]},
    }  # fmt: skip
    pod = parse_pod(body, PREFIX)
    assert (pod.namespace, pod.name, pod.uid, pod.node_name) == ("ml", "train-x", "uid-1", "gpu-1")
    assert pod.controller == OwnerReference("batch/v1", "Job", "train", "job-uid")
    assert pod.containers == (
        Container("main", AllocConf("expandable_segments:True"), "2.4", 4 * 2**30, 2**30),
    )
    (t,) = pod.terminations
    assert (t.container, t.restart_count, t.reason, t.exit_code, t.message, t.previous) == (
        "main", 2, "Error", 1, "m", False)  # fmt: skip
    assert t.finished_at == dt.datetime(2026, 11, 29, 10, tzinfo=UTC)
    assert t.started_at == dt.datetime(2026, 11, 29, 9, tzinfo=UTC)


def test_a_pod_without_a_failure_has_no_containers_read() -> None:
    body = {"metadata": {"namespace": "ml", "name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "main"}]}, "status": {}}  # fmt: skip
    pod = parse_pod(body, PREFIX)
    assert (pod.containers, pod.terminations, pod.node_name) == ((), (), "")


@pytest.mark.parametrize(
    ("node", "read"),
    [("gpu-1", "gpu-1"), ("GPU_1", ""), ("", ""), (7, ""), ("a" * 253, "a" * 253),
     ("a" * 254, "")],
    ids=["valid", "invalid", "empty", "number", "253", "254"],
)  # fmt: skip
def test_the_node_name_only_when_it_is_a_node_name(node: object, read: str) -> None:
    assert parse_pod({"spec": {"nodeName": node}}, PREFIX).node_name == read


def test_missing_metadata_reads_as_empty() -> None:
    pod = parse_pod({"metadata": "x", "spec": ["y"]}, PREFIX)
    assert (pod.namespace, pod.name, pod.uid, pod.controller) == ("", "", "", None)


# -- numbers and times --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restarts", "read"),
    [(2**31 - 1, 2**31 - 1), (2**31, 0), (-(2**31), -(2**31)), (-(2**31) - 1, 0),
     ("12", 12), ("x", 0), (1.5, 0), (None, 0)],
    ids=["max", "over", "min", "under", "text", "junk", "float", "none"],
)  # fmt: skip
def test_counts_are_32_bit_integers_else_0(restarts: object, read: int) -> None:
    (t,) = terminations(pod_with(status(restarts, exitCode=1, reason="Error")))
    assert t.restart_count == read


@pytest.mark.parametrize(
    ("text", "read"),
    [("2026-11-29T10:00:00Z", dt.datetime(2026, 11, 29, 10, tzinfo=UTC)),
     ("2026-11-29T10:00:00", dt.datetime(2026, 11, 29, 10, tzinfo=UTC)),
     ("2026-11-29T12:00:00+02:00",
      dt.datetime(2026, 11, 29, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
     ("not a time", None), (20261129, None)],
    ids=["z", "naive", "offset", "junk", "number"],
)  # fmt: skip
def test_times_are_read_as_utc_when_no_zone_is_given(text: object, read: object) -> None:
    (t,) = terminations(pod_with(status(exitCode=1, finishedAt=text, startedAt=text)))
    assert t.finished_at == read and t.started_at == read
    if read is not None:
        assert t.finished_at is not None and t.finished_at.tzinfo is not None


@pytest.mark.parametrize(
    ("quantity", "read"),
    [("1500m", 1), ("999m", 0), ("1Gi", 2**30), ("1G", 10**9), ("0", 0),
     ("7Ei", 7 * 2**60), ("9223372036854775808", None), ("8Ei", None),
     ("0" * 63 + "1", 1), ("0" * 64 + "1", None), ("1Qi", None), ("-1", None), (7, 7)],
    ids=["milli", "milli-under-1", "Gi", "G", "zero", "7Ei", "2**63", "8Ei", "64-chars",
         "65-chars", "unknown-suffix", "negative", "number"],
)  # fmt: skip
def test_quantities_in_whole_units_below_2_63(quantity: object, read: int | None) -> None:
    assert parse_quantity(quantity) == read


# -- terminations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "reason", "failed"),
    [(0, "OOMKilled", True), (0, "Completed", False), (0, "oomkilled", False), (1, "Error", True),
     (137, "", True)],
    ids=["oom-0", "completed", "lowercase", "error", "no-reason"],
)  # fmt: skip
def test_a_failure_is_a_non_zero_exit_or_an_oom_kill(
    exit_code: int, reason: str, failed: bool
) -> None:
    found = list(terminations(pod_with(status(exitCode=exit_code, reason=reason))))
    assert bool(found) is failed


def test_a_reason_is_cut_at_128_characters() -> None:
    (t,) = terminations(pod_with(status(exitCode=1, reason="r" * 200)))
    assert t.reason == "r" * 128


def test_a_container_without_a_valid_name_is_skipped_and_the_next_read() -> None:
    nameless = {"restartCount": 0, "state": {"terminated": {"exitCode": 1}}}
    found = list(terminations(pod_with(nameless, status(exitCode=1))))
    assert [t.container for t in found] == ["main"]


def test_the_last_state_is_the_run_before() -> None:
    s = {"name": "main", "restartCount": 3, "state": {"running": {}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}  # fmt: skip
    (t,) = terminations(pod_with(s))
    assert (t.key, t.previous) == ("main/2", True)
    assert Termination("main", 0, "OOMKilled", 0, "", None, False).host_oom_killed


# -- owner, GPU request, allocator setting --------------------------------------------------------


def test_only_a_reference_with_controller_true_is_the_controller() -> None:
    refs = [{"kind": "A", "controller": "true"}, "junk", {"kind": "B", "controller": True}]
    assert controller_reference(refs) == OwnerReference(None, "B", None, None)
    assert controller_reference([{"kind": "A"}]) is None
    assert controller_reference("x") is None


@pytest.mark.parametrize(
    ("resources", "gpu"),
    [({"limits": {"nvidia.com/gpu": 1}}, True), ({"requests": {"nvidia.com/gpu": 1}}, True),
     ({"limits": {"nvidia.com/mig-1g.10gb": 1}}, True), ({"limits": {"amd.com/gpu": 1}}, False),
     ({"limits": {"nvidia.com/gpux": 1}}, False), ({}, False)],
    ids=["limit", "request", "mig", "amd", "other-key", "none"],
)  # fmt: skip
def test_a_gpu_request_in_limits_or_requests(resources: dict[str, Any], gpu: bool) -> None:
    assert requests_gpu({"resources": resources}) is gpu


def env(**variables: str) -> dict[str, Any]:
    return {"env": [{"name": k, "value": v} for k, v in variables.items()]}


def test_the_newer_variable_is_read_when_the_older_is_unset() -> None:
    assert current_alloc_conf(env(PYTORCH_ALLOC_CONF="expandable_segments:True")) == AllocConf(
        "expandable_segments:True")  # fmt: skip


@pytest.mark.parametrize(
    ("value", "read"),
    [("expandable_segments: True", True), ("a:~", True), ("a:\x7f", False), ("a:\x1f", False),
     ("a:é", False)],
    ids=["space", "tilde", "del", "control", "non-ascii"],
)  # fmt: skip
def test_the_setting_is_read_only_in_printable_ascii(value: str, read: bool) -> None:
    got = current_alloc_conf(env(PYTORCH_CUDA_ALLOC_CONF=value))
    assert (got.value == value) is read
    assert (got.ignored is None) is read


def test_a_time_is_read_up_to_64_characters() -> None:
    at = "2026-11-29T10:00:00." + "0" * 38 + "+00:00"  # 64 characters, a valid time
    over = "2026-11-29T10:00:00." + "0" * 39 + "+00:00"  # 65: not read
    (t,) = terminations(pod_with(status(exitCode=1, finishedAt=at, startedAt=over)))
    assert t.finished_at == dt.datetime(2026, 11, 29, 10, tzinfo=UTC)
    assert t.started_at is None


def test_a_boolean_count_is_0_and_a_missing_reason_is_empty() -> None:
    (t,) = terminations(pod_with(status(True, exitCode=1)))
    assert (t.restart_count, t.reason) == (0, "")


def test_milli_units_divide_by_1000() -> None:
    assert parse_quantity("1000m") == 1  # 1000/1001 would be 0


def test_only_an_upper_case_z_is_utc() -> None:
    (t,) = terminations(pod_with(status(exitCode=1, finishedAt="2026-11-29T10:00:00z")))
    assert t.finished_at is None  # Kubernetes writes 'Z'; Python does not read 'z'
