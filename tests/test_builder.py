"""MemoryRecordsBuilder: the bytes Kafka would write, checked against the spec's worked examples,
byte-for-byte against kafka-python's and aiokafka's builders where the format is deterministic,
and decoded by both peers' readers (independent oracles) for every magic x codec x shape."""

import struct
import zlib

import crc32c as crc32c_pkg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kafkacodec
from kafkacodec import (Compression, ControlType, MemoryRecordsBuilder, RecordTooLargeError,
                        TimestampType, UnsupportedCompressionError, UnsupportedVersionError)

from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioV2Builder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder as KpV2Builder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
MAGICS = [0, 1, 2]


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# --- peers as readers ---------------------------------------------------------------------------
def peer_batches(reader, data):
    """[(batch, [records])]; batch.crc_ok is the peer's CRC check, made before iterating
    (kafka-python swaps a legacy wrapper's buffer for the decompressed set while iterating)."""
    data = bytes(data)
    records = reader(data)
    out = []
    position = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        crc_ok = batch.validate_crc()
        magic = data[position + 16]
        position += 12 + struct.unpack_from(">i", data, position + 8)[0]
        out.append((BatchView(batch, crc_ok), [(r.offset, *normal_timestamp(magic, r), r.key,
                                                r.value, [tuple(x) for x in r.headers]) for r in batch]))


def normal_timestamp(magic, record):
    # A v1 message with timestamp -1: kafka-python says (-1, CreateTime), aiokafka (None, None).
    if magic == 1 and record.timestamp in (None, -1):
        return -1, 0
    return record.timestamp, record.timestamp_type


class BatchView:
    def __init__(self, batch, crc_ok):
        self._batch = batch
        self.crc_ok = crc_ok

    def __getattr__(self, name):
        return getattr(self._batch, name)


def peer_records(reader, data):
    return [r for _, records in peer_batches(reader, data) for r in records]


def readers_for(magic, codec):
    # aiokafka refuses magic-0 LZ4 (the KAFKA-3160 framing) outright: kafka-python reads it.
    if magic == 0 and codec == "lz4":
        return [KpMemoryRecords]
    return [KpMemoryRecords, AioMemoryRecords]


def expected(records, magic, timestamp_type=TimestampType.CREATE_TIME, log_append_time=None,
             base_offset=0):
    """What a reader must see for records appended at consecutive offsets."""
    out = []
    for i, (ts, key, value, headers) in enumerate(records):
        if magic == 0:
            ts_seen, type_seen = None, None
        elif timestamp_type == TimestampType.LOG_APPEND_TIME:
            ts_seen, type_seen = log_append_time, 1
        else:
            ts_seen, type_seen = ts, 0
        out.append((base_offset + i, ts_seen, type_seen, key, value, list(headers)))
    return out


# --- record shapes ----------------------------------------------------------------------------
def shape_records(shape):
    if shape == "simple":
        return [(1_700_000_000_000 + i, b"key-%d" % i, b"value-%d" % i, ()) for i in range(5)]
    if shape == "null_and_empty":
        return [(1000, None, None, ()), (1001, b"", b"", ()), (1002, None, b"", ()), (1003, b"", None, ())]
    if shape == "large":
        return [(5, b"k" * 300, bytes(range(256)) * 1200, ()), (6, None, b"x" * 70_000, ())]
    if shape == "headers":
        return [(10, b"k", b"v", [("trace", b"abc"), ("null", None), ("empty", b""), ("ü-ñ", b"\xff")]),
                (11, None, None, [("a", b"1")]), (12, b"k2", b"v2", ())]
    if shape == "negative_deltas":
        return [(5_000, b"a", b"1", ()), (1_000, b"b", b"2", ()), (9_000, b"c", b"3", ()), (0, b"d", b"4", ())]
    if shape == "no_timestamps":
        return [(-1, b"a", b"1", ()), (-1, None, b"2", ())]
    raise AssertionError(shape)


SHAPES = ["simple", "null_and_empty", "large", "headers", "negative_deltas", "no_timestamps"]


def build(records, **kwargs):
    builder = MemoryRecordsBuilder(**kwargs)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build()


# --- the spec's worked examples -----------------------------------------------------------------
def test_spec_v2_example():
    builder = MemoryRecordsBuilder()
    builder.append(1000, None, b"hi")
    assert builder.build() == h("""
        0000000000000000 0000003a ffffffff 02 233dad44 0000 00000000
        00000000000003e8 00000000000003e8 ffffffffffffffff ffff ffffffff 00000001
        10 00 00 00 01 04 6869 00""")


def test_spec_v0_and_v1_examples():
    v0 = MemoryRecordsBuilder(magic=0)
    v0.append(-1, None, b"hi")
    assert v0.build() == h("0000000000000000 00000010 fd6ebddb 00 00 ffffffff 00000002 6869")
    v1 = MemoryRecordsBuilder(magic=1, base_offset=5)
    v1.append(1000, None, b"hi")
    assert v1.build() == h("0000000000000005 00000018 06614b6d 01 00 00000000000003e8 ffffffff 00000002 6869")


def test_spec_commit_marker_example():
    expected_bytes = h("""
        0000000000000064 00000042 00000003 02 8f76ed9a 0030 00000000
        00000000000003e8 00000000000003e8 0000000000000007 0001 ffffffff 00000001
        20 00 00 00 08 00000001 0c 000000000005 00""")
    marker = MemoryRecordsBuilder.build_end_txn_marker(
        True, producer_id=7, producer_epoch=1, coordinator_epoch=5, base_offset=100,
        timestamp=1000, partition_leader_epoch=3)
    assert marker == expected_bytes
    assert len(marker) == 78
    # the same through the generic control-record path
    builder = MemoryRecordsBuilder(base_offset=100, producer_id=7, producer_epoch=1,
                                   is_transactional=True, partition_leader_epoch=3,
                                   is_control_batch=True)
    builder.append_control_record(1000, ControlType.COMMIT, b"\x00\x00\x00\x00\x00\x05")
    assert builder.build() == expected_bytes


