"""A real node beside the local control plane: containerd + runc + kubelet + kube-proxy (and
CoreDNS for Service names), as local processes, registering a real Node.

    network = NodeNetwork.create(workdir)               # its own network and mount namespace
    with LocalCluster(address=network.host_ip, api_port=443) as cluster:
        cluster.start_controllers()
        node = RealNode(cluster, network, "node-1")
        node.start()                                     # Node Ready, Services and DNS working
        node.import_image(archive)                       # ctr -n k8s.io images import
        ...
        node.stop()
    network.destroy()

Isolation, since the machine is shared: every node process runs inside one network and mount
namespace of its own (`NodeNetwork`), joined to the host by a veth pair. The node's iptables
rules (kube-proxy, the CNI bridge's masquerade), its bridge, pod network namespaces and every
mount the kubelet and containerd make live and die there; nothing is written to the host's
network configuration. The host side sees one veth address (`host_ip`), where kube-apiserver
listens. The kubelet's cgroups live under a cgroup root of this node's own
(`/gpu-auditor-<id>`), removed at the end.

The cgroup hierarchy may be v1 or hybrid (this project's CI VM): kubelet 1.36 refuses cgroup v1
unless `failCgroupV1: false`, which the configuration below sets. Binaries come from
scripts/build-node.sh; the CNI plugins (bridge, host-local, loopback) and runc from Debian.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools.localcluster import pki as pki_mod
from devtools.localcluster.process import ClusterError, Component, child_environment

if TYPE_CHECKING:
    from devtools.localcluster.cluster import LocalCluster

NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "ctr", "containerd-shim-runc-v2",
                 "coredns")
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
HOST_TOOLS = ("unshare", "nsenter", "ip", "runc", "iptables", "mount")
PAUSE_IMAGE = "localhost/gpu-auditor/pause:3.10.2"
POD_SUBNET = "10.88.0.0/24"  # private to the node's network namespace; pods leave it NATed
DNS_SERVICE_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBELET_ROOT = Path("/var/lib/kubelet")  # inside the node's mount namespace


def missing_node_parts(bin_dir: Path) -> list[str]:
    """What this machine lacks to run a real node (empty when it has everything)."""
    missing = [name for name in NODE_BINARIES if not os.access(bin_dir / name, os.X_OK)]
    if not pause_archive(bin_dir).is_file():
        missing.append(f"pause image archive {pause_archive(bin_dir)}")
    missing += [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if cni_bin_dir() is None:
        missing.append(f"CNI plugins {', '.join(CNI_PLUGINS)} (Debian containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def pause_archive(bin_dir: Path) -> Path:
    return bin_dir.parent / "images" / "pause-3.10.2.oci.tar"


def cni_bin_dir() -> str | None:
    for folder in CNI_BIN_DIRS:
        if all(os.access(Path(folder) / p, os.X_OK) for p in CNI_PLUGINS):
            return folder
    return None


def _has_cap_sys_resource() -> bool:
    """Whether this process may lower an oom_score_adj (or raise a hard rlimit).

    Not on this project's CI VM: even root lacks CAP_SYS_RESOURCE there, so runc failed every
    sandbox ("nsexec: failed to update /proc/self/oom_score_adj: Permission denied", seen by
    containerd as "can't get final child's PID from pipe: EOF") when the kubelet asked for
    -998. containerd's restrict_oom_score_adj then clamps to its own score instead."""
    cap_sys_resource = 24
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap_sys_resource & 1)
    return False


