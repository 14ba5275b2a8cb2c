"""Reading failed containers, resources and allocator settings off a pod body."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.controller import pod as podview

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
