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

Kafka trusts its indexes; a copied, stale or hostile one can pass every check of the file
alone and still send a reader past records.  `CheckedOffsetIndex` is the one rule every reader
of a `.index` follows (serve's log view, the log-dir planner, `kafkacodec verify`): an entry is
checked against the segment the first time a reader relies on it (`check_offset_entry`), and an
entry that does not hold makes the whole file unusable.  `CheckedTimeIndex` is the same for a
`.timeindex` (`check_time_entry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec._format import CONTROL_FLAG, LOG_OVERHEAD, V0_RECORD_OVERHEAD, entry_head
from kafkacodec.errors import CorruptRecordError, DataError

__all__ = ["OffsetIndex", "TimeIndex", "AbortedTxn", "CheckedOffsetIndex", "CheckedTimeIndex", "parse_offset_index",
           "parse_time_index", "parse_txn_index", "read_txn_index", "checked_txn_index", "check_offset_entry",
           "check_time_entry", "check_txn_markers", "entry_fields", "load_offset_index", "ENTRY_FIELDS",
           "sanity_check", "build_indexes", "INDEX_SUFFIXES"]

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


# bytes [position, position + size) of a segment (fewer at its end)
SegmentReader = Callable[[int, int], Any]


def check_offset_entry(index: OffsetIndex, i: int, read: SegmentReader, segment_size: int,
                       base_offset: int) -> str | None:
    """Why entry i of a `.index` does not hold for its segment, or None when it does.

    Kafka appends an entry (O, P) when it appends batches at byte P whose largest offset is O
    (LogSegment.append; recovery and the cleaner index batch by batch), so the entry starting
    at P must be a whole entry with a valid checksum (not bytes inside a batch that happen to
    look like a header), its first offset above the entry before's (earlier appends hold the
    smaller offsets) and its last offset at most O.  A legacy compressed wrapper names only its
    last offset, which stands for its first."""
    from kafkacodec._records import MemoryRecords

    position, offset = int(index.positions[i]), int(index.offsets[i])
    framed = entry_head(read(position, LOG_OVERHEAD))
    if framed is None:
        return f"points at byte {position}, too near the segment's end ({segment_size} bytes) for an entry"
    size = framed[1]
    if not LOG_OVERHEAD + V0_RECORD_OVERHEAD <= size <= segment_size - position:
        return (f"points at byte {position}, where no entry starts (the bytes there would declare an entry "
                f"of {size} bytes in a segment of {segment_size})")
    try:
        rows = MemoryRecords(read(position, size)).index(check_crc=True)
    except DataError as exc:
        return f"points at byte {position}, where no entry starts ({exc})"
    if len(rows) != 1 or not rows["crc_valid"][0]:
        return f"points at byte {position}, where no entry with a valid checksum starts"
    last = int(rows["last_offset"][0])
    first = int(rows["base_offset"][0]) if rows["base_offset"][0] >= 0 else last
    before = int(index.offsets[i - 1]) if i else base_offset - 1
    if first <= before:
        return (f"points at byte {position}, whose entry starts at offset {first}, not after the entry before "
                f"(offset {before})")
    if last > offset:
        return f"points at byte {position}, whose entry holds offsets up to {last}, past the entry's offset"
    return None


class _CheckedEntries:
    """Entries of an index file checked against the segment once each, the first time a reader
    relies on one (`_problem` says why an entry does not hold)."""

    ENTRY = 0                            # bytes an entry
    source = ""

    def __init__(self, count: int):
        self._checked = np.zeros(count, dtype=bool)

    def __len__(self) -> int:
        return len(self._checked)

    def _problem(self, i: int) -> str | None:
        raise NotImplementedError

    def _check(self, i: int) -> int:
        """i (a negative i counts from the end), once entry i holds; CorruptRecordError naming
        the file and the entry otherwise."""
        i = i % len(self) if i < 0 else i
        if not self._checked[i]:
            why = self._problem(i)
            if why is not None:
                raise CorruptRecordError(f"{self.source} does not match its segment: entry {i} {why}",
                                         position=i * self.ENTRY)
            self._checked[i] = True
        return i


class CheckedOffsetIndex(_CheckedEntries):
    """A segment's `.index` whose entries are checked against the segment before a reader relies
    on them (check_offset_entry, each entry once): the one rule of serve and the log-dir reader.
    A method that needs an entry that does not hold raises CorruptRecordError naming the file
    and the entry; the reader then reads the segment without the index (as Kafka rebuilds a
    corrupt index), as it does for a file that does not parse."""

    ENTRY = OFFSET_ENTRY

    def __init__(self, index: OffsetIndex, read: SegmentReader, segment_size: int, base_offset: int,
                 source: str):
        super().__init__(len(index.positions))
        self.index = index
        self.read = read
        self.segment_size = segment_size
        self.base_offset = base_offset
        self.source = source

    def _problem(self, i: int) -> str | None:
        why = check_offset_entry(self.index, i, self.read, self.segment_size, self.base_offset)
        return None if why is None else f"(offset {int(self.index.offsets[i])}) {why}"

    def position(self, i: int) -> int:
        """Entry i's position, once the entry is checked; CorruptRecordError when it does not hold."""
        return int(self.index.positions[self._check(i)])

    def start_position(self, offset: int) -> int:
        """OffsetIndex.start_position through a checked entry: where to start reading for `offset`."""
        i = int(np.searchsorted(self.index.offsets, offset, side="right")) - 1
        return self.position(i) if i >= 0 else 0

    def end_position(self, offset: int) -> int | None:
        """OffsetIndex.end_position through a checked entry: from there every entry holds offsets
        >= `offset` (None: the index does not reach that far)."""
        i = int(np.searchsorted(self.index.offsets, offset - 1, side="left"))
        return self.position(i + 1) if i + 1 < len(self) else None

    def positions_between(self, start: int, end: int) -> list[int]:
        """The positions of the entries strictly inside (start, end), not yet checked (the caller
        checks the ones it uses, through position_at)."""
        return [int(p) for p in self.index.positions if start < p < end]

    def position_at(self, position: int) -> int:
        """The entry at `position` (one of positions_between), checked."""
        return self.position(int(np.searchsorted(self.index.positions, position)))

    @property
    def last_position(self) -> int:
        """The last entry's position, checked (0 without entries): the walk to the segment's end
        starts there."""
        return self.position(len(self) - 1) if len(self) else 0


def load_offset_index(data: Any, read: SegmentReader, segment_size: int, base_offset: int,
                      source: str) -> CheckedOffsetIndex:
    """parse_offset_index, and the first and last entries checked at once (a reader walks from the
    last to the segment's end, and a file whose ends do not hold is not worth keeping)."""
    checked = CheckedOffsetIndex(parse_offset_index(data, base_offset, segment_size, source), read,
                                 segment_size, base_offset, source)
    if len(checked):
        checked.position(0)
        checked.last_position
    return checked


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


# the header of the entry holding an offset (the first whose last offset reaches it), or None:
# ENTRY_FIELDS (base_offset -1 for a legacy compressed wrapper, control_type -1 when unknown)
ENTRY_FIELDS = ("base_offset", "last_offset", "max_timestamp", "attributes", "producer_id", "control_type")
EntryHolding = Callable[[int], "dict[str, int] | None"]


def entry_fields(rows: Any, j: int) -> dict[str, int]:
    """ENTRY_FIELDS of row j of a header table (scan_entries, Records.index, serve's table)."""
    return {name: int(rows[name][j]) for name in ENTRY_FIELDS}


def check_time_entry(times: TimeIndex, j: int, entry_at: EntryHolding) -> str | None:
    """Why entry j of a `.timeindex` does not hold for its segment, or None when it does.

    Kafka appends (T, O) with T the largest timestamp appended so far and O the offset it was
    appended at (LogSegment.append: the offset of the record or, since recovery and newer
    brokers, the last offset of the batch holding it), so the entry holding O must have
    largest timestamp T exactly.  An entry that names another batch's offset, or a timestamp
    that batch does not have, would start a search for a time past records at or after it."""
    timestamp, offset = int(times.timestamps[j]), int(times.offsets[j])
    found = entry_at(offset)
    if found is None:
        return f"names offset {offset}, which no entry of the segment holds"
    first, last, largest = found["base_offset"], found["last_offset"], found["max_timestamp"]
    if first > offset:
        return f"names offset {offset}, which no entry of the segment holds (the next one starts at {first})"
    if largest != timestamp:
        return (f"says offset {offset} was appended with largest timestamp {timestamp}, but the entry "
                f"holding it (offsets up to {last}) has {largest}")
    return None


class CheckedTimeIndex(_CheckedEntries):
    """A segment's `.timeindex` whose entries are checked against the segment before a reader
    relies on them (check_time_entry, each entry once): the one rule of serve's ListOffsets and
    the log-dir reader's timestamps.  Used for rolled segments only (an active segment's
    largest timestamp is not final).  A method that needs an entry that does not hold raises
    CorruptRecordError naming the file and the entry; the reader then walks the segment."""

    ENTRY = TIME_ENTRY

    def __init__(self, times: TimeIndex, entry_at: EntryHolding, source: str):
        super().__init__(len(times.timestamps))
        self.times = times
        self.entry_at = entry_at
        self.source = source

    def _problem(self, j: int) -> str | None:
        why = check_time_entry(self.times, j, self.entry_at)
        return None if why is None else f"(timestamp {int(self.times.timestamps[j])}) {why}"

    def entry(self, j: int) -> tuple[int, int]:
        """(timestamp, offset) of entry j, once checked; CorruptRecordError when it does not hold."""
        j = self._check(j)
        return int(self.times.timestamps[j]), int(self.times.offsets[j])

    def lookup(self, timestamp: int) -> int:
        """TimeIndex.lookup through a checked entry: the offset to search for `timestamp` from."""
        j = int(np.searchsorted(self.times.timestamps, timestamp, side="right")) - 1
        return self.entry(j)[1] if j >= 0 else self.times.base_offset

    @property
    def largest(self) -> int | None:
        """The last entry's timestamp, checked: a rolled segment's largest timestamp."""
        return self.entry(-1)[0] if len(self) else None


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


def check_txn_markers(entries: list[tuple[int, int, int]], entry_at: EntryHolding, source: str) -> None:
    """Each entry of a checked `.txnindex` against its segment: the offset it names as its ABORT
    marker holds one (a control batch of that producer whose one record is an ABORT), else
    CorruptRecordError naming the entry.  An entry naming another producer's batch, or a
    COMMIT, would drop committed records from read_committed."""
    for i, (pid, first, last) in enumerate(entries):
        found = entry_at(last)
        if (found is None or found["base_offset"] != last or found["producer_id"] != pid
                or not found["attributes"] & CONTROL_FLAG or found["control_type"] != 0):
            raise CorruptRecordError(f"{source} does not match its segment: entry {i} names offset {last} as "
                                     f"producer {pid}'s ABORT marker, which it is not", position=i * TXN_ENTRY + 18)


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
