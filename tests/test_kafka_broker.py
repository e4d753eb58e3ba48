"""The real Kafka brokers the network tests use start, accept a topic and round-trip records
(kafka-python as the client: an independent implementation of the protocol); the secured one
(SASL_SSL and SSL listeners) serves confluent-kafka, kafka-python, aiokafka and Kafka's Java
consumer 4.1 with each mechanism and a client certificate, refuses wrong passwords and
certificates as Kafka does, and shows what Kafka 4 does with the 0.10.2 Java consumer."""

import logging
import shutil
import socket
import ssl
import struct
import time

import pytest

# the broker fixture is requested by name (getfixturevalue), so conftest cannot mark it
pytestmark = pytest.mark.broker


@pytest.mark.parametrize("fixture", ["kafka_broker", "kafka_broker_39"])
def test_broker_round_trip(request, fixture):
    broker = request.getfixturevalue(fixture)
    kafka = pytest.importorskip("kafka")
    broker.create_topic("smoke", partitions=2)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    for i in range(10):
        producer.send("smoke", value=b"v%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                   consumer_timeout_ms=10000)
    consumer.assign([kafka.TopicPartition("smoke", p) for p in (0, 1)])
    values = sorted(m.value for m in consumer)
    consumer.close()
    assert values == sorted(b"v%d" % i for i in range(10))
    # the broker wrote real segments in its log directory
    assert list(broker.log_dir.glob("smoke-0/*.log"))


def test_cluster_ids_never_start_with_a_dash():
    """1 in 64 random ids did: kafka-storage then refused `-t -...` and every broker test skipped."""
    from kafka_broker import _cluster_id

    ids = [_cluster_id() for _ in range(2000)]
    assert not [found for found in ids if found.startswith("-")]
    assert all(len(found) == 22 for found in ids)


# --- the secured broker: SASL_SSL and SSL listeners -----------------------------------------------
# One broker for the module (`kafka_broker_secured`, conftest.py); each test its own topic.
# What a client sees when the broker refuses it is asserted as Kafka 4.1 says it: that is what
# kafkacodec's own client must reproduce against the same broker, and its server must send.

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
QUIET = logging.getLogger("librdkafka")           # librdkafka's log through logging, not stderr


def _topic(broker, name: str, partitions: int = 2, count: int = 10) -> dict:
    """A topic with `count` records produced over PLAINTEXT: {(topic, partition): [(offset, key, value)]}."""
    from confluent_kafka import Producer

    broker.create_topic(name, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "logger": QUIET})
    for i in range(count):
        producer.produce(name, key=b"k%d" % i, value=b"%s %d" % (name.encode(), i), partition=i % partitions)
    assert producer.flush(30) == 0
    want: dict = {}
    for i in range(count):
        want.setdefault((name, i % partitions), []).append((i // partitions, b"k%d" % i, b"%s %d" % (name.encode(), i)))
    return want


def _confluent_round_trip(conf: dict, topic: str) -> list:
    """Produce 5 records and read them back with one client configuration."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({**conf, "logger": QUIET})
    for i in range(5):
        producer.produce(topic, value=b"secured %d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.partition.eof": False, "logger": QUIET})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.5):
                assert not msg.error(), msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _first_error(conf: dict, timeout: float = 20.0):
    """The first error a confluent-kafka client reports (error_cb) while it connects."""
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    producer = Producer({**conf, "error_cb": errors.append, "logger": QUIET})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        producer.poll(0.1)
        found = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
        if found:
            return found[0]
    raise AssertionError(f"no error within {timeout} s: {errors}")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_over_sasl_ssl(kafka_broker_secured, mechanism):
    broker = kafka_broker_secured
    topic = f"sasl-{mechanism.lower()}"
    broker.create_topic(topic)
    conf = broker.security.librdkafka(broker.bootstrap_of("SASL_SSL"), "SASL_SSL", mechanism)
    assert _confluent_round_trip(conf, topic) == [b"secured %d" % i for i in range(5)]


def test_confluent_kafka_over_ssl_with_a_client_certificate(kafka_broker_secured):
    broker = kafka_broker_secured
    broker.create_topic("mtls")
    conf = broker.security.librdkafka(broker.bootstrap_of("SSL"), "SSL")
    assert "ssl.certificate.location" in conf
    assert _confluent_round_trip(conf, "mtls") == [b"secured %d" % i for i in range(5)]


@pytest.mark.parametrize("mechanism, user, password, message", [
    ("SCRAM-SHA-256", None, "wrong", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ("SCRAM-SHA-512", None, "wrong", "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("PLAIN", None, "wrong", "Invalid username or password"),
    # SCRAM users exist for their own mechanism only: alice is SCRAM-SHA-256's
    ("SCRAM-SHA-512", "alice", "alice-secret", "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("PLAIN", "nobody", "bob-secret", "Invalid username or password"),
])
def test_a_wrong_password_is_refused_by_the_broker(kafka_broker_secured, mechanism, user, password, message):
    """The broker's SaslAuthenticate answer: SASL_AUTHENTICATION_FAILED and its message, which
    librdkafka reports as _AUTHENTICATION ("SASL authentication error: Authentication failed
    during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
    PLAIN: "Authentication failed: Invalid username or password")."""
    from confluent_kafka import KafkaError

    broker = kafka_broker_secured
    mark = broker.log_mark()
    error = _first_error(broker.security.librdkafka(broker.bootstrap_of("SASL_SSL"), "SASL_SSL", mechanism,
                                                    user=user, password=password))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "SASL authentication error: Authentication failed" in error.str() and message in error.str()
    deadline = time.monotonic() + 10              # the broker logs it on its network thread
    while "Failed authentication with /127.0.0.1" not in broker.log_since(mark):
        assert time.monotonic() < deadline, broker.log_since(mark)[-2000:]
        time.sleep(0.1)


def _api_versions_over_tls(port: int, context: ssl.SSLContext) -> int:
    """ApiVersions v0 over TLS: the response's error code (raises what the TLS layer raised)."""
    request = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(struct.pack(">i", len(request)) + request)
            data = b""
            while len(data) < 10:
                chunk = tls.recv(10 - len(data))
                if not chunk:
                    raise ConnectionError("the broker closed the connection")
                data += chunk
    size, correlation, error = struct.unpack(">iih", data)
    assert correlation == 1
    return error


@pytest.mark.parametrize("certificate", ["client", "stranger", None])
def test_the_ssl_listener_refuses_a_certificate_from_an_untrusted_ca(kafka_broker_secured, certificate):
    """Mutual TLS (ssl.client.auth=required): the CA's client certificate gets an answer; one
    from another CA, or none, ends in a TLS alert from the broker (with TLS 1.3 it arrives after
    the client's side of the handshake, at the first read).  Python's ssl sends the stranger's
    certificate as it is; librdkafka and Java keep back one whose issuer the broker does not
    list, so they would test the "none" case only."""
    broker = kafka_broker_secured
    files = broker.security
    context = ssl.create_default_context(cafile=str(files.ca))
    if certificate is not None:
        pair = getattr(files, certificate)
        context.load_cert_chain(str(pair.cert), str(pair.key))
    if certificate == "client":
        assert _api_versions_over_tls(broker.listeners["SSL"], context) == 0
        return
    mark = broker.log_mark()
    with pytest.raises((ssl.SSLError, ConnectionError)) as refused:
        _api_versions_over_tls(broker.listeners["SSL"], context)
    # Java's alerts (TLS 1.3): certificate_unknown (46) for an unknown issuer, bad_certificate (42)
    # for none (not TLS 1.3's certificate_required)
    assert ("ALERT_CERTIFICATE_UNKNOWN" if certificate else "ALERT_BAD_CERTIFICATE") in str(refused.value)
    deadline = time.monotonic() + 10
    while "(SSL handshake failed)" not in broker.log_since(mark):
        assert time.monotonic() < deadline, broker.log_since(mark)[-2000:]
        time.sleep(0.1)


def test_a_client_refuses_a_broker_its_ca_did_not_sign(kafka_broker_secured):
    from confluent_kafka import KafkaError

    broker = kafka_broker_secured
    error = _first_error(broker.security.librdkafka(broker.bootstrap_of("SASL_SSL"), "SASL_SSL", "PLAIN",
                                                    ca=broker.security.other_ca))
    # librdkafka names the failed handshake _SSL, or _TRANSPORT when it reports it as the
    # connection's failure; either way the message says why.
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT), error
    assert "certificate verify failed" in error.str(), error


def test_kafka_python_and_aiokafka_over_sasl_ssl(kafka_broker_secured):
    """The settings `SecurityFiles` gives the other Python clients work as they are."""
    pytest.importorskip("kafka")
    pytest.importorskip("aiokafka")
    from serve_support import aiokafka_read, kafka_python_read

    broker = kafka_broker_secured
    want = _topic(broker, "py-clients")
    files, bootstrap = broker.security, broker.bootstrap_of("SASL_SSL")
    conf = files.kafka_python(bootstrap, "SASL_SSL", "SCRAM-SHA-512")
    assert kafka_python_read(conf.pop("bootstrap_servers"), want, timeout=30, **conf) == want
    conf = files.aiokafka(bootstrap, "SASL_SSL", "SCRAM-SHA-256")
    assert aiokafka_read(conf.pop("bootstrap_servers"), want, timeout=30, **conf) == want
    conf = files.kafka_python(broker.bootstrap_of("SSL"), "SSL")
    assert kafka_python_read(conf.pop("bootstrap_servers"), want, timeout=30, **conf) == want


# --- Kafka's Java consumer (tests/java/ServeConsumer.java) ----------------------------------------
CURRENT_JAVA, OLD_JAVA = "4.1.1", "0.10.2.2"


@pytest.fixture(scope="module")
def java_clients(tmp_path_factory):
    """ServeConsumer compiled against each kafka-clients version, on first use: version -> (classpath, classes)."""
    from serve_support import compile_java_driver, java_consumer_classpath

    built: dict = {}

    def get(version: str):
        if version not in built:
            cp = java_consumer_classpath(version)
            if cp is None:
                pytest.skip(f"needs java, javac and Maven (kafka-clients {version})")
            if version == OLD_JAVA and shutil.which("keytool") is None:
                pytest.skip("needs the JDK's keytool (JKS stores for kafka-clients before 2.7)")
            classes = tmp_path_factory.mktemp(f"java-{version}")
            compile_java_driver(classes, cp)
            built[version] = cp, classes
        return built[version]

    return get


@pytest.fixture(scope="module")
def java_topic(kafka_broker_secured):
    return _topic(kafka_broker_secured, "java-secured")


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", m) for m in MECHANISMS] + [("SSL", None)])
def test_java_consumer_over_tls(kafka_broker_secured, java_clients, java_topic, protocol, mechanism):
    """kafka-clients 4.1 with PEM stores (ssl.truststore.type=PEM, and a PEM keystore over SSL),
    by assign."""
    from serve_support import java_read

    broker = kafka_broker_secured
    cp, classes = java_clients(CURRENT_JAVA)
    config = broker.security.java(protocol, mechanism)
    assert config["ssl.truststore.type"] == "PEM"
    assert java_read(cp, classes, broker.bootstrap_of(protocol), java_topic, timeout=30, config=config) == java_topic


def test_java_consumer_group_over_sasl_ssl(kafka_broker_secured, java_clients, java_topic):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient
    from serve_support import java_read

    broker = kafka_broker_secured
    cp, classes = java_clients(CURRENT_JAVA)
    config = broker.security.java("SASL_SSL", "SCRAM-SHA-512")
    got = java_read(cp, classes, broker.bootstrap_of("SASL_SSL"), java_topic, group="java-sasl", timeout=30,
                    config=config)
    assert got == java_topic
    # the group's commit went through the SASL_SSL listener
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("java-sasl")])["java-sasl"]
    offsets = {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions}
    assert offsets == {key: rows[-1][0] + 1 for key, rows in java_topic.items()}


