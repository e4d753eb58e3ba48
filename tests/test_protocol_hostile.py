"""The protocol decoders against hostile responses and careless callers: bounded memory for
responses made of tiny arrays, array counts checked against the bytes left before anything is
allocated, any C-contiguous buffer read as raw bytes, and a version outside the range (however
large) an UnsupportedVersionError."""

import gc
import os
import random
import struct
import sys
import tracemalloc

import pytest

from kafkacodec import CorruptRecordError, ResponseRingBuffer, UnsupportedVersionError
from kafkacodec.protocol import (
    AbortedTransaction,
    decode_api_versions_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_produce_response,
    encode_api_versions_request,
    encode_fetch_request,
    encode_metadata_request,
    encode_produce_request,
)

sys.path.insert(0, os.path.dirname(__file__))
from fetch_fixtures import build_fetch_response, build_records  # noqa: E402

MIB = 1 << 20


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# -- crafted responses: the smallest elements the schema allows, ~5 MiB in all ---------------
def flexible_empty_topics(size):
    """v12: topics of an empty compact name, no partitions, no tagged fields (3 bytes each)."""
    n = size // 3
    return (struct.pack(">i", 1) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + uvarint(n + 1)
            + b"\x01\x01\x00" * n + b"\x00"), 12


def topic_id_topics(size):
    """v13: topics named by 16-byte ids, no partitions (18 bytes each)."""
    n = size // 18
    rng = random.Random(1)
    return (struct.pack(">i", 1) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + uvarint(n + 1)
            + b"".join(rng.randbytes(16) + b"\x01\x00" for _ in range(n)) + b"\x00"), 13


