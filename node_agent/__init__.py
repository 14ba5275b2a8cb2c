"""gpu-auditor node agent: per-process GPU memory by pod, sharing findings, metrics."""
