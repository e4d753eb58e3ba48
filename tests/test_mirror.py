"""KIP-712 shallow mirroring: raw batches as records, trimming the batch a fetch starts inside,
raw multi-batch record sets and FetchResponse -> ProduceRequest, checked against kafka-python's
record readers/builders as an independent oracle."""

import struct
import uuid
import zlib

import crc32c
import kafka.codec
import pytest
from hypothesis import given, settings, strategies as st
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

import kafkacodec
from kafkacodec import Compression, CorruptRecordError, RecordTooLargeError, UnsupportedVersionError
from kafkacodec.mirror import RawBatchesBuilder, RawBytesBatchRecord, fetch_to_produce, shallow_records, trim_batch
from kafkacodec.protocol import decode_fetch_response

CODECS = {0: [0, 1, 2, 3], 1: [0, 1, 2, 3], 2: [0, 1, 2, 3, 4]}
ALL = [(m, c) for m, codecs in CODECS.items() for c in codecs]


def make_batch(magic, codec, base_offset, count, *, ts0=1_000_000, producer=None,
               transactional=False, value_size=20):
    """A batch as a broker stores and serves it (kafka-python's builders write the producer
    form: legacy wrappers with offset 0, which brokers rewrite)."""
    if magic < 2 and codec:
        return broker_wrapper(magic, codec, base_offset, count, ts0=ts0, value_size=value_size)
    kwargs = {}
    if producer is not None:
        kwargs = dict(producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
                      transactional=transactional)
    builder = MemoryRecordsBuilder(magic, codec, batch_size=1 << 24,
                                   offset=0 if magic == 2 else base_offset, **kwargs)
    for i in range(count):
        # timestamps out of order: the first record's is not the minimum
        ts = ts0 + ((i * 37) % 11) * 5 - 20
        key = None if i % 4 == 3 else b"k%d" % i
        value = (b"v%d-" % (base_offset + i)) * (value_size // 4)
        headers = [("h", b"%d" % i), ("n", None)] if magic == 2 and i % 2 else []
        assert builder.append(ts, key, value, headers) is not None
    builder.close()
    data = bytes(builder.buffer())
    if magic == 2:     # the broker's offset assignment: BaseOffset is outside the CRC
        data = struct.pack(">q", base_offset) + data[8:]
    return data


def broker_wrapper(magic, codec, base_offset, count, *, ts0, value_size):
    """A v0/v1 compressed wrapper as a broker writes it: wrapper offset = last offset, inner
    offsets absolute (v0) or relative from 0 (v1), v1 wrapper timestamp = max inner one."""
    inner = bytes(make_batch(magic, 0, base_offset if magic == 0 else 0, count, ts0=ts0,
                             value_size=value_size))
    timestamps = [r[1] for r in kp_records(inner)]
    encode = {1: kafka.codec.gzip_encode, 2: kafka.codec.snappy_encode,
              3: kafka.codec.lz4_encode_old_kafka if magic == 0 else kafka.codec.lz4_encode}[codec]
    value = encode(inner)
    body = struct.pack(">bb", magic, codec)
    if magic == 1:
        body += struct.pack(">q", max(timestamps))
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", base_offset + count - 1, len(message)) + message


def kp_records(data):
    """(offset, timestamp, key, value, headers) of every record, per kafka-python."""
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            headers = list(getattr(r, "headers", []) or [])
            timestamp = -1 if r.timestamp is None else r.timestamp     # v0: no timestamp
            out.append((r.offset, timestamp, r.key, r.value, headers))
    return out


def our_records(data):
    """The same through kafkacodec's own reader, every batch CRC-checked."""
    records = kafkacodec.MemoryRecords(bytes(data))
    for batch in records.batches():
        batch.ensure_valid()
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
            for r in records.records()]


def kp_batches(data):
    records = MemoryRecords(bytes(data))
    out = []
    while records.has_next():
        out.append(records.next_batch())
    return out


