"""A small client for ``v1.PodResourcesLister/List`` over the kubelet's unix socket.

grpc and the generated modules are imported on first use, so an agent that never talks to a
kubelet (the fake node, the benchmarks) does not pay for them.
"""

from __future__ import annotations

import importlib
import os
import stat
from dataclasses import dataclass
from typing import Any

_GENERATED = "node_agent.podresources.v1"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class KubeletUnavailable(Exception):
    """The kubelet's pod-resources socket did not answer (missing, refused, slow)."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodDevices:
    namespace: str
    name: str
    devices: tuple[ContainerDevices, ...]


def pod_devices_from_response(response: Any) -> list[PodDevices]:
    """Plain data from a ``ListPodResourcesResponse`` (no pod UID in it: joined later by name)."""
    out: list[PodDevices] = []
    for pod in response.pod_resources:
        devices = tuple(
            ContainerDevices(c.name, d.resource_name, tuple(d.device_ids))
            for c in pod.containers
            for d in c.devices
        )
        out.append(PodDevices(namespace=pod.namespace, name=pod.name, devices=devices))
    return out


class PodResourcesClient:
    """Lists pod device allocations; every call has a deadline of ``timeout`` seconds."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: Any = None
        self._stub: Any = None

    def _connect(self) -> Any:
        if self._stub is None:
            try:
                import grpc

                api_pb2_grpc: Any = importlib.import_module(f"{_GENERATED}.api_pb2_grpc")
            except Exception as err:  # ImportError, or the stubs' grpcio version check
                # Seen on a GPU image with grpcio 1.84: the generated code refuses to load.
                # That is the kubelet's side failing, not a reason to drop the NVML metrics.
                raise KubeletUnavailable(f"pod-resources client unusable: {err}") from err
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
            )
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def check_access(self) -> None:
        """KubeletUnavailable, with the reason, when this process cannot use the socket.

        The kubelet creates it with its umask (0755 under systemd's 022), owned by root, and
        connecting to a unix socket needs write permission on it: so only uid 0 can, unless the
        node's admin changed the mode or group. Checked before every List (the socket comes and
        goes with the kubelet), so a non-root agent says why at once instead of gRPC failing."""
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

    def list(self) -> list[PodDevices]:
        stub = self._connect()
        self.check_access()
        import grpc

        api_pb2: Any = importlib.import_module(f"{_GENERATED}.api_pb2")
        try:
            response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            raise KubeletUnavailable(f"pod-resources List on {self.socket_path}: {code}") from err
        return pod_devices_from_response(response)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None
