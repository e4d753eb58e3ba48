"""FetchResponse records through the ring's flyweight iterator, checked against kafka-python."""

import os
import random
import socket
import struct
import threading

import pytest

from kafkacodec import BufferReleasedError, InvalidCrcError, ResponseRingBuffer

sys_path_entry = os.path.dirname(__file__)   # --import-mode=importlib: helpers beside the tests
if sys_path_entry not in __import__("sys").path:
    __import__("sys").path.insert(0, sys_path_entry)
from fetch_fixtures import build_fetch_response, build_records, reference_records

VERSIONS = [4, 5, 7, 11, 12, 13, 16]


def sample_topics(rng, magic=2, compression=0):
    def batch(n):
        return build_records([(1_700_000_000_000 + i, None if i % 5 == 0 else b"k%d" % i,
                               None if i % 7 == 3 else rng.randbytes(rng.randint(0, 300)) * 2,
                               [("h", b"v"), ("n", None)] if i % 3 == 0 else [])
                              for i in range(n)], magic=magic, compression=compression)
    return [("orders", [(0, batch(5) + batch(3)), (1, None), (2, b"")]),
            ("audit-log", [(7, batch(1)), (3, batch(20) + batch(2)[:-7])])]   # partial tail


def iterate(resp, version):
    return [(r.topic if version < 13 else r.topic_id, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in resp.records(version)]


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("magic, codec", [(m, c) for m in (1, 2) for c in CODECS
                                          if not (m == 1 and c == "zstd")])   # zstd: magic 2 only
def test_records_match_kafka_python(version, magic, codec):
    rng = random.Random(version * 10 + magic)
    compression = CODECS[codec]
    frame = build_fetch_response(version, 42, sample_topics(rng, magic, compression))
    ring = ResponseRingBuffer(len(frame) + 5)
    assert ring.feed(frame) == len(frame)
    resp = ring.next_response()
    assert resp.correlation_id == 42
    expected = reference_records(frame, version)
    if magic == 1:
        expected = [e[:6] + ((),) for e in expected]
    # an uncompressed v1 set is one entry per message: one survives the cut at the end
    assert len(expected) == 5 + 3 + 1 + 20 + (1 if magic == 1 and not compression else 0)
    assert iterate(resp, version) == expected


def test_the_flyweight_is_one_object_and_dies_with_the_response():
    frame = build_fetch_response(12, 1, [("t", [(0, build_records(
        [(i, b"key", b"value-%d" % i, []) for i in range(100)]))])])
    ring = ResponseRingBuffer(4096)
    ring.feed(frame)
    resp = ring.next_response()
    records = resp.records(12)
    seen = {id(rec) for rec in resp.records(12)}
    assert len(seen) == 1
    first = next(records)
    kept = first.copy()
    assert kept == ("t", 0, 0, 0, b"key", b"value-0", ())
    second = next(records)
    assert second is first and first.offset == 1 and first.value == b"value-1"
    resp.release()
    for touch in (lambda: first.offset, lambda: first.value, lambda: first.headers,
                  lambda: next(records), lambda: resp.records(12)):
        with pytest.raises(BufferReleasedError):
            touch()
    assert kept[5] == b"value-0"


def test_a_corrupt_batch_names_both_checksums():
    batch = bytearray(build_records([(0, b"k", b"v" * 50, [])]))
    batch[-3] ^= 0xFF
    frame = build_fetch_response(4, 1, [("t", [(0, bytes(batch))])])
    ring = ResponseRingBuffer(1024)
    ring.feed(frame)
    with pytest.raises(InvalidCrcError) as info:
        list(ring.next_response().records(4))
    assert info.value.stored != info.value.computed and info.value.offset == 0


def test_truncated_response_body_raises_corrupt_not_crash():
    from kafkacodec import CorruptRecordError
    frame = build_fetch_response(12, 1, [("t", [(0, build_records([(0, b"k", b"v", [])]))])])
    body = frame[4:]
    for cut in range(4, len(body), 7):
        ring = ResponseRingBuffer(1024)
        ring.feed(struct.pack(">i", cut) + body[:cut])
        resp = ring.next_response()
        try:
            list(resp.records(12))
        except CorruptRecordError:
            pass


def test_fetch_responses_over_loopback_tcp_with_wraps():
    rng = random.Random(7)
    frames, expected = [], []
    for cid in range(120):
        version = (4, 12)[cid % 2]
        topics = [("t%d" % (cid % 3), [(p, build_records(
            [(cid * 1000 + i, b"%d-%d" % (cid, i), rng.randbytes(rng.randint(0, 2000)), [])
             for i in range(rng.randint(1, 12))])) for p in range(rng.randint(1, 3))])]
        frame = build_fetch_response(version, cid, topics)
        frames.append(frame)
        expected.extend(reference_records(frame, version))
    stream = b"".join(frames)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        pos = 0
        with conn:
            while pos < len(stream):
                n = rng.choice((1, 5, 64, 999, 4096, 30000))
                conn.sendall(stream[pos:pos + n])
                pos += n

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ring = ResponseRingBuffer(max(len(f) for f in frames) + 5 + 1000)
    got = []
    with socket.create_connection(listener.getsockname()) as sock:
        while ring.writable() == 0 or ring.recv_into(sock):
            while (resp := ring.next_response()) is not None:
                version = (4, 12)[resp.correlation_id % 2]
                got.extend(iterate(resp, version))
                resp.release()
    thread.join()
    listener.close()
    assert got == expected
    assert ring.skips >= 10 and len(stream) > 10 * ring.capacity


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from kafkacodec import KafkaCodecError  # noqa: E402

_SEED_FRAMES = {v: build_fetch_response(v, 5, sample_topics(random.Random(v), 2, c))
                for v, c in ((4, 0), (12, 1), (11, 3), (12, 4))}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(sorted(_SEED_FRAMES)), data=st.data())
