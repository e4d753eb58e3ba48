"""TLS contexts from the security settings, and who the peer is.

- `client_context(ClientSecurity)`: TLS 1.2 at least (``ssl.enabled.protocols`` may narrow it to
  1.3), the broker's certificate checked against ``ssl.ca.location`` / the PEM truststore (else
  the system's CAs) and its host name checked (``ssl.endpoint.identification.algorithm=https``,
  the default, as in Kafka and librdkafka); a client certificate when one is set, its key
  decrypted with ``ssl.key.password``.
- `server_context(BrokerSecurity, listener)`: the listener's PEM keystore (KIP-651: the private
  key and the certificate chain in one file), TLS 1.2 at least, and ``ssl.client.auth``: none
  (no client certificate asked), requested (checked if sent), required (the handshake fails
  without one).
- `peer_principal(ssl_object)`: Kafka's default SSL principal, ``User:`` and the subject of the
  peer's certificate as ``X500Principal.getName()`` prints it (RFC 2253: the RDNs from last to
  first, CN, C, L, ST, O, OU, STREET, DC and UID by name, any other attribute as its OID and
  ``#`` + the hex of its DER value, ``,=+<>#;"\\`` escaped); ``User:ANONYMOUS`` without a client
  certificate.  `distinguished_name(der)` is that name for any certificate.
- `kernel_tls_send(sock)`: whether the kernel encrypts what the socket sends (kTLS).

Failures to load a key or certificate raise ValueError (or FileNotFoundError) naming the setting
and the file, never the password.
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import Callable, Union

from kafkacodec.net._secret import Secret
from kafkacodec.net.properties import BrokerSecurity, ClientSecurity

__all__ = ["client_context", "server_context", "peer_principal", "distinguished_name", "kernel_tls_send",
           "ANONYMOUS"]

ANONYMOUS = "User:ANONYMOUS"

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _versions(context: ssl.SSLContext, enabled: tuple[str, ...]) -> None:
    versions = sorted(_VERSIONS[p] for p in enabled)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _enable_ktls(context: ssl.SSLContext, kernel_tls: bool) -> None:
    option = getattr(ssl, "OP_ENABLE_KTLS", None)      # Python 3.12+, OpenSSL 3
    if kernel_tls and option is not None:
        context.options |= option


def _password(where: str, password: Secret | None) -> Callable[[], str]:
    """OpenSSL's password callback: the secret, or (no password set, an encrypted key) an error
    instead of OpenSSL's prompt on the terminal."""
    def give() -> str:
        if password is None:
            raise ValueError(f"{where}: the private key is encrypted: set ssl.key.password")
        return password.reveal()
    return give


def _load_chain(context: ssl.SSLContext, certificate: str, key: str | None, password: Secret | None,
                setting: str) -> None:
    for path in (certificate, key):
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(2, f"{setting}: no such file", path)
    where = f"{setting} {certificate}" + (f" / ssl.key.location {key}" if key else "")
    try:
        context.load_cert_chain(certificate, key, password=_password(where, password))
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"{where}: the private key does not belong to the certificate") from None
        if _encrypted(key or certificate):
            raise ValueError(f"{where}: the private key could not be decrypted: ssl.key.password is "
                             "wrong") from None
        raise ValueError(f"{where}: no PEM certificate and private key could be read ({exc.reason or exc})") from None


def _encrypted(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    return b"ENCRYPTED PRIVATE KEY" in head or b"Proc-Type: 4,ENCRYPTED" in head


def _load_cas(context: ssl.SSLContext, location: str | None, pem: str | None, setting: str) -> None:
    if location is None and pem is None:
        context.load_default_certs()
        return
    try:
        if location is not None:
            if os.path.isdir(location):
                context.load_verify_locations(capath=location)
            elif os.path.isfile(location):
                context.load_verify_locations(cafile=location)
            else:
                raise FileNotFoundError(2, f"{setting}: no such file or directory", location)
        if pem is not None:
            context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise ValueError(f"{setting} {location or '(PEM text)'}: no PEM CA certificate could be read "
                         f"({exc.reason or exc})") from None


def client_context(security: ClientSecurity, *, kernel_tls: bool = False) -> ssl.SSLContext:
    """The TLS context of a client connection (wrap with ``server_hostname=`` the broker's
    host, which the certificate must name unless endpoint identification is off).  `kernel_tls`
    asks OpenSSL for kTLS where Python offers it (`kernel_tls_send`)."""
    if not security.uses_tls:
        raise ValueError(f"security.protocol {security.security_protocol} uses no TLS")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, security.ssl_enabled_protocols)
    if security.ssl_certificate_verification:
        context.check_hostname = security.ssl_endpoint_identification
        context.verify_mode = ssl.CERT_REQUIRED
        _load_cas(context, security.ssl_ca_location, security.ssl_ca_pem, "ssl.ca.location")
    else:                              # librdkafka's enable.ssl.certificate.verification=false
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if security.ssl_certificate_location is not None:
        _load_chain(context, security.ssl_certificate_location, security.ssl_key_location,
                    security.ssl_key_password, "ssl.certificate.location")
    _enable_ktls(context, kernel_tls)
    return context


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(security: BrokerSecurity, listener: str | None = None, *,
                   kernel_tls: bool = False) -> ssl.SSLContext:
    """The TLS context of a listener (by name; default: the only TLS listener)."""
    if listener is None:
        tls = [l for l in security.listeners if l.uses_tls]
        if len(tls) != 1:
            raise ValueError(f"name the listener: {len(tls)} listeners use TLS")
        chosen = tls[0]
    else:
        chosen = security.listener(listener)
    settings = chosen.ssl
    if settings is None:
        raise ValueError(f"listener {chosen.name} ({chosen.security_protocol}) uses no TLS")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, settings.enabled_protocols)
    _load_chain(context, settings.keystore_location, None, settings.key_password, "ssl.keystore.location")
    context.verify_mode = _CLIENT_AUTH[settings.client_auth]
    if settings.truststore_location is not None:
        _load_cas(context, settings.truststore_location, None, "ssl.truststore.location")
    _enable_ktls(context, kernel_tls)
    return context


