"""`spark.read.format("kafkalog")` / `df.write.format("kafkalog")`: Kafka log directories as
DataFrames through PySpark's Python Data Source API (Arrow batches both ways).

Reading: `load(path)` takes a directory of `<topic>-<partition>` directories (as copied from a
broker's log.dirs or downloaded from tiered storage), one partition directory, or one `.log`
file.  One input partition per segment; segments larger than `maxPartitionBytes` are split at
batch boundaries found by a shallow scan.

Options (read): topics, startingOffsets, endingOffsets, validateCrc, includeHeaders,
keepControl, keepAborted, mode, columnNameOfCorruptRecord, maxPartitionBytes, maxRowsPerBatch.
Options (write): topic, partition, compression, batchSize, segmentBytes, baseOffset.
See docs/spark-and-cli.md for each option.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from kafkacodec.errors import CorruptRecordError, KafkaCodecError

__all__ = ["KafkaLogDataSource", "discover", "plan", "Segment", "Split", "register"]

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
PARTITION_RE = re.compile(r"^(.+)-(\d+)$")

BASE_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
            "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"
BATCH_DDL = "magic tinyint, producerId bigint, isTransactional boolean, isControl boolean"
MODES = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")
EARLIEST, LATEST = -2, -1


def register(spark) -> None:
    """Register the "kafkalog" format on a SparkSession."""
    spark.dataSource.register(KafkaLogDataSource)


def _bool(options, name, default):
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={value!r}: use true or false")


@dataclass(frozen=True)
class Segment:
    path: str
    topic: str
    partition: int
    base_offset: int
    size: int


@dataclass
class Split:
    """One input partition: bytes [start, end) of a segment (batch boundaries)."""
    path: str
    topic: str
    partition: int
    start: int
    end: int
    start_offset: int | None = None
    end_offset: int | None = None
    aborted: list = field(default_factory=list)
    corrupt: str | None = None          # shallow-scan error at `end` (non-FAILFAST modes)


def discover(path) -> list[Segment]:
    """The segment files under `path`, sorted by topic, partition and base offset."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(
            f"{root}: no such file or directory; give a Kafka log directory (holding "
            f"<topic>-<partition>/<base offset>.log files), a partition directory or a .log file")
    if root.is_file():
        dirs, files = [root.parent], [root]
    elif any(SEGMENT_RE.match(p.name) for p in root.iterdir()):
        dirs, files = [root], None
    else:
        dirs, files = sorted(p for p in root.iterdir() if p.is_dir() and PARTITION_RE.match(p.name)), None
    segments = []
    for d in dirs:
        m = PARTITION_RE.match(d.name)
        topic, partition = (m.group(1), int(m.group(2))) if m else (d.name, 0)
        for f in (files if files is not None else sorted(d.iterdir())):
            sm = SEGMENT_RE.match(f.name)
            if sm:
                segments.append(Segment(str(f), topic, partition, int(sm.group(1)), f.stat().st_size))
    segments.sort(key=lambda s: (s.topic, s.partition, s.base_offset))
    return segments


def _offset_spec(value, default):
    """A number for every partition, or Spark's JSON {"topic": {"0": 23}} (-2 earliest, -1 latest)."""
    if value is None or str(value).strip() in ("", "earliest", "latest"):
        return lambda t, p: default if value is None or str(value).strip() == "" else (
            EARLIEST if str(value).strip() == "earliest" else LATEST)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        number = int(text)
        return lambda t, p: number
    try:
        spec = json.loads(text)
        table = {(t, int(p)): int(o) for t, parts in spec.items() for p, o in parts.items()}
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"offset option {text!r}: use a number or JSON like "
                         f'{{"topic": {{"0": 23}}}} ({exc})') from None
    return lambda t, p: table.get((t, p), default)


