"""Log directories a real Kafka 4.1 broker wrote (the session's `kafka_broker`), copied with what
the broker's own consumer reads from them, for every reader's test: serve, `kafkacodec read`
and the log-dir reader (tests/test_serve_txnindex.py, tests/test_partition_log_agree.py) and
Spark (tests/test_spark.py).  Session fixtures, registered in conftest.py.

`txn_log`: transactions committed and aborted between plain records, some across segment rolls
(the `.txnindex` files and producer snapshots Kafka writes), one left open at the end.
`compacted_log`: a topic Kafka's log cleaner compacted (superseded keys gone from rolled
segments: gaps inside and between them, `cleaner-offset-checkpoint` written).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TXN_TOPIC = "txn-served"
COMPACTED_TOPIC = "compacted"
Rows = list[tuple[int, bytes | None, bytes | None]]


@dataclass(frozen=True)
class BrokerLog:
    root: Path                     # a log directory holding the partition `<topic>-0`
    topic: str
    want: dict[str, Rows]          # isolation level -> what the broker's consumer read
    last_stable: int               # the broker's ListOffsets LATEST at read_committed


def consume(bootstrap: str, topic: str, level: str, last_key: bytes | None = None,
            end: int | None = None) -> Rows:
    """Partition 0 from offset 0 at `level`, up to the record keyed `last_key` or offset `end` - 1."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{level}-ref",
                         "isolation.level": level, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: Rows = []
    deadline = time.monotonic() + 60
    try:
        while not got or (got[-1][1] != last_key if end is None else got[-1][0] < end - 1):
            assert time.monotonic() < deadline, ("the broker's consumer stopped early", level, got[-1:])
            for m in consumer.consume(1000, 0.5):
                assert not m.error(), m.error()
                got.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return got


def offsets(bootstrap: str, topic: str, level: str) -> int:
    """ListOffsets LATEST: the high watermark, or the last stable offset at read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets", "isolation.level": level})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1])
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def txn_log(kafka_broker, tmp_path_factory) -> BrokerLog:
    from confluent_kafka import Producer

    kafka_broker.create_topic(TXN_TOPIC, 1, config={"segment.bytes": str(1 << 20)})
    plain = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    txn = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "serve-txnindex",
                    "linger.ms": 0})
    txn.init_transactions(30)
    value = os.urandom(100_000)                   # ~0.5 MB per transaction: several rolls
    for k in range(9):
        txn.begin_transaction()
        for j in range(5):
            txn.produce(TXN_TOPIC, key=b"t%d-%d" % (k, j), value=value[j:])
            plain.produce(TXN_TOPIC, key=b"p%d-%d" % (k, j), value=b"plain")
        txn.flush(30)
        plain.flush(30)
        (txn.abort_transaction if k % 3 == 1 else txn.commit_transaction)(30)
    txn.begin_transaction()
    txn.produce(TXN_TOPIC, key=b"end", value=b"last committed")
    txn.commit_transaction(30)
    # its COMMIT marker is written after the call returns: read until its record comes
    committed = consume(kafka_broker.bootstrap, TXN_TOPIC, "read_committed", last_key=b"end")

    txn.begin_transaction()                       # open at the end: read_committed stops before it
    txn.produce(TXN_TOPIC, key=b"open", value=b"undecided")
    txn.flush(30)
    everything = consume(kafka_broker.bootstrap, TXN_TOPIC, "read_uncommitted", last_key=b"open")

    part = kafka_broker.log_dir / f"{TXN_TOPIC}-0"
    deadline = time.monotonic() + 30
    while True:                                   # Kafka snapshots its producers at each roll
        bases = sorted(int(p.stem) for p in part.glob("*.log"))
        if all((part / f"{b:020d}.snapshot").exists() for b in bases[1:]):
            break
        assert time.monotonic() < deadline, sorted(p.name for p in part.iterdir())
        time.sleep(0.1)
    out = tmp_path_factory.mktemp("broker-txn") / "logs"
    shutil.copytree(part, out / part.name)
    return BrokerLog(out, TXN_TOPIC, {"read_committed": committed, "read_uncommitted": everything},
                     offsets(kafka_broker.bootstrap, TXN_TOPIC, "read_committed"))


@pytest.fixture(scope="session")
def compacted_log(kafka_broker, tmp_path_factory) -> BrokerLog:
    from confluent_kafka import Producer

    topic = COMPACTED_TOPIC
    kafka_broker.create_topic(topic, 1, config={"cleanup.policy": "compact", "segment.bytes": str(1 << 20),
                                                "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(40_000):                                  # 200 keys, each written 200 times
        producer.produce(topic, key=b"key-%03d" % (i % 200), value=b"%d:" % i + b"v" * 80)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    part = kafka_broker.log_dir / f"{topic}-0"
    checkpoint = kafka_broker.log_dir / "cleaner-offset-checkpoint"

    def cleaned_to() -> int | None:
        lines = checkpoint.read_text().splitlines() if checkpoint.exists() else []
        return next((int(line.split()[2]) for line in lines if line.startswith(f"{topic} 0 ")), None)

    deadline = time.monotonic() + 60
    while True:                   # every rolled segment cleaned, no pass under way: the files hold still
        active = max(int(p.stem) for p in part.glob("*.log"))
        busy = [p for p in part.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
        if cleaned_to() == active and not busy:
            break
        assert time.monotonic() < deadline, ("the log cleaner never finished", cleaned_to(), active, busy)
        time.sleep(0.5)
    root = tmp_path_factory.mktemp("broker-compacted") / "logs"
    shutil.copytree(part, root / part.name)
    shutil.copy(checkpoint, root)
    end = offsets(kafka_broker.bootstrap, topic, "read_uncommitted")
    want = consume(kafka_broker.bootstrap, topic, "read_uncommitted", end=end)
    assert len(want) < 40_000 and want[-1][0] == end - 1      # compacted: keys superseded are gone
    return BrokerLog(root, topic, {"read_uncommitted": want, "read_committed": want}, end)
