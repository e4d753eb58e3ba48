"""Down-conversion of zstd batches with `recompress=` (issue 19): magic 0/1 cannot hold zstd, so
Kafka refuses them to old clients; recompressing with a named codec is the opt-in way on.  The
output is read back by kafka-python (an independent reader) and compared with the source
records as our core reader decodes them."""

import io
import json
import struct

import pytest

import kafkacodec
from kafkacodec import LazyDownConvertRecords, MemoryRecordsBuilder, down_convert
from kafkacodec.cli import EXIT_DATA, EXIT_OK, main
from kafkacodec.errors import UnsupportedCompressionError

kafka_records = pytest.importorskip("kafka.record.memory_records")


def batch(codec, base, n, value_size=40, control=False):
    if control:
        return MemoryRecordsBuilder.build_end_txn_marker(commit=True, producer_id=9, producer_epoch=0,
                                                         coordinator_epoch=1, base_offset=base)
    b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=base)
    for i in range(n):
        b.append(1_700_000_000_000 + base + i, b"k%d" % (base + i), bytes([65 + (base + i) % 26]) * value_size,
                 headers=[("h", b"v")])
    return b.build()


@pytest.fixture(scope="module")
def mixed():
    """zstd batches among others (first, middle, last), a control batch, and a zstd batch
    larger than a lazy chunk."""
    parts, base = [], 0
    for codec, n, size in (("zstd", 5, 40), ("lz4", 7, 40), ("zstd", 30, 40), ("none", 3, 40),
                           ("zstd", 400, 1000), ("gzip", 4, 40), ("zstd", 2, 40)):
        parts.append(batch(codec, base, n, size))
        base += n
    parts.insert(3, batch(None, base, 1, control=True))
    return b"".join(parts)


def source_values(data):
    return [(r.offset, r.key, r.value) for b in kafkacodec.MemoryRecords(data).batches() if not b.is_control
            for r in b]


def kafka_python_read(data):
    records = kafka_records.MemoryRecords(bytes(data))
    out, codecs = [], []
    while records.has_next():
        b = records.next_batch()
        assert b.magic == 1
        codecs.append(b.compression_type)
        out += [(r.offset, r.key, r.value) for r in b]
    return out, codecs


@pytest.mark.parametrize("codec,attribute", [("lz4", 3), ("gzip", 1), ("snappy", 2), ("none", 0)])
def test_eager_down_convert_recompresses_zstd(mixed, codec, attribute):
    with pytest.raises(UnsupportedCompressionError):
        down_convert(mixed, 1)
    converted = down_convert(mixed, 1, recompress=codec)
    values, codecs = kafka_python_read(converted.records.buffer)
    assert values == source_values(mixed)
    assert attribute in codecs                       # the former zstd batches carry the named codec
    assert converted.stats.records_converted == len(values)


@pytest.mark.parametrize("chunk", [0, 300, 4096, 128 * 1024])
def test_lazy_down_convert_recompresses_zstd_like_the_eager_one(mixed, tmp_path, chunk):
    eager = bytes(down_convert(mixed, 1, recompress="lz4").records.buffer)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(mixed)
    for source in (mixed, kafkacodec.FileRecords.open(path), open(path, "rb")):
        lazy = LazyDownConvertRecords(source, 1, chunk_size=chunk, recompress="lz4")
        assert b"".join(bytes(c.records.buffer) for c in lazy) == eager
        sink = io.BytesIO()
        while not lazy.completed:
            lazy.write_to(sink)
        sent = sink.getvalue()                       # cut or padded to the committed size, as Kafka's
        assert len(sent) == lazy.size_in_bytes and sent[:len(eager)] == eager[:len(sent)]
        source.close() if hasattr(source, "close") else None


def test_recompress_refuses_zstd(mixed):
    with pytest.raises(ValueError, match="another codec"):
        down_convert(mixed, 1, recompress="zstd")
    with pytest.raises(ValueError, match="another codec"):
        LazyDownConvertRecords(mixed, 0, recompress="zstd")
    assert bytes(down_convert(mixed, 2).records.buffer) == mixed   # magic 2 without recompress: untouched


