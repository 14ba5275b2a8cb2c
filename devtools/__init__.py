"""Development and test tools that never ship: the local control plane (`devtools.localcluster`)
and the demo (`devtools.demo`, `make demo`). Not in the wheel (pyproject.toml installs only
`gpu_auditor` and `node_agent`); imported from a checkout, with the repository root on the path
(pytest's `pythonpath`, `python -m devtools.demo` from the root). They use `kubernetes` and
`cryptography`, which come only with the `[test]` extra."""