# --- RawBytesBatchRecord / shallow_records ---------------------------------------------------
@pytest.mark.parametrize("magic,codec", ALL)
def test_shallow_records_are_zero_copy_views_of_every_batch(magic, codec):
    batches = [make_batch(magic, codec, base, 5) for base in (0, 5, 10)]
    data = bytearray(b"".join(batches))
    records = list(shallow_records(data))
    assert b"".join(bytes(r.value) for r in records) == b"".join(batches)
    if magic < 2 and codec == 0:
        # every uncompressed legacy message is its own entry
        assert [(r.base_offset, r.offset, r.record_count) for r in records] == [(i, i, 1) for i in range(15)]
        return
    assert [bytes(r.value) for r in records] == batches
    for r, base in zip(records, (0, 5, 10)):
        assert isinstance(r, RawBytesBatchRecord)
        assert r.key is None and r.headers is None
        assert r.offset == base + 4
        assert r.magic == magic and r.compression == Compression(codec)
        assert not r.trimmed
        assert r.base_offset == (base if magic == 2 else None)
        assert r.record_count == (5 if magic == 2 else None)
    if magic == 2:
        kb = kp_batches(data)
        assert [r.timestamp for r in records] == [b.max_timestamp for b in kb]
        assert [r.record_count for r in records] == [5, 5, 5]
    # zero copy: the view writes through to the caller's buffer
    records[0].value[0] ^= 0xFF
    assert data[0] == batches[0][0] ^ 0xFF


def test_shallow_records_ignore_a_trailing_partial_batch_and_reject_corruption():
    a, b = make_batch(2, 3, 0, 3), make_batch(2, 3, 3, 3)
    data = a + b[:-1]
    assert [bytes(r.value) for r in shallow_records(data)] == [a]
    bad = bytearray(a)
    bad[16] = 7                                     # magic byte
    with pytest.raises(CorruptRecordError) as e:
        list(shallow_records(bytes(bad)))
    assert e.value.position == 16


# --- trimming -----------------------------------------------------------------------------------
@pytest.mark.parametrize("magic,codec", ALL)
@pytest.mark.parametrize("cut", [1, 3, 6])
def test_trimmed_first_batch_holds_exactly_the_records_from_the_fetch_offset(magic, codec, cut):
    base = 100
    first = make_batch(magic, codec, base, 7)
    later = make_batch(magic, codec, base + 7, 4)
    fetch_offset = base + cut
    out = list(shallow_records(first + later, fetch_offset))
    expected = [r for r in kp_records(first + later) if r[0] >= fetch_offset]
    if magic < 2 and codec == 0:
        # uncompressed legacy messages are single-record entries: nothing to trim
        assert all(not r.trimmed for r in out)
    else:
        assert out[0].trimmed
        assert bytes(out[-1].value) == later            # later batches byte for byte
    got = kp_records(b"".join(bytes(r.value) for r in out))
    assert got == expected
    assert our_records(b"".join(bytes(r.value) for r in out)) == expected
    if magic == 2:
        (trimmed_kp,) = kp_batches(bytes(out[0].value))
        assert trimmed_kp.validate_crc()
        assert trimmed_kp.base_offset == fetch_offset
        assert trimmed_kp.compression_type == codec
        assert trimmed_kp.last_offset_delta == base + 6 - fetch_offset
        assert out[0].record_count == 7 - cut
        assert out[0].timestamp == max(r[1] for r in expected if r[0] <= base + 6)
    elif codec:
        assert out[0].base_offset == fetch_offset and out[0].offset == base + 6
        assert out[0].record_count == 7 - cut


def test_trim_keeps_producer_state_and_adjusts_the_sequence():
    data = make_batch(2, 4, 50, 6, producer=(77, 3, 2147483646), transactional=True)
    r = trim_batch(data, 53)
    assert r.trimmed and r.is_transactional and r.producer_id == 77 and r.producer_epoch == 3
    # sequences wrap from INT32_MAX to 0: 2147483646 + 3 -> 1
    assert r.base_sequence == 1
    (kb,) = kp_batches(bytes(r.value))
    assert kb.producer_id == 77 and kb.producer_epoch == 3 and kb.base_sequence == 1
    assert kb.is_transactional and kb.validate_crc()


def test_trim_batch_returns_the_batch_itself_or_none():
    data = make_batch(2, 1, 10, 3)
    whole = trim_batch(data, 10)
    assert not whole.trimmed and bytes(whole.value) == data
    assert trim_batch(data, 13) is None
    with pytest.raises(CorruptRecordError):
        trim_batch(data + data, 11)


