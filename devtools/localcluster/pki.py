"""Certificates and keys for a throwaway local control plane.

One CA signs the API server's serving certificate (also used by kwok's kubelet endpoint), the
admin client certificate (`O=system:masters`) and the front-proxy client. A separate RSA key pair
signs service-account tokens. Everything lives in one folder that dies with the cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    is_ca: bool = False,
    usages: tuple[x509.ObjectIdentifier, ...] = (),
    sans: tuple[x509.GeneralName, ...] = (),
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        # Key identifiers, as every real cluster's PKI has them: Python 3.13's default TLS
        # context verifies strictly (VERIFY_X509_STRICT) and rejects a chain without them
        # ("Missing Authority Key Identifier"), which the image's Python showed.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            issuer_key.public_key()), critical=False)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate(folder: Path, *, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write a CA, serving and admin certificates and a service-account key pair."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpu-auditor-local-ca")
    ca = _issue(ca_name, ca_key, ca_name, ca_key, is_ca=True)

    ips = {"127.0.0.1", *extra_ips}
    sans: tuple[x509.GeneralName, ...] = (
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(ips)),
    )
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _issue(
        _name("kube-apiserver"), serving_key, ca_name, ca_key,
        usages=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH), sans=sans,
    )
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(
        _name("admin", "system:masters"), admin_key, ca_name, ca_key,
        usages=(ExtendedKeyUsageOID.CLIENT_AUTH,),
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(
        ca_cert=folder / "ca.crt", ca_key=folder / "ca.key",
        serving_cert=folder / "serving.crt", serving_key=folder / "serving.key",
        admin_cert=folder / "admin.crt", admin_key=folder / "admin.key",
        sa_public_key=folder / "sa.pub", sa_private_key=folder / "sa.key",
    )
    pki.ca_cert.write_bytes(_pem(ca))
    _write_key(pki.ca_key, ca_key)
    pki.serving_cert.write_bytes(_pem(serving))
    _write_key(pki.serving_key, serving_key)
    pki.admin_cert.write_bytes(_pem(admin))
    _write_key(pki.admin_key, admin_key)
    _write_key(pki.sa_private_key, sa_key)
    pki.sa_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_client(pki: Pki, folder: Path, name: str, common_name: str,
                 organization: str | None = None) -> tuple[Path, Path]:
    """A client certificate signed by the cluster's CA (e.g. CN=system:node:<node>,
    O=system:nodes for a kubelet): returns the paths of the certificate and its key."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key}: expected the EC key generate() writes")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(common_name, organization), key, ca_cert.subject, ca_key,
                  usages=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(_pem(cert))
    _write_key(key_path, key)
    return cert_path, key_path
