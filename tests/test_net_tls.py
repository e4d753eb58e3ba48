"""kafkacodec.net.tls: real TLS handshakes over loopback socket pairs between the contexts built
from ClientSecurity / BrokerSecurity (certificates from trustme and cryptography), Kafka's SSL
principal checked against the JDK's X500Principal.getName(), and key loading errors that name
the setting but never the password."""

from __future__ import annotations

import datetime
import socket
import ssl
import sys
import warnings

import pytest

trustme = pytest.importorskip("trustme", reason="trustme is in the [test] extra")
x509 = pytest.importorskip("cryptography.x509")
from cryptography.x509.oid import NameOID  # noqa: E402

from kafkacodec.net import (BrokerSecurity, ClientSecurity, client_context, distinguished_name,  # noqa: E402
                            kernel_tls_send, peer_principal, server_context)
from kafkacodec.net.tls import _tls_tx_configured  # noqa: E402  (internal: the kTLS probe)
from security_support import Handshake, java_subject_names, self_signed_der, write_pem_keystore  # noqa: E402

PASSWORD = "key-pw-SeCrEt"


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(ca, tmp_path_factory):
    """The files a deployment has: the CA, the broker's PEM keystore (encrypted key), a client's
    certificate and key (librdkafka style), and a client keystore (Java style)."""
    d = tmp_path_factory.mktemp("pki")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    broker = ca.issue_cert("localhost", "127.0.0.1", common_name="broker")
    write_pem_keystore(broker, d / "broker.pem", PASSWORD.encode())
    client = ca.issue_cert(common_name="alice", organization_name="Example", organization_unit_name="eng")
    client.cert_chain_pems[0].write_to_path(str(d / "client-cert.pem"))
    client.private_key_pem.write_to_path(str(d / "client-key.pem"))
    write_pem_keystore(client, d / "client-keystore.pem", PASSWORD.encode())
    return d


def broker_security(pki, client_auth="none", listener="SSL", **extra):
    props = {"listeners": f"{listener}://127.0.0.1:0", "ssl.keystore.type": "PEM",
             "ssl.keystore.location": str(pki / "broker.pem"), "ssl.key.password": PASSWORD,
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem"),
             "ssl.client.auth": client_auth, **extra}
    if listener == "SASL_SSL":
        props.update({"sasl.enabled.mechanisms": "PLAIN", "kafkacodec.users.file": "/unused"})
    return BrokerSecurity.from_properties(props)


def client_security(pki, **extra):
    return ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.ca.location": str(pki / "ca.pem"),
                                           **extra})


def handshake(client, server, host="localhost"):
    h = Handshake(client_context(client), server_context(server), server_hostname=host)
    return h


# --- handshakes --------------------------------------------------------------------------------

def test_tls_with_hostname_verification_and_the_anonymous_principal(pki):
    h = handshake(client_security(pki), broker_security(pki))
    try:
        assert h.ok, (h.client_error, h.server_error)
        assert h.client.version() in ("TLSv1.2", "TLSv1.3")
        assert peer_principal(h.server) == "User:ANONYMOUS"            # no client certificate
        assert peer_principal(h.client).startswith("User:CN=broker,")  # the broker as the client sees it
        assert kernel_tls_send(h.client) is False
    finally:
        h.close()


def test_hostname_mismatch_is_refused_unless_identification_is_off(pki):
    h = handshake(client_security(pki), broker_security(pki), host="kafka.example.com")
    assert isinstance(h.client_error, ssl.SSLCertVerificationError) and "match" in str(h.client_error)
    h.close()
    h = handshake(client_security(pki, **{"ssl.endpoint.identification.algorithm": "none"}),
                  broker_security(pki), host="kafka.example.com")
    assert h.ok
    h.close()


