"""One partition's log, as Kafka's UnifiedLog and LogSegment hold it: its segments, the offset
and time lookups, the log start and end, the aborted transactions and the last stable offset.
The one engine under `kafkacodec serve` (a live log, followed while another process appends,
rolls, deletes or truncates), the Spark planner, `kafkacodec read` and `kafkacodec verify`; each
of those keeps only its own job.  Segments are reached through `Storage` (a local path or a
`pyarrow.fs` file system), found by `_layout.find_partitions`.

Per segment (LogSegment), where offsets are found, by one rule:
- a rolled segment with a valid `.index` is searched through it plus a short header walk, as
  Kafka does; its entries are checked against the segment before they are relied on
  (logdir/indexes.py, CheckedOffsetIndex: the first and last at once, any other the first time
  a lookup seeks through it), and one that does not hold drops the file;
- otherwise, and always for the active (last) segment of a live log, the index is rebuilt in
  memory: a table of every entry header (position, size, base and last offset, max timestamp,
  magic, attributes, producer id, record count, control type), read once when first needed and
  extended as the file grows;
- ListOffsets by time uses a rolled segment's `.timeindex` the same way (CheckedTimeIndex).
Header walks go through `scan_entries` on the segment's guarded mapping (local: a file cut by
another process raises FileTruncatedError, never SIGBUS) or on ranged reads (remote).  A walk
stops at a partial entry (an append in progress) and at a malformed one (`damaged`: the log's
readable data ends there; readers report the damage when they reach it).

read_committed: the aborted transactions and the ones still open at the end (the last stable
offset) by the rule of logdir/_txn.py, this log the source.  A `.txnindex` is trusted only while
its segment's `.index` loads and holds.  A tiered segment (a remote copy, KIP-405) carries the
producer snapshot Kafka took at its end: the state at the next segment's base offset.

An index or snapshot file found invalid goes to the log's `Notes` (serve logs and counts it once,
the planner reports a Problem); the file is then not used, as Kafka rebuilds a corrupt index.

Not thread-safe: one owner (the server's network thread, the planner on the driver).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkacodec._convert import release_file_pages
from kafkacodec._format import HEADER_SIZE_UP_TO_MAGIC, entry_head
from kafkacodec._index import SCAN_FIELDS, scan_entries
from kafkacodec._records import FileRecords, MemoryRecords
from kafkacodec.errors import CorruptRecordError, FileTruncatedError, KafkaCodecError
from kafkacodec.logdir._layout import SNAPSHOT_AT_END, PartitionFiles
from kafkacodec.logdir._layout import Segment as SegmentFiles
from kafkacodec.logdir._problems import not_a_segment
from kafkacodec.logdir._txn import TxnState, follow
from kafkacodec.logdir.deferred import DeferredReads
from kafkacodec.logdir.indexes import (CheckedOffsetIndex, CheckedTimeIndex, check_txn_markers, checked_txn_index,
                                       entry_fields, load_offset_index, parse_time_index)
from kafkacodec.logdir.snapshots import SNAPSHOT_SUFFIX, open_transactions
from kafkacodec.logdir.storage import Source

__all__ = ["PartitionLog", "LogSegment", "Notes", "ReadRange", "StorageError", "LOCAL_WINDOW", "REMOTE_WINDOW"]

log = logging.getLogger("kafkacodec.logdir")

LOCAL_WINDOW = 256 * 1024        # bytes of a mapped segment's entry headers walked per call
REMOTE_WINDOW = 16 << 20         # bytes of a remote segment read per ranged read


class StorageError(OSError):
    """A partition's files cannot be read right now (removed, cut, unreadable); `serve` answers
    KAFKA_STORAGE_ERROR (NOT_LEADER_OR_FOLLOWER before Fetch v6) and the client retries."""


class Notes:
    """Where a log reports what it finds; this one logs.  `invalid`: an index, time index,
    transaction index or producer snapshot that does not hold (the log reads without it);
    `damaged`: a segment's data ends early at a malformed entry."""

    def invalid(self, suffix: str, uri: str, exc: BaseException, position: int | None = None) -> None:
        log.warning("%s; read without it (as Kafka rebuilds a corrupt index)", exc)

    def damaged(self, uri: str, exc: KafkaCodecError) -> None:
        log.warning("%s; the partition's data ends there", exc)

    def skipped(self, uri: str, why: str) -> None:
        log.warning("%s is %s: not read", uri, why)


