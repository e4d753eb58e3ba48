"""Kafka's own consumer (kafka-clients 3.9.1 and 4.1.1 from Maven Central, driven by
tests/java/ServeConsumer.java compiled at test time) reads through `kafkacodec serve`; and
Kafka 3.9.1 itself serves the same log directory to old consumers, to compare what they get.

The comparison: records are produced into a real Kafka 3.9.1 broker (the `kafka_broker_39`
fixture), then its partition directories are copied and served by `kafkacodec serve`, so both
serve the very same segment bytes.  Old consumers (Fetch v1 and v3) get the same records from
both, byte-identical down-converted data for uncompressed batches, and the same errors; where
Kafka sends a lone overflow stub (a fetch at a closing transaction marker), we send nothing,
so kafka-python does not stop with "Failed to make progress"."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import pytest

from kafkacodec.serve import Server

from serve_support import (compile_java_driver, confluent_read, expected, java_consumer_classpath,
                           java_read, kafka_python_read, make_log_dir, old_fetch, records_of)

pytest.importorskip("confluent_kafka")

JAVA_VERSIONS = ["3.9.1", "4.1.1"]
pytestmark = pytest.mark.broker       # Kafka's Java code (see conftest)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("java") / "logs")


@pytest.fixture(scope="module")
def server(log_dir, tmp_path_factory):
    with Server([str(log_dir)], listen=("127.0.0.1", 0), state_dir=str(tmp_path_factory.mktemp("state"))) as s:
        yield s


@pytest.fixture(scope="module", params=JAVA_VERSIONS)
def java(request, tmp_path_factory):
    cp = java_consumer_classpath(request.param)
    if cp is None:
        pytest.skip(f"needs java, javac and Maven (kafka-clients {request.param})")
    classes = tmp_path_factory.mktemp(f"java-{request.param}")
    compile_java_driver(classes, cp)
    return cp, classes


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_java_consumer_reads_every_record_by_assign(java, server, log_dir, isolation):
    cp, classes = java
    want = expected(log_dir, committed=isolation == "read_committed")
    assert java_read(cp, classes, f"127.0.0.1:{server.port}", want, isolation=isolation) == want
    versions = {s.labels["version"] for mm in server.metrics.registry.collect() for s in mm.samples
                if s.name == "kafka_network_requestmetrics_requests_total" and s.labels["request"] == "Fetch"}
    assert "17" in versions                          # the newest: flexible, topic ids


def test_java_consumer_reads_every_record_through_a_group(java, server, log_dir):
    cp, classes = java
    want = expected(log_dir)
    group = f"java-{classes.name}"
    assert java_read(cp, classes, f"127.0.0.1:{server.port}", want, group=group) == want
    stored = server.offsets.get(group)
    for (topic, partition), rows in want.items():
        assert stored[(topic, partition)].offset >= rows[-1][0] + 1


#: Kafka's Java consumers from before zstd (KIP-110, 2.1) and the Fetch version each speaks.
BEFORE_ZSTD = {"0.11.0.3": "5", "1.0.2": "6", "1.1.1": "7", "2.0.1": "8"}


def java_before_zstd(version: str, classes: Path) -> str:
    cp = java_consumer_classpath(version)
    if cp is None:
        pytest.skip(f"needs java, javac and Maven (kafka-clients {version})")
    compile_java_driver(classes, cp)
    return cp


@pytest.mark.parametrize("version", list(BEFORE_ZSTD))
def test_java_consumers_before_zstd_read_zstd_batches_rebuilt(log_dir, tmp_path, version):
    """Kafka's Java consumers 0.11-2.0 speak Fetch v5-v8, which cannot carry zstd (a Kafka
    broker answers them UNSUPPORTED_COMPRESSION_TYPE, see the next test): reading `mixed` (zstd
    batches among the others) through serve they get every record, the zstd batches rebuilt
    with gzip (still v2, their offsets, transactions and headers kept)."""
    cp = java_before_zstd(version, tmp_path)
    want = expected(log_dir, {"mixed": 2})
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        assert java_read(cp, tmp_path, f"127.0.0.1:{srv.port}", want) == want
        versions = {s.labels["version"] for mm in srv.metrics.registry.collect() for s in mm.samples
                    if s.name == "kafka_network_requestmetrics_requests_total" and s.labels["request"] == "Fetch"}
        assert versions == {BEFORE_ZSTD[version]}


def test_kafkas_refusal_of_zstd_stops_a_2_0_java_consumer(log_dir, tmp_path):
    """With zstd_codec=None serve answers as Kafka does, UNSUPPORTED_COMPRESSION_TYPE (76), a
    code 2.0 does not know: it logs it and stays stuck at the first zstd batch."""
    cp = java_before_zstd("2.0.1", tmp_path)
    want = expected(log_dir, {"mixed": 2})
    with Server([str(log_dir)], listen=("127.0.0.1", 0), zstd_codec=None) as srv:
        with pytest.raises(AssertionError, match="Unexpected error code: 76") as stopped:
            java_read(cp, tmp_path, f"127.0.0.1:{srv.port}", want, timeout=10)
        assert "timed out" in str(stopped.value)          # stuck at the first zstd batch, as on Kafka


# --- the same log directory served by Kafka 3.9.1 ------------------------------------------------
TOPICS = ("cmp-plain", "cmp-codecs", "cmp-zstd", "cmp-txn", "cmp-batches")


@pytest.fixture(scope="module")
def kafka_and_copy(kafka_broker_39, tmp_path_factory):
    """Records produced into Kafka 3.9.1; its partition directories copied for `serve`."""
    from confluent_kafka import Producer

    broker = kafka_broker_39
    for topic in TOPICS:
        broker.create_topic(topic)

    def produce(topic: str, codec: str, count: int, start: int, **conf) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                             "linger.ms": 50, "enable.idempotence": False, **conf})
        for i in range(start, start + count):
            producer.produce(topic, key=b"key-%d" % i, value=(b"value %d " % i) * (1 + i % 7))
        assert producer.flush(30) == 0

    produce("cmp-plain", "none", 300, 0)
    for start in range(0, 300, 30):                        # ten batches of 30 records
        produce("cmp-batches", "none", 30, start)
    for n, codec in enumerate(["gzip", "snappy", "lz4", "none"]):
        produce("cmp-codecs", codec, 60, n * 60)
    produce("cmp-zstd", "zstd", 50, 0)
    produce("cmp-zstd", "none", 20, 50)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cmp", "linger.ms": 20})
    txn.init_transactions(30)
    for commit, start in [(True, 0), (False, 10), (True, 20)]:
        txn.begin_transaction()
        for i in range(start, start + 10):
            txn.produce("cmp-txn", key=b"t%d" % i, value=b"txn %d" % i)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    copy = tmp_path_factory.mktemp("kafka-copy")
    deadline = time.monotonic() + 30
    for topic in TOPICS:               # markers are written by the coordinator, a moment later
        source = broker.log_dir / f"{topic}-0"
        while time.monotonic() < deadline and topic == "cmp-txn" and len(
                records_of(old_fetch(broker.port, 3, topic, 0, 0)[2])) < 20:
            time.sleep(0.2)
        shutil.copytree(source, copy / f"{topic}-0")
    with Server([str(copy)], listen=("127.0.0.1", 0)) as ours:
        yield broker, ours, copy


def test_old_consumers_get_the_same_records_from_kafka_and_from_serve(kafka_and_copy):
    broker, ours, copy = kafka_and_copy
    topics = {"cmp-plain": 1, "cmp-codecs": 1}
    want = expected(copy, topics)
    for api_version in [(0, 9), (0, 10, 1)]:
        from_kafka = kafka_python_read(broker.bootstrap, want, api_version=api_version)
        from_serve = kafka_python_read(f"127.0.0.1:{ours.port}", want, api_version=api_version)
        assert from_kafka == from_serve == want
    old = {"api.version.request": False, "broker.version.fallback": "0.9.0.1"}
    assert confluent_read(f"127.0.0.1:{ours.port}", want, **old) == confluent_read(broker.bootstrap, want, **old)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("max_bytes", [100, 5000, 1 << 20])
def test_down_converted_bytes_are_kafkas(kafka_and_copy, version, max_bytes):
    """Uncompressed batches: the very bytes Kafka sends (committed size, converted messages)
    up to Kafka's overflow stub; compressed ones: the same records.  Two differences, on
    purpose: when the first batch is larger than the fetch size, Kafka holds Fetch v0-2 to the
    limit and sends nothing (the consumer never gets past it); we send that batch whole, as for
    v3.  And we never pad the records dropped below the fetch offset (the test below)."""
    broker, ours, _ = kafka_and_copy
    for offset in (0, 7, 150):
        theirs = old_fetch(broker.port, version, "cmp-plain", 0, offset, max_bytes)
        mine = old_fetch(ours.port, version, "cmp-plain", 0, offset, max_bytes)
        if version <= 2 and not records_of(theirs[2]):
            assert theirs[2] == b"" and records_of(mine[2]), (version, offset)
            continue
        _as_kafka_unpadded(mine, theirs, offset)
        # compressed wrappers are rebuilt with the same codec, but our compressor's bytes differ
        # from Java's (gzip: Kafka's are larger), so as many bytes hold a few more or fewer records
        theirs = old_fetch(broker.port, version, "cmp-codecs", 0, offset, max_bytes)
        mine = old_fetch(ours.port, version, "cmp-codecs", 0, offset, max_bytes)
        if version <= 2 and not records_of(theirs[2]):
            assert records_of(mine[2])
            continue
        assert mine[:2] == theirs[:2]
        a, b = records_of(mine[2]), records_of(theirs[2])
        assert a and b and a[:len(b)] == b[:len(a)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_fetch_inside_a_batch_gets_records_where_kafka_pads(kafka_and_copy, version):
    """Kafka converts a v2 batch from the fetch offset on, commits the whole range and pads
    the bytes of the records it dropped below the offset with overflow stubs (the client then
    fetches again from the stub), as it pads a batch the range cuts.  We send the records that
    follow in those bytes where the segment holds more and, where it does not, leave those bytes
    out (the last record): never a stub, the same bytes as far as Kafka's records go; a shorter
    answer may end a few records before Kafka's (the client fetches them next)."""
    broker, ours, _ = kafka_and_copy
    seen = []
    for offset, max_bytes in [(0, 3000), (15, 3000), (29, 3000), (45, 6000), (100, 1 << 20), (299, 3000)]:
        theirs = old_fetch(broker.port, version, "cmp-batches", 0, offset, max_bytes)
        mine = old_fetch(ours.port, version, "cmp-batches", 0, offset, max_bytes)
        seen.append(_as_kafka_unpadded(mine, theirs, offset))
    # (which fetches Kafka pads depends on how its producer cut the batches: a range also ends
    # inside a batch, whose bytes Kafka pads too; the last record alone always is)
    assert "filled" in seen and seen[-1] == "shorter", seen