def test_abort_marker_is_read_as_abort_by_kafka_python():
    marker = MemoryRecordsBuilder.build_end_txn_marker(False, 9, 2, 11, base_offset=3, timestamp=77)
    for reader in (KpMemoryRecords, AioMemoryRecords):
        [(batch, records)] = peer_batches(reader, marker)
        assert batch.crc_ok and batch.is_control_batch and batch.is_transactional
        assert batch.producer_id == 9 and batch.producer_epoch == 2 and batch.base_sequence == -1
        assert records == [(3, 77, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x0b", [])]
    record = next(iter(KpMemoryRecords(marker).next_batch()))
    assert record.abort and not record.commit
    assert record.value == b"\x00\x00\x00\x00\x00\x0b"


# --- byte-for-byte equality with the peers' builders ----------------------------------------------
def peer_v2_bytes(builder_cls, records, **state):
    builder = builder_cls(magic=2, compression_type=0, is_transactional=state.get("tx", False),
                          producer_id=state.get("pid", -1), producer_epoch=state.get("epoch", -1),
                          base_sequence=state.get("seq", -1), batch_size=1 << 30)
    for offset, (ts, key, value, headers) in enumerate(records):
        builder.append(offset, ts, key, value, list(headers))
    return bytes(builder.build())


# PartitionLeaderEpoch (set by the broker, not CRC-covered): kafka-python writes 0, aiokafka -1.
PEER_V2 = [(KpV2Builder, 0), (AioV2Builder, -1)]


@pytest.mark.parametrize("peer,epoch", PEER_V2, ids=["kafka-python", "aiokafka"])
@pytest.mark.parametrize("shape", SHAPES)
def test_v2_uncompressed_equals_peer_builders(peer, epoch, shape):
    records = shape_records(shape)
    ours = build(records, partition_leader_epoch=epoch)
    assert ours == peer_v2_bytes(peer, records)


@pytest.mark.parametrize("peer,epoch", PEER_V2, ids=["kafka-python", "aiokafka"])
def test_v2_idempotent_transactional_equals_peer_builders(peer, epoch):
    records = shape_records("simple")
    ours = build(records, partition_leader_epoch=epoch, producer_id=123456789012, producer_epoch=7,
                 base_sequence=2_147_483_646, is_transactional=True)
    assert ours == peer_v2_bytes(peer, records, tx=True, pid=123456789012, epoch=7, seq=2_147_483_646)


@pytest.mark.parametrize("peer", [KpLegacyBuilder, AioLegacyBuilder], ids=["kafka-python", "aiokafka"])
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("shape", ["simple", "null_and_empty", "large", "no_timestamps"])
def test_legacy_uncompressed_equals_peer_builders(peer, magic, shape):
    records = shape_records(shape)
    theirs = peer(magic, 0, 1 << 30)
    for offset, (ts, key, value, _) in enumerate(records):
        theirs.append(offset, ts, key, value)
    assert build(records, magic=magic) == bytes(theirs.build())


# --- peers decode everything we build ------------------------------------------------------------
def matrix():
    for magic in MAGICS:
        for codec in CODECS:
            if magic < 2 and codec == "zstd":
                continue
            for shape in SHAPES:
                if magic < 2 and shape == "headers":
                    continue
                yield magic, codec, shape


@pytest.mark.parametrize("magic,codec,shape", list(matrix()))
def test_peers_decode_what_we_build(magic, codec, shape):
    records = shape_records(shape)
    data = build(records, magic=magic, compression=codec, base_offset=1000)
    for reader in readers_for(magic, codec):
        batches = peer_batches(reader, data)
        assert [r for _, rs in batches for r in rs] == expected(records, magic, base_offset=1000)
        assert all(batch.crc_ok for batch, _ in batches)
    kp_batches = peer_batches(KpMemoryRecords, data)
    assert {batch.compression_type for batch, _ in kp_batches} == {Compression[codec.upper()]}
    if magic == 2 or codec != "none":
        assert len(kp_batches) == 1
    else:
        assert len(kp_batches) == len(records)         # one standalone message per record


@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("codec", CODECS)
def test_v2_header_fields(codec, transactional):
    records = shape_records("negative_deltas")
    data = build(records, compression=codec, base_offset=42, partition_leader_epoch=9,
                 producer_id=5, producer_epoch=3, base_sequence=100, is_transactional=transactional)
    for reader in (KpMemoryRecords, AioMemoryRecords):
        [(batch, _)] = peer_batches(reader, data)
        assert batch.base_offset == 42
        assert batch.last_offset_delta == 3
        assert batch.first_timestamp == 5_000          # the first record's, not the minimum
        assert batch.max_timestamp == 9_000
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 3, 100)
        assert batch.is_transactional == transactional and not batch.is_control_batch
        assert batch.crc_ok
    assert struct.unpack_from(">iiI", data, 8)[1] == 9            # leader epoch, not CRC-covered
    assert struct.unpack_from(">i", data, 57)[0] == 4              # RecordsCount
    assert crc32c_pkg.crc32c(data[21:]) == struct.unpack_from(">I", data, 17)[0]


@pytest.mark.parametrize("codec", CODECS)
def test_v2_log_append_time(codec):
    records = shape_records("negative_deltas")
    data = build(records, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                 log_append_time=1_234_567)
    assert data[22] & 0x08
    for reader in (KpMemoryRecords, AioMemoryRecords):
        [(batch, got)] = peer_batches(reader, data)
        assert batch.max_timestamp == 1_234_567
        assert batch.first_timestamp == 5_000          # deltas stay as produced
        assert got == expected(records, 2, TimestampType.LOG_APPEND_TIME, 1_234_567)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_v1_log_append_time(codec):
    records = shape_records("negative_deltas")
    data = build(records, magic=1, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                 log_append_time=777, base_offset=3)
    for reader in readers_for(1, codec):
        assert peer_records(reader, data) == expected(records, 1, TimestampType.LOG_APPEND_TIME, 777, 3)
    if codec != "none":
        # Kafka writes the append time into every inner message too (spec §4.2).
        inner = decompress_wrapper(data)
        assert all(struct.unpack_from(">q", inner, pos + 18)[0] == 777 and inner[pos + 17] == 0x08
                   for pos in entry_positions(inner))


def entry_positions(data):
    pos = 0
    while pos < len(data):
        yield pos
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]


