"""The error hierarchy: every failure kafkacodec raises on bad data derives from KafkaCodecError.

Misuse has classes of its own, distinct from bad data: BufferReleasedError (a view used after
its buffer was released), ConcurrentUseError (an object that serves one call at a time entered
from a second thread), MemoryPoolError.  A path that is not a regular file raises
NotRegularFileError, an OSError like every other unreadable input."""

from __future__ import annotations

__all__ = [
    "KafkaCodecError",
    "CorruptRecordError",
    "InvalidCrcError",
    "UnsupportedCompressionError",
    "UnsupportedVersionError",
    "RecordTooLargeError",
    "BufferReleasedError",
    "FileTruncatedError",
    "ConcurrentUseError",
    "MemoryPoolError",
    "NotRegularFileError",
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


class FileTruncatedError(KafkaCodecError):
    """A mapped file (a FileRecords segment, a log directory split) shrank while it was read:
    another process truncated it (Kafka truncates its active segment on follower truncation and
    recovery).  ``path`` is the file, ``size`` its size when the truncation was noticed,
    ``position`` where the read was (a byte position in the file)."""

    def __init__(self, message: str, *, path: str, size: int, position: int | None = None,
                 offset: int | None = None):
        super().__init__(message, position=position, offset=offset)
        self.path = path
        self.size = size

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only arguments: pickle (Spark ships errors between processes) needs this
        return (_file_truncated, (self.reason, self.path, self.size, self.position, self.offset))


def _file_truncated(reason: str, path: str, size: int, position: int | None,
                    offset: int | None) -> FileTruncatedError:
    return FileTruncatedError(reason, path=path, size=size, position=position, offset=offset)


class ConcurrentUseError(KafkaCodecError, RuntimeError):
    """An object that serves one call at a time was entered while a call on it was running in
    another thread (or re-entered from a finaliser during one): a misuse, not bad data.  The
    message names the object and what to do instead; nothing was read or changed."""


class MemoryPoolError(KafkaCodecError, ValueError):
    """Misuse of a memory pool: double release or a buffer the pool does not own."""


class NotRegularFileError(OSError):
    """A path that should be a segment file is something else (a FIFO, a device, a socket):
    refused at once instead of blocking or reading an endless stream.  An OSError, as the
    other unreadable inputs (a directory raises IsADirectoryError, a dangling link
    FileNotFoundError); ``filename`` is the path."""

    def __init__(self, message: str, filename: str | None = None):
        super().__init__(message)
        self.filename = filename

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.filename))


class LogLayoutError(KafkaCodecError):
    """A log directory's files do not form one consistent log: segments that overlap (duplicate
    offsets), offsets missing between segments, an offset outside the log, or an entry named
    like a segment that cannot be read (a directory, a FIFO, a dangling link)."""
