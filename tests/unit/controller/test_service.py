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


# -- wiring ----------------------------------------------------------------------------------------


def test_the_trials_and_the_job_path_are_wired_to_the_operator_s_parts() -> None:
    """Each part gets this operator's API, schedule, prefix and settings, and the OOM path the
    trials and the job path it hands pods to."""
    kube, scheduled = FakeKube(job_pod({"exitCode": 137, "reason": "OOMKilled"})), Scheduled()
    config = OperatorConfig(annotation_prefix="x.example/", job_kinds=("jobset",),
                            group_log_reads=3)
    services = Services(kube=kube, config=config,  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=scheduled)
    trials, jobs = services.trials, services.jobs
    assert trials is not None and services.oom.trials is trials
    assert (trials.kube, trials.schedule, trials.prefix, trials.switches) == (
        kube, scheduled, "x.example/", frozenset({"jobset"}))
    assert jobs is not None and services.oom.jobs is jobs
    assert (jobs.kube, jobs.oom, jobs.attempts, jobs.schedule) == (
        kube, services.oom, services.oom.attempts, scheduled)
    assert (jobs.switches, jobs.prefix, jobs.log_reads) == (
        frozenset({"jobset"}), "x.example/", 3)
    services.close()
    plain = Services(kube=kube, config=OperatorConfig(job_kinds=()),  # type: ignore[arg-type]
                     diagnoser=Inline(), schedule=Scheduled())
    assert plain.jobs is None and plain.oom.jobs is None and plain.trials.switches == frozenset()
    plain.close()
