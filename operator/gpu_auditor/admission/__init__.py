"""Admission checks of allocator settings and the probe's injection: pure functions over the
objects the API server (or a manifest file) hands us; no HTTP, no metrics, no API client.

Modules by concern: ``findings`` (one container's allocator setting against its torch release:
the diagnosis core's rules, worded for the job's owner), ``objects`` (the pod specs inside a
Pod, a workload's template, a List), ``review`` (an AdmissionReview in, its response out),
``inject`` (the JSON patch that brings the probe into an opted-in pod). The server that serves
them is ``gpu_auditor.webhook``; ``gpu-auditor check-manifest`` is ``gpu_auditor.checkmanifest``.
"""
