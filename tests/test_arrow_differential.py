"""ArrowDecoder against MemoryRecords on the same CRC-valid hostile input (issue 14, item 19).

Real batches of every magic and codec are damaged (header fields, record and inner-message
bytes, inner magics, lengths) and every checksum is recomputed afterwards (inner messages
before recompressing, then each entry as the readers frame it), so the damage reaches the
record parsers.  Both readers must then give the same records (offset, timestamp, timestamp
type, key, value, headers) or both raise a KafkaCodecError of the same class."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkacodec import MemoryRecords, MemoryRecordsBuilder
from kafkacodec.arrow import ArrowDecoder, scan_entries
from kafkacodec.compression import compress, decompress
from kafkacodec.crc import crc32c
from kafkacodec.errors import CorruptRecordError, KafkaCodecError

INT64_MAX = 2**63 - 1


# --- the two readers -------------------------------------------------------------------------

def micros(ms):
    return ms * 1000 if -2**63 <= ms * 1000 < 2**63 else None


def by_memory_records(log):
    try:
        return [(r.offset, micros(r.timestamp), int(r.timestamp_type), r.key, r.value, tuple(r.headers))
                for r in MemoryRecords(log).records()]
    except KafkaCodecError as exc:
        return type(exc)


def by_arrow(log):
    dec = ArrowDecoder("t", 0, keep_control=True)
    rows, pos = [], 0
    try:
        while pos < len(log):
            rb, new = dec.decode(log, pos)
            rb.validate(full=True)
            stamps = rb.column("timestamp").cast(pa.int64()).to_pylist()
            # (Python datetimes end at year 9999: the timestamps are compared as integers)
            rows += [(r["offset"], ts, r["timestampType"], r["key"], r["value"],
                      tuple((h["key"], h["value"]) for h in r["headers"] or ()))
                     for r, ts in zip(rb.drop_columns(["timestamp"]).to_pylist(), stamps)]
            if dec.trailing_bytes or (new == pos and not rb.num_rows):
                break
            pos = new
    except KafkaCodecError as exc:
        return type(exc)
    return rows


def assert_same(log):
    expected = by_memory_records(log)
    assert by_arrow(log) == expected


# --- checksums as the readers frame the entries ----------------------------------------------

def fix_entry_crc(entry: bytearray) -> None:
    magic = struct.unpack_from(">b", entry, 16)[0]
    if magic >= 2:
        struct.pack_into(">I", entry, 17, crc32c(bytes(entry[21:])))
    else:
        struct.pack_into(">I", entry, 12, zlib.crc32(bytes(entry[16:])))


def fix_crcs(log: bytearray) -> None:
    """Recompute the checksum of every entry the in-memory framing rules find (spec §9.1)."""
    pos = 0
    while len(log) - pos >= 17:
        size = struct.unpack_from(">i", log, pos + 8)[0]
        magic = struct.unpack_from(">b", log, pos + 16)[0]
        if (size < 14 or not 0 <= magic <= 2 or len(log) - pos - 12 < size
                or (magic == 2 and size < 49) or (magic == 1 and size < 22)):
            return
        entry = log[pos:pos + 12 + size]
        fix_entry_crc(entry)
        log[pos:pos + 12 + size] = entry
        pos += 12 + size


def fix_inner_crcs(inner: bytearray) -> None:
    """The inner messages of a legacy wrapper, framed as next_inner_entry does (spec §9.3)."""
    pos = 0
    while len(inner) - pos >= 12:
        size = struct.unpack_from(">i", inner, pos + 8)[0]
        if size < 14 or len(inner) - pos - 12 < size:
            return
        struct.pack_into(">I", inner, pos + 12, zlib.crc32(bytes(inner[pos + 16:pos + 12 + size])))
        pos += 12 + size


def inner_starts(inner: bytes) -> list[int]:
    starts, pos = [], 0
    while len(inner) - pos >= 12:
        size = struct.unpack_from(">i", inner, pos + 8)[0]
        if size < 14 or len(inner) - pos - 12 < size:
            break
        starts.append(pos)
        pos += 12 + size
    return starts


# --- real batches of every magic and codec ---------------------------------------------------

def _entries(data: bytes) -> list[bytes]:
    scan = scan_entries(data)
    return [data[p:p + s] for p, s in zip(scan["position"], scan["size"])]


def _base_entries() -> list[bytes]:
    records = [(1_700_000_000_000, b"k0", b"v0", [("h", b"1"), ("\u00e9", None)]),
               (1_700_000_000_007, None, b"value-1" * 3, []),
               (1_700_000_000_003, b"k2", None, [("x", b"")]),
               (1_700_000_000_009, b"", b"v3", [])]
    out = []
    for magic, codecs in ((0, range(4)), (1, range(4)), (2, range(5))):
        for codec in codecs:
            for ts_type in ((0, 1) if magic else (-1,)):
                builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=100,
                                               timestamp_type=ts_type,
                                               log_append_time=1_700_000_000_500 if ts_type == 1 else None)
                for ts, key, value, headers in records:
                    builder.append(ts, key, value, headers if magic == 2 else ())
                out += _entries(builder.build())
    txn = MemoryRecordsBuilder(compression="lz4", base_offset=200, producer_id=7, producer_epoch=1,
                               base_sequence=0, is_transactional=True)
    txn.append(1, b"t", b"txn")
    out.append(txn.build())
    out.append(MemoryRecordsBuilder.build_end_txn_marker(False, 7, 1, 5, base_offset=201, timestamp=2))
    return out


BASES = _base_entries()


def codec_of(entry: bytes) -> int:
    magic = entry[16]
    return (struct.unpack_from(">h", entry, 21)[0] if magic == 2 else entry[17]) & 7


def plain_of(entry: bytes) -> tuple[bytes, int]:
    """The bytes the record parser reads: a v2 records section or a wrapper's inner message set
    (decompressed), or a legacy message's body after its attributes; and where it starts."""
    magic, codec = entry[16], codec_of(entry)
    if magic == 2:
        return (decompress(codec, 2, entry[61:]) if codec else entry[61:]), 61
    if codec:
        value_at = 18 + (8 if magic == 1 else 0) + 8          # after a null key (-1) and the value length
        return decompress(codec, magic, entry[value_at:]), value_at
    return entry[18:], 18


