"""The serving certificate is reloaded when its files change, as cert-manager renews it."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kubesage.core.k8s.tls import CERT_FILE, KEY_FILE, TlsBundle, bootstrap
from kubesage.core.k8s.tls_reload import CertificateReloader


def served_certificate(context: ssl.SSLContext, bundle: TlsBundle, tmp_path: Path) -> bytes:
    """The DER certificate a TLS handshake with ``context`` presents."""
    (tmp_path / "ca.crt").write_bytes(bundle.ca_pem)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    server_end, client_end = socket.socketpair()
    with server_end, client_end:
        server = threading.Thread(
            target=lambda: context.wrap_socket(server_end, server_side=True).close()
        )
        server.start()
        with client.wrap_socket(client_end, server_hostname="kubesage.kubesage.svc") as tls:
            presented = tls.getpeercert(binary_form=True)
        server.join(5)
    assert presented is not None
    return presented


def der(bundle: TlsBundle) -> bytes:
    return x509.load_pem_x509_certificate(bundle.cert_pem).public_bytes(Encoding.DER)


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    first, renewed = bootstrap("kubesage", "kubesage"), bootstrap("kubesage", "kubesage")
    files = first.write(tmp_path / "tls")
    cert, key = files / CERT_FILE, files / KEY_FILE
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    reloader = CertificateReloader(context, cert, key)
    assert not reloader.check()  # nothing changed
    assert served_certificate(context, first, tmp_path) == der(first)

    # A half-written renewal (the new certificate, the old key) is not loaded: the
    # previous pair stays in use and the next check tries again.
    cert.write_bytes(renewed.cert_pem)
    assert not reloader.check() and reloader.failures == 1
    assert served_certificate(context, first, tmp_path) == der(first)

    key.write_bytes(renewed.key_pem)
    assert reloader.check() and reloader.reloads == 1
    assert served_certificate(context, renewed, tmp_path) == der(renewed)
    assert not reloader.check()
