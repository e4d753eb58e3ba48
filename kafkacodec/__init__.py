"""kafkacodec: Kafka's record formats (magic 0, 1, 2; every codec) read, written and converted
at memory speed by a typed Cython core."""

from kafkacodec import _crc
from kafkacodec._convert import ConvertedRecords, RecordConversionStats, down_convert
from kafkacodec._types import Compression, ControlType, TimestampType
from kafkacodec.lazy import LazyDownConvertRecords
from kafkacodec.errors import (
    BufferReleasedError,
    CorruptRecordError,
    InvalidCrcError,
    KafkaCodecError,
    MemoryPoolError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
)

__version__ = "0.1.0"

#: The compiled core is required (there is no pure-Python fallback); this says it is loaded.
__compiled__ = _crc.__file__.endswith((".so", ".pyd"))

__all__ = [
    "Compression",
    "ControlType",
    "TimestampType",
    "KafkaCodecError",
    "CorruptRecordError",
    "InvalidCrcError",
    "UnsupportedCompressionError",
    "UnsupportedVersionError",
    "RecordTooLargeError",
    "BufferReleasedError",
    "MemoryPoolError",
    "down_convert",
    "ConvertedRecords",
    "RecordConversionStats",
    "LazyDownConvertRecords",
]
