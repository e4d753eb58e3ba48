"""The consumer core against a real Kafka 4.x broker (tests/kafka_broker.py, KRaft on loopback):
every codec, an idempotent producer, committed and aborted transactions (a real broker lists the
aborted ones and stops read_committed fetches at the last stable offset), commits through the
group coordinator; confluent-kafka's consumer of the same broker is the oracle."""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafkacodec.consumer import Consumer  # noqa: E402

TOPIC = "consumer-source"
PARTITIONS = 3


def oracle(bootstrap, topic, partitions, count, isolation):
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle",
                            "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(out)


@pytest.fixture(scope="module")
def source(kafka_broker):
    """A topic written by plain producers in every codec, an idempotent producer and a
    transactional one (committed and aborted transactions); returns the broker and what
    read_committed / read_uncommitted consumers must see."""
    kafka_broker.create_topic(TOPIC, PARTITIONS)
    bootstrap = kafka_broker.bootstrap
    committed = []
    everything = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                "linger.ms": 5, "enable.idempotence": codec == "zstd"})
        for i in range(30):
            value = b"%s %d " % (codec.encode(), i) * (1 + i % 5)
            producer.produce(TOPIC, key=b"%s-%d" % (codec.encode(), i), value=value,
                             partition=i % PARTITIONS)
            committed.append((i % PARTITIONS, value))
        assert producer.flush(30) == 0
    txn_committed, txn_everything = write_transactions(bootstrap, TOPIC, PARTITIONS, "consumer-test")
    everything = txn_everything + committed
    committed += txn_committed
    return kafka_broker, sorted(committed), len(everything)


def write_transactions(bootstrap: str, topic: str, partitions: int, transactional_id: str
                       ) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """Six transactions of 10 records a partition (lz4), every other one aborted; returns the
    (partition, value) of the committed ones and of all of them."""
    committed: list[tuple[int, bytes]] = []
    everything: list[tuple[int, bytes]] = []
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                       "compression.type": "lz4", "linger.ms": 5})
    txn.init_transactions(30)
    for t in range(6):
        txn.begin_transaction()
        values = [(p, b"txn %d p%d r%d" % (t, p, r)) for r in range(10) for p in range(partitions)]
        for p, value in values:
            txn.produce(topic, value=value, partition=p)
        txn.flush(30)
        if t % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            committed += values
        everything += values
    return committed, everything


@pytest.mark.parametrize("form", ["raw", "arrow", "records"])
def test_read_committed_matches_confluent_kafka(source, form):
    from test_consumer import consume_all

    broker, committed, _ = source
    want = oracle(broker.bootstrap, TOPIC, PARTITIONS, len(committed), "read_committed")
    assert sorted((m[0], m[3]) for m in want) == committed
    with Consumer(broker.bootstrap, buffer_memory=4 << 20, isolation_level="read_committed") as consumer:
        consumer.assign_topics([TOPIC])
        ends = consumer.end_offsets(consumer.assignment())
        got = consume_all(consumer, ends, form)
    assert [(m[0], m[1], m[2], m[3]) for m in got] == want


def test_read_uncommitted_sees_every_data_record(source):
    from test_consumer import consume_all

    broker, _, count = source
    want = oracle(broker.bootstrap, TOPIC, PARTITIONS, count, "read_uncommitted")
    assert len(want) == count
    with Consumer(broker.bootstrap, buffer_memory=4 << 20, max_in_flight=3) as consumer:
        consumer.assign_topics([TOPIC])
        ends = consumer.end_offsets(consumer.assignment())
        got = consume_all(consumer, ends, "raw")
    assert [(m[0], m[1], m[2], m[3]) for m in got] == want


def test_commits_on_a_real_coordinator(source):
    broker, _, _ = source
    with Consumer(broker.bootstrap, buffer_memory=2 << 20, group_id="kafkacodec-g") as consumer:
        tps = [(TOPIC, p) for p in range(PARTITIONS)]
        assert consumer.committed(tps) == {tp: None for tp in tps}
        consumer.commit({tp: 5 + tp[1] for tp in tps})
        assert consumer.committed(tps) == {tp: 5 + tp[1] for tp in tps}
    check = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kafkacodec-g"})
    try:
        got = check.committed([ck.TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
        assert [tp.offset for tp in got] == [5, 6, 7]
    finally:
        check.close()