def decompress_wrapper(data):
    from kafka import codec as kc
    magic, attributes = data[16], data[17]
    key_at = 22 if magic == 0 else 30
    assert struct.unpack_from(">i", data, key_at - 4)[0] == -1          # null wrapper key
    size = struct.unpack_from(">i", data, key_at)[0]
    value = data[key_at + 4:key_at + 4 + size]
    codec = attributes & 7
    if codec == 1:
        return kc.gzip_decode(value)
    if codec == 2:
        return kc.snappy_decode(value)
    return kc.lz4_decode_old_kafka(value) if magic == 0 else kc.lz4_decode(value)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_legacy_wrapper_layout(magic, codec):
    records = shape_records("negative_deltas")
    data = build(records, magic=magic, compression=codec, base_offset=100)
    offset, size = struct.unpack_from(">qi", data)
    assert len(data) == 12 + size                              # exactly one wrapper message
    assert offset == 103                                       # the last absolute offset
    assert zlib.crc32(data[16:]) == struct.unpack_from(">I", data, 12)[0]
    assert data[17] == Compression[codec.upper()]
    if magic == 1:
        assert struct.unpack_from(">q", data, 18)[0] == 9_000  # max inner timestamp
    inner = decompress_wrapper(data)
    inner_offsets = [struct.unpack_from(">q", inner, p)[0] for p in entry_positions(inner)]
    # v1: relative to the base offset; v0: absolute.
    assert inner_offsets == ([0, 1, 2, 3] if magic == 1 else [100, 101, 102, 103])
    assert all(inner[p + 17] & 7 == 0 and inner[p + 16] == magic for p in entry_positions(inner))


def test_lz4_magic0_uses_the_broken_header_checksum():
    for magic, checksum in ((0, 0x1A), (1, 0x82)):
        data = build([(1, None, b"hi", ())], magic=magic, compression="lz4")
        key_at = 22 if magic == 0 else 30
        frame = data[key_at + 4:]
        assert frame[:7] == bytes([0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, checksum])


# --- offsets, multi-batch, sequences --------------------------------------------------------------
@pytest.mark.parametrize("magic,codec", [(2, "none"), (2, "zstd"), (1, "none"), (1, "gzip"), (0, "snappy")])
def test_multi_batch_log_is_dense(magic, codec):
    builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=50)
    log = b""
    for batch in range(4):
        for i in range(batch + 1):
            builder.append(1000 * batch + i, b"%d" % batch, b"%d" % i)
        log += builder.build()
    assert builder.build() == b""                              # an empty batch builds nothing
    assert builder.next_offset == 60
    for reader in (KpMemoryRecords, AioMemoryRecords):
        got = peer_records(reader, log)
        assert [r[0] for r in got] == list(range(50, 60))
        assert [r[4] for r in got] == [b"%d" % i for b in range(4) for i in range(b + 1)]


def test_sequences_continue_across_builds_and_wrap():
    builder = MemoryRecordsBuilder(producer_id=1, producer_epoch=0, base_sequence=2_147_483_645)
    builder.append_many(1, None, [b"a", b"b"])
    first = builder.build()
    builder.append_many(1, None, [b"c", b"d", b"e"])
    second = builder.build()
    assert struct.unpack_from(">i", first, 53)[0] == 2_147_483_645
    # records of the second batch: 2^31-1, 0, 1 (Kafka's incrementSequence wraps to 0)
    assert struct.unpack_from(">i", second, 53)[0] == 2_147_483_647
    assert builder.base_sequence == 2
    assert struct.unpack_from(">q", second)[0] == 2


@pytest.mark.parametrize("magic,codec", [(2, "none"), (2, "lz4"), (1, "none"), (1, "gzip"), (0, "none"), (0, "gzip")])
def test_append_with_offset_gaps(magic, codec):
    builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=10)
    for offset in (10, 13, 20):
        builder.append_with_offset(offset, 100 + offset, None, b"%d" % offset)
    data = builder.build()
    for reader in readers_for(magic, codec):
        assert [r[0] for r in peer_records(reader, data)] == [10, 13, 20]
    if magic == 2:
        assert struct.unpack_from(">i", data, 23)[0] == 10    # LastOffsetDelta
        assert struct.unpack_from(">i", data, 57)[0] == 3     # RecordsCount
    assert builder.next_offset == 21
    builder.append(5, None, b"next")
    assert peer_records(KpMemoryRecords, builder.build())[0][0] == 21


def test_append_with_offset_must_increase():
    builder = MemoryRecordsBuilder(base_offset=10)
    with pytest.raises(ValueError, match="below the batch base offset"):
        builder.append_with_offset(9, 1, None, b"x")
    builder.append_with_offset(12, 1, None, b"x")
    with pytest.raises(ValueError, match="must increase"):
        builder.append_with_offset(12, 1, None, b"x")
    with pytest.raises(ValueError, match="2\\^31-1"):
        builder.append_with_offset(10 + 2**31, 1, None, b"x")
    assert builder.record_count == 1


