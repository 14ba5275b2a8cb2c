"""The base both wings stand on: Kubernetes access and the contract's names.

- `errors`: every failure of a request as one class, chosen from the HTTP status once.
- `kubeconfig`, `credentials`, `client`: config (in-cluster, kubeconfig files merged, exec
  credential plugins), the credential of the moment, and the standard-library HTTP client.
- `names`: Kubernetes names as the API server defines them, and escaped path segments.
- `contract`: the names of docs/contracts.md (finding kinds, annotations, Event reasons, labels,
  metric namespace and subsystems).
- `nodereport`: the GPUNodeReport (names, raw body, typed value, writer and reader).

Standard library only (PyYAML is imported when a kubeconfig is read), so it ships in the light
install. It imports neither wing (`gpu_auditor.controller`, `node_agent`) nor kopf, kubernetes,
NVML or gRPC: the layers contract in pyproject.toml keeps it so.
"""
