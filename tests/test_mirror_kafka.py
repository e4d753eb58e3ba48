"""`kafkacodec mirror` into a real Kafka 4.x broker (tests/kafka_broker.py): what the mirror sends
is checked by a real broker's validation (CRC, sequences of an idempotent producer, one batch per
partition per ProduceRequest: it answers INVALID_RECORD to more), from the mock cluster (every
codec, committed and aborted transactions) and from the real broker itself (--rename)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from isolated import child_env

ck = pytest.importorskip("confluent_kafka")

from mock_cluster import MockCluster  # noqa: E402
from test_mirror_process import produce, read_all  # noqa: E402

from kafkacodec.mirror import Mirror, MirrorConfig  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def source():
    mock = MockCluster(3)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        mock.create_topic(f"k-{codec}")
        produce(mock, f"k-{codec}", 40, codec, **{"enable.idempotence": codec == "lz4"})
    mock.create_topic("k-txn")
    txn = ck.Producer({"bootstrap.servers": mock.bootstrap, "transactional.id": "k-txn",
                       "linger.ms": 1, "batch.num.messages": 5, "compression.type": "zstd"})
    txn.init_transactions(10)
    for t in range(4):
        txn.begin_transaction()
        for r in range(12):
            txn.produce("k-txn", value=b"txn %d r%d" % (t, r), partition=r % 4)
        txn.flush(10)
        (txn.commit_transaction if t % 2 == 0 else txn.abort_transaction)(10)
    return mock


def cli(*args):
    env = child_env()
    return subprocess.run([sys.executable, "-m", "kafkacodec.cli", "mirror", "--no-progress", *args],
                          env=env, capture_output=True, text=True, timeout=180)


def test_mock_to_a_real_broker(source, kafka_broker, tmp_path):
    topics = [f"k-{c}" for c in ("none", "gzip", "snappy", "lz4", "zstd")] + ["k-txn"]
    for topic in topics:
        kafka_broker.create_topic(topic, 4)
    m = Mirror(MirrorConfig(source=source.bootstrap, target=kafka_broker.bootstrap, topics=topics,
                            state_dir=str(tmp_path), until_caught_up=True, progress=False))
    assert m.run() == 0
    target = MockCluster.__new__(MockCluster)
    target.bootstrap = kafka_broker.bootstrap
    for topic in topics[:-1]:
        assert read_all(target, topic) == read_all(source, topic)
    committed = sorted(v for records in read_all(target, "k-txn").values() for _, v, _, _ in records)
    assert committed == sorted(b"txn %d r%d" % (t, r) for t in (0, 2) for r in range(12))


def test_several_batches_per_partition_are_refused_by_a_real_broker(kafka_broker, tmp_path):
    """The real broker as source answers many batches per fetch, so --multi-batch puts several
    batches of a partition in one ProduceRequest (after the first, sent alone): Kafka refuses it
    (INVALID_RECORD); the default, one batch per partition per request, goes through."""
    kafka_broker.create_topic("k-many", 1)
    kafka_broker.create_topic("k-multi", 1)
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0,
                            "batch.num.messages": 5, "compression.type": "gzip"})
    for i in range(100):
        producer.produce("k-many", value=b"many %d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    common = ("--source", kafka_broker.bootstrap, "--target", kafka_broker.bootstrap,
              "--topics", "k-many", "--rename", "k-many:k-multi", "--until-caught-up")
    done = cli(*common, "--state-dir", str(tmp_path / "multi"), "--multi-batch")
    assert done.returncode == 1, done.stderr
    assert "INVALID_RECORD (87)" in done.stderr, done.stderr
    done = cli(*common, "--state-dir", str(tmp_path / "one"))
    assert done.returncode == 0, done.stderr
    target = MockCluster.__new__(MockCluster)
    target.bootstrap = kafka_broker.bootstrap
    got = read_all(target, "k-multi", partitions=[0])[0]
    # the refused run's first batch went alone (one batch in flight until a partition's first
    # is acknowledged) and landed; the second run (a new state dir) wrote everything after it
    values, want = [v for _, v, _, _ in got], [b"many %d" % i for i in range(100)]
    landed = values[:len(values) - 100]
    assert values[-100:] == want and 0 < len(landed) < 100 and landed == want[:len(landed)]


def test_a_target_with_fewer_partitions_or_none_is_refused(source, kafka_broker, tmp_path):
    kafka_broker.create_topic("k-small", 2)
    done = cli("--source", source.bootstrap, "--target", kafka_broker.bootstrap, "--topics", "k-none",
               "--rename", "k-none:k-small", "--state-dir", str(tmp_path), "--until-caught-up")
    assert done.returncode == 2
    assert "has 2 partitions, fewer than the 4" in done.stderr
    done = cli("--source", source.bootstrap, "--target", kafka_broker.bootstrap, "--topics", "k-none",
               "--rename", "k-none:k-missing", "--state-dir", str(tmp_path), "--until-caught-up",
               "--no-create-topics")
    assert done.returncode == 2 and "k-missing" in done.stderr and "--no-create-topics" in done.stderr
    assert not (tmp_path / "checkpoint.json").exists()


def describe(kafka_broker, topic):
    """{name: value} of the configs set on `topic` itself, and its partition count."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    configs = {name: entry.value for name, entry in future.result(30).items()
               if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    partitions = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    return configs, partitions


