"""Who a process belongs to, and which GPUs each pod was allocated.

Joining, since the kubelet's pod-resources ``List`` carries names but no pod UID:

    /proc/<pid>/cgroup ──► pod UID + container ID                        (cgroup.py)
    pod UID ──► namespace/name, container ID ──► container name          (API server pod list
                                                                          for this node, or the
                                                                          fake node's pods file)
    namespace/name ──► allocated device IDs (GPU UUIDs, MIG UUIDs)       (kubelet List, or the
                                                                          fake node's pods file)

Static pods run under their config hash: the API server's mirror pod carries it in the
``kubernetes.io/config.mirror`` annotation, so both the UID and the hash index a pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpu_auditor.base.errors import ConfigError
from node_agent.dra import Device, DraSlices, is_device_triplet
from node_agent.fake_source import load_yaml
from node_agent.model import Allocated, Allocations, CgroupIdentity, NodeSharing, PodRef
from node_agent.names import (
    is_config_hash,
    is_container_id,
    is_container_name,
    is_device_id,
    is_namespace,
    is_pod_name,
    is_pod_uid,
)
from node_agent.podresources.model import ContainerDevices, KubeletUnavailable, PodDevices
from node_agent.relist import Relist
from node_agent.sharing import strategy_from

log = logging.getLogger(__name__)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    containers: Mapping[str, str] = field(default_factory=dict)  # container ID → name
    mirror_hash: str | None = None


# ---- pure helpers -------------------------------------------------------------------------


MAX_DEVICE_IDS_PER_POD = 1024  # distinct GPUs / MIG instances after replicas are merged
MAX_NODE_PODS = 10_000  # pods of one node from the API server (the kubelet allows ~110-1000)


def normalize_device_id(device_id: str) -> str:
    """``GPU-x::3`` (a time-slicing replica) is GPU ``GPU-x``; other IDs are kept."""
    return device_id.split("::", 1)[0]


def _pod_key(namespace: object, name: object) -> str | None:
    if is_namespace(namespace) and is_pod_name(name):
        return f"{namespace}/{name}"
    return None


def allocations_from(pods: Iterable[PodDevices],
                     dra_uuid: Callable[[Device], str | None] | None = None) -> Allocations:
    """GPU allocations by ``namespace/name`` from the kubelet's List: device-plugin devices of
    ``nvidia.com/*`` resources, and the devices of the pods' ResourceClaims (DRA) mapped to GPU
    UUIDs by ``dra_uuid`` (this node's ResourceSlices; None: no API server to read them).

    A pod whose answer we cannot trust (a malformed name, a device ID that is no device ID, a
    claim or device name Kubernetes would not accept, more than ``MAX_DEVICE_IDS_PER_POD``
    distinct GPUs) is left out: its allocation is then unknown, never "not allocated", so a bad
    answer cannot accuse it of using a GPU it did not request. A claimed device whose GPU is
    unknown makes the pod ``unresolved`` (unknown on any GPU it was not shown to have).
    """
    by_pod: dict[str, frozenset[str]] = {}
    untrusted: set[str] = set()
    unresolved: set[str] = set()
    claims: dict[tuple[str, str], set[str]] = {}
    replicated = mig = False
    for pod in pods:
        key = _pod_key(pod.namespace, pod.name)
        if key is None:
            continue
        ids: set[str] = set()
        trusted = True
        for d in pod.devices:
            if not d.resource_name.startswith("nvidia.com/"):
                continue
            mig = mig or d.resource_name.startswith("nvidia.com/mig-")
            for device_id in d.device_ids:
                if not is_device_id(device_id):
                    trusted = False
                    break
                replicated = replicated or "::" in device_id
                mig = mig or device_id.startswith("MIG-")
                ids.add(normalize_device_id(device_id))
            if not trusted or len(ids) > MAX_DEVICE_IDS_PER_POD:
                trusted = False
                break
        pod_claims: list[tuple[str, str]] = []  # (claim, GPU UUID)
        for claim in pod.claims if trusted else ():
            if not (is_namespace(claim.claim_namespace) and is_pod_name(claim.claim_name)):
                trusted = False
                break
            ref = f"{claim.claim_namespace}/{claim.claim_name}"
            for dev in claim.devices:
                if not is_device_triplet(dev.driver, dev.pool, dev.device):
                    trusted = False
                    break
                uuid = dra_uuid((dev.driver, dev.pool, dev.device)) if dra_uuid else None
                if uuid is None:
                    unresolved.add(key)
                    continue
                mig = mig or uuid.startswith("MIG-")
                ids.add(uuid)
                pod_claims.append((ref, uuid))
            if not trusted or len(ids) > MAX_DEVICE_IDS_PER_POD:
                trusted = False
                break
        if not trusted:
            untrusted.add(key)
            continue
        by_pod[key] = by_pod.get(key, frozenset()) | frozenset(ids)
        for ref, uuid in pod_claims:
            claims.setdefault((key, uuid), set()).add(ref)
    for key in untrusted:
        by_pod.pop(key, None)
        unresolved.discard(key)
    return Allocations(by_pod=by_pod, replicated=replicated, mig=mig,
                       unresolved=frozenset(unresolved),
                       claims={k: frozenset(v) for k, v in claims.items()
                               if k[0] not in untrusted})


def strip_runtime(container_id: str) -> str:
    """``containerd://<64hex>`` → ``<64hex>``."""
    return container_id.split("://", 1)[-1]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _containers(status: Mapping[str, Any]) -> dict[str, str]:
    """Container ID → name from a pod's status, for well-formed entries only."""
    containers: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        statuses = status.get(key)
        for cs in statuses if isinstance(statuses, list) else []:
            entry = _mapping(cs)
            cid, name = entry.get("containerID"), entry.get("name")
            if isinstance(cid, str) and is_container_id(strip_runtime(cid)) \
                    and is_container_name(name):
                containers[strip_runtime(cid)] = name
    return containers


def pods_from_api_list(body: Mapping[str, Any]) -> list[PodInfo]:
    """PodInfo from a ``PodList`` as JSON (the raw response; no model objects, less memory).

    Items the API server could not have sent (a name that is no Kubernetes name, a UID that is
    no UUID) are skipped: their processes keep the pod UID from the cgroup, unnamed. At most
    ``MAX_NODE_PODS`` items are read.
    """
    out: list[PodInfo] = []
    items = body.get("items")
    for item in (items if isinstance(items, list) else [])[:MAX_NODE_PODS]:
        meta = _mapping(_mapping(item).get("metadata"))
        namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (is_namespace(namespace) and is_pod_name(name) and is_pod_uid(uid)):
            continue
        mirror = _mapping(meta.get("annotations")).get(MIRROR_ANNOTATION)
        out.append(
            PodInfo(
                namespace=namespace,
                name=name,
                uid=uid,
                containers=_containers(_mapping(_mapping(item).get("status"))),
                mirror_hash=mirror if is_config_hash(mirror) else None,
            )
        )
    return out


def index_pods(pods: Iterable[PodInfo]) -> dict[str, PodInfo]:
    """By UID and, for static pods, by config hash (both as cgroup paths show them)."""
    index: dict[str, PodInfo] = {}
    for p in pods:
        index[p.uid] = p
        if p.mirror_hash:
            index[p.mirror_hash] = p
    return index


def resolve(index: Mapping[str, PodInfo], identity: CgroupIdentity) -> PodRef:
    """The pod a cgroup identity belongs to; only the UID when the pod is not (yet) known."""
    info = index.get(identity.pod_uid)
    if info is None:
        return PodRef(namespace="", pod="", pod_uid=identity.pod_uid, container="")
    container = info.containers.get(identity.container_id or "", "")
    return PodRef(namespace=info.namespace, pod=info.name, pod_uid=info.uid, container=container)


def allocation_of(pod: PodRef, gpu_uuid: str, allocations: Allocations | None) -> Allocated:
    """Was this pod allocated this GPU? Unknown without the kubelet or a pod name."""
    if allocations is None or not pod.pod:
        return Allocated.UNKNOWN
    ids = allocations.by_pod.get(pod.key)
    if ids is None:  # not in the kubelet's list (yet): do not accuse it
        return Allocated.UNKNOWN
    if gpu_uuid in ids:
        return Allocated.TRUE
    if pod.key in allocations.unresolved:  # a claimed device we could not map may be this GPU
        return Allocated.UNKNOWN
    return Allocated.FALSE


# ---- what the sampler sees each pass ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodView:
    """Pod identity and allocations as of one pass."""

    index: Mapping[str, PodInfo]
    allocations: Allocations | None  # None: kubelet unreachable
    strategy: NodeSharing
    errors: Mapping[str, int]  # errors during this pass, by source

    @property
    def kubelet_up(self) -> bool:
        return self.allocations is not None

    def resolve(self, identity: CgroupIdentity) -> PodRef:
        return resolve(self.index, identity)


class PodSource(Protocol):
    def view(self, wanted_uids: Iterable[str] = ()) -> PodView: ...


# ---- the fake node ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FakeNode:
    name: str | None
    labels: Mapping[str, str]
    kubelet_up: bool
    pods: tuple[PodInfo, ...]
    devices: tuple[PodDevices, ...]


MAX_FAKE_PODS = 10_000


def parse_fake_pods(data: Mapping[str, Any], path: Path) -> FakeNode:
    """The fake node's pods file (format in docs/node-agent.md); ConfigError on anything that
    the API server or the kubelet could not have said."""
    node = data.get("node") or {}
    if not isinstance(node, dict):
        raise ConfigError(f"{path}: node must be a mapping")
    labels = node.get("labels") or {}
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in labels.items()):
        raise ConfigError(f"{path}: node.labels must map names to strings")
    name = node.get("name")
    if name is not None and not is_pod_name(name):
        raise ConfigError(f"{path}: node.name must be a DNS subdomain name (e.g. gpu-node-1)")
    kubelet_up = data.get("kubeletUp", True)
    if not isinstance(kubelet_up, bool):
        raise ConfigError(f"{path}: kubeletUp must be true or false")
    raw = data.get("pods") or []
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: pods must be a list")
    if len(raw) > MAX_FAKE_PODS:
        raise ConfigError(f"{path}: pods: more than {MAX_FAKE_PODS}")
    parsed = [_fake_pod(p, f"{path}: pods[{i}]") for i, p in enumerate(raw)]
    return FakeNode(
        name=name,
        labels={k: str(v) for k, v in labels.items()},
        kubelet_up=kubelet_up,
        pods=tuple(info for info, _ in parsed),
        devices=tuple(devices for _, devices in parsed),
    )


def _fake_pod(p: Any, where: str) -> tuple[PodInfo, PodDevices]:
    if not isinstance(p, dict):
        raise ConfigError(f"{where}: expected a mapping with namespace, name and uid")
    if not is_namespace(p.get("namespace")):
        raise ConfigError(f"{where}.namespace: required, a DNS label (e.g. ml)")
    if not is_pod_name(p.get("name")):
        raise ConfigError(f"{where}.name: required, a DNS subdomain name (e.g. trainer-0)")
    if not is_pod_uid(p.get("uid")):
        raise ConfigError(f"{where}.uid: required, a lowercase UUID")
    mirror = p.get("mirrorHash")
    if mirror is not None and not is_config_hash(mirror):
        raise ConfigError(f"{where}.mirrorHash: 32 lowercase hex digits")
    raw = p.get("containers") or []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.containers: must be a list")
    containers: dict[str, str] = {}
    pod_devices: list[ContainerDevices] = []
    for j, c in enumerate(raw):
        w = f"{where}.containers[{j}]"
        if not isinstance(c, dict) or not is_container_name(c.get("name")):
            raise ConfigError(f"{w}.name: required, a DNS label (e.g. main)")
        cid = c.get("containerID")
        if cid is not None:
            if not isinstance(cid, str) or not is_container_id(strip_runtime(cid)):
                raise ConfigError(f"{w}.containerID: <runtime>://<64 hex digits>")
            containers[strip_runtime(cid)] = c["name"]
        gpus = c.get("gpus") or []
        if not isinstance(gpus, list) or not all(is_device_id(g) for g in gpus):
            raise ConfigError(f"{w}.gpus: a list of device IDs (e.g. GPU-..., MIG-...)")
        resource = c.get("resourceName", "nvidia.com/gpu")
        if not isinstance(resource, str) or not 0 < len(resource) <= 253:
            raise ConfigError(f"{w}.resourceName: a resource name (e.g. nvidia.com/gpu)")
        if gpus:
            pod_devices.append(ContainerDevices(c["name"], resource, tuple(gpus)))
    info = PodInfo(p["namespace"], p["name"], p["uid"], containers, mirror)
    return info, PodDevices(p["namespace"], p["name"], tuple(pod_devices))


class FakePods:
    """Pods and allocations of the fake node, standing for both the API server and kubelet."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self._index = index_pods(node.pods)
        self._allocations = allocations_from(node.devices)
        self._strategy = strategy_from(node.labels, self._allocations)

    @classmethod
    def from_file(cls, path: Path) -> FakePods:
        return cls(parse_fake_pods(load_yaml(path), path))

    def view(self, wanted_uids: Iterable[str] = ()) -> PodView:
        if not self.node.kubelet_up:
            return PodView(self._index, None, self._strategy, {"kubelet": 1})
        return PodView(self._index, self._allocations, self._strategy, {})


class NoPods:
    """No pod data at all (no kubelet socket, no API server): every pod is known by UID only."""

    def view(self, wanted_uids: Iterable[str] = ()) -> PodView:
        return PodView({}, None, NodeSharing(), {})


# ---- a real node --------------------------------------------------------------------------


class Kubelet(Protocol):
    def list(self) -> list[PodDevices]: ...


class CoreApi(Protocol):
    """The two core-API reads ApiPods makes (``node_agent.kube.AgentApi``; tests fake it).
    Both return the response's JSON as is (no model objects: less memory and time)."""

    def list_pods(self, *, field_selector: str, timeout: float) -> Mapping[str, Any]: ...

    def get_node(self, name: str, *, timeout: float) -> Mapping[str, Any]: ...


class ApiPods:
    """This node's pods (and labels) from the API server, re-listed when an unknown pod UID
    shows up (at most every ``min_refresh`` s) and otherwise every ``max_age`` s
    (``relist.Relist``). The last good list is kept when the API server fails."""

    def __init__(self, core: CoreApi, node_name: str, *, min_refresh: float = 15.0,
                 max_age: float = 300.0, timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._core = core
        self._node = node_name
        self._timeout = timeout
        self._relist = Relist(f"listing pods of node {node_name} from the API server",
                              min_refresh=min_refresh, max_age=max_age, clock=clock)
        self.index: dict[str, PodInfo] = {}
        self.labels: dict[str, str] = {}

    def refresh_if_needed(self, wanted_uids: Iterable[str]) -> int:
        """Re-list when due; returns the number of API errors (0 or 1)."""
        return self._relist.refresh(lambda: any(uid not in self.index for uid in wanted_uids),
                                    self._fetch)

    def _fetch(self) -> None:
        pods = self._core.list_pods(field_selector=f"spec.nodeName={self._node}",
                                    timeout=self._timeout)
        index = index_pods(pods_from_api_list(pods))
        node = self._core.get_node(self._node, timeout=self._timeout)
        labels = _mapping(_mapping(node.get("metadata")).get("labels"))
        self.index = index
        self.labels = {k: v for k, v in labels.items()
                       if isinstance(k, str) and isinstance(v, str)}


class ClusterPods:
    """A real node: allocations from the kubelet (DRA devices mapped through this node's
    ResourceSlices), identities and labels from the API server."""

    def __init__(self, kubelet: Kubelet | None, api: ApiPods | None,
                 dra: DraSlices | None = None) -> None:
        self._kubelet = kubelet
        self._api = api
        self._dra = dra
        self._kubelet_was_up: bool | None = None

    def _allocations(self, answer: list[PodDevices], errors: dict[str, int]) -> Allocations:
        claimed = {(d.driver, d.pool, d.device) for pod in answer for claim in pod.claims
                   for d in claim.devices}
        if not claimed or self._dra is None:  # no DRA on this node, or no API server
            return allocations_from(answer)
        if self._dra.refresh_if_needed(claimed):
            errors["apiserver"] = errors.get("apiserver", 0) + 1
        return allocations_from(answer, self._dra.uuid)

    def view(self, wanted_uids: Iterable[str] = ()) -> PodView:
        errors: dict[str, int] = {}
        allocations: Allocations | None = None
        if self._kubelet is not None:
            try:
                allocations = self._allocations(self._kubelet.list(), errors)
            except Exception as err:  # KubeletUnavailable; anything else is the same verdict
                # (a pass must never fail for what the kubelet answered: issue 26, item 6)
                if self._kubelet_was_up is not False:
                    log.warning("kubelet unreachable, GPU allocation unknown: %s%s",
                                "" if isinstance(err, KubeletUnavailable)
                                else f"{type(err).__name__}: ", err)
                errors["kubelet"] = 1
            else:
                if self._kubelet_was_up is False:
                    log.warning("kubelet pod-resources API reachable again")
            self._kubelet_was_up = allocations is not None
        index: Mapping[str, PodInfo] = {}
        labels: Mapping[str, str] = {}
        if self._api is not None:
            if self._api.refresh_if_needed(wanted_uids):
                errors["apiserver"] = errors.get("apiserver", 0) + 1
            index, labels = self._api.index, self._api.labels
        return PodView(index, allocations, strategy_from(labels, allocations), errors)