def test_offsets_end_at_2_63_minus_1():
    builder = MemoryRecordsBuilder(base_offset=2**63 - 2)
    builder.append(1, None, b"a")
    with pytest.raises(ValueError, match="would pass offset 2\\^63-1"):
        builder.append_many(1, None, [b"b", b"c"])
    builder.append(1, None, b"b")
    assert builder.next_offset == 2**63
    with pytest.raises(ValueError, match="exhausted"):
        builder.append(1, None, b"c")
    data = builder.build()
    assert [r[0] for r in peer_records(KpMemoryRecords, data)] == [2**63 - 2, 2**63 - 1]
    with pytest.raises(ValueError, match="exhausted"):
        builder.append(1, None, b"c")


def test_delete_horizon_bit_and_base_timestamp():
    data = build([(5_000, b"k", b"v", ()), (4_000, None, b"w", ())], delete_horizon_ms=3_000)
    assert data[22] & 0x40
    assert struct.unpack_from(">qq", data, 27) == (3_000, 5_000)   # base = horizon, max
    [(batch, got)] = peer_batches(KpMemoryRecords, data)
    # deltas are relative to the horizon, so the records keep their timestamps
    assert [r[1] for r in got] == [5_000, 4_000]


# --- inputs ----------------------------------------------------------------------------------------
def test_numpy_integers_are_ints():
    builder = MemoryRecordsBuilder(base_offset=np.int64(4))
    builder.append(np.int64(1000), None, b"a")
    builder.append_with_offset(np.uint32(9), np.int32(5), None, b"b")
    assert [r[:2] for r in peer_records(KpMemoryRecords, builder.build())] == [(4, 1000), (9, 5)]


def test_any_bytes_like_key_and_value():
    buffers = [b"abc", bytearray(b"abc"), memoryview(b"xabcx")[1:4], np.frombuffer(b"abc", np.uint8)]
    for buf in buffers:
        data = build([(1, buf, buf, [("h", buf)])])
        assert peer_records(KpMemoryRecords, data) == [(0, 1, 0, b"abc", b"abc", [("h", b"abc")])]


def test_append_many_matches_append():
    values = [b"v%d" % i if i % 7 else None for i in range(300)]
    keys = [b"k%d" % i if i % 5 else None for i in range(300)]
    timestamps = [1000 + (i * 37) % 101 for i in range(300)]
    headers = [[("i", b"%d" % i)] if i % 3 == 0 else () for i in range(300)]
    one = MemoryRecordsBuilder(compression="none", base_offset=7)
    for ts, k, v, hd in zip(timestamps, keys, values, headers):
        one.append(ts, k, v, hd)
    expected_bytes = one.build()
    for ts_arg in (timestamps, tuple(timestamps), np.array(timestamps, dtype=np.int64)):
        many = MemoryRecordsBuilder(base_offset=7)
        many.append_many(ts_arg, keys, values, headers)
        assert many.build() == expected_bytes
    same_ts = MemoryRecordsBuilder()
    same_ts.append_many(5, None, tuple(values))
    assert [r[1] for r in peer_records(AioMemoryRecords, same_ts.build())] == [5] * 300


