"""gpu-auditor: diagnose GPU out-of-memory failures and GPU sharing on Kubernetes."""

__version__ = "0.1.0"
