"""The webhook's own metrics (docs/contracts.md): admission requests by webhook and result, the
time each took from its body read to its response written, and the connections the server
closed itself, by reason. Label values are created up front, so every series exists from the
first scrape."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from gpu_auditor.base.contract import METRIC_NAMESPACE, Subsystem

from .boundedhttp import REASONS

WEBHOOK = Subsystem.WEBHOOK.value

_ALWAYS = ("bad-request", "error")
RESULTS: Final[dict[str, tuple[str, ...]]] = {
    "validate": ("clean", "warned", *_ALWAYS),
    "validate-deny": ("clean", "warned", "denied", *_ALWAYS),
    "inject-pod": ("injected", "skipped", *_ALWAYS),
    "inject-namespace": ("injected", "skipped", *_ALWAYS),
    "apply-pod": ("applied", "skipped", *_ALWAYS),
    "apply-namespace": ("applied", "skipped", *_ALWAYS),
}
"""The `webhook` label (which registration the API server called: its path) and the `result`
label values of each: clean (no finding), warned, denied (deny mode), injected (the probe),
applied (an owner's recommended setting), skipped (no injection: not opted in, or nothing to
change), bad-request (not an AdmissionReview), error (our own code raised; the request was
allowed)."""

ADMISSION_REQUESTS = Counter(
    "admission_requests", "Admission requests answered, by webhook and result.",
    ["webhook", "result"], namespace=METRIC_NAMESPACE, subsystem=WEBHOOK,
)
ADMISSION_DURATION = Histogram(
    "admission_duration_seconds",
    "Time from an admission request's body read to its response written, by webhook.",
    ["webhook"], namespace=METRIC_NAMESPACE, subsystem=WEBHOOK,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)

CONNECTIONS_CLOSED = Counter(
    "connections_closed",
    "Connections the webhook server closed itself, by reason: limit (over a connection bound: "
    "refused, or closed while idle to make room), deadline (a handshake, request or response "
    "not done in time), idle, too-large (a body over its bound), malformed.",
    ["reason"], namespace=METRIC_NAMESPACE, subsystem=WEBHOOK,
)

for _reason in REASONS:
    CONNECTIONS_CLOSED.labels(_reason)
for _webhook, _results in RESULTS.items():
    ADMISSION_DURATION.labels(_webhook)
    for _result in _results:
        ADMISSION_REQUESTS.labels(_webhook, _result)
