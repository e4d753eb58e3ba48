import uuid
from collections.abc import Sequence
from typing import Any

from typing_extensions import Buffer

__all__ = ["FetchRequest", "FetchPartition", "decode_fetch_request", "encode_fetch_response",
           "MIN_VERSION", "MAX_VERSION"]

MIN_VERSION: int
MAX_VERSION: int

class FetchPartition:
    """One partition of a FetchRequest (-1 where a version lacks the field)."""

    @property
    def partition(self) -> int: ...
    @property
    def current_leader_epoch(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def last_fetched_epoch(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...

class FetchRequest:
    """A decoded FetchRequest: topics are (name or None, topic id or None, partitions)."""

    @property
    def api_version(self) -> int: ...
    @property
    def replica_id(self) -> int: ...
    @property
    def max_wait_ms(self) -> int: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def isolation_level(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def session_epoch(self) -> int: ...
    @property
    def topics(self) -> list[tuple[str | None, uuid.UUID | None, list[FetchPartition]]]: ...
    @property
    def forgotten_topics(self) -> list[tuple[str | None, uuid.UUID | None, list[int]]]: ...
    @property
    def rack_id(self) -> str: ...

def decode_fetch_request(data: Buffer, api_version: int, offset: int = 0,
                         size: int = -1, strict: bool = True, max_entries: int = ...) -> FetchRequest:
    """RecordTooLargeError past `max_entries` array elements (topics, partitions) in all."""

# (partition_index, error_code, high_watermark, last_stable_offset, log_start_offset,
#  aborted_transactions [(producer_id, first_offset)] or None, records_size or -1 for null)
_Partition = tuple[int, int, int, int, int, Sequence[tuple[int, int]] | None, int]

def encode_fetch_response(api_version: int, correlation_id: int,
                          topics: Sequence[tuple[str | None, Any, Sequence[_Partition]]], *,
                          throttle_time_ms: int = 0, error_code: int = 0,
                          session_id: int = 0) -> tuple[bytes, list[int], int]: ...