def test_untrusted_ca_is_refused(pki, tmp_path):
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
    h = handshake(client_security(pki, **{"ssl.ca.location": str(tmp_path / "other-ca.pem")}),
                  broker_security(pki))
    assert isinstance(h.client_error, ssl.SSLCertVerificationError)
    assert "certificate verify failed" in str(h.client_error)
    h.close()
    # librdkafka's enable.ssl.certificate.verification=false turns the check off (explicitly)
    h = handshake(client_security(pki, **{"ssl.ca.location": str(tmp_path / "other-ca.pem"),
                                          "enable.ssl.certificate.verification": "false"}), broker_security(pki))
    assert h.ok
    h.close()


def test_expired_certificate_is_refused(ca, pki, tmp_path):
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
    expired = ca.issue_cert("localhost", not_before=past - datetime.timedelta(days=1),
                            not_after=past)
    write_pem_keystore(expired, tmp_path / "expired.pem")
    server = BrokerSecurity.from_properties({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                                             "ssl.keystore.location": str(tmp_path / "expired.pem")})
    h = handshake(client_security(pki), server)
    assert isinstance(h.client_error, ssl.SSLCertVerificationError) and "expired" in str(h.client_error)
    h.close()


def test_tls_1_1_is_refused_by_both_sides(pki):
    """Even where OpenSSL itself would allow TLS 1.1 (security level 0), the contexts' minimum
    version refuses it."""
    server_ctx = server_context(broker_security(pki))
    server_ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(pki / "ca.pem"))
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1_1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    h = Handshake(old, server_ctx)
    assert h.client_error is not None and h.server_error is not None
    assert "version" in str(h.server_error).lower() or "protocol" in str(h.server_error).lower()
    h.close()
    client_ctx = client_context(client_security(pki))
    assert client_ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    only13 = client_context(client_security(pki, **{"ssl.enabled.protocols": "TLSv1.3"}))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3


def test_client_certificate_required_and_requested(pki):
    required = broker_security(pki, "required")
    h = handshake(client_security(pki), required)          # no client certificate
    assert h.server_error is not None and h.client_error is not None
    h.close()
    for extra in ({"ssl.certificate.location": str(pki / "client-cert.pem"),
                   "ssl.key.location": str(pki / "client-key.pem")},
                  {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "client-keystore.pem"),
                   "ssl.key.password": PASSWORD}):
        h = handshake(client_security(pki, **extra), required)
        assert h.ok, (h.client_error, h.server_error)
        assert peer_principal(h.server) == "User:CN=alice,OU=eng,O=Example"
        h.close()
    requested = broker_security(pki, "requested")
    h = handshake(client_security(pki), requested)
    assert h.ok and peer_principal(h.server) == "User:ANONYMOUS"
    h.close()
    h = handshake(client_security(pki, **{"ssl.certificate.location": str(pki / "client-cert.pem"),
                                          "ssl.key.location": str(pki / "client-key.pem")}), requested)
    assert h.ok and peer_principal(h.server) == "User:CN=alice,OU=eng,O=Example"
    h.close()


def test_sasl_ssl_listener_takes_only_a_prefixed_client_auth(pki):
    """KIP-684: ssl.client.auth=required broker-wide does not ask SASL_SSL clients for a
    certificate; listener.name.sasl_ssl.ssl.client.auth does."""
    assert server_context(broker_security(pki, "required", listener="SASL_SSL")).verify_mode == ssl.CERT_NONE
    prefixed = broker_security(pki, listener="SASL_SSL", **{"listener.name.sasl_ssl.ssl.client.auth": "required"})
    assert server_context(prefixed).verify_mode == ssl.CERT_REQUIRED


def test_encrypted_keys_right_wrong_and_missing_password(pki, capsys):
    good = broker_security(pki)
    assert server_context(good) is not None
    for props, message in [({"ssl.key.password": "wrong-" + PASSWORD}, "could not be decrypted: ssl.key.password "
                                                                         "is wrong"),
                           ({"ssl.key.password": ""}, "could not be decrypted"),
                           ({}, "encrypted: set ssl.key.password")]:
        base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki / "broker.pem"), **props}
        with pytest.raises(ValueError, match=message) as info:
            server_context(BrokerSecurity.from_properties(base))
        assert PASSWORD not in str(info.value) and str(pki / "broker.pem") in str(info.value)
    client = client_security(pki, **{"ssl.keystore.type": "PEM",
                                     "ssl.keystore.location": str(pki / "client-keystore.pem"),
                                     "ssl.key.password": "nope"})
    with pytest.raises(ValueError, match="ssl.key.password is wrong"):
        client_context(client)
    assert capsys.readouterr().err == ""                     # no pass phrase prompt


