"""`serve --upstream --produce`: producers write to the cluster through the gateway
(kafkacodec/serve/produce.py), old ones (Produce v0-2, which Kafka 4 refuses) up-converted.

Each producer's records are read back from the cluster itself by confluent-kafka, the oracle:
every key and value, in order, and the v1 producers' timestamps.  Old producers are
kafka-python at api_version (0, 9) (Produce v1, magic 0) and (0, 10, 1) (Produce v2, magic 1)
librdkafka told the broker is 0.9.0.1 or 0.10.0.0 (no ApiVersions), and Kafka's own Java
producer 0.9.0.1 (Produce v1) and 0.10.2.2 (Produce v2) from Maven Central; new ones pass through
(confluent-kafka, idempotent too).  The librdkafka mock cluster gives the fast cases; a real
Kafka 4.1 broker, which closes the connection of every old producer, the real one."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from blocking_client import BlockingClient  # noqa: E402
from kafkacodec import MemoryRecordsBuilder  # noqa: E402
from kafkacodec.protocol import control  # noqa: E402
from kafkacodec.protocol import messages as m  # noqa: E402
from kafkacodec.protocol.api import Error  # noqa: E402
from kafkacodec.serve import Server  # noqa: E402

pytestmark = pytest.mark.service

OLD_PRODUCERS = {"kafka-python 0.9": ("kafka-python", (0, 9)),
                 "kafka-python 0.10.1": ("kafka-python", (0, 10, 1)),
                 "librdkafka 0.9.0.1": ("librdkafka", "0.9.0.1"),
                 "librdkafka 0.10.0.0": ("librdkafka", "0.10.0.0")}


def rows(tag: str, n: int) -> list[tuple[bytes | None, bytes]]:
    return [(None if i % 9 == 4 else b"%s-%d" % (tag.encode(), i), b"%s value %d " % (tag.encode(), i) * (1 + i % 5))
            for i in range(n)]


def produce_with(kind: str, version, port: int, topic: str, codec: str, data) -> None:
    if kind == "kafka-python":
        producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", api_version=version,
                                       compression_type=None if codec == "none" else codec,
                                       linger_ms=5, acks=1)
        try:
            for key, value in data:
                producer.send(topic, key=key, value=value, partition=0, timestamp_ms=1_700_000_000_000)
            producer.flush(30)
        finally:
            producer.close(10)
        return
    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "api.version.request": False,
                            "broker.version.fallback": version, "compression.type": codec,
                            "linger.ms": 5, "message.timeout.ms": 30000})
    failed = []
    for key, value in data:
        producer.produce(topic, key=key, value=value, partition=0, timestamp=1_700_000_000_000,
                         on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert producer.flush(30) == 0 and not failed, failed


def read_cluster(bootstrap: str, topic: str, count: int) -> list[tuple]:
    """confluent-kafka reading partition 0 of the cluster itself."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="module")
def gateway():
    from mock_cluster import MockCluster

    cluster = MockCluster(3)
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        yield cluster, server


@pytest.mark.parametrize("producer", list(OLD_PRODUCERS))
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_old_producers_write_the_cluster_through_the_gateway(gateway, producer, codec):
    cluster, server = gateway
    kind, version = OLD_PRODUCERS[producer]
    if kind == "kafka-python" and codec == "lz4" and version == (0, 9):
        pytest.skip("kafka-python writes no lz4 at magic 0")
    topic = f"old-{producer.replace(' ', '-')}-{codec}"
    cluster.create_topic(topic)
    data = rows(f"{producer}/{codec}", 60)
    produce_with(kind, version, server.port, topic, codec, data)
    got = read_cluster(cluster.bootstrap, topic, len(data))
    assert [(k, v) for _, k, v, _ in got] == data
    assert [o for o, *_ in got] == list(range(len(data)))
    magic0 = version in ((0, 9), "0.9.0.1")
    assert {t for *_, t in got} == ({-1} if magic0 else {1_700_000_000_000})


def test_new_producers_pass_through_idempotent_too(gateway):
    cluster, server = gateway
    topic = "new-producers"
    cluster.create_topic(topic)
    data = rows("new", 50)
    for idempotent in (False, True):
        producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "linger.ms": 5,
                                "enable.idempotence": idempotent, "compression.type": "zstd"})
        for key, value in data:
            producer.produce(topic, key=key, value=value, partition=0, headers=[("h", b"1")])
        assert producer.flush(30) == 0
    got = read_cluster(cluster.bootstrap, topic, 2 * len(data))
    assert [(k, v) for _, k, v, _ in got] == data * 2