def test_append_many_mixes_direct_and_buffer_rows():
    # bytes and None rows are written in place, other buffers through their export: any mix
    # in one call gives the bytes one append() per record gives
    kinds = [lambda b: b, bytearray, memoryview, lambda b: np.frombuffer(b, np.uint8), lambda b: None]
    values = [kinds[i % 5](b"value-%d" % i) for i in range(200)]
    keys = [kinds[(i // 3) % 5](b"k%d" % i) for i in range(200)]
    one = MemoryRecordsBuilder(base_offset=3)
    for i, (k, v) in enumerate(zip(keys, values)):
        one.append(100 + i, k, v)
    many = MemoryRecordsBuilder(base_offset=3)
    many.append_many(list(range(100, 300)), keys, values)
    assert many.build() == one.build()


def test_append_many_is_all_or_nothing():
    builder = MemoryRecordsBuilder()
    builder.append(1, b"k", b"v")
    size = builder.uncompressed_size_in_bytes
    with pytest.raises(TypeError, match="value must be bytes-like"):
        builder.append_many([1, 2, 3], None, [b"a", b"b", "c"])
    with pytest.raises(ValueError, match="negative timestamp"):
        builder.append_many(np.array([1, -2], dtype=np.int64), None, [b"a", b"b"])
    with pytest.raises(ValueError, match="2 keys for 3 values"):
        builder.append_many(1, [b"a", b"b"], [b"a", b"b", b"c"])
    assert builder.record_count == 1 and builder.uncompressed_size_in_bytes == size
    builder.append(2, None, b"w")
    assert [r[4] for r in peer_records(KpMemoryRecords, builder.build())] == [b"v", b"w"]


@pytest.mark.parametrize("magic", MAGICS)
@pytest.mark.parametrize("codec", CODECS)
def test_build_into_writes_what_build_returns(magic, codec):
    if magic < 2 and codec == "zstd":
        pytest.skip("zstd needs magic 2")
    rows = [[(1000 + i, b"k%d" % i, b"value %d" % i * (1 + i % 4)) for i in range(n)] for n in (3, 1, 40)]
    expected_builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=10)
    out = kafkacodec.WriteBuffer()
    flat = bytearray(b"\xee" * 100_000)
    builder, into_flat = (MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=10)
                          for _ in range(2))
    log, position = b"", 7
    for batch in rows:
        for b in (expected_builder, builder, into_flat):
            b.append_many([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch])
        built = expected_builder.build()
        assert builder.build_into(out) == len(out) == len(log) + len(built)
        end = into_flat.build_into(flat, position)
        assert flat[position:end] == built and end == position + len(built)
        log += built
        position = end
    assert bytes(out) == log and flat[:7] == flat[position:][:7] == b"\xee" * 7
    assert builder.next_offset == into_flat.next_offset == 10 + 44 and builder.record_count == 0
    for reader in readers_for(magic, codec):             # independent readers of the log
        assert [r[4] for r in peer_records(reader, log)] == [r[2] for batch in rows for r in batch]


def test_build_into_refuses_a_buffer_it_does_not_fit_and_keeps_the_batch():
    builder = MemoryRecordsBuilder(base_offset=5)
    builder.append_many(1, None, [b"x" * 50] * 4)
    reference = MemoryRecordsBuilder(base_offset=5)
    reference.append_many(1, None, [b"x" * 50] * 4)
    batch = reference.build()
    small = bytearray(len(batch) + 9)
    with pytest.raises(ValueError, match=f"the batch takes {len(batch)} bytes, {len(batch) - 1} are left"):
        builder.build_into(small, 10)
    with pytest.raises(ValueError, match="past the end"):
        builder.build_into(small, len(small) + 1)
    with pytest.raises(BufferError):
        builder.build_into(b"read-only" * 100)
    with pytest.raises(ValueError, match="is written at its end"):
        builder.build_into(kafkacodec.WriteBuffer(), 3)
    out = kafkacodec.WriteBuffer()
    view = memoryview(out)                              # a live view: the buffer cannot grow
    with pytest.raises(BufferError):
        builder.build_into(out)
    view.release()
    assert small == bytearray(len(small)) and builder.record_count == 4
    assert builder.build_into(np.zeros(len(batch), np.uint8)) == len(batch)    # exactly enough
    assert builder.record_count == 0 and builder.build_into(small, 3) == 3     # empty: nothing
    builder = MemoryRecordsBuilder(base_offset=5)
    builder.append_many(1, None, [b"x" * 50] * 4)
    assert builder.build_into(out) == len(batch) and bytes(out) == batch


def test_state_and_batch_size_limit():
    builder = MemoryRecordsBuilder(max_batch_size=200)
    assert builder.record_count == 0 and builder.estimated_size_in_bytes == 61
    assert builder.has_room_for(1, None, b"x" * 1000)             # an empty batch takes one record
    builder.append(1, None, b"x" * 100)
    assert builder.estimated_size_in_bytes == len(build([(1, None, b"x" * 100, ())]))
    assert not builder.is_full
    assert builder.has_room_for(2, None, b"y" * 20)
    assert not builder.has_room_for(2, None, b"y" * 100)
    builder.append(2, None, b"y" * 100)
    assert builder.is_full and builder.record_count == 2
    assert len(builder.build()) > 200
    assert builder.record_count == 0 and not builder.is_full
    gz = MemoryRecordsBuilder(compression="gzip")
    gz.append(1, None, b"z" * 1000)
    assert gz.estimated_size_in_bytes == 61 + int((gz.uncompressed_size_in_bytes - 61) * 1.05)


def test_properties_report_the_configuration():
    builder = MemoryRecordsBuilder(magic=1, compression=3, timestamp_type=1, log_append_time=9,
                                   compression_level=12)
    assert builder.magic == 1 and builder.compression is Compression.LZ4
    assert builder.timestamp_type is TimestampType.LOG_APPEND_TIME and builder.log_append_time == 9
    assert builder.compression_level == 12
    assert "lz4" in repr(builder)
    assert kafkacodec.MemoryRecordsBuilder is MemoryRecordsBuilder


def test_compression_levels_change_bytes_not_records():
    records = [(1, None, bytes(range(256)) * 40, ())]
    fast = build(records, compression="gzip", compression_level=1)
    best = build(records, compression="gzip", compression_level=9)
    assert peer_records(KpMemoryRecords, fast) == peer_records(KpMemoryRecords, best)


# --- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,error,match", [
    (dict(magic=3), UnsupportedVersionError, "magic 3"),
    (dict(magic=1, compression="zstd"), UnsupportedCompressionError, "zstd needs magic 2"),
    (dict(magic=0, compression="zstd"), UnsupportedCompressionError, "zstd needs magic 2"),
    (dict(compression="brotli"), UnsupportedCompressionError, "unknown compression"),
    (dict(compression=7), UnsupportedCompressionError, "unknown compression"),
    (dict(magic=1, producer_id=5, producer_epoch=0, base_sequence=0), UnsupportedVersionError, "producer id"),
    (dict(magic=0, is_transactional=True), UnsupportedVersionError, "transactional"),
    (dict(magic=1, is_control_batch=True), UnsupportedVersionError, "control"),
    (dict(magic=1, delete_horizon_ms=5), UnsupportedVersionError, "delete horizon"),
    (dict(magic=0, timestamp_type=TimestampType.LOG_APPEND_TIME), UnsupportedVersionError, "no timestamps"),
    (dict(magic=2, timestamp_type=TimestampType.NO_TIMESTAMP_TYPE), ValueError, "needs a timestamp type"),
    (dict(timestamp_type=5), ValueError, "unknown timestamp_type"),
    (dict(is_transactional=True), ValueError, "need a producer_id"),
    (dict(producer_id=3), ValueError, "producer_epoch"),
    (dict(producer_id=3, producer_epoch=1), ValueError, "base_sequence"),
    (dict(producer_epoch=40_000), ValueError, "out of range"),
    (dict(base_offset=-1), ValueError, "out of range"),
    (dict(log_append_time=5), ValueError, "only used with"),
    (dict(compression="none", compression_level=3), ValueError, "needs a codec"),
    (dict(compression="snappy", compression_level=3), ValueError, "no compression levels"),
    (dict(compression="gzip", compression_level=10), ValueError, "out of range"),
    (dict(compression="zstd", compression_level="3"), TypeError, "must be an int"),
    (dict(compression="zstd", compression_level=-1), ValueError, "not supported"),
    (dict(compression="lz4", compression_level=0), ValueError, "out of range"),
    (dict(base_offset="0"), TypeError, "must be an int"),
])
def test_invalid_configuration(kwargs, error, match):
    with pytest.raises(error, match=match):
        MemoryRecordsBuilder(**kwargs)


