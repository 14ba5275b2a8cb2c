"""The operator's entry point: the flags it refuses, the kopf settings it applies at startup,
and its wait for the GPUNodeReport CRD."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from gpu_auditor.base.errors import APIConnectionError, from_status
from gpu_auditor.controller import main

pytestmark = pytest.mark.unit


def test_the_metrics_address_defaults_to_every_address_and_takes_one() -> None:
    assert main.parse_args([]).metrics_bind_address == "0.0.0.0"
    assert main.parse_args(["--metrics-bind-address=127.0.0.1"]).metrics_bind_address == (
        "127.0.0.1")
    assert main.parse_args(["--metrics-bind-address", "::1"]).metrics_bind_address == "::1"


@pytest.mark.parametrize("argv, message", [
    (["--metrics-bind-address=localhost"], "must be an IP address"),
    (["--metrics-bind-address="], "must be an IP address"),
    (["--namespace=ml-*"], "exact namespace names, not patterns"),
    (["--namespace=ml", "--namespace=!kube-system"], "exact namespace names"),
    (["--namespace=ML"], "exact namespace names"),
])
def test_flags_the_operator_cannot_honour_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_startup_switches_kopfs_cluster_discovery_off() -> None:
    settings = kopf.OperatorSettings()
    assert settings.scanning.disabled is False  # kopf's default
    main.watch_only_what_we_name(settings=settings)
    assert settings.scanning.disabled is True


class Answers:
    """An API client double that answers each request with the next of `answers`: a body, or
    the HTTP status of the error to raise (None: no answer at all)."""

    def __init__(self, *answers: int | dict[str, Any] | None) -> None:
        self.answers = list(answers)
        self.paths: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                timeout: float = 10.0) -> dict[str, Any]:
        self.paths.append((method, path, dict(query or {})))
        answer = self.answers.pop(0)
        if isinstance(answer, dict):
            return answer
        if answer is None:
            raise APIConnectionError("connection refused")
        raise from_status(answer, f"status {answer}")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_operator_waits_for_the_report_crd_then_goes_on() -> None:
    api: Any = Answers(404, 404, {"items": []})
    clock = Clock()
    assert main.wait_for_reports(api, timeout=60, poll=5, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [5, 5]
    assert api.paths[0] == ("GET", "/apis/gpu-auditor.io/v1alpha1/gpunodereports",
                            {"limit": "1"})


def test_the_operator_gives_up_when_the_crd_never_comes() -> None:
    api: Any = Answers(*[404] * 10)
    clock = Clock()
    assert not main.wait_for_reports(api, timeout=12, poll=5, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [5, 5, 5] and len(api.paths) == 4


@pytest.mark.parametrize("status", [403, 500, None])
def test_any_other_answer_is_kopfs_to_report(status: int | None) -> None:
    api: Any = Answers(status)
    clock = Clock()
    assert main.wait_for_reports(api, timeout=60, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [] and len(api.paths) == 1
