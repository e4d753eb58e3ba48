"""Kafka's codec containers (spec: compression.md), cross-checked with kafka-python and aiokafka."""

import gzip as gzip_module
import os
import random
import struct
import threading
import zlib
from pathlib import Path

import aiokafka.codec as aio
import cramjam
import deflate
import kafka.codec as kp
import lz4.block
import lz4.frame
import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st

from kafkacodec import (
    Compression,
    CorruptRecordError,
    InvalidCrcError,
    KafkaCodecError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
)
from kafkacodec.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    Decompressor,
    compress,
    decompress,
    xxhash32,
)

CODEC_MAGICS = [(codec, magic) for codec in ("gzip", "snappy", "lz4", "zstd")
                for magic in (0, 1, 2) if codec != "zstd" or magic == 2]
CODECS = ["gzip", "snappy", "lz4", "zstd"]


def sample(size, seed=0, redundancy=0.7):
    """Deterministic data that compresses somewhat (random runs mixed with repeats)."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        if out and rng.random() < redundancy:
            start = rng.randrange(len(out))
            out += out[start:start + rng.randrange(4, 300)]
        else:
            out += rng.randbytes(rng.randrange(1, 200))
    return bytes(out[:size])


def magic_of(codec):
    return 2 if codec == "zstd" else 1


# --- byte-exact containers from the spec -------------------------------------------------

@pytest.mark.parametrize("magic", [0, 1, 2])
def test_snappy_hi_is_byte_exact(magic):
    expected = bytes.fromhex("82534E4150505900 00000001 00000001 00000004 020468 69")
    assert compress("snappy", magic, b"hi") == expected
    assert decompress("snappy", magic, expected) == b"hi"


@pytest.mark.parametrize("magic, hc", [(0, "1A"), (1, "82"), (2, "82")])
def test_lz4_hi_is_byte_exact_with_magic_0_header_checksum(magic, hc):
    expected = bytes.fromhex(f"04224D18 60 40 {hc} 02000080 6869 00000000")
    assert compress("lz4", magic, b"hi") == expected
    assert decompress("lz4", magic, expected) == b"hi"


def test_lz4_magic_0_hc_hashes_the_magic_bytes():
    header = bytes.fromhex("04224D186040")
    assert (xxhash.xxh32_intdigest(header[4:]) >> 8) & 0xFF == 0x82
    assert (xxhash.xxh32_intdigest(header) >> 8) & 0xFF == 0x1A


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_gzip_writes_one_member_with_java_header(magic):
    data = sample(100_000)
    out = compress("gzip", magic, data)
    assert out[:10] == bytes.fromhex("1f8b0800 00000000 00ff")
    crc, isize = struct.unpack("<II", out[-8:])
    assert crc == zlib.crc32(data) and isize == len(data)
    # Exactly one member: raw deflate of the body ends where the trailer starts.
    inflater = zlib.decompressobj(-15)
    assert inflater.decompress(out[10:-8]) == data and inflater.eof and not inflater.unused_data
    assert gzip_module.decompress(out) == data


def test_gzip_levels():
    data = sample(200_000, redundancy=0.9)
    assert compress("gzip", 1, data, level=6) == compress("gzip", 1, data)
    fast, best = compress("gzip", 1, data, level=1), compress("gzip", 1, data, level=9)
    assert fast != best and len(best) <= len(fast)
    for level in (1, 5, 9):
        assert decompress("gzip", 1, compress("gzip", 1, data, level=level)) == data
    for bad in (0, 10, -2):
        with pytest.raises(ValueError, match="gzip level"):
            compress("gzip", 1, data, level=bad)


def test_zstd_frame_has_no_content_size_nor_checksum():
    out = compress("zstd", 2, sample(10_000))
    assert out[:4] == bytes.fromhex("28b52ffd")
    fhd = out[4]
    assert fhd >> 6 == 0 and not fhd & 0x20, "no Frame_Content_Size, not single segment"
    assert not fhd & 0x04, "no content checksum"
    assert not fhd & 0x03, "no dictionary id"
    params = zstandard.get_frame_parameters(out)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN and not params.has_checksum


def test_zstd_levels():
    data = sample(300_000, redundancy=0.95)
    assert compress("zstd", 2, data, level=3) == compress("zstd", 2, data)
    assert compress("zstd", 2, data, level=19) != compress("zstd", 2, data, level=1)
    for level in (-5, 1, 19, 22):
        assert decompress("zstd", 2, compress("zstd", 2, data, level=level)) == data
    with pytest.raises(ValueError, match="zstd level"):
        compress("zstd", 2, data, level=23)


def test_lz4_levels_use_the_fast_compressor_by_default_and_hc_otherwise():
    data = sample(300_000, redundancy=0.8)
    assert compress("lz4", 2, data) == compress("lz4", 2, data, level=9)
    fast = lz4.block.compress(data[:65536], store_size=False)
    high = lz4.block.compress(data[:65536], mode="high_compression", compression=12,
                              store_size=False)
    assert fast != high
    assert compress("lz4", 2, data)[11:11 + len(fast)] == fast
    assert compress("lz4", 2, data, level=12)[11:11 + len(high)] == high
    for level in (1, 12, 17):
        assert decompress("lz4", 2, compress("lz4", 2, data, level=level)) == data
    for bad in (0, 18):
        with pytest.raises(ValueError, match="lz4 level"):
            compress("lz4", 2, data, level=bad)


def lz4_blocks(frame):
    """(raw?, size) of each block of one of our frames (no optional fields)."""
    pos, blocks = 7, []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        if word == 0:
            assert pos + 4 == len(frame)
            return blocks
        blocks.append((bool(word >> 31), word & 0x7FFFFFFF))
        pos += 4 + (word & 0x7FFFFFFF)


def test_lz4_blocks_are_64k_independent_and_raw_when_not_smaller():
    incompressible = os.urandom(65536)
    data = b"a" * 65536 + incompressible + b"b" * 1000
    frame = compress("lz4", 2, data)
    assert frame[4:7] == bytes.fromhex("604082")
    blocks = lz4_blocks(frame)
    assert [raw for raw, _ in blocks] == [False, True, False]
    assert blocks[1][1] == 65536
    assert frame.find(incompressible) > 0
    # Each compressed block decodes on its own (independent blocks).
    assert lz4.block.decompress(frame[11:11 + blocks[0][1]], uncompressed_size=65536) == b"a" * 65536


def test_snappy_blocks_hold_32k_of_input():
    data = sample(100_000)
    out = compress("snappy", 1, data)
    pos, sizes = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        block = out[pos + 4:pos + 4 + n]
        sizes.append(cramjam.snappy.decompress_raw_len(block))
        pos += 4 + n
    assert pos == len(out)
    assert sizes == [32768, 32768, 32768, 100_000 - 3 * 32768]


@pytest.mark.parametrize("codec, magic", CODEC_MAGICS)
def test_empty_input_round_trips(codec, magic):
    out = compress(codec, magic, b"")
    assert decompress(codec, magic, out) == b""
    assert bytes(Decompressor().decompress(codec, magic, out)) == b""
    if codec == "snappy":
        assert out == bytes.fromhex("82534E4150505900 00000001 00000001")
    if codec == "lz4":
        assert len(out) == 11


# --- round trips -------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CODEC_MAGICS),
       st.one_of(st.integers(0, 2000), st.integers(30_000, 70_000), st.integers(130_000, 270_000)),
       st.integers(0, 2**32), st.floats(0, 1))
def test_round_trip_every_codec_and_magic(codec_magic, size, seed, redundancy):
    codec, magic = codec_magic
    data = sample(size, seed, redundancy)
    out = compress(codec, magic, data)
    assert decompress(codec, magic, out) == data
    assert bytes(Decompressor().decompress(codec, magic, out)) == data


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(CODEC_MAGICS), st.binary(max_size=3000))
def test_round_trip_random_bytes(codec_magic, data):
    codec, magic = codec_magic
    assert decompress(codec, magic, compress(codec, magic, data)) == data


def test_codec_given_as_enum_id_or_name():
    data = sample(5000)
    out = compress(Compression.LZ4, 2, data)
    assert compress(3, 2, data) == compress("lz4", 2, data) == compress(" LZ4 ", 2, data) == out
    assert decompress(Compression.LZ4, 2, out) == decompress(3, 2, out) == data


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview,
                                  lambda b: np.frombuffer(b, dtype=np.uint8),
                                  lambda b: memoryview(b"xx" + b + b"yy")[2:-2]])
@pytest.mark.parametrize("codec", CODECS)
def test_any_contiguous_buffer_in(codec, wrap):
    data = sample(70_000)
    out = compress(codec, 2, wrap(data))
    assert decompress(codec, 2, wrap(out)) == data
    assert bytes(Decompressor().decompress(codec, 2, wrap(out))) == data


# --- the Decompressor's buffer ------------------------------------------------------------

def test_decompressor_reuses_its_buffer_once_views_are_gone():
    d = Decompressor()
    first, second = sample(50_000, 1), sample(40_000, 2)
    view = d.decompress("lz4", 2, compress("lz4", 2, first))
    assert view.readonly and bytes(view) == first
    exporter = view.obj
    view.release()
    view = d.decompress("zstd", 2, compress("zstd", 2, second))
    assert view.obj is exporter and bytes(view) == second


def test_decompressor_view_never_changes_while_alive():
    d = Decompressor()
    first, second = sample(50_000, 1), sample(300_000, 2)
    kept = d.decompress("gzip", 1, compress("gzip", 1, first))
    again = d.decompress("snappy", 1, compress("snappy", 1, second))
    assert again.obj is not kept.obj
    assert bytes(kept) == first and bytes(again) == second
    del kept
    assert bytes(d.decompress("gzip", 1, compress("gzip", 1, first))) == first


def test_decompressor_max_size_attribute_and_default():
    assert DEFAULT_MAX_DECOMPRESSED == 256 * 1024 * 1024
    assert Decompressor().max_size == DEFAULT_MAX_DECOMPRESSED
    d = Decompressor(max_size=1000)
    assert d.max_size == 1000
    d.max_size = 10
    with pytest.raises(RecordTooLargeError):
        d.decompress("lz4", 2, compress("lz4", 2, b"x" * 11))
    with pytest.raises(ValueError):
        Decompressor(max_size=-1)


@pytest.mark.parametrize("codec", CODECS)
def test_lowering_the_cap_after_the_buffer_grew(codec):
    data = sample(300_000)
    out = compress(codec, magic_of(codec), data)
    d = Decompressor()
    assert bytes(d.decompress(codec, magic_of(codec), out)) == data
    d.max_size = len(data) - 1
    with pytest.raises(RecordTooLargeError):
        d.decompress(codec, magic_of(codec), out)
    # decompress() reuses a per-thread buffer the same way.
    assert decompress(codec, magic_of(codec), out) == data
    with pytest.raises(RecordTooLargeError):
        decompress(codec, magic_of(codec), out, max_size=len(data) - 1)


def test_decompressor_from_many_threads():
    datas = [sample(100_000 + i, i) for i in range(4)]
    frames = {codec: [compress(codec, 2, x) for x in datas] for codec in CODECS}
    errors = []

    def work(i):
        d = Decompressor()
        try:
            for _ in range(30):
                for codec in CODECS:
                    assert bytes(d.decompress(codec, 2, frames[codec][i])) == datas[i]
                    assert decompress(codec, 2, frames[codec][i]) == datas[i]
        except Exception as exc:    # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_one_decompressor_shared_by_threads_raises_or_works():
    data = sample(2_000_000, redundancy=0.95)
    frame = compress("gzip", 1, data)
    d = Decompressor()
    outcomes = []

    def work():
        for _ in range(5):
            try:
                outcomes.append(bytes(d.decompress("gzip", 1, frame)) == data)
            except KafkaCodecError as exc:
                assert "one per thread" in str(exc)
                outcomes.append("busy")

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert True in outcomes and False not in outcomes


# --- cross-checks with kafka-python and aiokafka ------------------------------------------

PEER_ENCODERS = {
    ("gzip", "kafka-python"): kp.gzip_encode,
    ("gzip", "aiokafka"): aio.gzip_encode,
    ("snappy", "kafka-python"): lambda d: kp.snappy_encode(d, xerial_compatible=True),
    ("snappy", "aiokafka"): lambda d: aio.snappy_encode(d, xerial_compatible=True),
    ("snappy", "kafka-python 1 KiB blocks"): lambda d: kp.snappy_encode(
        d, xerial_compatible=True, xerial_blocksize=1024),
    ("snappy", "raw block"): lambda d: kp.snappy_encode(d, xerial_compatible=False),
    ("lz4", "kafka-python"): kp.lz4_encode,
    ("lz4", "aiokafka"): aio.lz4_encode,
    ("zstd", "kafka-python"): kp.zstd_encode,
    ("zstd", "aiokafka"): aio.zstd_encode,
}
PEER_DECODERS = {
    ("gzip", "kafka-python"): kp.gzip_decode,
    ("gzip", "aiokafka"): aio.gzip_decode,
    ("snappy", "kafka-python"): kp.snappy_decode,
    ("snappy", "aiokafka"): aio.snappy_decode,
    ("lz4", "kafka-python"): kp.lz4_decode,
    ("lz4", "aiokafka"): aio.lz4_decode,
    ("zstd", "kafka-python"): kp.zstd_decode,
    ("zstd", "aiokafka"): aio.zstd_decode,
}
SIZES = [0, 1, 100, 32768, 32769, 65536, 65537, 300_000]


@pytest.mark.parametrize("codec, peer", sorted(PEER_ENCODERS))
@pytest.mark.parametrize("size", SIZES)
def test_we_read_what_peers_write(codec, peer, size):
    data = sample(size, size)
    if size == 0 and peer == "raw block":
        pytest.skip("an empty raw snappy block is the empty input, which snappy-java rejects")
    encoded = PEER_ENCODERS[codec, peer](data)
    for magic in ((2,) if codec == "zstd" else (1, 2)):
        assert decompress(codec, magic, encoded) == data
        assert bytes(Decompressor().decompress(codec, magic, encoded)) == data


@pytest.mark.parametrize("codec, peer", sorted(PEER_DECODERS))
@pytest.mark.parametrize("size", SIZES)
def test_peers_read_what_we_write(codec, peer, size):
    data = sample(size, size)
    if size == 0 and codec == "snappy":
        pytest.skip("peers read a header-only xerial stream (Kafka's empty snappy) as raw")
    for magic in ((2,) if codec == "zstd" else (1, 2)):
        assert PEER_DECODERS[codec, peer](compress(codec, magic, data)) == data


@pytest.mark.parametrize("codec,levels", [("zstd", (None, 1, 7, 19, -5)),
                                          ("gzip", (None, 1, 5, 9)), ("snappy", (None,))])
def test_librdkafka_consumes_our_batches(codec, levels):
    """confluent-kafka (librdkafka) reads our zstd and gzip (libdeflate's from 1 KiB, zlib's
    below) batches at several levels, and our snappy (xerial framing, several 32 KiB blocks):
    produced raw into its mock cluster, consumed back record by record."""
    ck = pytest.importorskip("confluent_kafka")
    from kafkacodec import MemoryRecordsBuilder
    from blocking_client import BlockingClient

    # the mock cluster lives as long as this producer (it never produces itself)
    cluster = ck.Producer({"test.mock.num.brokers": 1})
    (broker,) = cluster.list_topics(timeout=10).brokers.values()
    bootstrap = f"{broker.host}:{broker.port}"
    sent = []
    with BlockingClient(broker.host, broker.port) as client:
        client.metadata([f"{codec}-levels"])                # auto-creates the topic
        for level in levels:
            builder = MemoryRecordsBuilder(2, codec, compression_level=level)
            values = [sample(n, len(sent) + n) for n in (0, 10, 5000, 150_000, 3)]
            for value in values:
                builder.append(1_700_000_000_000, b"k", value)
            response = client.produce([(f"{codec}-levels", [(0, builder.build())])])
            assert response.responses[0].partition_responses[0].error_code == 0
            sent += values
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": codec,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(f"{codec}-levels", 0, 0)])
    got = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.1)
            if msg is not None:
                assert not msg.error(), msg.error()
                got.append(msg.value() or b"")
            if len(got) == len(sent):
                break
    finally:
        consumer.close()
    assert got == sent


@pytest.mark.parametrize("size", SIZES)
def test_lz4_magic_0_against_kafka_python_old_kafka_framing(size):
    data = sample(size, size)
    old = kp.lz4_encode_old_kafka(data)
    assert old[6] == 0x1A or size, "kafka-python writes the broken HC too"
    assert decompress("lz4", 0, old) == data
    assert kp.lz4_decode_old_kafka(compress("lz4", 0, data)) == data
    # Magic 0 frames carry the broken HC, which a magic 1/2 reader rejects.
    with pytest.raises(CorruptRecordError, match="header checksum"):
        decompress("lz4", 1, compress("lz4", 0, data))


def test_lz4_frame_options_kafka_accepts():
    data = sample(300_000)
    for options in (dict(block_size=lz4.frame.BLOCKSIZE_MAX4MB),
                    dict(block_size=lz4.frame.BLOCKSIZE_MAX1MB, block_checksum=True),
                    dict(content_checksum=True, store_size=True),
                    dict(store_size=False, compression_level=12)):
        frame = lz4.frame.compress(data, block_linked=False, **options)
        for magic in (0, 1, 2):
            assert decompress("lz4", magic, frame) == data


# --- errors -------------------------------------------------------------------------------

def test_codec_and_magic_checks():
    with pytest.raises(UnsupportedCompressionError, match="zstd.*magic 2"):
        compress("zstd", 1, b"x")
    frame = compress("zstd", 2, b"x")
    for magic in (0, 1):
        with pytest.raises(UnsupportedCompressionError, match="magic"):
            decompress("zstd", magic, frame)
        with pytest.raises(UnsupportedCompressionError):
            Decompressor().decompress(4, magic, frame)
    for codec_id in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError, match=f"unknown compression type id {codec_id}"):
            decompress(codec_id, 2, frame)
        with pytest.raises(UnsupportedCompressionError, match=f"unknown compression type id {codec_id}"):
            compress(codec_id, 2, b"x")
    with pytest.raises(UnsupportedCompressionError, match="unknown compression"):
        compress("brotli", 2, b"x")
    for none in (0, "none", None):
        with pytest.raises(ValueError, match="not a container"):
            decompress(none, 2, b"x")
        with pytest.raises(ValueError, match="not a container"):
            compress(none, 2, b"x")
    with pytest.raises(UnsupportedVersionError, match="magic 3"):
        decompress("lz4", 3, compress("lz4", 2, b"x"))


def truncation_points(size):
    return sorted({0, 1, 2, 3, 5, 9, 10, 15, 16, 17, 20, size // 2, size - 5, size - 4,
                   size - 2, size - 1} & set(range(size)))


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_every_truncation_is_an_error(codec):
    data = sample(150_000)
    out = compress(codec, magic_of(codec), data)
    for cut in truncation_points(len(out)):
        with pytest.raises(CorruptRecordError, match=f"{codec} data.*(truncated|ended|empty)"):
            decompress(codec, magic_of(codec), out[:cut])
        with pytest.raises(CorruptRecordError):
            Decompressor().decompress(codec, magic_of(codec), out[:cut])


def test_truncated_snappy():
    data = sample(100_000)
    out = compress("snappy", 1, data)
    (first,) = struct.unpack_from(">i", out, 16)
    for cut in (21, 16 + 4 + first // 2, len(out) - 1):
        with pytest.raises(CorruptRecordError, match="snappy data.*truncated block") as info:
            decompress("snappy", 1, out[:cut])
        assert info.value.position is not None
    with pytest.raises(CorruptRecordError, match="empty"):
        decompress("snappy", 1, b"")
    # A cut at a block boundary leaves valid (shorter) data, plus up to 3 ignored bytes.
    boundary = 16 + 4 + first
    for extra in range(4):
        assert decompress("snappy", 1, out[:boundary + extra]) == data[:32768]
    # The 16-byte header missing: the input is read as one raw snappy block, which fails.
    with pytest.raises(CorruptRecordError, match=r"snappy data \(magic 1\)"):
        decompress("snappy", 1, out[:12])
    with pytest.raises(CorruptRecordError, match="invalid snappy block"):
        decompress("snappy", 1, b"\x05abc")


def test_snappy_reader_details():
    data = sample(70_000)
    one = compress("snappy", 2, data)
    assert decompress("snappy", 2, one + one) == data + data        # concatenated streams
    assert decompress("snappy", 2, one + b"\x00\x00\x07") == data   # <= 3 trailing bytes
    with pytest.raises(CorruptRecordError, match="negative block length"):
        decompress("snappy", 2, one + b"\xff\xff\xff\xff")
    with pytest.raises(CorruptRecordError, match="truncated block"):
        decompress("snappy", 2, one + b"\x00\x00\x00\x09")
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress("snappy", 2, raw) == data                     # no header: one raw block
    # A block whose varint promises more than the block can hold is refused before any
    # allocation (and is not reported as the cap).
    liar = one[:16] + struct.pack(">i", 6) + b"\xff\xff\xff\x0f\x00\x00"
    with pytest.raises(CorruptRecordError, match="more than it can hold"):
        decompress("snappy", 2, liar)


def test_lz4_linked_blocks_from_lz4_frame_defaults_rejected():
    frame = lz4.frame.compress(sample(200_000))
    assert not frame[4] & 0x20
    for magic in (0, 1, 2):
        with pytest.raises(CorruptRecordError, match="dependent .*blocks") as info:
            decompress("lz4", magic, frame)
        assert info.value.position == 4


def lz4_header(flg, bd=0x40, magic0=False):
    body = bytes([flg, bd])
    hc = (xxhash.xxh32_intdigest((b"\x04\x22\x4d\x18" if magic0 else b"") + body) >> 8) & 0xFF
    return b"\x04\x22\x4d\x18" + body + bytes([hc])


def test_lz4_header_fields_kafka_rejects():
    tail = struct.pack("<I", 0x80000002) + b"hi" + b"\0\0\0\0"
    assert decompress("lz4", 2, lz4_header(0x60) + tail) == b"hi"
    for flg, bd, match in ((0x61, 0x40, "dictionary id"), (0x62, 0x40, "reserved"),
                           (0xA0, 0x40, "version"), (0x60, 0x30, "BD"), (0x60, 0x41, "BD"),
                           (0x60, 0xC0, "BD")):
        with pytest.raises(CorruptRecordError, match=match):
            decompress("lz4", 2, lz4_header(flg, bd) + tail)
    with pytest.raises(CorruptRecordError, match="invalid frame magic"):
        decompress("lz4", 2, b"\x04\x22\x4d\x19" + lz4_header(0x60)[4:] + tail)
    # A block larger than the frame's max block size.
    big = lz4_header(0x60) + struct.pack("<I", 0x80000000 | 65537) + b"x" * 65537 + b"\0" * 4
    with pytest.raises(CorruptRecordError, match="exceeds the frame's max block size"):
        decompress("lz4", 2, big)


def test_lz4_bad_hc_rejected_for_magic_1_2_accepted_for_magic_0():
    frame = bytearray(compress("lz4", 2, sample(1000)))
    frame[6] ^= 0x55
    assert decompress("lz4", 0, frame) == sample(1000)
    for magic in (1, 2):
        with pytest.raises(CorruptRecordError, match="frame descriptor corrupted") as info:
            decompress("lz4", magic, frame)
        assert info.value.position == 6


def test_lz4_block_checksum_verified():
    data = sample(200_000)
    frame = lz4.frame.compress(data, block_linked=False, block_checksum=True)
    assert decompress("lz4", 2, frame) == data
    # The first block's checksum sits right after it.
    (word,) = struct.unpack_from("<I", frame, 7 + 8)     # lz4.frame stores the content size
    checksum_at = 7 + 8 + 4 + (word & 0x7FFFFFFF)
    bad = bytearray(frame)
    bad[checksum_at] ^= 1
    with pytest.raises(InvalidCrcError, match="block checksum") as info:
        decompress("lz4", 2, bad)
    assert info.value.position == checksum_at
    assert info.value.stored == struct.unpack_from("<I", bad, checksum_at)[0]
    assert info.value.computed == struct.unpack_from("<I", frame, checksum_at)[0]


def test_lz4_content_checksum_consumed_not_verified():
    data = sample(1000)
    frame = bytearray(lz4.frame.compress(data, block_linked=False, content_checksum=True))
    frame[-1] ^= 0xFF
    assert decompress("lz4", 2, frame) == data
    with pytest.raises(CorruptRecordError, match="content checksum"):
        decompress("lz4", 2, frame[:-2])


def test_lz4_reads_only_the_first_frame():
    one = compress("lz4", 2, b"first")
    assert decompress("lz4", 2, one + compress("lz4", 2, b"second")) == b"first"


def test_gzip_reader_details():
    data = sample(50_000)
    one = compress("gzip", 1, data)
    assert decompress("gzip", 1, one + kp.gzip_encode(b"more")) == data + b"more"
    assert decompress("gzip", 1, one + b"junk after the member") == data
    with pytest.raises(CorruptRecordError, match="gzip data"):
        decompress("gzip", 1, zlib.compress(data))              # zlib framing is not gzip
    bad = bytearray(one)
    bad[-5] ^= 1                                                # trailer CRC
    with pytest.raises(CorruptRecordError, match="incorrect data check"):
        decompress("gzip", 1, bad)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        decompress("gzip", 1, one + one[:30])                   # second member cut short
    assert info.value.position == len(one) + 30


def _gzip_member(data, *, flags=0, extra=b"", name=b"", comment=b"", header_crc=False,
                 crc=None, isize=None):
    """A gzip member by hand (RFC 1952), with the optional header fields."""
    flags |= (0x04 if extra else 0) | (0x08 if name else 0) | (0x10 if comment else 0)
    flags |= 0x02 if header_crc else 0
    header = bytes([0x1F, 0x8B, 8, flags, 0, 0, 0, 0, 0, 0xFF])
    if extra:
        header += struct.pack("<H", len(extra)) + extra
    header += (name + b"\0" if name else b"") + (comment + b"\0" if comment else b"")
    if header_crc:
        header += struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    body = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = body.compress(data) + body.flush()
    trailer = struct.pack("<II", zlib.crc32(data) if crc is None else crc,
                          len(data) if isize is None else isize)
    return header + deflated + trailer


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from(["plain", "extra", "name", "comment",
                                                   "header_crc", "all"]))
def test_gzip_both_inflaters_read_every_header_form(data, form):
    # A lone plain member is inflated by libdeflate, one with a header CRC by zlib: the same
    # bytes come out either way, and the cap and checks hold on both paths.
    fields = {"plain": {}, "extra": {"extra": b"ab\x00c"}, "name": {"name": b"x.log"},
              "comment": {"comment": b"hi"}, "header_crc": {"header_crc": True},
              "all": {"extra": b"e", "name": b"n", "comment": b"c", "header_crc": True}}[form]
    member = _gzip_member(data, **fields)
    assert decompress("gzip", 1, member) == data == gzip_module.decompress(member)
    assert bytes(Decompressor().decompress("gzip", 2, member)) == data
    if data:
        with pytest.raises(RecordTooLargeError):
            decompress("gzip", 2, member, max_size=len(data) - 1)


def test_gzip_trailer_lies_and_bad_headers_get_zlib_errors():
    data = sample(20_000)
    for member, match in ((_gzip_member(data, crc=1), "incorrect data check"),
                          (_gzip_member(data, isize=len(data) - 1), "incorrect length check"),
                          (_gzip_member(data, isize=len(data) + 1), "incorrect length check"),
                          (_gzip_member(data, flags=0x20), "unknown header flags"),
                          (_gzip_member(data, header_crc=True)[:10] + b"\0\0"
                           + _gzip_member(data, header_crc=True)[12:], "header crc")):
        with pytest.raises(CorruptRecordError, match=match):
            decompress("gzip", 1, member)
    huge = _gzip_member(b"\0" * 100_000, isize=0xFFFFFFF0)   # claims 4 GiB: no allocation
    with pytest.raises(CorruptRecordError, match="incorrect length check"):
        decompress("gzip", 1, huge)
    empty = _gzip_member(b"")
    assert decompress("gzip", 1, empty) == b""
    assert decompress("gzip", 1, _gzip_member(data) + _gzip_member(data)) == data + data


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_lz4_block_that_looks_size_prefixed_is_read_as_a_plain_block(magic):
    # Found by fuzzing down-conversion: a block starting with a token and three zero bytes
    # (here 0x52 00 00 00, "82" as a little-endian size prefix) must not be read as one.
    inner = bytes.fromhex("00000014000000000000000ee38a687600000000000000000000")
    block = bytes.fromhex("5200000014000100f0000ee38a687600000000000000000000")
    assert lz4.block.decompress(block, uncompressed_size=len(inner)) == inner
    frame = compress("lz4", magic, inner)
    assert block in frame
    assert decompress("lz4", magic, frame) == inner
    assert bytes(Decompressor().decompress("lz4", magic, frame)) == inner


def test_zstd_reader_details():
    data = sample(70_000)
    one = compress("zstd", 2, data)
    skippable = struct.pack("<II", 0x184D2A5E, 3) + b"abc"
    with_size = zstandard.ZstdCompressor(write_content_size=True, write_checksum=True).compress(data)
    empty = compress("zstd", 2, b"")
    assert decompress("zstd", 2, skippable + one + empty + with_size + skippable) == data + data
    with pytest.raises(CorruptRecordError, match="invalid frame magic") as info:
        decompress("zstd", 2, one + b"\0\0\0\0\0")
    assert info.value.position == len(one)
    with pytest.raises(CorruptRecordError, match="empty"):
        decompress("zstd", 2, b"")
    bad = bytearray(with_size)
    bad[-1] ^= 1                                                 # content checksum
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress("zstd", 2, bad)


# --- decompression bombs ------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_cap_is_exact_for_every_codec(codec):
    data = b"\0" * 1_000_000 + sample(5000)
    out = compress(codec, magic_of(codec), data)
    assert decompress(codec, magic_of(codec), out, max_size=len(data)) == data
    assert bytes(Decompressor(max_size=len(data)).decompress(codec, magic_of(codec), out)) == data
    for cap in (0, 1000, 65536, len(data) - 1):
        with pytest.raises(RecordTooLargeError, match=f"cap of {cap} bytes.*max_size"):
            decompress(codec, magic_of(codec), out, max_size=cap)
        with pytest.raises(RecordTooLargeError):
            Decompressor(max_size=cap).decompress(codec, magic_of(codec), out)


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_stops_at_the_cap(codec):
    import tracemalloc

    bomb = compress(codec, magic_of(codec), bytes(50_000_000))
    assert len(bomb) < 2_500_000
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            decompress(codec, magic_of(codec), bomb, max_size=5_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6_000_000


# --- hostile input ------------------------------------------------------------------------

VALID = {codec: compress(codec, magic_of(codec), sample(100_000, redundancy=0.9))
         for codec in CODECS}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.data())
def test_random_byte_flips_raise_only_kafkacodec_errors(codec, draw):
    data = bytearray(VALID[codec])
    for _ in range(draw.draw(st.integers(1, 4))):
        pos = draw.draw(st.integers(0, min(len(data) - 1, draw.draw(st.sampled_from([40, 10**6])))))
        data[pos] ^= draw.draw(st.integers(1, 255))
    for magic in (0, 1, 2) if codec != "zstd" else (2,):
        try:
            decompress(codec, magic, data, max_size=1_000_000)
        except KafkaCodecError:
            pass
        try:
            Decompressor(max_size=1_000_000).decompress(codec, magic, data)
        except KafkaCodecError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=200))
def test_garbage_raises_only_kafkacodec_errors(codec, data):
    for prefix in (b"", bytes.fromhex("82534E4150505900000000010000000100000010"),
                   lz4_header(0x60), lz4_header(0x70, 0x70), bytes.fromhex("28b52ffd00")):
        try:
            decompress(codec, magic_of(codec), prefix + data, max_size=100_000)
        except KafkaCodecError:
            pass


# --- xxHash32 -----------------------------------------------------------------------------

@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_xxhash32_matches_the_xxhash_package(data, seed):
    assert xxhash32(data, seed) == xxhash.xxh32_intdigest(data, seed)


def test_xxhash32_long_input():
    data = os.urandom(1_000_003)
    assert xxhash32(data) == xxhash.xxh32_intdigest(data)
    assert xxhash32(memoryview(data)[3:]) == xxhash.xxh32_intdigest(data[3:])
    # any C-contiguous buffer counts as its raw bytes (the project convention)
    words = data[:1_000_000]
    assert xxhash32(memoryview(words).cast("i")) == xxhash.xxh32_intdigest(words)


def test_stub_matches_the_compiled_module():
    import ast
    import inspect
    from pathlib import Path

    import kafkacodec._compression as module

    tree = ast.parse(Path(module.__file__).with_name("_compression.pyi").read_text())
    stub = {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert sorted(module.__all__) == sorted(ast.literal_eval(next(
        node.value for node in tree.body if isinstance(node, ast.Assign)
        and node.targets[0].id == "__all__")))
    for name in module.__all__:
        assert hasattr(module, name)
    methods = {node.name: node for node in stub["Decompressor"].body
               if isinstance(node, ast.FunctionDef)}
    for runtime, node in ((module.decompress, stub["decompress"]),
                          (module.compress, stub["compress"]),
                          (module.xxhash32, stub["xxhash32"]),
                          (module.Decompressor.decompress, methods["decompress"])):
        params = list(inspect.signature(runtime).parameters)
        assert params == [arg.arg for arg in node.args.args], runtime.__name__


# --- the JVM as oracle: JDK gzip, snappy-java, zstd-jni, lz4-java (tests/java/CodecOracle) --

def _jvm_classpath():
    import glob
    import shutil

    try:
        import pyspark
    except ImportError:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    found = [glob.glob(os.path.join(jars, pattern))
             for pattern in ("lz4-java-*.jar", "snappy-java-*.jar", "zstd-jni-*.jar")]
    if not all(found) or not shutil.which("java") or not shutil.which("javac"):
        return None
    return os.pathsep.join(sorted(paths)[-1] for paths in found)


@pytest.fixture(scope="module")
def jvm(tmp_path_factory):
    """run([(op, codec_id, payload), ...]) -> [(ok, bytes), ...] in one JVM (see CodecOracle)."""
    import subprocess
    from pathlib import Path

    classpath = _jvm_classpath()
    if classpath is None:
        pytest.skip("needs java, javac and pyspark's lz4-java/snappy-java/zstd-jni jars")
    classes = tmp_path_factory.mktemp("oracle")
    source = Path(__file__).with_name("java") / "CodecOracle.java"
    subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True)

    def run(requests):
        payload = b"".join(op.encode() + bytes([codec]) + struct.pack(">i", len(data)) + data
                           for op, codec, data in requests)
        out = subprocess.run(["java", "-cp", os.pathsep.join([classpath, str(classes)]),
                              "CodecOracle"], input=payload, capture_output=True, check=True).stdout
        results, pos = [], 0
        while pos < len(out):
            status, n = struct.unpack_from(">ii", out, pos)
            results.append((status == 0, out[pos + 8:pos + 8 + n]))
            pos += 8 + n
        assert len(results) == len(requests)
        return results

    return run


JVM_SIZES = [0, 1, 100, 16384, 32768, 32769, 70_000, 300_000]


# Records sections from this size on are compressed by libdeflate, smaller ones by zlib.
GZIP_LIBDEFLATE_MIN = 1024


def check_gzip_against_the_jdk(data, level, ours, java):
    """Below GZIP_LIBDEFLATE_MIN ours is the JDK's bytes (the same zlib at the same level);
    from there on it is libdeflate's member at Kafka's level (so a test fails if the zlib path
    came back) and a valid gzip member.  (Not always smaller: on these synthetic repeats
    libdeflate's level 6 is up to 13% larger; on producer-like JSON it is smaller, see
    test_gzip_is_smaller_than_zlib_on_json_batches.)"""
    if len(data) < GZIP_LIBDEFLATE_MIN:
        assert ours == java, (level, len(data))
        return
    assert ours == bytes(deflate.gzip_compress(data, 6 if level == -1 else level))
    assert gzip_module.decompress(ours) == data
    assert zlib.decompress(ours, 16 + 15) == data


def json_batch(count, size, seed):
    """A records section's worth of JSON-like values (repeating field names, varying ids)."""
    rng = random.Random(seed)
    return b"".join(
        b'{"user": "user_%d", "event": "%s", "ts": %d, "session": "%s", "amount": %d}' % (
            rng.randrange(10**6), rng.choice([b"click", b"view", b"purchase"]),
            1_700_000_000_000 + rng.randrange(10**9), rng.randbytes(8).hex().encode(),
            rng.randrange(10**5)) for _ in range(count * size // 100))


@pytest.mark.parametrize("level", range(1, 10))
def test_gzip_is_smaller_than_zlib_on_json_batches(level):
    """The reason gzip moved to libdeflate: on producer-sized JSON batches (16 x 1 KiB,
    128 x 100 B) it is smaller than zlib at the same level, i.e. than Kafka's (the JDK's
    deflate is this zlib: test_gzip_against_the_jdk)."""
    for data in (json_batch(16, 1024, level), json_batch(128, 100, level)):
        deflater = zlib.compressobj(level, zlib.DEFLATED, -15, 8)
        jdk_size = 10 + len(deflater.compress(data) + deflater.flush()) + 8
        ours = compress("gzip", 1, data, level=level)
        assert len(ours) < jdk_size and zlib.decompress(ours, 16 + 15) == data


def test_gzip_against_the_jdk(jvm):
    """Kafka's GzipCompression: GZIPOutputStream (8 KiB) behind a 16 KiB buffered stream."""
    datas = [sample(n, n) for n in JVM_SIZES] + [sample(200_000, 1, 0.95), os.urandom(50_000)]
    for data, (ok, java) in zip(datas, jvm([("e", 1, data) for data in datas])):
        assert ok
        check_gzip_against_the_jdk(data, -1, compress("gzip", 1, data), java)
        assert java[9] == 0xFF, "JDK 17 writes OS = 255 (unknown)"


@pytest.mark.parametrize("codec", [1, 2, 4])
def test_we_read_what_the_jvm_writes(jvm, codec):
    datas = [sample(n, n) for n in JVM_SIZES]
    for data, (ok, java) in zip(datas, jvm([("e", codec, data) for data in datas])):
        assert ok
        assert decompress(codec, 2, java) == data
        assert bytes(Decompressor().decompress(codec, 2, java)) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_the_jvm_reads_what_we_write(jvm, codec):
    datas = [sample(n, n) for n in JVM_SIZES]
    magics = (2,) if codec == 4 else (1, 2)
    requests = [("d", codec, compress(codec, magic, data)) for data in datas for magic in magics]
    expected = [data for data in datas for _ in magics]
    for data, (ok, java) in zip(expected, jvm(requests)):
        assert ok, java
        assert java == data


def test_lz4_magic_0_frame_fails_a_standard_reader(jvm):
    """The KAFKA-3160 header checksum: lz4-java's frame reader rejects it, as Kafka's magic 1/2
    reader does; Kafka reads it only for magic 0."""
    data = sample(1000)
    (ok, message), (ok2, java) = jvm([("d", 3, compress("lz4", 0, data)),
                                       ("d", 3, compress("lz4", 2, data))])
    assert not ok and b"descriptor" in message
    assert ok2 and java == data


def test_snappy_is_snappy_java_byte_for_byte(jvm):
    """snappy-java's SnappyOutputStream (Kafka's, 32 KiB blocks) and ours: the same header, the
    same block cuts and, from the same snappy release (1.1.10), the same bytes, including the
    JSON-like producer batches the benchmarks build."""
    datas = [sample(n, n) for n in JVM_SIZES] + [json_batch(16, 1024, 1), json_batch(128, 100, 2)]
    for data, (ok, java) in zip(datas, jvm([("e", 2, data) for data in datas])):
        ours = compress("snappy", 2, data)
        assert ok and java[:16] == ours[:16]
        assert snappy_block_lengths(java) == snappy_block_lengths(ours)
        assert java == ours, len(data)


def snappy_block_lengths(stream):
    pos, lengths = 16, []
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        lengths.append(cramjam.snappy.decompress_raw_len(stream[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return lengths


def oracle_libzstd_version():
    """The libzstd inside the oracle's zstd-jni jar (zstd-jni-1.5.7-7.jar: (1, 5, 7))."""
    import re

    name = next(Path(p).name for p in _jvm_classpath().split(os.pathsep) if "zstd-jni" in p)
    return tuple(int(part) for part in re.match(r"zstd-jni-(\d+)\.(\d+)\.(\d+)", name).groups())


# Kafka's producer writes a batch's records one at a time into a 16 KiB BufferedOutputStream: the
# codec stream sees 16 KiB writes, and a direct write for each record larger than that.
PRODUCER_WRITES = [(100, sample(300_000, 5, 0.9)), (70_000, sample(300_000, 6, 0.5)),
                   (1, sample(40_000, 7)), (5000, os.urandom(60_000))]


@pytest.mark.parametrize("codec,levels", [("zstd", [-1, 1, 3, 7, 19, -5]),
                                          ("gzip", [-1, *range(1, 10)])])
def test_codec_against_kafka_at_every_level(jvm, codec, levels):
    """Kafka 3.9's GzipCompression and ZstdCompression at a level, written as the producer writes
    (the JVM's frames), against ours.  zstd: the same bytes, so never larger (zstd-jni's
    ZstdOutputStreamNoFinalizer with only the level set: the size unknown (the level's parameters
    for unknown sizes, e.g. a 2 MiB window at level 3), no checksum, then close() = a flush (an
    end of block) and the frame end (an empty last block)).  gzip: check_gzip_against_the_jdk."""
    if codec == "zstd" and oracle_libzstd_version() != zstandard.ZSTD_VERSION:
        pytest.skip(f"the oracle's zstd-jni bundles libzstd {oracle_libzstd_version()}, ours "
                    f"is {zstandard.ZSTD_VERSION}: same parameters, different matchers")
    cases = [(level, piece, data)
             for piece, data in [(max(n, 1), sample(n, n)) for n in JVM_SIZES] + PRODUCER_WRITES
             for level in levels]
    results = jvm([("l", 4 if codec == "zstd" else 1, struct.pack(">ii", level, piece) + data)
                   for level, piece, data in cases])
    for (ok, java), (level, piece, data) in zip(results, cases):
        assert ok, java
        ours = compress(codec, magic_of(codec), data, level=None if level == -1 else level)
        if codec == "gzip":
            check_gzip_against_the_jdk(data, level, ours, java)
        else:
            assert ours == java, (codec, level, len(data), piece, len(ours), len(java))


def test_zstd_frames_as_zstd_jni_writes_them(jvm):
    """Kafka's zstd frames carry no content size and no checksum; ours neither."""
    datas = [sample(n, n) for n in JVM_SIZES if n]
    for data, (ok, java) in zip(datas, jvm([("e", 4, data) for data in datas])):
        assert ok
        for frame in (java, compress("zstd", 2, data)):
            params = zstandard.get_frame_parameters(frame)
            assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
            assert not params.has_checksum and params.dict_id == 0
