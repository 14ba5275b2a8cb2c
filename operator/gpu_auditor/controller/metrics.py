"""The operator's own Prometheus metrics (names in docs/contracts.md and docs/metrics.md).

Names come from client_python's `namespace`/`subsystem`: the prefix is written once
(`base.contract`). Series about what the operator wrote onto the cluster have no subsystem;
series about its own work carry `operator`.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from gpu_auditor.base.contract import METRIC_NAMESPACE, Subsystem

NS = METRIC_NAMESPACE
OPERATOR = Subsystem.OPERATOR.value

DIAGNOSES = Counter(
    "diagnoses", "Diagnoses written onto pods, by namespace and diagnosis kind.",
    ["namespace", "kind"], namespace=NS,
)
JOB_DIAGNOSES = Counter(
    "job_diagnoses",
    "Root causes written onto distributed jobs' objects, by the job's kind and the diagnosis "
    "kind of its root-cause pod.",
    ["job_kind", "kind"], namespace=NS,
)
SHARING_FINDINGS = Counter(
    "sharing_findings", "Sharing findings written onto pods, by finding kind.",
    ["kind"], namespace=NS,
)
DIAGNOSIS_LATENCY = Histogram(
    "diagnosis_latency_seconds",
    "Time from the container's termination (finishedAt) to the annotation on the pod.",
    buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
    namespace=NS, subsystem=OPERATOR,
)
LOG_FETCH_FAILURES = Counter(
    "log_fetch_failures", "Container logs that could not be read, by reason.",
    ["reason"], namespace=NS, subsystem=OPERATOR,
)
API_REQUESTS = Counter(
    "api_requests", "Kubernetes API requests the operator made, by verb.",
    ["verb"], namespace=NS, subsystem=OPERATOR,
)
API_ERRORS = Counter(
    "api_errors",
    "Kubernetes API requests of the operator that failed, by verb and reason.",
    ["verb", "reason"], namespace=NS, subsystem=OPERATOR,
)
DIAGNOSIS_FAILURES = Counter(
    "diagnosis_failures",
    "Terminations whose diagnosis failed, by reason: error (the diagnosis raised), timeout (over "
    "its budget), crashed (its worker process died), internal (the operator's own code raised).",
    ["reason"], namespace=NS, subsystem=OPERATOR,
)
OWNER_WRITES_REFUSED = Counter(
    "owner_writes_refused",
    "Owner annotations not written because the pod's owner reference could not be verified, by "
    "reason: invalid-reference (a name or UID that is not valid), uid-mismatch (the object of "
    "that name has another UID), not-selected (its selector does not select the pod).",
    ["reason"], namespace=NS, subsystem=OPERATOR,
)
REPORT_ITEMS_IGNORED = Counter(
    "report_items_ignored",
    "Parts of GPUNodeReports the operator did not act on, by reason (see docs/operator.md).",
    ["reason"], namespace=NS, subsystem=OPERATOR,
)
PROBE_DISAGREEMENTS = Counter(
    "probe_disagreements",
    "Diagnoses where the OOM probe's record changed the kind the OOM message alone gave (the "
    "record wins), by the kind written and the message's kind: where the inference is wrong.",
    ["kind", "inferred_kind"], namespace=NS,
)
PROBE_RECORDS = Counter(
    "probe_records",
    "OOM probe records the operator met in a failed container's termination message or log, by "
    "result: used (the diagnosis was built from it), invalid (not a valid record), unmatched "
    "(it describes another failure than the OOM message).",
    ["result"], namespace=NS, subsystem=OPERATOR,
)
RECOMMENDATION_OUTCOMES = Counter(
    "recommendation_outcomes",
    "Trials of recommended allocator settings decided on their owners' next pods, by the "
    "diagnosis kind they answered, the keys recommended and the outcome: fixed (a pod with the "
    "setting completed or ran past the failed attempt), not-fixed (it ran out of memory again), "
    "not-applied (a next pod ran without it). Each trial counts each outcome once.",
    ["kind", "setting", "outcome"], namespace=NS,
)