def _run(argv: list[str], *, check: bool = True, timeout: float = 60) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} -> {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def _used_addresses() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = json.loads(_run(["ip", "-json", "-4", "addr", "show"]))
    return {ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
            for link in out for a in link.get("addr_info", [])}


@dataclass
class NodeNetwork:
    """A network and mount namespace for one node, held open by an anchor process, with a
    veth pair: `host_ip` on the host's side, `node_ip` inside. Processes join it through
    `wrap(argv)` (nsenter)."""

    workdir: Path
    index: int
    anchor: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host_ip(self) -> str:
        return f"10.201.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.201.{self.index}.2"

    @property
    def host_link(self) -> str:
        return f"gpua{self.index}h"

    @property
    def node_link(self) -> str:
        return f"gpua{self.index}n"

    @classmethod
    def create(cls, workdir: Path) -> NodeNetwork:
        """A fresh namespace pair and a /30 in 10.201.0.0/16 that no interface here uses."""
        used = _used_addresses()
        free = [i for i in range(256)
                if not any(ipaddress.ip_network(f"10.201.{i}.0/30").overlaps(n) for n in used)]
        if not free:
            raise ClusterError("no free /30 in 10.201.0.0/16 for a node's veth pair")
        network = cls(workdir, random.choice(free))
        try:
            network._create()
        except BaseException:
            network.destroy()
            raise
        return network

    def _create(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # `sleep` holds the namespaces open; every mount made inside stays private to them.
        self.anchor = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "--",
             "sleep", "infinity"],
            stdin=subprocess.DEVNULL, start_new_session=True)
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{self.anchor.pid}/ns/net") == own:
            if time.monotonic() > deadline or self.anchor.poll() is not None:
                raise ClusterError("unshare --net --mount did not create the node's namespaces")
            time.sleep(0.05)
        pid = str(self.anchor.pid)
        _run(["ip", "link", "add", self.host_link, "type", "veth", "peer", "name",
              self.node_link, "netns", pid])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_link])
        _run(["ip", "link", "set", self.host_link, "up"])
        inside = [
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{self.node_ip}/30", "dev", self.node_link],
            ["ip", "link", "set", self.node_link, "up"],
            ["ip", "route", "add", "default", "via", self.host_ip],
            # Pods reach Services through this namespace's iptables: forward, and let bridged
            # traffic pass iptables (per network namespace since Linux 5.3).
            ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
            ["sh", "-c", "echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"],
        ]
        # Paths the kubelet and containerd write to whatever their configuration says: a
        # tmpfs over each keeps them inside this mount namespace.
        for path in ("/run/netns", "/var/log/containers", "/var/lib/cni", "/run/containerd"):
            Path(path).mkdir(parents=True, exist_ok=True)
            inside.append(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", path])
        for argv in inside:
            _run(self.wrap(argv))

    def bind(self, source: Path, target: Path) -> None:
        """Bind-mount `source` on `target` inside the node's mount namespace only. `target` is
        made on the host if missing, and left there (an empty folder): another node of another
        run may be using it as its mount point at the same time."""
        target.mkdir(parents=True, exist_ok=True)
        _run(self.wrap(["mount", "--bind", str(source), str(target)]))

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run inside the node's network and mount namespaces."""
        assert self.anchor is not None
        return ["nsenter", f"--target={self.anchor.pid}", "--net", "--mount", "--", *argv]

    def pids_inside(self) -> list[int]:
        """Processes in the node's mount namespace (containerd, shims, kubelet...), not the
        anchor itself."""
        if self.anchor is None:
            return []
        try:
            mnt = os.readlink(f"/proc/{self.anchor.pid}/ns/mnt")
        except OSError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.anchor.pid:
                continue
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "mnt") == mnt:
                    found.append(int(entry.name))
        return found

    def destroy(self) -> None:
        """Kill what still runs inside, then the anchor: the namespaces, the veth pair, the
        node's iptables rules and mounts go with them."""
        for pid in self.pids_inside():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.anchor is not None and self.anchor.poll() is None:
            self.anchor.kill()
            self.anchor.wait(timeout=10)
        # The host end disappears with its peer's namespace; remove it if something held it.
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=30)



