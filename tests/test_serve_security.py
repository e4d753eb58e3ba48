"""`kafkacodec serve` with TLS, SASL and ACLs (a broker properties file's `listeners`), read by
real clients: confluent-kafka (librdkafka), kafka-python, aiokafka and kafkacodec's own consumer
core; mutual TLS with the certificate's subject as the principal; SaslHandshake v0's raw tokens
(kafka-python at 0.10); KIP-368 re-authentication; and every way a connection can be wrong: a
wrong password, an unknown mechanism, an untrusted or expired certificate, a plaintext client on
a TLS port and the reverse, an ACL-denied topic or group.  Each refusal is clear and quick."""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from pathlib import Path

import pytest

from kafkacodec.errors import AuthenticationError, KafkaCodecError
from kafkacodec.net.properties import BrokerSecurity
from kafkacodec.net.users import UsersFile
from kafkacodec.protocol.api import ApiKey
from kafkacodec.serve import Server

from serve_support import confluent_read, expected, kafka_python_read, make_log_dir, aiokafka_read

trustme = pytest.importorskip("trustme")
pytest.importorskip("confluent_kafka")

CAROL_DN = "CN=carol,OU=readers,O=Example"
ACL = f"""\
# alice reads modern and mixed, in groups g-*; bob reads legacy; carol (a TLS client) modern
User:alice modern
User:alice mixed
User:alice Group:g-*
User:alice Group:assign-only
User:bob legacy
User:bob Group:*
User:{CAROL_DN} modern
User:{CAROL_DN} Group:assign-only
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    from security_support import write_pem_keystore

    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    carol = ca.issue_cert("carol@example.org", common_name="carol", organization_name="Example",
                          organization_unit_name="readers")
    now = datetime.datetime.now(datetime.timezone.utc)
    expired = ca.issue_cert("127.0.0.1", not_before=now - datetime.timedelta(days=10),
                            not_after=now - datetime.timedelta(days=1))
    other = trustme.CA()
    paths = {"ca": root / "ca.pem", "other_ca": root / "other-ca.pem",
             "keystore": write_pem_keystore(server, root / "server.pem"),
             "expired": write_pem_keystore(expired, root / "expired.pem"),
             "carol_cert": root / "carol.pem", "carol_key": root / "carol.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other.cert_pem.write_to_path(str(paths["other_ca"]))
    carol.private_key_pem.write_to_path(str(paths["carol_key"]))
    paths["carol_cert"].write_bytes(b"".join(blob.bytes() for blob in carol.cert_chain_pems))
    return paths


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("secure") / "logs")


def broker_properties(root: Path, pki: dict[str, Path], **extra: str) -> dict[str, str]:
    users = UsersFile()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        users.set_password("alice", mechanism, "alice-secret")
    users.set_password("alice", "PLAIN", "alice-secret")
    users.set_password("bob", "PLAIN", "bob-secret")
    users.set_password("bob", "SCRAM-SHA-256", "bob-secret")
    users.save(root / "users")
    (root / "acl").write_text(ACL)
    return {"listeners": "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["keystore"]),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"]),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "kafkacodec.users.file": str(root / "users"), "kafkacodec.acl.file": str(root / "acl"),
            **extra}


@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki, log_dir):
    root = tmp_path_factory.mktemp("secured-conf")
    security = BrokerSecurity.from_properties(broker_properties(root, pki))
    with Server([str(log_dir)], security=security) as server:
        yield server


def port_of(server: Server, name: str) -> int:
    return next(l.port for l in server.listening if l.name == name)


def sasl_ssl(server: Server, pki, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{port_of(server, 'SASL_SSL')}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


# --- real clients read over TLS + SASL ---------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_reads_over_sasl_ssl_with_scram(secured, pki, log_dir, mechanism):
    want = expected(log_dir, {"modern": 1})
    conf = sasl_ssl(secured, pki, mechanism, "alice", "alice-secret")
    assert confluent_read(conf.pop("bootstrap.servers"), want, timeout=30, **conf) == want


def test_confluent_kafka_reads_over_sasl_ssl_with_plain_in_a_group(secured, pki, log_dir):
    want = expected(log_dir, {"legacy": 1})
    conf = sasl_ssl(secured, pki, "PLAIN", "bob", "bob-secret")
    assert confluent_read(conf.pop("bootstrap.servers"), want, group="readers", timeout=30, **conf) == want


def test_kafka_python_reads_over_sasl_ssl(secured, pki, log_dir):
    want = expected(log_dir, {"modern": 1})
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    got = kafka_python_read(f"127.0.0.1:{port_of(secured, 'SASL_SSL')}", want, timeout=30,
                            security_protocol="SASL_SSL", ssl_context=context,
                            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                            sasl_plain_password="alice-secret")
    assert got == want


def test_aiokafka_reads_over_sasl_ssl(secured, pki, log_dir):
    want = expected(log_dir, {"modern": 1})
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    got = aiokafka_read(f"127.0.0.1:{port_of(secured, 'SASL_SSL')}", want, timeout=30,
                        security_protocol="SASL_SSL", ssl_context=context, sasl_mechanism="PLAIN",
                        sasl_plain_username="alice", sasl_plain_password="alice-secret")
    assert got == want


def test_an_old_client_authenticates_with_raw_sasl_tokens(secured, pki, log_dir):
    """kafka-python at 0.10 sends SaslHandshake v0 and then raw tokens (Kafka 4 removed that
    flow); it reads over SASL_PLAINTEXT, down-converted."""
    want = expected(log_dir, {"legacy": 1})
    got = kafka_python_read(f"127.0.0.1:{port_of(secured, 'SASL_PLAINTEXT')}", want, timeout=30,
                            api_version=(0, 10, 1), security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="bob",
                            sasl_plain_password="bob-secret")
    assert got == want


def test_our_consumer_reads_over_sasl_ssl(secured, pki, log_dir):
    from kafkacodec.consumer import Consumer

    want = expected(log_dir, {"modern": 1})[("modern", 0)]
    conf = sasl_ssl(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    with Consumer(conf.pop("bootstrap.servers"), security=conf, request_timeout=10) as consumer:
        consumer.assign({("modern", 0): "earliest"})
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(want) and time.monotonic() < deadline:
            for record in consumer.records(0.5):
                got.append((record.offset, record.key, record.value))
    assert got == want


def test_mutual_tls_takes_the_certificates_subject_as_the_principal(secured, pki, log_dir):
    want = expected(log_dir, {"modern": 1})
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]),
            "ssl.certificate.location": str(pki["carol_cert"]), "ssl.key.location": str(pki["carol_key"])}
    assert confluent_read(f"127.0.0.1:{port_of(secured, 'SSL')}", want, timeout=30, **conf) == want


# --- authorization ---------------------------------------------------------------------------------
def consumer_for(server, pki, user: str, password: str, mechanism: str = "SCRAM-SHA-256", **kwargs):
    from kafkacodec.consumer import Consumer

    conf = sasl_ssl(server, pki, mechanism, user, password)
    if mechanism == "OAUTHBEARER":                 # an unsecured token (librdkafka's form)
        conf = {k: v for k, v in conf.items() if not k.startswith("sasl.user") and k != "sasl.password"}
        conf["sasl.oauthbearer.config"] = f"principal={user}"
    return Consumer(conf.pop("bootstrap.servers"), security=conf, request_timeout=5, **kwargs)


def test_metadata_lists_only_the_topics_a_principal_may_read(secured, pki):
    from kafkacodec.protocol._metadata import decode_metadata_response

    with consumer_for(secured, pki, "alice", "alice-secret") as consumer:
        cluster = consumer.cluster
        everything = cluster.call(None, 3, _all_topics(cluster), lambda r, v: decode_metadata_response(r.payload, v),
                                  max_version=12, min_version=1)
        assert sorted(t.name for t in everything.topics) == ["mixed", "modern"]
        named = cluster.refresh_metadata(["legacy", "modern", "nope"])
        codes = {t.name: t.error_code for t in named.topics}
        assert codes["legacy"] == 29 and codes["nope"] == 29 and codes["modern"] == 0


def _all_topics(cluster):
    from kafkacodec.protocol._metadata import encode_metadata_request

    return lambda version, cid: encode_metadata_request(None, api_version=version, correlation_id=cid,
                                                        client_id="t")


def test_fetch_of_a_denied_topic_is_topic_authorization_failed(secured, pki):
    from kafkacodec.consumer import BrokerError

    with consumer_for(secured, pki, "bob", "bob-secret") as consumer:
        with pytest.raises(BrokerError) as failure:
            consumer.assign({("modern", 0): 0})
            for _ in range(20):
                consumer.poll(0.2)
        assert failure.value.error_code == 29


def test_a_denied_group_is_group_authorization_failed(secured, pki):
    from confluent_kafka import Consumer as Confluent, KafkaError

    conf = sasl_ssl(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    client = Confluent({**conf, "group.id": "not-hers", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        client.subscribe(["modern"])
        error = None
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            msg = client.poll(0.5)
            if msg is not None and msg.error():
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        client.close()


# --- refused: quickly and clearly ---------------------------------------------------------------
def test_a_wrong_password_is_refused_after_the_delay_and_the_connection_closed(secured, pki):
    start = time.monotonic()
    with pytest.raises(AuthenticationError) as failure:
        with consumer_for(secured, pki, "alice", "not-her-password") as consumer:
            consumer.partitions_for("modern")
    took = time.monotonic() - start
    assert "authentication failed" in str(failure.value).lower() and "not-her-password" not in str(failure.value)
    assert 0.1 <= took < 5, took        # connection.failed.authentication.delay.ms (100), then at once
    # the server closes once the refusal is written, on its own thread: maybe just after the
    # client read it
    deadline = time.monotonic() + 5
    while secured.closed_connections.get("authentication_failed", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert secured.closed_connections.get("authentication_failed", 0) >= 1, secured.closed_connections


def test_an_unknown_user_gets_the_same_refusal(secured, pki):
    with pytest.raises(AuthenticationError) as failure:
        with consumer_for(secured, pki, "mallory", "x") as consumer:
            consumer.partitions_for("modern")
    assert "mallory" not in str(failure.value)


def test_a_mechanism_the_server_does_not_enable_is_named(secured, pki):
    with pytest.raises(AuthenticationError) as failure:
        with consumer_for(secured, pki, "alice", "alice-secret", mechanism="OAUTHBEARER") as consumer:
            consumer.partitions_for("modern")
    assert "OAUTHBEARER" in str(failure.value) and "SCRAM-SHA-256" in str(failure.value)


def test_an_untrusted_certificate_is_refused(secured, pki):
    from kafkacodec.consumer import Consumer

    conf = sasl_ssl(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    conf["ssl.ca.location"] = str(pki["other_ca"])
    start = time.monotonic()
    with pytest.raises((KafkaCodecError, ConnectionError, TimeoutError)) as failure:
        with Consumer(conf.pop("bootstrap.servers"), security=conf, request_timeout=3,
                      default_api_timeout=3) as consumer:
            consumer.partitions_for("modern")
    assert "certificate" in str(failure.value).lower(), failure.value
    assert time.monotonic() - start < 5


def test_an_expired_server_certificate_is_refused(tmp_path, pki, log_dir):
    props = broker_properties(tmp_path, pki, **{"ssl.keystore.location": str(pki["expired"])})
    with Server([str(log_dir)], security=BrokerSecurity.from_properties(props)) as server:
        context = ssl.create_default_context(cafile=str(pki["ca"]))
        with socket.create_connection(("127.0.0.1", port_of(server, "SSL")), timeout=5) as raw:
            with pytest.raises(ssl.SSLCertVerificationError) as failure:
                context.wrap_socket(raw, server_hostname="127.0.0.1")
        assert "expired" in str(failure.value)


def test_a_plaintext_client_on_a_tls_port_is_closed_at_once(secured):
    with socket.create_connection(("127.0.0.1", port_of(secured, "SASL_SSL")), timeout=5) as sock:
        frame = struct.pack(">hhih", 18, 0, 1, -1)
        sock.sendall(struct.pack(">i", len(frame)) + frame)       # ApiVersions, in the clear
        start = time.monotonic()
        closed = False
        while not closed:                                          # an alert, then the end
            try:
                closed = sock.recv(100) == b""
            except ConnectionResetError:
                closed = True
        assert time.monotonic() - start < 2
    deadline = time.monotonic() + 5
    while secured.closed_connections.get("tls_failed", 0) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_tls_client_on_a_plaintext_port_fails_clearly(secured, pki):
    """The SASL_PLAINTEXT port read as TLS: the client's handshake meets a closed connection
    (the server read a TLS record as an oversized request) and says so at once."""
    from kafkacodec.consumer import Consumer

    conf = sasl_ssl(secured, pki, "SCRAM-SHA-256", "alice", "alice-secret")
    conf.pop("bootstrap.servers")
    start = time.monotonic()
    with pytest.raises((KafkaCodecError, ConnectionError, TimeoutError)) as failure:
        with Consumer(f"127.0.0.1:{port_of(secured, 'SASL_PLAINTEXT')}", security=conf,
                      request_timeout=3, default_api_timeout=3) as consumer:
            consumer.partitions_for("modern")
    assert "TLS" in str(failure.value), failure.value
    assert time.monotonic() - start < 5


def test_a_connection_that_never_authenticates_is_closed_at_the_handshake_timeout(tmp_path, pki, log_dir):
    props = broker_properties(tmp_path, pki, **{"kafkacodec.handshake.timeout.ms": "400"})
    security = BrokerSecurity.from_properties(props)
    with Server([str(log_dir)], security=security, handshake_timeout_ms=400) as server:
        for listener in ("SASL_PLAINTEXT", "SASL_SSL"):        # silent, then no TLS hello at all
            with socket.create_connection(("127.0.0.1", port_of(server, listener)), timeout=5) as sock:
                if listener == "SASL_PLAINTEXT":
                    sock.sendall(request(ApiKey.API_VERSIONS, 0, {}))
                    assert read_frame(sock) is not None           # served before authenticating
                start = time.monotonic()
                assert read_frame(sock) is None
                assert 0.3 < time.monotonic() - start < 3
        deadline = time.monotonic() + 5          # (counted just after the socket closes)
        while server.closed_connections.get("handshake_timeout", 0) < 2:
            assert time.monotonic() < deadline, server.closed_connections
            time.sleep(0.01)


def test_requests_before_authentication_close_the_connection(secured):
    with socket.create_connection(("127.0.0.1", port_of(secured, "SASL_PLAINTEXT")), timeout=5) as sock:
        body = struct.pack(">i", -1)                                # Metadata v1, every topic
        frame = struct.pack(">hhih", 3, 1, 1, -1) + body
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert sock.recv(100) == b""


# --- KIP-368 ------------------------------------------------------------------------------------------
def test_sessions_end_and_our_consumer_reauthenticates(tmp_path, pki, log_dir):
    """connections.max.reauth.ms=1500: our client re-authenticates before the end and keeps
    reading on the same connection; a client that does not (raw SASL v0) has its connection
    closed at the end of the session."""
    from kafkacodec.consumer import Consumer

    props = broker_properties(tmp_path, pki, **{"connections.max.reauth.ms": "1500"})
    with Server([str(log_dir)], security=BrokerSecurity.from_properties(props)) as server:
        conf = sasl_ssl(server, pki, "SCRAM-SHA-512", "alice", "alice-secret")
        with Consumer(conf.pop("bootstrap.servers"), security=conf, request_timeout=5) as consumer:
            consumer.assign({("modern", 0): "earliest"})
            links = set()
            end = time.monotonic() + 4
            while time.monotonic() < end:
                for part in consumer.poll(0.2):
                    part.release()
                consumer.seek(("modern", 0), 0)
                links.update(id(link) for link in consumer.cluster.connections.values())
            assert len(links) <= 3            # the same connections all along (bootstrap, data)
        assert server.closed_connections.get("authentication_failed", 0) == 0
        assert requests_of(server, "SaslAuthenticate") >= 2 * 3       # each re-authenticated twice+

        # a client whose SaslAuthenticate v0 cannot re-authenticate: closed at the session's end
        with socket.create_connection(("127.0.0.1", port_of(server, "SASL_PLAINTEXT")), timeout=5) as sock:
            assert plain_login(sock, "bob", "bob-secret") == 0
            time.sleep(1.7)
            sock.sendall(request(ApiKey.METADATA, 1, {"topics": None}))
            assert read_frame(sock) is None


def requests_of(server: Server, name: str) -> float:
    return sum(s.value for metric in server.metrics.registry.collect() for s in metric.samples
               if s.name == "kafka_network_requestmetrics_requests_total" and s.labels["request"] == name)


def request(api_key, version: int, value: dict, correlation_id: int = 1) -> bytes:
    from kafkacodec.protocol import messages

    return bytes(messages.encode_request(messages.REQUESTS[api_key], version, correlation_id, "t", value))


def read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    return data[4:]


def plain_login(sock: socket.socket, user: str, password: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v0 with PLAIN: the answer's error code."""
    from kafkacodec.protocol import messages

    sock.sendall(request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert read_frame(sock) is not None
    sock.sendall(request(ApiKey.SASL_AUTHENTICATE, 0,
                         {"auth_bytes": b"\0" + user.encode() + b"\0" + password.encode()}, 2))
    answer = read_frame(sock)
    assert answer is not None
    return int(messages.SASL_AUTHENTICATE_RESPONSE.decode(answer, 0, 4)["error_code"])


def test_list_offsets_and_group_offsets_follow_the_acls(secured, pki):
    """ListOffsets of a denied topic, and OffsetCommit/OffsetFetch of a denied group or topic,
    are refused as Kafka refuses them; what is allowed still works."""
    from kafkacodec.consumer import BrokerError

    with consumer_for(secured, pki, "alice", "alice-secret", group_id="g-readers") as consumer:
        assert consumer.end_offsets([("modern", 0)])[("modern", 0)] > 0
        with pytest.raises(BrokerError) as denied:
            consumer.end_offsets([("legacy", 0)])
        assert denied.value.error_code == 29
        consumer.commit({("modern", 0): 5})
        assert consumer.committed([("modern", 0)]) == {("modern", 0): 5}
        with pytest.raises(BrokerError) as topic:
            consumer.commit({("legacy", 0): 1})
        assert topic.value.error_code == 29
    with consumer_for(secured, pki, "alice", "alice-secret", group_id="not-hers") as consumer:
        for call in (lambda: consumer.commit({("modern", 0): 1}), lambda: consumer.committed([("modern", 0)])):
            with pytest.raises(BrokerError) as group:
                call()
            assert group.value.error_code == 30


def test_a_listener_off_loopback_without_tls_or_sasl_is_warned_about(log_dir, caplog):
    """The default address is 127.0.0.1; listening elsewhere in the clear says so at start."""
    import logging

    from kafkacodec.serve import ServeConfig

    assert ServeConfig(log_dirs=[str(log_dir)]).listen[0] == "127.0.0.1"
    with caplog.at_level(logging.WARNING, logger="kafkacodec.serve"):
        with Server([str(log_dir)], listen=("127.0.0.1", 0)):
            pass
        assert not [r for r in caplog.records if "without TLS or SASL" in r.getMessage()]
        with Server([str(log_dir)], listen=("0.0.0.0", 0)):
            pass
    assert [r for r in caplog.records if "without TLS or SASL" in r.getMessage()]
