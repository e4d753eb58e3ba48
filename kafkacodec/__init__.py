"""kafkacodec: Kafka's record formats (magic 0, 1, 2; every codec) read, written and converted
at memory speed by a typed Cython core."""

try:
    from kafkacodec import _crc
except ImportError:    # the compiled core is absent: say where and what to do, once
    import importlib.util as _util
    if _util.find_spec("kafkacodec._crc") is not None:
        raise
    raise ImportError(
        f"kafkacodec at {__path__[0]} has no compiled core (a source checkout shadowing the "
        "installed wheel?): build it in place with `pip install -e .`, or run from another "
        "directory") from None
from kafkacodec._builder import MemoryRecordsBuilder
from kafkacodec._convert import (ConvertedRecords, RecordConversionStats, down_convert, up_convert,
                                 up_convert_log)
from kafkacodec._pool import MemoryPool, SimpleMemoryPool
from kafkacodec._records import FileRecords, MemoryRecords, Record, RecordBatch, Records
from kafkacodec._ring import ResponseRingBuffer
from kafkacodec._types import Compression, ControlType, TimestampType
from kafkacodec._writer import WriteBuffer
from kafkacodec.mirror import RawBatchesBuilder, RawBytesBatchRecord, shallow_records
from kafkacodec.errors import (
    AuthenticationError,
    BufferReleasedError,
    ConcurrentUseError,
    CorruptRecordError,
    DataError,
    FileTruncatedError,
    InvalidCrcError,
    InvalidRecordError,
    KafkaCodecError,
    KafkaTimeoutError,
    LogLayoutError,
    MemoryPoolError,
    MisuseError,
    NotRegularFileError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
    WriteConflictError,
)
from kafkacodec.lazy import LazyDownConvertRecords

__version__ = "0.1.0"

#: The compiled core is required (there is no pure-Python fallback); this says it is loaded.
__compiled__ = _crc.__file__.endswith((".so", ".pyd"))

__all__ = [
    "MemoryRecords",
    "FileRecords",
    "Records",
    "RecordBatch",
    "Record",
    "MemoryRecordsBuilder",
    "WriteBuffer",
    "Compression",
    "ControlType",
    "TimestampType",
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
    "RawBatchesBuilder",
    "RawBytesBatchRecord",
    "shallow_records",
    "MemoryPool",
    "SimpleMemoryPool",
    "ResponseRingBuffer",
    "down_convert",
    "up_convert",
    "up_convert_log",
    "ConvertedRecords",
    "RecordConversionStats",
    "LazyDownConvertRecords",
]