class RealNode:
    """containerd, kubelet, kube-proxy and CoreDNS of one Node, inside `network`."""

    def __init__(self, cluster: LocalCluster, network: NodeNetwork, name: str, *,
                 labels: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.network = network
        self.name = name
        self.labels = labels or {}
        self.bin_dir = cluster.bin_dir
        self.dir = cluster.workdir / "nodes" / name
        self.cgroup_root = f"/gpu-auditor-{cluster.workdir.name.rsplit('-', 1)[-1]}-{name}"
        self.containerd_socket = self.dir / "containerd" / "containerd.sock"
        # The node's /var/lib/kubelet, bind-mounted there inside its mount namespace: the
        # kubelet hard-codes some paths under it (device-plugins/, its pki/), and the chart's
        # default hostPath for the pod-resources socket is there.
        self.kubelet_root = self.dir / "kubelet"
        self.components: list[Component] = []

    # -- paths the tests need (as the node's processes and pods see them) --------------------

    @property
    def device_plugins_dir(self) -> Path:
        return KUBELET_ROOT / "device-plugins"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 180) -> None:
        missing = missing_node_parts(self.bin_dir)
        if missing:
            raise ClusterError(f"cannot run a real node here, missing: {', '.join(missing)}; "
                               "run scripts/build-node.sh")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubelet_root.mkdir(exist_ok=True)
        self.network.bind(self.kubelet_root, KUBELET_ROOT)
        self._make_cgroup_root()
        self._start_containerd()
        self.import_image(pause_archive(self.bin_dir))
        self._start_kubelet()
        self.cluster.wait(self._ready, timeout, f"node {self.name} Ready")
        self._start_kube_proxy()
        self._start_coredns()

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop(timeout=15)
        # Containers and their shims outlive the kubelet and containerd: kill them by where
        # they run (this node's namespace and cgroup root), then remove the cgroups.
        for _ in range(3):
            pids = set(self.network.pids_inside()) | set(self._pids_in_cgroup_root())
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        self._remove_cgroup_root()

    def _add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        wrapped = self.network.wrap(["env", *(f"{k}={v}" for k, v in (env or {}).items()),
                                     *argv])
        component = Component(f"{self.name}-{name}", wrapped,
                              self.cluster.workdir / "logs" / f"{self.name}-{name}.log")
        self.components.append(component)
        component.start()
        return component

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    # -- cgroups ------------------------------------------------------------------------------

    def _hierarchies(self) -> list[Path]:
        """Mounted cgroup hierarchies: the v1 controllers (and name=systemd, and the v2 one of
        a hybrid host), or the single v2 root."""
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return [CGROUP_ROOT]
        return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]

    def _make_cgroup_root(self) -> None:
        """The kubelet refuses a cgroupRoot that does not exist; cpuset needs its cpus and
        mems filled in before a task may join."""
        for hierarchy in self._hierarchies():
            folder = hierarchy / self.cgroup_root.lstrip("/")
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (folder / name).exists() and not (folder / name).read_text().strip():
                    (folder / name).write_text((hierarchy / name).read_text())

    def _pids_in_cgroup_root(self) -> list[int]:
        pids: list[int] = []
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if root.is_dir():
                for procs in root.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids += [int(p) for p in procs.read_text().split()]
        return pids

    def _remove_cgroup_root(self) -> None:
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if not root.is_dir():
                continue
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()),
                                 key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()

    # -- containerd -----------------------------------------------------------------------------

    def _start_containerd(self) -> None:
        d = self.dir / "containerd"
        cni_conf = self.dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-gpu-auditor.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "gpu-auditor-node",
            "plugins": [{
                "type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                         "routes": [{"dst": "0.0.0.0/0"}],
                         "dataDir": str(self.dir / "cni" / "ipam")},
            }],
        }, indent=2))
        config = f"""version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
                    "io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{d / 'containerd.sock.ttrpc'}"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = {str(not _has_cap_sys_resource()).lower()}

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{cni_bin_dir()}"]
  conf_dir = "{cni_conf}"

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{shutil.which('runc')}"
  SystemdCgroup = false
"""
        (d / "config.toml").parent.mkdir(parents=True, exist_ok=True)
        (d / "config.toml").write_text(config)
        # The shim is found on PATH (the build folder holds containerd-shim-runc-v2).
        path = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        containerd = self._add("containerd", [self._bin("containerd"),
                                              f"--config={d / 'config.toml'}"],
                               env={"PATH": path})
        containerd.wait_until(lambda: self._ctr("version", check=False) is not None, 60,
                              "serving")

    def _ctr(self, *args: str, check: bool = True, timeout: float = 300) -> str | None:
        result = subprocess.run(
            self.network.wrap([self._bin("ctr"), f"--address={self.containerd_socket}",
                               "--namespace=k8s.io", *args]),
            capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            if check:
                raise ClusterError(f"ctr {' '.join(args)}: {result.stderr.strip()}")
            return None
        return result.stdout

    def import_image(self, archive: Path) -> None:
        """`ctr -n k8s.io images import` of an OCI archive, named as the archive names it."""
        self._ctr("images", "import", "--no-unpack=false", str(archive))

    def images(self) -> list[str]:
        out = self._ctr("images", "list", "--quiet") or ""
        return out.split()

    def tasks(self) -> dict[str, int]:
        """Running containers of this node: container ID -> host pid (from containerd)."""
        out = self._ctr("tasks", "list") or ""
        found = {}
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "RUNNING":
                found[parts[0]] = int(parts[1])
        return found

    # -- kubelet ----------------------------------------------------------------------------

    def _start_kubelet(self) -> None:
        assert self.cluster.pki is not None
        pki = self.cluster.pki
        cert, key = pki_mod.issue_client(pki, self.dir / "pki", "kubelet",
                                         f"system:node:{self.name}", "system:nodes")
        kubeconfig = self.dir / "kubelet.kubeconfig"
        self.cluster.write_kubeconfig(kubeconfig, cert, key, user=f"system:node:{self.name}")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This project's CI VM has cgroups in hybrid mode (v1 controllers). kubelet 1.35+
            # refuses to start on cgroup v1 unless told otherwise (KEP-5573).
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "address": self.network.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {"anonymous": {"enabled": False},
                               "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki.ca_cert)}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [DNS_SERVICE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.dir / "pod-logs"),
            "failSwapOn": False,
            "rotateCertificates": False,
            "serializeImagePulls": False,
            # A shared disk: never evict or garbage-collect because someone else filled it.
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 30,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "staticPodPath": "",
        }
        config_path = self.dir / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(config))
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        argv = [self._bin("kubelet"), f"--config={config_path}", f"--kubeconfig={kubeconfig}",
                f"--root-dir={KUBELET_ROOT}", f"--hostname-override={self.name}",
                f"--node-ip={self.network.node_ip}", "--v=2"]
        if labels:
            argv.append(f"--node-labels={labels}")
        self._add("kubelet", argv)

    def _ready(self) -> bool:
        from kubernetes import client

        node = client.CoreV1Api(self.cluster.api_client()).read_node(self.name)
        kubelet = next(c for c in self.components if c.name.endswith("-kubelet"))
        if not kubelet.running:
            raise ClusterError(f"kubelet exited:\n{kubelet.log_tail(40)}")
        conditions = (node.status.conditions or []) if node.status else []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    # -- kube-proxy and DNS -------------------------------------------------------------------

    def _start_kube_proxy(self) -> None:
        assert self.cluster.pki is not None
        cert, key = pki_mod.issue_client(self.cluster.pki, self.dir / "pki", "kube-proxy",
                                         "system:kube-proxy")
        kubeconfig = self.dir / "kube-proxy.kubeconfig"
        self.cluster.write_kubeconfig(kubeconfig, cert, key, user="system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "bindAddress": self.network.node_ip,
            "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Leave the (host-wide) conntrack table size alone.
            "conntrack": {"maxPerCore": 0},
            "iptables": {"localhostNodePorts": False},
        }
        config_path = self.dir / "kube-proxy.yaml"
        config_path.write_text(yaml.safe_dump(config))
        proxy = self._add("kube-proxy", [self._bin("kube-proxy"), f"--config={config_path}"])
        proxy.wait_until(self._kubernetes_service_programmed, 60, "programming Services")

    def _kubernetes_service_programmed(self) -> bool:
        out = _run(self.network.wrap(["iptables-save", "-t", "nat"]), check=False)
        return "default/kubernetes:https" in out

    def _start_coredns(self) -> None:
        """CoreDNS on the node's address (a host-network process here, where a cluster runs it
        as a Deployment), behind the kube-dns Service the kubelet hands to pods."""
        corefile = self.dir / "Corefile"
        corefile.write_text(f""".:53 {{
    errors
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.cluster.kubeconfig}
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
        coredns = self._add("coredns", [self._bin("coredns"), "-conf", str(corefile)])
        coredns.wait_until(self._coredns_ready, 60, "ready")
        self.cluster.apply_yaml(yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "kube-dns", "namespace": "kube-system",
                          "labels": {"k8s-app": "kube-dns"}},
             "spec": {"clusterIP": DNS_SERVICE_IP,
                      "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": f"kube-dns-{self.name}", "namespace": "kube-system",
                          "labels": {"kubernetes.io/service-name": "kube-dns"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [self.network.node_ip],
                            "conditions": {"ready": True}, "nodeName": self.name}],
             "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                       {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]},
        ]))

    def _coredns_ready(self) -> bool:
        try:
            self.fetch("http://127.0.0.1:8181/ready", timeout=2)
        except ClusterError:
            return False
        return True

    def fetch(self, url: str, timeout: float = 10) -> str:
        """GET `url` from inside the node's network namespace, where pod IPs route."""
        script = ("import sys, urllib.request as u; sys.stdout.write("
                  "u.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode())")
        result = subprocess.run(
            self.network.wrap([sys.executable, "-c", script, url, str(timeout)]),
            capture_output=True, text=True, timeout=timeout + 30, env=child_environment())
        if result.returncode != 0:
            raise ClusterError(f"GET {url} from node {self.name}: {result.stderr.strip()[-500:]}")
        return result.stdout


def pod_host_pids(node: RealNode, pod: Any) -> dict[str, int]:
    """Container name -> host pid of its main process, as containerd reports it."""
    tasks = node.tasks()
    out = {}
    for status in (pod.status.container_statuses or []):
        cid = (status.container_id or "").split("://", 1)[-1]
        if cid in tasks:
            out[status.name] = tasks[cid]
    return out
