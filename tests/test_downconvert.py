"""Down-conversion (spec downconvert.md §2, §3): the eager loop and KIP-283 lazy chunks.

Inputs are built with kafka-python's v2 builder (header fields patched where a producer cannot
set them: base offset, LogAppendTime, producer ids, control flags), outputs are decoded with
kafka-python and aiokafka, both with CRC checks."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import threading
import time
import zlib

import crc32c
import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from isolated import run_python
import kafkacodec
from kafkacodec import (
    CorruptRecordError,
    LazyDownConvertRecords,
    UnsupportedCompressionError,
    UnsupportedVersionError,
    down_convert,
)
from kafkacodec._convert import DownConverter
from kafkacodec.lazy import overflow_stub

CREATE, APPEND = 0, 1
NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)

# spec record-formats.md §7: COMMIT marker, base offset 100, producer 7, epoch 1, coordinator epoch 5
COMMIT_MARKER = bytes.fromhex(
    "0000000000000064 00000042 00000003 02 8f76ed9a 0030 00000000"
    "00000000000003e8 00000000000003e8 0000000000000007 0001 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000005 00".replace(" ", ""))


def v2_batch(records, base_offset=0, codec=NONE, log_append_time=None, producer=None,
             transactional=False, leader_epoch=-1, may_store_uncompressed=False):
    """records: (offset_delta, timestamp, key, value[, headers]).  kafka-python builds the batch
    (uncompressed when compressing does not make it smaller: allowed only when asked);
    the fields only a broker sets are patched and the CRC-32C recomputed."""
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for record in records:
        delta, ts, key, value, *headers = record
        builder.append(delta, ts, key, value, headers[0] if headers else [])
    buf = bytearray(builder.build())
    assert codec == NONE or buf[22] & 7 == codec or may_store_uncompressed, "kafka-python stored it uncompressed"
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    attributes = buf[22]
    if log_append_time is not None:
        attributes |= 0x08
        struct.pack_into(">q", buf, 35, log_append_time)
    if transactional:
        attributes |= 0x10
    if producer is not None:
        struct.pack_into(">qhi", buf, 43, *producer)
    buf[22] = attributes
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def legacy(magic, messages, codec=NONE):
    """kafka-python's legacy builder: (offset, timestamp, key, value) messages."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for offset, ts, key, value in messages:
        builder.append(offset, ts, key, value)
    return bytes(builder.build())


def decode_kafka_python(data):
    out = []
    for batch in KpMemoryRecords(bytes(data)):
        assert batch.validate_crc()
        for rec in batch:
            out.append((batch.magic, rec.offset, *normalized(rec.timestamp, rec.timestamp_type),
                        rec.key, rec.value))
    return out


def normalized(ts, ts_type):
    # The peers differ on "no timestamp" (-1 and CreateTime, or None and None): use None.
    return (None, None) if ts is None or ts == -1 else (ts, ts_type)


def decode_aiokafka(data):
    out = []
    records = AioMemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc()
        for rec in batch:
            out.append((rec.offset, *normalized(rec.timestamp, rec.timestamp_type), rec.key, rec.value))
    return out


def decoded(data, aiokafka=True):
    """Records of a v0/v1 set as both peers see them (they must agree).  aiokafka cannot read
    magic-0 LZ4 (pass aiokafka=False there)."""
    kp = decode_kafka_python(data)
    if aiokafka:
        assert [r[1:] for r in kp] == decode_aiokafka(data)
    return kp


def expect(magic, rows):
    """What Kafka's rules say a reader sees: rows of (offset, timestamp, type, key, value)."""
    if magic == 0:
        return [(0, o, None, None, k, v) for o, _, _, k, v in rows]
    return [(1, o, t, tt, k, v) for o, t, tt, k, v in rows]


SAMPLE = [(0, 1000, b"k0", b"v0", [("h", b"x")]), (1, 1003, None, b"v1"), (3, 999, b"k3", None),
          (4, 1001, None, None, [("a", None), ("b", b"")])]


# --- §2: the eager algorithm -------------------------------------------------------------------
@pytest.mark.parametrize("magic", [0, 1])
def test_v2_uncompressed_to_legacy_keeps_offsets_keys_values_timestamps(magic):
    batch = v2_batch(SAMPLE, base_offset=100, producer=(7, 1, 0), transactional=True, leader_epoch=9)
    result = down_convert(batch, magic)
    # headers, producer id/epoch/sequence, transactional flag, leader epoch: gone (no v0/v1 field)
    assert decoded(result.records) == expect(magic, [
        (100, 1000, CREATE, b"k0", b"v0"), (101, 1003, CREATE, None, b"v1"),
        (103, 999, CREATE, b"k3", None), (104, 1001, CREATE, None, None)])
    assert result.stats.records_converted == 4
    assert result.stats.temporary_memory_bytes == len(batch) + result.records.size_in_bytes
    assert result.stats.conversion_time_ns > 0
    records, stats = result                        # unpacks like Kafka's (records, stats) pair
    assert records is result.records and stats is result.stats


def test_uncompressed_output_is_byte_exact():
    # spec record-formats.md §3.3: v1, offset 5, CreateTime 1000, null key, "hi"
    batch = v2_batch([(0, 1000, None, b"hi")], base_offset=5)
    assert bytes(down_convert(batch, 1).records) == bytes.fromhex(
        "0000000000000005 00000018 06614b6d 01 00 00000000000003e8 ffffffff 00000002 6869".replace(" ", ""))
    # v0, offset 0, null key, "hi"
    batch = v2_batch([(0, 1000, None, b"hi")])
    assert bytes(down_convert(batch, 0).records) == bytes.fromhex(
        "0000000000000000 00000010 fd6ebddb 00 00 ffffffff 00000002 6869".replace(" ", ""))
    # a whole batch against kafka-python's legacy builder writing the same messages
    rows = [(100, 1000, b"k0", b"v0"), (101, 1003, None, b"v1"), (103, 999, b"k3", None),
            (104, 1001, None, None)]
    batch = v2_batch(SAMPLE, base_offset=100)
    assert bytes(down_convert(batch, 1).records) == legacy(1, rows)
    assert bytes(down_convert(batch, 0).records) == legacy(0, rows)


def test_log_append_time_becomes_the_batch_max_timestamp_with_attribute_bit():
    batch = v2_batch(SAMPLE[:2], base_offset=10, log_append_time=5000)
    out = bytes(down_convert(batch, 1).records)
    assert decoded(out) == expect(1, [(10, 5000, APPEND, b"k0", b"v0"), (11, 5000, APPEND, None, b"v1")])
    assert out[17] == 0x08                        # attributes: LogAppendTime, no codec
    out0 = bytes(down_convert(batch, 0).records)
    assert out0[17] == 0 and decoded(out0) == expect(0, [(10, 0, 0, b"k0", b"v0"), (11, 0, 0, None, b"v1")])


