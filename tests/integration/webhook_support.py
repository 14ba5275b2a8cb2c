"""The webhook server as the API server meets it in the integration tests: its own CA and a
serving certificate for 127.0.0.1, `gpu-auditor-webhook` as a child process on loopback, and the
chart's own webhook configurations with only their clientConfig pointed at that process."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devtools.localcluster import LocalCluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpu-auditor"
RELEASE_NAMESPACE = "gpu-auditor"
PROBE_IMAGE = "registry.example/gpu-auditor:probe-test"


@dataclass(frozen=True)
class Tls:
    ca_pem: bytes
    cert_file: Path
    key_file: Path


def make_tls(folder: Path) -> Tls:
    """A CA and a serving certificate for 127.0.0.1, signed by it (as the chart's genCA and
    genSignedCert make them for the Service's names)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Tls(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebhookProcess:
    """`gpu-auditor-webhook` on loopback; `stop()` and `start()` it to take it down."""

    def __init__(self, tls: Tls, log: Path, *extra: str) -> None:
        self.tls, self.log = tls, log
        self.port, self.metrics_port = free_port(), free_port()
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "gpu_auditor.webhook.main", "--bind-address", "127.0.0.1",
                f"--port={self.port}", f"--cert-file={self.tls.cert_file}",
                f"--key-file={self.tls.key_file}", f"--metrics-port={self.metrics_port}",
                "--metrics-bind-address=127.0.0.1", *self.extra]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        context = ssl.create_default_context(cadata=self.tls.ca_pem.decode())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", context=context,
                                            timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"webhook did not come up: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())


def chart_configurations(cluster: LocalCluster, server_url: str, ca_pem: bytes,
                         *sets: str) -> list[dict[str, Any]]:
    """The chart's Validating/MutatingWebhookConfigurations (release namespace gpu-auditor),
    each webhook's clientConfig replaced by the loopback URL and the test CA: the rules,
    selectors, failure policy and timeouts are the chart's own."""
    args = ["template", "gpu-auditor", str(CHART), "--namespace", RELEASE_NAMESPACE,
            "--kube-version", "v1.36.3", "--set", "webhook.enabled=true"]
    for value in sets:
        args += ["--set", value]
    rendered = cluster.helm(*args).stdout
    configs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in (
        "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")]
    bundle = base64.b64encode(ca_pem).decode()
    for config in configs:
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{server_url}{path}", "caBundle": bundle}
    return configs