def test_batches_before_the_fetch_offset_are_skipped_and_control_batches_pass_intact():
    a = make_batch(2, 3, 0, 4)
    # COMMIT marker from spec record-formats.md §7 (offset 100, producer 7)
    marker = bytes.fromhex(
        "0000000000000064 00000042 00000003 02 8f76ed9a 0030 00000000"
        "00000000000003e8 00000000000003e8 0000000000000007 0001 ffffffff 00000001"
        "20 00 00 00 08 00000001 0c 000000000005 00")
    b = make_batch(2, 3, 101, 3)
    out = list(shallow_records(a + marker + b, 100))
    assert [bytes(r.value) for r in out] == [marker, b]
    assert out[0].is_control and out[0].is_transactional


# --- RawBatchesBuilder ------------------------------------------------------------------------------
def test_raw_batches_builder_appends_until_max_bytes():
    a, b = make_batch(2, 3, 0, 5), make_batch(2, 3, 5, 5)
    builder = RawBatchesBuilder(len(a) + len(b) + 10)
    assert builder.append(next(shallow_records(a)))
    assert builder.append(b)
    assert not builder.append(a)                         # no room: False, nothing appended
    assert builder.batch_count == 2 and builder.size_in_bytes == len(a) + len(b)
    assert builder.build() == a + b
    assert bytes(builder.records()) == a + b
    with pytest.raises(RecordTooLargeError):
        RawBatchesBuilder(len(a) - 1).append(a)
    with pytest.raises(CorruptRecordError):
        builder.clear()
        builder.append(a[:-3])


# --- fetch_to_produce ---------------------------------------------------------------------------
def topic_id(name):
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def kp_fetch_response(version, topics):
    T = KFetchResponse.FetchableTopicResponse
    P = T.PartitionData
    responses = []
    for name, parts in topics:
        partitions = [P(partition_index=i, error_code=err, high_watermark=100, last_stable_offset=100,
                        log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                        records=records) for i, err, records in parts]
        ident = dict(topic=name) if version < 13 else dict(topic_id=topic_id(name))
        responses.append(T(partitions=partitions, **ident))
    msg = KFetchResponse[version](throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
    msg.with_header(correlation_id=5)
    return bytes(msg.encode(header=True))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("fetch_version,produce_version", [(10, 7), (12, 9), (16, 11)])
def test_fetch_to_produce_forwards_every_batch_byte_for_byte(codec, fetch_version, produce_version):
    p0 = [make_batch(2, codec, base, 10) for base in (0, 10, 20)]
    p1 = [make_batch(2, codec, 7, 3)]
    partial = make_batch(2, codec, 30, 10)[:-5]
    raw = kp_fetch_response(fetch_version, [("a", [(0, 0, b"".join(p0) + partial), (1, 0, p1[0]),
                                                   (2, 6, b""), (3, 0, None)]),
                                            ("b", [(4, 1, p1[0])])])
    response = decode_fetch_response(raw, fetch_version)
    next_offsets = {}
    frame = fetch_to_produce(response, api_version=produce_version, correlation_id=9, acks=-1,
                             timeout_ms=1234, next_offsets=next_offsets,
                             topic_names={topic_id(n): n for n in "ab"},
                             max_batches_per_partition=-1)
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=produce_version, header=True)
    assert decoded.header.correlation_id == 9
    assert decoded.acks == -1 and decoded.timeout_ms == 1234
    assert [t.name for t in decoded.topic_data] == ["a"]
    parts = {p.index: bytes(p.records) for p in decoded.topic_data[0].partition_data}
    assert parts == {0: b"".join(p0), 1: p1[0]}
    assert next_offsets == {("a", 0): 30, ("a", 1): 10}


def test_fetch_to_produce_defaults_to_one_batch_per_partition():
    """Real brokers refuse a second batch of a partition in one ProduceRequest v3+
    (INVALID_RECORD), so the default sends one and reports where to continue."""
    p0 = [make_batch(2, 1, base, 10) for base in (0, 10, 20)]
    p1 = [make_batch(2, 1, base, 5) for base in (7, 12)]
    raw = kp_fetch_response(12, [("a", [(0, 0, b"".join(p0)), (1, 0, b"".join(p1))])])
    next_offsets = {}
    frame = fetch_to_produce(decode_fetch_response(raw, 12), next_offsets=next_offsets)
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=9, header=True)
    parts = {p.index: bytes(p.records) for p in decoded.topic_data[0].partition_data}
    assert parts == {0: p0[0], 1: p1[0]}
    assert next_offsets == {("a", 0): 10, ("a", 1): 12}