@pytest.mark.parametrize("magic", [0, 1])
def test_first_offset_drops_earlier_records_of_uncompressed_batches(magic):
    first = v2_batch(SAMPLE[:2], base_offset=10)           # 10, 11: all below -> nothing
    second = v2_batch(SAMPLE, base_offset=20)              # 20, 21, 23, 24
    result = down_convert(first + second, magic, first_offset=22)
    assert [r[1] for r in decoded(result.records)] == [23, 24]
    assert result.stats.records_converted == 2
    # the dropped batch adds nothing to the stats, the kept one its size and its output
    assert result.stats.temporary_memory_bytes == len(second) + result.records.size_in_bytes


def test_control_batches_vanish_below_v2_and_stay_for_v2():
    data = v2_batch(SAMPLE[:1], base_offset=99) + COMMIT_MARKER + v2_batch(SAMPLE[1:2], base_offset=101)
    for magic in (0, 1):
        result = down_convert(data, magic)
        assert [r[1] for r in decoded(result.records)] == [99, 102]
    assert bytes(down_convert(data, 2).records) == data


def test_batches_at_or_below_the_target_are_copied_byte_for_byte():
    v0 = legacy(0, [(1, -1, b"a", b"b")])
    v1 = legacy(1, [(2, 1500, None, b"c")])
    v2 = v2_batch([(0, 2000, b"d", b"e")], base_offset=3)
    result = down_convert(v0 + v1 + v2, 1, first_offset=10)     # first_offset never filters kept ones
    out = bytes(result.records)
    assert out[: len(v0) + len(v1)] == v0 + v1                  # v0 stays v0: no up-conversion
    assert decoded(out) == [(0, 1, None, None, b"a", b"b"), (1, 2, 1500, 0, None, b"c")]
    assert result.stats.records_converted == 0
    assert result.stats.temporary_memory_bytes == len(v0) + len(v1)
    assert bytes(down_convert(v0 + v1 + v2, 2).records) == v0 + v1 + v2


def test_v1_messages_convert_to_v0():
    v1 = legacy(1, [(5, 1500, b"k", b"v"), (6, 1501, None, None)])
    result = down_convert(v1, 0, first_offset=6)
    assert bytes(result.records) == legacy(0, [(6, -1, None, None)])
    assert result.stats.records_converted == 1


def test_conversions_append_to_a_callers_write_buffer():
    batch = v2_batch(SAMPLE, base_offset=100)
    later = v2_batch([(0, 2000, b"k", b"later " * 40)], base_offset=200, codec=GZIP)
    out = kafkacodec.WriteBuffer(4096)
    out.write(b"prefix")
    first = down_convert(batch, 1, out=out)
    second = down_convert(later, 0, out=out)            # spare capacity: the first view stays
    assert bytes(first.records) == bytes(down_convert(batch, 1).records)
    assert bytes(second.records) == bytes(down_convert(later, 0).records)
    assert bytes(out) == b"prefix" + bytes(first.records) + bytes(second.records)
    assert decoded(second.records) == expect(0, [(200, 2000, CREATE, b"k", b"later " * 40)])
    assert first.stats.records_converted == 4 and second.stats.records_converted == 1
    with pytest.raises(BufferError):                    # the results view it
        out.clear()
    zstd = v2_batch([(0, 1, None, b"z" * 100)], base_offset=7, codec=ZSTD)
    with pytest.raises(UnsupportedCompressionError):
        down_convert(batch + zstd, 1, out=out)
    with pytest.raises(BufferError):                    # would outgrow the viewed buffer
        down_convert(batch * 100, 1, out=out)
    assert bytes(out) == b"prefix" + bytes(first.records) + bytes(second.records)
    del first, second
    out.clear()                                         # reused, fetch after fetch
    assert bytes(down_convert(batch, 0, out=out).records) == bytes(down_convert(batch, 0).records)
    with pytest.raises(TypeError):
        down_convert(batch, 1, out=bytearray(100))


def test_zstd_batch_fails_the_whole_conversion_below_v2():
    value = b"compressible " * 50
    zstd = v2_batch([(0, 1, None, value)] * 1, base_offset=7, codec=ZSTD)
    good = v2_batch(SAMPLE[:1])
    with pytest.raises(UnsupportedCompressionError) as error:
        down_convert(good + zstd, 1)
    assert error.value.offset == 7 and error.value.position == len(good)
    assert bytes(down_convert(good + zstd, 2).records) == good + zstd


def test_unknown_codec_fails_below_v2_even_for_kept_batches():
    message = bytearray(legacy(1, [(3, 5, b"k", b"v")]))
    message[17] = 5                               # codec id 5 does not exist
    struct.pack_into(">I", message, 12, zlib.crc32(bytes(message[16:])))
    with pytest.raises(UnsupportedCompressionError, match="id 5") as error:
        down_convert(bytes(message), 1)
    assert error.value.offset == 3
    assert bytes(down_convert(bytes(message), 2).records) == message


def test_empty_batch_and_trailing_partial_entry_produce_nothing():
    empty = bytearray(v2_batch([(0, 1, None, b"x")], base_offset=9)[:61])
    struct.pack_into(">i", empty, 8, 49)
    struct.pack_into(">i", empty, 57, 0)
    struct.pack_into(">I", empty, 17, crc32c.crc32c(bytes(empty[21:])))
    empty = bytes(empty) + v2_batch([(0, 1, None, b"x")])
    partial = v2_batch(SAMPLE, base_offset=50)[:-3]
    result = down_convert(empty + partial, 1)
    assert [r[1] for r in decoded(result.records)] == [0]
    assert bytes(down_convert(b"", 1).records) == b""


@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4])
def test_a_batch_declaring_no_records_is_not_examined(codec):
    # Kafka's DefaultRecordBatch.iterator() is empty for count 0 (nothing after the header is
    # read, compressed or not), so RecordsUtil.downConvert converts nothing; the reader agrees
    # (found by the differential harness: the converter read the bytes anyway and raised).
    batch = bytearray(compressed_batch(codec))
    struct.pack_into(">i", batch, 57, 0)
    if codec:
        batch[61:] = b"\xff" * (len(batch) - 61)     # not even valid compressed data
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    assert list(kafkacodec.MemoryRecords(bytes(batch)).records()) == []
    for magic in (0, 1):
        assert bytes(down_convert(bytes(batch), magic).records) == b""


def compressed_batch(codec):
    builder = kafkacodec.MemoryRecordsBuilder(compression=codec, base_offset=3)
    for i in range(3):
        builder.append(1000 + i, b"k", b"v%d" % i * 50)
    return builder.build()


