"""Every reader of a record set on the same CRC-valid hostile input (issue 15): MemoryRecords
(records() and batch iteration), FileRecords, ArrowDecoder, the ring's records, down_convert
(decoded again) and the mirror's trim_batch give the same records, or raise the same error
class.  The readers and their comparison are fuzz/differential.py's (its campaign runs them on
mutated inputs); these cases pin one rule each, with expected values derived here."""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import pytest

from kafkacodec import CorruptRecordError, KafkaCodecError, MemoryRecords, down_convert
from kafkacodec.crc import crc32c
from kafkacodec.mirror import trim_batch

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
if not (FUZZ / "differential.py").exists():
    pytest.skip("fuzz/ not found beside tests/", allow_module_level=True)
sys.path.insert(0, str(FUZZ))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402
import differential  # noqa: E402
from test_ring_differential import legacy_message, seeds, with_count, wrapper  # noqa: E402

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
LOG_APPEND = 0x08


def java_long(value: int) -> int:
    """`value` as a Java long holds it (two's complement, 64 bits)."""
    return (value + 2**63) % 2**64 - 2**63


def zigzag(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    u &= 2**64 - 1
    out = bytearray()
    while u >= 0x80:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    return bytes(out + bytes([u]))


def v2_batch(base_offset: int, base_timestamp: int, records, last_offset_delta: int,
             max_timestamp: int = -1, attributes: int = 0) -> bytes:
    """A v2 batch with any deltas (records: (offset delta, timestamp delta, key, value)), its
    CRC-32C computed: what a hostile broker can send."""
    body = b""
    for offset_delta, timestamp_delta, key, value in records:
        record = (b"\x00" + zigzag(timestamp_delta) + zigzag(offset_delta)
                  + zigzag(len(key)) + key + zigzag(len(value)) + value + zigzag(0))
        body += zigzag(len(record)) + record
    after_crc = (struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp,
                             max_timestamp, -1, -1, -1, len(records)) + body)
    head = struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(after_crc), -1, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc


def every_reader_agrees(data: bytes) -> None:
    differential.readers_agree(data)
    differential.down_convert_agrees(data, random.Random(0))
    differential.trim_agrees(data)


def records_of(data: bytes):
    return [(r.offset, r.timestamp, int(r.timestamp_type)) for r in MemoryRecords(data).records()]


def trimmed(entry: bytes, fetch_offset: int):
    result = trim_batch(entry, fetch_offset)
    return [(r.offset, r.timestamp, int(r.timestamp_type))
            for r in MemoryRecords(bytes(result.value)).records()]


# -- item A: base + delta wraps as a Java long in every reader ----------------------------------
WRAP_UP = v2_batch(INT64_MAX - 1, INT64_MAX - 1, [
    (0, 0, b"a", b"1"), (1, 1, b"b", b"2"), (2, 2**62, b"c", b"3"),
    (2**31 - 1, 2**63 - 1, b"d", b"4")], last_offset_delta=2**31 - 1)
WRAP_DOWN = v2_batch(INT64_MIN + 5, INT64_MIN + 5, [
    (-10, -10, b"a", b"1"), (-6, -7, b"b", b"2")], last_offset_delta=-6)
LEGACY_WRAP = wrapper(1, INT64_MAX, 5, 0, b"".join(
    legacy_message(1, -(2**62) + i, 5, 0, b"k", b"v%d" % i) for i in range(3)))


def test_offsets_and_timestamps_wrap_past_int64_max_as_java_longs():
    expected = [(java_long(INT64_MAX - 1 + d), java_long(INT64_MAX - 1 + t), 0)
                for d, t in ((0, 0), (1, 1), (2, 2**62), (2**31 - 1, 2**63 - 1))]
    assert expected[2][0] == INT64_MIN and expected[3][1] == -3        # they do wrap
    assert records_of(WRAP_UP) == expected
    batch = next(iter(MemoryRecords(WRAP_UP).batches()))
    assert batch.last_offset == java_long(INT64_MAX - 1 + 2**31 - 1)
    every_reader_agrees(WRAP_UP)
    # down-conversion from offset 0 drops the records whose offsets wrapped negative
    assert [r[0] for r in differential.conversion_of(WRAP_UP, 1)[0]] == [INT64_MAX - 1, INT64_MAX]
    # its last offset (lastOffset(), wrapped) is below a fetch at 2^63-1: a fetch skips it
    assert trim_batch(WRAP_UP, INT64_MAX) is None