def test_mismatched_key_missing_files_and_garbage(pki, tmp_path):
    mismatched = client_security(pki, **{"ssl.certificate.location": str(pki / "client-cert.pem"),
                                         "ssl.key.location": str(tmp_path / "other.pem")})
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(tmp_path / "other.pem"))
    with pytest.raises(ValueError, match="the private key does not belong to the certificate"):
        client_context(mismatched)
    with pytest.raises(FileNotFoundError, match="ssl.ca.location"):
        client_context(client_security(pki, **{"ssl.ca.location": str(tmp_path / "missing.pem")}))
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="no PEM CA certificate could be read"):
        client_context(client_security(pki, **{"ssl.ca.location": str(tmp_path / "garbage.pem")}))
    with pytest.raises(ValueError, match="uses no TLS"):
        client_context(ClientSecurity.from_properties({}))


def test_kernel_tls_probe_is_false_without_ktls():
    """Python 3.11 has no ssl.OP_ENABLE_KTLS: never kernel TLS.  The probe itself, on a socket
    without the kernel's tls module, says False too."""
    a, b = socket.socketpair(socket.AF_INET if sys.platform == "win32" else socket.AF_UNIX)
    try:
        assert _tls_tx_configured(a) is False
    finally:
        a.close()
        b.close()
    if not hasattr(ssl, "OP_ENABLE_KTLS"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        with socket.socket() as raw, ctx.wrap_socket(raw, do_handshake_on_connect=False) as tls:
            assert kernel_tls_send(tls) is False


# --- the principal as Kafka names it -----------------------------------------------------------

SUBJECTS = [
    [[(NameOID.ORGANIZATION_NAME, "Example")], [(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng")],
     [(NameOID.COMMON_NAME, "alice")]],
    [[(NameOID.COUNTRY_NAME, "DE")], [(NameOID.STATE_OR_PROVINCE_NAME, "Berlin")],
     [(NameOID.LOCALITY_NAME, "Berlin")], [(NameOID.STREET_ADDRESS, "Main St 1")],
     [(NameOID.DOMAIN_COMPONENT, "com")], [(NameOID.DOMAIN_COMPONENT, "example")],
     [(NameOID.USER_ID, "u42")], [(NameOID.COMMON_NAME, "svc")]],
    [[(NameOID.COMMON_NAME, 'a,b+c"d\\e<f>g;h=i#j')]],
    [[(NameOID.COMMON_NAME, " leading and trailing  ")], [(NameOID.COMMON_NAME, "#hash first")]],
    [[(NameOID.COMMON_NAME, "Zoë Ünicode 中文")], [(NameOID.EMAIL_ADDRESS, "alice@example.com")]],
    [[(NameOID.COMMON_NAME, "multi"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "valued")],
     [(NameOID.SERIAL_NUMBER, "1234"), (NameOID.TITLE, "boss")]],
    [[(NameOID.GIVEN_NAME, "Ann"), (NameOID.SURNAME, "Lee")], [(NameOID.COMMON_NAME, "   ")]],
]


def test_distinguished_names_as_javas_x500principal_prints_them(tmp_path):
    ders = [self_signed_der(rdns) for rdns in SUBJECTS]
    paths = []
    for i, der in enumerate(ders):
        paths.append(tmp_path / f"{i}.der")
        paths[-1].write_bytes(der)
    ours = [distinguished_name(der) for der in ders]
    assert ours[0] == "CN=alice,OU=eng,O=Example"                 # the certificate's order, reversed
    assert ours[2] == 'CN=a\\,b\\+c\\"d\\\\e\\<f\\>g\\;h\\=i\\#j'
    assert ours[4].startswith("1.2.840.113549.1.9.1=#16")          # emailAddress: OID and DER hex
    assert ours == java_subject_names(paths)


def test_distinguished_name_of_other_string_types():
    """PrintableString, IA5String, BMPString and UniversalString values (cryptography picks the
    type by attribute; a _type= override makes the others)."""
    from cryptography.x509.name import _ASN1Type

    name = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "bmp é", _ASN1Type.BMPString)]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ia5", _ASN1Type.IA5String)]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "uni",
                                                           _ASN1Type.UniversalString)]),
    ])
    der = self_signed_der(subject=name)
    text = distinguished_name(der)
    assert text.startswith("OU=#1c0c") and text.endswith(",O=ia5,CN=bmp é")