def test_invalid_appends():
    builder = MemoryRecordsBuilder()
    with pytest.raises(ValueError, match="invalid negative timestamp -2"):
        builder.append(-2, None, b"x")
    with pytest.raises(TypeError, match="timestamp .* must be an int"):
        builder.append(1.5, None, b"x")
    with pytest.raises(TypeError, match="timestamp .* must be an int"):
        builder.append(None, None, b"x")
    with pytest.raises(TypeError, match="not bool"):
        builder.append(True, None, b"x")
    with pytest.raises(ValueError, match="64 bits"):
        builder.append(2**63, None, b"x")
    with pytest.raises(TypeError, match="encode it first"):
        builder.append(1, "text", b"x")
    with pytest.raises(TypeError, match="value must be bytes-like"):
        builder.append(1, None, 12)
    with pytest.raises(TypeError, match="header key must be str"):
        builder.append(1, None, b"x", [(b"k", b"v")])
    with pytest.raises(TypeError, match="header must be a"):
        builder.append(1, None, b"x", [("k",)])
    with pytest.raises(ValueError, match="control"):
        builder.append_control_record(1, ControlType.COMMIT, b"")
    assert builder.record_count == 0
    legacy = MemoryRecordsBuilder(magic=1)
    with pytest.raises(UnsupportedVersionError, match="headers"):
        legacy.append(1, None, b"x", [("k", b"v")])
    assert legacy.record_count == 0
    control = MemoryRecordsBuilder(producer_id=1, producer_epoch=0, is_transactional=True,
                                   is_control_batch=True)
    with pytest.raises(ValueError, match="append_control_record"):
        control.append(1, None, b"x")
    with pytest.raises(ValueError, match="unknown control_type 7"):
        control.append_control_record(1, 7, b"")
    control.append_control_record(1, ControlType.LEADER_CHANGE, b"\x00\x00")
    assert control.record_count == 1
    not_tx = MemoryRecordsBuilder(producer_id=1, producer_epoch=0, is_control_batch=True)
    with pytest.raises(ValueError, match="is_transactional"):
        not_tx.append_end_txn_marker(1, True, 0)


def test_errors_are_kafkacodec_errors():
    for error in (UnsupportedVersionError, UnsupportedCompressionError, RecordTooLargeError):
        assert issubclass(error, kafkacodec.KafkaCodecError)


# --- property: build with ours, read with kafka-python --------------------------------------------
timestamps = st.one_of(st.just(-1), st.integers(0, 2**53))
blobs = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
                        max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(magic=st.sampled_from(MAGICS), codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**40),
       records=st.lists(st.tuples(timestamps, blobs, blobs, header_lists), min_size=1, max_size=20))
def test_round_trip_through_kafka_python(magic, codec, base_offset, records):
    if magic < 2:
        if codec == "zstd":
            codec = "gzip"
        records = [(ts, k, v, ()) for ts, k, v, _ in records]
    data = build(records, magic=magic, compression=codec, base_offset=base_offset)
    assert peer_records(KpMemoryRecords, data) == expected(records, magic, base_offset=base_offset)


# --- Arrow columns --------------------------------------------------------------------------------
@pytest.mark.parametrize("binary_type", ["binary", "string", "large_binary", "large_string"])
def test_append_many_from_arrow_arrays(binary_type):
    pa = pytest.importorskip("pyarrow")
    raw_values = [b"v%d" % i if i % 4 else None for i in range(50)] + [b""]
    raw_keys = [None if i % 3 == 0 else b"k%d" % i for i in range(51)]
    make = (lambda xs: [None if x is None else x.decode() for x in xs]) if "string" in binary_type else list
    arrow_type = getattr(pa, binary_type)()
    # sliced arrays exercise the Arrow offset and validity bit position
    values = pa.array([b"pad"] * 3 + make(raw_values), type=arrow_type).slice(3)
    keys = pa.array([None] * 5 + make(raw_keys), type=arrow_type).slice(5)
    timestamps = pa.array(range(1000, 1051), type=pa.timestamp("ms"))
    arrow = MemoryRecordsBuilder(base_offset=3)
    arrow.append_many(timestamps, keys, values)
    plain = MemoryRecordsBuilder(base_offset=3)
    plain.append_many(list(range(1000, 1051)), raw_keys, raw_values)
    assert arrow.build() == plain.build()


def sliced_batches(count, per_batch, make_columns, **builder_args):
    """(batches written from row ranges of whole columns, from per-batch slices of them)."""
    timestamps, keys, values, headers = make_columns()
    ranged, sliced = MemoryRecordsBuilder(**builder_args), MemoryRecordsBuilder(**builder_args)
    out_ranged, out_sliced = [], []
    for start in range(0, count, per_batch):
        stop = min(start + per_batch, count)
        ranged.append_many(timestamps, keys, values, headers, start, stop if stop < count else None)
        out_ranged.append(ranged.build())
        cut = [None if column is None or isinstance(column, int) else column[start:stop]
               for column in (timestamps, keys, values, headers)]
        sliced.append_many(timestamps if isinstance(timestamps, int) else cut[0], *cut[1:])
        out_sliced.append(sliced.build())
    return out_ranged, out_sliced


