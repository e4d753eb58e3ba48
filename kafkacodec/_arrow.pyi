"""Columnar decode of Kafka log entries into Arrow record batches (compiled module)."""

from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
from typing_extensions import Buffer

from kafkacodec._index import SCAN_FIELDS as SCAN_FIELDS
from kafkacodec._index import scan_entries as scan_entries  # the shallow index, re-exported

SCHEMA: pa.Schema
SCHEMA_NO_HEADERS: pa.Schema
HEADERS_TYPE: pa.DataType

class ArrowDecoder:
    """Log entries to Arrow record batches (Spark's Kafka schema); one per thread."""

    topic: str
    partition: int
    source: str
    trailing_bytes: int
    failed_entry: int
    def __init__(
        self,
        topic: str = "",
        partition: int = 0,
        *,
        validate_crc: bool = True,
        include_headers: bool = True,
        keep_control: bool = False,
        start_offset: int | None = None,
        end_offset: int | None = None,
        aborted: Iterable[tuple[int, int, int]] | None = None,
        max_rows: int = 65536,
        max_bytes: int = 16 << 20,
        source: str = "<buffer>",
        columns: Sequence[str] | None = None,
        views: bool = False,
    ) -> None: ...
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def crc_checked(self) -> int: ...
    @property
    def aborted_records(self) -> int: ...
    @property
    def entries(self) -> int: ...
    def decode(self, data: Buffer, start: int = 0, end: int = -1, base: int = 0) -> tuple[pa.RecordBatch, int]:
        """Entries of data[start:end] until the batch is full: (RecordBatch, next position).
        With views=True, ValueError for memory with a file behind it (an mmap, a FileRecords, a
        pyarrow memory map, a numpy memmap, a memfd, shared memory, any buffer over one), told
        by the process's mappings (/proc/self/maps); where those cannot be read, anything but
        bytes, bytearray and numpy arrays owning their data."""

def encode_v2(
    key: pa.Array | pa.ChunkedArray,
    value: pa.Array | pa.ChunkedArray,
    timestamp_ms: np.ndarray,
    headers: pa.Array | pa.ChunkedArray | None = None,
    *,
    codec: int = 0,
    batch_bytes: int = 16384,
    max_records: int = 1 << 20,
    base_offset: int = 0,
    level: int = -1,
    offsets: np.ndarray | None = None,
) -> tuple[bytes, int]: ...