def test_fetch_to_produce_one_batch_per_partition_and_trimming():
    p0 = [make_batch(2, 3, base, 10) for base in (0, 10, 20)]
    raw = kp_fetch_response(12, [("a", [(0, 0, b"".join(p0))])])
    response = decode_fetch_response(raw, 12)
    next_offsets = {}
    frame = fetch_to_produce(response, fetch_offsets={("a", 0): 4}, max_batches_per_partition=1,
                             next_offsets=next_offsets)
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=9, header=True)
    records = bytes(decoded.topic_data[0].partition_data[0].records)
    assert [r[0] for r in kp_records(records)] == list(range(4, 10))
    assert next_offsets == {("a", 0): 10}
    frame = fetch_to_produce(response, fetch_offsets={("a", 0): 10}, max_batches_per_partition=1)
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=9, header=True)
    assert bytes(decoded.topic_data[0].partition_data[0].records) == p0[1]
    assert fetch_to_produce(decode_fetch_response(kp_fetch_response(12, [("a", [(0, 0, b"")])]), 12)) is None


def test_fetch_to_produce_around_a_dropped_marker_with_ids_into_a_given_buffer():
    # a control batch between two data batches is left out: the two are sent back to back;
    # client and transactional ids reach kafka-python's decoder; `out` is filled and returned
    from kafkacodec import WriteBuffer

    marker = bytes.fromhex(
        "000000000000000a 00000042 00000003 02 8f76ed9a 0030 00000000"
        "00000000000003e8 00000000000003e8 0000000000000007 0001 ffffffff 00000001"
        "20 00 00 00 08 00000001 0c 000000000005 00")
    a, b = make_batch(2, 1, 0, 10), make_batch(2, 1, 11, 4)
    raw = kp_fetch_response(12, [("a", [(0, 0, a + marker + b)]), ("b", [(1, 0, b)])])
    out = WriteBuffer()
    next_offsets = {}
    for version in (3, 9, 11):
        frame = fetch_to_produce(decode_fetch_response(raw, 12), api_version=version, client_id="me",
                                 transactional_id="tx", max_batches_per_partition=-1, out=out,
                                 next_offsets=next_offsets)
        assert frame is out
        decoded = KProduceRequest.decode(bytes(frame)[4:], version=version, header=True)
        assert decoded.header.client_id == "me" and decoded.transactional_id == "tx"
        assert [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in decoded.topic_data] == [
            ("a", [(0, a + b)]), ("b", [(1, b)])]
        assert next_offsets == {("a", 0): 15, ("b", 1): 15}


def test_fetch_to_produce_refuses_legacy_batches_and_zstd_below_v7():
    raw = kp_fetch_response(12, [("a", [(0, 0, make_batch(1, 1, 0, 2))])])
    with pytest.raises(UnsupportedVersionError) as e:
        fetch_to_produce(decode_fetch_response(raw, 12))
    assert e.value.offset == 1
    raw = kp_fetch_response(12, [("a", [(0, 0, make_batch(2, 4, 0, 2))])])
    with pytest.raises(kafkacodec.UnsupportedCompressionError):
        fetch_to_produce(decode_fetch_response(raw, 12), api_version=6)


