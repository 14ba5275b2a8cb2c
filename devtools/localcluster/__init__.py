"""A real local control plane (etcd, kube-apiserver, controllers, kwok) for tests and the demo."""

from devtools.localcluster.cluster import (
    LocalCluster,
    cri,
    default_bin_dir,
    missing_binaries,
)
from devtools.localcluster.process import ClusterError

__all__ = ["ClusterError", "LocalCluster", "cri", "default_bin_dir", "missing_binaries"]