def _mapped(path):
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def plan(path, options=None) -> tuple[list[Split], list[tuple[str, int, str]]]:
    """Splits to read and the corrupt entry headers found by the shallow scan
    [(file, position, reason)].  Runs on the driver; reads only entry headers."""
    from kafkacodec._arrow import scan_entries

    options = options or {}
    topics = {t.strip() for t in str(options.get("topics", "")).split(",") if t.strip()}
    starting = _offset_spec(options.get("startingOffsets"), EARLIEST)
    ending = _offset_spec(options.get("endingOffsets"), LATEST)
    keep_aborted = _bool(options, "keepAborted", False)
    mode = str(options.get("mode", "FAILFAST")).upper()
    split_bytes = int(options.get("maxPartitionBytes", 128 << 20))
    segments = [s for s in discover(path) if not topics or s.topic in topics]
    if topics and not segments:
        raise FileNotFoundError(f"{path}: no segment of topics {sorted(topics)} found")
    by_partition: dict[tuple[str, int], list[Segment]] = {}
    for s in segments:
        by_partition.setdefault((s.topic, s.partition), []).append(s)

    splits, corrupt = [], []
    for (topic, partition), segs in by_partition.items():
        start = starting(topic, partition)
        end = ending(topic, partition)
        start_offset = None if start == EARLIEST else start
        end_offset = None if end == LATEST else end
        open_txn: dict[int, int] = {}
        aborted = []
        chosen = []
        for i, seg in enumerate(segs):
            next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
            wanted = not ((start_offset is not None and next_base is not None and next_base <= start_offset)
                          or (end_offset is not None and seg.base_offset >= end_offset))
            if not (wanted or not keep_aborted):
                continue
            need_scan = not keep_aborted or seg.size > split_bytes
            if not need_scan:
                chosen.append(Split(seg.path, topic, partition, 0, seg.size, start_offset, end_offset))
                continue
            data = _mapped(seg.path)
            try:
                scan = scan_entries(data, source=seg.path, strict=(mode == "FAILFAST"))
            finally:
                if isinstance(data, mmap.mmap):
                    data.close()
            if scan["error"]:
                corrupt.append((seg.path, scan["stop"], scan["error"]))
            if not keep_aborted:
                _collect_aborted(scan, open_txn, aborted)
            if wanted:
                chosen += _cut(seg, scan, split_bytes, start_offset, end_offset)
        for s in chosen:
            s.aborted = aborted
        splits += chosen
    return splits, corrupt


def _collect_aborted(scan, open_txn, aborted):
    """Aborted transactions as a read_committed consumer sees them: a producer's transactional
    data from its first batch after a marker up to an ABORT marker."""
    attributes, pids = scan["attributes"], scan["producer_id"]
    for j in range(len(attributes)):
        if scan["magic"][j] != 2 or not attributes[j] & 0x10:
            continue
        pid = int(pids[j])
        if attributes[j] & 0x20:
            first = open_txn.pop(pid, None)
            if first is not None and scan["control_type"][j] == 0:
                aborted.append((pid, first, int(scan["base_offset"][j])))
        else:
            open_txn.setdefault(pid, int(scan["base_offset"][j]))


