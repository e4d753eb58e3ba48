"""The error hierarchy: every error kafkacodec raises for its own reasons derives from
KafkaCodecError, in three kinds a caller can tell apart by class:

- bad data, DataError (a ValueError: the bytes given are a bad value): CorruptRecordError,
  InvalidCrcError, UnsupportedCompressionError, UnsupportedVersionError, RecordTooLargeError,
  InvalidRecordError (what a broker refuses to append), LogLayoutError (and its
  WriteConflictError).  Code that skips or reports corrupt input catches DataError, never more.
- misuse, MisuseError (a RuntimeError: the call is wrong in the object's state, whatever the
  data): BufferReleasedError (a view used after its buffer was released), ConcurrentUseError
  (an object that serves one call at a time entered from a second thread), MemoryPoolError
  (double release, a foreign buffer; also a ValueError, as it always was).
- FileTruncatedError: neither; another process cut a file while it was read.
- KafkaTimeoutError: neither (also a TimeoutError); a blocking call to a Kafka cluster did not
  finish within its deadline.
- AuthenticationError: neither; a peer's credentials were refused (a wrong password, an unknown
  user, a refused token) or a peer broke its side of a SASL exchange.  Its message never holds
  a secret.

A bad argument (a negative size, an unknown option) is a plain ValueError or TypeError, as in
Python.  A path that is not a regular file raises NotRegularFileError, an OSError like every
other unreadable input."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "KafkaCodecError",
    "DataError",
    "MisuseError",
    "CorruptRecordError",
    "InvalidCrcError",
    "UnsupportedCompressionError",
    "UnsupportedVersionError",
    "RecordTooLargeError",
    "InvalidRecordError",
    "BufferReleasedError",
    "FileTruncatedError",
    "ConcurrentUseError",
    "MemoryPoolError",
    "NotRegularFileError",
    "LogLayoutError",
    "KafkaTimeoutError",
    "WriteConflictError",
    "AuthenticationError",
]


class _Keep:
    """with_context's default: leave the field as it is."""

    def __repr__(self) -> str:
        return "KEEP"


_KEEP = _Keep()

_E = TypeVar("_E", bound=BaseException)


class KafkaCodecError(Exception):
    """Base class of every kafkacodec error.

    ``position`` is the byte position in the caller's buffer where the problem was found and
    ``offset`` the Kafka offset of the batch (or record) involved, when known (else None).
    ``reason`` is the message without them.  A layer that knows more (the file, the row, what to
    do next) adds it with `with_context`, the one way to do so.
    """

    reason: str
    position: int | None
    offset: int | None
    hint: str = ""               # what to do about it (with_context adds it)

    def __init__(self, message: str, *, position: int | None = None, offset: int | None = None):
        super().__init__(_message(message, position, offset, ""))
        self.reason = message
        self.position = position
        self.offset = offset

    def with_context(self, prefix: str = "", *, suffix: str = "", hint: str = "",
                     position: int | None | _Keep = _KEEP, offset: int | None | _Keep = _KEEP) -> Self:
        """A copy of this error with more context: the same class and every field (a subclass's
        too, such as InvalidCrcError's checksums or FileTruncatedError's path), `prefix` and
        `suffix` around the reason (say where: ``"file.log: "``), `position`/`offset` replaced
        when given, and `hint` (what to do about it) after the whole message.  The copy keeps
        this error's traceback and cause, and hides it as context: ``raise
        exc.with_context(...)`` inside ``except ... as exc`` shows one error."""
        new = _restore(type(self), (), dict(vars(self)))
        new.reason = prefix + self.reason + suffix
        if not isinstance(position, _Keep):
            new.position = position
        if not isinstance(offset, _Keep):
            new.offset = offset
        if hint:
            new.hint = f"{self.hint}. {hint}" if self.hint else hint
        new.args = (_message(new.reason, new.position, new.offset, new.hint),)
        new.__cause__ = self.__cause__
        new.__suppress_context__ = True
        return new.with_traceback(self.__traceback__)

    def __reduce__(self) -> tuple[object, ...]:
        # pickle (Spark ships errors between processes) keeps the class, message and fields
        # without calling __init__, whose keyword-only arguments differ by subclass
        return (_restore, (type(self), self.args, dict(vars(self))))


def _restore(cls: type[_E], args: tuple[object, ...], fields: dict[str, object]) -> _E:
    error = cls.__new__(cls)
    error.args = args
    vars(error).update(fields)
    return error


