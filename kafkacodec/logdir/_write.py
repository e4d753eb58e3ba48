"""Writing Kafka log directories exactly: every (topic, partition) in offset order with the
given offsets, committed all at once.

Three steps, usable without Spark (the "kafkalog" writer runs them in tasks and on the driver):

1. `TaskWriter` (one per task) takes rows (Arrow batches with value, and key, topic, partition,
   offset, timestamp, headers when present), sorts them per (topic, partition) by offset (by
   timestamp, stable, when there is no offset column) in bounded buffers, and writes each sorted
   run as v2 batches in segment files under `<out>/_kafkalog_temporary/<job>/`, gaps left by
   compaction kept inside batches as the log cleaner keeps them (encode_rows).
2. `merge_runs` joins the runs of one partition that overlap (rows of a partition spread over
   tasks in any order) into one run, streaming with one decoded chunk per run in memory.
3. `commit` renames the staged segments into `<out>/<topic>-<partition>/` for every partition or
   none: a failure puts back what it had moved (and what it replaced), and files it did not
   create are never touched.  `_SUCCESS` marks a finished write.  The renames happen under the
   log directory's lock (`Store.lock`: a flock on `<out>/_kafkalog.lock`), after a second look
   at what the directory holds: a writer that another one overtook since it looked (offsets
   that now overlap, a target filled meanwhile) is refused with WriteConflictError, leaving the
   directory as the other writer left it.

Save modes as Spark's file sources: errorifexists (the directory must hold no data), append
(new offsets must be above the partition's last offset; without an offset column they continue
after it), overwrite (replaces every `<topic>-<partition>` directory; with
partition_overwrite="dynamic" only those written), ignore (writes nothing when data exists).
Files that are not partition directories (notes, other tools' files) are left alone in every
mode.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kafkacodec.errors import CorruptRecordError, WriteConflictError
from kafkacodec.logdir._read import PARTITION_RE, SEGMENT_RE
from kafkacodec.logdir._store import LOCK_NAME, LOCK_TIMEOUT, Store
from kafkacodec.logdir.storage import undecodable

__all__ = ["TaskWriter", "Run", "merge_runs", "commit", "abort", "check_target", "existing_partitions",
           "SAVE_MODES", "STAGING", "SUCCESS", "new_job_id", "validate_topic"]

SAVE_MODES = ("errorifexists", "append", "overwrite", "ignore")
STAGING = "_kafkalog_temporary"
SUCCESS = "_SUCCESS"
APPEND_HINT = "cannot append after it (repair or write elsewhere)"
# Kafka's Topic.validate: at most 249 of [a-zA-Z0-9._-], not "." or "..".
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_TS_NONE = -1                        # Kafka's "no timestamp"
TP = tuple[str, int]


def new_job_id() -> str:
    return uuid.uuid4().hex[:16]


def validate_topic(topic: Any) -> str:
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"kafkalog write: topic {topic!r} is not a legal Kafka topic name "
                         "(1-249 characters of a-z A-Z 0-9 . _ -, not '.' or '..')")
    return topic


@dataclass
class Segment:
    base_offset: int
    path: str                        # staged file
    size: int
    last_offset: int = -1            # of its last batch


@dataclass
class Run:
    """Rows of one (topic, partition) written by one task in order: offsets (or, without an
    offset column, timestamps) increase through its segments."""
    topic: str
    partition: int
    task: int
    index: int                       # the run's number within its task
    by_offset: bool                  # ordered by given offsets (else by timestamp)
    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    records: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def rank(self) -> tuple[int, int]:
        return (self.task, self.index)


# ------------------------------------------------------------------------------- encoding

def _to_ms(column: Any) -> np.ndarray:
    """Spark timestamps (µs) or integers (ms) as Kafka milliseconds; null -> -1."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type):
        us = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        ms = np.floor_divide(pc.fill_null(us, _TS_NONE * 1000).to_numpy(zero_copy_only=False), 1000)
    elif pa.types.is_integer(column.type):
        ms = pc.fill_null(column.cast(pa.int64()), _TS_NONE).to_numpy(zero_copy_only=False)
    else:
        raise TypeError(f"kafkalog write: timestamp must be a timestamp or a long (ms), not {column.type}")
    return np.ascontiguousarray(ms, dtype=np.int64)


