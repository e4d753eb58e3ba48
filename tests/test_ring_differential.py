"""The ring's records against MemoryRecords on the same CRC-valid hostile bytes: the same
records (control records aside: the ring checks them but does not return them, as Kafka's
consumer), or both raise a KafkaCodecError of the same class.  Payloads are mutated (entry
fields, raw bytes, the decompressed inner set of a wrapper or batch) and every CRC is then
recomputed, so the readers' record rules are what is compared, not the checksum."""

import gzip
import os
import random
import struct
import sys
import zlib

import pytest

from kafkacodec import KafkaCodecError, MemoryRecords, MemoryRecordsBuilder, ResponseRingBuffer
from kafkacodec.crc import crc32c

sys.path.insert(0, os.path.dirname(__file__))
from fetch_fixtures import build_fetch_response  # noqa: E402

GZIP, LOG_APPEND = 1, 0x08
INT64_MAX = 2**63 - 1


# -- building blocks -----------------------------------------------------------------------------
def legacy_message(magic, offset, timestamp, attributes, key, value):
    """[offset][size][crc][magic][attributes][timestamp (v1)][key][value] with its CRC-32."""
    body = bytes([magic, attributes & 0xFF])
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        body += struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob
    crc = zlib.crc32(body)
    return struct.pack(">qi", offset, 4 + len(body)) + struct.pack(">I", crc) + body


def wrapper(magic, offset, timestamp, attributes, inner: bytes, value=b"compress"):
    """A gzip wrapper message around `inner` (value=None: a null value)."""
    payload = None if value is None else gzip.compress(inner)
    return legacy_message(magic, offset, timestamp, attributes | GZIP, None, payload)


def v2_batch(n, compression="none", base=0, timestamp_type=0, control=False, pid=-1):
    if control:
        return MemoryRecordsBuilder.build_end_txn_marker(True, 5, 0, 3, base_offset=base)
    builder = MemoryRecordsBuilder(compression=compression, base_offset=base,
                                   timestamp_type=timestamp_type,
                                   log_append_time=7777 if timestamp_type == 1 else None,
                                   producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                   base_sequence=0 if pid >= 0 else -1)
    for i in range(n):
        builder.append(1000 + i, b"k%d" % i, b"v%d" % i * (i + 1),
                       [("h", b"x"), ("\u00e9", None)] if i % 2 else [])
    return builder.build()


