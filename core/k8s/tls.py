"""TLS for the webhook and extender endpoint: a self-signed bootstrap, or cert-manager's files.

The API server calls an admission webhook only over HTTPS and checks the serving
certificate against the ``caBundle`` of the MutatingWebhookConfiguration, for the
DNS name ``<service>.<namespace>.svc``. Two ways to get one:

- **cert-manager** (``deploy/overlays/cert-manager``): a Certificate writes
  ``tls.crt``, ``tls.key`` and ``ca.crt`` into a Secret mounted into the pod, and
  cert-manager's CA injector fills ``caBundle``. :func:`load_tls_files` reads and
  checks those files (they parse, the key matches, the name is covered, not expired).
- **self-signed bootstrap** (``deploy/overlays/self-signed``): :func:`bootstrap`
  makes a CA and a serving certificate for the service's DNS names;
  ``python -m kubesage.core.k8s.tls --service kubesage --namespace kubesage --out DIR``
  writes them where the overlay's secretGenerator picks them up, and kustomize copies
  ``ca.crt`` into ``caBundle``. Both replicas serve the same certificate.

Keys are ECDSA P-256 (small, fast handshakes, accepted by the API server's Go TLS).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesage.core.errors import ConfigError

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
"""File names of a ``kubernetes.io/tls`` Secret as cert-manager writes it."""
DEFAULT_VALIDITY_DAYS = 365


class TlsError(ConfigError):
    """Certificate files that are missing, unreadable, mismatched or expired."""


@dataclass(frozen=True)
class TlsBundle:
    """PEM-encoded serving certificate, its private key and the CA that signed it."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def ca_bundle(self) -> str:
        """The base64 ``caBundle`` of a webhook's ``clientConfig``."""
        return base64.b64encode(self.ca_pem).decode("ascii")

    def write(self, directory: Path | str) -> Path:
        """Write ``tls.crt``, ``tls.key`` (mode 0600) and ``ca.crt`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CERT_FILE).write_bytes(self.cert_pem)
        (directory / CA_FILE).write_bytes(self.ca_pem)
        key_path = directory / KEY_FILE
        key_path.touch(mode=0o600)
        key_path.chmod(0o600)
        key_path.write_bytes(self.key_pem)
        return directory


def service_dns_names(service: str, namespace: str) -> list[str]:
    """Names a client may use for ``service``: short, namespaced, ``.svc`` and cluster FQDN."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def bootstrap(
    service: str,
    namespace: str,
    *,
    validity_days: int = DEFAULT_VALIDITY_DAYS,
    extra_names: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> TlsBundle:
    """A fresh CA and a serving certificate for the service's DNS names (and ``extra_names``:
    DNS names or IP addresses)."""
    if validity_days < 1:
        raise ValueError("validity_days must be at least 1")
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=5)  # clock skew
    end = start + dt.timedelta(days=validity_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"kubesage-ca.{namespace}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    names = [*service_dns_names(service, namespace), *extra_names]
    alt_names: list[x509.GeneralName] = []
    for name in names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt_names.append(x509.DNSName(name))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return TlsBundle(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_key_pem(key),
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read: {exc.strerror}", path=path) from exc


def check_bundle(
    bundle: TlsBundle,
    *,
    dns_name: str | None = None,
    now: dt.datetime | None = None,
    where: Path | str = "<tls>",
) -> x509.Certificate:
    """The serving certificate after checking it parses, matches the key, is signed by
    the CA, is valid now and (when given) covers ``dns_name``; TlsError otherwise."""
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    except ValueError as exc:
        raise TlsError(f"{CERT_FILE} is not a PEM certificate: {exc}", path=where) from exc
    try:
        key = serialization.load_pem_private_key(bundle.key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise TlsError(f"{KEY_FILE} is not an unencrypted PEM key: {exc}", path=where) from exc
    try:
        ca = x509.load_pem_x509_certificates(bundle.ca_pem)
    except ValueError as exc:
        raise TlsError(f"{CA_FILE} is not a PEM certificate: {exc}", path=where) from exc
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise TlsError(f"{KEY_FILE} does not belong to {CERT_FILE}", path=where)
    if not any(_signed_by(cert, authority) for authority in ca):
        raise TlsError(f"{CERT_FILE} is not signed by a certificate in {CA_FILE}", path=where)
    moment = now or dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
        raise TlsError(
            f"{CERT_FILE} is valid from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now",
            path=where,
        )
    if dns_name is not None and dns_name not in certificate_dns_names(cert):
        raise TlsError(f"{CERT_FILE} does not name {dns_name}", path=where)
    return cert


def _signed_by(cert: x509.Certificate, authority: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(authority)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def certificate_dns_names(cert: x509.Certificate) -> list[str]:
    """The DNS subject alternative names of ``cert``."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return san.value.get_values_for_type(x509.DNSName)


def load_tls_files(directory: Path | str, *, dns_name: str | None = None) -> TlsBundle:
    """Read and check ``tls.crt``, ``tls.key`` and ``ca.crt`` (a cert-manager Secret mount)."""
    directory = Path(directory)
    bundle = TlsBundle(
        cert_pem=_read(directory / CERT_FILE),
        key_pem=_read(directory / KEY_FILE),
        ca_pem=_read(directory / CA_FILE),
    )
    check_bundle(bundle, dns_name=dns_name, where=directory)
    return bundle


def _positive_days(text: str) -> int:
    """``--days``: a whole number of days, at least 1."""
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of days, got {text!r}") from None
    if days < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {days}")
    return days


def main(argv: Sequence[str] | None = None) -> int:
    """Write a self-signed bundle for the self-signed overlay (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description="Self-signed TLS for the kubesage webhook.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--service", default="kubesage", help="the Service the certificate is issued for"
    )
    parser.add_argument("--namespace", default="kubesage", help="the Service's namespace")
    parser.add_argument("--out", required=True, type=Path, help="directory for the files")
    parser.add_argument(
        "--days", type=_positive_days, default=DEFAULT_VALIDITY_DAYS, help="validity in days"
    )
    args = parser.parse_args(argv)
    bundle = bootstrap(args.service, args.namespace, validity_days=args.days)
    bundle.write(args.out)
    sys.stdout.write(f"wrote {CERT_FILE}, {KEY_FILE} and {CA_FILE} to {args.out}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - a command-line entry point
    sys.exit(main())
