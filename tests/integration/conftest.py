"""Fixtures that start a real control plane (etcd, kube-apiserver, and on request
kube-controller-manager, kube-scheduler and kwok) as local processes on loopback.

Binaries come from scripts/build-control-plane.sh. Without them the integration tests are
skipped with the reason shown, unless GPU_AUDITOR_REQUIRE_CLUSTER=1 (as in CI), where a missing
binary is a failure. Logs are kept (and their folder printed) when any test of the session failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from devtools.localcluster import LocalCluster, default_bin_dir, missing_binaries


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    missing = missing_binaries(default_bin_dir())
    if missing:
        message = (
            f"control-plane binaries missing in {default_bin_dir()}: {', '.join(missing)} "
            "(run scripts/build-control-plane.sh)"
        )
        if os.environ.get("GPU_AUDITOR_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    local = LocalCluster()
    with local:
        yield local
        local.keep = local.keep or request.session.testsfailed > 0


@pytest.fixture(scope="session")
def kwok_cluster(cluster: LocalCluster) -> LocalCluster:
    """The same control plane plus kube-controller-manager, kube-scheduler and kwok."""
    cluster.start_controllers()
    cluster.start_kwok()
    return cluster
