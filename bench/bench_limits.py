"""The machine's limits, measured in the same run as the codecs so ratios mean something:
memory copy, CRC-32C (the crc32c package, hardware when the CPU has it) and CRC-32 (zlib),
and the codecs' own decompression speed on the 100k-record workload.
impl "limit" rows are what no record codec can beat; kafkacodec's CRC is listed beside them."""

from __future__ import annotations

import gzip
import zlib

import numpy as np
import pytest



def test_memcpy_numpy(meta, big_buffer):
    src = np.frombuffer(big_buffer, dtype=np.uint8)
    dst = np.empty_like(src)
    meta("memcpy", "limit", nbytes=len(big_buffer))(np.copyto, dst, src)


def test_memcpy_bytes(meta, big_buffer):
    meta("memcpy (bytes copy)", "limit", nbytes=len(big_buffer))(bytearray, big_buffer)


def test_crc32c_package(meta, big_buffer):
    crc32c = pytest.importorskip("crc32c")
    meta("crc32c", "limit", nbytes=len(big_buffer))(crc32c.crc32c, big_buffer)


def test_crc32c_kafkacodec(meta, big_buffer):
    from kafkacodec import _crc

    meta("crc32c", "kafkacodec", nbytes=len(big_buffer))(_crc.crc32c, big_buffer)


def test_crc32_zlib(meta, big_buffer):
    meta("crc32 (zlib)", "limit", nbytes=len(big_buffer))(zlib.crc32, big_buffer)


def test_crc32_kafkacodec(meta, big_buffer):
    from kafkacodec import _crc

    meta("crc32 (zlib)", "kafkacodec", nbytes=len(big_buffer))(_crc.crc32, big_buffer)


def _payload(log_of) -> bytes:
    """The uncompressed record bytes of the 100k workload (what batches compress)."""
    return log_of(2, "none")


def _codecs():
    import cramjam
    import lz4.frame
    import zstandard

    zd = zstandard.ZstdDecompressor()
    zc = zstandard.ZstdCompressor(level=3)
    return {
        "gzip": (lambda b: gzip.compress(b, 6), lambda b: zlib.decompress(b, 31)),
        "snappy": (lambda b: bytes(cramjam.snappy.compress_raw(b)),
                   lambda b: cramjam.snappy.decompress_raw(b)),
        "lz4": (lambda b: lz4.frame.compress(b), lz4.frame.decompress),
        "zstd": (zc.compress, zd.decompress),
    }


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_codec_decompress(meta, log_of, codec):
    compress, decompress = _codecs()[codec]
    raw = _payload(log_of)
    blob = compress(raw)
    assert bytes(decompress(blob)) == raw
    meta(f"decompress {codec}", "limit", nbytes=len(raw))(decompress, blob)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_codec_compress(meta, log_of, codec):
    compress, _ = _codecs()[codec]
    raw = _payload(log_of)
    meta(f"compress {codec}", "limit", nbytes=len(raw))(compress, raw)
