"""Planning a read on the driver: which partitions, which offsets ([start, end) per partition, by
offsets, timestamps or pushed predicates), which segments and which byte ranges, and the
aborted transactions a read_committed read drops.

Every question about a partition (its log start and end, the segment and byte position of an
offset, the offset for a timestamp, the aborted transactions and the last stable offset, the
index files and whether they hold) is answered by `partition_log.PartitionLog`, the engine
`kafkacodec serve` answers with too; the planner never reads records, and reads headers only
where no valid index answers.  This module keeps its own job: options to offset ranges, ranges to
byte ranges, byte ranges to splits.  Index files found invalid are reported as Problems.

Overlapping segments, missing offsets between segments and partial entries are found by the
executors while they read (each split knows its segment's offset range and its successor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kafkacodec.errors import CorruptRecordError
from kafkacodec.logdir._layout import PartitionFiles, Segment, find_partitions, partition_of
from kafkacodec.logdir._problems import Problem, Reporter
from kafkacodec.logdir._pushdown import Pushdown
from kafkacodec.logdir._readopts import OffsetBound, ReadOptions
from kafkacodec.logdir.indexes import CheckedOffsetIndex, CheckedTimeIndex
from kafkacodec.logdir.partition_log import LogSegment, Notes, PartitionLog
from kafkacodec.logdir.storage import Storage

__all__ = ["Split", "Planner", "PartitionRange"]


@dataclass
class Split:
    """One input partition: bytes [start, end) of a segment, cut at batch boundaries."""
    path: str
    topic: str
    partition: int
    start: int
    end: int
    start_offset: int | None = None      # the records wanted: [start_offset, end_offset)
    end_offset: int | None = None
    aborted: list[tuple[int, int, int]] = field(default_factory=list)
    storage: Storage = field(default_factory=Storage)
    low: int | None = None               # the segment's own offsets: [low, high) (its name, the next one's)
    high: int | None = None
    check_gap: bool = False              # reads to the segment's end: the next segment must follow on
    cleaned_to: int | None = None        # compacted up to here (gaps below are normal)
    problem: Problem | None = None       # reports an unreadable segment (PERMISSIVE), reads nothing

    @property
    def uri(self) -> str:
        return self.storage.uri(self.path)


@dataclass
class PartitionRange:
    """One partition's files and the offsets a read takes from it."""
    files: PartitionFiles
    start: int | None = None             # None: from the log's start
    end: int | None = None               # None: to the log's end
    aborted: list[tuple[int, int, int]] = field(default_factory=list)


