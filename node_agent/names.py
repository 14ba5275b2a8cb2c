"""What a Kubernetes name, UID, container ID or device ID may look like, checked at the edge.

Pod and namespace names reach us from the API server, the kubelet and the fake pods file and
leave again as metric labels, report fields and finding messages. The API server enforces these
shapes, so anything else is not a pod we can name: it is skipped (from the API, the kubelet) or
a config error (from a fake file), never passed on. DNS names are the shared base's rules
(``gpu_auditor.base.names``, one definition for every part); the shapes only the agent reads
(the cgroup's pod UID and container ID, device IDs) are here. Every check is bounded in length
before a pattern runs.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from gpu_auditor.base.names import is_label, is_subdomain

_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CONFIG_HASH = re.compile(r"[0-9a-f]{32}")  # a static pod's kubernetes.io/config.mirror
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")  # what cgroup paths show (containerd, CRI-O)
# A device plugin's device ID: GPU-<uuid>, MIG-<uuid>, a time-slicing replica <UUID>::<n>.
_DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_GPU_UUID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _fits(pattern: re.Pattern[str], value: object) -> TypeGuard[str]:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def is_namespace(value: object) -> TypeGuard[str]:
    """A DNS-1123 label."""
    return is_label(value)


def is_pod_name(value: object) -> TypeGuard[str]:
    """A DNS-1123 subdomain (``a..b`` is none: its labels must not be empty)."""
    return is_subdomain(value)


def is_container_name(value: object) -> TypeGuard[str]:
    """A DNS-1123 label."""
    return is_label(value)


def is_pod_uid(value: object) -> TypeGuard[str]:
    return _fits(_UID, value)


def is_config_hash(value: object) -> TypeGuard[str]:
    return _fits(_CONFIG_HASH, value)


def is_container_id(value: object) -> TypeGuard[str]:
    return _fits(_CONTAINER_ID, value)


def is_device_id(value: object) -> TypeGuard[str]:
    return _fits(_DEVICE_ID, value)


def is_gpu_uuid(value: object) -> TypeGuard[str]:
    return _fits(_GPU_UUID, value)


def printable(value: object, limit: int) -> str:
    """A free-text value (a GPU model, a label) as a label: printable, at most ``limit``."""
    text = str(value)[:limit]
    return "".join(c if c.isprintable() else "?" for c in text)