# --- more trimming cases ---------------------------------------------------------------------------
def with_log_append_time(batch, append_time):
    """The broker's in-place LogAppendTime rewrite: attributes bit 3, MaxTimestamp, CRC-32C."""
    data = bytearray(batch)
    data[22] |= 0x08
    data[35:43] = struct.pack(">q", append_time)
    data[17:21] = struct.pack(">I", crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize("codec", [0, 3, 4])
def test_trim_log_append_time_batch_keeps_the_append_time(codec):
    data = with_log_append_time(make_batch(2, codec, 40, 6), 5_000_000)
    r = trim_batch(data, 42)
    assert r.trimmed and r.timestamp == 5_000_000 and r.timestamp_type == 1
    got = kp_records(bytes(r.value))
    assert got == [x for x in kp_records(data) if x[0] >= 42]
    assert {x[1] for x in got} == {5_000_000}


def test_trim_a_compacted_batch_with_offset_gaps():
    builder = DefaultRecordBatchBuilder(2, 3, False, -1, -1, -1, 1 << 20)
    for delta, ts in ((0, 100), (2, 90), (5, 120)):
        builder.append(delta, ts, b"k%d" % delta, b"v%d" % delta, [])
    data = struct.pack(">q", 1000) + bytes(builder.build())[8:]
    r = trim_batch(data, 1001)
    assert (r.base_offset, r.offset, r.record_count) == (1002, 1005, 2)
    assert [(x[0], x[1], x[2]) for x in kp_records(bytes(r.value))] == [(1002, 90, b"k2"), (1005, 120, b"k5")]
    (kb,) = kp_batches(bytes(r.value))
    assert kb.first_timestamp == 90 and kb.max_timestamp == 120 and kb.validate_crc()
    r = trim_batch(data, 1003)
    assert (r.base_offset, r.offset, r.record_count, r.timestamp) == (1005, 1005, 1, 120)


def test_trim_errors_are_kafkacodec_errors():
    data = bytearray(make_batch(2, 0, 0, 4))
    data[57:61] = struct.pack(">i", 5)                      # RecordsCount says 5, 4 are there
    with pytest.raises(CorruptRecordError):
        trim_batch(bytes(data), 2)
    data = bytearray(make_batch(2, 3, 0, 4))
    data[70:80] = b"\xff" * 10                               # garbage inside the lz4 frame
    with pytest.raises(kafkacodec.KafkaCodecError):
        trim_batch(bytes(data), 2)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL), st.integers(1, 25), st.data())
def test_trimming_matches_kafka_python_for_any_cut(magic_codec, count, data):
    magic, codec = magic_codec
    base = data.draw(st.integers(0, 1 << 40))
    first = make_batch(magic, codec, base, count)
    second = make_batch(magic, codec, base + count, 3)
    fetch_offset = base + data.draw(st.integers(0, count + 1))
    out = list(shallow_records(first + second, fetch_offset))
    expected = [r for r in kp_records(first + second) if r[0] >= fetch_offset]
    assert kp_records(b"".join(bytes(r.value) for r in out)) == expected
    assert our_records(b"".join(bytes(r.value) for r in out)) == expected
    if fetch_offset <= base + count and (magic == 2 or codec):
        assert bytes(out[-1].value) == second           # the batch after a trimmed one is intact


from lying_str import LyingName as _LyingName  # noqa: E402


@pytest.mark.parametrize("claim", [0, 1 << 40])
def test_fetch_to_produce_sizes_topic_names_by_their_utf8_bytes(claim):
    name = _LyingName("töpic-ü" * 40)
    name.claim = claim
    raw = kp_fetch_response(16, [("a", [(0, 0, make_batch(2, 0, 0, 3))])])
    response = decode_fetch_response(raw, 16)
    frame = fetch_to_produce(response, api_version=11, topic_names={topic_id("a"): name})
    decoded = KProduceRequest.decode(bytes(frame)[4:], version=11, header=True)
    assert [t.name for t in decoded.topic_data] == [str.__str__(name)]


@pytest.fixture
def wrapper_limit():
    """Lower the mirror's int32 wrapper Size limit (a test hook: no 2 GiB wrapper is made)."""
    import kafkacodec._mirror as mirror
    old = mirror._set_max_wrapper_size(2**31 - 1)
    yield mirror._set_max_wrapper_size
    mirror._set_max_wrapper_size(old)


@pytest.mark.parametrize("magic", [0, 1])
def test_trim_refuses_a_wrapper_its_int32_size_field_cannot_hold(magic, wrapper_limit):
    batch = make_batch(magic, 1, 100, 7, value_size=200)
    trimmed = bytes(trim_batch(batch, 103).value)
    size = struct.unpack_from(">i", trimmed, 8)[0]         # the Size field as written
    assert size == len(trimmed) - 12
    wrapper_limit(size)                                     # exactly at the limit: written
    assert bytes(trim_batch(batch, 103).value) == trimmed
    wrapper_limit(size - 1)
    with pytest.raises(RecordTooLargeError, match="int32") as raised:
        trim_batch(batch, 103)
    assert raised.value.offset == 106 and raised.value.position == 0


# --- the mirror's producer: what each produce error code does --------------------------------

