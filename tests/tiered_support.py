"""A partition a real Kafka 4.1 broker tiered itself (KIP-405), for tests/test_tiered.py and the
Spark test of it in tests/test_spark.py (session fixtures, registered in conftest.py).

`tiered_log`: the session broker runs Kafka's own LocalTieredStorage (tests/kafka_broker.py,
`tiered`); a topic with `remote.storage.enable=true`, 1 MiB segments and 2 MiB of local retention
gets three transactions (the second aborted), then plain lz4 records, in batches of at most 16
KiB (so every segment's `.index` has entries).  Once the broker has tiered the oldest segments
and deleted them locally, the partition directory (with the log-start checkpoint) and the remote
store are copied: (local log directory, remote store, {isolation level: what the broker's own
consumer reads}); the broker's `__remote_log_metadata` partitions are copied beside them, into
`metadata/` (beside the local directory).  `tiered_s3`: the remote store's objects copied to S3
(moto's server), as (s3:// URI, the fs.s3a.* options)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

TOPIC = "tiered"
LEVELS = ("read_uncommitted", "read_committed")
ABORTED = 2000          # records of the aborted transaction


def _consume(bootstrap: str, level: str, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tiered-ref", "isolation.level": level,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == -191 and (not got or got[-1][0] >= end - 2):   # partition EOF
                        return got
                    continue
                got.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    raise AssertionError(f"the broker's consumer stopped at {got[-1][0] if got else None} of {end}")


@pytest.fixture(scope="session")
def tiered_log(kafka_broker, tmp_path_factory):
    """(local log directory copy, remote store copy, {level: the broker consumer's records})."""
    from confluent_kafka import Producer

    if "remote.log.storage.system.enable" not in (kafka_broker.workdir / "server.properties").read_text("latin-1"):
        pytest.skip("the session broker runs without tiered storage")
    kafka_broker.create_topic(TOPIC, 1, config={"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                                                "local.retention.bytes": str(2 << 20)})
    # batches of at most 16 KiB, so the broker's .index has an entry every 4 KiB or so (one
    # batch of a whole segment, librdkafka's default limit, would give it none)
    batches = {"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 5, "batch.size": 16384}
    txn = Producer({**batches, "transactional.id": "tiered"})
    txn.init_transactions(30)
    for k in range(3):                                    # committed, aborted, committed
        txn.begin_transaction()
        for j in range(ABORTED):
            txn.produce(TOPIC, key=b"t%d-%d" % (k, j), value=b"transactional %d" % j)
        txn.flush(30)
        (txn.abort_transaction if k == 1 else txn.commit_transaction)(30)
    plain = Producer({**batches, "compression.type": "lz4"})
    for i in range(50_000):
        plain.produce(TOPIC, key=b"k%d" % i, value=os.urandom(48).hex().encode())
        if i % 5000 == 0:
            plain.poll(0)
    plain.flush(30)

    local = kafka_broker.log_dir / f"{TOPIC}-0"
    deadline = time.monotonic() + 90
    while True:                                           # tiered, then deleted locally
        remote = sorted(kafka_broker.remote_dir.glob(f"{TOPIC}-0-*/*.log"))
        first_local = min((int(p.stem) for p in local.glob("*.log")), default=0)
        if first_local > 0 and len(remote) >= 3 and any(int(p.name[:20]) >= first_local for p in remote):
            break
        assert time.monotonic() < deadline, (sorted(p.name for p in local.glob("*.log")), [p.name for p in remote])
        time.sleep(0.5)
    end = int(_end_offset(kafka_broker.bootstrap))
    want = {level: _consume(kafka_broker.bootstrap, level, end) for level in LEVELS}
    out = tmp_path_factory.mktemp("tiered")
    _copy_settled(local, out / "local" / local.name)
    shutil.copy(kafka_broker.log_dir / "log-start-offset-checkpoint", out / "local")
    shutil.copytree(kafka_broker.remote_dir, out / "remote" / "kafka-tiered-storage")
    for metadata in kafka_broker.log_dir.glob("__remote_log_metadata-*"):   # (test_tiered's metadata tests)
        shutil.copytree(metadata, out / "metadata" / metadata.name)
    return out / "local", out / "remote" / "kafka-tiered-storage", want


def _copy_settled(source, target, timeout: float = 60.0) -> None:
    """Copy a partition directory the broker may still be deleting segments from (local
    retention renames a tiered segment to *.deleted, then removes it): once no *.deleted file is
    left, and again if a file vanished during the copy."""
    deadline = time.monotonic() + timeout
    while True:
        if not any(p.suffix == ".deleted" for p in source.iterdir()):
            try:
                shutil.copytree(source, target)
                return
            except shutil.Error as exc:
                if time.monotonic() > deadline:
                    raise
                shutil.rmtree(target, ignore_errors=True)
                print(f"copying {source} again: {len(exc.args[0])} files vanished during the copy")
        assert time.monotonic() < deadline, sorted(p.name for p in source.iterdir())
        time.sleep(0.2)


def _end_offset(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tiered-end"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def tiered_s3(tiered_log, s3_server):
    """The remote store's objects copied to S3 (moto), as a RemoteStorageManager for S3 keeps them."""
    local, remote, want = tiered_log
    return s3_server.upload(remote, "kafka-tiered-storage"), s3_server.options
