"""Conversion between magics (compiled): down-conversion (the eager loop and the chunk converter
used by lazy.py) and up-conversion to v2 batches."""

from collections.abc import Iterator
from typing import Any, overload

from typing_extensions import Buffer

from kafkacodec._records import MemoryRecords
from kafkacodec._types import Compression, TimestampType
from kafkacodec._writer import WriteBuffer

__all__ = ["DownConverter", "RecordConversionStats", "ConvertedRecords", "down_convert",
           "first_entry_above", "records_buffer", "release_file_pages", "up_convert",
           "up_convert_log"]

class RecordConversionStats:
    temporary_memory_bytes: int
    records_converted: int
    conversion_time_ns: int
    def __init__(self, temporary_memory_bytes: int = 0, records_converted: int = 0,
                 conversion_time_ns: int = 0) -> None: ...
    def add(self, other: RecordConversionStats) -> None: ...

class ConvertedRecords:
    records: MemoryRecords
    stats: RecordConversionStats
    def __init__(self, records: MemoryRecords, stats: RecordConversionStats) -> None: ...
    def __iter__(self) -> Iterator[Any]: ...

class DownConverter:
    to_magic: int
    first_offset: int
    stop_before_unsupported: bool
    zstd_codec: int
    def __init__(self, to_magic: int, first_offset: int = 0) -> None: ...
    def convert(self, data: Any, max_bytes: int = -1, max_batches: int = -1,
                position: int = 0) -> int: ...
    def take(self, again: bool = True) -> tuple[Buffer, int, int]: ...
    @property
    def output_size(self) -> int: ...
    def reserve(self, capacity: int) -> None: ...

def records_buffer(records: Any) -> memoryview: ...
def first_entry_above(data: Any, to_magic: int, position: int = 0) -> tuple[int, bool]: ...
def down_convert(records: Any, to_magic: int, first_offset: int = 0,
                 out: WriteBuffer | None = None, *,
                 recompress: Compression | int | str | None = None) -> ConvertedRecords: ...
def release_file_pages(data: Any) -> None: ...

class ChunkReader:
    position: int
    file_backed: bool
    def __init__(self, data: Any, converter: DownConverter, file_backed: bool = False) -> None: ...
    def step(self, max_bytes: int, again: bool = True) -> tuple[Buffer, int, int, int] | None: ...

class UpConverter:
    def __init__(self) -> None: ...

def up_convert(records: Any, *, base_offset: int = 0, compression: Compression | int | str | None = None,
               timestamp_type: TimestampType | int = ..., now: int | None = None,
               timestamp_before_max_ms: int | None = None, timestamp_after_max_ms: int | None = None,
               compacted: bool = False, partition_leader_epoch: int = -1) -> ConvertedRecords: ...
@overload
def up_convert_log(records: Any, *, max_batch_bytes: int = 1048576,
                   chunk_bytes: None = None) -> ConvertedRecords: ...
@overload
def up_convert_log(records: Any, *, max_batch_bytes: int = 1048576,
                   chunk_bytes: int) -> Iterator[ConvertedRecords]: ...