@pytest.mark.parametrize("form", ["lists", "tuples", "arrow", "arrow sliced", "large arrow", "numpy"])
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_append_many_row_ranges_equal_slices(form, codec):
    pa = pytest.importorskip("pyarrow")
    count = 61
    raw_values = [b"value-%d" % i * (i % 5) if i % 7 else None for i in range(count)]
    raw_keys = [None if i % 3 == 0 else b"k%d" % i for i in range(count)]
    raw_stamps = [1_700_000_000_000 + 3 * i for i in range(count)]
    raw_headers = [[("h", b"%d" % i)] * (i % 2) for i in range(count)]

    def make_columns():
        if form in ("lists", "tuples"):
            kind = list if form == "lists" else tuple
            return kind(raw_stamps), kind(raw_keys), kind(raw_values), kind(raw_headers)
        if form == "numpy":
            return np.array(raw_stamps, dtype=np.int64), raw_keys, raw_values, None
        arrow_type = pa.large_binary() if form == "large arrow" else pa.binary()
        pad = 4 if form == "arrow sliced" else 0
        keys = pa.array([b"pad"] * pad + raw_keys, arrow_type).slice(pad)
        values = pa.array([None] * pad + raw_values, arrow_type).slice(pad)
        return pa.array(raw_stamps, pa.timestamp("ms")), keys, values, None

    for per_batch in (1, 16, 60, 61):
        ranged, sliced = sliced_batches(count, per_batch, make_columns, compression=codec)
        assert ranged == sliced and len(ranged) == -(-count // per_batch)
    records = [(r.offset, r.timestamp, r.key, r.value) for r in kafkacodec.MemoryRecords(b"".join(ranged)).records()]
    assert records == list(zip(range(count), raw_stamps, raw_keys, raw_values))


def test_append_many_row_range_checks():
    builder = MemoryRecordsBuilder()
    values = [b"a", b"b", b"c"]
    for start, stop in ((-1, None), (0, 4), (2, 1), (4, None)):
        with pytest.raises(ValueError, match=r"rows \[.*\) are not within the 3 rows given"):
            builder.append_many(1, None, values, None, start, stop)
    with pytest.raises(TypeError):
        builder.append_many(1, None, values, None, 0, "2")
    builder.append_many(1, None, values, None, 3)             # an empty range: nothing
    builder.append_many(1, None, values, None, 1, 2)
    with pytest.raises(ValueError, match="invalid negative timestamp -5 at index 2"):
        builder.append_many(np.array([1, 1, -5], dtype=np.int64), None, values, None, 2)
    assert [(r.offset, r.value) for r in kafkacodec.MemoryRecords(builder.build()).records()] == [(0, b"b")]


def test_append_many_holds_the_arrow_arrays_it_parsed_only_weakly():
    pa = pytest.importorskip("pyarrow")
    import gc
    import weakref

    builder = MemoryRecordsBuilder()
    written = []
    for round_ in range(3):
        values = pa.array([b"round-%d-%d" % (round_, i) for i in range(8)])
        stamps = pa.array([round_] * 8, pa.int64())
        for start in (0, 4):
            builder.append_many(stamps, values, values, None, start, start + 4)
        gone = weakref.ref(values), weakref.ref(stamps)
        del values, stamps
        gc.collect()
        assert [ref() for ref in gone] == [None, None]       # not kept alive by the builder
        written += [(r.timestamp, r.value) for r in kafkacodec.MemoryRecords(builder.build()).records()]
    # a new array (maybe at the freed one's address) is read as itself
    assert written == [(round_, b"round-%d-%d" % (round_, i)) for round_ in range(3) for i in range(8)]


def test_append_many_reads_native_int64_timestamp_buffers_and_releases_them():
    import array

    expected = MemoryRecordsBuilder()
    expected.append_many([5, 6, 7], None, [b"a", b"b", b"c"])
    batch = expected.build()
    stamps = array.array("q", [5, 6, 7])
    for column in (np.array([5, 6, 7], dtype=np.int64), np.array([5, 6, 7], dtype="<i8"),
                   memoryview(stamps), stamps, memoryview(bytes(stamps)).cast("q")):
        builder = MemoryRecordsBuilder()
        builder.append_many(column, None, [b"a", b"b", b"c"])
        assert builder.build() == batch
    stamps.append(8)                                    # no export left behind
    with pytest.raises(ValueError, match="4 timestamps for 3 values"):
        MemoryRecordsBuilder().append_many(stamps, None, [b"a", b"b", b"c"])
    stamps.append(9)                                    # not after an error either
    for bad in (np.array([5, 6, 7], dtype=">i8"), np.array([5, 6, 7], dtype=np.uint64),
                np.array([5, 6, 7], dtype=np.int32), np.arange(6, dtype=np.int64)[::2],
                np.arange(3, dtype=np.int64).reshape(3, 1), bytearray(24)):
        with pytest.raises(TypeError, match="contiguous int64 buffer"):
            MemoryRecordsBuilder().append_many(bad, None, [b"a", b"b", b"c"])


def test_append_many_rejects_unsuitable_arrow_arrays():
    pa = pytest.importorskip("pyarrow")
    builder = MemoryRecordsBuilder()
    with pytest.raises(TypeError, match="binary or string"):
        builder.append_many(1, None, pa.array([1, 2]))
    with pytest.raises(ValueError, match="nulls"):
        builder.append_many(pa.array([1, None]), None, [b"a", b"b"])
    with pytest.raises(TypeError, match="int64 buffer"):
        builder.append_many(np.array([1.0, 2.0]), None, [b"a", b"b"])
    with pytest.raises(TypeError, match="timestamps"):
        builder.append_many(pa.array([1.0, 2.0]), None, [b"a", b"b"])
    with pytest.raises(TypeError, match="values must be"):
        builder.append_many(1, None, {b"a"})
    assert builder.record_count == 0


# --- our reader reads what we build ------------------------------------------------------------
def our_records(data):
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers))
            for r in kafkacodec.MemoryRecords(data).records()]


def expected_ours(records, magic, timestamp_type=TimestampType.CREATE_TIME, log_append_time=None,
                  base_offset=0):
    # Our reader reports magic 0 as (-1, NO_TIMESTAMP_TYPE), not None.
    return [(o, -1 if magic == 0 else ts, -1 if magic == 0 else tt, k, v, h)
            for o, ts, tt, k, v, h in expected(records, magic, timestamp_type, log_append_time, base_offset)]