def fix_crcs(data: bytes) -> bytes:
    """Recompute the checksum of every complete entry (v2: CRC-32C of [21, end); v0/v1:
    CRC-32 of [16, end)), as a hostile broker that knows the format would."""
    b = bytearray(data)
    pos = 0
    while len(b) - pos >= 17:
        size = struct.unpack_from(">i", b, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(b):
            break
        entry = memoryview(b)[pos:pos + 12 + size]
        magic = entry[16]
        if magic == 2 and size >= 49:
            struct.pack_into(">I", b, pos + 17, crc32c(bytes(entry[21:])))
        elif magic in (0, 1):
            struct.pack_into(">I", b, pos + 12, zlib.crc32(bytes(entry[16:])))
        del entry
        pos += 12 + size
    return bytes(b)


def entries(data: bytes):
    """(start, end) of each complete entry."""
    out, pos = [], 0
    while len(data) - pos >= 12:
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(data):
            break
        out.append((pos, pos + 12 + size))
        pos += 12 + size
    return out


# -- the two readers -----------------------------------------------------------------------------
def via_memory_records(data):
    out = []
    try:
        for rec in MemoryRecords(data).records():
            if not rec.is_control:
                out.append((rec.offset, rec.timestamp, rec.timestamp_type, rec.key,
                            rec.value, rec.headers))
    except KafkaCodecError as exc:
        return out, type(exc)
    return out, None


def via_ring(data):
    frame = build_fetch_response(12, 1, [("t", [(0, data)])])
    ring = ResponseRingBuffer(len(frame) + 8)
    ring.feed(frame)
    out = []
    try:
        for rec in ring.next_response().records(12):
            out.append((rec.offset, rec.timestamp, rec.timestamp_type, rec.key, rec.value,
                        rec.headers))
    except KafkaCodecError as exc:
        return out, type(exc)
    return out, None


def assert_same(data):
    expected, ours = via_memory_records(data), via_ring(data)
    assert ours == expected, data.hex()


# -- the rules of issue #14 item 19, one at a time -------------------------------------------------
def magic0_in_log_append_wrapper():
    inner = b"".join(legacy_message(0, i, -1, 0, b"k", b"v%d" % i) for i in range(3))
    return wrapper(1, 2, 55555, LOG_APPEND, inner)


def nested_compression():
    innermost = legacy_message(1, 0, 10, 0, b"k", b"deep")
    inner = wrapper(1, 0, 10, 0, innermost)
    return wrapper(1, 0, 10, 0, inner)


CASES = {
    "magic-0 messages in a v1 LogAppendTime wrapper get -1": magic0_in_log_append_wrapper(),
    "magic-1 messages in a v1 LogAppendTime wrapper get its time": wrapper(
        1, 4, 424242, LOG_APPEND,
        b"".join(legacy_message(1, i, 9 + i, 0, None, b"x") for i in range(5))),
    "a compressed message in a compressed wrapper": nested_compression(),
    "a wrapper with a null value": wrapper(1, 0, 5, 0, b"", value=None),
    "a wrapper without inner messages": wrapper(1, 0, 5, 0, b""),
    "an inner message of magic 2": wrapper(1, 0, 5, 0, legacy_message(1, 0, 5, 0, None, b"x")
                                           .replace(b"\x01\x00", b"\x02\x00", 1)),
    "a v1 wrapper offset below its last inner offset": wrapper(
        1, 1, 5, 0, b"".join(legacy_message(1, i, 5, 0, None, b"x") for i in range(4))),
    "v0 wrapper inner offsets are absolute": wrapper(
        0, 9, -1, 0, b"".join(legacy_message(0, 100 + i, -1, 0, None, b"x") for i in range(3))),
    "a negative RecordsCount on a compressed batch": v2_batch(3, "gzip"),   # mutated below
    "RecordsCount 0 on a compressed batch of garbage": v2_batch(3, "gzip"),
    "offsets that wrap past 2**63 - 1": struct.pack(">q", INT64_MAX - 1) + v2_batch(4)[8:],
    "legacy inner offsets that wrap": wrapper(
        1, INT64_MAX, 5, 0, b"".join(legacy_message(1, -(2**62) + i, 5, 0, None, b"x") for i in range(3))),
    "a control batch among data": v2_batch(2) + v2_batch(0, control=True, base=2) + v2_batch(2, base=3),
    "a header key that is not UTF-8": v2_batch(2).replace(b"\x02\xc3\xa9", b"\x02\xff\xfe"),
    "codec 6 on a v2 batch": v2_batch(2, "gzip"),
    "zstd in a v1 wrapper": legacy_message(1, 0, 5, 4, None, b"junk"),
}


def with_count(batch, count):
    b = bytearray(batch)
    struct.pack_into(">i", b, 57, count)
    return bytes(b)


def prepared(name, data):
    if name.startswith("a negative RecordsCount"):
        data = with_count(data, -1)
    elif name.startswith("RecordsCount 0"):
        data = with_count(data[:61] + b"\x1f\x8b garbage" + data[70:], 0)
    elif name.startswith("codec 6"):
        data = data[:22] + bytes([(data[22] & 0xF8) | 6]) + data[23:]
    return fix_crcs(data)


@pytest.mark.parametrize("name", list(CASES))
def test_the_ring_follows_memory_records_rule(name):
    assert_same(prepared(name, CASES[name]))


def test_magic0_inside_a_log_append_wrapper_reads_as_kafka_reads_it():
    records, error = via_ring(fix_crcs(magic0_in_log_append_wrapper()))
    assert error is None
    assert [(o, t, tt) for o, t, tt, *_ in records] == [(0, -1, -1), (1, -1, -1), (2, -1, -1)]


def test_a_compressed_message_inside_a_compressed_wrapper_is_an_error_in_the_ring_too():
    records, error = via_ring(fix_crcs(nested_compression()))
    assert records == [] and error is not None and issubclass(error, KafkaCodecError)


# -- the campaign --------------------------------------------------------------------------------
def seeds():
    inner_v1 = b"".join(legacy_message(1, i, 100 + i, 0, b"k%d" % i, b"v" * i) for i in range(4))
    inner_v0 = b"".join(legacy_message(0, i, -1, 0, None, b"w%d" % i) for i in range(3))
    return [
        v2_batch(3) + v2_batch(2, "gzip", base=3) + v2_batch(2, "zstd", base=5, timestamp_type=1),
        v2_batch(4, "lz4") + v2_batch(0, control=True, base=4) + v2_batch(1, "snappy", base=5),
        wrapper(1, 3, 999, 0, inner_v1) + wrapper(1, 7, 999, LOG_APPEND, inner_v1),
        wrapper(0, 2, -1, 0, inner_v0) + legacy_message(0, 3, -1, 0, b"a", b"b"),
        wrapper(1, 2, 5, LOG_APPEND, inner_v0) + legacy_message(1, 3, 7, LOG_APPEND, None, b"c"),
        v2_batch(2, pid=9) + wrapper(1, 10, 1, 0, inner_v1),
    ]


def mutate(rng, data: bytes) -> bytes:
    b = bytearray(data)
    spans = entries(data)
    if not spans:
        return data
    start, end = rng.choice(spans)
    magic = b[start + 16]
    kind = rng.randrange(6)
    if kind == 0:                                   # random bytes anywhere in the entry
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(start, end)] = rng.randrange(256)
    elif kind == 1:                                 # a header field
        if magic == 2:
            field, fmt = rng.choice([(0, ">q"), (23, ">i"), (27, ">q"), (35, ">q"), (57, ">i"),
                                     (21, ">h"), (16, ">b")])
        else:
            field, fmt = rng.choice([(0, ">q"), (16, ">b"), (17, ">b"), (18, ">q")])
        value = rng.choice([-1, 0, 1, 2, 3, 7, 0x7F, -(2**31), 2**31 - 1, INT64_MAX, -(2**63)])
        if start + field + struct.calcsize(fmt) <= end:
            try:
                struct.pack_into(fmt, b, start + field, value)
            except struct.error:                    # out of the field's range
                struct.pack_into(fmt, b, start + field, value & 0x7F)
    elif kind == 2 and magic in (0, 1) and b[start + 17] & 7 == GZIP:   # the inner set
        key_at = start + (26 if magic == 1 else 18)
        klen = struct.unpack_from(">i", b, key_at)[0] if key_at + 4 <= end else end
        value_at = key_at + 4 + max(klen, 0)
        vlen = struct.unpack_from(">i", b, value_at)[0] if value_at + 4 <= end else -1
        if 0 < vlen <= end - value_at - 4:
            try:
                inner = bytearray(gzip.decompress(bytes(b[value_at + 4:value_at + 4 + vlen])))
            except (OSError, EOFError, zlib.error):
                return bytes(b)
            if inner:
                for _ in range(rng.randint(1, 3)):
                    i = rng.randrange(len(inner))
                    inner[i] = rng.choice([0, 1, 2, 3, 0x80, 0xFF, rng.randrange(256)])
                message = wrapper(magic, struct.unpack_from(">q", b, start)[0],
                                  struct.unpack_from(">q", b, start + 18)[0] if magic == 1 else -1,
                                  b[start + 17] & ~7, bytes(inner))
                b[start:end] = message
    elif kind == 3 and magic == 2 and end - start > 61 and b[start + 22] & 7 == GZIP:
        try:
            records = bytearray(gzip.decompress(bytes(b[start + 61:end])))
        except (OSError, EOFError, zlib.error):
            return bytes(b)
        if records:
            for _ in range(rng.randint(1, 3)):
                records[rng.randrange(len(records))] = rng.randrange(256)
            body = bytes(b[start:start + 61]) + gzip.compress(bytes(records))
            body = body[:8] + struct.pack(">i", len(body) - 12) + body[12:]
            b[start:end] = body
    elif kind == 4:                                 # cut or extend the entry's size
        size = struct.unpack_from(">i", b, start + 8)[0]
        struct.pack_into(">i", b, start + 8, size + rng.choice([-5, -1, 1, 3]))
    else:                                           # flip a bit of the attributes
        at = start + (22 if magic == 2 else 17)
        b[at] ^= 1 << rng.randrange(8)
    return bytes(b)


@pytest.mark.parametrize("seed", range(8))
def test_hostile_crc_valid_payloads_read_the_same_through_both(seed):
    rng = random.Random(seed)
    bases = seeds()
    for _ in range(150):
        data = rng.choice(bases)
        for _ in range(rng.randint(1, 3)):
            data = mutate(rng, data)
        assert_same(fix_crcs(data))
