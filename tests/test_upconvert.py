"""Up-conversion (up_convert, up_convert_log) against Kafka 3.9's own append path.

The oracle is kafka-storage's LogValidator (tests/java/UpConvertOracle.java, Kafka 3.9.1 from
Maven Central) fed the same message set: every accepted set must come out byte for byte as
Kafka writes it, every refused one with Kafka's error code.  Message sets come from
kafka-python's legacy builder (an independent producer), from ours, and hand-made (what old
clients send wrong: inner offsets, LogAppendTime set by a producer, bad checksums)."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import kafkacodec as kc
from kafkacodec import InvalidCrcError, InvalidRecordError, MemoryRecords, MemoryRecordsBuilder
from kafkacodec.errors import CorruptRecordError, KafkaCodecError, UnsupportedVersionError

JAVA_SOURCE = Path(__file__).parent / "java" / "UpConvertOracle.java"
NOW = 1_700_000_000_000
MAX = 2**63 - 1
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
# the JVM without the sanitizer runtime scripts/sanitize.sh preloads into the tests
JAVA_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


class Oracle:
    """One JVM running UpConvertOracle: call() sends a message set, returns Kafka's answer."""

    def __init__(self, classpath: str, classes: Path):
        self.proc = subprocess.Popen(["java", "-cp", f"{classes}:{classpath}", "UpConvertOracle"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=JAVA_ENV)

    def call(self, data: bytes, *, now=NOW, base_offset=0, timestamp_type=0, target=-1,
             compacted=False, before=MAX, after=MAX, repeat=1):
        """("ok", bytes, cpu ns) or ("refused", Kafka error code, text)."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(struct.pack(">qqbbbqqii", now, base_offset, timestamp_type, target,
                                          compacted, before, after, repeat, len(data)) + data)
        self.proc.stdin.flush()
        status, length = struct.unpack(">ii", self.proc.stdout.read(8))
        payload = self.proc.stdout.read(length)
        if status == 0:
            return "ok", payload[8:], struct.unpack(">q", payload[:8])[0]
        return "refused", struct.unpack(">h", payload[:2])[0], payload[2:].decode()

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(30)


def start_oracle(tmp_path_factory) -> Oracle:
    import kafka_broker

    if not (shutil.which("java") and shutil.which("javac")):
        pytest.skip("needs java and javac (Kafka's LogValidator as oracle)")
    try:
        cp = kafka_broker.classpath(kafka_broker.DOWNCONVERSION_VERSION, tools=("java", "javac", "mvn"))
    except kafka_broker.BrokerUnavailable as exc:
        pytest.skip(str(exc))
    classes = tmp_path_factory.mktemp("upconvert-oracle")
    subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(JAVA_SOURCE)], check=True, timeout=300,
                   env=JAVA_ENV)
    return Oracle(cp, classes)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    o = start_oracle(tmp_path_factory)
    yield o
    o.close()


# --- message sets ----------------------------------------------------------------------------

def message(offset: int, magic: int, value: bytes | None, key: bytes | None = None, *,
            timestamp: int = NOW, attributes: int = 0, crc: int | None = None) -> bytes:
    """One v0/v1 message, written by hand from the format (CRC-32 from zlib)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    checksum = zlib.crc32(body) if crc is None else crc
    entry = struct.pack(">I", checksum) + body
    return struct.pack(">qi", offset, len(entry)) + entry


def compress(codec: str, data: bytes, magic: int) -> bytes:
    from kafka.codec import gzip_encode, lz4_encode, snappy_encode
    if codec == "gzip":
        return gzip_encode(data)
    if codec == "snappy":
        return snappy_encode(data, xerial_compatible=True)
    if magic == 0:
        from kafka.codec import lz4_encode_old_kafka
        return lz4_encode_old_kafka(data)
    return lz4_encode(data)


def wrapper(magic: int, codec: str, inner: bytes, *, offset: int, timestamp: int = NOW,
            log_append: bool = False) -> bytes:
    attributes = CODECS[codec] | (0x08 if log_append else 0)
    return message(offset, magic, compress(codec, inner, magic), timestamp=timestamp, attributes=attributes)


def kafka_python_set(magic: int, codec: str, rows) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic, CODECS[codec], 1 << 30)
    for offset, (timestamp, key, value) in enumerate(rows):
        builder.append(offset, timestamp if magic else None, key, value)
    return bytes(builder.build())