@pytest.mark.parametrize("magic,codec,shape", list(matrix()))
def test_our_reader_decodes_what_we_build(magic, codec, shape):
    records = shape_records(shape)
    data = build(records, magic=magic, compression=codec, base_offset=1000)
    reader = kafkacodec.MemoryRecords(data)
    assert reader.validate() == (1 if magic == 2 or codec != "none" else len(records))
    assert reader.partial_tail_bytes == 0
    assert our_records(data) == expected_ours(records, magic, base_offset=1000)


@pytest.mark.parametrize("magic,codec", [(2, "zstd"), (2, "none"), (1, "gzip"), (1, "none"), (0, "lz4")])
def test_our_reader_sees_the_batch_fields(magic, codec):
    kwargs = dict(producer_id=77, producer_epoch=4, base_sequence=10, partition_leader_epoch=6,
                  is_transactional=True) if magic == 2 else {}
    lat = dict(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=123_456) if magic else {}
    records = shape_records("negative_deltas")
    data = build(records, magic=magic, compression=codec, base_offset=20, **kwargs, **lat)
    batches = list(kafkacodec.MemoryRecords(data).batches())
    assert all(b.is_valid() for b in batches)
    assert batches[-1].last_offset == 23
    if magic:
        assert {b.timestamp_type for b in batches} == {TimestampType.LOG_APPEND_TIME}
        assert {b.max_timestamp for b in batches} == {123_456}
    if magic == 2:
        [batch] = batches
        assert (batch.base_offset, batch.last_offset_delta, batch.record_count) == (20, 3, 4)
        assert batch.base_timestamp == 5_000
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 4, 10)
        assert batch.is_transactional and not batch.is_control
        assert batch.partition_leader_epoch == 6
        assert [r.sequence for r in batch] == [10, 11, 12, 13]
    assert our_records(data) == expected_ours(records, magic, TimestampType.LOG_APPEND_TIME if magic else 0,
                                              123_456, 20)


def test_our_reader_sees_markers_and_delete_horizon():
    commit = MemoryRecordsBuilder.build_end_txn_marker(True, 7, 1, 5, base_offset=100, timestamp=1000)
    abort = MemoryRecordsBuilder.build_end_txn_marker(False, 7, 1, 6, base_offset=101, timestamp=1001)
    markers = [r for r in kafkacodec.MemoryRecords(commit + abort).records()]
    assert [(r.offset, r.is_control, r.control_type, r.coordinator_epoch) for r in markers] == [
        (100, True, ControlType.COMMIT, 5), (101, True, ControlType.ABORT, 6)]
    data = build([(5_000, b"k", b"v", ())], delete_horizon_ms=3_000, compression="lz4")
    [batch] = kafkacodec.MemoryRecords(data).batches()
    assert batch.delete_horizon_ms == 3_000
    assert [r.timestamp for r in batch] == [5_000]


def test_empty_batch_as_the_log_cleaner_keeps_it():
    data = MemoryRecordsBuilder.build_empty_batch(
        base_offset=40, last_offset=49, producer_id=8, producer_epoch=2, base_sequence=100,
        max_timestamp=7_000, is_transactional=True, partition_leader_epoch=3)
    assert data == h("""
        0000000000000028 00000031 00000003 02""") + data[17:21] + h("""
        0010 00000009 ffffffffffffffff 0000000000001b58 0000000000000008 0002 00000064 00000000""")
    assert crc32c_pkg.crc32c(data[21:]) == struct.unpack_from(">I", data, 17)[0]
    [batch] = kafkacodec.MemoryRecords(data).batches()
    assert batch.is_valid() and batch.record_count == 0 and list(batch) == []
    assert (batch.base_offset, batch.last_offset, batch.last_sequence) == (40, 49, 109)
    [(kp_batch, kp_records)] = peer_batches(KpMemoryRecords, data)
    assert kp_batch.crc_ok and kp_records == []
    with pytest.raises(ValueError, match="out of range"):
        MemoryRecordsBuilder.build_empty_batch(10, 9, -1, -1, -1)


def test_our_reader_reads_the_sample_log():
    from kafkacodec.sample import sample_log

    data = sample_log(1, seed=2)
    records = list(kafkacodec.MemoryRecords(data).records())
    assert [r.offset for r in records] == list(range(len(records)))
    assert [r.control_type for r in records if r.is_control] == [ControlType.COMMIT, ControlType.ABORT]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(magic=st.sampled_from(MAGICS), codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**40),
       records=st.lists(st.tuples(timestamps, blobs, blobs, header_lists), min_size=1, max_size=20),
       split=st.integers(1, 20))
def test_round_trip_through_our_reader(magic, codec, base_offset, records, split):
    if magic < 2:
        if codec == "zstd":
            codec = "gzip"
        records = [(ts, k, v, ()) for ts, k, v, _ in records]
    builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=base_offset)
    log = b""
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(ts, key, value, headers)
        if (i + 1) % split == 0:
            log += builder.build()
    log += builder.build()
    assert our_records(log) == expected_ours(records, magic, base_offset=base_offset)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(magic=st.sampled_from(MAGICS), records=st.lists(st.tuples(timestamps, blobs, blobs), max_size=30),
       base_offset=st.integers(0, 2**40))
def test_append_many_equals_appends(magic, records, base_offset):
    pa = pytest.importorskip("pyarrow")
    one = MemoryRecordsBuilder(magic=magic, base_offset=base_offset)
    for ts, key, value in records:
        one.append(ts, key, value)
    expected_bytes = one.build()
    timestamps_, keys, values = ([r[i] for r in records] for i in range(3))
    for columns in ((timestamps_, keys, values),
                    (np.array(timestamps_, dtype=np.int64), pa.array(keys, pa.binary()),
                     pa.array(values, pa.large_binary()))):
        many = MemoryRecordsBuilder(magic=magic, base_offset=base_offset)
        many.append_many(*columns)
        assert many.build() == expected_bytes