def v4_partitions(size):
    """v4: one topic of null-records partitions without aborted transactions (30 bytes each)."""
    n = size // 30
    part = struct.pack(">ihqqii", 7, 0, 100, 100, -1, -1)
    return (struct.pack(">iii", 1, 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", n)
            + part * n), 4


def flexible_partitions(size):
    """v12: one topic of partitions with null compact arrays (37 bytes each)."""
    n = size // 37
    part = struct.pack(">ihqqq", 7, 0, 100, 100, 0) + b"\x00" + struct.pack(">i", -1) + b"\x00\x00"
    return (struct.pack(">i", 1) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + uvarint(2) + b"\x02t"
            + uvarint(n + 1) + part * n + b"\x00\x00"), 12


def aborted_transactions(size):
    """v4: one partition listing ~330,000 aborted transactions with distinct large ids."""
    n = size // 16
    aborted = b"".join(struct.pack(">qq", 10**12 + i, 10**12 + i) for i in range(n))
    part = struct.pack(">ihqqi", 7, 0, 100, 100, n) + aborted + struct.pack(">i", -1)
    return (struct.pack(">iii", 1, 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
            + part), 4


def produce_v3_partitions(size):
    """ProduceResponse v3: one topic of partitions with distinct large offsets (22 bytes each)."""
    n = size // 22
    parts = b"".join(struct.pack(">ihqq", i, 0, 10**12 + i, 10**12 + i) for i in range(n))
    return (struct.pack(">ii", 1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", n)
            + parts + struct.pack(">i", 0)), 3


def metadata_v0_partitions(size):
    """MetadataResponse v0: one topic of partitions without replicas (18 bytes each)."""
    n = size // 18
    parts = b"".join(struct.pack(">hiiii", 0, i, 10**6 + i, 0, 0) for i in range(n))
    return (struct.pack(">iii", 1, 0, 1) + struct.pack(">h", 0) + struct.pack(">h", 1) + b"t"
            + struct.pack(">i", n) + parts), 0


def walk_fetch(response):
    n = 0
    for topic in response.responses:
        n += 1
        for part in topic.partitions:
            n += len(part.aborted_transactions or ())
            n += 1
    return n


def walk_produce(response):
    return sum(1 + len(part.record_errors) for topic in response.responses
               for part in topic.partition_responses)


def walk_metadata(response):
    return sum(1 + len(part.replica_nodes) + len(part.isr_nodes) for topic in response.topics
               for part in topic.partitions) + len(response.brokers)


SHAPES = [flexible_empty_topics, topic_id_topics, v4_partitions, flexible_partitions,
          aborted_transactions, produce_v3_partitions, metadata_v0_partitions]
# How each shape is decoded and walked (default: a FetchResponse).
DECODERS = {produce_v3_partitions: (decode_produce_response, walk_produce),
            metadata_v0_partitions: (decode_metadata_response, walk_metadata)}


def traced_peak(fn):
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="a memory bound (tracemalloc) the installed run checks; under ASan the "
                           "2 MiB walks take a minute for code the hostile-input tests drive")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda f: f.__name__)
def test_decoding_a_2_mib_response_of_tiny_arrays_stays_within_5x(shape):
    # 5x: decode keeps 8 bytes per topic (the smallest topic is 3 bytes: 2.7x) and no
    # per-partition or per-transaction object; the rest is constant.  Before, the same bytes
    # became one namedtuple + list (+ str/UUID) per topic: 45x for the 3-byte topics (Produce:
    # 12x, Metadata: 17x for their partitions).
    decode, walk = DECODERS.get(shape, (decode_fetch_response, walk_fetch))
    body, version = shape(2 * MIB)        # the bound is a ratio: a larger body shows nothing more
    peak, response = traced_peak(lambda: decode(body, version))
    assert peak < 5 * len(body), f"{peak / len(body):.1f}x"
    # Walking every topic, partition and aborted transaction (keeping nothing) stays within
    # the same bound: objects are made one at a time (the 16-byte pairs are kept as 16 bytes).
    peak, walked = traced_peak(lambda: walk(response))
    assert walked > 0
    assert peak < 5 * len(body), f"{peak / len(body):.1f}x"


def test_the_lazy_view_shows_what_kafka_python_encoded():
    from kafka.protocol.consumer import FetchResponse as KpFetchResponse

    topic_response = KpFetchResponse.FetchableTopicResponse
    partition_data = topic_response.PartitionData
    records = build_records([(1, b"k", b"v", [])])
    for version in (4, 11, 12, 13):
        field = "topic_id" if version >= 13 else "topic"
        names = [__import__("uuid").UUID(int=i + 1) if version >= 13 else f"t{i}" for i in range(3)]
        msg = KpFetchResponse[version](
            throttle_time_ms=0, error_code=0, session_id=0,
            responses=[topic_response(**{field: name}, partitions=[
                partition_data(partition_index=p, error_code=p, high_watermark=100 + p,
                               last_stable_offset=90, log_start_offset=1,
                               aborted_transactions=[partition_data.AbortedTransaction(
                                   producer_id=p, first_offset=10 * p)] if p else None,
                               preferred_read_replica=-1, records=records if p else None)
                for p in range(i + 1)]) for i, name in enumerate(names)])
        raw = bytes(msg.encode())
        ours = decode_fetch_response(raw, version, header=False)
        assert len(ours.responses) == 3
        for i, topic in enumerate(ours.responses):
            assert (topic.topic_id if version >= 13 else topic.topic) == names[i]
            assert len(topic.partitions) == i + 1
            for p, part in enumerate(topic.partitions):
                assert (part.partition_index, part.error_code, part.high_watermark) == (p, p, 100 + p)
                assert part.aborted_transactions == ([AbortedTransaction(p, 10 * p)] if p else None)
                assert (bytes(part.records) if p else part.records) == (records if p else None)
        assert [t.topic for t in ours.responses[::-1]] == [t.topic for t in reversed(ours.responses)]
        assert ours.responses[-1].partitions[-1].partition_index == 2


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_the_lazy_produce_view_shows_what_kafka_python_encoded(version):
    from kafka.protocol.producer.produce import ProduceResponse as KpProduceResponse

    T = KpProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    errors = dict(record_errors=[P.BatchIndexAndErrorMessage(batch_index=1,
                                                            batch_index_error_message="bad")],
                  error_message="oops") if version >= 8 else {}
    msg = KpProduceResponse[version](responses=[T(name=f"t{i}", partition_responses=[
        P(index=p, error_code=p, base_offset=10**12 + p, log_append_time_ms=-1,
          log_start_offset=p, **errors) for p in range(i + 1)]) for i in range(3)],
        throttle_time_ms=9)
    ours = decode_produce_response(bytearray(msg.encode()), version, header=False)
    assert [t.name for t in ours.responses] == ["t0", "t1", "t2"]
    for i, topic in enumerate(ours.responses):
        assert [(p.partition_index, p.base_offset) for p in topic.partition_responses] == [
            (p, 10**12 + p) for p in range(i + 1)]
        assert all(p.record_errors == ([(1, "bad")] if version >= 8 else [])
                   for p in topic.partition_responses)
    assert ours.responses[-1].partition_responses[-1].partition_index == 2
    assert ours.responses[1:] == list(ours.responses)[1:]
    assert ours == decode_produce_response(msg.encode(), version, header=False)


@pytest.mark.parametrize("version", [0, 7, 9, 12])
def test_the_lazy_metadata_view_shows_what_kafka_python_encoded(version):
    from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse

    B = KpMetadataResponse.MetadataResponseBroker
    T = KpMetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    def since(first, **fields):
        return fields if version >= first else {}
    msg = KpMetadataResponse[version](
        brokers=[B(node_id=n, host=f"h{n}", port=9092 + n, **since(1, rack=None))
                 for n in range(3)],
        topics=[T(error_code=0, name=f"t{i}", **since(10, topic_id=__import__("uuid").UUID(int=i)),
                  **since(1, is_internal=False), **since(8, authorized_operations=set()),
                  partitions=[P(error_code=0, partition_index=p, leader_id=p % 3,
                                replica_nodes=[p, i], isr_nodes=[p], **since(7, leader_epoch=p),
                                **since(5, offline_replicas=[]))
                              for p in range(i + 1)]) for i in range(3)],
        **since(3, throttle_time_ms=4), **since(2, cluster_id="c"), **since(1, controller_id=1),
        **({"authorized_operations": set()} if 8 <= version <= 10 else {}))
    ours = decode_metadata_response(bytearray(msg.encode()), version, header=False)
    assert [(b.node_id, b.host, b.port) for b in ours.brokers] == [(n, f"h{n}", 9092 + n)
                                                                    for n in range(3)]
    assert [t.name for t in ours.topics] == ["t0", "t1", "t2"]
    for i, topic in enumerate(ours.topics):
        assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
                for p in topic.partitions] == [(p, p % 3, [p, i], [p]) for p in range(i + 1)]
    assert ours.leader("t2", 2) == ours.brokers[2]
    assert ours == decode_metadata_response(msg.encode(), version, header=False)