def test_offsets_and_timestamps_wrap_below_int64_min_as_java_longs():
    expected = [(INT64_MAX - 4, INT64_MAX - 4, 0), (INT64_MAX, INT64_MAX - 1, 0)]
    assert records_of(WRAP_DOWN) == expected
    batch = next(iter(MemoryRecords(WRAP_DOWN).batches()))
    assert (batch.last_offset, batch.next_offset) == (INT64_MAX, INT64_MIN)   # Java: + 1 wraps
    every_reader_agrees(WRAP_DOWN)
    assert differential.conversion_of(WRAP_DOWN, 1) == (
        [(o, b"ab"[i:i + 1], b"12"[i:i + 1], t, 0) for i, (o, t, _) in enumerate(expected)], None)
    assert trimmed(WRAP_DOWN, INT64_MAX) == [expected[1]]


def test_a_trimmed_batch_refuses_kept_offsets_no_int32_delta_reaches():
    # base 2^63 - 5 below the fetch offset 2^63 - 5 + 5: delta -10 wraps to 2^63 - 5 - 10
    # kept, delta 2^31 - 1 kept too: 2^31 + 9 apart (before: the int32 difference overflowed,
    # undefined behaviour, and the trimmed batch read other offsets)
    batch = v2_batch(INT64_MIN + 5, 0, [(-10, 0, b"a", b"0"), (2**31 - 1, 0, b"b", b"1")],
                     last_offset_delta=2**31 - 1)
    assert [o for o, _, _ in records_of(batch)] == [INT64_MAX - 4, INT64_MIN + 5 + 2**31 - 1]
    with pytest.raises(CorruptRecordError, match="offset delta"):
        trim_batch(batch, INT64_MIN + 10)
    differential.trim_agrees(batch)


def test_legacy_inner_offsets_wrap_as_java_longs():
    base = java_long(INT64_MAX - (-(2**62) + 2))           # the wrapper offset is the last one
    expected = [(java_long(base - 2**62 + i), 5, 0) for i in range(3)]
    assert expected == [(INT64_MAX - 2, 5, 0), (INT64_MAX - 1, 5, 0), (INT64_MAX, 5, 0)]
    assert records_of(LEGACY_WRAP) == expected
    every_reader_agrees(LEGACY_WRAP)
    assert [r[0] for r in differential.conversion_of(LEGACY_WRAP, 0)[0]] == [o for o, _, _ in expected]
    assert trimmed(LEGACY_WRAP, INT64_MAX - 1) == expected[1:]


# -- item B: the rules the readers had drifted on ------------------------------------------------
def magic0_in_log_append_wrapper(timestamp: int) -> bytes:
    inner = b"".join(legacy_message(0, i, -1, 0, b"k", b"v%d" % i) for i in range(3))
    return wrapper(1, 2, timestamp, LOG_APPEND, inner)


def inner_magic_2() -> bytes:
    message = bytearray(legacy_message(1, 0, 5, 0, None, b"x"))
    message[16] = 2
    return wrapper(1, 1, 5, 0, bytes(message) + legacy_message(1, 1, 5, 0, None, b"y"))


def nested_compression() -> bytes:
    inner = wrapper(1, 0, 10, 0, legacy_message(1, 0, 10, 0, b"k", b"deep"))
    return wrapper(1, 1, 10, 0, inner + legacy_message(1, 1, 10, 0, None, b"y"))


def negative_count(codec: str) -> bytes:
    from test_ring_differential import v2_batch as built
    return with_count(built(3, codec), -1)