@dataclass
class ReadRange:
    """Bytes [position, position + size) of a segment answer a fetch; `first_size` is the size
    of the first entry (the one holding the fetch offset)."""
    segment: LogSegment
    position: int
    size: int
    first_size: int
    #: the entries' checksums are known to hold (a segment's are checked as they are read)
    crc_checked = False


class _Table:
    """Entry headers of a segment in growable numpy columns (the index rebuilt in memory)."""

    def __init__(self) -> None:
        self.n = 0
        self.cols: dict[str, Any] = {}         # SCAN_FIELDS, and "reach": the largest last offset
                                               # up to each row (sorted, for lookups)

    def append(self, rows: dict[str, Any]) -> None:
        k = len(rows["position"])
        if not k:
            return
        if not self.cols:
            self.cols = {name: np.zeros(max(64, k), rows[name].dtype) for name in SCAN_FIELDS}
            self.cols["reach"] = np.zeros(max(64, k), np.int64)
        if self.n + k > len(self.cols["position"]):
            capacity = max(2 * len(self.cols["position"]), self.n + k)
            for name, column in self.cols.items():
                grown = np.zeros(capacity, column.dtype)
                grown[:self.n] = column[:self.n]
                self.cols[name] = grown
        end = self.n + k
        for name in SCAN_FIELDS:
            self.cols[name][self.n:end] = rows[name]
        reach = self.cols["reach"][self.n:end]
        np.maximum.accumulate(rows["last_offset"], out=reach)
        if self.n:
            np.maximum(reach, self.cols["reach"][self.n - 1], out=reach)
        self.n = end

    def column(self, name: str) -> Any:
        """One column's filled rows (a view)."""
        return self.cols[name][:self.n] if self.cols else np.zeros(0, np.int64)

    def rows(self, start: int = 0) -> dict[str, Any]:
        """The columns from row `start` on (views)."""
        if not self.cols:
            return {name: np.zeros(0, np.int64) for name in SCAN_FIELDS}
        return {name: self.cols[name][start:self.n] for name in SCAN_FIELDS}


