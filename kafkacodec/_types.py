"""Kafka's enumerations: compression codec ids and timestamp types."""

from __future__ import annotations

import enum

__all__ = ["Compression", "TimestampType", "ControlType", "compression_of"]


class Compression(enum.IntEnum):
    """Codec ids as stored in the low 3 bits of the attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# The members by stored id, for the compiled readers' per-record properties (a tuple index,
# not an enum call): TIMESTAMP_TYPES[id + 1] (ids -1, 0, 1), COMPRESSIONS[id] (ids 0-4).
TIMESTAMP_TYPES: tuple[TimestampType, ...] = tuple(TimestampType)
COMPRESSIONS: tuple[Compression, ...] = tuple(Compression)


class ControlType(enum.IntEnum):
    """Control record types (key: int16 version, int16 type)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def compression_of(codec: Compression | int | str | None) -> Compression:
    """Accept a Compression, its id, or a name such as "lz4" (None means no compression)."""
    from kafkacodec.errors import UnsupportedCompressionError

    if codec is None:
        return Compression.NONE
    if isinstance(codec, str):
        try:
            return Compression[codec.strip().upper()]
        except KeyError:
            names = ", ".join(c.name.lower() for c in Compression)
            raise UnsupportedCompressionError(
                f"unknown compression {codec!r}: use one of {names}") from None
    try:
        return Compression(int(codec))
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression type id {codec}") from None


def recompress_codec_id(codec: Compression | int | str | None) -> int:
    """The codec id zstd batches are rebuilt with when converted to magic 0 or 1 (which have
    no zstd); -1 for None: refuse them, as Kafka does (UNSUPPORTED_COMPRESSION_TYPE)."""
    if codec is None:
        return -1
    chosen = compression_of(codec)
    if chosen == Compression.ZSTD:
        raise ValueError("recompress: zstd batches need another codec for magic 0 and 1 "
                         "(none, gzip, snappy or lz4)")
    return int(chosen)