def test_cli_convert_recompress(mixed, tmp_path, capsys):
    src = tmp_path / "00000000000000000000.log"
    src.write_bytes(mixed)
    out = tmp_path / "v1.log"
    assert main(["convert", "--to-magic", "1", "--no-progress", str(src), str(out)]) == EXIT_DATA
    assert "--recompress" in capsys.readouterr().err and not out.exists()
    assert main(["convert", "--to-magic", "1", "--no-progress", "--json", "--recompress", "snappy",
                 str(src), str(out)]) == EXIT_OK
    result = json.loads(capsys.readouterr().out)
    values, codecs = kafka_python_read(out.read_bytes())
    assert values == source_values(mixed) and result["records_converted"] == len(values)
    assert result["recompress"] == "snappy" and 2 in codecs
    assert struct.unpack_from(">q", out.read_bytes())[0] == 4      # a v1 wrapper names its last offset
    # Down-conversion, like Kafka's, checks no CRC of small batches; convert does, first, so a
    # corrupt zstd batch never comes out recompressed with a fresh checksum.
    data = bytearray(mixed)
    data[80] ^= 0x10                                # inside the first (zstd) batch's records
    src.write_bytes(bytes(data))
    assert main(["convert", "--to-magic", "1", "--no-progress", "--recompress", "gzip",
                 str(src), str(out)]) == EXIT_DATA
    assert "CRC" in capsys.readouterr().err
    assert kafka_python_read(out.read_bytes())[0] == source_values(mixed)  # the earlier OUT is kept


# --- to magic 2: zstd batches stay v2, recompressed (Fetch v4-v9 readers) ---------------------

def kafka_python_v2(data):
    """kafka-python (an independent reader) over v2 batches: (header fields, records) each."""
    records = kafka_records.MemoryRecords(bytes(data))
    out = []
    while records.has_next():
        b = records.next_batch()
        assert b.magic == 2
        assert b.validate_crc()
        out.append(((b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence,
                     b.is_transactional, b.is_control_batch, b.timestamp_type, b.max_timestamp),
                    b.compression_type,
                    [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in b]))
    return out


@pytest.mark.parametrize("codec,attribute", [("gzip", 1), ("lz4", 3), ("snappy", 2), ("none", 0)])
def test_to_magic_2_zstd_batches_are_recompressed_and_everything_else_kept(mixed, codec, attribute):
    converted = down_convert(mixed, 2, recompress=codec)
    out = bytes(converted.records)
    before, after = kafka_python_v2(mixed), kafka_python_v2(out)
    assert [(h, r) for h, _, r in after] == [(h, r) for h, _, r in before]
    assert [c for _, c, _ in after] == [attribute if c == 4 else c for _, c, _ in before]
    # the batches that were not zstd are the stored bytes
    kept = [bytes(b.raw) for b in kafkacodec.MemoryRecords(mixed).batches() if b.compression.name != "ZSTD"]
    assert all(k in out for k in kept)
    assert converted.stats.records_converted == 5 + 30 + 400 + 2


def test_to_magic_2_without_recompress_copies_zstd(mixed):
    assert bytes(down_convert(mixed, 2).records) == mixed


def test_to_magic_2_lazily_in_chunks_as_eagerly(mixed):
    eager = bytes(down_convert(mixed, 2, recompress="lz4").records)
    lazy = b"".join(bytes(c.records) for c in LazyDownConvertRecords(mixed, 2, 0, 4096, recompress="lz4"))
    assert lazy == eager


def test_a_corrupt_zstd_batch_is_not_given_a_fresh_checksum():
    import zstandard

    inner = b"\x10\x00\x00\x00\x02k0\x02v0\x00" + b"\xff" * 5      # a record, then garbage
    data = bytearray(batch("zstd", 0, 1))
    header = data[:61]
    body = zstandard.ZstdCompressor().compress(inner)
    data = bytearray(header) + body
    struct.pack_into(">i", data, 8, len(data) - 12)
    from kafkacodec.crc import crc32c
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(kafkacodec.CorruptRecordError):
        down_convert(bytes(data), 2, recompress="gzip")
