"""Dynamic Resource Allocation (DRA): which GPU each device of a ResourceClaim is.

The kubelet's pod-resources ``List`` names each device a pod's claims were allocated by
driver, pool and device name (``gpu.nvidia.com`` / ``node-1`` / ``gpu-0``), never by GPU UUID.
The driver publishes its devices in ResourceSlices (``resource.k8s.io/v1``), and NVIDIA's DRA
driver gives each GPU and MIG device a ``uuid`` attribute (``GPU-...``, ``MIG-...``), the UUID
NVML reports. So:

    (driver, pool, device)  ──►  the device's ``uuid`` attribute     (this node's ResourceSlices)

A device whose slice is not found, or whose driver publishes no ``uuid`` (or one that is not a
device ID), maps to None: its pod's allocation is then *unknown*, never "not allocated".

``slice_index`` is pure (a ResourceSliceList as JSON → the map); ``DraSlices`` keeps it for this
node, listed with ``fieldSelector=spec.nodeName=<node>`` when first needed, every 5 minutes, and
when the kubelet names a device the map does not have (at most every 15 s): never per scrape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from gpu_auditor.base.names import LABEL_MAX, SUBDOMAIN_MAX, is_label, is_subdomain
from node_agent.names import is_device_id
from node_agent.relist import Relist

Device = tuple[str, str, str]  # (driver, pool, device)

MAX_SLICES = 10_000  # the API allows 128 devices per slice; a node has a handful of slices
MAX_DEVICES = 100_000
UUID_ATTRIBUTE = "uuid"



def is_device_triplet(driver: object, pool: object, device: object) -> bool:
    """Kubernetes' own shapes (resource.k8s.io/v1 validation, ``gpu_auditor.base.names``): a
    driver is a DNS subdomain of at most 63 characters; a pool DNS subdomains joined by "/", at
    most 253; a device a DNS label."""
    return (is_subdomain(driver) and len(str(driver)) <= LABEL_MAX
            and isinstance(pool, str) and len(pool) <= SUBDOMAIN_MAX
            and all(is_subdomain(part) for part in pool.split("/"))
            and is_label(device))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def device_uuid(driver: str, device: Mapping[str, Any]) -> str | None:
    """The ``uuid`` attribute of a ResourceSlice device (``uuid`` or ``<driver>/uuid``; v1
    keeps attributes on the device, v1beta1 under ``basic``), if it is a device ID."""
    attributes = _mapping(device.get("attributes")) or _mapping(
        _mapping(device.get("basic")).get("attributes"))
    for key in (UUID_ATTRIBUTE, f"{driver}/{UUID_ATTRIBUTE}"):
        value = _mapping(attributes.get(key)).get("string")
        if is_device_id(value) and "::" not in value:
            return value
    return None


def slice_index(body: Mapping[str, Any], node: str) -> dict[Device, str | None]:
    """(driver, pool, device) → GPU UUID (None: the device has no usable ``uuid``) from a
    ResourceSliceList. Only slices of ``node`` count, and of each pool only the slices of its
    newest generation (older ones are being replaced). Malformed items are skipped."""
    items = body.get("items")
    slices = [_mapping(_mapping(item).get("spec"))
              for item in (items if isinstance(items, list) else [])[:MAX_SLICES]]
    newest: dict[tuple[str, str], int] = {}
    usable: list[tuple[str, str, int, list[Any]]] = []
    for spec in slices:
        pool_ref = _mapping(spec.get("pool"))
        driver, name = spec.get("driver"), pool_ref.get("name")
        generation = pool_ref.get("generation")
        devices = spec.get("devices")
        if spec.get("nodeName") != node or not isinstance(generation, int) \
                or isinstance(generation, bool) or not isinstance(devices, list) \
                or not is_device_triplet(driver, name, "x"):
            continue
        assert isinstance(driver, str) and isinstance(name, str)
        newest[(driver, name)] = max(generation, newest.get((driver, name), generation))
        usable.append((driver, name, generation, devices))
    index: dict[Device, str | None] = {}
    for driver, pool, generation, devices in usable:
        if generation != newest[(driver, pool)]:
            continue
        for device in devices:
            entry = _mapping(device)
            name = entry.get("name")
            if len(index) >= MAX_DEVICES or not is_device_triplet(driver, pool, name):
                continue
            assert isinstance(name, str)
            index[(driver, pool, name)] = device_uuid(driver, entry)
    return index


class SliceApi(Protocol):
    """The one read DraSlices makes (``node_agent.kube.AgentApi``; tests fake it)."""

    def list_resource_slices(self, *, field_selector: str,
                             timeout: float) -> Mapping[str, Any]: ...


class DraSlices:
    """This node's ResourceSlice devices, re-listed every ``max_age`` s and when a device the
    kubelet names is missing (at most every ``min_refresh`` s; ``relist.Relist``). The last
    good map is kept when the API server fails."""

    def __init__(self, api: SliceApi, node_name: str, *, min_refresh: float = 15.0,
                 max_age: float = 300.0, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._node = node_name
        self._timeout = timeout
        self._relist = Relist(f"listing ResourceSlices of node {node_name} (DRA devices stay "
                              "unknown)", min_refresh=min_refresh, max_age=max_age, clock=clock)
        self.index: dict[Device, str | None] = {}

    @property
    def lists(self) -> int:
        """API requests made (for tests and the bench)."""
        return self._relist.lists

    def refresh_if_needed(self, wanted: Iterable[Device]) -> int:
        """Re-list when due; returns the number of API errors (0 or 1)."""
        wanted = list(wanted)
        return self._relist.refresh(lambda: any(d not in self.index for d in wanted),
                                    self._fetch)

    def _fetch(self) -> None:
        body = self._api.list_resource_slices(field_selector=f"spec.nodeName={self._node}",
                                              timeout=self._timeout)
        self.index = slice_index(body, self._node)

    def uuid(self, device: Device) -> str | None:
        return self.index.get(device)
