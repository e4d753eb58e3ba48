"""The real Kafka brokers the network tests use start, accept a topic and round-trip records
(kafka-python as the client: an independent implementation of the protocol)."""

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