@pytest.mark.parametrize("shape", [produce_v3_partitions, metadata_v0_partitions],
                         ids=lambda f: f.__name__)
def test_produce_and_metadata_results_keep_no_hold_on_the_callers_buffer(shape):
    # Their lazy sequences read a copy of the response: the caller may reuse or resize its
    # buffer (a ring slot released, a bytearray grown) and the result still reads the same.
    decode, walk = DECODERS[shape]
    body, version = shape(220)
    buf = bytearray(body)
    response = decode(buf, version)
    before = repr(response)
    buf[:] = bytes(len(buf))
    buf += b"grown"                          # BufferError while an export is alive
    assert repr(response) == before and walk(response) > 0


@pytest.mark.parametrize("version", [4, 12, 13])
def test_an_array_count_larger_than_the_bytes_left_is_refused_before_allocating(version):
    # A count the bytes cannot hold is refused, naming its position: 2**31 - 1 topics,
    # partitions that need more bytes than each smallest element, and the old loose bound
    # (8 bytes a partition) no longer lets a count through that real partitions cannot fill.
    flexible = version >= 12
    head = struct.pack(">i", 1) + (b"\x00" if flexible else b"") + struct.pack(">i", 0)
    if version >= 7:
        head += struct.pack(">hi", 0, 0)
    count = uvarint(0xFFFFFFFF) if flexible else struct.pack(">i", 0x7FFFFFFF)
    with pytest.raises(CorruptRecordError, match="topics"):
        decode_fetch_response(head + count + bytes(64), version)
    name = bytes(16) if version >= 13 else (b"\x02t" if flexible else b"\x00\x01t")
    nparts = 10
    smallest = {4: 30, 12: 37, 13: 37}[version]
    parts = (uvarint(nparts + 1) if flexible else struct.pack(">i", nparts))
    one = (uvarint(2) if flexible else struct.pack(">i", 1))
    body = head + one + name + parts + bytes(nparts * smallest - 1)
    with pytest.raises(CorruptRecordError, match="partitions"):
        decode_fetch_response(body, version)


