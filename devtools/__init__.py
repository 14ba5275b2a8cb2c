"""Development and test tools that never ship: the local control plane (`devtools.localcluster`),
the demo (`devtools.demo`, `make demo`) and the dashboard's lint rules (`devtools.dashboard_lint`).
Not in the wheel (pyproject.toml installs only `gpu_auditor` and `node_agent`); imported from a
checkout, with the repository root on the path (pytest's `pythonpath`, `python -m devtools.demo`
from the root). They use `kubernetes` and `cryptography`, which come only with the `[test]`
extra, and `promql-parser` (the lint rules), which comes with `[dev]`."""