def _cut(seg, scan, split_bytes, start_offset, end_offset):
    positions, sizes = scan["position"], scan["size"]
    stop = int(scan["stop"])
    tail_error = scan["error"]
    if len(positions) == 0:
        return [Split(seg.path, seg.topic, seg.partition, 0, stop, start_offset, end_offset, corrupt=tail_error)]
    cuts = [0]
    for j in range(1, len(positions)):
        if positions[j] - cuts[-1] >= split_bytes:
            cuts.append(int(positions[j]))
    # Partial trailing bytes stay in the last split (the decoder stops there, as Kafka does).
    bounds = cuts + [stop if tail_error else max(stop, seg.size)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        out.append(Split(seg.path, seg.topic, seg.partition, a, b, start_offset, end_offset))
    out[-1].corrupt = tail_error
    return out


class KafkaLogDataSource(DataSource):
    """The "kafkalog" format."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        parts = [BASE_DDL]
        if _bool(self.options, "includeHeaders", True):
            parts.append(HEADERS_DDL)
        parts.append(BATCH_DDL)
        if str(self.options.get("mode", "FAILFAST")).upper() == "PERMISSIVE":
            parts.append(f"{self.options.get('columnNameOfCorruptRecord', '_corrupt_record')} string")
        return ", ".join(parts)

    def reader(self, schema) -> "KafkaLogReader":
        return KafkaLogReader(dict(self.options))

    def writer(self, schema, overwrite: bool) -> "KafkaLogWriter":
        return KafkaLogWriter(dict(self.options), overwrite)


def _path_option(options) -> str:
    path = options.get("path")
    if not path:
        raise ValueError('kafkalog needs a path: spark.read.format("kafkalog").load("/path/to/log-dir")')
    return path


class KafkaLogReader(DataSourceReader):
    def __init__(self, options):
        self.options = options
        self.path = _path_option(options)
        self.mode = str(options.get("mode", "FAILFAST")).upper()
        if self.mode not in MODES:
            raise ValueError(f"option mode={self.mode!r}: use one of {', '.join(MODES)}")
        self.validate_crc = _bool(options, "validateCrc", True)
        self.include_headers = _bool(options, "includeHeaders", True)
        self.keep_control = _bool(options, "keepControl", False)
        self.max_rows = int(options.get("maxRowsPerBatch", 65536))
        self.corrupt_column = options.get("columnNameOfCorruptRecord", "_corrupt_record")

    def partitions(self):
        splits, corrupt = plan(self.path, self.options)
        for path, position, reason in corrupt:
            print(f"kafkalog: {reason} at byte {position}; the rest of the segment is skipped "
                  f"(mode={self.mode})", file=sys.stderr)
        return [InputPartition(s) for s in splits] or [InputPartition(None)]

    def read(self, partition) -> Iterator:
        split: Split | None = partition.value
        if split is None:
            return
        yield from read_split(split, validate_crc=self.validate_crc, include_headers=self.include_headers,
                              keep_control=self.keep_control, max_rows=self.max_rows, mode=self.mode,
                              corrupt_column=self.corrupt_column)


def read_split(split: Split, *, validate_crc=True, include_headers=True, keep_control=False,
               max_rows=65536, mode="FAILFAST", corrupt_column="_corrupt_record"):
    """Decode one split into Arrow record batches (runs on the executors)."""
    import pyarrow as pa

    from kafkacodec._arrow import ArrowDecoder

    def decoder():
        return ArrowDecoder(split.topic, split.partition, validate_crc=validate_crc,
                            include_headers=include_headers, keep_control=keep_control,
                            start_offset=split.start_offset, end_offset=split.end_offset,
                            aborted=split.aborted, max_rows=max_rows, source=split.path)

    def with_corrupt(rb, reason=None):
        if mode != "PERMISSIVE":
            return rb
        if reason is None:
            return rb.append_column(corrupt_column, pa.nulls(rb.num_rows, pa.string()))
        return rb.append_column(corrupt_column, pa.array([reason] * rb.num_rows, pa.string()))

    def corrupt_row(schema, reason, offset):
        columns = [pa.nulls(1, f.type) if f.name not in ("topic", "partition", "offset")
                   else pa.array([{"topic": split.topic, "partition": split.partition,
                                   "offset": offset}[f.name]], f.type) for f in schema]
        return pa.RecordBatch.from_arrays(columns + [pa.array([reason], pa.string())],
                                          names=schema.names + [corrupt_column])

    data = _mapped(split.path)
    try:
        with memoryview(data) as view:
            yield from _read_view(view, split, decoder, with_corrupt, corrupt_row, mode)
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


def _read_view(view, split, decoder, with_corrupt, corrupt_row, mode):
    end = min(split.end, len(view))
    pos = split.start
    dec = decoder()
    while pos < end:
        try:
            rb, new_pos = dec.decode(view, pos, end)
        except KafkaCodecError as exc:
            if mode == "FAILFAST":
                exc.args = (f"{exc}. To skip corrupt data read with option mode=DROPMALFORMED "
                            "(or PERMISSIVE for one row per corrupt entry); "
                            "`kafkacodec verify DIR` lists every problem",)
                raise
            # Decode again up to the failed entry, skip that entry, go on after it.
            failed = dec.failed_entry
            dec = decoder()
            while pos < failed:
                rb, pos = dec.decode(view, pos, failed)
                if rb.num_rows:
                    yield with_corrupt(rb)
            print(f"kafkalog: skipping corrupt entry ({mode}): {exc}", file=sys.stderr)
            if mode == "PERMISSIVE":
                yield corrupt_row(dec.schema, str(exc), exc.offset)
            size = int.from_bytes(view[failed + 8:failed + 12], "big", signed=True)
            if not isinstance(exc, CorruptRecordError) or size < 14 or failed + 12 + size > end:
                break                          # the framing is broken: skip the rest
            pos = failed + 12 + size
            continue
        if rb.num_rows:
            yield with_corrupt(rb)
        if new_pos == pos or dec.trailing_bytes:
            break
        pos = new_pos
    if split.corrupt and mode == "PERMISSIVE":
        yield corrupt_row(dec.schema, f"{split.corrupt} at byte {end}", None)


# --------------------------------------------------------------------------------------------
# Writing

class _Commit(WriterCommitMessage):
    def __init__(self, task: int, staged: dict):
        self.task = task
        self.staged = staged            # (topic, partition) -> (staging file, records, bytes)


class KafkaLogWriter(DataSourceArrowWriter):
    """Each task encodes its rows into v2 batches per topic-partition in a staging file with
    offsets from 0; commit() on the driver lays them out in task order with dense offsets
    from baseOffset (or after the existing data), rolling segments at segmentBytes."""

    def __init__(self, options, overwrite):
        from kafkacodec._types import compression_of

        self.path = _path_option(options)
        self.overwrite = overwrite
        self.topic = options.get("topic")
        self.partition = int(options.get("partition", 0))
        self.codec = int(compression_of(options.get("compression", "none")))
        self.batch_bytes = int(options.get("batchSize", 16384))
        self.segment_bytes = int(options.get("segmentBytes", 1 << 30))
        self.base_offset = int(options.get("baseOffset", 0))
        self.job = uuid.uuid4().hex[:12]

    @property
    def staging(self) -> Path:
        return Path(self.path) / f"_kafkalog_staging_{self.job}"

    def write(self, iterator) -> _Commit:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from kafkacodec._arrow import encode_v2
        from kafkacodec.spark._codecs import compress

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        folder = self.staging / f"task-{task:06d}-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        files, staged = {}, {}
        try:
            for rb in iterator:
                names = rb.schema.names
                if "value" not in names:
                    raise ValueError("kafkalog write needs a 'value' column (binary or string)")
                n = rb.num_rows
                value = rb.column("value").cast(pa.binary())
                key = rb.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary())
                if "timestamp" in names:
                    ts = rb.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                    ts = pc.fill_null(pc.floor(pc.divide(ts.cast(pa.float64()), 1000)), -1).cast(pa.int64())
                    ts = np.ascontiguousarray(ts.to_numpy(zero_copy_only=False), dtype=np.int64)
                else:
                    ts = np.full(n, -1, dtype=np.int64)
                headers = rb.column("headers") if "headers" in names else None
                if "topic" in names:
                    topics = rb.column("topic")
                elif self.topic:
                    topics = pa.array([self.topic] * n, pa.string())
                else:
                    raise ValueError("kafkalog write needs a 'topic' column or the option topic")
                parts = rb.column("partition") if "partition" in names else pa.array(np.full(n, self.partition, np.int32))
                table = pa.table({"t": topics, "p": parts.cast(pa.int32()), "i": np.arange(n)})
                for group in table.group_by(["t", "p"], use_threads=False).aggregate([("i", "list")]).to_pylist():
                    topic, partition, rows = group["t"], group["p"], pa.array(group["i_list"])
                    if topic is None or partition is None:
                        raise ValueError("kafkalog write: a row has a null topic or partition")
                    take = lambda a: a.take(rows)  # noqa: E731
                    data, _ = encode_v2(take(key), take(value), ts[np.asarray(rows)],
                                        take(headers) if headers is not None else None,
                                        codec=self.codec, batch_bytes=self.batch_bytes,
                                        base_offset=staged.get((topic, partition), (0, 0, 0))[1],
                                        compress=compress)
                    tp = (topic, partition)
                    if tp not in files:
                        files[tp] = open(folder / f"{topic}-{partition}.batches", "wb")
                    files[tp].write(data)
                    _, records, size = staged.get(tp, (None, 0, 0))
                    staged[tp] = (str(folder / f"{topic}-{partition}.batches"), records + len(rows), size + len(data))
        finally:
            for f in files.values():
                f.close()
        return _Commit(task, staged)

    def commit(self, messages) -> None:
        root = Path(self.path)
        by_tp: dict[tuple[str, int], list[tuple[int, str, int]]] = {}
        for m in sorted((m for m in messages if m is not None), key=lambda m: m.task):
            for tp, (staged_file, records, _) in m.staged.items():
                by_tp.setdefault(tp, []).append((m.task, staged_file, records))
        try:
            for (topic, partition), parts in sorted(by_tp.items()):
                write_partition(root / f"{topic}-{partition}", [p[1] for p in parts],
                                base_offset=self.base_offset, segment_bytes=self.segment_bytes,
                                overwrite=self.overwrite)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def abort(self, messages) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def write_partition(directory: Path, staged_files, *, base_offset=0, segment_bytes=1 << 30,
                    overwrite=False) -> int:
    """Append staged batches (offsets relative to each file's start) to a partition directory
    with dense offsets, rolling segments; returns the next offset."""
    from kafkacodec._arrow import scan_entries

    directory.mkdir(parents=True, exist_ok=True)
    existing = sorted(p for p in directory.iterdir() if SEGMENT_RE.match(p.name))
    if overwrite:
        for p in existing:
            p.unlink()
        existing = []
    next_offset = base_offset
    current, current_size = None, 0
    if existing:
        last = existing[-1]
        data = last.read_bytes()
        scan = scan_entries(data, source=str(last))
        if len(scan["last_offset"]):
            next_offset = max(next_offset, int(scan["last_offset"][-1]) + 1)
        if scan["stop"] != len(data):
            raise CorruptRecordError(f"{last}: {len(data) - scan['stop']} bytes of a partial batch at the "
                                     "end; cannot append after them (truncate the file or write elsewhere)",
                                     position=int(scan["stop"]))
        current, current_size = open(last, "ab"), len(data)
    try:
        for staged in staged_files:
            data = bytearray(Path(staged).read_bytes())
            scan = scan_entries(data, source=staged)
            shift = next_offset
            for pos, size, base, last in zip(scan["position"], scan["size"], scan["base_offset"], scan["last_offset"]):
                if current is None or current_size >= segment_bytes:
                    if current:
                        current.close()
                    current = open(directory / f"{int(base) + shift:020d}.log", "wb")
                    current_size = 0
                data[pos:pos + 8] = int(base + shift).to_bytes(8, "big", signed=True)
                current.write(memoryview(data)[pos:pos + size])
                current_size += int(size)
                next_offset = int(last) + shift + 1
    finally:
        if current:
            current.close()
    return next_offset
