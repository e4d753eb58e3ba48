"""Test support for kafkacodec.net's security modules: the JDK as oracle (tests/java/SecurityOracle:
java.util.Properties and X500Principal), certificates made with trustme and cryptography, and a
TLS handshake over a loopback socket pair, bounded in time."""

from __future__ import annotations

import datetime
import functools
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("java") / "SecurityOracle.java"


@functools.lru_cache(maxsize=1)
def _oracle_classes() -> str:
    if not (shutil.which("java") and shutil.which("javac")):
        pytest.skip("needs java and javac (the JDK as oracle)")
    classes = tempfile.mkdtemp(prefix="security-oracle-")
    subprocess.run(["javac", "-d", classes, str(SOURCE)], check=True, timeout=120)
    return classes


def _unhex(text: str) -> str:
    units = bytes.fromhex(text)
    return units.decode("utf-16-be", "surrogatepass")


def java_properties(paths: list[Path]) -> list[dict[str, str] | None]:
    """Each file as java.util.Properties.load(InputStream) reads it (None: it threw)."""
    out = subprocess.run(["java", "-cp", _oracle_classes(), "SecurityOracle", "props", *map(str, paths)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    files: list[dict[str, str] | None] = []
    for line in out.splitlines():
        if line == "file":
            files.append({})
        elif line == "error":
            files[-1] = None
        else:
            key, _, value = line.partition(" ")
            entries = files[-1]
            assert entries is not None
            entries[_unhex(key)] = _unhex(value)
    assert len(files) == len(paths)
    return files


def java_subject_names(der_paths: list[Path]) -> list[str]:
    """Each certificate's subject as Java's X500Principal.getName() prints it."""
    out = subprocess.run(["java", "-cp", _oracle_classes(), "SecurityOracle", "dn", *map(str, der_paths)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [_unhex(line) for line in out.splitlines()]


# --- certificates ------------------------------------------------------------------------------

def self_signed_der(subject_rdns: list[list[tuple[object, str]]] | None = None, *,
                    subject=None) -> bytes:
    """A self-signed certificate whose subject has these RDNs, in this order (each RDN a list of
    (NameOID, value) attributes, several = a multi-valued RDN)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    if subject is None:
        subject = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(oid, value)
                                                              for oid, value in rdn])
                             for rdn in subject_rdns])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    from cryptography.hazmat.primitives.serialization import Encoding
    return cert.public_bytes(Encoding.DER)


def write_pem_keystore(cert, path: Path, password: bytes | None = None) -> Path:
    """A KIP-651 PEM keystore: the private key (PKCS#8, encrypted with `password`) and the
    certificate chain in one file."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    path.write_bytes(key_pem + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    return path


# --- handshakes --------------------------------------------------------------------------------

class Handshake:
    """A TLS handshake between two contexts over a socket pair (both sides at once, each with a
    timeout): `client_error`/`server_error` hold what each side raised, the sockets stay open
    for inspection until `close()`."""

    def __init__(self, client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext,
                 server_hostname: str | None = "localhost", timeout: float = 10.0) -> None:
        a, b = socket.socketpair()
        a.settimeout(timeout)
        b.settimeout(timeout)
        self.client: ssl.SSLSocket | None = None
        self.server: ssl.SSLSocket | None = None
        self.client_error: BaseException | None = None
        self.server_error: BaseException | None = None
        self._raw = (a, b)

        def serve() -> None:
            try:
                self.server = server_ctx.wrap_socket(a, server_side=True)
                self.server.recv(1)            # until the client's first byte: TLS 1.3 client auth
                self.server.sendall(b"k")      # is judged after the client's handshake ends
            except BaseException as exc:       # noqa: BLE001 - reported to the test
                self.server_error = exc
                a.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            self.client = client_ctx.wrap_socket(b, server_hostname=server_hostname)
            self.client.sendall(b"o")
            if self.client.recv(1) != b"k":
                raise ConnectionError("the server closed the connection")
        except BaseException as exc:           # noqa: BLE001
            self.client_error = exc
            b.close()
        thread.join(timeout + 5)
        assert not thread.is_alive(), "the server side of the handshake hung"

    @property
    def ok(self) -> bool:
        return self.client_error is None and self.server_error is None

    def close(self) -> None:
        for s in (self.client, self.server, *self._raw):
            if s is not None:
                s.close()
