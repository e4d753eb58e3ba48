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


class SteerableMockCluster(MockCluster):
    """A mock cluster made through librdkafka's C API (ctypes, the library confluent-kafka
    loads), so a test can steer it where confluent-kafka exposes no knob: delay the answers of
    one api (`delay()`: rd_kafka_mock_broker_push_request_error_rtts with no error: the request
    is handled, its answer held back; a connection answers in order, so what follows it on that
    connection waits too), take brokers down and up (`set_down()`, `set_up()`).  close() (or the
    end of the object) ends the cluster."""

    def __init__(self, brokers: int = 1):
        import ctypes
        import glob
        import os

        libs = os.path.join(os.path.dirname(ck.__file__), os.pardir, "confluent_kafka.libs")
        found = glob.glob(os.path.join(libs, "librdkafka*.so*"))
        if not found:
            import pytest

            pytest.skip("confluent-kafka's bundled librdkafka not found (the mock's C API)")
        lib = self._lib = ctypes.CDLL(found[0])
        ptr = ctypes.c_void_p
        lib.rd_kafka_conf_new.restype = ptr
        lib.rd_kafka_conf_set.argtypes = [ptr, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t]
        lib.rd_kafka_new.restype = ptr
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ptr, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_handle_mock_cluster.restype = ptr
        lib.rd_kafka_handle_mock_cluster.argtypes = [ptr]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ptr]
        lib.rd_kafka_mock_topic_create.argtypes = [ptr, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_broker_set_down.argtypes = [ptr, ctypes.c_int32]
        lib.rd_kafka_mock_broker_set_up.argtypes = [ptr, ctypes.c_int32]
        lib.rd_kafka_destroy.argtypes = [ptr]
        error = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        for key, value in (("test.mock.num.brokers", str(brokers)), ("log_level", "0")):
            assert lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), error, 512) == 0, error.value
        self._rk = lib.rd_kafka_new(0, conf, error, 512)          # RD_KAFKA_PRODUCER
        assert self._rk, error.value
        self._mock = lib.rd_kafka_handle_mock_cluster(self._rk)
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._mock).decode()
        self.broker_ids = list(range(1, brokers + 1))             # the mock numbers them from 1
        self.brokers = {}
        for address in self.bootstrap.split(","):
            host, port = address.rsplit(":", 1)
            self.brokers[len(self.brokers) + 1] = (host, int(port))
        self.producer = None                    # the cluster lives as long as this object

    def create_topic(self, name: str) -> int:
        assert self._lib.rd_kafka_mock_topic_create(self._mock, name.encode(), MOCK_PARTITIONS, 1) == 0
        return MOCK_PARTITIONS

    def delay(self, api_key: int, milliseconds: int, count: int = 1, broker: int | None = None) -> None:
        """Hold back the answers to the next `count` requests of `api_key` (on `broker`, or
        on every broker) by `milliseconds` each."""
        import ctypes

        for broker_id in self.broker_ids if broker is None else [broker]:
            pairs: list[ctypes.c_int] = []
            for _ in range(count):
                pairs += [ctypes.c_int(0), ctypes.c_int(milliseconds)]    # (no error, rtt)
            code = self._lib.rd_kafka_mock_broker_push_request_error_rtts(
                ctypes.c_void_p(self._mock), ctypes.c_int32(broker_id), ctypes.c_int16(api_key),
                ctypes.c_size_t(count), *pairs)
            assert code == 0, code

    def set_down(self, broker: int | None = None) -> None:
        """Disconnect `broker` (every broker when None) and refuse new connections."""
        for broker_id in self.broker_ids if broker is None else [broker]:
            self._lib.rd_kafka_mock_broker_set_down(self._mock, broker_id)

    def set_up(self, broker: int | None = None) -> None:
        for broker_id in self.broker_ids if broker is None else [broker]:
            self._lib.rd_kafka_mock_broker_set_up(self._mock, broker_id)

    def close(self) -> None:
        if self._rk:
            self.producer = None
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __del__(self) -> None:
        self.close()
