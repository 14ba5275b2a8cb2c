"""A tiny fake API server over real TLS, for the agent's API client tests.

Certificates come from ``cryptography`` (a CA, a server certificate for 127.0.0.1/localhost and
a client certificate). The server answers the calls the agent makes — list pods by
``spec.nodeName``, get a node, get/create/replace cluster-scoped custom objects (with
``resourceVersion`` conflicts) — records every request and can demand a bearer token and/or a
client certificate.
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_pki() -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]) -> Pem:
        key = _key()
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                   .issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return Pem(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    return Pki(
        ca=Pem(ca.public_bytes(serialization.Encoding.PEM), _pem_key(ca_key)),
        server=leaf("apiserver", ExtendedKeyUsageOID.SERVER_AUTH,
                    [x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc"),
                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        client=leaf("system:node-agent", ExtendedKeyUsageOID.CLIENT_AUTH, []),
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApiServer:
    """State and settings of the fake server (read and changed by tests while it runs)."""

    url: str = ""
    tokens: set[str] | None = None  # None: no token needed
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # path → object
    _rv: int = 0

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _handler(state: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            url = urlsplit(self.path)
            state.requests.append(Recorded(self.command, self.path, dict(self.headers), body))
            if state.delay:
                time.sleep(state.delay)
            if state.tokens is not None:
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer ") or auth[7:] not in state.tokens:
                    self._reply(401, _status(401, "Unauthorized", "Unauthorized"))
                    return
            parts = url.path.strip("/").split("/")
            if url.path == "/api/v1/pods" and self.command == "GET":
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                node = selector.removeprefix("spec.nodeName=")
                items = [p for p in state.pods if p.get("spec", {}).get("nodeName") == node]
                self._reply(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
            elif parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                node_obj = state.nodes.get(parts[3])
                if node_obj is None:
                    self._reply(404, _status(404, "NotFound", f'nodes "{parts[3]}" not found'))
                else:
                    self._reply(200, node_obj)
            elif parts[0] == "apis" and len(parts) in (4, 5):
                self._objects(parts, body)
            else:
                self._reply(404, _status(404, "NotFound", "the server could not find it"))

        def _objects(self, parts: list[str], body: Any) -> None:
            collection = "/".join(parts[:4])
            if self.command == "POST" and len(parts) == 4:
                key = f"{collection}/{body['metadata']['name']}"
                if key in state.objects:
                    self._reply(409, _status(409, "AlreadyExists", "already exists"))
                    return
                body["metadata"]["resourceVersion"] = state.next_rv()
                state.objects[key] = body
                self._reply(201, body)
                return
            key = "/".join(parts)
            current = state.objects.get(key)
            if current is None:
                self._reply(404, _status(404, "NotFound", f'"{parts[-1]}" not found'))
            elif self.command == "GET":
                self._reply(200, copy.deepcopy(current))
            elif self.command == "PUT":
                if body["metadata"].get("resourceVersion") != current["metadata"][
                        "resourceVersion"]:
                    self._reply(409, _status(409, "Conflict", "the object has been modified"))
                    return
                body["metadata"]["resourceVersion"] = state.next_rv()
                state.objects[key] = body
                self._reply(200, body)
            else:
                self._reply(405, _status(405, "MethodNotAllowed", "no"))

        do_GET = do_POST = do_PUT = _handle

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve(pki: Pki | None, tmp: Path, *, client_cert_required: bool = False,
          state: FakeApiServer | None = None) -> Iterator[FakeApiServer]:
    """Run the fake server on 127.0.0.1 (HTTPS with ``pki``, else plain HTTP)."""
    state = state or FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    scheme = "http"
    if pki is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "server.crt").write_bytes(pki.server.cert)
        (tmp / "server.key").write_bytes(pki.server.key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / "server.crt", tmp / "server.key")
        if client_cert_required:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cadata=pki.ca.cert.decode())
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(path: Path, server: str, *, cluster: dict[str, Any] | None = None,
               user: dict[str, Any] | None = None) -> Path:
    """A one-context kubeconfig (plus a decoy context that is not current)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "decoy", "cluster": {"server": "https://decoy.invalid"}},
                     {"name": "test", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "decoy", "user": {"token": "decoy"}},
                  {"name": "test", "user": user or {}}],
        "contexts": [{"name": "decoy", "context": {"cluster": "decoy", "user": "decoy"}},
                     {"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    path.chmod(0o600)
    return path


# Fixtures for the tests that talk to it (imported by the conftest.py of tests/unit/base and
# tests/unit/node_agent).


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def tls_server(pki: Pki, tmp_path: Path) -> Iterator[FakeApiServer]:
    with serve(pki, tmp_path / "server") as state:
        yield state


@pytest.fixture
def mtls_server(pki: Pki, tmp_path: Path) -> Iterator[FakeApiServer]:
    with serve(pki, tmp_path / "server", client_cert_required=True) as state:
        yield state