def test_java_consumer_reports_a_wrong_password(kafka_broker_secured, java_clients, java_topic):
    """kafka-clients 4.1 raises the broker's message from poll()."""
    from serve_support import run_java_consumer

    broker = kafka_broker_secured
    cp, classes = java_clients(CURRENT_JAVA)
    run = run_java_consumer(cp, classes, broker.bootstrap_of("SASL_SSL"), "java-secured:0:5", timeout=30,
                            config=broker.security.java("SASL_SSL", "SCRAM-SHA-256", password="wrong"))
    assert run.returncode == 1, run.stderr[-3000:]
    assert ("failed: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256") in run.stderr


# Kafka 0.10.2.2's consumer (JKS stores; SaslHandshake v0, then the SASL tokens without
# SaslAuthenticate framing; Fetch v0-3; JDK 11+ needs jaxb-api on its classpath for SCRAM).
OLD_CLIENT_LOG = (r"Set SASL client state to|Recorded API versions for node 1|too new to support|"
                  r"disconnected|EOFException")


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", m) for m in MECHANISMS] + [("SSL", None)])
def test_kafka_4_refuses_the_0_10_2_consumer_at_fetch(kafka_broker_secured, java_clients, java_topic,
                                                      protocol, mechanism):
    """What the 0.10.2.2 consumer does against Kafka 4.1: TLS with the JKS stores works, and so
    does its SASL -- Kafka 4.1 still takes SaslHandshake v0 (versions 0-1) and the raw tokens
    after it, for PLAIN and SCRAM alike: the client's SASL state reaches COMPLETE.  Then
    ApiVersions says Fetch 4-18 ("Fetch(1): 4 to 18 [unusable: node too new]": KIP-896 removed
    Fetch v0-3 in Kafka 4.0), and the client fails every fetch before sending it with
    "UnsupportedVersionException: The broker is too new to support FETCH version 3", logged at
    DEBUG only, in a busy loop: poll() never raises and never returns a record (ServeConsumer
    ends with "timed out: {} of ...", exit 2)."""
    from serve_support import watch_java_consumer

    broker = kafka_broker_secured
    cp, classes = java_clients(OLD_JAVA)
    config = broker.security.java(protocol, mechanism, jks=True)
    assert config["ssl.truststore.type"] == "JKS"
    found, lines = watch_java_consumer(cp, classes, broker.bootstrap_of(protocol), "java-secured:0:5",
                                       until=r"The broker is too new to support FETCH version 3",
                                       keep=OLD_CLIENT_LOG, config=config, timeout=30)
    assert found, lines
    states = [line.rsplit(" ", 1)[1] for line in lines if "Set SASL client state to" in line]
    # every connection (the bootstrap's, then node 1's) authenticates
    logins = ["SEND_HANDSHAKE_REQUEST", "RECEIVE_HANDSHAKE_RESPONSE", "INITIAL", "INTERMEDIATE", "COMPLETE"]
    assert states == ([] if mechanism is None else logins * (len(states) // len(logins) or 1)), states
    assert any("Fetch(1): 4 to 18 [unusable: node too new]" in line for line in lines), lines
    assert not any("disconnected" in line for line in lines), lines


def test_kafka_4_closes_the_connection_of_a_0_10_2_consumer_with_a_wrong_password(
        kafka_broker_secured, java_clients):
    """After SaslHandshake v0 there is no SaslAuthenticate to carry an error: the broker logs
    "Failed authentication" and closes the connection; the client sees an EOFException, "Node
    -1 disconnected" (DEBUG), and tries again without end."""
    from serve_support import watch_java_consumer

    broker = kafka_broker_secured
    cp, classes = java_clients(OLD_JAVA)
    mark = broker.log_mark()
    found, lines = watch_java_consumer(cp, classes, broker.bootstrap_of("SASL_SSL"), "java-secured:0:5",
                                       until=r"Node -1 disconnected", keep=OLD_CLIENT_LOG, timeout=30,
                                       config=broker.security.java("SASL_SSL", "PLAIN", password="wrong", jks=True))
    assert found, lines
    states = [line.rsplit(" ", 1)[1] for line in lines if "Set SASL client state to" in line]
    assert states == ["SEND_HANDSHAKE_REQUEST", "RECEIVE_HANDSHAKE_RESPONSE", "INITIAL", "INTERMEDIATE"]
    assert any("java.io.EOFException" in line for line in lines), lines
    deadline = time.monotonic() + 10
    while "(Authentication failed: Invalid username or password)" not in broker.log_since(mark):
        assert time.monotonic() < deadline, broker.log_since(mark)[-2000:]
        time.sleep(0.1)


def test_client_properties_files_read_back_in_java(tmp_path):
    """properties_text, what the Java consumer and the broker read their settings from, as
    java.util.Properties.load reads it (the JDK as oracle)."""
    from kafka_broker import properties_text
    from security_support import java_properties

    settings = {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                    'username="a b" password="p\\"w=#:!";',
                "key with = and :": " leading blank, trailing \t\n\r\f",
                "#not a comment": "!", "unicode": "é ü \u20ac \U0001f600", "empty": ""}
    path = tmp_path / "client.properties"
    path.write_text(properties_text(settings), encoding="latin-1")
    assert java_properties([path]) == [settings]


def test_the_same_settings_configure_kafkacodec(tmp_path):
    """What the harness gives Kafka and its clients is what kafkacodec reads too: the broker's
    TLS/SASL properties (with the users file for the same users) for `serve`, each client's
    settings for its client side."""
    pytest.importorskip("trustme")
    from kafka_broker import SecurityFiles
    from kafkacodec.net.properties import BrokerSecurity, ClientSecurity
    from kafkacodec.net.users import UsersFile

    files = SecurityFiles.create(tmp_path)
    broker = BrokerSecurity.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:9093,SSL://127.0.0.1:9094",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL",
        "kafkacodec.users.file": str(files.kafkacodec_users_file()), **files.broker_properties()})
    assert broker.listener("SSL").uses_tls and not broker.listener("SSL").uses_sasl
    assert broker.listener("SASL_SSL").uses_sasl
    users = UsersFile.load(files.kafkacodec_users_file())
    assert {(name, m) for name in users.names() for m in users.mechanisms(name)} == {
        (name, m) for m, (name, _) in files.users.items()}
    for protocol, mechanism in [("SASL_SSL", m) for m in MECHANISMS] + [("SSL", None)]:
        user = files.users[mechanism][0] if mechanism else None
        for settings in (files.java(protocol, mechanism),
                         {k: v for k, v in files.librdkafka("-", protocol, mechanism).items()
                          if k != "bootstrap.servers"}):
            client = ClientSecurity.from_properties(settings)
            assert (client.security_protocol, client.sasl_mechanism, client.sasl_username) == (
                protocol, mechanism, user), settings


def test_the_client_principals_are_what_java_names(tmp_path):
    """CLIENT_PRINCIPAL and STRANGER_PRINCIPAL: the subjects as X500Principal.getName() prints
    them, which is the name Kafka's default principal builder gives a TLS client (User:...)."""
    pytest.importorskip("trustme")
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from kafka_broker import CLIENT_PRINCIPAL, STRANGER_PRINCIPAL, SecurityFiles
    from security_support import java_subject_names

    files = SecurityFiles.create(tmp_path)
    ders = []
    for pair in (files.client, files.stranger):
        der = tmp_path / f"{pair.cert.stem}.der"
        der.write_bytes(x509.load_pem_x509_certificate(pair.cert.read_bytes()).public_bytes(Encoding.DER))
        ders.append(der)
    assert java_subject_names(ders) == [CLIENT_PRINCIPAL, STRANGER_PRINCIPAL]
