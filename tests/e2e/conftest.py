"""The e2e group: our image, built from the Dockerfile by scripts/build-image.sh, run as users
run it (tiers in docs/real-node.md). Needs root, podman, buildah and runc, the control-plane
binaries, and for the real node scripts/build-node.sh's; without them the tests skip with the
reason shown, unless GPU_AUDITOR_REQUIRE_E2E=1 (set by `make test`, so CI), where that is a
failure.

One control plane serves the group. kube-apiserver listens on port 443 of the host's end of
the real node's veth pair (`NodeNetwork`): where the node's pods reach it through the
`kubernetes` Service, and where tier 2's containers (host network) reach it directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from e2e_support import Podman, build_image, e2e_unavailable_reason, image_archive

from devtools.localcluster import LocalCluster, default_bin_dir, missing_binaries
from devtools.localcluster.node import NodeNetwork, RealNode, missing_node_parts

NODE_NAME = "e2e-node"


def unavailable(reason: str) -> None:
    """Skip, or fail where the e2e group is required."""
    if os.environ.get("GPU_AUDITOR_REQUIRE_E2E") == "1":
        pytest.fail(f"e2e required (GPU_AUDITOR_REQUIRE_E2E=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def image() -> str:
    """The reference of this tree's image (localhost/gpu-auditor:ctx-<hash of the context>)."""
    if reason := e2e_unavailable_reason():
        unavailable(reason)
    return build_image()


@pytest.fixture(scope="session")
def podman(image: str) -> Iterator[Podman]:
    runner = Podman(image)
    yield runner
    runner.cleanup()


@pytest.fixture(scope="session")
def node_network(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeNetwork]:
    try:
        network = NodeNetwork.create(tmp_path_factory.mktemp("node-network"))
    except Exception as err:  # no unshare/nsenter/ip, or namespaces refused
        unavailable(f"cannot create the node's network namespace: {err}")
    yield network
    network.destroy()


@pytest.fixture(scope="session")
def e2e_cluster(request: pytest.FixtureRequest, node_network: NodeNetwork) -> Iterator[
        LocalCluster]:
    """The group's control plane, controllers and kwok included."""
    if missing := missing_binaries(default_bin_dir()):
        unavailable(f"control-plane binaries missing in {default_bin_dir()}: "
                    f"{', '.join(missing)} (run scripts/build-control-plane.sh)")
    local = LocalCluster(address=node_network.host_ip, api_port=443)
    with local:
        local.start_controllers()
        local.start_kwok()
        yield local
        local.keep = local.keep or request.session.testsfailed > 0


@pytest.fixture(scope="session")
def real_node(e2e_cluster: LocalCluster, node_network: NodeNetwork, image: str) -> Iterator[
        RealNode]:
    """containerd + runc + kubelet + kube-proxy (+ CoreDNS) registering Node `e2e-node`, with
    this tree's image imported into containerd."""
    if missing := missing_node_parts(e2e_cluster.bin_dir):
        unavailable(f"cannot run a real node here, missing: {', '.join(missing)} "
                    "(run scripts/build-node.sh)")
    node = RealNode(e2e_cluster, node_network, NODE_NAME,
                    labels={"nvidia.com/gpu.present": "true"})
    try:
        node.start()
        node.import_image(image_archive(image))
        yield node
    finally:
        node.stop()