class LogSegment:
    """One segment file and what is known of its entries (Kafka's LogSegment)."""

    def __init__(self, files: SegmentFiles, notes: Notes | None = None, reads: DeferredReads | None = None):
        self.files = files
        self.reads = reads                      # remote bytes without waiting (logdir/deferred.py), else read here
        self.path = files.path
        self.base_offset = files.base_offset
        self.storage = files.storage
        self.uri = files.uri
        self.notes = notes or Notes()
        self.last = False                       # the log's last segment (its timestamps may grow)
        self.active = False                     # the last segment of a live log: indexed in memory
        self.inode: tuple[int, int] | None = None
        self.size = -1                          # bytes mapped (read, for a remote file)
        self.records: FileRecords | None = None  # the guarded mapping (local files)
        self._source: Source | None = None       # ranged reads (remote files)
        self._reset_state()

    def _reset_state(self) -> None:
        self.table: _Table | None = None        # the index rebuilt in memory
        self._scanning: _Table | None = None    # that table while a walk waits for remote bytes
        self.sparse: CheckedOffsetIndex | None = None  # Kafka's .index (rolled segments)
        self.times: CheckedTimeIndex | None = None      # Kafka's .timeindex (rolled segments)
        self.times_read = False
        self.index_loaded: bool | None = None   # .index checked for the .txnindex (when not loaded)
        self.aborted: list[tuple[int, int, int]] | None = None   # from the .txnindex, once read
        self.aborted_read = False
        self._end = 0                           # after the last complete entry
        self._last_offset = self.base_offset - 1
        self._tail_walked = False               # (with the .index) the entries after its last one
        self.damaged: KafkaCodecError | None = None

    def adopt(self, files: SegmentFiles) -> None:
        """A newer listing of the same segment (its index files and snapshot may have appeared)."""
        self.files = files

    def index_file(self, suffix: str) -> Any:
        return self.files.index(suffix)

    # --- loading -------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Load on first use (a segment nobody reads is never walked)."""
        if self.inode is None:
            self.refresh()

    def refresh(self) -> bool:
        """Follow the file: a new inode or a smaller size reloads, a larger size extends.
        True when what was known of it was dropped (the log's transactions too)."""
        dropped = False
        if self.storage.scheme:
            if self.inode is None:              # (loaded only once _load() completed: ReadPending)
                if self.reads is not None:
                    self.size = self.reads.size(self.storage, self.path)
                else:
                    self._source = self.storage.open(self.path)
                    self.size = self._source.size
                self._load()
                self.inode = (0, 0)
            return False
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
            self._map()
            self._load()
        elif st.st_size > self.size:
            self._map()
            if self.sparse is not None:         # a rolled segment grew: index it in memory
                self.sparse, self.times, self.times_read = None, None, True
                self._scan_all()
            elif self.table is not None:
                self._extend()
        return dropped

    def reset(self) -> None:
        self.close()
        self.inode, self.size = None, -1
        self._reset_state()

    def close(self) -> None:
        """Forget the mapping (a response still sending from it holds its own reference)."""
        self.records = None
        if self._source is not None:
            self._source.close()
            self._source = None

    def _map(self) -> None:
        self.records = FileRecords.open(self.path)
        self.size = self.records.size_in_bytes

    def _load(self) -> None:
        """A rolled segment's valid .index is used; otherwise the table is built when first
        needed (a remote segment nobody asks about is not read)."""
        if not self.active and self.index_file(".index") is not None:
            self._use_index()

    def _scan_all(self) -> None:
        """The table of every entry, installed once whole.  A walk cut by ReadPending resumes
        where it stopped (each window is appended whole): a segment larger than the remote
        cache is scanned through, not restarted from its first byte."""
        table = self._scanning
        if table is None:
            self.table, self._scanning = None, (table := _Table())
            self._end, self._last_offset = 0, self.base_offset - 1
        for rows in self.walk(self._end, self.size):
            table.append(rows)
            self._advance(rows)
        self.table, self._scanning = table, None

    def _extend(self) -> None:
        assert self.table is not None
        for rows in self.walk(self._end, self.size):
            self.table.append(rows)
            self._advance(rows)

    def _advance(self, rows: dict[str, Any]) -> None:
        self._end = int(rows["position"][-1] + rows["size"][-1])
        self._last_offset = max(self._last_offset, int(rows["last_offset"].max()))

    def _indexed(self) -> None:
        """Loaded, with its checked .index (and the entries after its last one walked) or its
        table (built now when neither is there)."""
        self.ensure()
        if self.sparse is not None:
            if not self._tail_walked:
                self._walk_tail()
        elif self.table is None:
            self._scan_all()

    @property
    def end(self) -> int:
        """The position after the last complete entry."""
        self._indexed()
        return self._end

    @property
    def last_offset(self) -> int:
        """The last offset of the complete entries (base offset - 1 while there are none)."""
        self._indexed()
        return self._last_offset

    def slice(self, position: int, size: int) -> Any:
        """The entries in [position, position + size) as Records: a slice of the guarded
        mapping (local), or the bytes read by range (remote)."""
        self.ensure()
        if self.records is not None:
            return self.records.slice(position, size)
        return MemoryRecords(self.read_bytes(position, size))    # (the view keeps the read buffer alive)

    def read_bytes(self, position: int, size: int) -> Any:
        """Bytes [position, position + size) of the segment (fewer at its end)."""
        end = min(self.size, position + size)
        if self.records is not None:
            return memoryview(self.records)[position:end]
        view, base = self._remote(position, end)
        return memoryview(view)[position - base:end - base]

    def _remote(self, start: int, end: int) -> tuple[Any, int]:
        """(buffer, its first byte's position) holding bytes [start, end) of a remote segment."""
        if self.reads is not None:
            return self.reads.range(self.storage, self.path, start, end)
        assert self._source is not None
        return self._source.view(start, end)

    def read_file(self, path: str) -> bytes:
        """A small file beside the segment whole (an index or a producer snapshot)."""
        if self.reads is not None and self.storage.scheme:
            return self.reads.whole(self.storage, path)
        return self.storage.read_bytes(path)

    def _index_data(self, suffix: str) -> tuple[bytes, str] | None:
        """(contents, uri) of an index file, None when there is none."""
        entry = self.index_file(suffix)
        if entry is None:
            return None
        uri = self.storage.uri(entry.path)
        if entry.kind != "file":
            raise ValueError(f"{uri} is {entry.note or 'not a regular file'}")
        return self.read_file(entry.path), uri

    def _load_offset_index(self) -> CheckedOffsetIndex | None:
        """Kafka's .index parsed, its first and last entries checked against the segment; None
        when there is none or it does not hold (noted)."""
        entry = self.index_file(".index")
        if self.index_loaded is False:          # found missing or invalid before (noted then)
            return None
        try:
            found = self._index_data(".index")
            if found is None:
                self.index_loaded = False
                return None
            return load_offset_index(found[0], self.read_bytes, self.size, self.base_offset, found[1])
        except (OSError, ValueError, KafkaCodecError) as exc:
            self.notes.invalid(".index", self.storage.uri(entry.path), exc)
            self.index_loaded = False
            return None

    def _use_index(self) -> bool:
        """Kafka's .index when valid (the end is found when first needed, by a walk from its
        last entry: a remote segment read for an offset range is not read to its end)."""
        index = self._load_offset_index()
        if index is None:
            return False
        self.sparse = index
        self.index_loaded = True
        self._tail_walked = False
        return True

    def _walk_tail(self) -> None:
        assert self.sparse is not None
        start = self.sparse.last_position
        self._end, self._last_offset = start, self.base_offset - 1
        for rows in self.walk(start, self.size):
            self._advance(rows)
        self._tail_walked = True

    def drop(self, suffix: str, exc: CorruptRecordError) -> None:
        """An entry of an index file does not hold for this segment: noted, and the segment is
        read without the file from now on."""
        entry = self.index_file(suffix)
        self.notes.invalid(suffix, self.storage.uri(entry.path) if entry is not None else self.uri, exc,
                           exc.position)
        if suffix == ".index":
            self.sparse = None
            self.index_loaded = False
            self.table = None                   # rebuilt when next needed
        elif suffix == ".timeindex":
            self.times = None

    def offset_index(self) -> CheckedOffsetIndex | None:
        """The segment's checked `.index`, or None (the segment is read through its headers)."""
        self.ensure()
        return self.sparse

    def time_index(self) -> CheckedTimeIndex | None:
        """Kafka's .timeindex of a rolled segment (CheckedTimeIndex), read once; None without a
        valid one."""
        self.ensure()
        if not self.times_read and not self.active and self.index_file(".timeindex") is not None:
            entry = self.index_file(".timeindex")
            try:
                found = self._index_data(".timeindex")
                if found is not None:
                    self.times = CheckedTimeIndex(parse_time_index(found[0], self.base_offset, found[1]),
                                                  self.entry_holding, found[1])
            except (OSError, ValueError, KafkaCodecError) as exc:
                self.notes.invalid(".timeindex", self.storage.uri(entry.path), exc)
            self.times_read = True
        return self.times

    def index_loads(self) -> bool:
        """Whether the segment's `.index` loads (its first and last entries hold): the
        condition for trusting its `.txnindex` (logdir/_txn.py)."""
        self.ensure()
        if self.sparse is not None:
            return True
        if self.index_loaded is None:
            self.index_loaded = self._load_offset_index() is not None
        return self.index_loaded

    def txn_index(self) -> list[tuple[int, int, int]] | None:
        """(producer id, first offset, marker offset) of the transactions aborted in this
        segment, from its `.txnindex` when its `.index` loads and the file holds for it (checked
        once: checked_txn_index, check_txn_markers), else None."""
        if not self.aborted_read:
            self.ensure()
            entry = self.index_file(".txnindex")
            if entry is not None and self.damaged is None and self.index_loads():
                try:
                    found = self._index_data(".txnindex")
                    assert found is not None
                    entries = checked_txn_index(found[0], self.base_offset, self.last_offset, found[1])
                    check_txn_markers(entries, self.entry_holding, found[1])
                    self.aborted = entries
                except (OSError, ValueError, KafkaCodecError) as exc:
                    self.notes.invalid(".txnindex", self.storage.uri(entry.path), exc)
            self.aborted_read = True
        return self.aborted

    def check_indexes(self) -> None:
        """Every index file checked in full (`kafkacodec verify`): Kafka's sanity checks, and
        every `.index` and `.timeindex` entry by the rule the lookups follow."""
        self.txn_index()
        index = self._load_offset_index() if self.sparse is None and self.index_file(".index") else self.sparse
        times = self.time_index() if not self.active else None
        for suffix, checked in ((".index", index), (".timeindex", times)):
            try:
                for i in range(len(checked) if checked is not None else 0):
                    checked.position(i) if suffix == ".index" else checked.entry(i)  # type: ignore[union-attr]
            except CorruptRecordError as exc:
                self.drop(suffix, exc)

    # --- walking entry headers -----------------------------------------------------------------
    def walk(self, start: int, end: int) -> Iterator[dict[str, Any]]:
        """scan_entries' columns (SCAN_FIELDS) for the complete entries in [start, end), a window
        at a time; stops at a partial entry (an append in progress) or a malformed one
        (`damaged`, noted once)."""
        end = min(end, self.size)
        position, want = start, 0
        records = self.records
        while position < end:
            window = want or (LOCAL_WINDOW if records is not None else REMOTE_WINDOW)
            window_end = min(end, position + window)
            if records is not None:
                data, base = memoryview(records), 0
            else:
                data, base = self._remote(position, window_end)
            rows = scan_entries(data, position - base, window_end - base, source=self.uri, base=base, strict=False)
            stop, error = int(rows["stop"]), rows["error"]
            if len(rows["position"]):
                yield rows
                if records is not None:         # hand the headers' pages back to the page cache
                    release_file_pages(records.slice(position, stop - position))
            if error is not None:
                if self.damaged is None:
                    self.damaged = error
                    self.notes.damaged(self.uri, error)
                return
            if stop > position:
                position, want = stop, 0
                continue
            head = entry_head(data, position - base)
            if head is None or head[1] <= window_end - position or head[1] > end - position:
                return                          # a partial entry (or a cut file: zeros)
            want = head[1]                      # one entry larger than the window

    def scan(self, start: int = 0, end: int | None = None) -> dict[str, Any]:
        """The entry headers from `start` (a batch boundary) to `end` (a batch boundary, or the
        end) as one set of columns, plus "stop" (after the last complete entry read) and "error"
        (the malformed entry that ended the walk, or None)."""
        if end is None:
            self._indexed()
        else:
            self.ensure()
        stop_at = self.size if end is None else min(end, self.size)
        if self.table is not None and stop_at >= self.end:
            rows = self.table.rows(int(np.searchsorted(self.table.column("position"), start, side="left")))
            out = dict(rows)
            out["stop"] = max(start, self.end)
        else:
            parts = list(self.walk(start, stop_at))
            out = {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, np.int64)
                   for name in SCAN_FIELDS}
            out["stop"] = int(parts[-1]["stop"]) if parts else start
        out["error"] = self.damaged if self.damaged is not None and stop_at >= self.end else None
        return out

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first entry whose last offset is >= `offset`, or None."""
        self.ensure()
        if offset > self.last_offset:
            return None
        if self.table is not None:
            # the first entry reaching `offset` (a legacy wrapper names only its last offset)
            i = int(np.searchsorted(self.table.column("reach"), offset, side="left"))
            if i < self.table.n:
                return int(self.table.cols["position"][i]), int(self.table.cols["size"][i])
            return None
        assert self.sparse is not None
        try:
            start = self.sparse.start_position(offset)
            stop = self.sparse.end_position(offset + 1)
        except CorruptRecordError as exc:
            self.drop(".index", exc)
            return self.locate(offset)
        for rows in self.walk(start, self.end if stop is None else stop):
            hits = np.flatnonzero(rows["last_offset"] >= offset)
            if len(hits):
                j = int(hits[0])
                return int(rows["position"][j]), int(rows["size"][j])
        return None

    def position_of(self, offset: int) -> int:
        """Where the entries holding offsets >= `offset` start (the end when there are none)."""
        found = self.locate(offset)
        return self.end if found is None else found[0]

    def seek(self, offset: int) -> int:
        """Where to start reading for `offset`: the checked .index's position (0 without one)."""
        index = self.offset_index()
        if index is None:
            return 0
        try:
            return index.start_position(offset)
        except CorruptRecordError as exc:
            self.drop(".index", exc)
            return 0

    def entries(self, start: int = 0) -> Iterator[dict[str, Any]]:
        """Entry rows from `start` (an entry boundary) to the end, in windows."""
        self._indexed()
        if self.table is not None:
            i = int(np.searchsorted(self.table.column("position"), start, side="left"))
            if i < self.table.n:
                yield self.table.rows(i)
            return
        yield from self.walk(start, self.end)

    def entry_holding(self, offset: int) -> dict[str, int] | None:
        """The header of the entry holding `offset` (indexes.ENTRY_FIELDS: the index checks)."""
        found = self.locate(offset)
        if found is None:
            return None
        rows = next(self.entries(found[0]), None)
        if rows is None or not len(rows["position"]):
            return None
        return entry_fields(rows, 0)

    def time_start(self, timestamp: int) -> int | None:
        """Where to search this segment for the first record at or after `timestamp` (ms): a
        rolled segment's checked .timeindex skips it (None) when its largest timestamp is below,
        and gives an offset to seek to; 0 otherwise (the segment is walked)."""
        times = self.time_index()
        if times is None or not len(times):
            return 0
        try:
            largest = times.largest
            if largest is not None and largest < timestamp and not self.last:
                return None
            offset = times.lookup(timestamp)
        except CorruptRecordError as exc:
            self.drop(".timeindex", exc)
            return 0
        return self.seek(offset)

    def foreign_format(self) -> str | None:
        """Why a tiered segment is not a Kafka segment file, or None: a RemoteStorageManager
        that encrypts or chunks what it stores (or compresses it whole) keeps objects only its
        plugin reads, and their bytes are refused here rather than read as records.  The first
        entry must frame as Kafka writes it (_problems.not_a_segment) at an offset in the
        segment's range."""
        self.ensure()
        head = bytes(self.read_bytes(0, HEADER_SIZE_UP_TO_MAGIC))
        why = not_a_segment(head, self.size)
        first = int.from_bytes(head[:8], "big", signed=True) if len(head) >= 8 else self.base_offset
        if why is None and not 0 <= first - self.base_offset < 2**31:
            why = f"its first entry's offset {first} is outside the segment's range from {self.base_offset}"
        return None if why is None else (
            f"not in Kafka's segment format ({why}): a RemoteStorageManager that encrypts, chunks or "
            "compresses what it stores keeps objects only its plugin reads")

    def first_record(self, position: int, size: int, wanted: Any) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record of the entry at `position` that `wanted`
        accepts, or None (a malformed entry too: the readers report it)."""
        try:
            for record in self.slice(position, size).records():
                if wanted(record):
                    return int(record.timestamp), int(record.offset)
        except FileTruncatedError:
            raise
        except KafkaCodecError:
            return None
        return None


class PartitionLog:
    """One partition: its segments (readable ones, by base offset), log start, log end and
    transactions (Kafka's UnifiedLog)."""

    def __init__(self, files: PartitionFiles, notes: Notes | None = None, *, live: bool = False,
                 reads: DeferredReads | None = None):
        self.live = live                        # another process may append: the last segment is active
        self.reads = reads                      # remote bytes without waiting (logdir/deferred.py), else read here
        self.topic = files.topic
        self.partition = files.partition
        self.notes = notes or Notes()
        self.files = files
        self.segments: list[LogSegment] = []
        self.checkpoint: int | None = files.log_start
        self.first_base: int | None = None      # the first segment's base offset, readable or not
        self.txn: TxnState | None = None
        self._snapshots: dict[int, dict[int, int] | None] = {}   # offset -> open transactions there
        self.adopt(files)

    def adopt(self, files: PartitionFiles) -> None:
        """Take a (newer) listing of the partition's files: segments kept keep what is known of
        them; a base offset twice (a copy in two log dirs) is read from the first."""
        self.files = files
        known = {s.path: s for s in self.segments}
        segments: list[LogSegment] = []
        for found in files.segments:
            if found.unreadable:
                self.notes.skipped(found.uri, found.unreadable)
                continue
            if segments and segments[-1].base_offset == found.base_offset:
                self.notes.skipped(found.uri, f"a second copy of {segments[-1].uri}")
                continue
            current = known.pop(found.path, None)
            if current is None:
                current = LogSegment(found, self.notes, self.reads)
            else:
                current.adopt(found)
            segments.append(current)
        for gone in known.values():
            gone.close()
        if [s.path for s in segments] != [s.path for s in self.segments]:
            self.txn = None
            self._snapshots = {}
        for i, seg in enumerate(segments):
            seg.last = i == len(segments) - 1
            seg.active = self.live and seg.last
        self.segments = segments
        self.first_base = files.segments[0].base_offset if files.segments else None
        if files.log_start is not None:
            self.checkpoint = files.log_start

    def reset(self) -> None:
        for seg in self.segments:
            seg.reset()
        self.txn = None
        self._snapshots = {}

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    # --- offsets -------------------------------------------------------------------------------
    @property
    def log_start(self) -> int:
        first = self.first_base if self.first_base is not None else self.log_end
        return max(first, self.checkpoint) if self.checkpoint is not None else first

    @property
    def log_end(self) -> int:
        """The high watermark: the offset after the last complete entry (the last segment's
        base offset while it holds none)."""
        if not self.segments:
            return self.checkpoint or self.first_base or 0
        last = self.segments[-1]
        return max(last.last_offset + 1, last.base_offset)

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

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: (timestamp, offset) of the first record at or after the
        log start whose timestamp is >= `timestamp` (the .timeindex narrows the walk)."""
        start = self.log_start
        for seg in self.segments[self.segment_for(start):]:
            begin = seg.time_start(timestamp)
            if begin is None:
                continue
            for rows in seg.entries(begin):
                for j in np.flatnonzero(rows["max_timestamp"] >= timestamp):
                    found = seg.first_record(int(rows["position"][j]), int(rows["size"][j]),
                                             lambda r: r.timestamp >= timestamp and r.offset >= start)
                    if found is not None:
                        return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3): (timestamp, offset) of the first record holding the
        log's largest timestamp."""
        best: tuple[int, LogSegment, int, int] | None = None
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
        return best[1].first_record(best[2], best[3], lambda r: r.timestamp == ts)

    # --- transactions --------------------------------------------------------------------------
    def transactions(self) -> TxnState:
        """Open and aborted transactions (found once, then followed as the log grows) by the rule
        of logdir/_txn.py, this log the source."""
        if self.txn is None:
            self.txn = TxnState()
        return follow(self.txn, self)

    def last_stable_offset(self) -> int:
        lso = self.transactions().last_stable
        return self.log_end if lso is None else lso

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        return [(pid, first) for pid, first, last in self.transactions().aborted
                if last >= start and first < end]

    # --- logdir._txn.TxnSource -----------------------------------------------------------------
    def segment_count(self) -> int:
        return len(self.segments)

    def txn_index(self, i: int) -> list[tuple[int, int, int]] | None:
        return self.segments[i].txn_index()

    def open_at(self, i: int) -> dict[int, int] | None:
        """producer id -> first offset of its open transaction at segment i's base offset, from
        the producer snapshot Kafka took there (at the roll to that segment); None when it is
        missing or invalid (noted)."""
        seg = self.segments[i]
        if seg.base_offset in self._snapshots:
            return self._snapshots[seg.base_offset]
        entry = seg.index_file(SNAPSHOT_SUFFIX)
        if entry is None and i and seg.files.index(SNAPSHOT_SUFFIX) is None:
            before = self.segments[i - 1]      # a tiered segment carries the state at its end
            entry = before.index_file(SNAPSHOT_AT_END)
        found: dict[int, int] | None = None
        if entry is None and not seg.storage.scheme:     # a live log: taken since the listing?
            path = os.path.join(os.path.dirname(seg.path), f"{seg.base_offset:020d}{SNAPSHOT_SUFFIX}")
            if os.path.exists(path):
                entry = seg.storage.info(path)
        if entry is not None:
            uri = seg.storage.uri(entry.path)
            try:
                if entry.kind != "file":
                    raise ValueError(f"{uri} is {entry.note or 'not a regular file'}")
                found = open_transactions(seg.read_file(entry.path), seg.base_offset, uri)
            except (OSError, ValueError, KafkaCodecError) as exc:
                self.notes.invalid(SNAPSHOT_SUFFIX, uri, exc)
                found = None
        self._snapshots[seg.base_offset] = found
        return found

    def headers(self, i: int, position: int) -> Iterator[Any]:
        return self.segments[i].entries(position)

    def entry_bytes(self, i: int, position: int, size: int) -> Any:
        return bytes(self.segments[i].read_bytes(position, size))
