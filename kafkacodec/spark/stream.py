"""`spark.readStream.format("kafkalog")`: a log directory tailed as a stream.

Each micro-batch reads the offsets appended since the last one: new segments and appends to
the active segment become visible once their entries are complete (a partial entry at the end
of the last segment is an append in progress: it is read by a later trigger).  The stream's
offset is Spark's Kafka-source JSON, `{"topic": {"partition": next offset}}`, kept in the
query's checkpoint: a restarted query resumes there, neither losing nor repeating a record.

Options as for batch reads, with Spark's streaming rules: `startingOffsets` defaults to
latest (earliest, JSON and the timestamp forms work; they apply to a new query only, and a
partition found later starts at its earliest offset), no ending options, and
`maxOffsetsPerTrigger` caps the offsets a trigger reads, split across partitions in proportion
to what each has waiting (Spark's rule, small partitions not starved).  `Trigger.AvailableNow`
reads what is there when the query starts, then stops.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from kafkacodec.logdir import Problem, ReadOptions, Split
from kafkacodec.logdir._layout import PartitionFiles
from kafkacodec.logdir._plan import PartitionRange, Planner
from kafkacodec.logdir._problems import Reporter
from kafkacodec.spark.datasource import output_columns, read_arrow

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["KafkaLogStreamReader", "rate_limit"]

Offsets = dict[str, dict[str, int]]


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nested(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def rate_limit(start: dict[tuple[str, int], int], end: dict[tuple[str, int], int],
               limit: int) -> dict[tuple[str, int], int]:
    """Spark's Kafka-source rule: `limit` offsets split across partitions in proportion to
    what each has waiting; a partition with a share below one still gets one."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    out = {}
    for tp, e in end.items():
        if tp not in sizes:
            out[tp] = e
            continue
        share = limit * sizes[tp] / total
        out[tp] = min(e, start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return out


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.columns, self.include_headers = output_columns(options, schema)
        self.names = [f.name for f in schema.fields]
        self.schema_json = schema.json()
        self.target: dict[tuple[str, int], int] | None = None       # Trigger.AvailableNow
        self._tails: dict[str, tuple[int, int, int | None]] = {}   # uri -> (size, scanned to, last offset)
        self._reported: set[tuple[str, int]] = set()

    def _planner(self) -> Planner:
        """A planner over the files as they are now (fresh listing, fresh headers)."""
        ro = self.options
        return Planner(ro, Reporter(ro.mode, ro.fail_on_data_loss), exact_end=True)

    def _log_end(self, planner: Planner, part: PartitionFiles) -> int:
        """The next offset after the last complete entry; scans only what was appended since
        the last call."""
        for seg in reversed(part.segments):
            if seg.unreadable:
                continue
            size, scanned, last = self._tails.get(seg.uri, (0, 0, None))
            if seg.size < size:                          # truncated (Kafka's recovery): rescan
                scanned, last = 0, None
            if seg.size > scanned or last is None:
                scan = planner.scan(seg, scanned)
                if len(scan["last_offset"]):
                    last = int(scan["last_offset"][-1])
                scanned = int(scan["stop"])
                if scan["error"] and (seg.uri, scanned) not in self._reported:
                    self._reported.add((seg.uri, scanned))      # the stream cannot pass it: say so once
                    error = scan["error"].with_context(hint="The stream stops there (its framing is lost)")
                    planner.reporter.damage(Problem("corrupt", seg.uri, str(error), error.position, error.offset,
                                                    error))
            self._tails[seg.uri] = (seg.size, scanned, last)
            return seg.base_offset if last is None else max(last + 1, seg.base_offset)
        return part.segments[-1].base_offset if part.segments else 0

    def _latest(self, planner: Planner) -> dict[tuple[str, int], int]:
        out = {}
        for part in planner.partitions():
            if not part.segments:
                continue
            end = self._log_end(planner, part)
            if self.options.read_committed:
                _, lso = planner.aborted_and_lso(part)
                end = min(end, lso) if lso is not None else end
            out[(part.topic, part.partition)] = end
        return out

    def initialOffset(self) -> dict[str, Any]:
        planner = self._planner()
        ro = self.options
        parts = planner.partitions()
        planner._check_named(ro.starting, "startingOffsets" + ("ByTimestamp" if ro.starting.kind == "timestamps"
                                                                else ""), parts)
        latest = self._latest(planner)
        start = {}
        for part in parts:
            tp = (part.topic, part.partition)
            if tp not in latest:
                continue
            kind, value = ro.starting.for_partition(*tp)
            if kind == "earliest":
                start[tp] = planner.earliest(part)
            elif kind == "latest":
                start[tp] = latest[tp]
            elif kind == "offset":
                start[tp] = int(value)  # type: ignore[arg-type]
            else:
                found = planner.offset_for_time(part, int(value))  # type: ignore[arg-type]
                if found is None and ro.starting_strategy == "error":
                    raise ValueError(f"{tp[0]}-{tp[1]}: no record at or after timestamp {value} "
                                     "(startingOffsetsByTimestampStrategy=error); set it to latest")
                start[tp] = latest[tp] if found is None else found
        return _nested(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest(self._planner())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        planner = self._planner()
        begin = _flat(start)
        end = self._latest(planner)
        if self.target is not None:
            end = {tp: min(e, self.target.get(tp, e)) for tp, e in end.items() if tp in self.target}
        for tp, b in begin.items():                        # never go back (a truncated log)
            if tp in end and end[tp] < b:
                end[tp] = b
        for tp, b in begin.items():
            end.setdefault(tp, b)                          # a vanished partition: partitions() reports it
        if isinstance(limit, ReadMaxRows):
            earliest = {(p.topic, p.partition): planner.earliest(p) for p in planner.partitions()}
            end = rate_limit({tp: begin.get(tp, earliest.get(tp, e)) for tp, e in end.items()}, end,
                             limit.max_rows)
        return _nested(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        planner = self._planner()
        ro = self.options
        reporter = planner.reporter
        begin, finish = _flat(start), _flat(end)
        parts = {(p.topic, p.partition): p for p in planner.partitions()}
        ranges = []
        for tp, e in sorted(finish.items()):
            part = parts.get(tp)
            if part is None or not part.segments:
                if e > begin.get(tp, e):
                    reporter.data_loss(Problem("range", f"{tp[0]}-{tp[1]}", f"{tp[0]}-{tp[1]} is gone from "
                                               f"{', '.join(ro.paths)}: offsets {begin.get(tp)}..{e - 1} cannot be read"))
                continue
            earliest = planner.earliest(part)
            b = begin.get(tp, earliest)                    # a new partition starts at its earliest
            if b < earliest:
                reporter.data_loss(Problem("range", part.segments[0].uri, f"{tp[0]}-{tp[1]}: offsets {b}.."
                                           f"{earliest - 1} were deleted before this query read them", offset=b))
                b = earliest
            if e <= b:
                continue
            aborted = planner.aborted_and_lso(part)[0] if ro.read_committed else []
            ranges.append(PartitionRange(part, b, e, aborted))
        return [InputPartition(s) for s in planner.splits(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split: Split = partition.value
        yield from read_arrow(split, self.options, self.columns, self.include_headers, self.names,
                              self.schema_json, None)

    def commit(self, end: dict[str, Any]) -> None:
        pass

