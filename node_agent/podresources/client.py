"""A small client for the kubelet's ``v1.PodResourcesLister`` (``List``,
``GetAllocatableResources``) over its unix socket.

gRPC is one unary call over HTTP/2 (``unary``, on ``h2``); the answers are parsed by
``messages`` (``protobuf``). No grpcio: a channel, its threads and its runtime check against
generated stubs are more than one call every ``--interval`` seconds needs
(docs/dependencies.md has the figures).
"""

from __future__ import annotations

import builtins
import os
import stat
import time

from node_agent.podresources import DEFAULT_SOCKET
from node_agent.podresources.messages import WireError, allocatable_response, list_response
from node_agent.podresources.model import (
    ClaimDevice,
    ContainerClaim,
    ContainerDevices,
    KubeletUnavailable,
    PodDevices,
)
from node_agent.podresources.unary import GrpcError, unary_call

__all__ = ["DEFAULT_SOCKET", "ClaimDevice", "ContainerClaim", "ContainerDevices",
           "KubeletUnavailable", "PodDevices", "PodResourcesClient"]

SERVICE = "/v1.PodResourcesLister"
# The largest answer read: ~10x what a generous 250-pod node sends (107 KB: every pod
# Guaranteed with 3-4 containers, exclusive CPUs and memory, 64 GPU and 64 DRA pods; a plain
# 250-pod node sends 41 KB, a 110-pod one 18 KB: bench/results/podresources_answer.md).
MAX_MESSAGE = 1024 * 1024


class PodResourcesClient:
    """Lists pod device allocations; every call has a deadline of ``timeout`` seconds."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def check_access(self) -> None:
        """KubeletUnavailable, with the reason, when this process cannot use the socket.

        The kubelet creates it with its umask (0755 under systemd's 022), owned by root, and
        connecting to a unix socket needs write permission on it: so only uid 0 can, unless the
        node's admin changed the mode or group. Checked before every call (the socket comes and
        goes with the kubelet), so a non-root agent says why at once."""
        try:
            mode = os.stat(self.socket_path).st_mode
        except OSError as err:
            raise KubeletUnavailable(f"{self.socket_path}: {err.strerror or err} (is the "
                                     "kubelet's pod-resources directory mounted?)") from err
        if not stat.S_ISSOCK(mode):
            raise KubeletUnavailable(f"{self.socket_path}: not a socket")
        if not os.access(self.socket_path, os.R_OK | os.W_OK, effective_ids=True):
            raise KubeletUnavailable(
                f"{self.socket_path}: uid {os.geteuid()} may not connect (mode "
                f"{stat.S_IMODE(mode):04o}, owner uid {os.stat(self.socket_path).st_uid}): "
                "connecting needs write permission on the socket; GPU allocation is unknown")

    def _call(self, method: str, deadline: float) -> bytes:
        self.check_access()
        try:
            return unary_call(self.socket_path, f"{SERVICE}/{method}", b"",
                              timeout=max(0.001, deadline - time.monotonic()),
                              max_message=MAX_MESSAGE)
        except GrpcError as err:
            raise KubeletUnavailable(f"pod-resources {method} on {self.socket_path}: "
                                     f"{err}") from err
        except OSError as err:
            raise KubeletUnavailable(f"pod-resources {method} on {self.socket_path}: "
                                     f"{err.strerror or err}") from err

    def list(self) -> list[PodDevices]:
        """Every pod of the node with its device-plugin devices and DRA claims."""
        deadline = time.monotonic() + self.timeout  # the call and reading its answer
        answer = self._call("List", deadline)
        try:
            return list_response(answer, deadline)
        except WireError as err:
            raise KubeletUnavailable(f"pod-resources List on {self.socket_path}: not a "
                                     f"ListPodResourcesResponse ({err})") from err

    def allocatable(self) -> builtins.list[ContainerDevices]:
        """The node's device-plugin devices (``GetAllocatableResources``)."""
        deadline = time.monotonic() + self.timeout
        answer = self._call("GetAllocatableResources", deadline)
        try:
            return allocatable_response(answer, deadline)
        except WireError as err:
            raise KubeletUnavailable(f"pod-resources GetAllocatableResources on "
                                     f"{self.socket_path}: not an "
                                     f"AllocatableResourcesResponse ({err})") from err

    def close(self) -> None:
        """Nothing held between calls (a connection per call); kept for callers."""