def _message(reason: str, position: int | None, offset: int | None, hint: str) -> str:
    parts = [reason]
    if position is not None:
        parts.append(f"at byte {position}")
    if offset is not None:
        parts.append(f"(batch offset {offset})")
    message = " ".join(parts)
    return f"{message}. {hint}" if hint else message


class DataError(KafkaCodecError, ValueError):
    """Base of the bad-data errors: the bytes (or files) given cannot be read as Kafka data."""


class MisuseError(KafkaCodecError, RuntimeError):
    """Base of the misuse errors: the call is wrong in the object's current state (released,
    busy, not its buffer); nothing was read or changed, and the data may be fine."""


class CorruptRecordError(DataError):
    """The bytes do not form a valid batch/record (bad length, truncated field, bad varint...)."""


class InvalidCrcError(CorruptRecordError):
    """A stored checksum does not match the bytes it covers; carries both values."""

    def __init__(self, message: str, *, stored: int, computed: int,
                 position: int | None = None, offset: int | None = None):
        super().__init__(f"{message}: stored crc {stored:#010x} != computed {computed:#010x}",
                         position=position, offset=offset)
        self.stored = stored
        self.computed = computed


class UnsupportedCompressionError(DataError):
    """The codec id is unknown, or not allowed for the magic (zstd needs magic 2)."""


class UnsupportedVersionError(DataError):
    """A magic or protocol version this operation cannot handle (or down-conversion disabled)."""


class RecordTooLargeError(DataError):
    """Data exceeds a size limit: decompression cap, ring capacity, produce max bytes."""


class InvalidRecordError(DataError):
    """Records Kafka refuses to append (its LogValidator; up_convert applies the same rules):
    ``error_code`` is the broker's answer (87 INVALID_RECORD, 32 INVALID_TIMESTAMP) and
    ``record_errors`` the (index in its batch, reason) of the first records refused, at most
    three, as Kafka's message lists them."""

    def __init__(self, message: str, *, error_code: int, record_errors: tuple[tuple[int, str], ...] = (),
                 position: int | None = None, offset: int | None = None):
        super().__init__(message, position=position, offset=offset)
        self.error_code = error_code
        self.record_errors = record_errors


class BufferReleasedError(MisuseError):
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


class ConcurrentUseError(MisuseError):
    """An object that serves one call at a time was entered while a call on it was running in
    another thread (or re-entered from a finaliser during one): a misuse, not bad data.  The
    message names the object and what to do instead; nothing was read or changed."""


class MemoryPoolError(MisuseError, ValueError):
    """Misuse of a memory pool: double release or a buffer the pool does not own.  (A ring
    whose pool refuses it its capacity raises it too, though that is a full pool.)"""


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


class LogLayoutError(DataError):
    """A log directory's files do not form one consistent log: segments that overlap (duplicate
    offsets), offsets missing between segments, an offset outside the log, or an entry named
    like a segment that cannot be read (a directory, a FIFO, a dangling link)."""


class KafkaTimeoutError(KafkaCodecError, TimeoutError):
    """A blocking call to a Kafka cluster (the consumer core's assign, commit, end_offsets...)
    did not finish within its deadline (Kafka's ``default.api.timeout.ms``, kafkacodec's
    ``default_api_timeout`` or the call's ``timeout=``).  ``call`` names the call, ``broker``
    the broker it last waited for (id, address, connection) and ``timeout`` the seconds it had;
    the message also says what that broker last did (no answer, connection refused...)."""

    def __init__(self, message: str, *, call: str, broker: str, timeout: float):
        super().__init__(message)
        self.call = call
        self.broker = broker
        self.timeout = timeout


class WriteConflictError(LogLayoutError):
    """A log-dir write that would make overlapping segments: its offsets are at or below a
    partition's last one, or another writer filled the target, or moved a partition's end,
    since this writer looked (checked again under the log directory's lock, before anything is
    renamed into place).  Nothing was written; the directory is as the other writer left it."""


class AuthenticationError(KafkaCodecError):
    """SASL authentication failed: wrong credentials, an unknown user, a refused or unobtainable
    OAUTHBEARER token, or a peer whose messages break the mechanism's exchange (Kafka answers
    each with SASL_AUTHENTICATION_FAILED, error code 58).  The message says which, never with a
    password, token or key in it; on the server side it is the same for an unknown user and a
    wrong password."""
