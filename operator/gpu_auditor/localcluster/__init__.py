"""A real local control plane (etcd, kube-apiserver, controllers, kwok) for tests and the demo."""

from gpu_auditor.localcluster.cluster import (
    LocalCluster,
    cri,
    default_bin_dir,
    missing_binaries,
)
from gpu_auditor.localcluster.process import ClusterError

__all__ = ["ClusterError", "LocalCluster", "cri", "default_bin_dir", "missing_binaries"]