@pytest.mark.parametrize(("code", "outcome"), [
    (0, "acked"), (46, "acked"),                 # NONE, DUPLICATE_SEQUENCE_NUMBER (had it)
    (6, "retried, metadata"),                    # NOT_LEADER_OR_FOLLOWER: stale metadata
    (7, "retried"),                              # REQUEST_TIMED_OUT
    (2, "fatal"),                                # CORRUPT_MESSAGE: our bytes, sent again the same
    (10, "fatal"), (87, "fatal"),                # MESSAGE_TOO_LARGE, INVALID_RECORD
    (32000, "fatal"),                            # a code no table knows
])
def test_the_producer_acks_retries_or_stops_by_the_error_code(code, outcome):
    """A ProduceResponse (written by kafka-python) with one partition's error code: acked,
    put back to be sent again (Metadata refreshed first for InvalidMetadataException codes), or
    fatal, as Kafka's producer classifies them (RetriableException), except CORRUPT_MESSAGE:
    retriable in Kafka's table, fatal here, since the mirror sends the same bytes again and has
    no delivery timeout to end that."""
    from types import SimpleNamespace

    from kafka.protocol.producer.produce import ProduceResponse as KProduceResponse

    from kafkacodec.consumer import BrokerError
    from kafkacodec.mirror._producer import IdempotentProducer, Item, _TargetPartition

    T = KProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    answer = KProduceResponse[8](throttle_time_ms=0, responses=[T(name="t", partition_responses=[
        P(index=0, error_code=code, base_offset=40, log_append_time_ms=-1, log_start_offset=0,
          record_errors=[], error_message=None)])])
    answer.with_header(correlation_id=1)
    payload = bytes(answer.encode(header=True))
    released = []
    response = SimpleNamespace(payload=payload, release=lambda: released.append(1))
    cluster = SimpleNamespace(metadata_stale=False)
    producer = IdempotentProducer(cluster)
    tp = _TargetPartition("t", 0)
    item = Item(SimpleNamespace(base_offset=40, offset=44, record_count=5), ("s", 0), 45)
    item.sequence, item.serial = 0, 0
    tp.in_flight.append(item)
    producer._on_response(response, 8, (1, [(tp, [item])]))
    assert released == [1]
    if outcome == "acked":
        assert item.acked and producer.fatal is None and not tp.pending
    elif outcome.startswith("retried"):
        assert producer.fatal is None and list(tp.pending) == [item] and producer.retries == 1
        assert cluster.metadata_stale is outcome.endswith("metadata")
    else:
        assert isinstance(producer.fatal, BrokerError) and producer.fatal.error_code == code
        assert not tp.pending


def test_the_producer_sends_one_batch_of_a_partition_until_its_first_is_acknowledged():
    """A broker takes any first sequence from a producer it has no state for (Kafka 4.1 took
    sequence 10 after sequence 0 failed with NOT_LEADER_OR_FOLLOWER on a topic just created,
    then refused 0 as OUT_OF_ORDER): until one batch of a partition is acknowledged, one is in
    flight; then up to max_in_flight.  And an acknowledgement is never reported past a batch
    waiting to be sent again (the checkpoint must not skip it)."""
    from types import SimpleNamespace

    from kafkacodec.mirror._producer import IdempotentProducer, Item

    sent = []
    cluster = SimpleNamespace(metadata_stale=False, leaders={("t", 0): 1}, request_timeout=30.0,
                              available=lambda node, now: True,
                              send=lambda node, request: sent.append(request))
    acked = []
    producer = IdempotentProducer(cluster, on_acked=lambda item: acked.append(item.source_next))
    items = []
    for n in range(4):
        item = Item(SimpleNamespace(base_offset=10 * n, offset=10 * n + 9, record_count=10, value=b"x"),
                    ("s", 0), 10 * n + 10)
        items.append(item)
        producer.enqueue("t", 0, item)
    tp = producer.partition("t", 0)
    producer.send_ready()
    assert [i.sequence for i in tp.in_flight] == [0] and len(sent) == 1
    producer._ack(tp, items[0])
    assert acked == [10]
    producer.send_ready()
    assert [i.sequence for i in tp.in_flight] == [10, 20, 30] and len(sent) == 4
    producer._fail(tp, items[1], "error 6")            # NOT_LEADER_OR_FOLLOWER
    producer._ack(tp, items[2])                        # a broker that took its successor anyway
    producer._ack(tp, items[3])
    assert acked == [10], "reported past the batch waiting to be sent again"
