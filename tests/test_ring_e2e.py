"""End to end: librdkafka's mock cluster (the one confluent-kafka carries) produces in every
codec; we fetch raw FetchResponses (v4 and v12) over TCP with recv_into into a ring smaller than
everything fetched, and decode librdkafka's batches through the flyweight iterator."""

import socket

import pytest

from kafkacodec import ResponseRingBuffer

confluent_kafka = pytest.importorskip("confluent_kafka")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC = "ring-e2e"


def encode_fetch(version, correlation_id, offsets, partition_max_bytes):
    try:
        from kafkacodec.protocol import encode_fetch_request
    except ImportError:                      # protocol package not merged: kafka-python's encoder
        encode_fetch_request = None
    if encode_fetch_request is not None:
        return encode_fetch_request([(TOPIC, [(p, o, partition_max_bytes) for p, o in offsets.items()])],
                                    api_version=version, correlation_id=correlation_id,
                                    max_wait_ms=50, max_bytes=1 << 20)
    from kafka.protocol.consumer import FetchRequest
    topic, part = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
    request = FetchRequest[version](
        replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[topic(topic=TOPIC, partitions=[
            part(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                 log_start_offset=-1, partition_max_bytes=partition_max_bytes)
            for p, o in offsets.items()])])
    request.with_header(correlation_id=correlation_id, client_id="kafkacodec-ring-test")
    return bytes(request.encode(header=True, framed=True))


def produce_every_codec(bootstrap, per_codec=100):
    produced = {}                            # (partition, offset) -> (codec, key, value, headers)

    def delivered(err, msg):
        assert err is None, err
        codec_name, i = msg.key().decode().split("-")     # delivery reports carry no headers
        produced[(msg.partition(), msg.offset())] = (
            codec_name, msg.key(), msg.value(), (("codec", codec_name.encode()), ("i", i.encode())))

    for codec in CODECS:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap,
                                             "compression.type": codec, "linger.ms": 20,
                                             "batch.num.messages": 25})
        for i in range(per_codec):
            value = (b"%s record %d " % (codec.encode(), i)) * (1 + i % 10)
            producer.produce(TOPIC, key=b"%s-%d" % (codec.encode(), i), value=value,
                             headers=[("codec", codec.encode()), ("i", str(i).encode())],
                             on_delivery=delivered)
        assert producer.flush(15) == 0
    return produced


def test_mock_cluster_every_codec_fetch_v4_and_v12_through_a_wrapping_ring():
    mock = confluent_kafka.Producer({"test.mock.num.brokers": 1})
    broker = next(iter(mock.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    produced = produce_every_codec(bootstrap)
    partitions = sorted({p for p, _ in produced})
    end = {p: max(o for q, o in produced if q == p) + 1 for p in partitions}

    ring = ResponseRingBuffer(6144)
    offsets = {p: 0 for p in partitions}
    versions = {}
    got = {}
    codecs_seen = set()
    fetched_bytes = 0
    correlation_id = 0
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        while offsets != end:
            correlation_id += 1
            version = (4, 12)[correlation_id % 2]
            versions[correlation_id] = version
            # one partition per request, at least one batch each (max bytes 1): many responses
            partition = partitions[correlation_id % len(partitions)]
            sock.sendall(encode_fetch(version, correlation_id, {partition: offsets[partition]}, 1))
            resp = None
            while resp is None:
                if ring.recv_into(sock) == 0:
                    assert not ring.eof, "the mock broker closed the connection"
                resp = ring.next_response()
            assert resp.correlation_id == correlation_id
            fetched_bytes += resp.size
            for rec in resp.records(versions[resp.correlation_id]):
                assert rec.error_code == 0 and rec.topic == TOPIC
                if rec.offset < offsets[rec.partition]:
                    continue                 # a batch may start before the fetch offset
                assert rec.offset == offsets[rec.partition], "records out of order"
                offsets[rec.partition] = rec.offset + 1
                got[(rec.partition, rec.offset)] = (rec.key, rec.value, rec.headers)
                codecs_seen.add(rec.compression)
            resp.release()
    assert fetched_bytes > 3 * ring.capacity and ring.skips > 0      # the ring wrapped
    assert codecs_seen == {0, 1, 2, 3, 4}
    assert got.keys() == produced.keys()
    for key, (codec, k, v, headers) in produced.items():
        assert got[key] == (k, v, headers), (codec, key)
