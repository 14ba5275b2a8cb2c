"""The operator's own Prometheus metrics (names in docs/contracts.md and docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

DIAGNOSES = Counter(
    "gpu_auditor_diagnoses", "Diagnoses written onto pods, by namespace and kind.",
    ["namespace", "kind"],
)
SHARING_FINDINGS = Counter(
    "gpu_auditor_sharing_findings", "Sharing findings written onto pods, by finding kind.",
    ["finding"],
)
LOG_FETCH_FAILURES = Counter(
    "gpu_auditor_log_fetch_failures", "Container logs that could not be read, by reason.",
    ["reason"],
)
DIAGNOSIS_LATENCY = Histogram(
    "gpu_auditor_diagnosis_latency_seconds",
    "Time from the container's termination (finishedAt) to the annotation on the pod.",
    buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
)
API_REQUESTS = Counter(
    "gpu_auditor_operator_api_requests", "Kubernetes API requests the operator made, by verb.",
    ["verb"],
)
DIAGNOSIS_FAILURES = Counter(
    "gpu_auditor_diagnosis_failures",
    "Terminations whose diagnosis failed, by reason: error (the diagnosis raised), timeout (over "
    "its budget), crashed (its worker process died), internal (the operator's own code raised).",
    ["reason"],
)
OWNER_WRITES_REFUSED = Counter(
    "gpu_auditor_owner_writes_refused",
    "Owner annotations not written because the pod's owner reference could not be verified, by "
    "reason: invalid-reference (a name or UID that is not valid), uid-mismatch (the object of "
    "that name has another UID).",
    ["reason"],
)
REPORT_ITEMS_IGNORED = Counter(
    "gpu_auditor_report_items_ignored",
    "Parts of GPUNodeReports the operator did not act on, by reason (see docs/operator.md).",
    ["reason"],
)
API_ERRORS = Counter(
    "gpu_auditor_operator_api_errors",
    "Kubernetes API requests of the operator that failed, by verb and reason.",
    ["verb", "reason"],
)
