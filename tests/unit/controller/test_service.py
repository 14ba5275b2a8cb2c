"""The operator's parts wired once (`Services`): the namespaces it watches, and closing every
part (with an in-memory stand-in for the API, controller_helpers.py)."""

from __future__ import annotations

import pytest

from gpu_auditor.base.nodereport import parse_report
from gpu_auditor.controller.service import OperatorConfig, Services

from .controller_helpers import (
    PREFIX,
    FakeKube,
    Inline,
    Scheduled,
    job_pod,
    metric,
    report_kube,
    running,
    sharing,
)

pytestmark = pytest.mark.unit


# -- a diagnosis that fails ----------------------------------------------------------------------


# -- owners ----------------------------------------------------------------------------------------


# -- node reports ----------------------------------------------------------------------------------


def test_an_operator_watching_some_namespaces_leaves_pods_elsewhere_alone() -> None:
    kube = report_kube(running("coredns", "uid-coredns", namespace="kube-system"),
                        running("nb", "uid-nb"))
    services = Services(kube=kube, config=OperatorConfig(namespaces=("ml",)),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=Scheduled())
    before = metric("gpu_auditor_operator_report_items_ignored_total", reason="not-watched")
    services.handle_report(parse_report(sharing("kube-system/coredns", "ml/nb")))
    assert kube.reads == [("ml", "nb")]
    assert [n for _, n, _ in kube.patched] == ["nb"]
    assert kube.others["nb"]["metadata"]["annotations"][f"{PREFIX}gpu-shared-with"] == (
        "kube-system/coredns")
    assert metric("gpu_auditor_operator_report_items_ignored_total",
                  reason="not-watched") - before == 1


# Closing: every part stopped, a part without stop() or close() skipped (issue 18).

OOM = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-29T10:00:00Z"}


def test_close_stops_the_schedule_and_the_diagnoser() -> None:
    stopped: list[str] = []

    class Stops(Scheduled):
        def stop(self) -> None:
            stopped.append("schedule")

    class Closes(Inline):
        def close(self) -> None:
            stopped.append("diagnoser")

    services = Services(kube=FakeKube(job_pod(OOM)), config=OperatorConfig(), diagnoser=Closes(),
                        schedule=Stops())  # type: ignore[arg-type]  # fmt: skip
    services.close()
    assert stopped == ["schedule", "diagnoser"]


def test_close_skips_a_part_without_stop_or_close_and_closes_the_next() -> None:
    closed: list[str] = []

    class Closes(Inline):
        def close(self) -> None:
            closed.append("diagnoser")

    services = Services(kube=FakeKube(job_pod(OOM)), config=OperatorConfig(),  # type: ignore[arg-type]
                        diagnoser=Closes(), schedule=Scheduled())  # fmt: skip
    services.close()
    assert closed == ["diagnoser"]
