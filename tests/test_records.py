"""Reading record sets: MemoryRecords, RecordBatch, Record (issue 2, reading side).

The independent oracles are kafka-python (pure Python) and aiokafka (C-compiled): we decode
what they build and compare every field with what their readers say.  Hand-built bytes cover
what their builders cannot make (control markers, LogAppendTime, delete horizon, wrapper
offset rules, corrupt data).
"""

import gc
import gzip
import mmap
import pickle
import struct
import sys
import weakref
import zlib

import crc32c as crc32c_pkg
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kafka.record as kp
from kafka.record.default_records import DefaultRecordBatchBuilder as KpDefaultBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from aiokafka.record._crecords import (DefaultRecordBatchBuilder as AioDefaultBuilder,
                                       LegacyRecordBatchBuilder as AioLegacyBuilder,
                                       MemoryRecords as AioMemoryRecords)

import kafkacodec
from kafkacodec import (BufferReleasedError, Compression, ControlType, CorruptRecordError,
                        InvalidCrcError, KafkaCodecError, MemoryRecords, TimestampType,
                        UnsupportedCompressionError)

# --- builders (the peers) and small byte helpers --------------------------------------------

SHAPES = {
    "plain": [(1_000 + i, b"k%d" % i, b"value-%d" % i, []) for i in range(10)],
    "null_and_empty": [(1_000, None, None, []), (1_001, b"", b"", []), (1_002, None, b"v", []),
                       (1_003, b"k", None, [])],
    "large": [(5, b"big", bytes(range(256)) * 1200, []), (6, None, b"x" * 70_000, [])],
    "negative_ts_delta": [(50_000, b"a", b"1", []), (10_000, b"b", b"2", []),
                          (40_000, b"c", b"3", []), (0, b"d", b"4", [])],
    "headers": [(7, b"k", b"v", [("h1", b"a"), ("null", None), ("empty", b""), ("ключ", b"\xff")]),
                (8, None, None, [("only", None)])],
}
V2_CODECS = [0, 1, 2, 3, 4]
LEGACY_CODECS = [0, 1, 2, 3]


def kp_v2(records, codec=0, transactional=False, producer=(-1, -1, -1)):
    b = KpDefaultBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                         producer_id=producer[0], producer_epoch=producer[1],
                         base_sequence=producer[2], batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(b.build())


def aio_v2(records, codec=0, transactional=False, producer=(-1, -1, -1)):
    b = AioDefaultBuilder(2, codec, int(transactional), producer[0], producer[1], producer[2],
                          1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, headers)
    return bytes(b.build())


def kp_legacy(records, magic, codec=0, first_offset=0):
    b = KpLegacyBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (ts, key, value, _) in enumerate(records):
        b.append(first_offset + i, timestamp=ts, key=key, value=value)
    return bytes(b.build())


def aio_legacy(records, magic, codec=0, first_offset=0):
    b = AioLegacyBuilder(magic, codec, 1 << 30)
    for i, (ts, key, value, _) in enumerate(records):
        b.append(first_offset + i, ts, key, value)
    return bytes(b.build())


def with_base_offset(batch, base_offset):
    """A v2 batch with another BaseOffset (not covered by the CRC, as a broker rewrites it)."""
    return struct.pack(">q", base_offset) + batch[8:]


def fix_v2_crc(batch):
    batch = bytearray(batch)
    batch[17:21] = struct.pack(">I", crc32c_pkg.crc32c(bytes(batch[21:])))
    return bytes(batch)


def patch_v2(batch, *, attributes_or=0, base_timestamp=None, max_timestamp=None):
    batch = bytearray(batch)
    attributes = struct.unpack_from(">h", batch, 21)[0] | attributes_or
    struct.pack_into(">h", batch, 21, attributes)
    if base_timestamp is not None:
        struct.pack_into(">q", batch, 27, base_timestamp)
    if max_timestamp is not None:
        struct.pack_into(">q", batch, 35, max_timestamp)
    return fix_v2_crc(batch)


