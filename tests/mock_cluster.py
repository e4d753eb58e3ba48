"""librdkafka's in-process mock cluster (confluent-kafka's ``test.mock.num.brokers``) as a test
peer: a Kafka-protocol server we did not write.  Facts the tests rely on: it answers one batch
per Fetch, does not list aborted transactions in Fetch responses (its read_committed view still
shows them), accepts several batches per partition in one ProduceRequest, and auto-creates
topics (4 partitions) on Metadata requests that allow it."""

from __future__ import annotations

import confluent_kafka as ck

MOCK_PARTITIONS = 4


class MockCluster:
    """A mock cluster of `brokers` brokers; it lives as long as this object's producer."""

    def __init__(self, brokers: int = 3, **config):
        self.producer = ck.Producer({"test.mock.num.brokers": brokers, "linger.ms": 5, **config})
        metadata = self.producer.list_topics(timeout=10)
        self.brokers = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
        self.bootstrap = ",".join(f"{h}:{p}" for h, p in self.brokers.values())

    def create_topic(self, name: str) -> int:
        """Create `name` the mock's way (it has no controller for CreateTopics): a Metadata
        request that allows auto-creation; the mock gives every topic 4 partitions."""
        metadata = self.producer.list_topics(name, timeout=10)
        partitions = len(metadata.topics[name].partitions)
        assert partitions == MOCK_PARTITIONS, partitions
        return partitions

    def produce(self, topic: str, records, **config) -> dict:
        """Produce [(partition, key, value, headers, timestamp)] with a producer of `config`;
        returns {(partition, offset): (key, value, headers, timestamp)} from delivery reports."""
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **config})
        delivered = {}

        def report(err, msg):
            assert err is None, err
            delivered[(msg.partition(), msg.offset())] = msg.key(), msg.value()

        for partition, key, value, headers, timestamp in records:
            producer.produce(topic, key=key, value=value, partition=partition, headers=headers,
                             timestamp=timestamp or 0, on_delivery=report)
            producer.poll(0)
        assert producer.flush(30) == 0
        return delivered

    def consume(self, topic: str, partitions, count: int, *, isolation: str = "read_uncommitted",
                timeout: float = 30.0) -> list[tuple]:
        """confluent-kafka's consumer as the oracle: [(partition, offset, key, value, headers,
        timestamp)] sorted by partition and offset."""
        import time

        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "oracle",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "isolation.level": isolation})
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
        out = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is not None and not msg.error():
                    out.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                                msg.headers() or [], msg.timestamp()[1]))
        finally:
            consumer.close()
        return sorted(out, key=lambda m: (m[0], m[1]))
