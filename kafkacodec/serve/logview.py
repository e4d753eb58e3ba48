"""The log directories as the server sees them: topics, partitions and segments, kept up to
date while another process appends, rolls, deletes or truncates.

Discovery is `kafkacodec.logdir._layout.find_partitions` (a broker's `log.dirs` layout, Kafka's
tiered-storage names, several directories merged); topic ids come from `partition.metadata`
(logdir/partition_metadata.py), the log start from `log-start-offset-checkpoint`.

Per segment, where offsets are found:
- a rolled segment with a valid `.index` is searched through it plus a short header walk, as
  Kafka does; its entries are checked against the segment before they are relied on, by the
  rule the log-dir reader follows too (logdir/indexes.py, CheckedOffsetIndex: the first and
  last at once, any other the first time a fetch seeks through it), and one that does not hold
  drops the file;
- otherwise, and always for the active (last) segment, the index is rebuilt in memory: a table
  of every entry header (position, size, base and last offset, max timestamp, magic,
  attributes), read once and extended as the file grows.
- ListOffsets by time uses a rolled segment's `.timeindex` the same way (CheckedTimeIndex).
Header walks go through `FileRecords.index()` on the segment's guarded mapping, so a file cut
by another process raises FileTruncatedError (never SIGBUS); the partition is then reloaded.

read_committed needs each partition's aborted transactions and the transactions still open at
its end (the last stable offset), found by the rule the log-dir reader follows too
(logdir/_txn.py): a rolled segment whose `.index` loads, whose `.txnindex` holds for it (whole
entries, version 0, markers in order, inside the segment and each an ABORT of its producer) and
after which Kafka left a valid producer `.snapshot` is not walked at all; every other segment
(the active one, a missing or invalid file: Kafka writes no `.txnindex` for a segment without
aborts) has its transactional batch headers walked, as Kafka rebuilds the index.  An invalid
file is logged and counted once (IndexUse, the metrics).

Not thread-safe: the server's network thread owns it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec._convert import release_file_pages
from kafkacodec._format import LOG_OVERHEAD
from kafkacodec._records import FileRecords
from kafkacodec.errors import CorruptRecordError, FileTruncatedError, KafkaCodecError
from kafkacodec.logdir._layout import PartitionFiles, find_partitions
from kafkacodec.logdir._txn import TxnState, follow
from kafkacodec.logdir.indexes import (CheckedOffsetIndex, CheckedTimeIndex, check_txn_markers, checked_txn_index,
                                       entry_fields, load_offset_index, parse_time_index)
from kafkacodec.logdir.partition_metadata import read_partition_metadata
from kafkacodec.logdir.snapshots import SNAPSHOT_SUFFIX, open_transactions

__all__ = ["LogView", "Topic", "Partition", "Segment", "ReadRange", "StorageError", "IndexUse",
           "stable_topic_id"]

log = logging.getLogger("kafkacodec.serve")

WINDOW = 256 * 1024                 # bytes of entry headers walked per FileRecords.index() call
_COLUMNS: tuple[tuple[str, type], ...] = (
    ("position", np.int64), ("size", np.int64), ("base_offset", np.int64), ("last_offset", np.int64),
    ("max_timestamp", np.int64), ("magic", np.int8), ("attributes", np.int16), ("producer_id", np.int64),
    ("control_type", np.int8))
_ENTRY_HEAD = struct.Struct(">qi")


class StorageError(Exception):
    """A partition's files cannot be read right now (removed, cut, unreadable); the fetch
    answers KAFKA_STORAGE_ERROR (NOT_LEADER_OR_FOLLOWER before Fetch v6) and the client
    retries."""


def stable_topic_id(name: str) -> uuid.UUID:
    """The topic id of a topic without partition.metadata: derived from its name, so it is the
    same after a restart (Fetch v13+ and Metadata v10+ name topics by id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kafkacodec-serve:{name}")


class IndexUse:
    """Where read_committed's transactions came from, and the index files found invalid (each
    logged and counted once, however often its partition reloads): the serve metrics read it."""

    def __init__(self) -> None:
        self.txn_segments = {"txnindex": 0, "rebuilt": 0}   # rolled segments, by source
        self.invalid: dict[str, int] = {}                    # suffix -> files found invalid
        self._warned: set[str] = set()

    def invalid_file(self, suffix: str, path: str, why: object) -> None:
        if path in self._warned:
            return
        self._warned.add(path)
        self.invalid[suffix] = self.invalid.get(suffix, 0) + 1
        log.warning("%s; read without it (as Kafka rebuilds a corrupt index)", why)


class _Table:
    """Entry headers of a segment in growable numpy columns (the index rebuilt in memory)."""

    def __init__(self) -> None:
        self.n = 0
        self.cols: dict[str, Any] = {name: np.zeros(64, dtype) for name, dtype in _COLUMNS}

    def append(self, rows: Any) -> None:
        k = len(rows)
        if not k:
            return
        if self.n + k > len(self.cols["position"]):
            capacity = max(2 * len(self.cols["position"]), self.n + k)
            for name, column in self.cols.items():
                grown = np.zeros(capacity, column.dtype)
                grown[:self.n] = column[:self.n]
                self.cols[name] = grown
        end = self.n + k
        self.cols["position"][self.n:end] = rows["position"]
        self.cols["size"][self.n:end] = rows["size_in_bytes"]
        self.cols["base_offset"][self.n:end] = rows["base_offset"]
        self.cols["last_offset"][self.n:end] = rows["last_offset"]
        self.cols["max_timestamp"][self.n:end] = rows["max_timestamp"]
        for name in ("magic", "attributes", "producer_id", "control_type"):
            self.cols[name][self.n:end] = rows[name]
        self.n = end

    def __getitem__(self, name: str) -> Any:
        return self.cols[name][:self.n]


@dataclass
class ReadRange:
    """Bytes [position, position + size) of a segment answer a fetch; `first_size` is the size
    of the first entry (the one holding the fetch offset)."""
    segment: Segment
    position: int
    size: int
    first_size: int


class Segment:
    """One `.log` file and what is known of its entries."""

    def __init__(self, path: str, base_offset: int, indexes: dict[str, str], use: IndexUse | None = None):
        self.path = path
        self.base_offset = base_offset
        self.indexes = indexes                  # ".index"/".timeindex"/".txnindex" -> path
        self.use = use or IndexUse()
        self.aborted: list[tuple[int, int, int]] | None = None   # from the .txnindex, once read
        self.aborted_read = False
        self.inode: tuple[int, int] | None = None
        self.size = -1                          # bytes the mapping covers
        self.records: FileRecords | None = None
        self.table: _Table | None = None        # the index rebuilt in memory
        self.sparse: CheckedOffsetIndex | None = None  # Kafka's .index (rolled segments)
        self.times: CheckedTimeIndex | None = None      # Kafka's .timeindex (rolled segments)
        self.times_read = False
        self.index_loaded: bool | None = None  # .index checked for the .txnindex (when not loaded)
        self.end = 0                            # after the last complete entry
        self.last_offset = base_offset - 1
        self.damaged: str | None = None
        self.active = False                     # the last segment: always indexed in memory

    # --- loading -------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Load on first use (a segment nobody reads is never walked)."""
        if self.inode is None:
            self.refresh()

    def refresh(self) -> bool:
        """Follow the file: a new inode or a smaller size reloads, a larger size extends.
        True when what was known of it was dropped (the partition's transactions too)."""
        active = self.active
        dropped = False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StorageError(f"{self.path} was removed") from None
        inode = (st.st_dev, st.st_ino)
        if self.inode is not None and (inode != self.inode or st.st_size < self.size):
            log.info("%s was %s: reloading", self.path,
                     "replaced" if inode != self.inode else f"cut to {st.st_size} bytes")
            self.reset()
            dropped = True
        if self.inode is None:
            self.inode = inode
            self._load(active)
        elif st.st_size > self.size:
            self._map()
            if self.sparse is not None:         # a rolled segment grew: index it in memory
                self.sparse, self.times, self.times_read = None, None, True
                self._scan_all()
            else:
                self._extend()
        return dropped

    def reset(self) -> None:
        self.close()
        self.inode, self.size, self.records = None, -1, None
        self.table, self.sparse, self.times, self.times_read = None, None, None, False
        self.index_loaded = None
        self.end, self.last_offset, self.damaged = 0, self.base_offset - 1, None
        self.aborted, self.aborted_read = None, False

    def close(self) -> None:
        """Forget the mapping (a response still sending from it holds its own reference)."""
        self.records = None

    def _map(self) -> None:
        self.records = FileRecords.open(self.path)
        self.size = self.records.size_in_bytes

    def _load(self, active: bool) -> None:
        self._map()
        if not active and ".index" in self.indexes and self._use_index():
            return
        self._scan_all()

    def _scan_all(self) -> None:
        self.table = _Table()
        self.end, self.last_offset = 0, self.base_offset - 1
        self._extend()

    def _extend(self) -> None:
        assert self.table is not None
        for rows in self.walk(self.end, self.size):
            self.table.append(rows)
            self.end = int(rows["position"][-1] + rows["size_in_bytes"][-1])
            self.last_offset = max(self.last_offset, int(rows["last_offset"][-1]))

    def _read(self, position: int, size: int) -> Any:
        """Bytes of the mapped segment, for the index checks."""
        assert self.records is not None
        return memoryview(self.records)[position:position + size]

    def _use_index(self) -> bool:
        """Kafka's .index when valid (CheckedOffsetIndex: parsed, its first and last entries
        checked against the segment); the end found by a walk from the last entry."""
        path = self.indexes[".index"]
        try:
            with open(path, "rb") as file:
                index = load_offset_index(file.read(), self._read, self.size, self.base_offset, path)
        except (OSError, KafkaCodecError) as exc:
            self.use.invalid_file(".index", path, exc)
            return False
        self.sparse = index
        start = index.last_position
        self.end, self.last_offset = start, self.base_offset - 1
        for rows in self.walk(start, self.size):
            self.end = int(rows["position"][-1] + rows["size_in_bytes"][-1])
            self.last_offset = max(self.last_offset, int(rows["last_offset"][-1]))
        return True

    def _drop_index(self, exc: CorruptRecordError) -> None:
        """An entry of the .index does not hold: read the segment without it (the table)."""
        self.use.invalid_file(".index", self.indexes[".index"], exc)
        self.sparse = None
        self._scan_all()

    def time_index(self) -> CheckedTimeIndex | None:
        """Kafka's .timeindex of a rolled segment (CheckedTimeIndex), read once; None without a
        valid one."""
        self.ensure()
        path = self.indexes.get(".timeindex")
        if not self.times_read and not self.active and path is not None and self.damaged is None:
            self.times_read = True
            try:
                with open(path, "rb") as file:
                    self.times = CheckedTimeIndex(parse_time_index(file.read(), self.base_offset, path),
                                                  self._entry_holding, path)
            except (OSError, KafkaCodecError) as exc:
                self.use.invalid_file(".timeindex", path, exc)
        return self.times

    def _entry_holding(self, offset: int) -> dict[str, int] | None:
        """The header of the entry holding `offset` (indexes.ENTRY_FIELDS: the index checks)."""
        found = self.locate(offset)
        if found is None:
            return None
        rows = next(self.entries(found[0]), None)
        if rows is None or not len(rows["position"]):
            return None
        return entry_fields(rows, 0)

    def index_loads(self) -> bool:
        """Whether the segment's `.index` loads (its first and last entries hold): the
        condition for trusting its `.txnindex` (logdir/_txn.py)."""
        self.ensure()
        if self.sparse is not None:
            return True
        if self.index_loaded is None:
            self.index_loaded = False
            if ".index" in self.indexes and self.records is not None:
                try:
                    with open(self.indexes[".index"], "rb") as file:
                        load_offset_index(file.read(), self._read, self.size, self.base_offset, self.indexes[".index"])
                    self.index_loaded = True
                except (OSError, KafkaCodecError):
                    pass                          # (noted when the segment loaded)
        return self.index_loaded

    def time_start(self, timestamp: int) -> int:
        """Where to search this segment for `timestamp` from: the position of the offset the
        checked .timeindex gives, else 0."""
        times = self.time_index()
        if times is None:
            return 0
        try:
            return self.position_of(times.lookup(timestamp))
        except CorruptRecordError as exc:
            self._drop_times(exc)
            return 0

    def _drop_times(self, exc: CorruptRecordError) -> None:
        assert self.times is not None
        self.use.invalid_file(".timeindex", self.times.source, exc)
        self.times = None

    def txn_index(self) -> list[tuple[int, int, int]] | None:
        """(producer id, first offset, marker offset) of the transactions aborted in this
        segment, from its `.txnindex` when its `.index` loads and the file holds for it (checked
        once: checked_txn_index, check_txn_markers), else None."""
        if not self.aborted_read:
            self.ensure()
            self.aborted_read = True
            path = self.indexes.get(".txnindex")
            if path is not None and self.damaged is None and self.index_loads():
                try:
                    with open(path, "rb") as file:
                        entries = checked_txn_index(file.read(), self.base_offset, self.last_offset, path)
                    check_txn_markers(entries, self._entry_holding, path)
                    self.aborted = entries
                except (OSError, KafkaCodecError) as exc:
                    self.use.invalid_file(".txnindex", path, exc)
        return self.aborted

    # --- walking entry headers -----------------------------------------------------------------
    def walk(self, start: int, end: int) -> Iterator[Any]:
        """Rows of FileRecords.index() for the complete entries in [start, end), a window at a
        time; stops at a partial entry (a live writer's tail) or a malformed one (noted)."""
        records = self.records
        if records is None:
            return
        end = min(end, self.size)
        position = start
        while position < end:
            window = min(WINDOW, end - position)
            try:
                rows = records.slice(position, window).index(check_crc=False)
            except FileTruncatedError:
                raise                           # the partition reloads
            except KafkaCodecError as exc:
                self.damaged = f"{self.path}: {exc}"
                log.warning("%s; the partition's data ends there", self.damaged)
                return
            if not len(rows):
                if end - position < LOG_OVERHEAD:
                    return
                head = bytes(memoryview(records)[position:position + LOG_OVERHEAD])
                entry = LOG_OVERHEAD + _ENTRY_HEAD.unpack(head)[1]
                if entry <= window or entry > end - position:
                    return                      # a partial entry (or a cut file: zeros)
                rows = records.slice(position, entry).index(check_crc=False)
                if not len(rows):
                    return
            yield rows
            end_of_rows = int(rows["position"][-1] + rows["size_in_bytes"][-1])
            # the headers were read through the mapping: hand its pages back to the page cache
            release_file_pages(records.slice(position, end_of_rows - position))
            position = end_of_rows

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first entry whose last offset is >= `offset`, or None."""
        self.ensure()
        if offset > self.last_offset:
            return None
        if self.table is not None:
            last = self.table["last_offset"]
            i = int(np.searchsorted(last, offset, side="left"))
            if i < len(last):
                return int(self.table["position"][i]), int(self.table["size"][i])
            return None
        assert self.sparse is not None
        try:
            start = self.sparse.start_position(offset)
        except CorruptRecordError as exc:
            self._drop_index(exc)
            return self.locate(offset)
        for rows in self.walk(start, self.end):
            hits = np.flatnonzero(rows["last_offset"] >= offset)
            if len(hits):
                j = int(hits[0])
                return int(rows["position"][j]), int(rows["size_in_bytes"][j])
        return None

    def position_of(self, offset: int) -> int:
        """Where the entries holding offsets >= `offset` start (the end when there are none)."""
        found = self.locate(offset)
        return self.end if found is None else found[0]

    def entries(self, start: int = 0) -> Iterator[Any]:
        """Entry rows from `start` (an entry boundary) to the end, in windows."""
        self.ensure()
        if self.table is not None:
            i = int(np.searchsorted(self.table["position"], start, side="left"))
            if i < self.table.n:
                yield {name: self.table[name][i:] for name, _ in _COLUMNS}
            return
        for rows in self.walk(start, self.end):
            yield {"position": rows["position"], "size": rows["size_in_bytes"],
                   **{name: rows[name] for name, _ in _COLUMNS if name not in ("position", "size")}}

    def max_timestamp(self) -> int | None:
        """The largest batch timestamp, when known without a walk: a rolled segment's checked
        .timeindex says (as the log-dir reader's), else the table."""
        times = self.time_index()
        if times is not None and len(times):
            try:
                return times.largest
            except CorruptRecordError as exc:
                self._drop_times(exc)
        if self.table is not None:
            return int(self.table["max_timestamp"].max()) if self.table.n else -1
        return None


class Partition:
    """One partition directory: its segments, log start, log end and transactions."""

    def __init__(self, topic: str, index: int, files: PartitionFiles, use: IndexUse | None = None):
        self.topic = topic
        self.index = index
        self.use = use or IndexUse()
        self._snapshots: dict[int, dict[int, int] | None] = {}   # offset -> open transactions there
        self.directory = os.path.dirname(files.segments[0].path) if files.segments else ""
        self.segments: list[Segment] = []
        self.checkpoint: int | None = files.log_start
        self.dir_stamp: int | None = None
        self.txn: TxnState | None = None
        self._adopt(files)

    def _adopt(self, files: PartitionFiles) -> None:
        known = {s.path: s for s in self.segments}
        segments = []
        for found in files.segments:
            if found.unreadable:
                log.warning("%s is %s: not served", found.path, found.unreadable)
                continue
            current = known.pop(found.path, None) or Segment(
                found.path, found.base_offset, {suffix: entry.path for suffix, entry in found.indexes}, self.use)
            segments.append(current)
        for gone in known.values():
            gone.close()
        # a base offset twice (a copy in two log dirs): the first is served
        deduplicated: list[Segment] = []
        for seg in segments:
            if deduplicated and deduplicated[-1].base_offset == seg.base_offset:
                log.warning("%s duplicates %s: not served", seg.path, deduplicated[-1].path)
                continue
            deduplicated.append(seg)
        if deduplicated != self.segments:
            self.txn = None
            self._snapshots = {}
        for i, seg in enumerate(deduplicated):
            seg.active = i == len(deduplicated) - 1
        self.segments = deduplicated
        if files.log_start is not None:
            self.checkpoint = files.log_start

    def refresh(self) -> None:
        """Follow the directory: new, removed or replaced segments; appends to the last one.
        StorageError when the files cannot be read."""
        try:
            stamp = os.stat(self.directory).st_mtime_ns if self.directory else None
            if stamp != self.dir_stamp:
                self.dir_stamp = stamp
                parts, _ = find_partitions([self.directory])
                if parts:
                    self._adopt(parts[0])
            # the last segment grows; the one before may have taken its last appends
            for seg in self.segments[-2:]:
                if (seg.active or seg.inode is not None) and seg.refresh():
                    self.txn = None
        except FileTruncatedError as exc:
            log.info("%s; reloading %s-%d", exc, self.topic, self.index)
            self.reload()
        except (OSError, KafkaCodecError) as exc:
            raise StorageError(f"{self.topic}-{self.index}: {exc}") from exc

    def reload(self) -> None:
        for seg in self.segments:
            seg.reset()
        self.txn = None
        self._snapshots = {}
        self.dir_stamp = None
        try:
            self.refresh()
        except FileTruncatedError as exc:
            raise StorageError(f"{self.topic}-{self.index}: {exc}") from exc

    # --- offsets -------------------------------------------------------------------------------
    @property
    def log_start(self) -> int:
        first = self.segments[0].base_offset if self.segments else self.log_end
        return max(first, self.checkpoint) if self.checkpoint is not None else first

    @property
    def log_end(self) -> int:
        """The high watermark: the offset after the last complete entry (the last segment's
        base offset while it holds none)."""
        if not self.segments:
            return self.checkpoint or 0
        last = self.segments[-1]
        last.ensure()
        return max(last.last_offset + 1, last.base_offset)

    def in_range(self, offset: int) -> bool | None:
        """Whether a fetch at `offset` is inside the log (None: not known yet, see upstream.py)."""
        return self.log_start <= offset <= self.log_end

    def list_offset(self, timestamp: int, committed: bool,
                    on_done: Callable[[tuple[int, int] | None, BaseException | None], None]) -> None:
        """ListOffsets' answer, called back at once (the view's interface: serve --upstream
        calls back once the cluster answered): `on_done(offset_at(...), None)`, or
        `on_done(None, error)` (StorageError, OSError) when the files cannot be read."""
        try:
            self.refresh()
            found = self.offset_at(timestamp, committed)
        except (StorageError, OSError) as exc:
            on_done(None, exc)
            return
        on_done(found, None)

    def offset_at(self, timestamp: int, committed: bool) -> tuple[int, int] | None:
        """ListOffsets' answer as (timestamp, offset): -1 latest (the last stable offset for
        read_committed), -2 and -4 earliest, -3 the largest timestamp, -5 (earliest not yet in
        tiered storage: none here) nothing, else the first record at or after the time."""
        if timestamp == -1:
            return -1, self.last_stable_offset() if committed else self.log_end
        if timestamp in (-2, -4):
            return -1, self.log_start
        if timestamp == -3:
            return self.max_timestamp_offset() or (-1, -1)
        if timestamp < 0:
            return None
        return self.offset_for_timestamp(timestamp)

    def segment_for(self, offset: int) -> int:
        """Index of the last segment whose base offset is <= offset (0 when none)."""
        bases = [s.base_offset for s in self.segments]
        return max(0, int(np.searchsorted(bases, offset, side="right")) - 1)

    def read(self, offset: int, max_bytes: int, min_one: bool, upper: int) -> ReadRange | None:
        """The bytes answering a fetch at `offset` (< upper): from the entry holding it, at most
        `max_bytes` (or the whole first entry when `min_one`) and no entry at or above `upper`
        (the high watermark or the last stable offset).  Kafka reads one segment per fetch.
        None when no entry holds an offset in [offset, upper)."""
        i = self.segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            found = seg.locate(offset)
            if found is not None:
                position, first_size = found
                limit = seg.position_of(upper) if upper <= seg.last_offset else seg.end
                if limit <= position:
                    return None
                size = min(max_bytes, limit - position)
                if min_one:
                    size = max(size, min(first_size, limit - position))
                return ReadRange(seg, position, max(size, 0), first_size)
            i += 1
            if i < len(self.segments) and self.segments[i].base_offset >= upper:
                return None
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: (timestamp, offset) of the first record at or after the
        log start whose timestamp is >= `timestamp` (the .timeindex narrows the walk)."""
        start = self.log_start
        for seg in self.segments[self.segment_for(start):]:
            largest = seg.max_timestamp()
            if largest is not None and largest < timestamp and seg is not self.segments[-1]:
                continue
            for rows in seg.entries(seg.time_start(timestamp)):
                for j in np.flatnonzero(rows["max_timestamp"] >= timestamp):
                    found = self._first_record(seg, int(rows["position"][j]), int(rows["size"][j]),
                                               lambda r: r.timestamp >= timestamp and r.offset >= start)
                    if found is not None:
                        return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3): (timestamp, offset) of the first record holding the
        log's largest timestamp."""
        best: tuple[int, Segment, int, int] | None = None
        for seg in self.segments:
            for rows in seg.entries(0):
                if not len(rows["max_timestamp"]):
                    continue
                j = int(np.argmax(rows["max_timestamp"]))
                ts = int(rows["max_timestamp"][j])
                if ts >= 0 and (best is None or ts > best[0]):
                    best = (ts, seg, int(rows["position"][j]), int(rows["size"][j]))
        if best is None:
            return None
        ts = best[0]
        return self._first_record(best[1], best[2], best[3], lambda r: r.timestamp == ts)

    @staticmethod
    def _first_record(seg: Segment, position: int, size: int, wanted: Any) -> tuple[int, int] | None:
        assert seg.records is not None
        for record in seg.records.slice(position, size).records():
            if wanted(record):
                return int(record.timestamp), int(record.offset)
        return None

    # --- transactions --------------------------------------------------------------------------
    def transactions(self) -> TxnState:
        """Open and aborted transactions (found once, then followed as the log grows) by the rule
        of logdir/_txn.py, this partition the source."""
        txn = self.txn
        if txn is None:
            txn = self.txn = TxnState()
        before = txn.from_index, txn.walked
        follow(txn, self)
        self.use.txn_segments["txnindex"] += txn.from_index - before[0]
        self.use.txn_segments["rebuilt"] += txn.walked - before[1]
        return txn

    # --- logdir._txn.TxnSource -----------------------------------------------------------------
    def segment_count(self) -> int:
        return len(self.segments)

    def txn_index(self, i: int) -> list[tuple[int, int, int]] | None:
        return self.segments[i].txn_index()

    def open_at(self, i: int) -> dict[int, int] | None:
        return self._open_at(self.segments[i].base_offset)

    def headers(self, i: int, position: int) -> Iterator[Any]:
        return self.segments[i].entries(position)

    def entry_bytes(self, i: int, position: int, size: int) -> Any:
        return bytes(self.segments[i]._read(position, size))

    def _open_at(self, offset: int) -> dict[int, int] | None:
        """producer id -> first offset of its open transaction at `offset`, from the producer
        snapshot Kafka took there (at the roll to the segment starting there); None when it is
        missing or invalid (an open transaction must have started before the snapshot)."""
        if offset in self._snapshots:
            return self._snapshots[offset]
        path = os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        found: dict[int, int] | None = None
        try:
            with open(path, "rb") as file:
                found = open_transactions(file.read(), offset, path)
        except FileNotFoundError:
            found = None
        except (OSError, KafkaCodecError) as exc:
            self.use.invalid_file(SNAPSHOT_SUFFIX, path, exc)
            found = None
        self._snapshots[offset] = found
        return found

    def last_stable_offset(self) -> int:
        lso = self.transactions().last_stable
        return self.log_end if lso is None else lso

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        return [(pid, first) for pid, first, last in self.transactions().aborted
                if last >= start and first < end]

    def close(self) -> None:
        for seg in self.segments:
            seg.close()


class Topic:
    def __init__(self, name: str):
        self.name = name
        self.topic_id = stable_topic_id(name)
        self.partitions: dict[int, Partition] = {}

    @property
    def is_internal(self) -> bool:
        return self.name in ("__consumer_offsets", "__transaction_state")


class LogView:
    """Every topic-partition under the given log directories.  `refresh()` picks up new
    partitions (cheap when no directory changed); a partition follows its own files
    (Partition.refresh)."""

    def __init__(self, log_dirs: list[str]):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        for d in self.log_dirs:
            if not os.path.isdir(d):
                raise FileNotFoundError(f"{d}: not a directory (give a Kafka log directory holding "
                                        "<topic>-<partition>/<base offset>.log files)")
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._stamps: dict[str, int] = {}
        self.index_use = IndexUse()
        self.refresh()

    def refresh(self) -> None:
        stamps = {}
        for d in self.log_dirs:
            try:
                stamps[d] = os.stat(d).st_mtime_ns
            except OSError:
                stamps[d] = -1
        if stamps == self._stamps:
            return
        self._stamps = stamps
        parts, problems = find_partitions(list(self.log_dirs))
        for problem in problems:
            log.warning("%s", problem.message)
        for files in parts:
            topic = self.topics.get(files.topic)
            if topic is None:
                topic = self.topics[files.topic] = Topic(files.topic)
            if files.partition not in topic.partitions and files.segments:
                part = Partition(files.topic, files.partition, files, self.index_use)
                topic.partitions[files.partition] = part
                self._topic_id(topic, part)
        self.by_id = {t.topic_id: t for t in self.topics.values()}

    @staticmethod
    def _topic_id(topic: Topic, part: Partition) -> None:
        try:
            found = read_partition_metadata(part.directory) if part.directory else None
        except (OSError, ValueError) as exc:
            log.warning("%s; the topic id of %s is derived from its name", exc, topic.name)
            return
        if found is not None:
            topic.topic_id = found

    def summary(self) -> tuple[int, str]:
        """(partitions served, a line saying what: topics, partitions, segments and bytes)."""
        parts = [p for t in self.topics.values() for p in t.partitions.values()]
        segments = [s.path for p in parts for s in p.segments]
        size = 0
        for path in segments:
            with contextlib.suppress(OSError):
                size += os.path.getsize(path)
        topics = sum(1 for t in self.topics.values() if t.partitions)
        return len(parts), (f"{topics} topics, {len(parts)} partitions, {len(segments)} segments "
                            f"({size / 1e6:.1f} MB) from {', '.join(self.log_dirs)}")

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(index)

    def close(self) -> None:
        for topic in self.topics.values():
            for part in topic.partitions.values():
                part.close()