def _as_kafka_unpadded(mine: tuple, theirs: tuple, offset: int) -> str:
    """Our old fetch answer against Kafka's: the same, or the same error, high watermark and
    bytes up to Kafka's overflow stub (if any) and no stub of ours: the records that follow
    instead ("filled", the same size) or a shorter answer ("shorter": what converts to nothing
    before the first record, the records dropped below the offset, is not committed)."""
    if mine == theirs:
        return "same"
    assert mine[:2] == theirs[:2] and _overflow_stub_at(mine[2]) is None, offset
    stub = _overflow_stub_at(theirs[2])
    common = min(len(mine[2]), len(theirs[2]) if stub is None else stub)
    assert mine[2][:common] == theirs[2][:common], offset
    a, b = records_of(mine[2]), records_of(theirs[2])
    assert a[:len(b)] == b[:len(a)] and [r[0] for r in a] == list(range(offset, offset + len(a))), offset
    if len(mine[2]) == len(theirs[2]):           # (the fill may be part of a record only)
        assert stub is not None and len(a) >= len(b), offset
        return "filled"
    assert len(mine[2]) < len(theirs[2]), offset
    return "shorter"


def _overflow_stub_at(data: bytes) -> int | None:
    """Where the first overflow stub (offset -1) of down-converted data starts, if any."""
    position = 0
    while position + 12 <= len(data):
        offset, size = struct.unpack_from(">qi", data, position)
        if offset == -1:
            return position
        position += 12 + size
    return None