def test_hostile_fetch_bytes_end_in_a_result_or_a_kafkacodec_error(version, data):
    frame = bytearray(_SEED_FRAMES[version])
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(4, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    ring = ResponseRingBuffer(len(frame) + 5)
    ring.feed(frame)
    resp = ring.next_response()
    for v in (version, data.draw(st.sampled_from(VERSIONS))):
        try:
            for rec in resp.records(v):
                rec.key, rec.value, rec.headers
        except KafkaCodecError:
            pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=600), st.integers(5, 700))
def test_random_stream_bytes_never_crash_the_ring(blob, capacity):
    ring = ResponseRingBuffer(capacity)
    try:
        pos = 0
        while pos < len(blob):
            n = ring.feed(blob[pos:])
            while (resp := ring.next_response()) is not None:
                try:
                    list(resp.records(12))
                except KafkaCodecError:
                    pass
                resp.release()
            if n == 0:
                break
            pos += n
    except KafkaCodecError:
        pass


@pytest.mark.parametrize("codec", list(CODECS))
def test_zero_copy_key_and_value_views(codec):
    records = [(i, b"key-%d" % i, b"value-%d" % i * 3, []) for i in range(30)] + [(99, None, None, [])]
    batches = build_records(records, compression=CODECS[codec]) + build_records(records[:2])
    frame = build_fetch_response(12, 3, [("t", [(0, batches)])])
    ring = ResponseRingBuffer(8192)
    ring.feed(frame)
    resp = ring.next_response()
    kept = []
    for rec in resp.records(12):
        key, value = rec.key_view, rec.value_view
        assert (key, value) == (rec.key, rec.value) or (key is None and value is None)
        kept.append((key, value, rec.key, rec.value))
    assert len(kept) == 33
    # views of a compressed batch keep their own buffer; views into the ring die with it
    resp.release()
    for key, value, key_copy, value_copy in kept[:31]:
        if key is None:
            continue
        if codec == "none":
            with pytest.raises(BufferReleasedError):
                bytes(value)
        else:
            assert bytes(key) == key_copy and bytes(value) == value_copy
    with pytest.raises(BufferReleasedError):
        bytes(kept[31][1])                   # the second batch is uncompressed: in the ring


def transactional_log(compression):
    from kafkacodec import MemoryRecordsBuilder

    def batch(base, pid, n, transactional=True):
        b = MemoryRecordsBuilder(compression=compression, base_offset=base,
                                 producer_id=pid if transactional else -1,
                                 producer_epoch=0 if transactional else -1,
                                 base_sequence=0 if transactional else -1,
                                 is_transactional=transactional)
        for i in range(n):
            b.append(1000 + base + i, None, b"%d" % (base + i))
        return b.build()

    marker = MemoryRecordsBuilder.build_end_txn_marker
    return (batch(0, 7, 3)                       # pid 7: aborted below
            + batch(3, -1, 2, transactional=False)
            + batch(5, 8, 2)                     # pid 8: committed
            + marker(False, 7, 0, 0, base_offset=7)
            + marker(True, 8, 0, 0, base_offset=8)
            + batch(9, 7, 2)                     # pid 7 again: a new transaction
            + batch(11, 9, 1))                   # pid 9: aborted, marker not fetched yet


@pytest.mark.parametrize("version", [4, 12])
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_read_committed_drops_aborted_transactions_as_kafka(version, compression):
    frame = build_fetch_response(version, 1, [("t", [(0, transactional_log(compression))])],
                                 aborted=[(9, 11), (7, 0)])   # any order: sorted like Kafka
    ring = ResponseRingBuffer(4096)
    ring.feed(frame)
    resp = ring.next_response()
    uncommitted = [rec.offset for rec in resp.records(version)]
    committed = [rec.offset for rec in resp.records(version, isolation_level=1)]
    assert uncommitted == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11]    # markers never show
    assert committed == [3, 4, 5, 6, 9, 10]
    with pytest.raises(ValueError):
        resp.records(version, isolation_level=2)


@pytest.mark.parametrize("version", [4, 12, 16])
def test_partition_fields_agree_with_the_protocol_decoder(version):
    from kafkacodec.protocol import decode_fetch_response

    frame = build_fetch_response(version, 8, sample_topics(random.Random(3)))
    ring = ResponseRingBuffer(len(frame) + 5)
    ring.feed(frame)
    resp = ring.next_response()
    decoded = decode_fetch_response(resp.payload, version)
    expected = {}
    for topic in decoded.responses:
        for part in topic.partitions:
            name = topic.topic if version < 13 else topic.topic_id
            expected[(name, part.partition_index)] = (
                part.error_code, part.high_watermark, part.last_stable_offset,
                part.log_start_offset if version >= 5 else -1)
    del decoded                                   # it held raw exports of the payload
    seen = set()
    for rec in resp.records(version):
        key = (rec.topic if version < 13 else rec.topic_id, rec.partition)
        assert (rec.error_code, rec.high_watermark, rec.last_stable_offset,
                rec.log_start_offset) == expected[key]
        seen.add(key)
    assert seen == {k for k in expected if k[1] in (0, 3, 7)}    # partitions with records