def rebuilt(entry: bytes, plain: bytes) -> bytearray:
    """`entry` with its parsed bytes replaced (recompressed when it is compressed, inner CRCs
    first); sizes follow, checksums are fixed by the caller."""
    magic, codec = entry[16], codec_of(entry)
    _, start = plain_of(entry)
    if codec and magic < 2:
        inner = bytearray(plain)
        fix_inner_crcs(inner)
        body = compress(codec, magic, bytes(inner))
        out = bytearray(entry[:start - 4]) + struct.pack(">i", len(body)) + body
    else:
        out = bytearray(entry[:start]) + (compress(codec, 2, plain) if codec else plain)
    struct.pack_into(">i", out, 8, len(out) - 12)
    return out


# --- damage ----------------------------------------------------------------------------------

def interesting(width: int):
    low, high = -2 ** (8 * width - 1), 2 ** (8 * width - 1) - 1
    return st.one_of(st.sampled_from([low, low + 1, -2, -1, 0, 1, 2, 3, 7, 61, high - 1, high]),
                     st.integers(low, high))


V2_FIELDS = [(0, 8), (8, 4), (12, 4), (16, 1), (21, 2), (23, 4), (27, 8), (35, 8), (43, 8),
             (51, 2), (53, 4), (57, 4)]                       # offset and width of each field
LEGACY_FIELDS = [(0, 8), (8, 4), (16, 1), (17, 1), (18, 8)]
WIDTH_FORMAT = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}


def zigzag_varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@st.composite
def damaged_plain(draw, plain: bytes, magic: int, codec: int) -> bytes:
    data = bytearray(plain)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["byte", "varint", "int", "insert", "delete", "inner_magic"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "varint":
            value = draw(st.one_of(interesting(4), interesting(8)))
            data[at:at + draw(st.integers(0, 3))] = zigzag_varint(value)
        elif kind == "int":
            width = draw(st.sampled_from([1, 4, 8]))
            data[at:at + width] = struct.pack(WIDTH_FORMAT[width], draw(interesting(width)))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 8))]
        elif kind == "inner_magic" and codec and magic < 2:
            starts = inner_starts(bytes(data))
            if starts:
                data[draw(st.sampled_from(starts)) + 16] = draw(st.sampled_from([0, 1, 2, 3, 255]))
    return bytes(data)


