"""End to end against a Kafka-protocol server we did not write: librdkafka's in-process mock
cluster (confluent-kafka, producer config ``test.mock.num.brokers``).

confluent-kafka produces into a source cluster in every codec; our blocking client fetches the
raw FetchResponse; fetch_to_produce turns it into ProduceRequests for a second mock cluster;
confluent-kafka consumes that: same records and offsets, batches byte-identical.
"""

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafkacodec.mirror import fetch_to_produce, shallow_records  # noqa: E402
from kafkacodec import CorruptRecordError  # noqa: E402
from kafkacodec.protocol import decode_produce_response, encode_produce_request  # noqa: E402
from blocking_client import BlockingClient  # noqa: E402

TOPIC = "mirrored"
PARTITIONS = (0, 1)
PER_PARTITION = 23


class MockCluster:
    def __init__(self, **config):
        # The mock cluster lives as long as this producer.
        self.producer = ck.Producer({"test.mock.num.brokers": 1, "linger.ms": 50,
                                     "batch.num.messages": 7, **config})
        metadata = self.producer.list_topics(timeout=10)
        (broker,) = metadata.brokers.values()
        self.bootstrap = f"{broker.host}:{broker.port}"
        self.client = BlockingClient(broker.host, broker.port)

    def consume(self, topic, partitions, count):
        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "verify",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
        out = []
        try:
            for _ in range(400):
                msg = consumer.poll(0.1)
                if msg is not None and not msg.error():
                    out.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                                msg.timestamp(), msg.headers()))
                if len(out) >= count:
                    break
        finally:
            consumer.close()
        return sorted(out, key=lambda m: (m[0], m[1]))

    def raw_batches(self, topic, partition, api_version=12):
        """Every batch of a partition, fetched raw (the mock answers one batch per fetch)."""
        batches, offset = [], 0
        while True:
            response = self.client.fetch([(topic, [(partition, offset)])], api_version=api_version)
            records = response.responses[0].partitions[0].records
            got = list(shallow_records(records, offset))
            if not got:
                return batches
            batches += [bytes(r.value) for r in got]
            offset = got[-1].offset + 1

    def close(self):
        self.client.close()


@pytest.fixture
def clusters():
    made = []

    def make(**config):
        made.append(MockCluster(**config))
        return made[-1]

    yield make
    for c in made:
        c.close()


def produce_source(cluster):
    for i in range(PER_PARTITION):
        for p in PARTITIONS:
            cluster.producer.produce(TOPIC, key=None if i % 5 == 4 else b"key-%d" % i,
                                     value=(b"value %d/%d " % (p, i)) * (1 + i % 7),
                                     partition=p, timestamp=1_700_000_000_000 + 13 * i - (i % 3),
                                     headers=[("i", b"%d" % i)] if i % 2 else None)
    assert cluster.producer.flush(10) == 0


# (codec, Fetch version, Produce version): every codec, old and flexible versions, topic ids
# (ProduceResponse v5 is skipped: see test_the_mock_produce_response_v5_lacks_log_start_offset)
CASES = [("none", 4, 3), ("gzip", 8, 6), ("snappy", 11, 8), ("lz4", 12, 10), ("zstd", 16, 9)]


@pytest.mark.parametrize("codec,fetch_version,produce_version", CASES)
def test_mirror_between_two_mock_clusters(clusters, codec, fetch_version, produce_version):
    source = clusters(**{"compression.type": codec})
    target = clusters()
    produce_source(source)
    target.client.metadata([TOPIC])                    # auto-creates the topic there
    topic_names = {}
    if fetch_version >= 13:
        (meta,) = source.client.metadata([TOPIC]).topics
        topic_names = {meta.topic_id: TOPIC}
    positions = {(TOPIC, p): 0 for p in PARTITIONS}
    requests = 0
    while any(offset < PER_PARTITION for offset in positions.values()):
        assert requests < 4 * PER_PARTITION, f"no progress: {positions}"
        if fetch_version >= 13:
            topics = [(meta.topic_id, [(p, positions[(TOPIC, p)]) for p in PARTITIONS])]
        else:
            topics = [(TOPIC, [(p, positions[(TOPIC, p)]) for p in PARTITIONS])]
        fetched = source.client.fetch(topics, api_version=fetch_version)
        next_offsets = {}
        correlation_id = target.client.next_correlation_id()
        frame = fetch_to_produce(fetched, api_version=produce_version, correlation_id=correlation_id,
                                 fetch_offsets=positions, topic_names=topic_names,
                                 max_batches_per_partition=1, next_offsets=next_offsets)
        assert frame is not None
        response = target.client.produce_frame(frame, produce_version, correlation_id)
        for topic in response.responses:
            for part in topic.partition_responses:
                assert part.error_code == 0
                # the target assigns the same offsets the source had
                assert part.base_offset == positions[(TOPIC, part.partition_index)]
        positions.update(next_offsets)
        requests += 1
    assert requests >= PER_PARTITION // 7

    expected = source.consume(TOPIC, PARTITIONS, PER_PARTITION * len(PARTITIONS))
    assert len(expected) == PER_PARTITION * len(PARTITIONS)
    assert target.consume(TOPIC, PARTITIONS, len(expected)) == expected
    for p in PARTITIONS:
        source_batches = source.raw_batches(TOPIC, p)
        assert len(source_batches) >= PER_PARTITION // 7
        assert target.raw_batches(TOPIC, p) == source_batches     # byte for byte