def ours_set(magic: int, codec: str, rows) -> bytes:
    builder = MemoryRecordsBuilder(magic=magic, compression=codec)
    for timestamp, key, value in rows:
        builder.append(timestamp if magic else -1, key, value)
    return builder.build()


def rows_of(rng: random.Random, n: int):
    def blob():
        r = rng.random()
        return None if r < 0.15 else b"" if r < 0.25 else rng.randbytes(rng.choice((1, 7, 100, 1500)))
    return [(NOW - rng.randrange(0, 10_000), blob(), blob()) for _ in range(n)]


# --- differential against Kafka --------------------------------------------------------------

def ours(data: bytes, *, now=NOW, base_offset=0, timestamp_type=0, target=-1, compacted=False,
         before=MAX, after=MAX):
    try:
        result = kc.up_convert(data, base_offset=base_offset, now=now, timestamp_type=timestamp_type,
                               compression=None if target < 0 else target, compacted=compacted,
                               timestamp_before_max_ms=before, timestamp_after_max_ms=after)
    except InvalidRecordError as exc:
        return "refused", exc.error_code, str(exc)
    except InvalidCrcError as exc:
        return "refused", 2, str(exc)                     # CORRUPT_MESSAGE
    return "ok", bytes(result.records), None


def comparable(out: bytes):
    """A batch's header without its Size and CRC, and its records decoded: what must agree
    when the codec's bytes may differ (Java's gzip and snappy streams buffer differently)."""
    return [(bytes(b.raw[:8]) + bytes(b.raw[12:17]) + bytes(b.raw[21:61]),
             [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b])
            for b in MemoryRecords(out).batches()]


def assert_same(oracle, data: bytes, **kwargs):
    theirs = oracle.call(data, **kwargs)
    mine = ours(data, **kwargs)
    if mine[0] == theirs[0] == "ok" and mine[1] != theirs[1]:
        # byte for byte where the codec writes as Java does (none, lz4, zstd: tested below)
        assert next(MemoryRecords(mine[1]).batches()).compression.name in ("GZIP", "SNAPPY")
        assert comparable(mine[1]) == comparable(theirs[1])
    else:
        assert mine[:2] == theirs[:2], (mine, theirs)
    return mine


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("writer", [kafka_python_set, ours_set])
def test_a_producers_set_comes_out_as_kafka_appends_it(oracle, magic, codec, writer):
    rng = random.Random(f"{magic}{codec}{writer.__name__}")
    data = writer(magic, codec, rows_of(rng, 40))
    for kwargs in ({}, {"base_offset": 12_345}, {"timestamp_type": 1}, {"target": 0},
                   {"target": 1}, {"target": 3}, {"target": 4}):
        status, out, _ = assert_same(oracle, data, **kwargs)
        assert status == "ok"
        batches = list(MemoryRecords(out).batches())
        assert len(batches) == 1 and batches[0].magic == 2
        assert batches[0].base_offset == kwargs.get("base_offset", 0)


def test_uncompressed_messages_one_per_entry_become_one_batch(oracle):
    data = b"".join(message(i * 3, 1, b"v%d" % i, b"k", timestamp=NOW - i) for i in range(50))
    status, out, _ = assert_same(oracle, data, base_offset=7)
    records = list(MemoryRecords(out).records())
    assert [r.offset for r in records] == list(range(7, 57))       # the broker's offsets
    assert [r.timestamp for r in records] == [NOW - i for i in range(50)]


