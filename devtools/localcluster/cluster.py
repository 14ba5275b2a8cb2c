"""A real Kubernetes control plane as local processes on loopback, for tests and the demo.

    with LocalCluster() as cluster:          # etcd + kube-apiserver
        cluster.start_controllers()           # + kube-controller-manager, kube-scheduler
        cluster.start_kwok()                  # + kwok: simulated nodes, pod lifecycles, pod logs
        cluster.create_node("gpu-1", gpus=8)
        api = cluster.api_client()

Binaries come from `scripts/build-control-plane.sh` (cache folder keyed by version). Logs of
every component are kept in the work folder, which is removed on a clean exit and kept (and
named on stderr) when the block raised or `keep=True`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from devtools.localcluster import pki as pki_mod
from devtools.localcluster.process import ClusterError, Component, child_environment, free_port

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "helm")
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service
LOOPBACK = "127.0.0.1"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def default_bin_dir() -> Path:
    """Where scripts/build-control-plane.sh puts the binaries."""
    if explicit := os.environ.get("GPU_AUDITOR_BIN"):
        return Path(explicit)
    cache = os.environ.get("GPU_AUDITOR_CACHE", str(Path.home() / ".cache" / "gpu-auditor"))
    return Path(cache) / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]


def _kwok_file(name: str) -> str:
    return resources.files("devtools.localcluster").joinpath("kwok", name).read_text()


class LocalCluster:
    """etcd and kube-apiserver (and on request controllers and kwok) on free loopback ports.

    `address`: where kube-apiserver listens and what it advertises. The default, loopback, is
    all that kwok and processes on this host need. Real nodes (`devtools.localcluster.node`)
    need an address their pods can reach: then the API server also publishes itself as the
    `kubernetes` Service's endpoint, mounts service-account tokens into pods (the
    ServiceAccount admission plugin) and authorizes kubelets as nodes (Node, NodeRestriction).
    `api_port`: 443 there, as clients in pods expect of `kubernetes.default.svc`.
    """

    def __init__(
        self, *, bin_dir: Path | None = None, workdir: Path | None = None, keep: bool = False,
        address: str = LOOPBACK, api_port: int | None = None,
    ) -> None:
        self.bin_dir = bin_dir or default_bin_dir()
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"control-plane binaries missing in {self.bin_dir}: {', '.join(missing)}; "
                "build them with scripts/build-control-plane.sh"
            )
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpu-auditor-cluster-"))
        self.keep = keep
        self.address = address
        self.components: dict[str, Component] = {}
        self.api_port = api_port or free_port()
        self.etcd_port = free_port()
        self.kwok_port = 0
        self.kubeconfig = self.workdir / "kubeconfig"
        self.pki: pki_mod.Pki | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop(keep=True)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(keep=self.keep or exc_type is not None)

    def start(self) -> None:
        extra_ips = () if self.loopback_only else (self.address, KUBERNETES_SERVICE_IP)
        self.pki = pki_mod.generate(self.workdir / "pki", extra_ips=extra_ips)
        self._write_kubeconfig()
        self._start_etcd()
        self._start_apiserver()

    def stop(self, *, keep: bool = False) -> None:
        for component in reversed(list(self.components.values())):
            component.stop()
        if keep:
            print(f"gpu-auditor local cluster: logs kept in {self.workdir}", file=sys.stderr)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def loopback_only(self) -> bool:
        return self.address == LOOPBACK

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.api_port}"

    def add_component(self, name: str, argv: list[str], *, start: bool = True) -> Component:
        """A child process of this cluster: logged in the work folder, stopped with it."""
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = component
        if start:
            component.start()
        return component

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    # -- etcd and kube-apiserver -------------------------------------------------------------

    def _start_etcd(self) -> None:
        peer_port = free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        etcd = self.add_component("etcd", [
            self._bin("etcd"),
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ])
        etcd.wait_until(lambda: http_ok(f"{client}/health"), 30, "healthy")

    def _apiserver_argv(self) -> list[str]:
        assert self.pki is not None
        p = self.pki
        return [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.address}", f"--secure-port={self.api_port}",
            f"--advertise-address={self.address}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p.serving_cert}", f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_cert}",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={p.sa_public_key}",
            f"--service-account-signing-key-file={p.sa_private_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            *self._apiserver_mode_argv(),
            # kwok (and a real kubelet) serves pods/log; the API server reaches it as a kubelet.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={p.admin_cert}", f"--kubelet-client-key={p.admin_key}",
            "--profiling=false",
        ]

    def _apiserver_mode_argv(self) -> list[str]:
        if self.loopback_only:
            return [
                # Nothing outside this host: no endpoint to publish for the kubernetes Service.
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                # No kubelet mounts tokens here; the ServiceAccount plugin would demand the
                # kube-root-ca.crt ConfigMap before any pod can be created.
                "--disable-admission-plugins=ServiceAccount",
            ]
        return [
            "--endpoint-reconciler-type=lease",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
        ]

    def _start_apiserver(self) -> None:
        apiserver = self.add_component("kube-apiserver", self._apiserver_argv())
        apiserver.wait_until(self._readyz, 90, "ready")

    def restart_apiserver(self, downtime: float = 1.0) -> None:
        """Stop kube-apiserver, wait, start it again on the same port: clients must recover."""
        self.components["kube-apiserver"].stop()
        time.sleep(downtime)
        self._start_apiserver()

    def _ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def _readyz(self) -> bool:
        return http_ok(f"{self.server}/readyz", self._ssl_context())

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None
        self.write_kubeconfig(self.kubeconfig, self.pki.admin_cert, self.pki.admin_key)

    def write_kubeconfig(self, path: Path, cert: Path, key: Path, user: str = "admin") -> None:
        """A kubeconfig for this cluster that authenticates with `cert` and `key` (embedded)."""
        assert self.pki is not None

        def b64(file: Path) -> str:
            return base64.b64encode(file.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.server, "certificate-authority-data": b64(self.pki.ca_cert)}}],
            "users": [{"name": user, "user": {
                "client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    # -- controllers, scheduler, kwok ---------------------------------------------------------

    def start_controllers(self) -> None:
        """kube-controller-manager (garbage collection, Jobs, Deployments, DaemonSets...) and
        kube-scheduler. Idempotent."""
        assert self.pki is not None
        if "kube-controller-manager" not in self.components:
            self._start_secured("kube-controller-manager",
                                f"--root-ca-file={self.pki.ca_cert}",
                                f"--service-account-private-key-file={self.pki.sa_private_key}",
                                f"--service-cluster-ip-range={SERVICE_CIDR}",
                                "--use-service-account-credentials=false")
        if "kube-scheduler" not in self.components:
            self._start_secured("kube-scheduler")

    def _start_secured(self, name: str, *extra: str) -> None:
        """kube-controller-manager or kube-scheduler: the admin kubeconfig for everything, a
        free secure port on loopback, no leader election; waits for /healthz."""
        port = free_port()
        component = self.add_component(name, [
            self._bin(name),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            *extra,
        ])
        component.wait_until(lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), 60, "healthy")

    def start_kwok(self) -> None:
        """kwok managing every node annotated kwok.x-k8s.io/node=fake: node heartbeats,
        pod lifecycles through its stages, and pods/log from `Logs` objects. Idempotent."""
        assert self.pki is not None
        if "kwok" in self.components:
            return
        self.apply_yaml(_kwok_file("logs-crds.yaml"))
        self.wait_for_crd("logs.kwok.x-k8s.io")
        self.wait_for_crd("clusterlogs.kwok.x-k8s.io")
        config = self.workdir / "kwok-config.yaml"
        config.write_text(_kwok_file("stages.yaml") + "\n---\n" + _kwok_file("restart-stages.yaml"))
        self.kwok_port = free_port()
        kwok = self.add_component("kwok", [
            self._bin("kwok"),
            f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1", "--node-name=localhost",
            f"--node-port={self.kwok_port}", f"--server-address=127.0.0.1:{self.kwok_port}",
            f"--tls-cert-file={self.pki.serving_cert}",
            f"--tls-private-key-file={self.pki.serving_key}",
            "--enable-crds=Logs,ClusterLogs",
        ])
        kwok.wait_until(
            lambda: _https_ok(f"https://127.0.0.1:{self.kwok_port}/healthz"), 60, "serving"
        )

    def create_node(
        self,
        name: str,
        *,
        gpus: int = 0,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        wait_ready: bool = True,
    ) -> dict[str, Any]:
        """A kwok-managed fake node; `gpus` > 0 adds nvidia.com/gpu capacity."""
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "256"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "type": "kwok", **(labels or {})},
            },
            "spec": {"taints": taints or []},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        core.create_node(node)
        if wait_ready:
            self.wait(lambda: _node_ready(core.read_node(name)), 60, f"node {name} Ready")
        return node

    # -- client helpers --------------------------------------------------------------------

    def api_client(self) -> ApiClient:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def apply_yaml(self, text: str) -> None:
        """Create each document of `text` (server-side apply through the dynamic client)."""
        from kubernetes import dynamic

        dyn = dynamic.DynamicClient(self.api_client())
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            resource.server_side_apply(
                body=doc, name=doc["metadata"]["name"],
                namespace=doc["metadata"].get("namespace"), field_manager="gpu-auditor-tests",
            )

    def wait_for_crd(self, name: str, timeout: float = 30) -> None:
        from kubernetes import client

        ext = client.ApiextensionsV1Api(self.api_client())

        def established() -> bool:
            crd = ext.read_custom_resource_definition(name)
            conditions = (crd.status.conditions or []) if crd.status else []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        self.wait(established, timeout, f"CRD {name} Established")

    @staticmethod
    def wait(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
        """Poll until `predicate()` is truthy; return its value or raise ClusterError."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except Exception as exc:  # the API may answer 404 until the object exists
                last_error = exc
            time.sleep(interval)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} ({last_error})")

    def serve_logs(
        self, namespace: str, pod: str, *, current: Path | None = None,
        previous: Path | None = None, container: str = "main",
    ) -> None:
        """A kwok `Logs` object: pods/log of `pod` returns these CRI-format files (the current
        container's, and the previous one's for previous=true)."""
        from kubernetes import client

        entry: dict[str, Any] = {"containers": [container]}
        if current is not None:
            entry["logsFile"] = str(current)
        if previous is not None:
            entry["previousLogsFile"] = str(previous)
        client.CustomObjectsApi(self.api_client()).create_namespaced_custom_object(
            "kwok.x-k8s.io", "v1alpha1", namespace, "logs",
            {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
             "metadata": {"name": pod, "namespace": namespace}, "spec": {"logs": [entry]}},
        )

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run helm against this cluster."""
        env = child_environment()
        env.update(KUBECONFIG=str(self.kubeconfig), HELM_CACHE_HOME=str(self.workdir / "helm"),
                   HELM_CONFIG_HOME=str(self.workdir / "helm"),
                   HELM_DATA_HOME=str(self.workdir / "helm"))
        result = subprocess.run(
            [self._bin("helm"), *args], capture_output=True, text=True, env=env, timeout=300,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def version(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.server}/version", context=self._ssl_context()) as r:
            return dict(json.load(r))


def cri(text: str | bytes, stream: str = "stderr") -> bytes:
    """`text` as a container log in CRI format (`<ts> <stream> F <line>`), as the kubelet and kwok
    store it."""
    data = text.encode() if isinstance(text, str) else text
    prefix = f"2026-11-29T10:00:00.000000000Z {stream} F ".encode()
    return b"".join(prefix + line + b"\n" for line in data.splitlines())


def _node_ready(node: Any) -> bool:
    conditions = (node.status.conditions or []) if node.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """GET `url` answers 200 (False on any connection error)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def _https_ok(url: str) -> bool:
    """Self-signed component endpoints (controller-manager, scheduler, kwok): reachable at all."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as response:
            return bool(response.status < 500)
    except urllib.error.HTTPError as exc:  # 401/403 still proves it serves
        return exc.code < 500
    except (OSError, ValueError):
        return False