class _Reported(Notes):
    """The planner's notes: an index file that does not hold is a Problem (noted); damage and
    unreadable segments are reported by the splits that reach them."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    def invalid(self, suffix: str, uri: str, exc: BaseException, position: int | None = None) -> None:
        self.reporter.note(Problem("index", uri, f"{exc}; read without it (as Kafka rebuilds a corrupt index)",
                                   position))

    def damaged(self, uri: str, exc: Any) -> None:
        pass

    def skipped(self, uri: str, why: str) -> None:
        pass


class Planner:
    """Plans a read from ReadOptions; problems go through `reporter` (which raises per policy)."""

    def __init__(self, options: ReadOptions, reporter: Reporter, pushdown: Pushdown | None = None, *,
                 exact_end: bool = False):
        self.options = options
        self.exact_end = exact_end        # end byte ranges at the last complete entry wanted (streams)
        self.reporter = reporter
        self.pushdown = pushdown or Pushdown()
        self.notes = _Reported(reporter)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._segments: dict[str, LogSegment] = {}      # by uri
        self._parts: list[PartitionFiles] | None = None
        self._unreadable: list[Problem] = []

    def close(self) -> None:
        """Unmap the segments the plan read (and close remote files); splits stay valid."""
        for log in self._logs.values():
            log.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ files and indexes
    def partitions(self) -> list[PartitionFiles]:
        """The partitions selected by assign / subscribe / subscribePattern."""
        if self._parts is None:
            found, problems = find_partitions(self.options.paths, self.options.storage)
            for problem in problems:
                if problem.kind == "unreadable":
                    if self.options.mode == "FAILFAST":
                        self.reporter.damage(problem)
                    self._unreadable.append(problem)    # reported by a split (a PERMISSIVE row)
                else:
                    self.reporter.note(problem)
            o = self.options
            self._parts = [p for p in found if o.wants(p.topic, p.partition)]
            if not found:
                raise FileNotFoundError(f"{', '.join(o.paths)}: no segment files (<20-digit base offset>.log) found")
            if o.assign is not None:
                missing = sorted((t, p) for t, ps in o.assign.items() for p in ps
                                 if (t, p) not in {(x.topic, x.partition) for x in found})
                if missing:
                    raise FileNotFoundError(f"option assign: no segments of {', '.join(f'{t}-{p}' for t, p in missing)} "
                                            f"under {', '.join(o.paths)}")
            elif (o.topics or o.pattern) and not any(o.wants(p.topic, p.partition) for p in found):
                wanted = sorted(o.topics) if o.topics else o.pattern.pattern  # type: ignore[union-attr]
                raise FileNotFoundError(f"{', '.join(o.paths)}: no segment of topics {wanted} found "
                                        f"(topics there: {', '.join(sorted({p.topic for p in found}))})")
            for p in self._parts:
                self._check_duplicates(p)
        return self._parts

    def _check_duplicates(self, part: PartitionFiles) -> None:
        kept: list[Segment] = []
        for seg in part.segments:
            if kept and kept[-1].base_offset == seg.base_offset:
                self.reporter.data_loss(Problem(
                    "overlap", seg.uri, f"{seg.uri} and {kept[-1].uri} both start at offset {seg.base_offset} "
                    f"of {part.topic}-{part.partition} (two copies of a segment); the second is not read",
                    offset=seg.base_offset))
                continue
            kept.append(seg)
        part.segments = kept

    def log(self, part: PartitionFiles) -> PartitionLog:
        """The engine's log of a selected partition (its readable segments)."""
        key = (part.topic, part.partition)
        found = self._logs.get(key)
        if found is None:
            found = self._logs[key] = PartitionLog(part, self.notes)
            for seg in found.segments:
                self._segments[seg.uri] = seg
        return found

    def segment(self, seg: Segment) -> LogSegment:
        """The engine's segment for a listed one (of a selected partition)."""
        found = self._segments.get(seg.uri)
        if found is None:
            part = next(p for p in self.partitions() if (p.topic, p.partition) == (seg.topic, seg.partition))
            self.log(part)
            found = self._segments[seg.uri]
        return found

    def scan(self, seg: Segment, start: int = 0, end: int | None = None) -> dict[str, Any]:
        """Entry headers of a segment from `start` (a batch boundary) to its end (or to `end`, a
        batch boundary): scan_entries' arrays, "stop" and "error" (never raises on damage: the
        executors report it)."""
        return self.segment(seg).scan(start, end)

    def offset_index(self, seg: Segment) -> CheckedOffsetIndex | None:
        """The segment's checked `.index` (its first and last entries verified), or None."""
        return self.segment(seg).offset_index()

    def time_index(self, seg: Segment) -> CheckedTimeIndex | None:
        """The segment's checked `.timeindex`, or None."""
        return self.segment(seg).time_index()

    def check_indexes(self, seg: Segment) -> None:
        """Every index file of a segment checked in full (`kafkacodec verify`)."""
        if not seg.unreadable:
            self.segment(seg).check_indexes()

    # ------------------------------------------------------------------ offsets of a partition
    def earliest(self, part: PartitionFiles) -> int:
        return self.log(part).log_start

    def log_end(self, part: PartitionFiles) -> int:
        """The next offset after the last complete entry (the high end of `latest`)."""
        return self.log(part).log_end

    def aborted_and_lso(self, part: PartitionFiles) -> tuple[list[tuple[int, int, int]], int | None]:
        """read_committed: the aborted transactions and the last stable offset (the first offset
        of the earliest transaction still open at the end, or None when none is open)."""
        state = self.log(part).transactions()
        return list(state.aborted), state.last_stable

    def offset_for_time(self, part: PartitionFiles, timestamp: int) -> int | None:
        """Kafka's offsetsForTimes: the first offset whose record timestamp is at or after
        `timestamp` (ms), or None."""
        found = self.log(part).offset_for_timestamp(timestamp)
        return None if found is None else found[1]

    def _resolve(self, part: PartitionFiles, bound: OffsetBound, starting: bool) -> int | None:
        """A bound as an offset for this partition (None: the log's start or end)."""
        kind, value = bound.for_partition(part.topic, part.partition)
        if kind == "earliest":
            return None if starting else self.earliest(part)
        if kind == "latest":
            return self.log_end(part) if starting else None
        if kind == "offset":
            return value
        found = self.offset_for_time(part, int(value))  # type: ignore[arg-type]
        if found is not None:
            return found
        if starting and self.options.starting_strategy == "error":
            raise ValueError(f"{part.topic}-{part.partition}: no record at or after timestamp {value} "
                             "(startingOffsetsByTimestampStrategy=error, as Spark's Kafka source); set it to "
                             "latest to start at the end")
        return self.log_end(part) if starting else None

    def _check_named(self, bound: OffsetBound, name: str, parts: list[PartitionFiles]) -> None:
        """Spark's rule: offsets given per partition name every partition read, and only those."""
        named = bound.partitions()
        if named is None:
            return
        have = {(p.topic, p.partition) for p in parts}
        if named != have:
            missing, extra = sorted(have - named), sorted(named - have)
            raise ValueError(
                f"option {name}: give an entry for every partition read, as Spark's Kafka source requires "
                f"(-2 earliest, -1 latest). Missing: {', '.join(f'{t}-{p}' for t, p in missing) or 'none'}; "
                f"not in the log: {', '.join(f'{t}-{p}' for t, p in extra) or 'none'}")

    def ranges(self) -> list[PartitionRange]:
        """Every selected partition with the offsets the batch read takes ([start, end))."""
        o = self.options
        parts = self.partitions()
        for bound, name in ((o.starting, "startingOffsets"), (o.ending, "endingOffsets")):
            self._check_named(bound, name + ("ByTimestamp" if bound.kind == "timestamps" else ""), parts)
        push_start, push_end = self.pushdown.offsets()
        out = []
        for part in parts:
            if not part.segments or not self.pushdown.wants(part.topic, part.partition):
                continue
            rng = PartitionRange(part)
            start = self._resolve(part, o.starting, True)
            end = self._resolve(part, o.ending, False)
            earliest = self.earliest(part)
            explicit_end = o.ending.kind not in ("latest",) and end is not None
            latest = self.log_end(part) if explicit_end or o.read_committed else None
            if o.read_committed:
                rng.aborted, lso = self.aborted_and_lso(part)
                if lso is not None:
                    latest = lso
                    end = lso if end is None else end
            if start is not None and start < earliest:
                self.reporter.data_loss(Problem(
                    "range", part.segments[0].uri, f"{part.topic}-{part.partition}: starting offset {start} is "
                    f"below the earliest offset in the log ({earliest}): offsets {start}..{earliest - 1} are gone",
                    offset=start))
                start = earliest
            if end is not None and latest is not None and end > latest:
                self.reporter.data_loss(Problem(
                    "range", part.segments[-1].uri, f"{part.topic}-{part.partition}: ending offset {end} is past "
                    f"the {'last stable offset' if o.read_committed else 'end of the log'} ({latest})",
                    offset=end))
                end = latest
            if start is not None and end is not None and start > end:
                raise ValueError(f"{part.topic}-{part.partition}: the starting offset {start} is after the "
                                 f"ending offset {end}; check startingOffsets/endingOffsets (or their "
                                 "timestamps)")
            if start is None and part.log_start is not None and part.log_start > part.segments[0].base_offset:
                start = part.log_start             # records below log-start-offset-checkpoint are gone
            if push_start is not None:
                start = push_start if start is None else max(start, push_start)
            if push_end is not None:
                end = push_end if end is None else min(end, push_end)
            if start is not None and end is not None and start >= end:
                continue                            # nothing to read here
            rng.start, rng.end = start, end
            out.append(rng)
        return out

    # ------------------------------------------------------------------ splits
    def splits(self, ranges: list[PartitionRange] | None = None) -> list[Split]:
        ranges = self.ranges() if ranges is None else ranges
        out = [Split(p.path, *(partition_of(p.path.rstrip("/").rsplit("/", 1)[-1]) or ("", 0)), 0, 0,
                     problem=p) for p in self._unreadable]
        pieces = [piece for r in ranges for piece in self._segment_ranges(r)]
        total = sum(b - a for _, _, a, b, _ in pieces)
        split_bytes = self.options.max_partition_bytes
        if self.options.min_partitions:
            split_bytes = max(1, min(split_bytes, -(-total // self.options.min_partitions)))
        min_ts = self.pushdown.min_timestamp_ms()
        for r, i, a, b, seg_end in pieces:
            seg = r.files.segments[i]
            nxt = r.files.segments[i + 1].base_offset if i + 1 < len(r.files.segments) else None
            common = dict(start_offset=r.start, end_offset=r.end, aborted=r.aborted, storage=seg.storage,
                          low=seg.base_offset, high=nxt, cleaned_to=r.files.cleaned_to)
            foreign = self.segment(seg).foreign_format() if seg.tiered and not seg.unreadable else None
            if seg.unreadable or foreign:
                problem = Problem("unreadable", seg.uri, f"{seg.uri} is named like a segment but is "
                                  f"{seg.unreadable or foreign}; its offsets {seg.base_offset}.."
                                  f"{'' if nxt is None else nxt - 1} cannot be read", offset=seg.base_offset)
                if self.options.mode == "FAILFAST":
                    self.reporter.damage(problem)               # before any task starts
                out.append(Split(seg.path, seg.topic, seg.partition, 0, 0, problem=problem,
                                 **common))                     # type: ignore[arg-type]
                continue
            if min_ts is not None:
                a = self._pushdown_start(seg, i == len(r.files.segments) - 1, a, b, min_ts)
                if a >= b:
                    continue
            cuts = self._cuts(seg, a, b, split_bytes)
            for x, y in zip(cuts, cuts[1:]):
                out.append(Split(seg.path, seg.topic, seg.partition, x, y,
                                 check_gap=(y == b and seg_end and nxt is not None), **common))  # type: ignore[arg-type]
        return out

    def _segment_ranges(self, r: PartitionRange) -> list[tuple[PartitionRange, int, int, int, bool]]:
        """(range, segment number, byte start, byte end, reaches the segment's end) of the
        segments holding offsets [r.start, r.end)."""
        segs = r.files.segments
        values = self.pushdown.offset_values()
        out = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            start, end = r.start, r.end
            if values is not None:              # offset IN (...): only the segments holding them
                inside = [v for v in values if v >= seg.base_offset and (nxt is None or v < nxt)]
                if not inside:
                    continue
                start = max(start, min(inside)) if start is not None else min(inside)
                end = min(end, max(inside) + 1) if end is not None else max(inside) + 1
            if start is not None and nxt is not None and nxt <= start:
                continue
            if end is not None and seg.base_offset >= end:
                continue
            a, b = 0, seg.size
            if not seg.unreadable:
                index = self.offset_index(seg) if (start is not None and start > seg.base_offset) or \
                    (end is not None and (nxt is None or end < nxt)) else None
                if index is not None and start is not None and start > seg.base_offset:
                    a = self.segment(seg).seek(start)
                index = self.offset_index(seg) if index is not None else None     # a seek may drop it
                if index is not None and end is not None and (nxt is None or end < nxt):
                    try:
                        found = index.end_position(end)
                    except CorruptRecordError as exc:
                        self.segment(seg).drop(".index", exc)
                        found = None
                    if found is not None:
                        b = found
                wants_start = start is not None and start > seg.base_offset and a == 0
                wants_end = end is not None and (nxt is None or end < nxt) and (b == seg.size or self.exact_end)
                if (wants_start or wants_end) and (not seg.storage.scheme or self.exact_end):
                    lo, hi = _byte_range(self.scan(seg, 0 if wants_start else a), start if wants_start else None,
                                         end if wants_end else None, self.exact_end)
                    a, b = max(a, lo), min(b, hi if hi is not None else b)
            out.append((r, i, a, b, b == seg.size))
        return out

    def _pushdown_start(self, seg: Segment, last: bool, a: int, b: int, min_ts: int) -> int:
        """Skip the head of a segment whose records are all older than min_ts (ms)."""
        if not last and self.time_index(seg) is not None:
            start = self.segment(seg).time_start(min_ts)
            return b if start is None else max(a, start)
        if seg.storage.scheme:
            return a                               # no index: a remote segment is not scanned for this
        scan = self.scan(seg)
        hits = np.flatnonzero((scan["max_timestamp"] >= min_ts) & (scan["position"] >= a))
        if len(hits):
            return max(a, int(scan["position"][hits[0]]))
        return b if scan["error"] is None and int(scan["stop"]) == seg.size else a

    def _cuts(self, seg: Segment, a: int, b: int, split_bytes: int) -> list[int]:
        if b - a <= split_bytes:
            return [a, b]
        index = self.offset_index(seg)
        if index is not None and len(index):
            candidates = index.positions_between(a, b)
        elif not seg.storage.scheme:
            candidates = [int(p) for p in self.scan(seg)["position"] if a < p < b]
        else:
            return [a, b]                          # a remote segment without index: one split
        cuts = [a]
        for p in candidates:
            if p - cuts[-1] >= split_bytes and b - p > 0:
                if index is not None:              # index positions are checked before use
                    try:
                        index.position_at(p)
                    except CorruptRecordError as exc:
                        self.segment(seg).drop(".index", exc)
                        return self._cuts(seg, a, b, split_bytes)
                cuts.append(p)
        return cuts + [b]


def _byte_range(scan: dict[str, Any], start: int | None, end: int | None,
                complete_only: bool) -> tuple[int, int | None]:
    """Bytes of a scanned segment that can hold offsets [start, end): from the first entry
    preceded only by entries below start, to the first entry followed only by entries at or
    above end.  Safe when offsets are out of order; a legacy wrapper names only its last
    offset, so nothing after one is cut off.  When the end lies past every complete entry the
    range runs to the file's end (None: the reader then reports what follows them), or, with
    `complete_only` (a stream), to the end of the complete entries: a partial one is an append
    in progress."""
    positions, sizes, last = scan["position"], scan["size"], scan["last_offset"]
    tail = int(scan["stop"]) if complete_only and scan["error"] is None else None
    if not len(positions):
        return 0, tail if end is not None else None
    a, b = int(positions[0]), None
    if start is not None:
        j = int(np.searchsorted(np.maximum.accumulate(last), start, side="left"))
        a = int(positions[j]) if j < len(positions) else int(positions[-1] + sizes[-1])
    if end is not None:
        first = np.where(scan["magic"] == 2, scan["base_offset"], np.iinfo(np.int64).min)
        following = np.minimum.accumulate(first[::-1])[::-1]       # smallest first offset from k on
        k = int(np.searchsorted(following, end, side="left"))
        b = int(positions[k]) if k < len(positions) else tail
    return a, b
