"""Pure parsing of ``/proc/<pid>/cgroup``: which pod (UID) and container (ID) a process is in.

Every path form from the kubelet's cgroup drivers and the container runtimes is handled without
anchoring at ``/kubepods`` (a private cgroup namespace shows ``../`` prefixes):

- systemd driver: ``kubepods-<qos>-pod<uid_with_underscores>.slice`` (``_`` escapes ``-``),
  Guaranteed pods without the QoS level, also nested under ``kubelet.slice``;
- cgroupfs driver: ``/kubepods/<qos>/pod<uid-with-dashes>/<64 hex>``;
- runtimes: ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope``, a bare
  ``<id>`` segment, or ``<pod slice>:cri-containerd:<id>`` (containerd's systemd cgroup path);
- static pods: a 32-hex config hash in place of the UID.
"""

from __future__ import annotations

import re

from node_agent.model import CgroupIdentity

_UID = (
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32}"
)
# "pod<uid>" as a whole path segment (cgroupfs) or as the last dash-part of a slice name.
_POD = re.compile(rf"(?:^|[/-])pod({_UID})(?:\.slice)?(?=$|[/:])")
# The container: a runtime-prefixed scope, containerd's ":cri-containerd:<id>", or a bare id.
_CONTAINER = re.compile(
    r"(?:^|[/:])(?:(?:cri-containerd|crio|docker|containerd)[-:])?([0-9a-f]{64})(?:\.scope)?$"
)


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """The pod UID (dashed form) and container ID in one cgroup path, or None if in no pod."""
    pod = _POD.search(path)
    if pod is None:
        return None
    container = _CONTAINER.search(path, pod.end())
    return CgroupIdentity(
        pod_uid=pod.group(1).replace("_", "-"),
        container_id=container.group(1) if container else None,
    )


def parse_cgroup_file(text: str) -> CgroupIdentity | None:
    """The pod of a process from the whole ``/proc/<pid>/cgroup`` text (v1 or v2).

    Lines are ``hierarchy:controllers:path``; the path may itself contain ``:``. The first line
    naming both a pod and a container wins, else the first naming a pod.
    """
    best: CgroupIdentity | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = parse_cgroup_path(parts[2].strip())
        if found is None:
            continue
        if found.container_id is not None:
            return found
        if best is None:
            best = found
    return best
