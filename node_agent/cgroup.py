"""Pure parsing of ``/proc/<pid>/cgroup``: which pod (UID) and container (ID) a process is in.

Every path form from the kubelet's cgroup drivers and the container runtimes is handled without
anchoring at ``/kubepods`` (a private cgroup namespace shows ``../`` prefixes):

- systemd driver: ``kubepods-<qos>-pod<uid_with_underscores>.slice`` (``_`` escapes ``-``),
  Guaranteed pods without the QoS level, also nested under ``kubelet.slice``;
- cgroupfs driver: ``/kubepods/<qos>/pod<uid-with-dashes>/<64 hex>``;
- runtimes: ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope``, a bare
  ``<id>`` segment, or ``<pod slice>:cri-containerd:<id>`` (containerd's systemd cgroup path);
- static pods: a 32-hex config hash in place of the UID.

A file that names no pod is a **host** process only when every line is well formed and at
least one path is printable, absolute and positively outside the pods: no ``kubepods``
anywhere, not a container right under a ``..`` climb (a sibling container of the agent's own
pod, seen from its cgroup namespace). A bare ``/`` (the root, or a v1 controller the kubelet
does not manage) says nothing either way. Anything else (empty, garbage, only ``/``, a QoS
slice with no pod, lines naming two different pods) is **unknown**: no pod, and no finding
built on it.

Only the leftmost pod segment and the first container segment after it count: what a process
can add below its own cgroup (a delegated sub-cgroup named like a pod) never changes whose it is.
"""

from __future__ import annotations

import re

from node_agent.model import CgroupIdentity, NoPod, Placement

_UID = (
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32}"
)
# "pod<uid>" as a whole path segment (cgroupfs) or as the last dash-part of a slice name.
_POD = re.compile(rf"(?:^|[/-])pod({_UID})(?:\.slice)?(?=$|[/:])")
# The container: a runtime-prefixed scope, containerd's ":cri-containerd:<id>", or a bare id,
# as a whole segment; the first one after the pod segment is the runtime's.
_CONTAINER = re.compile(
    r"(?:^|[/:])(?:(?:cri-containerd|crio|docker|containerd)[-:])?([0-9a-f]{64})(?:\.scope)?"
    r"(?=$|/)"
)
# A container's own cgroup (any runtime, conmon included), as one whole segment.
_CONTAINER_SEGMENT = re.compile(
    r"(?:(?:cri-containerd|crio|crio-conmon|docker|containerd|libpod)-)?[0-9a-f]{64}"
    r"(?:\.scope)?"
)
_HIERARCHY = re.compile(r"[0-9]{1,10}")
# Lines the kernel writes: one per hierarchy (cgroup v1 has about a dozen, v2 one). A file with
# more was not written by the kernel: unknown, without reading the rest line by line.
MAX_LINES = 64


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """The pod UID (dashed form) and container ID in one cgroup path, or None if it names none."""
    pod = _POD.search(path)
    if pod is None:
        return None
    container = _CONTAINER.search(path, pod.end())
    return CgroupIdentity(
        pod_uid=pod.group(1).replace("_", "-"),
        container_id=container.group(1) if container else None,
    )


def classify_cgroup_path(path: str) -> Placement:
    """One path: its pod, ``NoPod.HOST`` when positively outside every pod, else unknown."""
    if not path.startswith("/") or not path.isprintable():
        return NoPod.UNKNOWN
    found = parse_cgroup_path(path)
    if found is not None:
        return found
    if "kubepods" in path:  # a QoS slice, or a pod path we cannot read: not a host process
        return NoPod.UNKNOWN
    segments = path.split("/")[1:]
    climbed = 0
    while climbed < len(segments) and segments[climbed] == "..":
        climbed += 1
    rest = segments[climbed:]
    if not rest or rest == [""] or any(s in ("", ".", "..") for s in rest):
        return NoPod.UNKNOWN  # the root (of the reader's namespace), or not a kernel path
    if climbed and _CONTAINER_SEGMENT.fullmatch(rest[0]):
        return NoPod.UNKNOWN  # a container beside the reader's own: in some pod, not the host
    return NoPod.HOST


def parse_cgroup_file(text: str) -> Placement:
    """The pod of a process from the whole ``/proc/<pid>/cgroup`` text (v1 or v2).

    Lines are ``hierarchy:controllers:path``; the path may itself contain ``:``. A line naming
    a pod and its container wins over one naming only the pod (cgroup v1 controllers the kubelet
    does not manage show other paths, so other lines do not make a pod process unknown). Lines
    naming two different pods make it unknown.
    """
    lines = text.split("\n", MAX_LINES)
    if len(lines) > MAX_LINES and lines.pop().strip("\n"):
        return NoPod.UNKNOWN
    pods: list[CgroupIdentity] = []
    unknown = host = False
    for line in lines:
        if not line:
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not _HIERARCHY.fullmatch(parts[0]):
            unknown = True
            continue
        if parts[2] == "/":  # a v1 controller nobody manages: says nothing either way
            continue
        verdict = classify_cgroup_path(parts[2])
        if isinstance(verdict, CgroupIdentity):
            pods.append(verdict)
        elif verdict is NoPod.UNKNOWN:
            unknown = True
        else:
            host = True
    if pods:
        if len({p.pod_uid for p in pods}) > 1:
            return NoPod.UNKNOWN
        containers = {p.container_id for p in pods if p.container_id is not None}
        if len(containers) > 1:  # the pod is sure, its container is not
            return CgroupIdentity(pods[0].pod_uid, None)
        return next((p for p in pods if p.container_id is not None), pods[0])
    return NoPod.HOST if host and not unknown else NoPod.UNKNOWN
