"""zstd batches recompressed with another codec, so that down-conversion can go on.

Kafka answers UNSUPPORTED_COMPRESSION_TYPE when a consumer older than zstd (Fetch < v10)
would receive a zstd batch: magic 0 and 1 have no zstd.  `recompress=` of `down_convert()`
and `LazyDownConvertRecords` is the opt-in way on: each zstd v2 batch is first rewritten as
the same v2 batch with the named codec (same header fields, records section decompressed and
compressed again, a new CRC-32C), then down-converted as usual (so the v0/v1 output carries
that codec).  The source batch's CRC is checked first: corrupt data never gets a fresh CRC.
"""

from __future__ import annotations

import struct
from typing import Any

from kafkacodec._types import Compression, compression_of
from kafkacodec.errors import InvalidCrcError

__all__ = ["down_convert", "recompress_codec", "recompress_batch", "recompress_all", "next_zstd_batch", "is_zstd_v2"]

_V2_HEADER = 61            # a v2 batch header; the records section follows
_ATTRIBUTES_AT = 21        # int16 attributes; the CRC-32C covers the batch from here
_ZSTD = 4


def recompress_codec(codec: Compression | int | str | None) -> Compression | None:
    """The codec to recompress zstd batches with, checked (None: do not recompress)."""
    if codec is None:
        return None
    chosen = compression_of(codec)
    if chosen == Compression.ZSTD:
        raise ValueError("recompress: zstd batches need another codec for magic 0 and 1 "
                         "(none, gzip, snappy or lz4)")
    return chosen


def is_zstd_v2(data: Any, position: int) -> bool:
    """Whether the entry at `position` (its first 23 bytes at least) is a zstd v2 batch."""
    if len(data) < position + _ATTRIBUTES_AT + 2 or data[position + 16] != 2:
        return False
    return bool(struct.unpack_from(">h", data, position + _ATTRIBUTES_AT)[0] & 7 == _ZSTD)


def recompress_batch(entry: Any, codec: Compression, position: int = 0) -> bytes:
    """One complete zstd v2 batch as the same batch compressed with `codec`."""
    from kafkacodec._compression import compress, decompress
    from kafkacodec._crc import crc32c

    view = memoryview(entry).cast("B")
    offset, = struct.unpack_from(">q", view, 0)
    stored, = struct.unpack_from(">I", view, 17)
    computed = crc32c(view[_ATTRIBUTES_AT:])
    if computed != stored:
        raise InvalidCrcError("CRC-32C mismatch in the zstd batch to recompress", stored=stored,
                              computed=computed, position=position, offset=offset)
    records = decompress(_ZSTD, 2, view[_V2_HEADER:])
    if codec != Compression.NONE:
        records = compress(codec, 2, records)
    out = bytearray(view[:_V2_HEADER])
    out += records
    struct.pack_into(">i", out, 8, len(out) - 12)                    # batch length: after the size field
    attributes, = struct.unpack_from(">h", out, _ATTRIBUTES_AT)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, (attributes & ~7) | int(codec))
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def next_zstd_batch(data: Any, start: int, end: int) -> int | None:
    """The position of the first complete zstd v2 batch among the complete entries of
    data[start:end] (entry headers only), or None."""
    position = start
    while position + 12 <= end:
        size = 12 + struct.unpack_from(">i", data, position + 8)[0]
        if size < 26 or position + size > end:
            return None
        if is_zstd_v2(data, position):
            return position
        position += size
    return None


def recompress_all(records: Any, codec: Compression) -> Any:
    """A record set with every zstd v2 batch recompressed (the buffer itself when none is)."""
    view = memoryview(records).cast("B")
    first = next_zstd_batch(view, 0, view.nbytes)
    if first is None:
        return records
    out = bytearray(view[:first])
    position = first
    while position + 12 <= view.nbytes:
        size = 12 + struct.unpack_from(">i", view, position + 8)[0]
        if size < 26 or position + size > view.nbytes:
            break                                   # a partial tail: the converter ignores it
        entry = view[position:position + size]
        out += recompress_batch(entry, codec, position) if is_zstd_v2(view, position) else entry
        position += size
    out += view[position:]
    return bytes(out)


def down_convert(records: Any, to_magic: int, first_offset: int = 0, *,
                 recompress: Compression | int | str | None = None) -> Any:
    """kafkacodec._convert.down_convert (Kafka's RecordsUtil.downConvert), and with
    `recompress` a codec ("lz4", "gzip", "snappy", "none") for the zstd batches that magic 0
    and 1 cannot hold (without it they raise UnsupportedCompressionError, as Kafka answers
    UNSUPPORTED_COMPRESSION_TYPE).  Returns ConvertedRecords."""
    from kafkacodec import _convert

    codec = recompress_codec(recompress)
    if codec is not None and to_magic < 2:
        records = recompress_all(_convert.records_buffer(records), codec)
    return _convert.down_convert(records, to_magic, first_offset)