@st.composite
def hostile_logs(draw) -> bytes:
    entries = [bytearray(e) for e in draw(st.lists(st.sampled_from(BASES), min_size=1, max_size=3))]
    for i, entry in enumerate(entries):
        if draw(st.booleans()):                    # damage what the record parser reads
            magic, codec = entry[16], codec_of(entry)
            plain, _ = plain_of(bytes(entry))
            entries[i] = rebuilt(bytes(entry), draw(damaged_plain(plain, magic, codec)))
    starts, log = [], bytearray()
    for entry in entries:
        starts.append(len(log))
        log += entry
    for _ in range(draw(st.integers(0, 2))):           # damage a header field
        i = draw(st.integers(0, len(entries) - 1))
        at, width = draw(st.sampled_from(V2_FIELDS if entries[i][16] == 2 else LEGACY_FIELDS))
        if starts[i] + at + width <= len(log):
            struct.pack_into(WIDTH_FORMAT[width], log, starts[i] + at, draw(interesting(width)))
    del log[len(log) - draw(st.integers(0, 3)):]     # sometimes a partial tail
    fix_crcs(log)
    return bytes(log)


def test_every_base_entry_reads_alike():
    assert {(e[16], codec_of(e)) for e in BASES} == {(m, c) for m in (0, 1) for c in range(4)} | {
        (2, c) for c in range(5)}
    log = b"".join(BASES)
    assert len(by_memory_records(log)) > 80
    assert_same(log)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_logs())
def test_hostile_input_reads_alike(log):
    assert_same(log)


# --- the cases the property found, pinned ------------------------------------------------------

def legacy_wrapper(inner_magic: int) -> bytes:
    """A v1 LogAppendTime gzip wrapper around three inner messages of magic inner_magic
    (the builder's own magic-0/1 message set, or magic 1 messages relabelled 2)."""
    builder = MemoryRecordsBuilder(magic=1, compression="gzip", timestamp_type=1,
                                   log_append_time=1_700_000_000_500)
    inner = MemoryRecordsBuilder(magic=min(inner_magic, 1))
    for i in range(3):
        builder.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
        inner.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    plain = bytearray(inner.build())
    for start in inner_starts(bytes(plain)):
        plain[start + 16] = inner_magic
    out = rebuilt(builder.build(), bytes(plain))
    fix_entry_crc(out)
    return bytes(out)


def test_magic_0_inside_a_log_append_time_wrapper_has_no_timestamp():
    log = legacy_wrapper(inner_magic=0)
    records = list(MemoryRecords(log).records())
    assert [(r.timestamp, int(r.timestamp_type)) for r in records] == [(-1, -1)] * 3
    assert_same(log)


def test_inner_magic_2_is_corrupt():
    log = legacy_wrapper(inner_magic=2)
    assert by_memory_records(log) is CorruptRecordError
    assert_same(log)


def test_unknown_codec_with_no_records_is_not_examined():
    batch = bytearray(MemoryRecordsBuilder.build_empty_batch(0, 5, 1, 0, 0))
    struct.pack_into(">h", batch, 21, 5)                   # codec id 5, RecordsCount 0
    fix_entry_crc(batch)
    assert by_memory_records(bytes(batch)) == []
    assert_same(bytes(batch))


def test_offsets_wrap_as_java_longs():
    builder = MemoryRecordsBuilder(compression="lz4", base_offset=INT64_MAX - 1)
    for i in range(2):
        builder.append(1, None, b"%d" % i)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, INT64_MAX)          # base + delta 1 wraps to -2^63
    assert [r.offset for r in MemoryRecords(bytes(batch)).records()] == [INT64_MAX, -2**63]
    assert_same(bytes(batch))


@pytest.mark.parametrize("key,value,corrupt", [
    (b"ab", b"", True),                                       # shorter than version + type
    (None, b"", True),
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x05", True),    # negative version
    (b"\x00\x00\x00\x01", b"\x00", True),                   # COMMIT without a coordinator epoch
    (b"\x00\x00\x00\x00", None, True),                       # ABORT with a null value
    (b"\x00\x00\x00\x05", None, False),                      # a type this version does not know
])
def test_control_records_are_checked_as_memory_records_does(key, value, corrupt):
    builder = MemoryRecordsBuilder()
    builder.append(1, key, value)
    batch = bytearray(builder.build())
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 0x20)   # control
    fix_entry_crc(batch)
    assert (by_memory_records(bytes(batch)) is CorruptRecordError) == corrupt
    assert_same(bytes(batch))