@pytest.mark.parametrize("magic", [0, 1])
def test_inner_offsets_old_clients_got_wrong_are_reassigned(oracle, magic):
    """Some old clients numbered a wrapper's inner messages 5, 9, 9...: Kafka rewrites them."""
    inner = b"".join(message(o, magic, b"v%d" % i) for i, o in enumerate((5, 9, 9, 2)))
    for codec in ("gzip", "snappy", "lz4"):
        data = wrapper(magic, codec, inner, offset=0)
        status, out, _ = assert_same(oracle, data, base_offset=100)
        assert [r.offset for r in MemoryRecords(out).records()] == [100, 101, 102, 103]


def test_log_append_time_topics_stamp_the_batch(oracle):
    rows = [(NOW - 5, b"k", b"v")] * 3
    for magic in (0, 1):
        for codec in ("none", "lz4"):
            status, out, _ = assert_same(oracle, ours_set(magic, codec, rows), timestamp_type=1,
                                         now=NOW + 99)
            batch = next(MemoryRecords(out).batches())
            assert batch.max_timestamp == NOW + 99 and batch.timestamp_type == 1


@pytest.mark.parametrize("case", [
    "empty", "two compressed", "compressed and plain", "two magics", "bad crc", "bad inner crc",
    "compacted no key", "too old", "too new", "append time by producer",
    "append time by producer, create-time topic, no timestamp", "inner compressed",
    "inner magic", "negative timestamp", "negative timestamp compressed",
    "bad crc after bad key", "bad timestamp and bad key"])
def test_what_kafka_refuses_is_refused_with_its_error_code(oracle, case):
    good = message(0, 1, b"v", b"k")
    inner_ok = message(0, 1, b"a", b"k") + message(1, 1, b"b", b"k")
    kwargs: dict = {}
    data = {
        "empty": b"",
        "two compressed": wrapper(1, "gzip", inner_ok, offset=1) * 2,
        "compressed and plain": good + wrapper(1, "gzip", inner_ok, offset=1),
        "two magics": good + message(1, 0, b"v", b"k"),
        "bad crc": good + message(1, 1, b"v", b"k", crc=12345),
        "bad inner crc": wrapper(1, "lz4", inner_ok + message(2, 1, b"c", crc=1), offset=2),
        "compacted no key": good + message(1, 1, b"v"),
        "too old": message(0, 1, b"v", timestamp=NOW - 10_000),
        "too new": message(0, 1, b"v", timestamp=NOW + 10_000),
        "append time by producer": message(0, 1, b"v", attributes=0x08),
        "append time by producer, create-time topic, no timestamp":
            message(0, 1, b"v", attributes=0x08, timestamp=-1),
        "inner compressed": wrapper(1, "gzip", inner_ok + message(2, 1, b"x", attributes=1), offset=2),
        "inner magic": wrapper(1, "gzip", inner_ok + message(2, 0, b"x"), offset=2),
        "negative timestamp": message(0, 1, b"v", timestamp=-5),
        "negative timestamp compressed": wrapper(1, "gzip", message(0, 1, b"v", timestamp=-5), offset=0),
        "bad crc after bad key": wrapper(1, "gzip", message(0, 1, b"v") + message(1, 1, b"v", crc=9), offset=1),
        "bad timestamp and bad key": good + message(1, 1, b"v") + message(2, 1, b"v", b"k", timestamp=1),
    }[case]
    if case.startswith("compacted") or case.startswith("bad crc after") or case.startswith("bad timestamp and"):
        kwargs["compacted"] = True
    if case in ("too old", "too new", "bad timestamp and bad key"):
        kwargs.update(before=1000, after=1000)
    if case == "append time by producer":
        kwargs["timestamp_type"] = 1
    theirs = oracle.call(data, **kwargs)
    assert theirs[0] == "refused", theirs
    mine = ours(data, **kwargs)
    assert mine[:2] == theirs[:2], (mine, theirs)


