"""Down-conversion core (compiled): the eager loop and the chunk converter used by lazy.py."""

from collections.abc import Iterator
from typing import Any

from typing_extensions import Buffer

from kafkacodec._records import MemoryRecords
from kafkacodec._types import Compression
from kafkacodec._writer import WriteBuffer

__all__ = ["DownConverter", "RecordConversionStats", "ConvertedRecords", "down_convert",
           "first_entry_above", "records_buffer", "release_file_pages"]

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
