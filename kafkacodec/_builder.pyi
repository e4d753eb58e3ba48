from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

from kafkacodec._types import Compression, ControlType, TimestampType
from kafkacodec._writer import WriteBuffer

_BytesLike = Buffer
_Header = tuple[str, Buffer | None]
# A pyarrow Array (binary/string/large_* for keys and values, int64/timestamp[ms] for
# timestamps); spelled Any so the stub needs no pyarrow type information.
_ArrowArray = Any

class MemoryRecordsBuilder:
    """Writes one batch at a time exactly as Kafka 3.8's MemoryRecordsBuilder; `build()` returns
    it and continues with the next batch (next offset, next base sequence).  One per thread: a
    call made while another runs raises ConcurrentUseError."""

    @property
    def magic(self) -> int: ...
    @property
    def compression(self) -> Compression: ...
    @property
    def compression_level(self) -> int | None: ...
    @property
    def timestamp_type(self) -> TimestampType: ...
    @property
    def log_append_time(self) -> int | None: ...
    @property
    def delete_horizon_ms(self) -> int | None: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control_batch(self) -> bool: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def uncompressed_size_in_bytes(self) -> int: ...
    @property
    def estimated_size_in_bytes(self) -> int: ...
    @property
    def is_full(self) -> bool: ...
    def __init__(
        self,
        magic: int = 2,
        compression: Compression | int | str | None = "none",
        timestamp_type: TimestampType | int = ...,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        log_append_time: int | None = None,
        partition_leader_epoch: int = -1,
        compression_level: int | None = None,
        *,
        is_control_batch: bool = False,
        delete_horizon_ms: int | None = None,
        max_batch_size: int | None = None,
    ) -> None: ...
    def append(
        self,
        timestamp: int,
        key: _BytesLike | None,
        value: _BytesLike | None,
        headers: Iterable[_Header] = (),
    ) -> None: ...
    def append_with_offset(
        self,
        offset: int,
        timestamp: int,
        key: _BytesLike | None,
        value: _BytesLike | None,
        headers: Iterable[_Header] = (),
    ) -> None: ...
    def append_many(
        self,
        timestamps: int | Sequence[int] | npt.NDArray[np.int64] | _ArrowArray,
        keys: Sequence[_BytesLike | None] | _ArrowArray | None,
        values: Sequence[_BytesLike | None] | _ArrowArray,
        headers: Sequence[Iterable[_Header]] | None = None,
        start: int = 0,
        stop: int | None = None,
    ) -> None: ...
    def append_control_record(
        self, timestamp: int, control_type: ControlType | int, value: _BytesLike | None
    ) -> None: ...
    def append_end_txn_marker(self, timestamp: int, commit: bool, coordinator_epoch: int) -> None: ...
    @classmethod
    def build_end_txn_marker(
        cls,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        base_offset: int = 0,
        timestamp: int | None = None,
        partition_leader_epoch: int = -1,
    ) -> bytes: ...
    @staticmethod
    def build_empty_batch(
        base_offset: int,
        last_offset: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        max_timestamp: int = -1,
        timestamp_type: TimestampType | int = ...,
        is_transactional: bool = False,
        is_control_batch: bool = False,
        partition_leader_epoch: int = -1,
    ) -> bytes: ...
    def has_room_for(
        self,
        timestamp: int,
        key: _BytesLike | None,
        value: _BytesLike | None,
        headers: Iterable[_Header] = (),
    ) -> bool: ...
    def build(self) -> bytes: ...
    def build_into(self, buffer: WriteBuffer | Buffer, position: int | None = None) -> int: ...