def test_random_sets_agree_with_kafka(oracle):
    """Random producers' sets and topic settings, accepted or refused: the same answer."""
    rng = random.Random(20261202)
    agreed = refused = 0
    for _ in range(150):
        magic = rng.choice((0, 1))
        codec = rng.choice(list(CODECS))
        rows = rows_of(rng, rng.randrange(1, 30))
        data = rng.choice((kafka_python_set, ours_set))(magic, codec, rows)
        if codec == "none" and rng.random() < 0.3:        # a message of the other magic
            data += message(len(rows), 1 - magic, b"x", b"k")
        kwargs = {"timestamp_type": rng.choice((0, 0, 1)), "compacted": rng.random() < 0.3,
                  "target": rng.choice((-1, -1, 0, 1, 2, 3, 4)), "base_offset": rng.randrange(0, 1 << 40),
                  "before": rng.choice((MAX, 5000)), "after": rng.choice((MAX, 0))}
        status, *_ = assert_same(oracle, data, **kwargs)
        agreed += 1
        refused += status == "refused"
    assert agreed == 150 and 10 < refused < 140     # both kinds were exercised


# --- our own rules ---------------------------------------------------------------------------

def test_a_v2_set_is_not_up_converted():
    data = ours_set(2, "none", [(NOW, b"k", b"v")])
    with pytest.raises(UnsupportedVersionError):
        kc.up_convert(data)


def test_a_partial_tail_is_dropped_as_the_broker_drops_it():
    data = message(0, 1, b"a", b"k") + message(1, 1, b"b", b"k")
    whole = bytes(kc.up_convert(data).records)
    assert bytes(kc.up_convert(data + message(2, 1, b"c")[:-3]).records) == whole


def test_bad_arguments_are_plain_value_errors():
    data = message(0, 1, b"a")
    for kwargs in ({"timestamp_type": -1}, {"base_offset": -1}, {"timestamp_after_max_ms": -2},
                   {"partition_leader_epoch": -2}):
        with pytest.raises(ValueError) as info:
            kc.up_convert(data, **kwargs)
        assert not isinstance(info.value, KafkaCodecError)


def test_log_conversion_keeps_offsets_timestamps_and_codecs():
    """A log of every magic (old segments before a format upgrade, then v2): each record keeps
    its offset, timestamp and timestamp type; wrappers keep their codec; v2 batches are copied."""
    legacy0 = b"".join(message(o, 0, b"v%d" % o, b"k") for o in (0, 1, 4))
    legacy1 = wrapper(1, "lz4", message(0, 1, b"a", timestamp=NOW) + message(1, 1, b"b", timestamp=NOW + 1),
                      offset=6)
    appended = wrapper(1, "gzip", message(0, 1, b"c") + message(1, 1, b"d"), offset=8,
                       timestamp=NOW + 50, log_append=True)
    plain_lat = message(9, 1, b"e", attributes=0x08, timestamp=NOW + 60)
    v2 = MemoryRecordsBuilder(magic=2, base_offset=10)
    v2.append(NOW + 70, b"k", b"f")
    v2_bytes = v2.build()
    log = legacy0 + legacy1 + appended + plain_lat + v2_bytes
    before = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value)
              for r in MemoryRecords(log).records()]
    converted = kc.up_convert_log(log)
    out = bytes(converted.records)
    assert out.endswith(v2_bytes)
    after = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in MemoryRecords(out).records()]
    # magic 0 had no timestamp type; as v2 records they are CreateTime with no timestamp
    assert after == [(o, t, (0 if tt.name == "NO_TIMESTAMP_TYPE" else tt), k, v)
                     for o, t, tt, k, v in before]
    batches = list(MemoryRecords(out).batches())
    assert all(b.magic == 2 for b in batches)
    assert [b.compression.name for b in batches] == ["NONE", "LZ4", "GZIP", "NONE", "NONE"]
    MemoryRecords(out).validate()
    assert converted.stats.records_converted == 8