# --- Kafka's own old Java producers -----------------------------------------------------------
JAVA_PRODUCER = Path(__file__).with_name("java") / "ServeProducer.java"
JAVA_VERSIONS = ("0.9.0.1", "0.10.2.2")


def java_rows(n: int) -> list[tuple[bytes | None, bytes]]:
    """What ServeProducer sends."""
    return [(None if i % 9 == 4 else b"key-%d" % i, b"value %d " % i * (1 + i % 5)) for i in range(n)]


@pytest.fixture(scope="module")
def java_producers(tmp_path_factory):
    """{version: (classpath, compiled driver)} for kafka-clients 0.9.0.1 and 0.10.2.2."""
    from serve_support import java_consumer_classpath

    if shutil.which("javac") is None:
        pytest.skip("needs java and javac")
    drivers = {}
    for version in JAVA_VERSIONS:
        cp = java_consumer_classpath(version)
        if cp is None:
            pytest.skip(f"needs Maven and kafka-clients {version}")
        classes = tmp_path_factory.mktemp(f"producer-{version}")
        subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(JAVA_PRODUCER)], check=True,
                       capture_output=True)
        drivers[version] = (cp, classes)
    return drivers


def java_produce(driver, bootstrap: str, topic: str, count: int, codec: str,
                 max_block_ms: int = 30000) -> subprocess.CompletedProcess:
    cp, classes = driver
    return subprocess.run(["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                           "-cp", f"{cp}:{classes}", "ServeProducer", bootstrap, topic, "0",
                           str(count), codec, str(max_block_ms)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version", JAVA_VERSIONS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kafkas_old_java_producers_write_through_the_gateway(gateway, java_producers, version, codec):
    cluster, server = gateway
    topic = f"java-{version}-{codec}"
    cluster.create_topic(topic)
    run = java_produce(java_producers[version], f"127.0.0.1:{server.port}", topic, 60, codec)
    assert run.returncode == 0 and "sent 60" in run.stdout, run.stderr[-2000:]
    got = read_cluster(cluster.bootstrap, topic, 60)
    assert [(k, v) for _, k, v, _ in got] == java_rows(60)
    if version == "0.9.0.1":                             # magic 0: no timestamps
        assert {t for *_, t in got} == {-1}
    else:                                               # the producer's clock (CreateTime)
        assert all(abs(t - time.time() * 1000) < 600_000 for *_, t in got)


def produce_v2(port: int, topic: str, records: bytes, acks: int = 1, version: int = 2):
    with BlockingClient("127.0.0.1", port) as client:
        frame = control.encode_request(control.Outgoing(m.PRODUCE_REQUEST, {
            "transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
            version, client.next_correlation_id())
        answer = control.decode_response(m.PRODUCE_RESPONSE, client.request(frame), version)
    return answer.responses[0].partition_responses[0]


def a_new_topic_written(cluster, server, topic: str):
    """`topic` created on the cluster and one gzip magic-1 set (the builder, its bytes) produced
    through the gateway once the gateway knows the topic."""
    cluster.create_topic(topic)
    good = MemoryRecordsBuilder(magic=1, compression="gzip")
    good.append(1_700_000_000_000, b"k", b"v")
    data = bytes(good.build())
    deadline = time.monotonic() + 20                    # until the gateway learns the new topic
    while (code := produce_v2(server.port, topic, data).error_code) != Error.NONE:
        assert code == Error.UNKNOWN_TOPIC_OR_PARTITION and time.monotonic() < deadline, code
        time.sleep(0.2)
    return good, data


def test_refused_sets_get_the_code_kafka_3_9_answered(gateway):
    cluster, server = gateway
    good, data = a_new_topic_written(cluster, server, "refusals")
    data = bytearray(data)
    data[-1] ^= 1                                       # the wrapper's checksum no longer holds
    assert produce_v2(server.port, "refusals", bytes(data)).error_code == Error.CORRUPT_MESSAGE
    v2 = MemoryRecordsBuilder(magic=2)
    v2.append(1, b"k", b"v")                            # a v2 batch in a Produce v2
    assert produce_v2(server.port, "refusals", v2.build()).error_code == Error.INVALID_RECORD
    assert produce_v2(server.port, "no-such-topic", bytes(good.build())).error_code == \
        Error.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("kind", ["small", "gzip"])
def test_up_conversion_leaves_the_loop_to_other_connections(gateway, monkeypatch, kind):
    """A message set being up-converted (held here until another connection has its answer)
    does not stop the gateway: the conversion runs on the converter thread, so a Metadata
    request on a second connection is answered meanwhile.  On the loop, it would wait for the
    release that comes only after that answer: the client's timeout fails the test.  "small":
    a set the loop would convert, with that turned off; "gzip": a small gzip set, which the
    loop never converts (it may inflate a thousandfold)."""
    import threading

    import kafkacodec
    from kafkacodec.serve import produce

    cluster, server = gateway
    _, data = a_new_topic_written(cluster, server, "held")
    entered, release = threading.Event(), threading.Event()
    up_convert = kafkacodec.up_convert

    def held(records, *args, **kwargs):
        entered.set()
        release.wait(60)
        return up_convert(records, *args, **kwargs)

    monkeypatch.setattr(kafkacodec, "up_convert", held)
    if kind == "small":
        monkeypatch.setattr(produce, "INLINE_BYTES", 0)
        monkeypatch.setattr(produce, "INLINE_UNCOMPRESSED_BYTES", 0)
    else:
        builder = MemoryRecordsBuilder(magic=1, compression="gzip")
        builder.append(1_700_000_000_000, b"k", b"v" * 100)
        data = bytes(builder.build())
        assert len(data) < produce.INLINE_BYTES
    produced: list[int] = []
    producer = threading.Thread(target=lambda: produced.append(
        produce_v2(server.port, "held", data).error_code))
    producer.start()
    try:
        assert entered.wait(20)
        with BlockingClient("127.0.0.1", server.port, timeout=10) as other:
            assert [t.name for t in other.metadata(["held"], api_version=1).topics] == ["held"]
        assert not produced                             # still held
    finally:
        release.set()
        producer.join(30)
    assert produced == [Error.NONE]


@pytest.mark.parametrize("bound", ["requests", "bytes", "inline"])
def test_a_connections_sets_are_pipelined_and_answered_in_turn(gateway, monkeypatch, bound):
    """Produce v2 requests sent back to back on one connection, the first held in conversion:
    the gateway reads ahead up to PIPELINED_REQUESTS requests (or PIPELINED_BYTES of message
    sets) and no further; a Metadata request among them is answered in its turn; every answer
    comes in request order, and the sets reach the cluster in the order sent.  "inline": the
    lz4 sets are small enough to convert on the loop, and still wait behind the first."""
    import struct
    import threading

    import kafkacodec
    from kafkacodec.serve import produce

    cluster, server = gateway
    topic = f"pipelined-{bound}"
    a_new_topic_written(cluster, server, topic)         # offset 0
    release = threading.Event()
    up_convert = kafkacodec.up_convert

    def held(records, *args, **kwargs):
        release.wait(60)
        return up_convert(records, *args, **kwargs)

    monkeypatch.setattr(kafkacodec, "up_convert", held)
    sets = []
    for n in range(8):
        builder = MemoryRecordsBuilder(magic=1, compression="lz4" if n % 2 else "none")
        for i in range(3):
            builder.append(1_700_000_000_000 + i, b"%d-%d" % (n, i), b"v" * 300)
        sets.append(bytes(builder.build()))
    # 5 requests; or the bytes of the first two sets (the third does not fit)
    limits = (5, len(sets[0]) + len(sets[1])) if bound == "bytes" else (5, 8 << 20)
    most = 2 if bound == "bytes" else 5
    monkeypatch.setattr(produce, "PIPELINED_REQUESTS", limits[0])
    monkeypatch.setattr(produce, "PIPELINED_BYTES", limits[1])
    small = max(map(len, sets[1::2]))
    assert small < min(map(len, sets[0::2]))
    monkeypatch.setattr(produce, "INLINE_BYTES", small if bound == "inline" else 0)
    monkeypatch.setattr(produce, "INLINE_UNCOMPRESSED_BYTES", 0)
    frames = []
    for n, records in enumerate(sets):
        frames.append(control.encode_request(control.Outgoing(m.PRODUCE_REQUEST, {
            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
            2, len(frames) + 1))
        if n == limits[0] - 1:                         # right after the last one pipelined
            frames.append(control.encode_request(control.Outgoing(m.METADATA_REQUEST, {
                "topics": [{"name": topic}]}), 1, len(frames) + 1))
    with BlockingClient("127.0.0.1", server.port, timeout=30) as client:
        client.send(b"".join(frames))
        seen, deadline = 0, time.monotonic() + 20
        while time.monotonic() < deadline:               # read ahead while the first is held
            seen = max([seen] + [c.reserved for c in list(server.connections)])
            if seen >= most:
                break
            time.sleep(0.01)
        time.sleep(0.5)                                  # and no further
        seen = max([seen] + [c.reserved for c in list(server.connections)])
        assert seen == most
        release.set()
        answers = [client.receive() for _ in frames]
    assert [struct.unpack_from(">i", a)[0] for a in answers] == list(range(1, len(frames) + 1))
    offsets = []
    for answer in answers:
        if len(answer) > 4 and struct.unpack_from(">i", answer)[0] == limits[0] + 1:
            meta = control.decode_response(m.METADATA_RESPONSE, answer, 1)
            assert [t.name for t in meta.topics] == [topic]
            continue
        got = control.decode_response(m.PRODUCE_RESPONSE, answer, 2).responses[0].partition_responses[0]
        assert got.error_code == Error.NONE
        offsets.append(got.base_offset)
    assert offsets == [1 + 3 * n for n in range(8)]
    got = read_cluster(cluster.bootstrap, topic, 1 + 3 * 8)
    assert [k for _, k, _, _ in got[1:]] == [b"%d-%d" % (n, i) for n in range(8) for i in range(3)]


def test_an_answer_being_made_is_not_a_stalled_write_and_stop_waits_for_it(gateway, monkeypatch):
    """Pipelined answers wait in the connection's queue while their sets are converted and
    forwarded: the response-write deadline (300 ms here) does not count that wait, and a
    server stopping meanwhile sends them before it closes the connection."""
    import threading

    import kafkacodec

    cluster, _ = gateway
    topic = "pipelined-slow"
    release = threading.Event()
    up_convert = kafkacodec.up_convert

    def held(records, *args, **kwargs):
        release.wait(60)
        return up_convert(records, *args, **kwargs)

    server = Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), produce=True,
                    response_write_timeout_ms=300, shutdown_timeout_s=20).start()
    try:
        a_new_topic_written(cluster, server, topic)
        monkeypatch.setattr(kafkacodec, "up_convert", held)
        builder = MemoryRecordsBuilder(magic=1)
        builder.append(1_700_000_000_000, b"k", b"v")
        records = bytes(builder.build())
        frames = [control.encode_request(control.Outgoing(m.PRODUCE_REQUEST, {
            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
            2, n) for n in (1, 2)]
        with BlockingClient("127.0.0.1", server.port, timeout=30) as client:
            client.send(b"".join(frames))
            time.sleep(2.0)                              # past the write deadline, many sweeps
            stopping = threading.Thread(target=server.stop)
            stopping.start()
            time.sleep(0.5)
            release.set()
            answers = [control.decode_response(m.PRODUCE_RESPONSE, client.receive(), 2)
                       for _ in frames]
            stopping.join(30)
            with pytest.raises(ConnectionError):         # then closed: the server stopped
                client.receive()
    finally:
        release.set()
        server.stop()
    assert [(a.responses[0].partition_responses[0].error_code, a.responses[0].partition_responses[0].base_offset) for a in answers] == [(0, 1), (0, 2)]


def test_without_produce_the_gateway_stays_read_only():
    from mock_cluster import MockCluster

    cluster = MockCluster(1)
    cluster.create_topic("ro")
    good = MemoryRecordsBuilder(magic=1)
    good.append(1, b"k", b"v")
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0)) as server:
        assert produce_v2(server.port, "ro", good.build()).error_code == Error.POLICY_VIOLATION
    with pytest.raises(ValueError, match="upstream"):
        Server(log_dirs=["/nonexistent"], produce=True)


def test_writes_need_a_write_rule(tmp_path):
    from kafkacodec.net.acl import Acl

    acl = Acl.parse("User:alice orders\nUser:bob Write:orders-*\nUser:bob TransactionalId:etl-*\n")
    assert acl.allows_transactional_id("User:bob", "etl-7") and not acl.allows_transactional_id("User:alice", "etl-7")
    assert not acl.allows_write("User:bob", "etl-7")
    assert acl.allows_topic("User:alice", "orders") and not acl.allows_write("User:alice", "orders")
    assert acl.allows_write("User:bob", "orders-eu") and not acl.allows_topic("User:bob", "orders-eu")
    with pytest.raises(ValueError, match="topic name"):
        Acl.parse("User:bob Write:bad/name\n")


@pytest.mark.broker
def test_old_producers_write_kafka_4_through_the_gateway(kafka_broker):
    topic = "old-producers-k4"
    kafka_broker.create_topic(topic, 1)
    data = rows("k4", 40)
    # Kafka 4 closes the connection of a Produce v0-2: the old producer never gets through
    with pytest.raises(kafka.errors.KafkaError):
        producer = kafka.KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, api_version=(0, 10, 1),
                                       request_timeout_ms=3000, max_block_ms=5000, retries=0)
        try:
            producer.send(topic, key=b"k", value=b"v", partition=0).get(timeout=10)
        finally:
            producer.close(5)
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        produce_with("kafka-python", (0, 9), server.port, topic, "gzip", data)
        produce_with("kafka-python", (0, 10, 1), server.port, topic, "snappy", data)
        produce_with("librdkafka", "0.10.0.0", server.port, topic, "lz4", data)
    got = read_cluster(kafka_broker.bootstrap, topic, 3 * len(data))
    assert [(k, v) for _, k, v, _ in got] == data * 3
    assert [t for *_, t in got] == [-1] * len(data) + [1_700_000_000_000] * 2 * len(data)


@pytest.mark.broker
def test_kafkas_old_java_producers_write_kafka_4_through_the_gateway(kafka_broker, java_producers):
    topic = "java-producers-k4"
    kafka_broker.create_topic(topic, 1)
    # directly, Kafka 4.1 turns the 0.10.2 producer away: it never gets its metadata
    direct = java_produce(java_producers["0.10.2.2"], kafka_broker.bootstrap, topic, 1, "none",
                          max_block_ms=5000)
    assert direct.returncode == 1 and "failed:" in direct.stderr, direct.stdout
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        for version, codec in (("0.9.0.1", "gzip"), ("0.10.2.2", "lz4")):
            run = java_produce(java_producers[version], f"127.0.0.1:{server.port}", topic, 40, codec)
            assert run.returncode == 0, run.stderr[-2000:]
    got = read_cluster(kafka_broker.bootstrap, topic, 80)
    assert [(k, v) for _, k, v, _ in got] == java_rows(40) * 2


@pytest.mark.broker
def test_a_log_append_time_topic_gets_what_kafka_3_9_answered(kafka_broker, kafka_broker_39):
    """On a topic with message.timestamp.type=LogAppendTime, Kafka 3.9 refuses a message set that
    carries the LogAppendTime attribute itself and stamps the others with its append time,
    answering that time.  The gateway asks the Kafka 4 cluster the topic's type (DescribeConfigs)
    and answers the same sets with the same codes; the records land stamped by the cluster."""
    from kafkacodec import TimestampType

    topic = "log-append-time"
    for broker in (kafka_broker, kafka_broker_39):
        broker.create_topic(topic, 1, config={"message.timestamp.type": "LogAppendTime"})
    sets = {}
    for kind in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
        for codec in ("none", "gzip"):
            builder = MemoryRecordsBuilder(magic=1, compression=codec, timestamp_type=kind)
            builder.append(1_700_000_000_000, b"k", b"%s %s" % (kind.name.encode(), codec.encode()))
            sets[(kind.name, codec)] = bytes(builder.build())
    started = time.time() * 1000
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        answers = {where: {key: produce_v2(port, topic, data) for key, data in sets.items()}
                   for where, port in (("kafka 3.9", kafka_broker_39.port), ("gateway", server.port))}
    codes = {where: {key: a.error_code for key, a in got.items()} for where, got in answers.items()}
    assert codes["kafka 3.9"][("CREATE_TIME", "none")] == Error.NONE
    assert codes["kafka 3.9"][("LOG_APPEND_TIME", "none")] == Error.INVALID_TIMESTAMP
    assert codes["gateway"] == codes["kafka 3.9"]
    for got in answers.values():
        for key, answer in got.items():      # Produce v2 answers the append time of a LogAppendTime topic
            assert (answer.log_append_time_ms >= started) == (answer.error_code == Error.NONE), key
    accepted = sum(code == Error.NONE for code in codes["gateway"].values())
    landed = read_cluster(kafka_broker.bootstrap, topic, accepted)
    assert len(landed) == accepted and all(t >= started for *_, t in landed)   # the cluster's stamp


# --- transactional producers (serve/transactions.py) ---------------------------------------------

def read_partitions(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, list[bytes]]:
    """confluent-kafka reading the cluster itself: each partition's values, in offset order."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle", "enable.auto.commit": False,
                            "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(ended) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
                continue
            out[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.broker
def test_a_transactional_producer_writes_kafka_4_through_the_gateway(kafka_broker):
    """confluent-kafka with a transactional.id, through the gateway to Kafka 4.1: the gateway is
    its transaction coordinator and forwards InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn to the cluster's coordinators; its batches carry the id on.  A
    committed transaction, an aborted one, and one that commits a group's offsets: read from the
    cluster itself, read_committed has the committed records only, and the group's offsets are
    what the transaction committed."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic, partitions, group = "txn-through-gateway", 2, "txn-gateway-group"
    kafka_broker.create_topic(topic, partitions)
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        gateway = f"127.0.0.1:{server.port}"
        producer = ck.Producer({"bootstrap.servers": gateway, "transactional.id": "gateway-txn",
                                "transaction.timeout.ms": 30000})
        consumer = ck.Consumer({"bootstrap.servers": gateway, "group.id": group})
        try:
            producer.init_transactions(30)

            def transaction(label: str, count: int, end: str, offsets=None) -> None:
                producer.begin_transaction()
                for i in range(count):
                    producer.produce(topic, value=b"%s-%d" % (label.encode(), i), partition=i % partitions)
                if offsets is not None:
                    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
                if end == "commit":
                    producer.commit_transaction(30)
                else:
                    assert producer.flush(30) == 0    # written, then aborted (not purged unsent)
                    producer.abort_transaction(30)

            transaction("first", 10, "commit")
            transaction("aborted", 5, "abort")
            transaction("third", 4, "commit", offsets=[ck.TopicPartition(topic, 0, 7)])
        finally:
            consumer.close()
    want = {p: [b"%s-%d" % (label, i) for label, n in ((b"first", 10), (b"third", 4))
                for i in range(n) if i % partitions == p] for p in range(partitions)}
    assert read_partitions(kafka_broker.bootstrap, topic, partitions, "read_committed") == want
    uncommitted = read_partitions(kafka_broker.bootstrap, topic, partitions, "read_uncommitted")
    assert sum(map(len, uncommitted.values())) == 19             # the aborted records are there
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions} == {(topic, 0): 7}


def test_transactions_through_the_gateway_and_what_refuses_them(gateway):
    """Against librdkafka's mock cluster: the transaction flow goes through (records and
    offsets land); a gateway without --produce refuses a transactional id as a write."""
    cluster, server = gateway
    topic = "txn-mock"
    cluster.create_topic(topic)
    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}", "transactional.id": "mock-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    producer.commit_transaction(30)
    assert [v for _, _, v, _ in read_cluster(cluster.bootstrap, topic, 6)] == [b"v%d" % i for i in range(6)]
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0)) as read_only:
        with BlockingClient("127.0.0.1", read_only.port) as client:
            frame = control.encode_request(control.find_coordinator_request("mock-txn", 1), 3,
                                           client.next_correlation_id())
            answer = control.decode_response(m.FIND_COORDINATOR_RESPONSE, client.request(frame), 3)
            assert answer.error_code == Error.POLICY_VIOLATION
            frame = control.encode_request(control.Outgoing(m.END_TXN_REQUEST, {
                "transactional_id": "mock-txn", "producer_id": 1, "producer_epoch": 0, "committed": True}),
                3, client.next_correlation_id())
            answer = control.decode_response(m.END_TXN_RESPONSE, client.request(frame), 3)
            assert answer.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
