"""The CLI's commands beyond argument parsing (`gpu_auditor.cli` stays the thin shell).

- `diagnose`: `gpu-auditor diagnose FILE... | -`, each input reported, `--exit-code`.
- `explanation`: the typed reading of one pod's diagnosis (its annotations, our Events, its
  owner, its node's GPUNodeReport); pure, built from the objects as the API serves them.
- `explaintext`: that reading printed for a person, and as JSON.
- `podreads`: the handful of API reads `explain` makes with the user's own kubeconfig.
- `explain`: `gpu-auditor explain POD` (also `kubectl gpu-auditor explain POD`).

Layer: beneath the CLI, above the shared base and the pure core (pyproject.toml's contract);
neither wing imports it.
"""