def test_a_missing_target_topic_is_created_as_the_sources(kafka_broker, tmp_path):
    """As MirrorMaker 2: the source's partition count and the configs set on the source topic
    (not the broker-specific ones such as min.insync.replicas); then every record mirrored."""
    kafka_broker.create_topic("k-cfg", 3, config={"retention.ms": "123456789", "max.message.bytes": "200000",
                                                  "cleanup.policy": "delete", "min.insync.replicas": "1"})
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "compression.type": "lz4"})
    for i in range(30):
        producer.produce("k-cfg", value=b"cfg %d" % i, partition=i % 3)
    producer.flush(30)
    done = cli("--source", kafka_broker.bootstrap, "--target", kafka_broker.bootstrap, "--topics", "k-cfg",
               "--rename", "k-cfg:k-cfg-copy", "--state-dir", str(tmp_path), "--until-caught-up")
    assert done.returncode == 0, done.stderr
    assert "created target topic 'k-cfg-copy' with 3 partitions; configs cleanup.policy=delete, " \
           "max.message.bytes=200000, retention.ms=123456789" in done.stderr, done.stderr
    configs, partitions = describe(kafka_broker, "k-cfg-copy")
    assert partitions == 3
    assert configs == {"retention.ms": "123456789", "max.message.bytes": "200000", "cleanup.policy": "delete"}
    target = MockCluster.__new__(MockCluster)
    target.bootstrap = kafka_broker.bootstrap
    got = read_all(target, "k-cfg-copy", partitions=range(3))
    assert sorted(v for records in got.values() for _, v, _, _ in records) == sorted(b"cfg %d" % i for i in range(30))


def test_a_topic_from_a_source_without_describe_configs_is_created_without_them(source, kafka_broker, tmp_path):
    """librdkafka's mock answers no DescribeConfigs: the topic gets the partition count alone."""
    done = cli("--source", source.bootstrap, "--target", kafka_broker.bootstrap, "--topics", "k-gzip",
               "--rename", "k-gzip:k-gzip-created", "--state-dir", str(tmp_path), "--until-caught-up")
    assert done.returncode == 0, done.stderr
    assert "created target topic 'k-gzip-created' with 4 partitions; configs not copied" in done.stderr
    assert describe(kafka_broker, "k-gzip-created") == ({}, 4)


def test_a_real_broker_as_source_and_target(kafka_broker, tmp_path):
    kafka_broker.create_topic("k-from", 2)
    kafka_broker.create_topic("k-to", 2)
    txn = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "k-from",
                       "compression.type": "lz4", "linger.ms": 5})
    txn.init_transactions(30)
    want = []
    for t in range(4):
        txn.begin_transaction()
        values = [b"from %d r%d" % (t, r) for r in range(10)]
        for r, value in enumerate(values):
            txn.produce("k-from", value=value, partition=r % 2)
        txn.flush(30)
        if t == 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            want += values
    done = cli("--source", kafka_broker.bootstrap, "--target", kafka_broker.bootstrap,
               "--topics", "k-from", "--rename", "k-from:k-to", "--state-dir", str(tmp_path),
               "--until-caught-up")
    assert done.returncode == 0, done.stderr
    target = MockCluster.__new__(MockCluster)
    target.bootstrap = kafka_broker.bootstrap
    got = read_all(target, "k-to", partitions=range(2))
    assert sorted(v for records in got.values() for _, v, _, _ in records) == sorted(want)