def test_zstd_gets_the_same_error_with_refuse_and_the_records_by_default(kafka_and_copy):
    """zstd_codec=None (`--zstd-downconvert-codec refuse`) answers old fetches as Kafka 3.9 does
    (UNSUPPORTED_COMPRESSION_TYPE, 76); the default rebuilds the zstd batch with gzip."""
    broker, ours, copy = kafka_and_copy
    with Server([str(copy)], listen=("127.0.0.1", 0), zstd_codec=None) as refusing:
        for version in (1, 3):
            assert old_fetch(broker.port, version, "cmp-zstd", 0, 0)[0] == 76
            assert old_fetch(refusing.port, version, "cmp-zstd", 0, 0)[0] == 76
            error, _, data = old_fetch(ours.port, version, "cmp-zstd", 0, 0)
            assert error == 0 and [r[0] for r in records_of(data)][:1] == [0]


def test_a_fetch_at_a_closing_marker_gets_no_lone_stub(kafka_and_copy):
    broker, ours, copy = kafka_and_copy
    hw = old_fetch(broker.port, 3, "cmp-txn", 0, 0)[1]
    marker = hw - 1                                    # the last COMMIT marker
    kafka_error, _, kafka_data = old_fetch(broker.port, 3, "cmp-txn", 0, marker)
    our_error, _, our_data = old_fetch(ours.port, 3, "cmp-txn", 0, marker)
    assert kafka_error == our_error == 0
    assert kafka_data[:8] == b"\xff" * 8 and len(kafka_data) == 12      # Kafka 3.9: a stub alone
    assert our_data == b""                                              # serve: nothing yet
    # what that means for kafka-python at Fetch v3, polling at the end of the log
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    def poll_to_end(bootstrap: str) -> list:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 1), fetch_max_wait_ms=50,
                                 enable_auto_commit=False)
        tp = TopicPartition("cmp-txn", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list = []
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                got += [(r.offset, r.value) for r in consumer.poll(timeout_ms=200).get(tp, [])]
        finally:
            consumer.close()
        return got

    with pytest.raises(KafkaError, match="Failed to make progress"):
        poll_to_end(broker.bootstrap)
    got = poll_to_end(f"127.0.0.1:{ours.port}")
    assert got == [(o, v) for o, _, v in expected(copy, {"cmp-txn": 1})[("cmp-txn", 0)]]