def test_a_negative_record_count_is_refused_before_decompressing():
    batch = bytearray(compressed_batch(GZIP))
    struct.pack_into(">i", batch, 57, -1)
    batch[61:] = b"\xff" * (len(batch) - 61)         # a decompression error if it got there
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptRecordError, match="record count -1"):
        down_convert(bytes(batch), 1)


def test_invalid_records_raise_with_their_position():
    batch = bytearray(v2_batch(SAMPLE, base_offset=3))
    struct.pack_into(">i", batch, 57, 5)              # one record more than present
    with pytest.raises(CorruptRecordError, match="premature end") as error:
        down_convert(bytes(batch), 1)
    assert error.value.position is not None and error.value.position > 61
    struct.pack_into(">i", batch, 57, 3)              # one fewer: bytes left over
    with pytest.raises(CorruptRecordError, match="left after") as error:
        down_convert(bytes(batch), 1)
    assert error.value.offset == 3
    with pytest.raises(CorruptRecordError, match="entry size"):
        down_convert(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 20, 1)
    with pytest.raises(UnsupportedVersionError):
        down_convert(b"", 3)


def test_negative_timestamp_is_rejected_like_kafkas_builder():
    batch = v2_batch([(0, -5, None, b"x")])
    with pytest.raises(CorruptRecordError, match="timestamp -5"):
        down_convert(batch, 1)
    with pytest.raises(CorruptRecordError, match="timestamp -5"):
        down_convert(batch, 0)
    assert decoded(down_convert(v2_batch([(0, -1, None, b"x")]), 1).records) == [(1, 0, None, None, None, b"x")]