@pytest.mark.parametrize("bad", [None, 0, 1, 2])
def test_every_record_of_a_control_batch_is_checked(bad):
    # ArrowDecoder scans a data batch's records the short way except the last; a control
    # batch's every record goes through the walker's control checks (spec section 7), also
    # the ones before its last.
    abort = (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05")
    builder = MemoryRecordsBuilder()
    for i in range(3):
        key, value = (b"ab", b"") if i == bad else abort
        builder.append(1, key, value)
    batch = bytearray(builder.build())
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 0x20)   # control
    fix_entry_crc(batch)
    assert (by_memory_records(bytes(batch)) is CorruptRecordError) == (bad is not None)
    assert_same(bytes(batch))


# --- column pruning: ArrowDecoder(columns=...) against the full decode --------------------------

def decode_all(log, columns=None, max_rows=65536, views=False, chunk_bits=None):
    """Every batch of one decoder (keeping control records) as one table, or the error raised
    (class, message, position, offset)."""
    dec = ArrowDecoder("t", 0, keep_control=True, columns=columns, max_rows=max_rows, views=views)
    if chunk_bits is not None:
        dec._set_view_chunk_bits(chunk_bits)
    batches, pos = [], 0
    try:
        while pos < len(log):
            rb, new = dec.decode(log, pos)
            rb.validate(full=True)
            batches.append(rb)
            if dec.trailing_bytes or (new == pos and not rb.num_rows):
                break
            pos = new
    except KafkaCodecError as exc:
        return type(exc), str(exc), exc.position, exc.offset
    return pa.Table.from_batches(batches, schema=dec.schema)


COLUMN_SUBSETS = [["offset"], ["timestamp", "offset"], ["key"], ["value", "partition"],
                  ["headers"], ["offset", "headers", "topic"], ["magic", "producerId", "isControl"]]


def assert_pruned_like_full(log, columns, max_rows=65536):
    full = decode_all(log, max_rows=max_rows)
    pruned = decode_all(log, columns, max_rows)
    if isinstance(full, pa.Table):
        assert isinstance(pruned, pa.Table), pruned
        assert pruned.schema.names == columns
        assert pruned.equals(full.select(columns))
    else:
        assert pruned == full


@pytest.mark.parametrize("columns", COLUMN_SUBSETS)
def test_pruned_columns_equal_the_full_decode_on_every_magic_and_codec(columns):
    log = b"".join(BASES)
    assert_pruned_like_full(log, columns)
    assert_pruned_like_full(log, columns, max_rows=3)       # resuming inside entries too


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_logs(), st.sampled_from(COLUMN_SUBSETS), st.sampled_from([2, 65536]))
def test_hostile_input_reads_alike_with_pruned_columns(log, columns, max_rows):
    assert_pruned_like_full(log, columns, max_rows)


# --- views=True: binary_view keys and values against the copying decode ------------------------

def as_binary(table):
    """The table with its binary_view columns cast to binary."""
    for i, field in enumerate(table.schema):
        if pa.types.is_binary_view(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.binary()))
    return table


def assert_views_like_copies(log, max_rows=65536, chunk_bits=None, columns=None):
    copies = decode_all(log, columns, max_rows)
    views = decode_all(log, columns, max_rows, views=True, chunk_bits=chunk_bits)
    if isinstance(copies, pa.Table):
        assert isinstance(views, pa.Table), views
        kinds = {f.name: f.type for f in views.schema}
        assert all(kinds[name] == pa.binary_view() for name in ("key", "value") if name in kinds)
        assert as_binary(views).equals(copies)
    else:
        assert views == copies


@pytest.mark.parametrize("chunk_bits", [None, 4, 9])
@pytest.mark.parametrize("max_rows", [65536, 3])
def test_views_equal_copies_on_every_magic_and_codec(max_rows, chunk_bits):
    # (chunk_bits 4 and 9: the input is addressed in 16- and 512-byte chunks, so views use
    # many input buffers, as 2^30-byte ones do past 1 GiB)
    assert_views_like_copies(b"".join(BASES), max_rows, chunk_bits)
    assert_views_like_copies(b"".join(BASES), max_rows, chunk_bits, ["value", "offset"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_logs(), st.sampled_from([2, 65536]), st.sampled_from([None, 5]))
def test_hostile_input_reads_alike_with_views(log, max_rows, chunk_bits):
    assert_views_like_copies(log, max_rows, chunk_bits)
