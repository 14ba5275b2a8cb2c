"""Pure diagnosis core: parse OOM logs, classify the cause, recommend a fix. No I/O.

Modules by concern: ``sizes`` (sizes to bytes), ``logtext`` (container-log prefixes and the
bounded streaming scan), ``formats`` (which line is a failure, whose), ``parse`` (figures per
family), ``torchversion`` (what the wording says about the release), ``classify`` (kinds and
their thresholds), ``leak`` (growth series), ``allocconf`` (``PYTORCH_CUDA_ALLOC_CONF``),
``recommend`` (setting and actions), ``core`` (the entry points).
"""

from .allocconf import validate_alloc_conf
from .core import diagnose, diagnose_host_oom, diagnose_scan, diagnose_stream
from .logtext import LogScanner, ScanResult, scan_bytes, scan_stream
from .model import (
    ALLOC_CONF_ENV,
    KINDS,
    Diagnosis,
    DiagnosisKind,
    Figures,
    Growth,
    MemorySample,
    NodeEvidence,
    OtherPod,
    OtherProcess,
    Recommendation,
)

__all__ = [
    "ALLOC_CONF_ENV",
    "KINDS",
    "Diagnosis",
    "DiagnosisKind",
    "Figures",
    "Growth",
    "LogScanner",
    "MemorySample",
    "NodeEvidence",
    "OtherPod",
    "OtherProcess",
    "Recommendation",
    "ScanResult",
    "diagnose",
    "diagnose_host_oom",
    "diagnose_scan",
    "diagnose_stream",
    "scan_bytes",
    "scan_stream",
    "validate_alloc_conf",
]
