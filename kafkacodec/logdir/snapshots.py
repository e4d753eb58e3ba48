"""Kafka's producer state snapshots (`<20-digit offset>.snapshot` in a partition directory): the
idempotent and transactional producers' state a broker saves at a segment roll and on shutdown,
so it need not rebuild it from the log.

Format (storage's ProducerSnapshot schema, version 1, big-endian): int16 version, uint32
CRC-32C of everything after the CRC, int32 count, then per producer int64 producer id, int16
epoch, int32 last sequence, int64 last offset, int32 offset delta, int64 timestamp, int32
coordinator epoch, int64 first offset of its open transaction (-1: none).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafkacodec._crc import crc32c
from kafkacodec.errors import CorruptRecordError, InvalidCrcError

__all__ = ["ProducerEntry", "open_transactions", "parse_producer_snapshot", "SNAPSHOT_SUFFIX"]

SNAPSHOT_SUFFIX = ".snapshot"
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int              # -1: no batch recorded
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction

    @property
    def first_sequence(self) -> int:
        """The last batch's first sequence: last - delta, wrapping below 0 to Integer.MAX_VALUE
        as Kafka's sequences do (DefaultRecordBatch.decrementSequence)."""
        if self.last_sequence < self.offset_delta:
            return _INT32_MAX - (self.offset_delta - self.last_sequence) + 1
        return self.last_sequence - self.offset_delta


def parse_producer_snapshot(data: Any, source: str) -> list[ProducerEntry]:
    """The entries of a snapshot; CorruptRecordError (InvalidCrcError for a checksum mismatch)
    naming `source` when it is not a version-1 snapshot or is cut short."""
    raw = bytes(memoryview(data).cast("B"))
    if len(raw) < _HEADER.size:
        raise CorruptRecordError(f"{source}: {len(raw)} bytes is too short for a producer snapshot "
                                 f"({_HEADER.size}-byte header)", position=0)
    version, stored, count = _HEADER.unpack_from(raw)
    if version != 1:
        raise CorruptRecordError(f"{source}: unknown producer snapshot version {version} (Kafka writes 1)",
                                 position=0)
    if count < 0 or _HEADER.size + count * _ENTRY.size > len(raw):
        raise CorruptRecordError(f"{source}: says {count} producers but holds "
                                 f"{(len(raw) - _HEADER.size) // _ENTRY.size}", position=6)
    computed = crc32c(raw[6:])
    if computed != stored:
        raise InvalidCrcError(f"{source}: producer snapshot CRC-32C mismatch",
                              position=2, stored=stored, computed=computed)
    return [ProducerEntry(*_ENTRY.unpack_from(raw, _HEADER.size + i * _ENTRY.size)) for i in range(count)]


def open_transactions(data: Any, offset: int, source: str) -> dict[int, int]:
    """producer id -> first offset of its transaction open at `offset`, from the snapshot Kafka
    took there (at the roll to the segment starting at `offset`); CorruptRecordError when the
    snapshot is invalid or lists a transaction starting at or after its own offset."""
    found = {e.producer_id: e.current_txn_first_offset
             for e in parse_producer_snapshot(data, source) if e.current_txn_first_offset >= 0}
    late = [first for first in found.values() if first >= offset]
    if late:
        raise CorruptRecordError(f"{source}: an open transaction starts at {late[0]}, not before the "
                                 f"snapshot's offset {offset}", position=0)
    return found
