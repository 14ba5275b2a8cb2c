"""A device plugin of the e2e group: fake ``nvidia.com/gpu`` devices, served to a real kubelet
through its device-plugin API (v1beta1), so that the kubelet allocates them to pods and reports
the allocations on its pod-resources socket, as the NVIDIA device plugin makes it do.

    python -m deviceplugin --plugin-dir <kubelet root>/device-plugins \\
        --device GPU-aaaa... --device GPU-bbbb...

It registers ``--resource`` with the kubelet (``kubelet.sock`` in ``--plugin-dir``), serves
ListAndWatch (every device Healthy) and Allocate (``NVIDIA_VISIBLE_DEVICES`` set to the IDs the
kubelet chose, as the NVIDIA plugin's envvar strategy does), and logs each allocation as one
JSON line on stdout. No device exists: nothing is mounted into the container.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from typing import Any

import grpc

from deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


class FakeGpus(api_pb2_grpc.DevicePluginServicer):  # type: ignore[misc]
    def __init__(self, device_ids: Sequence[str], env_name: str, stop: threading.Event) -> None:
        self.device_ids = list(device_ids)
        self.env_name = env_name
        self.stop = stop

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        yield api_pb2.ListAndWatchResponse(devices=[
            api_pb2.Device(ID=d, health="Healthy") for d in self.device_ids])
        # The devices never change: hold the stream open until the kubelet or we go away.
        while context.is_active() and not self.stop.wait(1.0):
            pass

    def Allocate(self, request: Any, context: Any) -> Any:
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            unknown = [d for d in ids if d not in self.device_ids]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            print(json.dumps({"allocate": ids}), flush=True)
            responses.append(api_pb2.ContainerAllocateResponse(
                envs={self.env_name: ",".join(ids)}))
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return api_pb2.PreStartContainerResponse()

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "no preferred allocation")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deviceplugin", description=__doc__.splitlines()[0])
    p.add_argument("--plugin-dir", required=True, help="the kubelet's device-plugins folder")
    p.add_argument("--resource", default="nvidia.com/gpu")
    p.add_argument("--device", action="append", required=True, help="a device ID (repeat)")
    p.add_argument("--env-name", default="NVIDIA_VISIBLE_DEVICES")
    p.add_argument("--endpoint", default="gpu-auditor-e2e.sock")
    args = p.parse_args(argv)

    stop = threading.Event()
    socket_path = os.path.join(args.plugin_dir, args.endpoint)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    api_pb2_grpc.add_DevicePluginServicer_to_server(
        FakeGpus(args.device, args.env_name, stop), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()

    with grpc.insecure_channel(f"unix://{os.path.join(args.plugin_dir, KUBELET_SOCKET)}") as ch:
        api_pb2_grpc.RegistrationStub(ch).Register(api_pb2.RegisterRequest(
            version=API_VERSION, endpoint=args.endpoint, resource_name=args.resource,
            options=api_pb2.DevicePluginOptions()), timeout=10)
    print(json.dumps({"registered": args.resource, "devices": args.device}), flush=True)

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