@pytest.mark.parametrize("size", [0, 63, 64, 8191, 8192, 70000])
def test_key_and_value_lengths_across_varint_widths(size):
    # zig-zag varint widths change at 64 (1 -> 2 bytes) and 8192 (2 -> 3 bytes)
    rows = [(0, 1, b"k" * size, b"v" * size), (200, 10**12, None, b"x" * (size // 2))]
    batch = v2_batch(rows, base_offset=10**10)
    assert decoded(down_convert(batch, 1).records) == expect(1, [
        (10**10, 1, CREATE, b"k" * size, b"v" * size),
        (10**10 + 200, 10**12, CREATE, None, b"x" * (size // 2))])


def test_accepts_any_buffer_memory_and_file_records(tmp_path):
    batch = v2_batch(SAMPLE, base_offset=1)
    want = bytes(down_convert(batch, 1).records)
    path = tmp_path / "log"
    path.write_bytes(b"\0" * 100 + batch + b"\0" * 7)

    class Holder:
        buffer = memoryview(batch)

    with kafkacodec.FileRecords.open(path) as file_records:
        sliced = file_records.slice(100, len(batch))
        for records in (bytearray(batch), memoryview(batch), Holder(),
                        kafkacodec.MemoryRecords(batch), sliced):
            assert bytes(down_convert(records, 1).records) == want
            assert b"".join(bytes(c.records) for c in LazyDownConvertRecords(records, 1)) == want
        del sliced


def test_results_are_memory_records_our_reader_agrees_with_the_peers():
    data = (v2_batch(COMPRESSIBLE, base_offset=0, codec=GZIP) + v2_batch(SAMPLE, base_offset=10)
            + v2_batch(SAMPLE[:2], base_offset=20, log_append_time=77))
    for magic in (0, 1):
        records = down_convert(data, magic).records
        assert isinstance(records, kafkacodec.MemoryRecords)
        ours = [(magic, r.offset, *normalized(r.timestamp, r.timestamp_type), r.key, r.value)
                for r in records.records()]
        assert ours == decoded(records)
        chunk = next(iter(LazyDownConvertRecords(data, magic)))
        assert isinstance(chunk.records, kafkacodec.MemoryRecords)


# --- §2, compressed sources ------------------------------------------------------------------
def inner_messages(wrapper_entry):
    """(offset, attributes, timestamp) of the inner messages of one legacy wrapper entry,
    decompressed with kafka-python's codecs."""
    from kafka import codec as kc

    magic, codec = wrapper_entry[16], wrapper_entry[17] & 7
    value_at = 12 + (22 if magic == 1 else 14)
    value = wrapper_entry[value_at:]
    plain = {GZIP: kc.gzip_decode, SNAPPY: kc.snappy_decode,
             LZ4: kc.lz4_decode_old_kafka if magic == 0 else kc.lz4_decode}[codec](value)
    out, pos = [], 0
    while pos < len(plain):
        offset, size = struct.unpack_from(">qi", plain, pos)
        attributes = plain[pos + 17]
        ts = struct.unpack_from(">q", plain, pos + 18)[0] if plain[pos + 16] == 1 else None
        out.append((offset, attributes, ts))
        pos += 12 + size
    return out


COMPRESSIBLE = [(0, 1000, b"k0", b"value " * 30, [("h", b"x")]), (2, 1005, None, b"value " * 30),
                (5, 990, b"k5", None)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_compressed_batch_becomes_one_wrapper_with_every_record(codec, magic):
    batch = bytearray(v2_batch(COMPRESSIBLE, base_offset=100, codec=codec))
    struct.pack_into(">i", batch, 23, 9)           # compaction: LastOffsetDelta past the last record
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    result = down_convert(bytes(batch), magic, first_offset=103)   # no filter for compressed
    out = bytes(result.records)
    assert decoded(out, aiokafka=not (magic == 0 and codec == LZ4)) == expect(magic, [
        (100, 1000, CREATE, b"k0", b"value " * 30), (102, 1005, CREATE, None, b"value " * 30),
        (105, 990, CREATE, b"k5", None)])
    assert struct.unpack_from(">q", out)[0] == 105                 # the last kept record
    assert out[16] == magic and out[17] == codec                   # same codec, CreateTime
    inner = inner_messages(out)
    if magic == 1:
        assert struct.unpack_from(">q", out, 18)[0] == 1005        # max record timestamp
        assert inner == [(0, 0, 1000), (2, 0, 1005), (5, 0, 990)]  # relative, gaps kept
    else:
        assert inner == [(100, 0, None), (102, 0, None), (105, 0, None)]   # absolute
    inner_size = sum(12 + (22 if magic else 14) + len(k or b"") + len(v or b"")
                     for _, _, k, v, *_ in COMPRESSIBLE)
    assert result.stats.temporary_memory_bytes == len(batch) + inner_size + 12 + (22 if magic else 14)
    assert result.stats.records_converted == 3


def test_lz4_wrapper_header_checksum_follows_the_target_magic():
    batch = v2_batch(COMPRESSIBLE, codec=LZ4)
    v1, v0 = bytes(down_convert(batch, 1).records), bytes(down_convert(batch, 0).records)
    assert v1[34:41] == bytes.fromhex("04224d18604082")            # correct HC
    assert v0[26:33] == bytes.fromhex("04224d1860401a")            # Kafka's magic-0 HC


@pytest.mark.parametrize("codec", [GZIP, LZ4])
def test_compressed_log_append_time_goes_into_wrapper_and_inner_messages(codec):
    batch = v2_batch(COMPRESSIBLE, base_offset=7, codec=codec, log_append_time=4242)
    out = bytes(down_convert(batch, 1).records)
    assert out[17] == codec | 0x08 and struct.unpack_from(">q", out, 18)[0] == 4242
    assert inner_messages(out) == [(0, 8, 4242), (2, 8, 4242), (5, 8, 4242)]
    assert [r[2:4] for r in decoded(out)] == [(4242, APPEND)] * 3


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_compressed_v1_wrapper_converts_to_v0(codec):
    v1 = legacy(1, [(0, 5, b"a", b"b" * 50), (1, 6, None, b"c" * 50)], codec=codec)
    v1 = struct.pack(">q", 41) + v1[8:]            # wrapper offset 41: absolute 40, 41
    result = down_convert(v1, 0)
    out = bytes(result.records)
    assert out[16] == 0 and out[17] == codec and struct.unpack_from(">q", out)[0] == 41
    assert inner_messages(out) == [(40, 0, None), (41, 0, None)]
    assert [r[1] for r in decoded(out, aiokafka=codec != LZ4)] == [40, 41]
    assert bytes(down_convert(v1, 1).records) == v1                # kept byte for byte


def test_corrupt_compressed_data_names_the_batch():
    batch = bytearray(v2_batch(COMPRESSIBLE, base_offset=70, codec=GZIP))
    batch[61 + 12] ^= 0xFF                         # inside the deflate stream
    good = v2_batch(SAMPLE[:1])
    with pytest.raises(kafkacodec.CorruptRecordError) as error:
        down_convert(good + bytes(batch), 1)
    assert error.value.offset == 70


# --- §3: lazy chunks -------------------------------------------------------------------------
def many_batches(count, per_batch=3, value=b"v" * 40, base=0, headers=()):
    """`count` batches of `per_batch` records; keys of equal width keep every batch one size.
    Headers (dropped by the conversion) make the v2 form larger than the v1/v0 form."""
    out = b""
    for i in range(count):
        rows = [(j, 1000 + i, b"k%04d" % i, value, list(headers)) for j in range(per_batch)]
        out += v2_batch(rows, base_offset=base + i * per_batch)
    return out


def test_committed_size_rules():
    data = many_batches(10)
    lazy = LazyDownConvertRecords(data, 1)
    assert lazy.size_in_bytes == len(data)                # v1 of these records is smaller
    small = v2_batch([(i, 1, None, b"") for i in range(50)])
    lazy = LazyDownConvertRecords(small, 1)               # v1 form is bigger: first chunk wins
    assert lazy.size_in_bytes == len(bytes(down_convert(small, 1).records)) > len(small)
    assert LazyDownConvertRecords(COMMIT_MARKER * 3, 1).size_in_bytes == 12
    assert LazyDownConvertRecords(b"", 1).size_in_bytes == 0
    assert LazyDownConvertRecords(data[:40], 1).size_in_bytes == 0     # only a partial batch
    # all records below first_offset: a complete batch exists, nothing converts
    assert LazyDownConvertRecords(data, 1, first_offset=10**6).size_in_bytes == 12


@pytest.mark.skipif(not hasattr(__import__("resource"), "getrusage"), reason="needs getrusage")
def test_eager_output_memory_of_a_dropped_conversion_is_reused_not_faulted_in_again():
    # A fresh 18 MB output faults in every 4 KiB page (about 2.4 us each here, the eager path's
    # main cost before); the block of a dropped result is kept and reused, already mapped.
    result = run_python("""
        import resource
        from kafkacodec import MemoryRecordsBuilder, down_convert
        builder, log = MemoryRecordsBuilder(), bytearray()
        for _ in range(1024):
            builder.append_many(1, None, [bytes(1024)] * 16)
            log += builder.build()
        log = bytes(log)
        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        counts = []
        for _ in range(4):
            before = faults()
            size = down_convert(log, 1).records.size_in_bytes
            counts.append(faults() - before)
        print(size // 4096, *counts)
        """)
    assert result.returncode == 0, result.stderr
    pages, first, *again = map(int, result.stdout.split())
    assert first > pages // 2, (pages, first)                # the measure sees fresh pages
    assert max(again) < pages // 8, (pages, first, again)


def test_zstd_in_the_first_chunk_escapes_the_constructor():
    zstd = v2_batch([(0, 1, None, b"compressible " * 50)], codec=ZSTD)
    with pytest.raises(UnsupportedCompressionError):
        LazyDownConvertRecords(COMMIT_MARKER + zstd, 1)


@pytest.mark.parametrize("chunk_size", [0, 100, 400, 1000, 128 * 1024])
def test_chunks_respect_the_read_limit_and_add_up_to_the_eager_result(chunk_size):
    data = many_batches(21) + many_batches(1, per_batch=37, base=63)
    batch_size = len(many_batches(1))
    lazy = LazyDownConvertRecords(data, 1, chunk_size=chunk_size)
    chunks = list(lazy)
    assert b"".join(bytes(c.records) for c in chunks) == bytes(down_convert(data, 1).records)
    # each chunk after the committed first one covers <= chunk_size input (or one batch)
    for chunk in chunks[1:-1]:
        batches = max(1, chunk_size // batch_size)
        assert chunk.stats.temporary_memory_bytes - chunk.records.size_in_bytes == batches * batch_size
    assert sum(c.stats.records_converted for c in chunks) == 100
    assert list(lazy)[0] is chunks[0]                    # iteration starts over, C is cached


@pytest.mark.parametrize("magic", [0, 1])
def test_lazy_over_mixed_codecs_and_magics_matches_eager(magic):
    data = (v2_batch(COMPRESSIBLE, base_offset=0, codec=GZIP) + COMMIT_MARKER
            + legacy(0, [(6, -1, b"old", b"v0 message")]) + many_batches(3, base=7)
            + v2_batch(COMPRESSIBLE, base_offset=16, codec=LZ4, log_append_time=99)
            + v2_batch(COMPRESSIBLE, base_offset=22, codec=SNAPPY))
    eager = down_convert(data, magic)
    for chunk_size in (0, 300, 10**6):
        lazy = LazyDownConvertRecords(data, magic, chunk_size=chunk_size)
        chunks = list(lazy)
        assert b"".join(bytes(c.records) for c in chunks) == bytes(eager.records)
        assert sum(c.stats.records_converted for c in chunks) == eager.stats.records_converted
        assert (sum(c.stats.temporary_memory_bytes for c in chunks)
                == eager.stats.temporary_memory_bytes)
        out = write_all(lazy)
        assert lazy.stats.records_converted == eager.stats.records_converted
    offsets = [r[1] for r in decoded(out, aiokafka=magic == 1)]
    assert offsets == [0, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 21, 22, 24, 27]


def test_iteration_resumes_after_the_committed_chunk_without_sending_twice():
    # Kafka 3.8 skips one source batch after its cached first chunk: when early batches
    # convert to nothing, C's batch is converted and sent a second time.  We resume exactly.
    data = COMMIT_MARKER + v2_batch(SAMPLE[:2], base_offset=1) + many_batches(3, base=200)
    lazy = LazyDownConvertRecords(data, 1, first_offset=150, chunk_size=10**6)
    offsets = [r[1] for c in lazy for r in decoded(c.records)]
    assert offsets == list(range(200, 209))              # each record once, in order


def write_all(lazy, dest=None):
    dest = dest or io.BytesIO()
    total = 0
    while not lazy.completed:
        total += lazy.write_to(dest)
    assert total == lazy.size_in_bytes == lazy.bytes_written
    return dest.getvalue()


@pytest.mark.parametrize("magic", [0, 1])
def test_write_to_pads_shorter_output_with_overflow_stubs(magic):
    data = many_batches(30, headers=[("trace", b"t" * 30)]) + v2_batch(SAMPLE, base_offset=500)[:-10]
    lazy = LazyDownConvertRecords(data, magic, chunk_size=500)
    out = write_all(lazy)
    converted = bytes(down_convert(data, magic).records)
    assert len(out) == len(data) and out.startswith(converted)
    assert out[len(converted):] == overflow_stub(len(data) - len(converted))
    assert [r[1] for r in decoded(out)] == list(range(90))               # peers skip the stub
    assert lazy.stats.records_converted == 90
    assert lazy.write_to(io.BytesIO()) == 0


def test_write_to_cuts_longer_output_at_the_committed_size():
    # tiny records: v1 is larger than v2, so everything after the first chunk overflows
    data = b"".join(v2_batch([(i, 1, None, b"") for i in range(20)], base_offset=20 * b)
                    for b in range(5))
    lazy = LazyDownConvertRecords(data, 1)
    first = bytes(next(iter(lazy)).records)
    out = write_all(lazy)
    converted = bytes(down_convert(data, 1).records)
    assert lazy.size_in_bytes == len(data) < len(converted)
    assert out == converted[: len(data)]                                 # cut by bytes
    seen = [r[1] for r in decoded(out)]
    assert seen == list(range(len(seen))) and len(seen) >= 20            # at least C's batch
    assert out.startswith(first)


@pytest.mark.parametrize("magic", [0, 1])
def test_max_size_commits_no_padding_for_records_dropped_below_the_first_offset(magic):
    """Kafka commits the whole source and pads what the records dropped below first_offset
    leave (overflow stubs); with max_size those bytes are not committed, and a wider source
    fills them with the records that follow (what is sent never exceeds max_size)."""
    data = many_batches(8, per_batch=10, value=b"v" * 200)          # 10 records a batch
    batch = len(data) // 8
    narrow = data[:3 * batch]
    kafka = write_all(LazyDownConvertRecords(narrow, magic, first_offset=7))
    assert len(kafka) == len(narrow) and overflow_stub(12)[:8] in kafka        # padded
    short = write_all(LazyDownConvertRecords(narrow, magic, first_offset=7, max_size=len(narrow)))
    assert len(short) < len(narrow) and b"\xff" * 8 not in short             # no stub
    kept, theirs = [r[1] for r in decoded(short)], [r[1] for r in decoded(kafka)]
    assert kafka.startswith(short) and kept == theirs[:len(kept)] and len(kept) > 3 + 10
    filled = write_all(LazyDownConvertRecords(data, magic, first_offset=7, max_size=len(narrow)))
    assert len(filled) == len(narrow) and filled.startswith(short)
    offsets = [r[1] for r in decoded(filled)]
    assert offsets == list(range(7, 7 + len(offsets))) and len(offsets) > len(decoded(kafka))
    # nothing dropped: the committed size is Kafka's
    assert len(write_all(LazyDownConvertRecords(narrow, magic, max_size=len(narrow)))) == len(narrow)
    assert len(write_all(LazyDownConvertRecords(data, magic, max_size=100))) == max(100, len(
        bytes(next(iter(LazyDownConvertRecords(data, magic))).records)))
    with pytest.raises(ValueError):
        LazyDownConvertRecords(data, magic, max_size=-1)


def test_only_unconvertible_batches_send_a_12_byte_stub():
    lazy = LazyDownConvertRecords(COMMIT_MARKER, 0)
    assert write_all(lazy) == bytes.fromhex("ffffffffffffffff0000003d")
    assert decoded(write_all(LazyDownConvertRecords(COMMIT_MARKER, 1))) == []


@pytest.mark.parametrize("remaining, expected", [
    (5, "ffffffffff"),
    (12, "ffffffffffffffff0000003d"),
    (20, "ffffffffffffffff0000003d" + "00" * 8),
    (61, "ffffffffffffffff0000003e" + "00" * 49),
    (131071, "ffffffffffffffff00020000" + "00" * (131071 - 12)),
])
def test_overflow_stub_bytes(remaining, expected):
    assert overflow_stub(remaining) == bytes.fromhex(expected)


def shrinking_batch(remaining):
    """A v2 batch whose v1 form is `remaining` bytes shorter (its big header is dropped)."""
    for size in range(remaining - 200, remaining):
        batch = v2_batch([(0, 1, None, b"v", [("h", b"x" * size)])])
        if len(batch) - down_convert(batch, 1).records.size_in_bytes == remaining:
            return batch
    raise AssertionError(remaining)


@pytest.mark.parametrize("remaining", [131072, 131073, 131072 + 20, 3 * 131072 + 5])
def test_padding_above_128k_is_a_sequence_of_stubs(remaining):
    batch = shrinking_batch(remaining)
    lazy = LazyDownConvertRecords(batch, 1)
    out = write_all(lazy)
    converted = bytes(down_convert(batch, 1).records)
    expected, left = b"", remaining
    while left:                                    # pieces of 128 KiB, each a fresh stub
        piece = bytearray(min(131072, max(12, left + 1)))
        struct.pack_into(">qi", piece, 0, -1, max(left + 1, 61))
        piece = bytes(piece[:min(len(piece), left)])
        expected += piece
        left -= len(piece)
    assert out == converted + expected
    assert out[len(converted):][:12] == b"\xff" * 8 + struct.pack(">i", remaining + 1)
    if remaining == 131073:
        assert out[-1:] == b"\xff"                 # the second stub, 1 byte of it
    assert [r[1] for r in decoded(out)] == [0]


def test_zstd_after_the_first_chunk_is_replaced_by_padding():
    good = many_batches(2)
    zstd = v2_batch([(0, 1, None, b"compressible " * 50)], base_offset=6, codec=ZSTD)
    lazy = LazyDownConvertRecords(good + zstd + many_batches(1, base=7), 1, chunk_size=0)
    out = write_all(lazy)
    assert len(out) == len(good) + len(zstd) + len(many_batches(1))
    assert [r[1] for r in decoded(out)] == list(range(6))


def test_disabled_conversion_raises_or_passes_through_untouched():
    v2 = many_batches(2)
    with pytest.raises(UnsupportedVersionError, match="disabled"):
        LazyDownConvertRecords(v2, 1, enabled=False)
    v1 = legacy(1, [(0, 5, b"a", b"b")]) + legacy(1, [(1, 6, b"c", b"d")])[:-2]
    lazy = LazyDownConvertRecords(v1, 1, enabled=False)
    assert lazy.size_in_bytes == len(v1)
    assert write_all(lazy) == v1                        # partial tail included, as stored
    assert b"".join(c.records for c in lazy) == v1
    assert lazy.stats.records_converted == 0
    assert write_all(LazyDownConvertRecords(v2, 2, enabled=False)) == v2
    with pytest.raises(UnsupportedVersionError):       # a newer batch after the first chunk
        LazyDownConvertRecords(v1[:36] + v2, 1, enabled=False, chunk_size=0)


def test_file_input_is_read_chunk_by_chunk(tmp_path):
    data = many_batches(200) + v2_batch(SAMPLE, base_offset=10_000)[:-1]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"junk" + data)
    with open(path, "rb") as file:
        file.seek(4)
        lazy = LazyDownConvertRecords(file, 1, chunk_size=4096)
        out = write_all(lazy)
        # memory bound: one reused read buffer of about one chunk
        assert len(lazy._source.buffer) <= 4096
    memory = write_all(LazyDownConvertRecords(data, 1, chunk_size=4096))
    assert out == memory and len(out) == len(data)


def rss_file_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise KeyError("RssFile")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_file_records_input_stays_about_a_chunk_resident(tmp_path):
    # Scaled-down memory bound (the 1 GB run is bench/downconvert_memory.py): converting a
    # 48 MiB mapped slice must not leave the slice's pages in the resident set.
    batch = many_batches(1, per_batch=16, value=b"x" * 1000)
    path = tmp_path / "big.log"
    with open(path, "wb") as file:
        for i in range((48 << 20) // len(batch)):
            file.write(struct.pack(">q", i * 16) + batch[8:])
    with kafkacodec.FileRecords.open(path) as records, open(os.devnull, "wb") as sink:
        before = rss_file_bytes()
        lazy = LazyDownConvertRecords(records.slice(0, 1 << 40), 1)
        while not lazy.completed:
            lazy.write_to(sink)
        grown = rss_file_bytes() - before
        eager = down_convert(records, 1)        # the eager path maps it all in
        assert rss_file_bytes() - before > 40 << 20
    assert lazy.bytes_written == lazy.size_in_bytes == os.path.getsize(path)
    assert grown < 8 << 20, grown
    del eager


def test_write_to_plain_writers_and_files(tmp_path):
    data = many_batches(10)
    expected = write_all(LazyDownConvertRecords(data, 0))
    pieces = []

    class Sink:
        def write(self, view):
            pieces.append(bytes(view[:7]))         # accepts 7 bytes at a time
            return min(7, len(view))

    lazy = LazyDownConvertRecords(data, 0)
    assert lazy.write_to(Sink()) == len(expected)
    assert b"".join(pieces) == expected
    with open(tmp_path / "out", "wb") as file:
        assert LazyDownConvertRecords(data, 0).write_to(file) == len(expected)
    assert (tmp_path / "out").read_bytes() == expected


def test_non_blocking_socket_with_a_slow_reader_gets_exactly_the_committed_bytes():
    data = (many_batches(400, value=b"x" * 200, headers=[("trace", b"t" * 30)])
            + many_batches(1, base=5000)[:-5])
    lazy = LazyDownConvertRecords(data, 1, chunk_size=16 * 1024)
    writer, reader = socket.socketpair()
    writer.setblocking(False)
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    received = bytearray()

    def read_slowly():
        while True:
            piece = reader.recv(3000)
            if not piece:
                return
            received.extend(piece)
            time.sleep(0.0005)

    thread = threading.Thread(target=read_slowly)
    thread.start()
    calls = partial_calls = 0
    while not lazy.completed:
        n = lazy.write_to(writer)
        calls += 1
        partial_calls += 0 < n < lazy.size_in_bytes
        if not lazy.completed:
            time.sleep(0.0002)
    writer.close()
    thread.join()
    reader.close()
    assert len(received) == lazy.size_in_bytes == len(data)
    assert calls > 1 and partial_calls > 0              # it did resume across calls
    assert bytes(received) == write_all(LazyDownConvertRecords(data, 1, chunk_size=16 * 1024))
    assert len(decoded(bytes(received))) == 1200


def test_blocking_socket_gets_everything_in_one_call():
    data = many_batches(200, value=b"x" * 500)
    lazy = LazyDownConvertRecords(data, 0, chunk_size=8192)
    writer, reader = socket.socketpair()
    received = bytearray()
    thread = threading.Thread(target=lambda: [received.extend(p) for p in iter(lambda: reader.recv(65536), b"")])
    thread.start()
    assert lazy.write_to(writer) == lazy.size_in_bytes and lazy.completed
    writer.close()
    thread.join()
    reader.close()
    assert bytes(received) == write_all(LazyDownConvertRecords(data, 0, chunk_size=8192))


@pytest.mark.skipif(not hasattr(os, "set_blocking"), reason="needs non-blocking pipes")
def test_non_blocking_pipe_file_object_resumes_after_would_block():
    data = many_batches(300, value=b"x" * 500)
    lazy = LazyDownConvertRecords(data, 1)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    received = bytearray()
    with open(write_fd, "wb", buffering=0) as pipe:      # FileIO.write returns None when full
        first = lazy.write_to(pipe)
        assert 0 < first < lazy.size_in_bytes and not lazy.completed
        received += os.read(read_fd, 1 << 20)
        while not lazy.completed:
            lazy.write_to(pipe)
            received += os.read(read_fd, 1 << 20)
    os.close(read_fd)
    assert bytes(received) == write_all(LazyDownConvertRecords(data, 1))


def test_public_names():
    for name in ("down_convert", "LazyDownConvertRecords", "ConvertedRecords", "RecordConversionStats"):
        assert name in kafkacodec.__all__ and hasattr(kafkacodec, name)


# --- property: random logs against a model of Kafka's rules ----------------------------------
_maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def random_batch(draw, base):
    count = draw(st.integers(1, 6))
    deltas = sorted(draw(st.sets(st.integers(0, 30), min_size=count, max_size=count)))
    rows = [(d, draw(st.integers(-1, 2**41)), draw(_maybe_bytes),
             draw(st.sampled_from([b"payload " * 8, b"", None, b"x"])),
             draw(st.lists(st.tuples(st.sampled_from(["a", "bb"]), _maybe_bytes), max_size=2)))
            for d in deltas]
    codec = draw(st.sampled_from([NONE, NONE, GZIP, SNAPPY, LZ4]))
    append_time = draw(st.one_of(st.none(), st.integers(0, 2**41)))
    return base, rows, codec, append_time


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(0, 2), st.sampled_from([0, 1]), st.integers(0, 120))
def test_random_logs_follow_kafkas_rules(data, batches, magic, first_offset):
    log, expected, base = b"", [], 0
    for _ in range(batches + 1):
        base_offset, rows, codec, append_time = data.draw(random_batch(base))
        batch = v2_batch(rows, base_offset=base_offset, codec=codec, log_append_time=append_time,
                         may_store_uncompressed=True)
        codec = batch[22] & 7                        # (what kafka-python chose: none when no smaller)
        log += batch
        if data.draw(st.booleans()):
            log += COMMIT_MARKER                     # markers vanish
        for delta, ts, key, value, _ in rows:
            offset = base_offset + delta
            if codec == NONE and offset < first_offset:
                continue                             # filtered only when uncompressed
            if append_time is not None:
                expected.append((offset, append_time, APPEND, key, value))
            else:
                expected.append((offset, ts, CREATE, key, value))
        base = base_offset + 40
    result = down_convert(log, magic, first_offset=first_offset)
    got = decoded(result.records, aiokafka=magic == 1)
    want = expect(magic, [(o, *normalized(t, tt), k, v) for o, t, tt, k, v in expected])
    assert got == want
    assert result.stats.records_converted == len(expected)
    lazy = LazyDownConvertRecords(log, magic, first_offset=first_offset, chunk_size=200)
    assert b"".join(bytes(c.records) for c in lazy) == bytes(result.records)


# --- entries larger than a chunk (issue 14, item 11) -------------------------------------------
from memory_probe import available as memory_probe_available, run_measured  # noqa: E402


def sparse_entry_file(path, prefix, declared, magic=2):
    """`prefix` (complete batches), then the header of an entry declaring `declared` bytes
    after its size field, the file extended (sparse: zeros, no disk) to hold all of them."""
    header = bytearray(61)
    struct.pack_into(">qi", header, 0, 1234, declared)
    header[16] = magic
    with open(path, "wb") as f:
        f.write(prefix + header)
    os.truncate(path, len(prefix) + 12 + declared)
    return len(prefix)


@pytest.mark.skipif(not memory_probe_available or os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="needs Linux /proc; ASan's heap")
def test_an_entry_declaring_2_gib_is_rejected_before_it_is_read(tmp_path):
    """A sparse file whose third entry declares 2 GiB: refused by the size cap (default) or by
    its CRC, checked in pieces (a raised cap), without reading the claim into memory; with
    conversion disabled only its header is read."""
    path = tmp_path / "sparse.log"
    position = sparse_entry_file(path, many_batches(2), 2**31 - 1)
    code = (
        "import json, sys\n"
        "from kafkacodec import LazyDownConvertRecords, KafkaCodecError\n"
        "results = []\n"
        "for cap in (None, 3 << 30):\n"
        "    kwargs = {} if cap is None else {'max_entry_size': cap}\n"
        "    try:\n"
        "        with open(sys.argv[1], 'rb') as f:\n"
        "            for chunk in LazyDownConvertRecords(f, 1, **kwargs):\n"
        "                pass\n"
        "        results.append(None)\n"
        "    except KafkaCodecError as error:\n"
        "        results.append([type(error).__name__, error.position, error.offset, str(error)])\n"
        "with open(sys.argv[1], 'rb') as f:\n"      # pass-through: the headers are enough
        "    results.append(LazyDownConvertRecords(f, 2, enabled=False).size_in_bytes)\n"
        "print(json.dumps(results))\n")
    run, growth = run_measured(code, str(path))
    assert run.returncode == 0, run.stderr[-3000:]
    too_large, bad_crc, passed_through = json.loads(run.stdout)
    assert too_large[:3] == ["RecordTooLargeError", position, 1234], too_large
    assert f"{2**31 + 11} bytes" in too_large[3] and "max_entry_size" in too_large[3]
    assert bad_crc[:3] == ["InvalidCrcError", position, 1234], bad_crc
    assert passed_through == os.path.getsize(path)
    assert 0 <= growth < 32 << 20, f"anonymous memory grew {growth} bytes"


@pytest.mark.parametrize("source", ["file", "FileRecords", "bytes"])
def test_entries_larger_than_a_chunk_are_checked_then_converted(tmp_path, source):
    """Every input kind agrees: an entry above the chunk size (at least 128 KiB) converts when
    its CRC holds, raises InvalidCrcError (position, offset) when not, and RecordTooLargeError
    above max_entry_size; smaller entries are converted as Kafka does, unchecked."""
    big = many_batches(1, per_batch=4, value=b"x" * 60_000, base=2)
    small = many_batches(2)
    good = small + big
    corrupt = bytearray(good)
    corrupt[len(small) + 500] ^= 1
    path = tmp_path / "in.log"

    def convert(data, **kwargs):
        """The converted chunks, joined."""
        path.write_bytes(data)
        if source == "bytes":
            return b"".join(c.records.buffer for c in LazyDownConvertRecords(bytes(data), 1, chunk_size=4096, **kwargs))
        if source == "file":
            with open(path, "rb") as f:
                return b"".join(c.records.buffer for c in LazyDownConvertRecords(f, 1, chunk_size=4096, **kwargs))
        with kafkacodec.FileRecords.open(path) as records:
            return b"".join(c.records.buffer for c in LazyDownConvertRecords(records, 1, chunk_size=4096, **kwargs))

    assert convert(good) == down_convert(good, 1).records.buffer.tobytes()
    with pytest.raises(kafkacodec.InvalidCrcError) as error:
        convert(corrupt)
    assert (error.value.position, error.value.offset) == (len(small), 2)
    with pytest.raises(kafkacodec.RecordTooLargeError) as error:
        convert(good, max_entry_size=len(big) - 1)
    assert (error.value.position, error.value.offset) == (len(small), 2)
    assert convert(good, max_entry_size=len(big)) == convert(good)
    # crc_checked: the caller checked every entry when the data arrived; sizes still are
    assert convert(good, crc_checked=True) == convert(good)
    assert len(convert(corrupt, crc_checked=True)) == len(convert(good))
    with pytest.raises(kafkacodec.RecordTooLargeError):
        convert(good, max_entry_size=len(big) - 1, crc_checked=True)
    small_corrupt = bytearray(good)
    small_corrupt[100] ^= 1                                  # inside the first, small batch
    assert len(convert(small_corrupt)) == len(convert(good))


def test_a_finished_lazy_conversion_leaves_no_cycle_for_the_collector(tmp_path):
    """LazyDownConvertRecords and its send state referenced each other; the collector clearing
    that cycle, with a MemoryRecords over a memoryview inside, crashed the process (serve
    --upstream hit it: kafka-python's own collections ran it)."""
    import subprocess
    import sys

    from memory_probe import child_env

    code = """
import gc, socket
from kafkacodec import MemoryRecords, MemoryRecordsBuilder
from kafkacodec.lazy import LazyDownConvertRecords
from kafkacodec import SimpleMemoryPool
builder = MemoryRecordsBuilder(magic=2, compression="lz4")
for i in range(100):
    builder.append(1000 + i, b"k%d" % i, b"v%d" % i * 10)
data = bytes(builder.build())
pool = SimpleMemoryPool(1 << 20, 1 << 20, True)
a, b = socket.socketpair()
gc.collect()
gc.set_debug(gc.DEBUG_SAVEALL)
lazy = LazyDownConvertRecords(MemoryRecords(memoryview(data)[0:len(data)]), 1, 0, pool=pool)
while not lazy.completed:
    lazy.write_to(a); b.recv(1 << 20)
lazy.close(); del lazy; gc.collect()
print("garbage", sorted({type(o).__name__ for o in gc.garbage}))
gc.set_debug(0); gc.garbage.clear()
for _ in range(100):
    lazy = LazyDownConvertRecords(MemoryRecords(memoryview(data)[0:len(data)]), 1, 0, pool=pool)
    while not lazy.completed:
        lazy.write_to(a); b.recv(1 << 20)
    lazy.close(); del lazy; gc.collect()
print("done")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=child_env(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["garbage []", "done"], run.stdout


def test_corrupt_compressed_record_is_located_like_memory_records():
    # A byte flipped (CRC recomputed) in an LZ4 batch after a plain one: a fault inside the
    # decompressed records names its byte there, the batch's records section (after the plain
    # batch and the 61-byte v2 header) and the batch offset, in down_convert as in MemoryRecords.
    plain = v2_batch([(i, 1000 + i, b"k%d" % i, b"v" * 30) for i in range(40)])
    good = v2_batch([(i, 1000 + i, b"k%d" % i, b"value %d " % i * 5) for i in range(50)],
                    base_offset=5, codec=LZ4)
    located = 0
    for at in range(61, len(good)):
        bad = bytearray(good)
        bad[at] ^= 0xFF
        struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
        data = plain + bytes(bad)
        try:
            list(kafkacodec.MemoryRecords(data).records())
            continue                 # the flip changed a key or value only
        except kafkacodec.KafkaCodecError as error:
            read = error
        if "of the decompressed data" not in str(read):
            continue                 # the flip broke the LZ4 frame itself
        located += 1
        with pytest.raises(type(read)) as converted:
            down_convert(data, 1)
        assert (str(converted.value), converted.value.position, converted.value.offset) == (
            str(read), len(plain) + 61, 5)
    assert located > 5


# --- decompression: the converting thread's Decompressor (the walker's policy, _walk.pxd) ---

def test_conversion_beside_a_reader_of_the_same_thread_leaves_both_intact():
    """A reader in the middle of a compressed batch has the thread's decompression chunk
    pinned: converting in the same thread meanwhile (also a batch bigger than the reader's
    own cap) changes neither the reader's records nor the conversion."""
    big = kafkacodec.MemoryRecordsBuilder(compression=GZIP, base_offset=0)
    for i in range(64):
        big.append(1000 + i, b"k%d" % i, b"x" * 1000)
    big = big.build()
    small = compressed_batch(LZ4)
    expected = decoded(down_convert(big, 1).records)
    records = kafkacodec.MemoryRecords(small, max_decompressed_size=512).records()
    first = next(records)
    assert decoded(down_convert(big, 1).records) == expected
    assert [(first.offset, first.value)] + [(r.offset, r.value) for r in records] == [
        (3 + i, b"v%d" % i * 50) for i in range(3)]


def test_a_converter_passed_between_threads_converts_in_each():
    batches = [compressed_batch(codec) for codec in (GZIP, LZ4, SNAPPY)]
    expected = [decoded(down_convert(b, 1).records) for b in batches]
    converter = DownConverter(1)
    got = []

    def convert(batch):
        converter.convert(batch)
        got.append(decoded(bytes(converter.take()[0])))

    for batch in batches:                # one thread at a time, each its own Decompressor
        thread = threading.Thread(target=convert, args=(batch,))
        thread.start()
        thread.join()
    assert got == expected


# --- a wrapper's Size field is an int32 (a test hook lowers the limit: no 2 GiB wrapper) ----

@pytest.fixture
def wrapper_limit():
    import kafkacodec._convert as convert
    old = convert._set_max_wrapper_size(2**31 - 1)
    yield convert._set_max_wrapper_size
    convert._set_max_wrapper_size(old)


@pytest.mark.parametrize("source,to_magic", [(2, 1), (2, 0), (1, 0)])
def test_a_wrapper_its_int32_size_field_cannot_hold_is_refused(source, to_magic, wrapper_limit):
    messages = [(5 + i, 1000 + i, b"k", b"v%d" % i * 40) for i in range(6)]
    if source == 2:
        batch = v2_batch([(i, ts, k, v) for i, (_, ts, k, v) in enumerate(messages)],
                         base_offset=5, codec=GZIP)
    else:
        batch = legacy(1, [(i, ts, k, v) for i, (_, ts, k, v) in enumerate(messages)], GZIP)
        batch = struct.pack(">q", 10) + batch[8:]          # the broker's wrapper offset
    converted = bytes(down_convert(batch, to_magic).records)
    size = struct.unpack_from(">i", converted, 8)[0]        # the one wrapper's Size field
    assert size == len(converted) - 12
    wrapper_limit(size)                                      # exactly at the limit: written
    assert bytes(down_convert(batch, to_magic).records) == converted
    wrapper_limit(size - 1)
    out = kafkacodec.WriteBuffer(4096)
    out.write(b"kept")
    with pytest.raises(kafkacodec.RecordTooLargeError, match="int32") as raised:
        down_convert(batch, to_magic, out=out)
    assert raised.value.offset == (5 if source == 2 else 10)       # the batch: wrapper offset
    assert raised.value.position == 0
    assert bytes(out) == b"kept"                             # the output is left as it was
