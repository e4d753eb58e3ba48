"""Kafka's per-segment index files, read and checked.

- `.index` (OffsetIndex): 8-byte entries, a 4-byte offset relative to the segment's base offset
  and the 4-byte file position of the batch (or batches) appended with that largest offset;
  one entry every `index.interval.bytes` (4096) of appended data.
- `.timeindex` (TimeIndex): 12-byte entries, an 8-byte timestamp and a 4-byte relative offset:
  every record at or before that offset has a timestamp at or below it (the segment's
  largest timestamp so far); a rolled segment ends with its overall largest.
- `.txnindex` (TransactionIndex): 34-byte entries, version (2 bytes, 0), producer id, first
  offset, last offset (its ABORT marker) and the last stable offset then (8 bytes each): the
  aborted transactions whose marker is in this segment.

All big-endian.  An active segment's index files are preallocated with zeros beyond their
entries: trailing all-zero entries are ignored as unused slots.  `parse_*` apply Kafka's
sanity checks and more (entries in order and inside the segment) and raise CorruptRecordError
naming the file and the byte; a reader ignores such a file with a warning (the log is read
without it, as Kafka rebuilds a corrupt index).  `build_indexes` writes what a broker would for
a segment (tests, writers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec.errors import CorruptRecordError

__all__ = ["OffsetIndex", "TimeIndex", "AbortedTxn", "parse_offset_index", "parse_time_index",
           "parse_txn_index", "read_txn_index", "checked_txn_index", "sanity_check", "build_indexes", "INDEX_SUFFIXES"]

OFFSET_ENTRY, TIME_ENTRY, TXN_ENTRY = 8, 12, 34
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
INDEX_INTERVAL_BYTES = 4096          # Kafka's index.interval.bytes default


def _entries(data: Any, size: int, source: str) -> np.ndarray:
    """The entries as rows of bytes, without trailing all-zero (preallocated) slots."""
    raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    if len(raw) % size:
        raise CorruptRecordError(f"{source}: {len(raw)} bytes is not a multiple of the {size}-byte "
                                 "entry size", position=len(raw) - len(raw) % size)
    rows = raw.reshape(-1, size)
    used = np.flatnonzero(rows.any(axis=1))
    return rows[:used[-1] + 1] if len(used) else rows[:0]


def _field(rows: np.ndarray, start: int, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(rows[:, start:start + width]).view(dtype).reshape(-1).astype(np.int64)


def _check_increasing(values: np.ndarray, what: str, entry: int, source: str, strict: bool) -> None:
    steps = np.diff(values)
    bad = np.flatnonzero(steps <= 0 if strict else steps < 0)
    if len(bad):
        i = int(bad[0]) + 1
        raise CorruptRecordError(f"{source}: entry {i} {what} {int(values[i])} goes back from "
                                 f"{int(values[i - 1])}", position=i * entry)


@dataclass(frozen=True)
class OffsetIndex:
    """Absolute offsets and file positions, both strictly increasing."""
    offsets: np.ndarray
    positions: np.ndarray

    def start_position(self, offset: int) -> int:
        """Where to start reading for `offset`: the position of the last entry at or below it
        (earlier batches hold only smaller offsets), or 0."""
        i = int(np.searchsorted(self.offsets, offset, side="right")) - 1
        return int(self.positions[i]) if i >= 0 else 0

    def end_position(self, offset: int) -> int | None:
        """A position from which every batch holds offsets >= `offset` (the entry after the
        first one at or above offset - 1), or None when the index does not reach that far."""
        i = int(np.searchsorted(self.offsets, offset - 1, side="left"))
        return int(self.positions[i + 1]) if i + 1 < len(self.positions) else None


@dataclass(frozen=True)
class TimeIndex:
    """Largest-timestamp-so-far entries: timestamps strictly increasing, offsets not decreasing."""
    timestamps: np.ndarray
    offsets: np.ndarray
    base_offset: int

    def lookup(self, timestamp: int) -> int:
        """Kafka's TimeIndex.lookup: the offset of the last entry whose timestamp is at most
        `timestamp` (records before it are older), or the base offset."""
        i = int(np.searchsorted(self.timestamps, timestamp, side="right")) - 1
        return int(self.offsets[i]) if i >= 0 else self.base_offset

    @property
    def largest(self) -> int | None:
        """The last entry's timestamp: a rolled segment's largest timestamp."""
        return int(self.timestamps[-1]) if len(self.timestamps) else None


def parse_offset_index(data: Any, base_offset: int, segment_size: int, source: str) -> OffsetIndex:
    rows = _entries(data, OFFSET_ENTRY, source)
    relative = _field(rows, 0, ">i4")
    positions = _field(rows, 4, ">i4")
    if len(rows) and (relative.min() < 0 or positions.min() < 0):
        i = int(np.flatnonzero((relative < 0) | (positions < 0))[0])
        raise CorruptRecordError(f"{source}: entry {i} has a negative offset or position", position=i * OFFSET_ENTRY)
    _check_increasing(relative, "offset", OFFSET_ENTRY, source, strict=True)
    _check_increasing(positions, "position", OFFSET_ENTRY, source, strict=True)
    if len(rows) and positions[-1] >= segment_size:
        raise CorruptRecordError(f"{source}: last entry points at byte {int(positions[-1])}, past the "
                                 f"segment's {segment_size} bytes", position=(len(rows) - 1) * OFFSET_ENTRY)
    return OffsetIndex(relative + base_offset, positions)


def parse_time_index(data: Any, base_offset: int, source: str) -> TimeIndex:
    rows = _entries(data, TIME_ENTRY, source)
    timestamps = _field(rows, 0, ">i8")
    relative = _field(rows, 8, ">i4")
    if len(rows) and relative.min() < 0:
        i = int(np.flatnonzero(relative < 0)[0])
        raise CorruptRecordError(f"{source}: entry {i} has a negative offset", position=i * TIME_ENTRY + 8)
    _check_increasing(timestamps, "timestamp", TIME_ENTRY, source, strict=True)
    _check_increasing(relative, "offset", TIME_ENTRY, source, strict=False)
    return TimeIndex(timestamps, relative + base_offset, base_offset)


@dataclass(frozen=True)
class AbortedTxn:
    """One `.txnindex` entry: an aborted transaction whose ABORT marker is in the segment."""
    version: int
    producer_id: int
    first_offset: int
    last_offset: int              # the ABORT marker's offset
    last_stable_offset: int       # the partition's last stable offset when it was aborted


def read_txn_index(data: Any, base_offset: int, source: str) -> list[AbortedTxn]:
    """Every entry of a `.txnindex`, checked (version 0, first <= last, ending in this segment)."""
    raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    if len(raw) % TXN_ENTRY:
        raise CorruptRecordError(f"{source}: {len(raw)} bytes is not a multiple of the {TXN_ENTRY}-byte "
                                 "entry size", position=len(raw) - len(raw) % TXN_ENTRY)
    rows = raw.reshape(-1, TXN_ENTRY)
    version = _field(rows, 0, ">i2")
    pid, first, last, lso = (_field(rows, start, ">i8") for start in (2, 10, 18, 26))
    for i in range(len(rows)):
        if version[i] != 0:
            raise CorruptRecordError(f"{source}: entry {i} has version {int(version[i])} (Kafka writes 0)",
                                     position=i * TXN_ENTRY)
        if not first[i] <= last[i] or last[i] < base_offset:
            raise CorruptRecordError(f"{source}: entry {i} spans offsets {int(first[i])}..{int(last[i])}, "
                                     f"not ending in this segment (base offset {base_offset})",
                                     position=i * TXN_ENTRY + 10)
    return [AbortedTxn(*map(int, row)) for row in zip(version, pid, first, last, lso)]


def parse_txn_index(data: Any, base_offset: int, source: str) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of each aborted transaction."""
    return [(t.producer_id, t.first_offset, t.last_offset) for t in read_txn_index(data, base_offset, source)]


