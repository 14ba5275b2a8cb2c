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

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from node_agent.names import is_device_id

log = logging.getLogger(__name__)

Device = tuple[str, str, str]  # (driver, pool, device)

MAX_SLICES = 10_000  # the API allows 128 devices per slice; a node has a handful of slices
MAX_DEVICES = 100_000
UUID_ATTRIBUTE = "uuid"

# Kubernetes' own shapes (resource.k8s.io/v1 validation): a driver is a DNS subdomain of at
# most 63 characters; a pool is DNS subdomains joined by "/", at most 253; a device a DNS label.
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
_DRIVER = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,61}[a-z0-9])?")
_POOL = re.compile(rf"{_SUBDOMAIN}(?:/{_SUBDOMAIN})*")
_DEVICE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")


def is_device_triplet(driver: object, pool: object, device: object) -> bool:
    return (isinstance(driver, str) and _DRIVER.fullmatch(driver) is not None
            and isinstance(pool, str) and len(pool) <= 253 and _POOL.fullmatch(pool) is not None
            and isinstance(device, str) and _DEVICE.fullmatch(device) is not None)


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
    kubelet names is missing (at most every ``min_refresh`` s). The last good map is kept when
    the API server fails."""

    def __init__(self, api: SliceApi, node_name: str, *, min_refresh: float = 15.0,
                 max_age: float = 300.0, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._node = node_name
        self._min_refresh = min_refresh
        self._max_age = max_age
        self._timeout = timeout
        self._clock = clock
        self._last: float | None = None
        self._failing = False
        self.index: dict[Device, str | None] = {}
        self.lists = 0  # API requests made (for tests and the bench)

    def _due(self, wanted: Iterable[Device]) -> bool:
        if self._last is None:
            return True
        age = self._clock() - self._last
        if age >= self._max_age:
            return True
        return age >= self._min_refresh and any(d not in self.index for d in wanted)

    def refresh_if_needed(self, wanted: Iterable[Device]) -> int:
        """Re-list when due; returns the number of API errors (0 or 1)."""
        wanted = list(wanted)
        if not self._due(wanted):
            return 0
        self._last = self._clock()
        self.lists += 1
        try:
            body = self._api.list_resource_slices(
                field_selector=f"spec.nodeName={self._node}", timeout=self._timeout)
            self.index = slice_index(body, self._node)
        except Exception as err:  # an APIError class (403 without the grant, 404 before
            # resource.k8s.io/v1), or a malformed answer: keep the last map
            if not self._failing:
                log.warning("listing ResourceSlices of node %s failed, DRA devices stay "
                            "unknown: %s", self._node, err)
            self._failing = True
            return 1
        if self._failing:
            log.warning("listing ResourceSlices of node %s works again", self._node)
        self._failing = False
        return 0

    def uuid(self, device: Device) -> str | None:
        return self.index.get(device)