def test_log_conversion_of_a_v2_log_is_a_view_of_it():
    v2 = MemoryRecordsBuilder(magic=2)
    for i in range(3):
        v2.append(NOW, b"k", b"v%d" % i)
    data = v2.build()
    source = bytearray(data + b"\0\0\0")                  # a partial tail, left out
    converted = kc.up_convert_log(source)
    assert bytes(converted.records) == data
    source[len(data) - 1] ^= 0xFF                          # zero-copy: the source's own bytes
    assert bytes(converted.records)[-1] == data[-1] ^ 0xFF


def test_log_conversion_splits_runs_at_the_batch_size_and_refuses_going_back():
    data = b"".join(message(o, 1, bytes(1000), b"k") for o in range(100))
    out = bytes(kc.up_convert_log(data, max_batch_bytes=10_000).records)
    batches = list(MemoryRecords(out).batches())
    assert 9 <= len(batches) <= 11
    assert [r.offset for r in MemoryRecords(out).records()] == list(range(100))
    with pytest.raises(CorruptRecordError, match="does not follow"):
        kc.up_convert_log(message(5, 1, b"a") + message(5, 1, b"b"))


def test_hostile_sets_raise_our_errors_only():
    """Truncations and flipped bytes of real sets: a KafkaCodecError with a position, never
    another exception or a crash."""
    rng = random.Random(7)
    sources = [kafka_python_set(m, c, rows_of(rng, 8)) for m in (0, 1) for c in CODECS]
    for _ in range(3000):
        data = bytearray(rng.choice(sources))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        for convert in (kc.up_convert, kc.up_convert_log):
            try:
                convert(bytes(data))
            except KafkaCodecError:
                pass


def test_chunked_log_conversion_keeps_every_record_in_bounded_pieces():
    rng = random.Random(3)
    log = b"".join(kafka_python_set(rng.choice((0, 1)), rng.choice(list(CODECS)), rows_of(rng, 20))
                   for _ in range(30))
    # kafka-python numbers each set from 0: renumber by writing them one after another as a log
    offset, parts = 0, []
    for part in MemoryRecords(log).records():
        parts.append(message(offset, 1, part.value, part.key, timestamp=NOW))
        offset += 1
    log = b"".join(parts)
    whole = [(r.offset, r.key, r.value) for r in MemoryRecords(bytes(kc.up_convert_log(log).records)).records()]
    chunks = list(kc.up_convert_log(log, chunk_bytes=4096))
    assert len(chunks) > 5
    assert all(len(bytes(c.records)) < 4096 + 2000 for c in chunks)   # whole entries, about the chunk
    pieces = [(r.offset, r.key, r.value) for c in chunks for r in MemoryRecords(bytes(c.records)).records()]
    assert pieces == whole and len(whole) == offset


def test_cli_converts_an_old_segment_to_v2(tmp_path, capsys):
    from kafkacodec.cli import EXIT_OK, EXIT_USAGE, main

    src = tmp_path / "00000000000000000000.log"
    legacy = (b"".join(message(o, 0, b"v%d" % o, b"k") for o in range(3))
              + wrapper(1, "snappy", message(0, 1, b"a") + message(1, 1, b"b"), offset=4))
    src.write_bytes(legacy)
    out = tmp_path / "out.log"
    assert main(["convert", "--to-magic", "2", "--json", "--no-progress", str(src), str(out)]) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    assert result["records_converted"] == 5 and result["to_magic"] == 2
    got = MemoryRecords(out.read_bytes())
    assert {b.magic for b in got.batches()} == {2}
    assert [(r.offset, r.value) for r in got.records()] == [(r.offset, r.value) for r in MemoryRecords(legacy).records()]
    assert src.read_bytes() == legacy                      # the input is never touched
    assert main(["convert", "--to-magic", "2", "--recompress", "lz4", str(src), str(tmp_path / "x.log")]) == EXIT_USAGE
    assert not (tmp_path / "x.log").exists()
