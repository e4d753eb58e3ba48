"""The error hierarchy: every failure kafkacodec raises on bad data derives from KafkaCodecError."""

from __future__ import annotations

__all__ = [
    "KafkaCodecError",
    "CorruptRecordError",
    "InvalidCrcError",
    "UnsupportedCompressionError",
    "UnsupportedVersionError",
    "RecordTooLargeError",
    "BufferReleasedError",
    "MemoryPoolError",
    "LogLayoutError",
]


class KafkaCodecError(Exception):
    """Base class of every kafkacodec error.

    ``position`` is the byte position in the caller's buffer where the problem was found and
    ``offset`` the Kafka offset of the batch (or record) involved, when known (else None).
    """

    def __init__(self, message: str, *, position: int | None = None, offset: int | None = None):
        parts = [message]
        if position is not None:
            parts.append(f"at byte {position}")
        if offset is not None:
            parts.append(f"(batch offset {offset})")
        super().__init__(" ".join(parts))
        self.reason = message
        self.position = position
        self.offset = offset


class CorruptRecordError(KafkaCodecError, ValueError):
    """The bytes do not form a valid batch/record (bad length, truncated field, bad varint...)."""


class InvalidCrcError(CorruptRecordError):
    """A stored checksum does not match the bytes it covers; carries both values."""

    def __init__(self, message: str, *, stored: int, computed: int,
                 position: int | None = None, offset: int | None = None):
        super().__init__(f"{message}: stored crc {stored:#010x} != computed {computed:#010x}",
                         position=position, offset=offset)
        self.stored = stored
        self.computed = computed


class UnsupportedCompressionError(KafkaCodecError):
    """The codec id is unknown, or not allowed for the magic (zstd needs magic 2)."""


class UnsupportedVersionError(KafkaCodecError):
    """A magic or protocol version this operation cannot handle (or down-conversion disabled)."""


class RecordTooLargeError(KafkaCodecError):
    """Data exceeds a size limit: decompression cap, ring capacity, produce max bytes."""


class BufferReleasedError(KafkaCodecError):
    """A view was used after its buffer (ring slot, pool buffer, mapped file) was released."""


class MemoryPoolError(KafkaCodecError, ValueError):
    """Misuse of a memory pool: double release or a buffer the pool does not own."""


class LogLayoutError(KafkaCodecError):
    """A log directory's files do not form one consistent log: segments that overlap (duplicate
    offsets), offsets missing between segments, an offset outside the log, or an entry named
    like a segment that cannot be read (a directory, a FIFO, a dangling link)."""