def test_api_versions_and_metadata_on_the_mock(clusters):
    cluster = clusters()
    versions = cluster.client.api_versions()
    assert versions.error_code == 0
    assert versions.max_version(1) >= 16 and versions.max_version(0) >= 9 and versions.max_version(3) >= 12
    for version in (1, 4, 9, 12):
        metadata = cluster.client.metadata([TOPIC], api_version=version)
        (topic,) = metadata.topics
        assert topic.name == TOPIC and len(topic.partitions) >= 2
        leader = metadata.leader(TOPIC, 1)
        assert f"{leader.host}:{leader.port}" == cluster.bootstrap


def test_the_mock_produce_response_v5_lacks_log_start_offset(clusters):
    """Kafka's ProduceResponse has LogStartOffset from version 5; librdkafka's mock writes it
    from version 6 only, so its v5 answer is 8 bytes short per partition and we refuse it."""
    cluster = clusters(**{"compression.type": "lz4"})
    produce_source(cluster)
    batch = cluster.raw_batches(TOPIC, 0)[0]
    for version, ok in ((4, True), (5, False), (6, True)):
        frame = encode_produce_request([(TOPIC, [(1, batch)])], api_version=version, correlation_id=version)
        raw = cluster.client.request(frame)
        if ok:
            assert decode_produce_response(raw, version).responses[0].partition_responses[0].error_code == 0
        else:
            with pytest.raises(CorruptRecordError, match="truncated produce response"):
                decode_produce_response(raw, version)
            # what it sent is the v4 layout
            assert decode_produce_response(raw, 4).responses[0].partition_responses[0].error_code == 0


def test_mirror_starting_inside_a_batch(clusters):
    source = clusters(**{"compression.type": "lz4"})
    target = clusters()
    produce_source(source)
    target.client.metadata([TOPIC])
    # librdkafka decides the batch boundaries (usually 7 records; under load the first record
    # may go alone): start in the middle of the first batch holding several records
    first_source = next(r for b in source.raw_batches(TOPIC, 0) for r in shallow_records(b)
                        if r.record_count >= 2)
    start = first_source.base_offset + first_source.record_count // 2
    end = first_source.offset + 1                      # one past the batch's last offset
    fetched = source.client.fetch([(TOPIC, [(0, start)])])
    frame = fetch_to_produce(fetched, fetch_offsets={(TOPIC, 0): start},
                             max_batches_per_partition=1)
    response = target.client.produce_frame(frame, 9, 0)
    assert response.responses[0].partition_responses[0].error_code == 0
    (first,) = target.raw_batches(TOPIC, 0)
    got = target.consume(TOPIC, [0], end - start)
    want = [m for m in source.consume(TOPIC, [0], PER_PARTITION) if start <= m[1] < end]
    # same records, offsets re-assigned from 0 by the target
    assert len(want) == end - start
    assert [(m[2], m[3], m[4], m[5]) for m in got] == [(m[2], m[3], m[4], m[5]) for m in want]
    assert len(first) < len(first_source.value)         # the trimmed batch is smaller


def test_what_the_mock_does_with_several_batches_per_partition(clusters):
    """librdkafka's mock broker accepts a partition record set holding several batches (error 0,
    unlike real brokers, which answer INVALID_RECORD for ProduceRequest v3+), but treats the set
    as one unit: it assigns an offset to the first batch only, advances the log end offset by
    that batch's record count alone, and serves the whole set back in one fetch.  So a mirror
    must send one batch per partition per request to it too (max_batches_per_partition=1)."""
    source = clusters(**{"compression.type": "lz4"})
    target = clusters()
    produce_source(source)
    target.client.metadata([TOPIC])
    batches = source.raw_batches(TOPIC, 0)
    records = [next(shallow_records(b)) for b in batches]
    assert sum(r.record_count for r in records) == PER_PARTITION and len(batches) >= 3
    # a filler batch first, with a record count unlike the first batch's, so that the target's
    # offsets differ from the source's and offset assignment is visible
    filler = next(b for b, r in zip(batches, records) if r.record_count != records[0].record_count)
    filled = next(shallow_records(filler)).record_count
    answer = target.client.produce([(TOPIC, [(0, filler)])]).responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset) == (0, 0)
    response = target.client.produce([(TOPIC, [(0, [batches[1], batches[2]])])])
    (answer,) = response.responses[0].partition_responses
    assert answer.error_code == 0 and answer.base_offset == filled
    fetched = target.client.fetch([(TOPIC, [(0, filled)])])
    part = fetched.responses[0].partitions[0]
    # the log end moved by the first batch's count only
    assert part.high_watermark == filled + records[1].record_count
    served = list(shallow_records(part.records))
    # only the first batch got an offset; the second kept the source's
    assert [r.base_offset for r in served] == [filled, records[2].base_offset]
    assert records[2].base_offset != filled + records[1].record_count
    assert bytes(served[1].value) == batches[2]
    assert bytes(served[0].value)[8:] == batches[1][8:]  # the rest is byte for byte
