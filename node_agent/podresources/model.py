"""What the pod-resources client returns, as plain frozen values (and its one error), apart
from the client itself: the join (``node_agent.pods``) and the fake node use them without
loading h2 or protobuf."""

from __future__ import annotations

from dataclasses import dataclass


class KubeletUnavailable(Exception):
    """The kubelet's pod-resources socket did not answer (missing, refused, slow, garbled)."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """Devices of one resource (``nvidia.com/gpu``, ...) a device plugin gave a container."""

    container: str
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of a ResourceClaim (DRA): the driver/pool/device triplet names it."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """A ResourceClaim a container uses, with the devices allocated to the claim."""

    container: str
    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True, slots=True)
class PodDevices:
    namespace: str
    name: str
    devices: tuple[ContainerDevices, ...]
    claims: tuple[ContainerClaim, ...] = ()