def _binary(column: Any, name: str) -> Any:
    import pyarrow as pa

    t = column.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_null(t)):
        raise TypeError(f"kafkalog write: column {name!r} must be binary or string, not {t}")
    return column.cast(pa.binary())            # encode_v2 reads 32-bit offsets


def normalize(rb: Any, *, topic: str | None, partition: int) -> tuple[Any, bool]:
    """One input batch as a table of t, p, o (when offsets are given), ts, key, value, headers;
    and whether offsets are given."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafkacodec.arrow import HEADERS_TYPE

    names = rb.schema.names
    n = rb.num_rows
    if "value" not in names:
        raise ValueError("kafkalog write needs a 'value' column (binary or string)")
    if "isControl" in names and pc.any(rb.column("isControl")).as_py():
        raise ValueError("kafkalog write: rows with isControl=true are transaction markers, not "
                         "records; filter them out (where not isControl)")
    if "topic" in names:
        topics = rb.column("topic").cast(pa.string())
    elif topic:
        topics = pa.array([validate_topic(topic)] * n, pa.string())
    else:
        raise ValueError("kafkalog write needs a 'topic' column or the option topic")
    parts = (rb.column("partition").cast(pa.int32()) if "partition" in names
             else pa.array(np.full(n, partition, np.int32)))
    if topics.null_count or parts.null_count:
        raise ValueError("kafkalog write: a row has a null topic or partition")
    columns = {"t": topics, "p": parts}
    by_offset = "offset" in names
    if by_offset:
        offsets = rb.column("offset").cast(pa.int64())
        if offsets.null_count:
            raise ValueError("kafkalog write: a row has a null offset (drop the offset column to "
                             "number records from baseOffset instead)")
        columns["o"] = offsets
    ts = _to_ms(rb.column("timestamp")) if "timestamp" in names else np.full(n, _TS_NONE, np.int64)
    if n and ts.min() < _TS_NONE:
        # Kafka's MemoryRecordsBuilder: a negative timestamp other than -1 is invalid
        raise ValueError(f"kafkalog write: timestamp {int(ts.min())} ms is before 1970; Kafka accepts "
                         "no negative timestamp but -1 (none, or a null timestamp)")
    columns["ts"] = pa.array(ts)
    columns["key"] = _binary(rb.column("key"), "key") if "key" in names else pa.nulls(n, pa.binary())
    columns["value"] = _binary(rb.column("value"), "value")
    if "headers" in names:
        try:
            columns["headers"] = rb.column("headers").cast(HEADERS_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TypeError("kafkalog write: headers must be array<struct<key:string,value:binary>>, "
                            f"not {rb.column('headers').type}") from exc
    return pa.table(columns), by_offset


def encode_rows(rows: Any, offsets: np.ndarray, *, codec: int, batch_bytes: int) -> bytes:
    """The v2 batches of `rows` (key, value, ts, headers columns) at `offsets` (increasing),
    encoded column-wise with the offsets given: a batch holds gaps exactly as the log cleaner's
    batches do (records count = rows, lastOffsetDelta = last offset - base)."""
    from kafkacodec.arrow import encode_v2

    key, value = rows.column("key").combine_chunks(), rows.column("value").combine_chunks()
    ts = np.ascontiguousarray(rows.column("ts").to_numpy(), dtype=np.int64)
    headers = rows.column("headers").combine_chunks() if "headers" in rows.column_names else None
    return encode_v2(key, value, ts, headers, codec=codec, batch_bytes=batch_bytes, offsets=offsets)[0]


class _RunWriter:
    """Appends batches of one run to staged segment files, rolling at segment_bytes (a new
    segment is named after its first batch's base offset, as Kafka names them)."""

    def __init__(self, store: Store, folder: str, run: Run, segment_bytes: int):
        self.store, self.folder, self.run, self.segment_bytes = store, folder, run, segment_bytes
        self._file: Any = None
        self._ctx: Any = None

    def write(self, data: bytes) -> None:
        from kafkacodec.arrow import scan_entries

        scan = scan_entries(data)
        for pos, size, base, last in zip(scan["position"].tolist(), scan["size"].tolist(),
                                         scan["base_offset"].tolist(), scan["last_offset"].tolist()):
            seg = self.run.segments[-1] if self.run.segments else None
            if seg is None or (seg.size and seg.size + size > self.segment_bytes):
                self._roll(int(base))
                seg = self.run.segments[-1]
            self._file.write(memoryview(data)[pos:pos + size])
            seg.size += size
            seg.last_offset = int(last)

    def _roll(self, base_offset: int) -> None:
        self.close()
        path = self.store.join(self.folder, f"{self.run.topic}-{self.run.partition}.{self.run.task}."
                                            f"{self.run.index}.{base_offset:020d}.log")
        self._ctx = self.store.open_write(path)
        self._file = self._ctx.__enter__()
        self.run.segments.append(Segment(base_offset, path, 0))

    def close(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx, self._file = self._ctx, None, None
            ctx.__exit__(None, None, None)

    def discard(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx, self._file = self._ctx, None, None
            try:
                ctx.__exit__(RuntimeError, RuntimeError("discarded"), None)
            except RuntimeError:
                pass


class TaskWriter:
    """One task's share of a write: buffers input rows up to `buffer_bytes`, sorts them per
    (topic, partition) and appends them to that partition's current run (a new run when they
    do not continue it).  Sorted input (write_log's repartition + sortWithinPartitions, or one
    Parquet file's rows) makes one run per partition and no merge at commit.

    Not thread-safe (one per task)."""

    def __init__(self, store: Store, staging: str, *, task: int, codec: int = 0,
                 batch_bytes: int = 16384, segment_bytes: int = 1 << 30,
                 next_offsets: Mapping[TP, int] | None = None, base_offset: int = 0,
                 topic: str | None = None, partition: int = 0, buffer_bytes: int = 64 << 20):
        self.store, self.staging, self.task = store, staging, task
        self.codec, self.batch_bytes, self.segment_bytes = codec, batch_bytes, segment_bytes
        self.next_offsets = dict(next_offsets or {})
        self.base_offset, self.topic, self.partition = base_offset, topic, partition
        self.buffer_bytes = buffer_bytes
        self.folder = store.join(staging, f"task-{task:06d}-{uuid.uuid4().hex[:8]}")
        self._pending: list[Any] = []
        self._pending_bytes = 0
        self._by_offset: bool | None = None
        self._open: dict[TP, _RunWriter] = {}
        self.runs: list[Run] = []
        store.makedirs(self.folder)

    def add(self, rb: Any) -> None:
        if rb.num_rows == 0:
            return
        table, by_offset = normalize(rb, topic=self.topic, partition=self.partition)
        if self._by_offset is None:
            self._by_offset = by_offset
        elif self._by_offset != by_offset:
            raise ValueError("kafkalog write: some batches have an offset column and some do not")
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= self.buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        self._pending, self._pending_bytes = [], 0
        topics = table.column("t").combine_chunks().dictionary_encode()
        t = topics.indices.to_numpy()
        p = table.column("p").to_numpy()
        key = table.column("o" if self._by_offset else "ts").to_numpy()
        # Group rows by partition, each group in key order (stable: equal timestamps keep the
        # input order); input already in that order (one partition, sorted) is not copied.
        if not (np.all(t == t[0]) and np.all(p == p[0]) and np.all(key[1:] >= key[:-1])):
            order = np.lexsort((key, p, t))
            table, t, p = table.take(pa.array(order)), t[order], p[order]
        starts = np.flatnonzero((t[1:] != t[:-1]) | (p[1:] != p[:-1])) + 1
        bounds = [0, *starts.tolist(), table.num_rows]
        names = topics.dictionary.to_pylist()
        for a, b in zip(bounds, bounds[1:]):
            self._append(validate_topic(names[t[a]]), int(p[a]), table.slice(a, b - a))

    def _append(self, topic: str, partition: int, rows: Any) -> None:
        if partition < 0:
            raise ValueError(f"kafkalog write: partition {partition} of topic {topic!r} is negative")
        tp = (topic, partition)
        ts = rows.column("ts").to_numpy()
        writer = self._open.get(tp)
        run = writer.run if writer else None
        if self._by_offset:
            offsets = np.ascontiguousarray(rows.column("o").to_numpy(), dtype=np.int64)
            if offsets[0] < 0:
                raise ValueError(f"kafkalog write: {topic}-{partition} has a negative offset {offsets[0]}")
            dup = np.flatnonzero(np.diff(offsets) == 0)
            if len(dup):
                raise ValueError(f"kafkalog write: offset {offsets[dup[0]]} appears twice in {topic}-{partition}")
            continues = run is not None and offsets[0] > run.last_offset
        else:
            continues = run is not None and ts[0] >= run.last_timestamp
            start = run.last_offset + 1 if continues and run else \
                max(self.base_offset, self.next_offsets.get(tp, self.base_offset))
            offsets = np.arange(start, start + rows.num_rows, dtype=np.int64)
        if not continues:
            if writer:
                writer.close()
            index = sum(1 for r in self.runs if (r.topic, r.partition) == tp)
            run = Run(topic, partition, self.task, index, bool(self._by_offset), int(offsets[0]), -1,
                      int(ts[0]), int(ts[0]), 0)
            self.runs.append(run)
            writer = self._open[tp] = _RunWriter(self.store, self.folder, run, self.segment_bytes)
        assert writer is not None and run is not None
        writer.write(encode_rows(rows, offsets, codec=self.codec, batch_bytes=self.batch_bytes))
        run.last_offset = int(offsets[-1])
        run.first_timestamp = min(run.first_timestamp, int(ts.min()))
        run.last_timestamp = int(ts[-1]) if not self._by_offset else max(run.last_timestamp, int(ts.max()))
        run.records += rows.num_rows

    def close(self) -> list[Run]:
        """Flush and close every staged file; the runs to hand to commit()."""
        try:
            self._flush()
        except BaseException:
            self.discard()
            raise
        for writer in self._open.values():
            writer.close()
        self._open.clear()
        return self.runs

    def discard(self) -> None:
        for writer in self._open.values():
            writer.discard()
        self._open.clear()
        self.store.remove_tree(self.folder)


# ------------------------------------------------------------------------------- merging

def _read_run(store: Store, run: Run, chunk_rows: int) -> Iterator[Any]:
    """A run's rows back as tables of o, ts, key, value, headers (one chunk of at most
    chunk_rows at a time; local segments are memory-mapped, remote ones read whole)."""
    import pyarrow as pa

    from kafkacodec.arrow import ArrowDecoder

    for seg in run.segments:
        with store.mapped(seg.path) as data, memoryview(data) as view:
            dec = ArrowDecoder(run.topic, run.partition, max_rows=chunk_rows, source=store.describe(seg.path),
                               columns=["offset", "timestamp", "key", "value", "headers"])
            pos = 0
            while pos < len(view):
                rb, new_pos = dec.decode(view, pos)     # columns are copies: the map may close
                if rb.num_rows:
                    yield pa.table({"o": rb.column("offset"), "ts": pa.array(_to_ms(rb.column("timestamp"))),
                                    "key": rb.column("key"), "value": rb.column("value"),
                                    "headers": rb.column("headers")})
                if dec.trailing_bytes or (new_pos == pos and not rb.num_rows):
                    break
                pos = new_pos


def merge_runs(store: Store, runs: list[Run], folder: str, *, codec: int = 0, batch_bytes: int = 16384,
               segment_bytes: int = 1 << 30, next_offset: int = 0, chunk_rows: int = 65536) -> Run:
    """One run holding the rows of `runs` (one partition) in offset order (timestamp order,
    ties in task order, when they carry no given offsets: then numbered from next_offset).
    Streams: at most one decoded chunk per run is held."""
    import pyarrow as pa

    by_offset = runs[0].by_offset
    ranked = sorted(runs, key=lambda r: r.rank)
    first = runs[0]
    out = Run(first.topic, first.partition, -1, 0, by_offset, -1, -1,
              min(r.first_timestamp for r in runs), max(r.last_timestamp for r in runs), 0)
    writer = _RunWriter(store, folder, out, segment_bytes)
    sources = [_read_run(store, r, chunk_rows) for r in ranked]
    buffered: dict[int, Any] = {}            # rank position -> table with sort columns
    taken = [0] * len(ranked)                # rows read per run (the tie-break within a run)

    def refill(i: int) -> None:
        table = next(sources[i], None)
        if table is not None:
            n = table.num_rows
            buffered[i] = table.append_column("rank", pa.array(np.full(n, i, np.int64))) \
                               .append_column("row", pa.array(np.arange(taken[i], taken[i] + n)))
            taken[i] += n

    for i in range(len(ranked)):
        refill(i)
    next_number = next_offset
    try:
        while buffered:
            # Every row a run has not yet produced sorts after its last buffered row, so rows up
            # to the smallest of those last rows are final; that run's buffer empties.
            if by_offset:
                bound_i = min(buffered, key=lambda i: buffered[i].column("o")[-1].as_py())
                bound = buffered[bound_i].column("o")[-1].as_py()
            else:
                bound_i = min(buffered, key=lambda i: (buffered[i].column("ts")[-1].as_py(), i))
                bound_ts = buffered[bound_i].column("ts")[-1].as_py()
            ready, keep = [], {}
            for i, table in buffered.items():
                if by_offset:
                    mask = table.column("o").to_numpy() <= bound
                else:
                    ts = table.column("ts").to_numpy()
                    mask = (ts < bound_ts) | ((ts == bound_ts) & (i <= bound_i))
                ready.append(table.filter(pa.array(mask)))
                rest = table.filter(pa.array(~mask))
                if rest.num_rows:
                    keep[i] = rest
            buffered = keep
            window = pa.concat_tables(ready)
            sort = [("o", "ascending")] if by_offset else [("ts", "ascending"), ("rank", "ascending"),
                                                         ("row", "ascending")]
            window = window.sort_by(sort)
            if by_offset:
                offsets = np.ascontiguousarray(window.column("o").to_numpy(), dtype=np.int64)
                dup = np.flatnonzero(np.diff(offsets) == 0)
                if len(dup) or (out.records and offsets[0] <= out.last_offset):
                    o = offsets[dup[0]] if len(dup) else offsets[0]
                    raise ValueError(f"kafkalog write: offset {o} appears twice in {first.topic}-{first.partition}")
            else:
                offsets = np.arange(next_number, next_number + window.num_rows, dtype=np.int64)
                next_number += window.num_rows
            if window.num_rows:
                if out.first_offset < 0:
                    out.first_offset = int(offsets[0])
                writer.write(encode_rows(window, offsets, codec=codec, batch_bytes=batch_bytes))
                out.last_offset = int(offsets[-1])
                out.records += window.num_rows
            for i in range(len(ranked)):
                if i not in buffered:
                    refill(i)
    except BaseException:
        writer.discard()
        raise
    writer.close()
    return out


# ------------------------------------------------------------------------------- committing

def _next_offset(store: Store, folder: str) -> int | None:
    """The offset after a partition directory's last record, or its last segment's base offset
    when that is higher (an empty active segment); None when it holds no segment."""
    from kafkacodec.arrow import scan_entries

    segments = [n for n in store.listdir(folder) if SEGMENT_RE.match(n)]
    if not segments:
        return None
    floor = int(segments[-1][:20])
    for name in reversed(segments):
        path = store.join(folder, name)
        with store.mapped(path) as data:
            scan = scan_entries(data, source=store.describe(path), strict=False)
            size = len(data)
        if scan["error"] is not None:
            raise scan["error"].with_context(hint=APPEND_HINT)
        if scan["stop"] != size:
            raise CorruptRecordError(f"{store.describe(path)}: a partial batch",
                                     position=int(scan["stop"])).with_context(hint=APPEND_HINT)
        if len(scan["last_offset"]):
            return max(floor, int(scan["last_offset"][-1]) + 1)
    return floor


def existing_partitions(store: Store, root: str) -> list[str]:
    """The `<topic>-<partition>` directories under root (never one whose name is not UTF-8: no
    topic is named so, and the writer leaves what is not a partition alone)."""
    return [n for n in store.listdir(root)
            if not undecodable(n) and PARTITION_RE.match(n) and store.is_dir(store.join(root, n))]


def has_data(store: Store, root: str) -> bool:
    """Anything in root besides writers' temporary directories and lock file."""
    return any(n not in (STAGING, LOCK_NAME) for n in store.listdir(root))


def check_target(store: Store, root: str, mode: str) -> bool:
    """Validate the save mode against what is at root before writing; False when nothing
    should be written (ignore mode and data exists)."""
    if mode not in SAVE_MODES:
        raise ValueError(f"kafkalog write: save mode {mode!r}: use one of {', '.join(SAVE_MODES)}")
    if store.exists(root) and not store.is_dir(root):
        raise FileExistsError(f"{store.describe(root)} exists and is not a directory")
    if mode in ("errorifexists", "ignore") and has_data(store, root):
        if mode == "ignore":
            return False
        raise FileExistsError(f"{store.describe(root)} already holds data; choose another path or "
                              "the save mode append or overwrite")
    return True


def next_offsets(store: Store, root: str, partitions: Iterable[TP] | None = None) -> dict[TP, int]:
    """For appending: the offset after each existing partition's last record (of `partitions`
    only, when given)."""
    out = {}
    wanted = None if partitions is None else set(partitions)
    for name in existing_partitions(store, root):
        tp = _tp_of(name)
        if wanted is not None and tp not in wanted:
            continue
        nxt = _next_offset(store, store.join(root, name))
        if nxt is not None:
            out[tp] = nxt
    return out


def check_no_overlap(run: Run, next_offset: int | None, *, meanwhile: bool = False) -> None:
    """An append's rule: the rows a partition commits start after its last offset (WriteConflictError
    otherwise: the segments would overlap).  `meanwhile`: another writer committed those
    offsets after this one looked."""
    if next_offset is not None and run.first_offset < next_offset:
        raise WriteConflictError(
            f"kafkalog append: {run.topic}-{run.partition} already holds offsets up to {next_offset - 1}"
            + (" (another writer committed them while this one ran)" if meanwhile else "")
            + f"; the new rows start at offset {run.first_offset}; nothing written")


def _check_unchanged(current: Mapping[TP, int], expected_next: Mapping[TP, int] | None,
                     partitions: Iterable[TP]) -> None:
    """The partitions written still end where the tasks numbered their rows from (an append
    without an offset column): a partition that moved since is refused, not renumbered."""
    for tp in partitions:
        if expected_next is not None and current.get(tp) != expected_next.get(tp):
            raise WriteConflictError(
                f"kafkalog append: {tp[0]}-{tp[1]} changed while this job ran (next offset {current.get(tp)}, "
                f"the job started at {expected_next.get(tp)}); nothing written")


def _plan_partition(store: Store, runs: list[Run], staging: str, *, codec: int, batch_bytes: int,
                    segment_bytes: int, next_offset: int | None, base_offset: int) -> Run:
    """The single run a partition commits: its runs as they are when they follow each other,
    else merged."""
    runs = sorted(runs, key=lambda r: (r.first_offset, r.rank))
    first = runs[0]
    if first.by_offset:
        for a, b in zip(runs, runs[1:]):
            if b.first_offset <= a.last_offset:
                break
        else:
            joined = Run(first.topic, first.partition, -1, 0, True, first.first_offset, runs[-1].last_offset,
                         min(r.first_timestamp for r in runs), max(r.last_timestamp for r in runs),
                         sum(r.records for r in runs), [s for r in runs for s in r.segments])
            check_no_overlap(joined, next_offset)
            return joined
        check_no_overlap(first, next_offset)     # (the merged run starts at the smallest first offset)
        return merge_runs(store, runs, staging, codec=codec, batch_bytes=batch_bytes,
                          segment_bytes=segment_bytes)
    start = base_offset if next_offset is None else max(base_offset, next_offset)
    if len(runs) == 1 and first.first_offset == start:
        return first
    return merge_runs(store, runs, staging, codec=codec, batch_bytes=batch_bytes,
                      segment_bytes=segment_bytes, next_offset=start)


def _segment_names(run: Run, next_offset: int | None) -> list[int]:
    """Each segment is named after the offset that follows the one before it (the first after
    the partition's existing data, if any), as the log cleaner leaves segments: the offsets the
    rows skip (compaction, aborted transactions left out) lie inside segments, never between
    them, so readers see no missing segment."""
    names = []
    for i, seg in enumerate(run.segments):
        if i:
            names.append(run.segments[i - 1].last_offset + 1)
        else:
            names.append(seg.base_offset if next_offset is None else min(next_offset, seg.base_offset))
    return names


class _Undo:
    """Moves and new directories done so far, undone in reverse order on failure."""

    def __init__(self, store: Store):
        self.store = store
        self.done: list[tuple[str, str]] = []        # (from, to) of a move, or ("", new dir)

    def move(self, src: str, dst: str) -> None:
        self.store.move(src, dst)
        self.done.append((src, dst))

    def makedirs(self, path: str) -> None:
        if not self.store.exists(path):
            self.store.makedirs(path)
            self.done.append(("", path))

    def rollback(self) -> list[str]:
        problems = []
        for src, dst in reversed(self.done):
            try:
                if src:
                    self.store.move(dst, src)
                else:
                    self.store.remove_empty_dir(dst)
            except OSError as exc:                    # keep going: put back all we can
                problems.append(f"{self.store.describe(dst)} -> {self.store.describe(src)}: {exc}")
        return problems


def commit(store: Store, root: str, job: str, runs: Iterable[Run], *, mode: str = "errorifexists",
           partition_overwrite: str = "static", codec: int = 0, batch_bytes: int = 16384,
           segment_bytes: int = 1 << 30, base_offset: int = 0,
           expected_next: Mapping[TP, int] | None = None, lock_timeout: float = LOCK_TIMEOUT) -> dict[TP, Run]:
    """Lay the staged runs out under root, all partitions or none; returns the committed run
    per partition.  `expected_next`: the next offsets the tasks numbered from (append without
    an offset column): a partition that changed since is refused rather than renumbered.

    The runs are planned (merged where tasks overlap) first; the renames happen under the log
    directory's lock (Store.lock, waiting up to `lock_timeout` seconds for another writer's
    commit), after the directory is looked at again: WriteConflictError when another writer
    committed overlapping offsets, or into an errorifexists target, since this one looked."""
    staging = store.join(root, STAGING, job)
    by_tp: dict[TP, list[Run]] = {}
    for run in runs:
        if run.records:
            by_tp.setdefault((run.topic, run.partition), []).append(run)
    if not check_target(store, root, mode):
        abort(store, root, job)
        return {}
    try:
        store.makedirs(staging)
        seen = next_offsets(store, root, by_tp) if mode == "append" else {}
        if mode == "append":
            _check_unchanged(seen, expected_next, by_tp)
        plans = {tp: _plan_partition(store, rs, staging, codec=codec, batch_bytes=batch_bytes,
                                     segment_bytes=segment_bytes, next_offset=seen.get(tp),
                                     base_offset=base_offset)
                 for tp, rs in sorted(by_tp.items())}
        with store.lock(root, lock_timeout):
            # another writer may have committed since this one looked: look again, under the lock
            if mode in ("errorifexists", "ignore") and has_data(store, root):
                if mode == "ignore":
                    return {}
                raise WriteConflictError(f"kafkalog write: another writer wrote into {store.describe(root)} "
                                         "while this one ran (save mode errorifexists); nothing written")
            current = next_offsets(store, root, plans) if mode == "append" else {}
            if mode == "append":
                _check_unchanged(current, expected_next, plans)
                for tp, run in plans.items():
                    check_no_overlap(run, current.get(tp), meanwhile=current.get(tp) != seen.get(tp))
            _install(store, root, staging, plans, current, mode=mode, partition_overwrite=partition_overwrite)
    finally:
        abort(store, root, job)
    return plans


def _install(store: Store, root: str, staging: str, plans: dict[TP, Run], current: Mapping[TP, int], *,
             mode: str, partition_overwrite: str) -> None:
    """The renames of a commit (under the lock): all, or none (what was moved is put back)."""
    undo = _Undo(store)
    try:
        if mode == "overwrite":
            replaced = store.join(staging, "replaced")
            store.makedirs(replaced)
            names = existing_partitions(store, root)
            if partition_overwrite == "dynamic":
                names = [n for n in names if _tp_of(n) in plans]
            for name in names:
                undo.move(store.join(root, name), store.join(replaced, name))
        for (topic, partition), run in plans.items():
            folder = store.join(root, f"{topic}-{partition}")
            undo.makedirs(folder)
            after = current.get((topic, partition))
            if after is not None and store.exists(store.join(folder, f"{after:020d}.log")):
                after = None           # an empty active segment holds that name: keep the batch's
            for seg, base in zip(run.segments, _segment_names(run, after)):
                target = store.join(folder, f"{base:020d}.log")
                if store.exists(target):
                    raise FileExistsError(f"{store.describe(target)} exists (an empty active segment?): "
                                          "a new segment starting at that offset cannot take its name; "
                                          "remove it or write elsewhere")
                undo.move(seg.path, target)
            store.sync_dir(folder)
        if not store.exists(store.join(root, SUCCESS)):
            with store.open_write(store.join(staging, SUCCESS)):
                pass
            undo.move(store.join(staging, SUCCESS), store.join(root, SUCCESS))
        store.sync_dir(root)
    except BaseException as exc:
        problems = undo.rollback()
        if problems:
            raise RuntimeError(f"kafkalog commit failed ({exc}) and could not put back: "
                               + "; ".join(problems)) from exc
        raise


def _tp_of(name: str) -> TP:
    m = PARTITION_RE.match(name)
    assert m is not None
    return (m.group(1), int(m.group(2)))


def abort(store: Store, root: str, job: str) -> None:
    """Remove this job's temporary directory (and the staging folder once empty)."""
    parent = store.join(root, STAGING)
    store.remove_tree(store.join(parent, job))
    store.remove_empty_dir(parent)          # (another writer's staging may be there)
