"""TLS and SASL against real parts: two Kafka 4.1 brokers with SASL_SSL (SCRAM-SHA-256/512,
PLAIN), SSL with client certificates and an OAUTHBEARER listener (Kafka's unsecured tokens),
read by kafkacodec's consumer core, mirrored by `kafkacodec mirror`, served by the gateway
(`serve --upstream` to a SASL_SSL cluster); and `kafkacodec serve` with TLS and SASL read by
Kafka's own Java consumer, 4.1.1 and 0.10.2.2 (SaslHandshake v0 and raw SASL tokens, which
Kafka 4 still accepts but whose Fetch versions it refuses)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafkacodec.errors import AuthenticationError

pytest.importorskip("trustme", reason="the brokers' certificates are made with trustme (test extra)")
ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """(source, target): secured 4.x brokers; the source also has an OAUTHBEARER listener."""
    from conftest import _broker_fixture
    from kafka_broker import DEFAULT_VERSION, SecurityFiles

    source = _broker_fixture(DEFAULT_VERSION, security=SecurityFiles.create(tmp_path_factory.mktemp("src")),
                             oauthbearer=True)
    try:
        target = _broker_fixture(DEFAULT_VERSION, security=SecurityFiles.create(tmp_path_factory.mktemp("dst")))
    except BaseException:
        source.stop()
        raise
    yield source, target
    target.stop()
    source.stop()


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2, codec: str = "lz4") -> list[tuple]:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"%s value %d " % (topic.encode(), i) * (1 + i % 5),
                         partition=i % partitions)
    assert producer.flush(30) == 0
    return read_plain(bootstrap, topic, count, partitions)


def read_plain(bootstrap: str, topic: str, count: int, partitions: int) -> list[tuple]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert not msg.error(), msg.error()
                got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(got)


def consume_all(consumer, count: int, timeout: float = 30) -> list[tuple]:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for record in consumer.records(0.5):
            got.append((record.partition, record.offset, record.key, record.value))
    return sorted(got)


# --- the consumer core ------------------------------------------------------------------------------
@pytest.mark.parametrize(("protocol", "mechanism"), [("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"),
                                                     ("SASL_SSL", "PLAIN"), ("SSL", None)])
def test_the_consumer_core_reads_a_secured_cluster(brokers, protocol, mechanism):
    from kafkacodec.consumer import Consumer

    source, _ = brokers
    topic = f"core-{protocol}-{mechanism or 'cert'}".lower()
    source.create_topic(topic, partitions=2)
    want = produce(source.bootstrap, topic, 60)
    with Consumer(source.bootstrap_of(protocol), security=source.security.java(protocol, mechanism),
                  request_timeout=10) as consumer:
        consumer.assign_topics([topic])
        assert consume_all(consumer, len(want)) == want


def test_a_wrong_password_gets_kafkas_refusal(brokers):
    from kafkacodec.consumer import Consumer

    source, _ = brokers
    start = time.monotonic()
    with pytest.raises(AuthenticationError) as failure:
        with Consumer(source.bootstrap_of("SASL_SSL"),
                      security=source.security.java("SASL_SSL", "SCRAM-SHA-256", password="wrong"),
                      request_timeout=10) as consumer:
            consumer.partitions_for("anything")
    assert "invalid credentials" in str(failure.value) and "wrong" not in str(failure.value)
    assert time.monotonic() - start < 5


def test_oauthbearer_tokens_are_renewed_and_an_expired_one_is_refused(brokers):
    """Kafka ends a session when its token expires (KIP-368): the consumer re-authenticates
    with a fresh token from the callback before that and keeps reading; once the callback can
    only give expired tokens, the broker refuses the next one and poll() says so."""
    from kafkacodec.consumer import Consumer
    from kafkacodec.net.properties import ClientSecurity
    from kafkacodec.net.sasl import OAuthBearerToken, unsecured_jwt
    from kafkacodec.net._secret import Secret

    source, _ = brokers
    topic = "oauth"
    source.create_topic(topic, partitions=1)
    want = produce(source.bootstrap, topic, 20, partitions=1)
    issued = []
    lifetime = {"s": 3.0}

    def token() -> OAuthBearerToken:
        now = time.time()
        expiry = now + lifetime["s"]
        issued.append(now)
        jwt = unsecured_jwt({"sub": "svc", "iat": int(now) - 1, "exp": int(expiry)})
        return OAuthBearerToken(Secret(jwt), lifetime_ms=int(expiry * 1000), principal="svc")

    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT",
                                               "sasl.mechanism": "OAUTHBEARER"},
                                              oauthbearer_token_callback=token)
    with Consumer(source.bootstrap_of("SASL_PLAINTEXT"), security=security, request_timeout=10) as consumer:
        consumer.assign({(topic, 0): "earliest"})
        assert consume_all(consumer, len(want)) == want
        end = time.monotonic() + 7
        while time.monotonic() < end:                  # sessions of ~3 s end meanwhile
            consumer.seek((topic, 0), 0)
            assert len(consume_all(consumer, len(want), timeout=5)) == len(want)
        assert len(issued) >= 4, issued                 # renewed before each end
        lifetime["s"] = -60.0                           # from now on only expired tokens
        with pytest.raises(AuthenticationError) as failure:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                consumer.seek((topic, 0), 0)
                consumer.poll(0.5)
        assert "OAUTHBEARER" in str(failure.value)


# --- the mirror, and the gateway ---------------------------------------------------------------------
def test_mirror_between_two_sasl_ssl_clusters(brokers, tmp_path):
    from kafkacodec.mirror.process import Mirror, MirrorConfig

    source, target = brokers
    source.create_topic("mirrored", partitions=2)
    target.create_topic("mirrored", partitions=2)
    want = produce(source.bootstrap, "mirrored", 200, codec="zstd")
    config = MirrorConfig(source=source.bootstrap_of("SASL_SSL"), target=target.bootstrap_of("SASL_SSL"),
                          topics=["mirrored"], state_dir=str(tmp_path / "state"), until_caught_up=True,
                          request_timeout=15, progress=False,
                          source_security=source.security.java("SASL_SSL", "SCRAM-SHA-512"),
                          target_security=target.security.java("SASL_SSL", "PLAIN"))
    assert Mirror(config).run() == 0
    assert read_plain(target.bootstrap, "mirrored", len(want), 2) == want


def test_the_gateway_serves_a_sasl_ssl_cluster_to_old_clients(brokers, tmp_path):
    from kafkacodec.serve import Server
    from serve_support import kafka_python_read

    source, _ = brokers
    source.create_topic("gated", partitions=2)
    want_rows = produce(source.bootstrap, "gated", 80, codec="gzip")
    want: dict[tuple[str, int], list] = {}
    for partition, offset, key, value in want_rows:
        want.setdefault(("gated", partition), []).append((offset, key, value))
    with Server(upstream=source.bootstrap_of("SASL_SSL"), listen=("127.0.0.1", 0),
                upstream_security=source.security.java("SASL_SSL", "SCRAM-SHA-256")) as server:
        got = kafka_python_read(f"127.0.0.1:{server.port}", want, api_version=(0, 10, 1), timeout=60)
    assert got == want


# --- serve with TLS and SASL, read by Kafka's Java consumer (4.1.1 and 0.10.2.2) --------------------
@pytest.fixture(scope="module")
def secured_serve(brokers, tmp_path_factory):
    from kafkacodec.net.properties import BrokerSecurity
    from kafkacodec.serve import Server
    from serve_support import make_log_dir

    files = brokers[0].security
    log_dir = make_log_dir(tmp_path_factory.mktemp("javaserve") / "logs")
    security = BrokerSecurity.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.server.keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "kafkacodec.users.file": str(files.kafkacodec_users_file())})
    with Server([str(log_dir)], security=security) as server:
        yield server, log_dir, files


def _java(version: str, tmp_path: Path):
    from kafka_broker import client_classpath
    from serve_support import compile_java_driver

    cp = client_classpath(version)
    classes = tmp_path / f"classes-{version}"
    classes.mkdir()
    compile_java_driver(classes, cp)
    return cp, classes


@pytest.mark.parametrize(("protocol", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"), ("SSL", None)])
def test_kafkas_java_consumer_reads_serve_over_tls_and_sasl(secured_serve, tmp_path, protocol, mechanism):
    from serve_support import expected, java_read

    server, log_dir, files = secured_serve
    want = expected(log_dir, {"modern": 1, "mixed": 2})
    cp, classes = _java("4.1.1", tmp_path)
    port = next(l.port for l in server.listening if l.name == protocol)
    got = java_read(cp, classes, f"127.0.0.1:{port}", want, config=files.java(protocol, mechanism))
    assert got == want


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_0_10_2_java_consumer_reads_serve_with_raw_sasl_tokens(secured_serve, tmp_path, mechanism):
    """0.10.2.2: SaslHandshake v0 then raw tokens, a JKS truststore, Fetch v3 (down-converted):
    everything Kafka 4 refuses it (its fetches) or no longer offers."""
    from serve_support import expected, java_read

    server, log_dir, files = secured_serve
    want = expected(log_dir, {"legacy": 1, "v1only": 1})
    cp, classes = _java("0.10.2.2", tmp_path)
    port = next(l.port for l in server.listening if l.name == "SASL_SSL")
    got = java_read(cp, classes, f"127.0.0.1:{port}", want, config=files.java("SASL_SSL", mechanism, jks=True),
                    group=f"old-java-{mechanism}")
    assert got == want