def checked_txn_index(data: Any, base_offset: int, last_offset: int, source: str) -> list[tuple[int, int, int]]:
    """parse_txn_index for a reader that relies on the file instead of the segment's markers:
    also the order Kafka appends in (each entry's last offset above the one before) and every
    marker inside the segment (at most `last_offset`, its last offset).  CorruptRecordError
    naming the entry otherwise."""
    entries = parse_txn_index(data, base_offset, source)
    previous = base_offset - 1
    for i, (_, first, last) in enumerate(entries):
        if first < 0 or last <= previous or last > last_offset:
            raise CorruptRecordError(
                f"{source}: entry {i} spans offsets {first}..{last}: " + (
                    "a negative first offset" if first < 0 else
                    f"not after the entry before (ending at {previous})" if last <= previous else
                    f"past the segment's last offset {last_offset}"), position=i * TXN_ENTRY + 2)
        previous = last
    return entries


def sanity_check(suffix: str, data: Any, base_offset: int, source: str) -> int:
    """Kafka's own check of an index file when a broker loads a segment (OffsetIndex and
    TimeIndex `sanityCheck()`: a file that fails it is rebuilt): the size is a multiple of the
    entry; the last entry's offset is not below the base offset; a time index's last timestamp
    is not below its first.  As Kafka, every slot counts, the preallocated zero ones of an
    active segment's index too.  Returns the number of slots; CorruptRecordError otherwise."""
    size = {".index": OFFSET_ENTRY, ".timeindex": TIME_ENTRY}[suffix]
    raw = memoryview(data).cast("B")
    if len(raw) % size:
        raise CorruptRecordError(f"{source} is corrupt: {len(raw)} bytes is not a multiple of the {size}-byte "
                                 "entry size", position=len(raw) - len(raw) % size)
    slots = len(raw) // size
    if not slots:
        return 0
    last = bytes(raw[(slots - 1) * size:])
    if suffix == ".index":
        last_offset = base_offset + int.from_bytes(last[:4], "big", signed=True)
    else:
        first_ts = int.from_bytes(raw[:8], "big", signed=True)
        last_ts = int.from_bytes(last[:8], "big", signed=True)
        if last_ts < first_ts:
            raise CorruptRecordError(f"{source} is corrupt: its last timestamp {last_ts} is below its first "
                                     f"{first_ts}", position=(slots - 1) * size)
        last_offset = base_offset + int.from_bytes(last[8:], "big", signed=True)
    if last_offset < base_offset:
        raise CorruptRecordError(f"{source} is corrupt: its last offset {last_offset} is below the base offset "
                                 f"{base_offset}", position=(slots - 1) * size)
    return slots


def build_indexes(scan: dict[str, Any], base_offset: int, *, interval: int = INDEX_INTERVAL_BYTES,
                  rolled: bool = True) -> tuple[bytes, bytes]:
    """The `.index` and `.timeindex` bytes a broker writes for a segment appended one batch at a
    time (`scan` is scan_entries() of the segment): an entry once more than `interval` bytes
    were appended since the last one; a rolled segment's time index ends with its largest
    timestamp."""
    index, times = bytearray(), bytearray()
    since = 0
    largest, largest_at = -1, base_offset
    last_time = -1
    for pos, size, last, ts in zip(scan["position"], scan["size"], scan["last_offset"], scan["max_timestamp"]):
        if ts > largest:
            largest, largest_at = int(ts), int(last)
        if since > interval:
            index += int(last - base_offset).to_bytes(4, "big") + int(pos).to_bytes(4, "big")
            if largest > last_time:
                times += largest.to_bytes(8, "big", signed=True) + (largest_at - base_offset).to_bytes(4, "big")
                last_time = largest
            since = 0
        since += int(size)
    if rolled and largest > last_time:
        times += largest.to_bytes(8, "big", signed=True) + (largest_at - base_offset).to_bytes(4, "big")
    return bytes(index), bytes(times)
