"""TLS bootstrap and cert-manager files: a real TLS handshake (Python's ssl, as a client
that checks the chain and host name like the API server does) verifies the serving
certificate for the service DNS name and rejects any other name."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from pathlib import Path

import pytest

from kubesage.core.k8s.tls import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    TlsBundle,
    TlsError,
    bootstrap,
    check_bundle,
    load_tls_files,
    main,
    service_dns_names,
)


def handshake(bundle: TlsBundle, directory: Path, server_name: str) -> str:
    """Complete a TLS handshake in memory against ``bundle``; the negotiated version."""
    bundle.write(directory)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(directory / CERT_FILE, directory / KEY_FILE)
    client_context = ssl.create_default_context(cafile=str(directory / CA_FILE))
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_hostname=server_name)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return str(client.version())
    raise AssertionError("handshake did not finish")


def test_bootstrap_certificate_verifies_for_every_service_name(tmp_path: Path) -> None:
    bundle = bootstrap("kubesage", "kubesage")
    for name in service_dns_names("kubesage", "kubesage"):
        assert handshake(bundle, tmp_path, name).startswith("TLS")
    assert "kubesage.kubesage.svc" in service_dns_names("kubesage", "kubesage")


def test_bootstrap_certificate_fails_for_another_name(tmp_path: Path) -> None:
    bundle = bootstrap("kubesage", "kubesage")
    with pytest.raises(ssl.SSLCertVerificationError, match=r"match|mismatch"):
        handshake(bundle, tmp_path, "kubesage.other.svc")


def test_another_ca_does_not_verify(tmp_path: Path) -> None:
    first, second = bootstrap("kubesage", "kubesage"), bootstrap("kubesage", "kubesage")
    mixed = TlsBundle(cert_pem=first.cert_pem, key_pem=first.key_pem, ca_pem=second.ca_pem)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(mixed, tmp_path, "kubesage.kubesage.svc")
    with pytest.raises(TlsError, match="not signed"):
        check_bundle(mixed)


def test_extra_names_and_ip_addresses_are_covered(tmp_path: Path) -> None:
    bundle = bootstrap("kubesage", "kubesage", extra_names=["kubesage.example", "127.0.0.1"])
    assert handshake(bundle, tmp_path, "kubesage.example")
    assert handshake(bundle, tmp_path, "127.0.0.1")


def test_ca_bundle_is_the_base64_of_the_ca_pem() -> None:
    bundle = bootstrap("kubesage", "kubesage")
    assert base64.b64decode(bundle.ca_bundle()) == bundle.ca_pem
    assert bundle.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_cert_manager_files_load_and_are_checked(tmp_path: Path) -> None:
    bundle = bootstrap("kubesage", "kubesage")
    bundle.write(tmp_path)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert load_tls_files(tmp_path, dns_name="kubesage.kubesage.svc") == bundle
    with pytest.raises(TlsError, match=r"does not name kubesage\.other\.svc"):
        load_tls_files(tmp_path, dns_name="kubesage.other.svc")
    other = bootstrap("kubesage", "kubesage")
    (tmp_path / KEY_FILE).write_bytes(other.key_pem)
    with pytest.raises(TlsError, match="does not belong"):
        load_tls_files(tmp_path)
    (tmp_path / CERT_FILE).write_text("not a certificate")
    with pytest.raises(TlsError, match=f"{CERT_FILE} is not a PEM certificate"):
        load_tls_files(tmp_path)
    (tmp_path / CA_FILE).unlink()
    with pytest.raises(TlsError, match="cannot read"):
        load_tls_files(tmp_path)


def test_an_expired_certificate_is_rejected() -> None:
    long_ago = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    bundle = bootstrap("kubesage", "kubesage", validity_days=30, now=long_ago)
    with pytest.raises(TlsError, match="not now"):
        check_bundle(bundle)
    check_bundle(bundle, now=long_ago + dt.timedelta(days=1))


def test_command_line_writes_the_files_the_self_signed_overlay_reads(tmp_path: Path) -> None:
    assert main(["--service", "svc", "--namespace", "ns", "--out", str(tmp_path / "tls")]) == 0
    loaded = load_tls_files(tmp_path / "tls", dns_name="svc.ns.svc")
    assert loaded.cert_pem.startswith(b"-----BEGIN CERTIFICATE-----")


@pytest.mark.parametrize(
    ("days", "message"), [("0", "must be at least 1"), ("ten", "expected a whole number of days")]
)
def test_command_line_refuses_a_bad_validity_by_name(
    days: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(tmp_path / "tls"), "--days", days])
    assert exited.value.code == 2
    assert f"argument --days: {message}" in capsys.readouterr().err
    assert not (tmp_path / "tls").exists()