CASES = {
    # AbstractLegacyRecordBatch.DeepRecordsIterator: InvalidRecordException for both
    "a compressed wrapper with a null value": wrapper(1, 3, 5, 0, b"", value=None),
    "a compressed wrapper without inner messages": wrapper(1, 3, 5, 0, b""),
    # DefaultRecordBatch's record iterator: a negative count is refused before any record
    "a negative RecordsCount, uncompressed": negative_count("none"),
    "a negative RecordsCount, gzip": negative_count("gzip"),
    "an inner message of magic 2": inner_magic_2(),
    "a compressed message inside a compressed wrapper": nested_compression(),
    # LegacyRecord.timestamp(): magic 0 has none, whatever the wrapper's type and time
    "magic-0 messages in a v1 LogAppendTime wrapper": magic0_in_log_append_wrapper(55555),
    "magic-0 messages in a v1 LogAppendTime wrapper of time -5": magic0_in_log_append_wrapper(-5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_reader_follows_kafkas_rule(name):
    data = _harness.fix_crcs(CASES[name])
    every_reader_agrees(data)
    error = differential.memory_records(data)[1]
    # down_convert reads (and must refuse) what it converts: entries above the target magic
    for to_magic in (m for m in (0, 1) if data[16] > m and error is not None):
        with pytest.raises(KafkaCodecError) as raised:
            down_convert(data, to_magic)
        assert type(raised.value) is error, name


@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("magic-0")])
def test_the_hostile_cases_are_corrupt(name):
    with pytest.raises(CorruptRecordError):
        records_of(_harness.fix_crcs(CASES[name]))


def test_a_negative_records_count_is_refused_before_decompressing_in_every_reader():
    # a gzip section of garbage: a reader that decompressed first would fail inside the stream
    from test_ring_differential import v2_batch as built
    batch = bytearray(with_count(built(3, "gzip"), -1))
    batch[61:] = (b"\x1f\x8b not gzip at all" + bytes(len(batch)))[:len(batch) - 61]
    data = _harness.fix_crcs(bytes(batch))
    frame = _harness.fetch_frame(data)
    ring = differential.api("kafkacodec.ResponseRingBuffer")(len(frame) + 64)
    ring.feed(frame)
    readers = {
        "MemoryRecords": lambda: list(MemoryRecords(data).records()),
        "ArrowDecoder": lambda: differential.api("kafkacodec._arrow.ArrowDecoder")("t", 0).decode(data, 0),
        "ring": lambda: list(ring.next_response().records(4)),
        "down_convert": lambda: down_convert(data, 1),
    }
    for name, read in readers.items():
        with pytest.raises(CorruptRecordError) as raised:
            read()
        at = frame.find(data) - 4 if name == "ring" else 0   # the ring: the response's byte
        assert raised.value.position == at + 57, (name, raised.value)   # the RecordsCount field
    ring.close()


@pytest.mark.parametrize("timestamp", [55555, -5])
def test_magic0_messages_in_a_log_append_wrapper_have_no_timestamp(timestamp):
    data = magic0_in_log_append_wrapper(timestamp)
    assert records_of(data) == [(0, -1, -1), (1, -1, -1), (2, -1, -1)]
    converted = differential.conversion_of(data, 0)
    assert converted == ([(i, b"k", b"v%d" % i, -1, -1) for i in range(3)], None)


@pytest.mark.parametrize("seed", range(4))
def test_every_reader_on_hostile_crc_valid_input(seed):
    # The campaign in small: mutated then re-checksummed record sets, among them batches whose
    # offsets and timestamps overflow int64 (the sanitizer run checks the walk stays defined).
    rng = random.Random(100 + seed)
    bases = seeds() + [WRAP_UP, WRAP_DOWN, LEGACY_WRAP]
    for _ in range(40):
        data = _harness.hostile(rng.choice(bases), rng)
        differential.readers_agree(data)
        differential.down_convert_agrees(data, rng)


@pytest.mark.parametrize("seed", range(3))
def test_the_mirror_trim_on_hostile_crc_valid_input(seed):
    rng = random.Random(seed)
    bases = seeds() + [WRAP_UP, WRAP_DOWN, LEGACY_WRAP]
    for _ in range(60):
        differential.trim_agrees(_harness.hostile(rng.choice(bases), rng))


@pytest.mark.parametrize("seed", range(3))
def test_counts_from_batch_headers_on_hostile_crc_valid_input(seed):
    """logdir.count_split against read_split's rows of the same segment (fuzz/differential.py)."""
    rng = random.Random(200 + seed)
    bases = seeds() + [WRAP_UP, WRAP_DOWN, LEGACY_WRAP]
    for _ in range(30):
        differential.count_split(_harness.hostile(rng.choice(bases), rng))