@pytest.mark.parametrize("blob", [b"", b"\x30", b"\x30\x85\x00\x00\x00\x00\x01", b"\x30\x02\x30\x00"])
def test_distinguished_name_of_damaged_certificates_is_a_clear_error(blob):
    with pytest.raises(ValueError, match="certificate"):
        distinguished_name(blob)


# --- reading over TLS ----------------------------------------------------------------------------

def test_one_read_takes_every_tls_record_the_socket_holds(pki):
    """A broker's answer arrives as TLS records of up to 16 KiB, and one recv decrypts one
    record: a read event must go on until the socket is empty.  Before, it read one record and
    went back to the selector, so the loop turned once per record (the mirror over SASL_SSL:
    ~9,000 loop turns for 87 MB, each with the consumer's per-turn work): 8 answers in the socket
    took 8 read events, where the test now wants them all from one."""
    import fcntl
    import struct
    import termios
    import threading
    import time

    from kafkacodec import SimpleMemoryPool
    from kafkacodec.net.client import InFlight, ResponseReader, open_connection
    from kafkacodec.net.connection import Deadlines
    from kafkacodec.net.loop import Loop

    answers = [struct.pack(">ii", 4 + 1000, cid) + bytes([cid]) * 1000 for cid in range(1, 9)]
    server_ctx = server_context(broker_security(pki))
    server_ctx.num_tickets = 0                    # TLS 1.3: nothing but the answers after the handshake
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    go, done, failures = threading.Event(), threading.Event(), []

    def broker() -> None:
        try:
            raw, _ = listener.accept()
            raw.settimeout(10)
            with server_ctx.wrap_socket(raw, server_side=True) as tls:
                assert go.wait(10)
                for answer in answers:
                    tls.sendall(answer)          # one TLS record each
                done.wait(10)                    # open until the test has read
        except BaseException as exc:             # noqa: BLE001 - reported to the test
            failures.append(exc)

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    loop = Loop()
    delivered: list[int] = []

    def deliver(conn, done, error):
        assert error is None, error
        for request, response in done:
            delivered.append(response.correlation_id)
            response.release()

    reader = ResponseReader(SimpleMemoryPool(1 << 20, 1 << 20, True), 1 << 20, deliver)
    for cid in range(1, 9):
        reader.in_flight[cid] = InFlight(18, 0, lambda r: None, lambda e: None, time.monotonic() + 30)
    conn = open_connection(loop, "127.0.0.1", listener.getsockname()[1], reader, on_closed=lambda c: None,
                           deadlines=Deadlines(), tls=client_context(client_security(pki)), name="broker")
    try:
        assert loop.run_until(lambda: conn.handshaken or conn.closed, 10) and not conn.closed, conn.close_reason
        go.set()
        # every record in the client's socket (TLS 1.3 with AES-GCM or ChaCha20: 22 bytes each
        # beyond the answer) before the one read event
        expected = sum(len(a) + 22 for a in answers)
        deadline = time.monotonic() + 10
        while struct.unpack("i", fcntl.ioctl(conn.transport.fileno(), termios.FIONREAD, bytes(4)))[0] < expected:
            assert time.monotonic() < deadline and not failures, failures
            time.sleep(0.005)                    # (waiting for the bytes, not asserting with time)
        conn.read_now()
        assert delivered == list(range(1, 9))
    finally:
        go.set()
        done.set()
        conn.close("test done")
        loop.close()
        listener.close()
        thread.join(10)
    assert not failures, failures