# --- the peer's principal ----------------------------------------------------------------------

def peer_principal(ssl_object: Union[ssl.SSLObject, ssl.SSLSocket]) -> str:
    """Kafka's principal of a TLS peer (DefaultKafkaPrincipalBuilder with the DEFAULT mapping
    rules): ``User:`` + the subject of its certificate in RFC 2253 form, or ``User:ANONYMOUS``
    when it sent none.  Call after the handshake."""
    try:
        der = ssl_object.getpeercert(binary_form=True)
    except ValueError:
        raise ValueError("peer_principal: the TLS handshake has not completed") from None
    if not der:
        return ANONYMOUS
    return "User:" + distinguished_name(der)


def _der(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of contents, end of contents) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise ValueError("the certificate is truncated")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise ValueError("the certificate has a bad DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ValueError("the certificate is truncated")
    return tag, pos, pos + length


def _oid(data: bytes) -> str:
    parts: list[int] = []
    value = 0
    for byte in data:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    if not parts:
        return ""
    first = parts[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(p) for p in head + parts[1:])


# X500Principal.getName()'s RFC 2253 keywords (others print as OIDs)
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
# DER string types Java prints as text, and how it decodes them
_STRINGS = {0x13: "ascii", 0x16: "ascii", 0x1b: "ascii", 0x14: "latin-1", 0x0c: "utf-8", 0x1e: "utf-16-be"}
_ESCAPED = ',=+<>#;"\\'


def _value_text(tag: int, contents: bytes) -> str:
    text = contents.decode(_STRINGS[tag], "replace")
    out = "".join("\\00" if c == "\0" else ("\\" + c if c in _ESCAPED else c) for c in text)
    # leading and trailing blanks (space, CR) escaped too, as Java's AVA.toRFC2253String
    middle = out.strip(" \r")
    if not middle:
        return "".join("\\" + c for c in out)
    lead = out[:len(out) - len(out.lstrip(" \r"))]
    trail = out[len(out.rstrip(" \r")):]
    return "".join("\\" + c for c in lead) + middle + "".join("\\" + c for c in trail)


def distinguished_name(der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` (RFC 2253)."""
    data = bytes(der)
    _, cert, _ = _der(data, 0)                      # Certificate
    _, tbs, tbs_end = _der(data, cert)              # TBSCertificate
    pos = tbs
    fields: list[tuple[int, int, int]] = []
    while pos < tbs_end and len(fields) < 7:
        tag, start, end = _der(data, pos)
        fields.append((tag, start, end))
        pos = end
    if fields and fields[0][0] == 0xA0:             # [0] version
        fields = fields[1:]
    if len(fields) < 5 or fields[4][0] != 0x30:
        raise ValueError("the certificate has no subject")
    _, pos, name_end = fields[4]                    # serial, signature, issuer, validity, subject
    rdns: list[str] = []
    while pos < name_end:
        _, set_start, set_end = _der(data, pos)     # RelativeDistinguishedName: SET OF
        avas: list[str] = []
        inner = set_start
        while inner < set_end:
            _, ava_start, ava_end = _der(data, inner)           # AttributeTypeAndValue
            _, oid_start, oid_end = _der(data, ava_start)
            oid = _oid(data[oid_start:oid_end])
            tag, value_start, value_end = _der(data, oid_end)
            keyword = _KEYWORDS.get(oid)
            if keyword is not None and tag in _STRINGS:
                avas.append(f"{keyword}={_value_text(tag, data[value_start:value_end])}")
            else:
                avas.append(f"{keyword or oid}=#{data[oid_end:value_end].hex()}")
            inner = ava_end
        rdns.append("+".join(avas))
        pos = set_end
    return ",".join(reversed(rdns))


# --- kernel TLS --------------------------------------------------------------------------------

_SOL_TLS = 282          # linux/socket.h
_TLS_TX = 1             # linux/tls.h


def kernel_tls_send(sock: Union[ssl.SSLSocket, ssl.SSLObject]) -> bool:
    """True when the kernel encrypts what this TLS socket sends (kTLS: sendfile() can then send
    file pages without copying them through Python).

    Detection: the context must have asked for it (``ssl.OP_ENABLE_KTLS``, Python 3.12+ with
    OpenSSL 3 built with kTLS), and the socket must be an SSLSocket (an SSLObject works over
    memory buffers, never kTLS); then ``getsockopt(SOL_TLS, TLS_TX)`` with room for the 4-byte
    tls_crypto_info header (version, cipher: no key material is copied) succeeds only when
    OpenSSL handed the send direction to the kernel's tls module.  On Python 3.11 (no
    OP_ENABLE_KTLS) it is always False."""
    option = getattr(ssl, "OP_ENABLE_KTLS", None)
    if option is None or not isinstance(sock, ssl.SSLSocket) or not sock.context.options & option:
        return False
    return _tls_tx_configured(sock)


def _tls_tx_configured(sock: socket.socket) -> bool:
    try:
        header = sock.getsockopt(_SOL_TLS, _TLS_TX, 4)
    except OSError:                    # no tls ULP on the socket, TX not set, not Linux
        return False
    return len(header) == 4 and header != b"\0\0\0\0"
