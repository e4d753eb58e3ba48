"""Kafka's codec containers in plain Python, used until kafkacodec._compression lands.

TODO(merge): delete this module; _arrow.pyx decompresses through
kafkacodec._compression.Decompressor.decompress_into and the writer compresses through the
shared compressors.  Only what the Spark side needs: whole-buffer compress/decompress.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kafkacodec.errors import UnsupportedCompressionError

_XERIAL = b"\x82SNAPPY\x00"


def decompress(codec: int, magic: int, data) -> bytes:
    data = memoryview(data)
    if codec == 1:
        out = []
        raw = bytes(data)
        while raw:                               # concatenated gzip members
            d = zlib.decompressobj(47)
            out.append(d.decompress(raw))
            if not d.eof:
                raise ValueError("truncated gzip stream")
            raw = d.unused_data
        return b"".join(out)
    if codec == 2:
        if len(data) < 16 or bytes(data[:8]) != _XERIAL:
            return bytes(cramjam.snappy.decompress_raw(data))
        out, pos = [], 16
        while len(data) - pos >= 4:
            if bytes(data[pos:pos + 4]) == _XERIAL[:4]:
                pos += 16
                continue
            (n,) = struct.unpack_from(">i", data, pos)
            if n < 0 or pos + 4 + n > len(data):
                raise ValueError("truncated snappy block")
            out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n])))
            pos += 4 + n
        return b"".join(out)
    if codec == 3:
        raw = bytearray(data)
        if magic == 0 and len(raw) > 6:          # KAFKA-3160: magic 0 frames carry a wrong HC
            raw[6] = _lz4_hc(raw)
        return lz4.frame.decompress(bytes(raw))
    if codec == 4:
        if magic < 2:
            raise UnsupportedCompressionError("zstd is not allowed for magic 0/1")
        return zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
    raise UnsupportedCompressionError(f"unknown compression type id {codec}")


def _lz4_hc(frame) -> int:
    import xxhash
    end = 6 + (8 if frame[4] & 0x08 else 0)
    return (xxhash.xxh32_intdigest(bytes(frame[4:end])) >> 8) & 0xFF


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a v2 records section as Kafka's producer does (magic 2 containers)."""
    if codec == 1:
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == 2:
        data = memoryview(data)
        parts = [_XERIAL, b"\x00\x00\x00\x01\x00\x00\x00\x01"]
        for i in range(0, len(data), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + 32 * 1024]))
            parts += [struct.pack(">i", len(block)), block]
        return b"".join(parts)
    if codec == 3:
        return lz4.frame.compress(bytes(data), block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False, store_size=False)
    if codec == 4:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(bytes(data))
    raise UnsupportedCompressionError(f"unknown compression type id {codec}")
