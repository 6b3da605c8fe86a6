"""Keeps the serving certificate current while ``kubesage serve`` runs.

cert-manager renews the webhook's and extender's certificate before it expires and the
kubelet swaps the mounted Secret's files in place; a server that read them once would
serve the old certificate until it expired. The webhook fails open and the extender is
ignorable, so that failure would be silent: pods admitted unmutated, scheduled without
kubesage. :class:`CertificateReloader` loads the files again into the same
``ssl.SSLContext`` when they change (new handshakes use them; open connections keep
theirs). A pair that cannot be loaded (the key not matching yet, a file missing) is
logged and tried again at the next check, while the previous certificate stays in use.

The pair is read once and tried on a fresh context before the live one takes it:
OpenSSL installs the certificate before it checks the key, so a failed load into the
live context would leave it serving a certificate without its key (every handshake
fails). Both loads read the same private copies (a temporary directory of mode 0700,
removed at once), so files swapped between them cannot split the pair.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60.0
"""How often ``serve`` looks at the certificate files (the kubelet syncs a mounted
Secret within about a minute as well)."""

Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> Stamp:
    """What changes when the file is replaced or rewritten: inode, mtime, size (None
    while it cannot be read). ``os.stat`` follows the kubelet's ``..data`` symlinks."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns, status.st_size


class CertificateReloader:
    """Reloads ``cert`` and ``key`` into ``context`` when either file changes."""

    def __init__(self, context: ssl.SSLContext, cert: Path, key: Path) -> None:
        self.context = context
        self.cert = cert
        self.key = key
        self._stamps = (_stamp(cert), _stamp(key))
        self.reloads = 0
        """Times a changed pair was loaded."""
        self.failures = 0
        """Checks whose changed pair could not be loaded (tried again next time)."""

    def check(self) -> bool:
        """Load the pair again if it changed since the last load; whether it was loaded."""
        stamps = (_stamp(self.cert), _stamp(self.key))
        if stamps == self._stamps:
            return False
        try:
            with tempfile.TemporaryDirectory(prefix="kubesage-tls-") as private:
                cert, key = Path(private) / "tls.crt", Path(private) / "tls.key"
                cert.write_bytes(self.cert.read_bytes())
                key.write_bytes(self.key.read_bytes())
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
                self.context.load_cert_chain(cert, key)  # the same bytes: it loads
        except (ssl.SSLError, OSError) as exc:
            self.failures += 1
            log.warning(
                "the certificate %s / %s changed but cannot be loaded (%s); the previous one "
                "is served until the next check",
                self.cert,
                self.key,
                exc,
            )
            return False
        self._stamps = stamps
        self.reloads += 1
        log.info("reloaded the serving certificate %s", self.cert)
        return True