# -- any contiguous buffer, any version number -------------------------------------------------
def fetch_frame(version):
    return build_fetch_response(version, 9, [("orders", [(0, build_records([(5, b"k", b"v", [])]))])])


def casts(raw: bytes):
    padded = raw + bytes(-len(raw) % 8)
    return [memoryview(padded).cast("i"), memoryview(padded).cast("q"),
            memoryview(padded).cast("B", (len(padded) // 8, 8)), bytearray(padded)]


@pytest.mark.parametrize("version", [4, 12, 16])
def test_fetch_response_in_any_contiguous_buffer(version):
    body = fetch_frame(version)[4:]
    expected = decode_fetch_response(body, version)
    for data in casts(body):
        got = decode_fetch_response(data, version, size=len(body))
        part = got.responses[0].partitions[0]
        assert got.correlation_id == expected.correlation_id == 9
        assert bytes(part.records) == bytes(expected.responses[0].partitions[0].records)
        assert got.size == expected.size


def test_other_responses_in_any_contiguous_buffer():
    produce = (struct.pack(">ii", 3, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
               + struct.pack(">ihqq", 0, 0, 42, -1) + struct.pack(">i", 0))
    versions = struct.pack(">ih", 4, 0) + struct.pack(">i", 1) + struct.pack(">hhh", 1, 0, 16)
    metadata = struct.pack(">i", 5) + struct.pack(">i", 1) + struct.pack(">i", 0) + b"\x00\x01h" \
        + struct.pack(">i", 9092) + struct.pack(">i", 0)
    for decode, raw, version in ((decode_produce_response, produce, 3),
                                 (decode_api_versions_response, versions, 0),
                                 (decode_metadata_response, metadata, 0)):
        expected = decode(raw, version)
        for data in casts(raw):
            assert decode(data, version, size=len(raw)) == expected


def test_the_ring_takes_any_contiguous_buffer():
    value = b"v"
    while len(frame := build_fetch_response(
            12, 9, [("orders", [(0, build_records([(5, b"k", value, [])]))])])) % 8:
        value += b"v"
    for data in casts(frame):
        ring = ResponseRingBuffer(1024)
        assert ring.feed(data) == len(frame)
        resp = ring.next_response()
        assert resp.correlation_id == 9
        assert [r.value for r in resp.records(12)] == [value]
        # a RingView compares equal to the raw bytes of any contiguous buffer
        assert resp.payload == memoryview(frame[4:] + b"\0\0\0\0").cast("i")[:-1].cast("B")
        assert resp.payload != memoryview(frame[:-8]).cast("q")


BAD_VERSIONS = [2**31, 2**63, 2**64 + 4, -(2**31) - 1, -1, 17]


@pytest.mark.parametrize("bad", BAD_VERSIONS)
def test_a_version_out_of_range_is_unsupported_never_overflow(bad):
    frame = fetch_frame(12)
    calls = [
        lambda: decode_fetch_response(frame[4:], bad),
        lambda: encode_fetch_request([("t", [(0, 0)])], api_version=bad),
        lambda: decode_produce_response(b"", bad + 100 if bad == 17 else bad),
        lambda: encode_produce_request([("t", [(0, b"")])], api_version=bad + 100 if bad == 17 else bad),
        lambda: decode_metadata_response(b"", bad if bad != 17 else 13),
        lambda: encode_metadata_request(api_version=bad if bad != 17 else 13),
        lambda: decode_api_versions_response(b"", bad if bad != 17 else 4),
        lambda: encode_api_versions_request(api_version=bad if bad != 17 else 4),
    ]
    ring = ResponseRingBuffer(1024)
    ring.feed(frame)
    resp = ring.next_response()
    calls.append(lambda: resp.records(bad))
    for call in calls:
        with pytest.raises(UnsupportedVersionError, match="not supported"):
            call()
