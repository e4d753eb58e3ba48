"""compress_into (the codecs writing into the caller's WriteBuffer) against a reference built
here from the codec libraries alone: the containers kafkacodec wrote as bytes before
compress_into existed (Kafka's LZ4 frame, Java's gzip member, zstd-jni's frame).  Snappy blocks
come from the vendored Google snappy, which no Python package here wraps (test_compression
compares them with snappy-java's byte for byte): for snappy the reference is the xerial framing,
each block decompressed by cramjam back to its 32 KiB of the input.
"""

import os
import struct
import zlib

import cramjam
import deflate
import lz4.block
import pytest
import xxhash
import zstandard

from kafkacodec._compression import _compress_into, compress
from kafkacodec._writer import WriteBuffer

SIZES = [0, 1, 2, 100, 1024, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024, 64 * 1024 + 1,
         200_000]
CODEC_MAGIC = [(codec, magic) for codec in ("gzip", "snappy", "lz4") for magic in (0, 1, 2)]
CODEC_MAGIC.append(("zstd", 2))


def reference(codec: str, magic: int, data: bytes, level: int | None) -> bytes:
    if codec == "gzip" and len(data) >= 1024:    # libdeflate's gzip member at Kafka's level
        return bytes(deflate.gzip_compress(data, 6 if level is None else level))
    if codec == "gzip":          # Java's GZIPOutputStream: fixed header (OS 0xFF), raw deflate
        deflater = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, -15, 8)
        body = deflater.compress(data) + deflater.flush()
        return (bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF]) + body
                + struct.pack("<II", zlib.crc32(data), len(data)))
    if codec == "lz4":           # Kafka's frame: FLG 0x60, BD 0x40, HC; 64 KiB blocks, EndMark
        header = bytes([0x04, 0x22, 0x4D, 0x18, 0x60, 0x40])
        hc = (xxhash.xxh32(header if magic == 0 else header[4:]).intdigest() >> 8) & 0xFF
        out = [header + bytes([hc])]
        for i in range(0, len(data), 64 * 1024):
            chunk = data[i:i + 64 * 1024]
            if level in (None, 9):
                block = lz4.block.compress(chunk, store_size=False)
            else:
                block = lz4.block.compress(chunk, mode="high_compression", compression=level,
                                           store_size=False)
            if len(block) < len(chunk):
                out.append(struct.pack("<I", len(block)) + block)
            else:
                out.append(struct.pack("<I", 0x80000000 | len(chunk)) + chunk)
        out.append(b"\0\0\0\0")
        return b"".join(out)
    compressor = zstandard.ZstdCompressor(level=3 if level is None else level)
    if not data:
        return compressor.compress(b"")
    stream = compressor.compressobj(size=-1)
    return (stream.compress(data) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            + stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))


def check_container(codec: str, magic: int, data: bytes, got: bytes,
                    level: int | None = None) -> None:
    if codec != "snappy":
        assert got == reference(codec, magic, data, level), (codec, magic, len(data))
        return
    # xerial: header, then [int32 BE length][raw block] per 32 KiB of input
    assert got[:16] == bytes([0x82]) + b"SNAPPY\0" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(got):
        (n,) = struct.unpack_from(">i", got, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(got[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(got)
    assert blocks == [data[i:i + 32 * 1024] for i in range(0, len(data), 32 * 1024)]


def payload(size: int, kind: str) -> bytes:
    if kind == "random":         # incompressible: lz4 stores raw blocks, every bound is reached
        return os.urandom(size)
    return (b"kafka record %d; " * (size // 16 + 1) % tuple(range(size // 16 + 1)))[:size]


@pytest.mark.parametrize("codec,magic", CODEC_MAGIC)
@pytest.mark.parametrize("kind", ["text", "random"])
def test_compress_into_matches_the_reference_and_keeps_what_was_there(codec, magic, kind):
    for size in SIZES:
        data = payload(size, kind)
        expected = compress(codec, magic, data)
        check_container(codec, magic, data, expected)
        out = WriteBuffer()      # starts empty: the first write grows it, often past 256 bytes
        out.write(b"prefix")
        assert _compress_into(out, codec, magic, data) == len(expected)
        assert bytes(memoryview(out)) == b"prefix" + expected, (codec, magic, kind, size)


@pytest.mark.parametrize("codec,level", [("gzip", 1), ("gzip", 9), ("lz4", 1), ("lz4", 12),
                                         ("zstd", 1), ("zstd", 19), ("zstd", -5)])
def test_compress_into_levels_match_the_reference(codec, level):
    data = payload(70_000, "text")
    out = WriteBuffer()
    _compress_into(out, codec, 2, data, level)
    assert bytes(memoryview(out)) == reference(codec, 2, data, level)


@pytest.mark.parametrize("codec,magic", CODEC_MAGIC)
def test_compress_into_appends_to_a_full_buffer_of_any_capacity(codec, magic):
    data = payload(5000, "random")
    expected = compress(codec, magic, data)
    check_container(codec, magic, data, expected)
    for capacity in (1, 7, 256, len(expected), len(expected) + 5, 1 << 16):
        out = WriteBuffer(capacity)
        out.write(b"x" * min(capacity, 300))
        _compress_into(out, codec, magic, data)
        assert bytes(memoryview(out)) == b"x" * min(capacity, 300) + expected


def test_compress_into_refuses_to_grow_under_a_view():
    out = WriteBuffer()
    view = memoryview(out)
    with pytest.raises(BufferError):
        _compress_into(out, "gzip", 2, b"a" * 1000)
    view.release()
    assert len(out) == 0


def test_a_write_buffer_shared_with_an_appending_thread_gets_whole_gzip_members():
    # zlib's path (under 1 KiB) released the GIL while deflate wrote into the WriteBuffer: a
    # thread appending meanwhile moved the buffer (SIGSEGV) or wrote over the member.
    from isolated import run_python

    run = run_python("""
        import gzip, sys, threading
        from kafkacodec import WriteBuffer
        from kafkacodec._compression import _compress_into
        sys.setswitchinterval(1e-6)
        data, pattern = bytes(range(256)) * 3, b"\\xee" * 64
        buf, stop = WriteBuffer(), []
        def append():
            while not stop:
                buf.write(pattern)
        thread = threading.Thread(target=append)
        thread.start()
        (n,) = {_compress_into(buf, "gzip", 1, data) for _ in range(3000)}
        stop.append(True)
        thread.join()
        out, pos, members = buf.getvalue(), 0, 0
        while pos < len(out):
            if out[pos:pos + 64] == pattern:
                pos += 64
            else:
                assert gzip.decompress(out[pos:pos + n]) == data, pos
                pos, members = pos + n, members + 1
        print(members)
    """)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.split() == ["3000"]