def legacy_message(magic, offset, value, *, key=None, timestamp=-1, attributes=0):
    """One v0/v1 entry, by hand: [offset][size][crc][magic][attributes][ts][key][value]."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def gzip_wrapper(magic, wrapper_offset, inner, *, timestamp=-1, log_append=False):
    attributes = 1 | (0x08 if log_append else 0)
    return legacy_message(magic, wrapper_offset, gzip.compress(inner, mtime=0),
                          timestamp=timestamp, attributes=attributes)


def v2_record(offset_delta, timestamp_delta, key, value, headers=()):
    """One v2 record, by hand (zig-zag varints)."""
    def varint(n):
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    def blob(b):
        return varint(-1) if b is None else varint(len(b)) + b

    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + blob(key) + blob(value)
    body += varint(len(headers)) + b"".join(blob(k) + blob(v) for k, v in headers)
    return varint(len(body)) + body


def v2_batch(records_section, *, count, base_offset=0, last_offset_delta=0, attributes=0,
             base_timestamp=1000, max_timestamp=1000, producer=(-1, -1, -1), leader_epoch=-1):
    header_rest = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp,
                              max_timestamp, producer[0], producer[1], producer[2], count)
    body = header_rest + records_section
    crc = crc32c_pkg.crc32c(body)
    return struct.pack(">qiibI", base_offset, 9 + len(body), leader_epoch, 2, crc) + body


# --- reading helpers -----------------------------------------------------------------------

def ours(data):
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, list(r.headers))
            for r in MemoryRecords(data).records()]


def peer(data, memory_records):
    out = []
    records = memory_records(bytes(data))
    while (batch := records.next_batch()) is not None:
        for r in batch:
            out.append((r.offset, -1 if r.timestamp is None else r.timestamp,
                        -1 if r.timestamp_type is None else r.timestamp_type,
                        r.key, r.value, [tuple(h) for h in r.headers]))
    return out


def decodes_like_peers(data, aiokafka=True):
    got = ours(data)
    assert got == peer(data, kp.MemoryRecords)
    if aiokafka:           # aiokafka refuses magic-0 lz4 (its KAFKA-3160 guard)
        assert got == peer(data, AioMemoryRecords)
    return got


# --- the spec's worked examples ---------------------------------------------------------------

SPEC_V0 = bytes.fromhex("0000000000000000 00000010 fd6ebddb 00 00 ffffffff 00000002 6869")
SPEC_V1 = bytes.fromhex("0000000000000005 00000018 06614b6d 01 00 00000000000003e8 ffffffff"
                        " 00000002 6869")
SPEC_V2 = bytes.fromhex(
    "0000000000000000 0000003a ffffffff 02 233dad44 0000 00000000 00000000000003e8"
    " 00000000000003e8 ffffffffffffffff ffff ffffffff 00000001 10 00 00 00 01 04 6869 00")
SPEC_COMMIT = bytes.fromhex(
    "0000000000000064 00000042 00000003 02 8f76ed9a 0030 00000000"
    " 00000000000003e8 00000000000003e8 0000000000000007 0001 ffffffff 00000001"
    " 20 00 00 00 08 00000001 0c 000000000005 00")


def test_spec_v0_example():
    (batch,) = MemoryRecords(SPEC_V0).batches()
    assert (batch.magic, batch.base_offset, batch.last_offset, batch.record_count) == (0, 0, 0, 1)
    assert batch.crc == 0xFD6EBDDB and batch.is_valid()
    assert batch.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE and batch.max_timestamp == -1
    assert batch.compression is Compression.NONE and batch.size_in_bytes == 28
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == -1 and batch.delete_horizon_ms is None
    assert not batch.is_transactional and not batch.is_control
    (record,) = batch
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == \
        (0, -1, None, b"hi", ())
    assert record.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE and record.sequence == -1
    assert decodes_like_peers(SPEC_V0)


def test_spec_v1_example():
    (batch,) = MemoryRecords(SPEC_V1).batches()
    assert (batch.magic, batch.base_offset, batch.last_offset, batch.max_timestamp) == (1, 5, 5, 1000)
    assert batch.crc == 0x06614B6D and batch.is_valid()
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    (record,) = batch
    assert (record.offset, record.timestamp, record.key, record.value) == (5, 1000, None, b"hi")
    assert decodes_like_peers(SPEC_V1)


def test_spec_v2_example():
    (batch,) = MemoryRecords(SPEC_V2).batches()
    assert batch.size_in_bytes == 70 and batch.crc == 0x233DAD44 and batch.is_valid()
    assert (batch.magic, batch.base_offset, batch.last_offset, batch.record_count) == (2, 0, 0, 1)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1000)
    (record,) = batch
    assert (record.offset, record.timestamp, record.key, record.value, record.headers,
            record.sequence) == (0, 1000, None, b"hi", (), -1)
    assert not record.is_control and record.control_type is None
    assert decodes_like_peers(SPEC_V2)


def test_spec_commit_marker_example():
    (batch,) = MemoryRecords(SPEC_COMMIT).batches()
    assert batch.size_in_bytes == 78 and batch.is_valid()
    assert batch.is_control and batch.is_transactional
    assert (batch.base_offset, batch.partition_leader_epoch, batch.producer_id,
            batch.producer_epoch, batch.base_sequence) == (100, 3, 7, 1, -1)
    (record,) = batch
    assert record.is_control and record.control_type is ControlType.COMMIT
    assert record.coordinator_epoch == 5 and record.offset == 100
    assert record.key == bytes.fromhex("00000001") and record.value == bytes.fromhex("000000000005")
    # kafka-python reads the marker too
    (kp_record,) = kp.MemoryRecords(SPEC_COMMIT).next_batch()
    assert kp_record.commit and kp_record.offset == 100


# --- decoding what the peers build -------------------------------------------------------------

@pytest.mark.parametrize("codec", V2_CODECS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("build", [kp_v2, aio_v2], ids=["kafka-python", "aiokafka"])
def test_v2_matches_peers(build, shape, codec):
    records = SHAPES[shape]
    data = build(records, codec)
    got = decodes_like_peers(data)
    assert [(r[0], r[3], r[4]) for r in got] == [(i, k, v) for i, (_, k, v, _) in enumerate(records)]
    assert [r[1] for r in got] == [ts for ts, *_ in records]
    assert [r[5] for r in got] == [list(h) for *_, h in records]
    (batch,) = MemoryRecords(data).batches()
    # kafka-python keeps a batch uncompressed when compressing does not make it smaller
    assert batch.compression == kp.MemoryRecords(data).next_batch().compression_type
    assert batch.compression == codec or build is kp_v2
    assert batch.record_count == len(records)
    assert batch.last_offset == len(records) - 1
    assert batch.max_timestamp == max(ts for ts, *_ in records)
    assert batch.base_timestamp == records[0][0]
    assert batch.is_valid()
    batch.ensure_valid()


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("shape", ["plain", "null_and_empty", "large", "negative_ts_delta"])
@pytest.mark.parametrize("build", [kp_legacy, aio_legacy], ids=["kafka-python", "aiokafka"])
def test_legacy_matches_peers(build, shape, magic, codec):
    records = SHAPES[shape]
    magic0_lz4 = magic == 0 and codec == 3
    if magic0_lz4 and build is aio_legacy:
        pytest.skip("aiokafka refuses to write magic-0 lz4")
    data = build(records, magic, codec, first_offset=0)
    got = decodes_like_peers(data, aiokafka=not magic0_lz4)
    assert [(r[3], r[4]) for r in got] == [(k, v) for _, k, v, _ in records]
    assert [r[0] for r in got] == list(range(len(records)))
    if magic == 1:
        assert [r[1] for r in got] == [ts for ts, *_ in records]
    batches = list(MemoryRecords(data).batches())
    assert all(b.is_valid() and b.magic == magic and b.compression == codec for b in batches)
    assert len(batches) == (len(records) if codec == 0 else 1)


@pytest.mark.parametrize("codec", V2_CODECS)
def test_v2_transactional_producer_fields_and_sequences(codec):
    records = SHAPES["plain"]
    data = with_base_offset(kp_v2(records, codec, transactional=True,
                                  producer=(42, 3, 2_147_483_645)), 1_000)
    (batch,) = MemoryRecords(data).batches()
    assert batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 2_147_483_645)
    assert batch.last_sequence == 6              # wraps from 2^31-1 to 0
    assert [r.sequence for r in batch] == [2_147_483_645, 2_147_483_646, 2_147_483_647,
                                           0, 1, 2, 3, 4, 5, 6]
    assert [r.offset for r in batch] == list(range(1_000, 1_010))
    assert decodes_like_peers(data)[0][0] == 1_000


def test_multi_batch_log_mixing_every_magic_and_nonzero_offsets():
    parts = [
        with_base_offset(kp_v2(SHAPES["plain"]), 100),
        kp_legacy(SHAPES["plain"][:3], 0, 0, first_offset=110),
        kp_legacy(SHAPES["plain"][:3], 1, 0, first_offset=113),
        with_base_offset(aio_v2(SHAPES["headers"]), 116),
        SPEC_COMMIT,
    ]
    data = b"".join(parts)
    records = MemoryRecords(data)
    batches = list(records.batches())
    assert [b.magic for b in batches] == [2, 0, 0, 0, 1, 1, 1, 2, 2]
    assert [b.position for b in batches] == list(np.cumsum([0] + [b.size_in_bytes for b in batches])[:-1])
    assert [r.offset for r in records.records()] == list(range(100, 118)) + [100]
    assert records.validate() == len(batches)
    assert records.valid_bytes == len(data) and records.partial_tail_bytes == 0


# --- hand-built v2 batches: LogAppendTime, delete horizon, control, iteration rules --------------

@pytest.mark.parametrize("codec", [0, 1])
def test_v2_log_append_time_overrides_record_timestamps(codec):
    data = patch_v2(kp_v2(SHAPES["negative_ts_delta"], codec), attributes_or=0x08,
                    max_timestamp=777_777)
    (batch,) = MemoryRecords(data).batches()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.is_valid()
    assert {(r.timestamp, r.timestamp_type) for r in batch} == {(777_777, TimestampType.LOG_APPEND_TIME)}
    assert {(r[1], r[2]) for r in decodes_like_peers(data)} == {(777_777, 1)}


def test_v2_delete_horizon_bit():
    data = patch_v2(kp_v2(SHAPES["negative_ts_delta"]), attributes_or=0x40,
                    base_timestamp=90_000)
    (batch,) = MemoryRecords(data).batches()
    assert batch.delete_horizon_ms == 90_000 and batch.is_valid()
    # record timestamps stay relative to BaseTimestamp (the horizon), as Kafka reads them
    assert [r.timestamp for r in batch] == [90_000, 50_000, 80_000, 40_000]
    plain = MemoryRecords(kp_v2(SHAPES["plain"]))
    assert next(plain.batches()).delete_horizon_ms is None


def test_v2_abort_and_unknown_control_records():
    abort = v2_record(0, 0, struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 9))
    unknown = v2_record(1, 0, struct.pack(">hhh", 3, 42, 7), b"\x01\x02")   # version 3 parsed as 0
    leader = v2_record(2, 0, struct.pack(">hh", 0, 2), b"opaque")
    data = v2_batch(abort + unknown + leader, count=3, last_offset_delta=2, attributes=0x30,
                    producer=(5, 0, -1))
    r0, r1, r2 = MemoryRecords(data).records()
    assert r0.control_type is ControlType.ABORT and r0.coordinator_epoch == 9
    assert r1.control_type == 42 and r1.coordinator_epoch is None and r1.is_control
    assert r2.control_type is ControlType.LEADER_CHANGE and r2.coordinator_epoch is None


@pytest.mark.parametrize("key, value, what", [
    (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "control record key"),
    (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), "control record key version"),
    (struct.pack(">hh", 0, 1), b"\x00\x00\x00", "end transaction marker"),
])
def test_v2_malformed_control_records_raise(key, value, what):
    data = v2_batch(v2_record(0, 0, key, value), count=1, attributes=0x30, base_offset=77)
    with pytest.raises(CorruptRecordError, match=what) as info:
        list(MemoryRecords(data).records())
    assert info.value.offset == 77 and info.value.position >= 61


def test_v2_header_keys_with_invalid_utf8_decode_with_replacement():
    data = v2_batch(v2_record(0, 0, None, b"v", [(b"ok\xff", None)]), count=1)
    (record,) = MemoryRecords(data).records()
    assert record.headers == (("ok\ufffd", None),)


def test_v2_record_count_zero_ignores_the_records_section():
    data = v2_batch(b"garbage that is never read", count=0)
    (batch,) = MemoryRecords(data).batches()
    assert batch.record_count == 0 and list(batch) == []


def test_v2_negative_record_count_is_invalid():
    data = v2_batch(v2_record(0, 0, None, b"x"), count=-1, base_offset=9)
    with pytest.raises(CorruptRecordError, match="record count -1") as info:
        list(MemoryRecords(data).records())
    assert (info.value.position, info.value.offset) == (57, 9)


def test_v2_records_still_remaining_after_count_raises_in_place_of_the_last_record():
    # Kafka's iterator raises while reading the last declared record and never returns it
    section = v2_record(0, 0, None, b"a") + v2_record(1, 0, None, b"b") + v2_record(2, 0, None, b"c")
    it = MemoryRecords(v2_batch(section, count=2, base_offset=3)).records()
    assert next(it).value == b"a"
    with pytest.raises(CorruptRecordError, match="records still remaining") as info:
        next(it)
    assert info.value.offset == 3
    with pytest.raises(StopIteration):
        next(it)


def test_v2_premature_end_raises_after_yielding_what_was_there():
    section = v2_record(0, 0, None, b"a") + v2_record(1, 0, None, b"b")
    records = []
    with pytest.raises(CorruptRecordError, match="premature end") as info:
        for r in MemoryRecords(v2_batch(section, count=3, last_offset_delta=2)).records():
            records.append(r.value)
    assert records == [b"a", b"b"] and info.value.position == 70 + len(section) - 9


def test_v2_record_with_bytes_left_over_is_invalid():
    good = v2_record(0, 0, None, b"a")
    bad = bytes([good[0] + 2]) + good[1:] + b"\x00"   # declared length one byte longer
    with pytest.raises(CorruptRecordError, match="left over"):
        list(MemoryRecords(v2_batch(bad, count=1)).records())


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_v2_unknown_codec_ids(codec):
    data = v2_batch(v2_record(0, 0, None, b"x"), count=1, attributes=codec)
    (batch,) = MemoryRecords(data).batches()
    with pytest.raises(UnsupportedCompressionError):
        batch.compression
    with pytest.raises(KafkaCodecError):
        list(batch)


# --- legacy wrappers by hand (spec §4) -------------------------------------------------------

def inner_set(magic, offsets, timestamps=None):
    timestamps = timestamps or [10 + i for i in range(len(offsets))]
    return b"".join(legacy_message(magic, o, b"m%d" % i, timestamp=t)
                    for i, (o, t) in enumerate(zip(offsets, timestamps)))


def test_v1_wrapper_relative_offsets():
    data = gzip_wrapper(1, 101, inner_set(1, [0, 1]), timestamp=11)
    (batch,) = MemoryRecords(data).batches()
    assert batch.last_offset == 101 and batch.record_count is None
    assert batch.base_offset == 100
    assert [r.offset for r in batch] == [100, 101]
    assert decodes_like_peers(data) == ours(data)


def test_v1_wrapper_offset_zero_means_base_zero():
    data = gzip_wrapper(1, 0, inner_set(1, [0, 1, 5]), timestamp=12)
    assert [r.offset for r in MemoryRecords(data).records()] == [0, 1, 5]


def test_v1_wrapper_offset_below_last_inner_offset_is_invalid():
    data = gzip_wrapper(1, 3, inner_set(1, [0, 1, 5]))
    with pytest.raises(CorruptRecordError, match="wrapper offset") as info:
        list(MemoryRecords(data).records())
    assert info.value.offset == 3


def test_v0_wrapper_inner_offsets_are_absolute():
    data = gzip_wrapper(0, 42, inner_set(0, [40, 41, 42]))
    got = [(r.offset, r.timestamp, r.timestamp_type) for r in MemoryRecords(data).records()]
    assert got == [(40, -1, TimestampType.NO_TIMESTAMP_TYPE), (41, -1, -1), (42, -1, -1)]


def test_v1_log_append_time_wrapper_overrides_inner_timestamps():
    data = gzip_wrapper(1, 2, inner_set(1, [0, 1, 2], [5, 6, 7]), timestamp=999, log_append=True)
    got = [(r.offset, r.timestamp, r.timestamp_type) for r in MemoryRecords(data).records()]
    assert got == [(0, 999, TimestampType.LOG_APPEND_TIME), (1, 999, 1), (2, 999, 1)]
    create = gzip_wrapper(1, 2, inner_set(1, [0, 1, 2], [5, 6, 7]), timestamp=999)
    assert [r.timestamp for r in MemoryRecords(create).records()] == [5, 6, 7]


def test_legacy_wrapper_errors():
    cases = [
        (gzip_wrapper(1, 0, b""), CorruptRecordError, "no inner messages"),
        (legacy_message(1, 0, None, attributes=1), CorruptRecordError, "null value"),
        (legacy_message(1, 0, b"zz", attributes=4), UnsupportedCompressionError, "zstd"),
        (legacy_message(0, 0, b"zz", attributes=6), UnsupportedCompressionError, "unknown"),
        (gzip_wrapper(1, 1, legacy_message(1, 0, b"x", attributes=1)), CorruptRecordError,
         "compressed inner message"),
    ]
    for data, error, what in cases:
        with pytest.raises(error, match=what):
            list(MemoryRecords(data).records())


# --- framing and partial data (spec §9.1) ----------------------------------------------------

def sample_log():
    return b"".join([with_base_offset(kp_v2(SHAPES["plain"]), 0), kp_legacy(SHAPES["plain"][:2], 1),
                     kp_legacy(SHAPES["plain"][:2], 0), with_base_offset(aio_v2(SHAPES["headers"]), 14)])


def test_every_truncation_stops_cleanly_at_the_last_complete_batch():
    data = sample_log()
    ends = np.cumsum([b.size_in_bytes for b in MemoryRecords(data).batches()])
    for cut in range(len(data) + 1):
        records = MemoryRecords(data[:cut])
        complete = int(ends[ends <= cut][-1]) if (ends <= cut).any() else 0
        batches = list(records.batches())
        assert sum(b.size_in_bytes for b in batches) == complete
        assert records.valid_bytes == complete and records.partial_tail_bytes == cut - complete
        assert len(records.index()) == len(batches) and records.validate() == len(batches)
        list(records.records())


def test_size_below_minimum_raises_even_when_incomplete():
    data = struct.pack(">qi", 55, 13)            # 12 bytes: the size is known, nothing else
    with pytest.raises(CorruptRecordError, match="entry size 13") as info:
        list(MemoryRecords(data).batches())
    assert (info.value.position, info.value.offset) == (8, 55)


def test_bad_magic_raises_and_short_header_stops():
    bad = bytearray(SPEC_V2)
    bad[16] = 3
    with pytest.raises(CorruptRecordError, match="magic byte 3") as info:
        list(MemoryRecords(SPEC_V0 + bytes(bad)).batches())
    assert info.value.position == len(SPEC_V0) + 16
    assert list(MemoryRecords(bytes(bad[:16])).batches()) == []   # fewer than 17 bytes: stop


def test_v2_entry_shorter_than_its_header_raises():
    data = struct.pack(">qiib", 0, 40, -1, 2) + bytes(40 - 5)
    with pytest.raises(CorruptRecordError, match="61-byte header"):
        list(MemoryRecords(data).batches())


# --- CRC, index, validate -----------------------------------------------------------------

def test_crc_errors_carry_both_checksums():
    data = bytearray(sample_log())
    first = next(MemoryRecords(bytes(data)).batches()).size_in_bytes
    data[first + 30] ^= 0x01                      # a byte inside the v1 message after it
    records = MemoryRecords(bytes(data))
    batches = list(records.batches())
    assert [b.is_valid() for b in batches][:2] == [True, False]
    with pytest.raises(InvalidCrcError) as info:
        batches[1].ensure_valid()
    error = info.value
    assert error.stored == batches[1].crc and error.computed == zlib.crc32(
        bytes(data[first + 16:first + batches[1].size_in_bytes]))
    assert error.position == first and error.offset == 0 and "CRC-32" in str(error)
    with pytest.raises(InvalidCrcError) as info2:
        records.validate()
    assert (info2.value.stored, info2.value.computed, info2.value.position) == \
        (error.stored, error.computed, first)
    index = records.index()
    assert index["crc_valid"].tolist() == [b.is_valid() for b in batches]


def test_v2_crc_error_names_crc32c():
    data = bytearray(SPEC_V2)
    data[-2] ^= 0xFF
    (batch,) = MemoryRecords(bytes(data)).batches()
    with pytest.raises(InvalidCrcError, match="CRC-32C") as info:
        batch.ensure_valid()
    assert info.value.stored == 0x233DAD44
    assert info.value.computed == crc32c_pkg.crc32c(bytes(data[21:]))


def test_index_matches_the_batch_objects():
    data = sample_log() + gzip_wrapper(1, 30, inner_set(1, [0, 1])) + SPEC_COMMIT[:40]
    records = MemoryRecords(data)
    index = records.index()
    batches = list(records.batches())
    assert len(index) == len(batches)
    for row, b in zip(index, batches):
        assert row["position"] == b.position and row["size_in_bytes"] == b.size_in_bytes
        assert row["magic"] == b.magic and row["last_offset"] == b.last_offset
        assert row["max_timestamp"] == b.max_timestamp and row["crc"] == b.crc
        assert row["compression"] == b.compression and row["crc_valid"]
        assert row["timestamp_type"] == b.timestamp_type and row["attributes"] == b.attributes
        legacy_wrapper = b.magic < 2 and b.compression != 0
        assert row["base_offset"] == (-1 if legacy_wrapper else b.base_offset)
        assert row["records_count"] == (-1 if legacy_wrapper else b.record_count)
    assert not records.index(check_crc=False)["crc_valid"].any()
    assert len(MemoryRecords(b"").index()) == 0


def test_index_reports_producer_and_control_type_and_scan_entries_is_the_same_walk():
    """Records.index() and kafkacodec.arrow.scan_entries were two shallow indexers with different
    fields and legacy semantics (issue 15): one walk now fills both."""
    from kafkacodec.arrow import SCAN_FIELDS, scan_entries

    marker = kafkacodec.MemoryRecordsBuilder.build_end_txn_marker
    data = (sample_log() + gzip_wrapper(1, 30, inner_set(1, [29, 30]))
            + marker(True, 7, 1, 3, base_offset=31, timestamp=5)       # COMMIT = 1 (ControlRecordType)
            + marker(False, 8, 1, 3, base_offset=32, timestamp=5))     # ABORT = 0
    records = MemoryRecords(data)
    index = records.index(check_crc=False)
    batches = list(records.batches())
    assert index["producer_id"].tolist() == [b.producer_id if b.magic == 2 else -1 for b in batches]
    assert index["producer_id"].tolist()[-2:] == [7, 8]
    assert index["control_type"].tolist() == [-1] * (len(batches) - 2) + [1, 0]
    assert index["base_offset"].tolist()[-3] == -1 and index["last_offset"].tolist()[-3] == 30
    scan = scan_entries(data)
    renamed = {"size": "size_in_bytes", "count": "records_count"}
    for name in SCAN_FIELDS:
        assert scan[name].tolist() == index[renamed.get(name, name)].tolist(), name
    assert scan["stop"] == len(data) and scan["error"] is None


def test_index_grows_past_its_first_guess():
    # index() sizes its rows from the first entry: one large batch, then many small ones (more
    # rows than the guess) and a partial tail; every row equals its batch object, padding zero.
    builder = kafkacodec.MemoryRecordsBuilder()
    builder.append_many(1, None, [b"v" * 100] * 400)
    log = builder.build()
    for i in range(700):
        builder.append(2 + i, b"k", b"x" * (i % 5))
        log += builder.build()
    records = MemoryRecords(log + log[:30])
    for check_crc in (True, False):
        index = records.index(check_crc=check_crc)
        batches = list(records.batches())
        assert len(index) == len(batches) == 701 and index.flags.owndata
        assert index["position"].tolist() == [b.position for b in batches]
        assert index["size_in_bytes"].tolist() == [b.size_in_bytes for b in batches]
        assert index["base_offset"].tolist() == [b.base_offset for b in batches]
        assert index["crc"].tolist() == [b.crc for b in batches]
        assert index["crc_valid"].all() == check_crc
        named = {at + i for dt, at, *_ in index.dtype.fields.values() for i in range(dt.itemsize)}
        rows = np.frombuffer(index.tobytes(), np.uint8).reshape(len(index), index.dtype.itemsize)
        padding = [i for i in range(index.dtype.itemsize) if i not in named]
        assert padding and not rows[:, padding].any()           # the unnamed padding is zero


def test_index_rows_of_alike_batches_fill_their_first_guess_exactly():
    # Alike batches fill the rows sized from the first one: the end of the data ends the walk
    # (also with a partial tail or a bad entry right after the last row), nothing doubled, and
    # the array is numpy's own (its dtype INDEX_DTYPE, not the plain bytes it was made as).
    from kafkacodec._index import INDEX_DTYPE
    builder = kafkacodec.MemoryRecordsBuilder()
    log = b""
    for i in range(64):
        builder.append_many(i, None, [b"v" * 50] * 4)
        log += builder.build()
    bad_magic = bytearray(log[:70])
    bad_magic[16] = 7
    descr_refs = sys.getrefcount(INDEX_DTYPE)
    for data in (log, log + log[:30], log + bytes(bad_magic)):
        records = MemoryRecords(data)
        for _ in range(50):
            if data.endswith(bad_magic):
                with pytest.raises(CorruptRecordError, match=f"magic byte 7 .* at byte {len(log) + 16} "):
                    records.index()
                continue
            index = records.index()
            assert len(index) == 64 and index["crc_valid"].all()
            assert index.dtype is INDEX_DTYPE and index.flags.owndata and index.base is None
            assert index["base_offset"].tolist() == [4 * i for i in range(64)]
            assert pickle.loads(pickle.dumps(index)).tolist() == index.tolist()
    del index
    assert sys.getrefcount(INDEX_DTYPE) == descr_refs          # one reference per array, freed


# --- buffers and lifetimes ----------------------------------------------------------------

def test_any_buffer_type_is_read_in_place():
    data = sample_log()
    expected = ours(data)
    mapped = mmap.mmap(-1, len(data))
    mapped.write(data)
    for buffer in (bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8),
                   memoryview(b"xx" + data)[2:], mapped):
        records = MemoryRecords(buffer)
        assert ours(records.buffer) == expected
        assert bytes(records) == data and records.size_in_bytes == len(data)
        del records
    gc.collect()
    mapped.close()


def test_raw_is_a_view_of_the_callers_buffer_not_a_copy():
    data = bytearray(sample_log())
    records = MemoryRecords(data)
    batch = next(records.batches())
    raw = batch.raw
    assert raw.readonly and bytes(raw) == bytes(data[:batch.size_in_bytes])
    data[20] ^= 0xFF                               # visible through the view: same memory
    assert raw[20] == data[20]
    with pytest.raises(BufferError):               # the records hold an export of it
        data.extend(b"x")


def test_views_keep_the_buffer_alive():
    array = np.frombuffer(sample_log(), dtype=np.uint8).copy()
    alive = weakref.ref(array)
    records = MemoryRecords(array)
    batch = next(records.batches())
    raw = batch.raw
    whole = records.buffer
    first = list(batch)
    del array, records, batch
    gc.collect()
    assert alive() is not None
    assert bytes(raw) == bytes(whole[:len(raw)])
    assert ours(whole)[0][4] == first[0].value
    del raw, whole
    gc.collect()
    assert alive() is None
    assert first[0].value == b"value-0"           # records own their bytes


def test_records_and_batches_have_the_documented_types():
    assert kafkacodec.MemoryRecords is MemoryRecords
    batch = next(MemoryRecords(SPEC_V2).batches())
    assert isinstance(batch, kafkacodec.RecordBatch)
    assert isinstance(next(iter(batch)), kafkacodec.Record)
    assert isinstance(MemoryRecords(SPEC_V2), kafkacodec.Records)
    with pytest.raises(TypeError):
        kafkacodec.RecordBatch()


# --- hostile input (hypothesis) --------------------------------------------------------------

def _fuzz_log():
    # every magic and codec, control markers, headers: flips land in each kind of data
    return b"".join([sample_log(), gzip_wrapper(1, 30, inner_set(1, [0, 1])), SPEC_COMMIT,
                     kp_v2(SHAPES["plain"][:3], 1)]
                    + [aio_v2(SHAPES["headers"] * 3, codec) for codec in (2, 3, 4)]
                    + [kp_legacy(SHAPES["plain"][:4], magic, codec)
                       for magic in (0, 1) for codec in (2, 3)])


FUZZ_LOG = None


def _exercise(data):
    records = MemoryRecords(data)
    try:
        for batch in records.batches():
            (batch.base_offset, batch.last_offset, batch.record_count, batch.max_timestamp,
             batch.timestamp_type, batch.is_valid(), bytes(batch.raw))
            for r in batch:
                (r.offset, r.timestamp, r.key, r.value, r.headers, r.control_type)
    except KafkaCodecError:
        pass
    for call in (lambda: list(records.records()), records.index, records.validate,
                 lambda: records.partial_tail_bytes):
        try:
            call()
        except KafkaCodecError:
            pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_truncations_and_byte_flips_raise_codec_errors_or_decode(data):
    global FUZZ_LOG
    if FUZZ_LOG is None:
        FUZZ_LOG = _fuzz_log()
    log = bytearray(FUZZ_LOG)
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(log) - 1), st.integers(1, 255)),
                               max_size=4))
    for pos, xor in flips:
        log[pos] ^= xor
    cut = data.draw(st.integers(0, len(log)))
    _exercise(bytes(log[:cut]))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_codec_errors_or_decode(data):
    _exercise(data)
    _exercise(SPEC_V2[:17] + data)


# --- more builders, compressed-data errors, limits, threads -----------------------------------

@pytest.mark.parametrize("magic, codec", [(2, c) for c in V2_CODECS] + [(m, c) for m in (0, 1)
                                                                         for c in LEGACY_CODECS])
def test_kafka_python_memory_records_builder_logs(magic, codec):
    parts = []
    for first in (0, 40, 90):
        builder = kp.MemoryRecordsBuilder(magic, codec, batch_size=1 << 20, offset=first)
        for i in range(7):
            builder.append(1_000 + i, b"k%d" % i, b"v%d" % i * 30, [("h", b"x")] if magic == 2 else [])
        builder.close()
        parts.append(bytes(builder.buffer()))
    data = b"".join(parts)
    got = decodes_like_peers(data, aiokafka=not (magic == 0 and codec == 3))
    assert [r[0] for r in got] == [f + i for f in (0, 40, 90) for i in range(7)]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_corrupt_compressed_data_names_the_batch(codec):
    good = with_base_offset(aio_v2(SHAPES["plain"], codec), 500)
    data = bytearray(good)
    del data[len(good) - 6:]                         # cut the compressed stream short
    struct.pack_into(">i", data, 8, len(data) - 12)  # and keep the batch framing consistent
    with pytest.raises(KafkaCodecError) as info:
        list(MemoryRecords(bytes(data)).records())
    assert info.value.offset == 500
    assert 61 <= info.value.position <= len(data)


def test_decompression_cap_raises_record_too_large():
    data = kp_v2([(1, None, b"z" * 100_000, [])], 1)
    assert len(data) < 2_000
    # a bigger batch decoded first (same thread, same reusable decompressor) must not lift the cap
    assert len(list(MemoryRecords(kp_v2([(1, None, b"y" * 300_000, [])], 1)).records())) == 1
    with pytest.raises(kafkacodec.RecordTooLargeError) as info:
        list(MemoryRecords(data, max_decompressed_size=50_000).records())
    assert info.value.offset == 0
    assert len(list(MemoryRecords(data, max_decompressed_size=200_000).records())) == 1


def test_decoding_from_several_threads_at_once():
    import threading

    logs = [b"".join(with_base_offset(aio_v2(SHAPES["plain"] * 20, codec), 1000 * codec)
                     for _ in range(5)) for codec in V2_CODECS]
    expected = [ours(log) for log in logs]
    shared = [MemoryRecords(log) for log in logs]
    failures = []

    def work(k):
        for _ in range(20):
            i = k % len(logs)
            got = [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, list(r.headers))
                   for r in shared[i].records()]
            if got != expected[i] or shared[i].validate() != 5:
                failures.append(i)
            k += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# --- lazy iteration: one record per next(), decompressed chunks pinned while read ------------

def _record_fields(records):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def _compressed_batches(codec, magic=2):
    shape = SHAPES["plain"] + SHAPES["headers"]
    if magic == 2:
        return [with_base_offset(aio_v2(shape, codec), 100 * i) for i in range(3)]
    return [aio_legacy(SHAPES["plain"], magic, codec, first_offset=100 * i) for i in range(3)]


@pytest.mark.parametrize("magic, codec", [(2, c) for c in (1, 2, 3, 4)] + [(1, 1), (0, 2)])
def test_interleaved_iterators_over_compressed_batches_keep_their_own_data(magic, codec):
    # Each compressed batch is read from the thread's decompression chunk: an iterator pins
    # its chunk, so decompressing other batches meanwhile must not overwrite what it reads.
    data = _compressed_batches(codec, magic)
    expected = [_record_fields(MemoryRecords(batch).records()) for batch in data]
    first = iter(next(MemoryRecords(data[0]).batches()))
    got_first = _record_fields([next(first), next(first)])
    nested = [_record_fields(next(MemoryRecords(batch).batches())) for batch in data[1:]]
    got_first += _record_fields(first)
    assert [got_first] + nested == expected
    # whole record sets, zipped record by record
    whole = MemoryRecords(b"".join(data))
    pairs = list(zip(whole.records(), MemoryRecords(b"".join(reversed(data))).records()))
    assert _record_fields(a for a, _ in pairs) == sum(expected, [])
    assert _record_fields(b for _, b in pairs) == sum(reversed(expected), [])


def _chunk_address(codec, section):
    import kafkacodec._compression as compression_module   # the thread's Decompressor
    view = compression_module._local.decompressor.decompress(codec, 2, section)
    address = np.frombuffer(view, np.uint8).ctypes.data
    view.release()
    return address


@pytest.mark.parametrize("codec", [1, 4])
def test_an_abandoned_iterator_unpins_its_chunk(codec):
    batch = aio_v2(SHAPES["plain"] * 50, codec)
    section = batch[61:]
    list(MemoryRecords(batch).records())               # the thread has a Decompressor now
    reused = _chunk_address(codec, section)
    assert _chunk_address(codec, section) == reused     # no reader: the same chunk again
    it = MemoryRecords(batch).records()
    next(it)                                            # pins the chunk
    assert _chunk_address(codec, section) != reused     # ... so the next batch goes elsewhere
    it = MemoryRecords(batch).records()
    next(it)
    del it                                              # dropped half-read: unpinned
    reused = _chunk_address(codec, section)
    it = MemoryRecords(batch).records()
    assert len(list(it)) == 500                         # read to the end: unpinned too
    assert _chunk_address(codec, section) == reused


def test_iteration_yields_records_one_at_a_time():
    # Lazy, as Kafka's iterators: a batch's records are not all made up front (memory stays
    # flat however big the batch), and an error comes after the records before it.
    import itertools
    import tracemalloc

    section = b"".join(v2_record(i, i, b"k", b"v" * 100) for i in range(5000))
    data = v2_batch(section + b"\x7f", count=5001, last_offset_delta=5000)
    for codec_data in (data, aio_v2([(i, b"k", b"v" * 100, []) for i in range(5000)], 4)):
        it = MemoryRecords(codec_data).records()
        tracemalloc.start()
        try:
            first = next(it)
            grown = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert first.value == b"v" * 100
        assert grown < 50_000           # 5,000 records decoded at once would be ~900 KB
    it = MemoryRecords(data).records()
    assert [r.offset for r in itertools.islice(it, 4999)][-1] == 4998
    assert next(it).offset == 4999
    with pytest.raises(CorruptRecordError, match="record length"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


# --- the fast record parser against the checked one ------------------------------------------

def test_record_parser_hook_takes_any_contiguous_buffer():
    from kafkacodec._records import _v2_record_parsers
    record = bytes([16, 0, 0, 0, 2, ord("k"), 2, ord("v"), 0]) + bytes(7)   # 16 bytes
    assert _v2_record_parsers(memoryview(record).cast("i")) == _v2_record_parsers(record)


def _parsers(data):
    from kafkacodec._records import _v2_record_parsers
    return _v2_record_parsers(bytes(data))


_small = st.integers(-64, 8191)
_any_int = st.one_of(_small, st.integers(-2**31, 2**31 - 1))
_blob = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=8190, max_size=8200))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_scan_v2_record_accepts_only_what_read_v2_record_reads(data):
    offset_delta = data.draw(_any_int)
    timestamp_delta = data.draw(st.one_of(_any_int, st.integers(-2**63, 2**63 - 1)))
    key, value = data.draw(_blob), data.draw(_blob)
    headers = data.draw(st.lists(st.tuples(st.binary(max_size=5), st.one_of(st.none(),
                                                                           st.binary(max_size=5))),
                                 max_size=3))
    record = bytearray(v2_record(offset_delta, timestamp_delta, key, value, headers))
    scanned, read = _parsers(record)
    assert scanned is None or scanned == read
    small = (-64 <= offset_delta < 8192 and -64 <= timestamp_delta < 8192
             and len(record) < 8000 and all(v is None or len(v) < 8000 for v in (key, value)))
    if small:
        # the common shape takes the fast path
        assert scanned == read and read[-1] == len(record)
    # damaged copies: the fast parser declines or agrees, never accepts what the checked
    # parser rejects
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(record) - 1))
        record[pos] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(record)))
    for damaged in (record, record[:cut], record[:cut] + data.draw(st.binary(max_size=4))):
        scanned, read = _parsers(damaged)
        assert scanned is None or scanned == read, (bytes(damaged), scanned, read)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_scan_v2_record_on_random_bytes(data):
    scanned, read = _parsers(data)
    assert scanned is None or scanned == read


def test_scan_v2_record_edge_cases():
    # read_v2_record's rules at each boundary the fast parser checks itself: it declines
    # what the checked reader rejects...
    for record, error in ((b"\x00", "record attributes"), (b"\x02\x00", "timestamp delta"),
                          (v2_record(0, 0, b"k", b"v")[:-1], "record body"),
                          (b"\x10\x00\x00\x00\x00\x00\x02\x01\x01", "header key length")):
        scanned, read = _parsers(record)
        assert scanned is None and isinstance(read, CorruptRecordError), (record, read)
        assert error in str(read)
    # ... and reads what it accepts: null key and value, a null header value, an empty
    # header key and value, bytes after the record (the next record's)
    for record, end in ((v2_record(0, 0, None, None, [(b"h", None)]), None),
                        (b"\x10\x00\x00\x00\x00\x00\x02\x00\x01", None),
                        (v2_record(0, 0, b"k", b"v") + b"\x00", 9)):
        scanned, read = _parsers(record)
        assert scanned == read and read[-1] == (end or len(record))
    scanned, read = _parsers(v2_record(3, -5, b"", None, [(b"h", b"")]))
    assert scanned == read and read[:6] == (0, -5, 3, b"", None, 1)
    assert isinstance(_parsers(b"\x01\x00")[1], CorruptRecordError)


def test_checksum_error_inside_compressed_data_keeps_both_checksums():
    import xxhash

    section = v2_record(0, 0, None, b"hello")
    descriptor = bytes([0x70, 0x40])                  # independent blocks + block checksums
    hc = (xxhash.xxh32(descriptor).intdigest() >> 8) & 0xFF
    good = xxhash.xxh32(section).intdigest()
    frame = (b"\x04\x22\x4d\x18" + descriptor + bytes([hc])
             + struct.pack("<I", 0x80000000 | len(section)) + section
             + struct.pack("<I", good ^ 1) + b"\x00\x00\x00\x00")
    data = v2_batch(frame, count=1, attributes=3, base_offset=12)
    with pytest.raises(InvalidCrcError) as info:
        list(MemoryRecords(data).records())
    assert info.value.offset == 12 and {info.value.stored, info.value.computed} == {good, good ^ 1}
    assert 61 <= info.value.position < len(data)
    fixed = frame[:-8] + struct.pack("<I", good) + b"\x00\x00\x00\x00"
    (record,) = MemoryRecords(v2_batch(fixed, count=1, attributes=3)).records()
    assert record.value == b"hello"


# --- kafkacodec's own builder and sample log (the peers remain the oracle) -------------------

@pytest.mark.parametrize("magic, codec", [(2, c) for c in V2_CODECS] + [(m, c) for m in (0, 1)
                                                                         for c in LEGACY_CODECS])
def test_our_builder_round_trips(magic, codec):
    records = SHAPES["plain"] + SHAPES["null_and_empty"] + SHAPES["negative_ts_delta"]
    builder = kafkacodec.MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=500)
    for ts, key, value, _ in records:
        builder.append(ts, key, value, [("h", None)] if magic == 2 else ())
    data = builder.build()
    got = decodes_like_peers(data, aiokafka=not (magic == 0 and codec == 3))
    assert [r[0] for r in got] == list(range(500, 500 + len(records)))
    assert [(r[3], r[4]) for r in got] == [(k, v) for _, k, v, _ in records]
    assert MemoryRecords(data).validate() >= 1


def test_our_builder_log_append_time_delete_horizon_and_markers():
    builder = kafkacodec.MemoryRecordsBuilder(compression="lz4", base_offset=7,
                                              timestamp_type=TimestampType.LOG_APPEND_TIME,
                                              log_append_time=123_456, delete_horizon_ms=999)
    builder.append(1, b"k", b"v")
    builder.append(2, None, b"w")
    marker = kafkacodec.MemoryRecordsBuilder.build_end_txn_marker(
        False, producer_id=3, producer_epoch=4, coordinator_epoch=77, base_offset=9,
        timestamp=5)
    batch, control = MemoryRecords(builder.build() + marker).batches()
    assert batch.delete_horizon_ms == 999 and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(r.offset, r.timestamp) for r in batch] == [(7, 123_456), (8, 123_456)]
    assert control.is_control and control.is_transactional and control.size_in_bytes == 78
    (record,) = control
    assert (record.control_type, record.coordinator_epoch, record.offset) == \
        (ControlType.ABORT, 77, 9)


def test_sample_log_reads_like_kafka_python():
    from kafkacodec.sample import sample_log

    data = sample_log(0, seed=3)
    got = ours(data)
    assert [r[0] for r in got] == sorted(r[0] for r in got)
    records = MemoryRecords(data)
    assert records.validate() == len(records.index()) and records.partial_tail_bytes == 0
    # kafka-python reads control batches as records too; compare everything else
    expected = peer(data, kp.MemoryRecords)
    assert [r for r in got if r[0] in {e[0] for e in expected}] == expected


def test_decoding_many_batches_keeps_memory_flat():
    import tracemalloc

    log = b"".join([SPEC_V2, SPEC_COMMIT, aio_v2(SHAPES["headers"], 3), kp_legacy(SHAPES["plain"][:2], 1, 1),
                    v2_batch(v2_record(0, 0, None, b"x"), count=3)]) * 200     # ends in errors

    def read_all():
        records = MemoryRecords(log)
        for batch in records.batches():
            batch.is_valid()
            bytes(batch.raw)
            try:
                for record in batch:
                    record.value, record.headers, record.control_type
            except CorruptRecordError:
                pass
        records.index()
        records.validate()

    read_all()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20):                        # 20,000 batches
            read_all()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown


def test_records_pickle_with_every_field():
    import pickle

    fields = ("offset", "timestamp", "timestamp_type", "sequence", "key", "value", "headers",
              "is_control", "control_type", "coordinator_epoch")
    data = SPEC_COMMIT + kp_v2(SHAPES["headers"], producer=(1, 1, 5))
    for record in MemoryRecords(data).records():
        copy = pickle.loads(pickle.dumps(record))
        assert [getattr(copy, f) for f in fields] == [getattr(record, f) for f in fields]


@pytest.mark.parametrize("magic", [0, 1])
def test_inner_batches_are_a_wrappers_stored_messages(magic):
    # kafka-python writes the wrapper; its inner messages (decompressed independently with
    # gzip) are the entries inner_batches() yields, each with its own stored CRC
    records = [(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, ()) for i in range(3)]
    wrapper = kp_legacy(records, magic, codec=1, first_offset=40)
    value_at = 26 + (8 if magic else 0)      # offset, size, crc, magic, attrs[, ts], key -1, value size
    inner = gzip.decompress(wrapper[value_at:])
    (batch,) = MemoryRecords(wrapper).batches()
    got = list(batch.inner_batches())
    assert [bytes(b.raw) for b in got] == [bytes(b.raw) for b in MemoryRecords(inner).batches()]
    assert [b.crc for b in got] == [zlib.crc32(bytes(b.raw)[16:]) for b in got]
    assert all(b.is_valid() for b in got) and len(got) == 3
    (plain,) = MemoryRecords(kp_legacy(records[:1], magic)).batches()
    assert list(plain.inner_batches()) == [plain]
    (v2,) = MemoryRecords(kp_v2(records)).batches()
    with pytest.raises(ValueError, match="v2"):
        v2.inner_batches()


def test_inner_batches_of_a_wrapper_with_a_key_past_its_end_name_the_batch():
    wrapper = bytearray(kp_legacy([(1, b"k", b"v", ())], 1, codec=1))
    struct.pack_into(">q", wrapper, 0, 7)                  # the wrapper's offset
    struct.pack_into(">i", wrapper, 26, 2**31 - 8)         # its key size
    (batch,) = MemoryRecords(bytes(wrapper)).batches()
    with pytest.raises(CorruptRecordError) as err:
        batch.inner_batches()
    assert err.value.offset == 7 and err.value.position == 30      # where the key would start
