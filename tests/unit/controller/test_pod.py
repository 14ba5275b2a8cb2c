"""Reading failed containers, resources and allocator settings off a pod body."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from gpu_auditor.base.contract import Annotation
from gpu_auditor.controller import pod as podview
from gpu_auditor.controller.pod import (
    MAX_EVICTION_MESSAGE,
    AllocConf,
    Container,
    DiagnosedKeys,
    OwnerReference,
    Termination,
    controller_reference,
    current_alloc_conf,
    diagnosed_keys,
    evicted_for_memory,
    parse_pod,
    parse_quantity,
    requests_gpu,
    terminations,
)

from .controller_helpers import pod, termination

pytestmark = pytest.mark.unit


def _pod(
    statuses: list[dict[str, Any]], containers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": "trainer", "uid": "u1"},
        "spec": {"containers": containers or [{"name": "main", "image": "trainer"}]},
        "status": {"containerStatuses": statuses},
    }


def test_a_running_container_that_restarted_after_a_failure_yields_its_last_state() -> None:
    pod = _pod([{"name": "main", "restartCount": 1, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    (t,) = podview.terminations(pod)
    assert (t.container, t.restart_count, t.previous, t.key) == ("main", 0, True, "main/0")


def test_a_terminated_container_without_restart_reads_its_current_log() -> None:
    pod = _pod([{"name": "main", "restartCount": 0,
                 "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])
    (t,) = podview.terminations(pod)
    assert (t.previous, t.key, t.host_oom_killed) == (False, "main/0", True)


def test_the_same_failure_keeps_its_key_before_and_after_the_restart() -> None:
    before = _pod([{"name": "main", "restartCount": 3,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    after = _pod([{"name": "main", "restartCount": 4, "state": {"running": {}},
                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    assert [t.key for t in podview.terminations(before)] == ["main/3"]
    assert [t.key for t in podview.terminations(after)] == ["main/3"]


def test_a_successful_exit_is_not_a_failure() -> None:
    pod = _pod([{"name": "main", "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}])
    assert list(podview.terminations(pod)) == []


def test_a_pod_without_status_has_no_terminations() -> None:
    assert list(podview.terminations({"metadata": {}})) == []


@pytest.mark.parametrize(("quantity", "expected"), [
    ("512Mi", 512 * 2**20), ("1Gi", 2**30), ("2G", 2 * 10**9), ("1e9", 10**9),
    ("1500m", 1), ("100", 100), ("lots", None), (None, None),
    ("1e999", None), ("9" * 400, None), ("8Ei", None), ("1" * 65, None), ("7Ei", 7 * 2**60),
])
def test_quantities_are_read_in_bytes(quantity: str | None, expected: int | None) -> None:
    assert podview.parse_quantity(quantity) == expected


def test_the_old_alloc_conf_name_wins_when_both_are_set() -> None:
    container = {"env": [{"name": "PYTORCH_ALLOC_CONF", "value": "max_split_size_mb:64"},
                         {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]}
    assert podview.current_alloc_conf(container).value == "expandable_segments:True"


@pytest.mark.parametrize(("value", "read", "why"), [
    ("a" * 1024, True, None),
    ("a" * 1025, False, "PYTORCH_CUDA_ALLOC_CONF not read: 1025 characters, over the "
                        "1024-character limit"),
    ("expandable_segments:True\n", False, "PYTORCH_CUDA_ALLOC_CONF not read: characters other "
                                          "than printable ASCII"),
    ("expandable_segments:Trüe", False, "PYTORCH_CUDA_ALLOC_CONF not read: characters other "
                                        "than printable ASCII"),
])
def test_a_jobs_alloc_conf_is_read_only_within_1024_printable_ascii_characters(
    value: str, read: bool, why: str | None
) -> None:
    found = podview.current_alloc_conf({"env": [{"name": "PYTORCH_CUDA_ALLOC_CONF",
                                                 "value": value}]})
    assert (found.value == value, found.ignored) == (read, why)


@pytest.mark.parametrize(("container", "hint"), [
    ({"image": "pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime"}, "2.1"),
    ({"image": "nvcr.io/nvidia/pytorch:24.01-py3"}, None),
    ({"image": "trainer", "env": [{"name": "TORCH_VERSION", "value": "1.13.1"}]}, "1.13"),
    ({"image": "registry/team/trainer:7"}, None),
    ({"image": "trainer", "env": [{"name": "TORCH_VERSION", "value": "2.11.0+cu130"}]}, "2.11"),
    ({"image": "trainer", "env": [{"name": "TORCH_VERSION", "value": "2." + "1" * 300_000}]},
     None),
    ({"image": "pytorch/pytorch:2.1.0" + "-x" * 600}, None),  # over 1024 characters: not read
])
def test_the_torch_release_is_read_from_env_or_image_tag(
    container: dict[str, Any], hint: str | None
) -> None:
    assert podview.torch_version_hint(container) == hint


def test_memory_limit_and_request_come_from_the_container_resources() -> None:
    container = {"resources": {"limits": {"memory": "8Gi", "nvidia.com/gpu": "1"},
                               "requests": {"memory": "4Gi"}}}
    assert podview.memory_limits(container) == (8 * 2**30, 4 * 2**30)
    assert podview.requests_gpu(container)


def test_the_labels_of_a_failed_pod_are_read_string_values_only() -> None:
    body = _pod([{"name": "main", "restartCount": 0,
                  "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    body["metadata"]["labels"] = {"app": "web", "replicas": 3, "tier": "front"}
    assert podview.parse_pod(body, "gpu-auditor.io/").labels == {"app": "web", "tier": "front"}


def test_a_healthy_pods_labels_are_not_read() -> None:
    # kopf's filter parses every event of every pod: only a failed one's labels are needed
    body = _pod([{"name": "main", "restartCount": 0, "state": {"running": {}}}])
    body["metadata"]["labels"] = {"app": "web"}
    assert podview.parse_pod(body, "gpu-auditor.io/").labels == {}


# Boundary tables of the pod view (issue 18): diagnosed keys, the ignore label, our prefix.

PREFIX = "gpu-auditor.io/"


def test_the_old_formats_16_keys_read_as_the_highest_per_container() -> None:
    old = ",".join(f"main/{i}" for i in range(16))  # what the previous release wrote
    assert diagnosed_keys(old) == DiagnosedKeys({"main": 15})
    p = pod({f"{PREFIX}diagnosed-key": old})
    assert p.diagnosed_keys.done(termination(restart=15))
    assert p.diagnosed_keys.done(termination(restart=0))
    assert not p.diagnosed_keys.done(termination(restart=16))


@pytest.mark.parametrize(
    ("record", "restart", "container", "done"),
    [
        (DiagnosedKeys({"main": 3}), 3, "main", True),
        (DiagnosedKeys({"main": 3}), 4, "main", False),
        (DiagnosedKeys({"main": 3}), 0, "side", False),
        (DiagnosedKeys({"main": 0}), 0, "main", True),
        (DiagnosedKeys({}, 2), 2, "side", True),
        (DiagnosedKeys({}, 2), 3, "side", False),
        (DiagnosedKeys({"main": 1}, 5), 4, "main", True),
        (DiagnosedKeys({"main": 5}, 1), 4, "main", True),
        (DiagnosedKeys({}, 0), 0, "main", True),
        (DiagnosedKeys(), 0, "main", False),
    ],
    ids=[f"case{i}" for i in range(10)],  # plain ids: mutmut runs tests by id
)
def test_a_termination_is_done_at_or_below_its_containers_count_or_the_floor(
    record: DiagnosedKeys, restart: int, container: str, done: bool
) -> None:
    assert record.done(termination(container=container, restart=restart)) is done


@pytest.mark.parametrize(
    ("one", "other", "both"),
    [
        (DiagnosedKeys({"main": 1}), DiagnosedKeys({"main": 3, "side": 0}, 2),
         DiagnosedKeys({"main": 3, "side": 0}, 2)),
        (DiagnosedKeys({"main": 3, "side": 0}, 2), DiagnosedKeys({"main": 1}),
         DiagnosedKeys({"main": 3, "side": 0}, 2)),
        (DiagnosedKeys({}, 4), DiagnosedKeys({}, 2), DiagnosedKeys({}, 4)),
        (DiagnosedKeys({}, 2), DiagnosedKeys({}, 4), DiagnosedKeys({}, 4)),
        (DiagnosedKeys(), DiagnosedKeys(), DiagnosedKeys()),
    ],
    ids=[f"case{i}" for i in range(5)],
)
def test_merged_records_are_done_where_either_is(
    one: DiagnosedKeys, other: DiagnosedKeys, both: DiagnosedKeys
) -> None:
    assert one.merged(other) == both


@pytest.mark.parametrize(
    ("labels", "ignored"),
    [
        ({"gpu-auditor.io/ignore": "true"}, True),
        ({"gpu-auditor.io/ignore": "True"}, False),
        ({"gpu-auditor.io/ignore": "false"}, False),
        ({"gpu-auditor.io/ignore": "yes"}, False),
        ({"other.io/ignore": "true"}, False),
        ({}, False),
        ("gpu-auditor.io/ignore=true", False),  # not a mapping
    ],
)
def test_only_the_ignore_label_set_to_true_ignores_a_pod(labels: object, ignored: bool) -> None:
    body = {"metadata": {"namespace": "ml", "name": "p", "uid": "u", "labels": labels}}
    assert parse_pod(body, PREFIX).ignored is ignored


@pytest.mark.parametrize(
    ("raw", "keys"),
    [
        ("main/0", ["main/0"]),
        ("main/0,side/12", ["main/0", "side/12"]),
        ("a" * 63 + "/1", ["a" * 63 + "/1"]),  # a 63-character container name
        ("a" * 64 + "/1", []),
        ("main/" + "9" * 10, ["main/" + "9" * 10]),
        ("main/" + "9" * 11, []),
        ("Main/0", []),
        ("-main/0", []),
        ("main-/0", []),
        ("main/", []),
        ("main/0 ", []),
        ("", []),
        (None, []),
        (7, []),
        ("main/1,main/0", ["main/1"]),  # the old format: several keys per container
        ("main/0,main/1", ["main/1"]),
        ("*/3", ["*/3"]),
        ("*/1,*/4", ["*/4"]),
        ("*/4,*/1", ["*/4"]),
        ("side/3,*/2,main/1", ["main/1", "side/3", "*/2"]),
        ("**/1", []),
        ("*a/1", []),
        ("*/", []),
        ("main/00", ["main/0"]),
        ("Main/0,main/2", ["main/2"]),  # junk before a key: the key is still read
    ],
    ids=[f"case{i}" for i in range(25)],  # plain ids: mutmut runs tests by id
)
def test_diagnosed_keys_are_read_when_well_formed(raw: object, keys: list[str]) -> None:
    assert diagnosed_keys(raw).keys() == keys  # type: ignore[arg-type]


def test_diagnosed_keys_are_read_from_the_first_5120_characters() -> None:
    within = ",".join(["x"] * 2557 + ["main/7"])  # ends at character 5,120
    assert len(within) == 5120 and diagnosed_keys(within).keys() == ["main/7"]
    beyond = "," + within
    assert diagnosed_keys(beyond).keys() == []


def test_the_pod_view_reads_only_our_prefix() -> None:
    p = pod({f"{PREFIX}diagnosed-key": "main/0", "other.io/diagnosed-key": "main/1",
             f"{PREFIX}recommended-alloc-conf": "expandable_segments:True"})  # fmt: skip
    assert p.diagnosed_keys == DiagnosedKeys({"main": 0})
    assert p.our_annotations == {Annotation.DIAGNOSED_KEY, Annotation.RECOMMENDED_ALLOC_CONF}
    assert dict(p.annotations) == {"diagnosed-key": "main/0",
                                   "recommended-alloc-conf": "expandable_segments:True"}


# Boundary tables for the pod view (``controller/pod.py``, issue 18): everything the operator
# reads from a pod body, each bound from both sides with literal numbers, and one whole pod read
# field by field.

UTC = dt.UTC


def status(restarts: object = 0, **terminated: object) -> dict[str, Any]:
    return {"name": "main", "restartCount": restarts, "state": {"terminated": terminated}}


def pod_with(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"containerStatuses": list(statuses)}}


def env(**variables: str) -> dict[str, Any]:
    return {"env": [{"name": k, "value": v} for k, v in variables.items()]}


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


EVICTION = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 44Mi. "
            "Container main was using 2519384Ki, which exceeds its request of 0.")


def test_a_pod_evicted_for_the_node_s_memory_is_a_host_kill_of_its_failed_containers() -> None:
    pod = pod_with(status(exitCode=137, reason="Error"), {
        "name": "sidecar", "restartCount": 2, "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}})
    pod["status"].update(phase="Failed", reason="Evicted", message=EVICTION)
    current, earlier = terminations(pod)
    assert (current.evicted, current.host_oom_killed) == (EVICTION, True)
    # a container's earlier run ended before the eviction
    assert (earlier.container, earlier.evicted, earlier.host_oom_killed) == ("sidecar", None, False)


@pytest.mark.parametrize(("pod_status", "read"), [
    ({"reason": "Evicted", "message": EVICTION}, EVICTION),
    ({"reason": "Evicted", "message": "The node was low on resource: ephemeral-storage."}, None),
    ({"reason": "Evicted", "message": "The node had condition: [DiskPressure]."}, None),
    ({"reason": "Preempting", "message": EVICTION}, None),
    ({"reason": "Evicted", "message": 42}, None),
    ({"reason": "Evicted"}, None),
    ({"reason": "Evicted", "message": EVICTION + "x" * 1000}, (EVICTION + "x" * 1000)[:512]),
])  # fmt: skip
def test_only_an_eviction_for_memory_is_read_and_its_message_is_cut(
    pod_status: dict[str, Any], read: str | None
) -> None:
    assert MAX_EVICTION_MESSAGE == 512
    assert evicted_for_memory(pod_status) == read


def _evicted_pod(*statuses: dict[str, Any], at: str | None) -> dict[str, Any]:
    pod = pod_with(*statuses)
    pod["status"].update(phase="Failed", reason="Evicted", message=EVICTION)
    if at is not None:
        pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                        "reason": "TerminationByKubelet",
                                        "lastTransitionTime": at}]
    return pod


@pytest.mark.parametrize(("exit_code", "finished", "at", "evicted"), [
    (1, "2026-12-02T00:10:00Z", "2026-12-02T05:00:00Z", False),  # failed hours before: its own
    (1, "2026-12-02T05:00:03Z", "2026-12-02T05:00:00Z", True),  # stopped by it (SIGTERM, exit 1)
    (137, "2026-12-02T04:59:59Z", "2026-12-02T05:00:00Z", True),  # whole seconds: one earlier
    (137, "2026-12-02T04:59:58Z", "2026-12-02T05:00:00Z", False),
    (137, "2026-12-02T05:00:00Z", None, True),  # no time to compare: killed by a signal
    (143, "2026-12-02T05:00:00Z", None, True),
    (1, "2026-12-02T05:00:00Z", None, False),
])  # fmt: skip
def test_an_eviction_is_the_failure_only_of_the_containers_it_stopped(
    exit_code: int, finished: str, at: str | None, evicted: bool
) -> None:
    (t,) = terminations(_evicted_pod(status(exitCode=exit_code, finishedAt=finished), at=at))
    assert (t.evicted is not None, t.host_oom_killed) == (evicted, evicted)


@pytest.mark.parametrize(("value", "index"), [
    ("5", 5), ("100", 100), ("1000000000", 1000000000), ("2147483647", 2147483647),
    ("2147483648", None),  # 2**31: not an index the Job controller writes
    ("12345678901", None), ("abc", None), ("-1", None), ("٣", None), ("", None),
])  # fmt: skip
def test_an_indexed_job_s_completion_index_is_read_below_2_31(
    value: str, index: int | None
) -> None:
    pod = pod_with(status(exitCode=1))
    pod["metadata"] = {"annotations": {"batch.kubernetes.io/job-completion-index": value}}
    pod["spec"] = {"containers": [{"name": "main"}]}
    assert parse_pod(pod, "gpu-auditor.io/").completion_index == index


def test_an_allocator_setting_only_an_env_from_source_may_set_is_named_not_read() -> None:
    container = {"name": "main", "envFrom": [{"configMapRef": {"name": "torch-settings"}}]}
    found = current_alloc_conf(container)
    assert found.value is None
    assert found.ignored is not None and "torch-settings" in found.ignored


def test_only_a_true_disruption_target_condition_dates_the_eviction() -> None:
    pod = _evicted_pod(status(exitCode=137, finishedAt="2026-12-02T05:00:00Z"), at=None)
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-02T06:00:00Z"},
        {"type": "DisruptionTarget", "status": "False",
         "lastTransitionTime": "2026-12-02T06:00:00Z"},
    ]
    (t,) = terminations(pod)
    assert t.evicted == EVICTION  # no time to compare: killed by a signal
