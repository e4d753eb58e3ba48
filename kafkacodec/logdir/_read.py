"""Reading Kafka log directories: discovery of segments (`_layout`), planning of reads
(`_plan`: offsets, indexes, splits at batch boundaries, aborted transactions) and reading a
split into Arrow batches with the damage and data-loss policies (`_problems`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

from kafkacodec._format import COMPRESSION_MASK, CONTROL_FLAG, TRANSACTIONAL_FLAG, V2_HEADER_SIZE, entry_head
from kafkacodec.errors import CorruptRecordError, DataError, FileTruncatedError, KafkaCodecError
from kafkacodec.logdir._layout import PARTITION_RE, SEGMENT_RE, Segment, find_partitions
from kafkacodec.logdir._options import Options
from kafkacodec.logdir._plan import Planner, Split
from kafkacodec.logdir.partition_log import REMOTE_WINDOW as WINDOW
from kafkacodec.logdir._problems import DAMAGE, Problem, Reporter, not_a_segment, warn
from kafkacodec.logdir._pushdown import INT64_MAX, INT64_MIN, Pushdown
from kafkacodec.logdir._readopts import MODES, ReadOptions

__all__ = ["discover", "plan", "read_split", "count_split", "describe", "Options", "Segment", "Split", "MODES",
           "SEGMENT_RE", "PARTITION_RE", "ReadOptions", "Problem", "Pushdown"]

MIN_V2_RECORD = 7                # length, attributes, timestamp and offset deltas, key and value
                                 # lengths, header count: one byte each at least
PathLike = Union[str, "os.PathLike[str]"]
Paths = Union[PathLike, Sequence[PathLike], None]


def _paths(path: Paths) -> list[str]:
    if path is None:
        return []
    if isinstance(path, (str, os.PathLike)):
        return [os.fspath(path)]
    return [os.fspath(p) for p in path]


def discover(path: Paths, options: Mapping[str, Any] | None = None) -> list[Segment]:
    """The segment files under `path` (a log directory, a partition directory, a .log file,
    a URI, a glob, or a list of them), sorted by topic, partition and base offset."""
    parts, _ = find_partitions(_paths(path), {k: str(v) for k, v in (options or {}).items()})
    return [s for p in parts for s in p.segments]


def read_options(path: Paths, options: ReadOptions | Options | Mapping[str, Any] | None,
                 streaming: bool = False) -> ReadOptions:
    if isinstance(options, ReadOptions):
        return options
    given = Options(options)
    values = {name: given.get(name) for name in given.names()}
    if path is not None:
        values.pop("path", None)
        values["paths"] = _paths(path)
    return ReadOptions.parse(values, streaming=streaming)


def plan(path: Paths, options: ReadOptions | Options | Mapping[str, Any] | None = None, *,
         pushdown: Pushdown | None = None, on_problem: Callable[[Problem], None] | None = None
         ) -> tuple[list[Split], list[Problem]]:
    """The splits of a batch read and the problems noted while planning.  Runs on the driver;
    reads index files and entry headers, never records.  FAILFAST damage found here (an
    unreadable segment) and data loss (with failOnDataLoss) raise."""
    ro = read_options(path, options)
    noted: list[Problem] = []

    def note(problem: Problem) -> None:
        noted.append(problem)
        if on_problem is not None:
            on_problem(problem)
        else:
            warn(problem)

    with Planner(ro, Reporter(ro.mode, ro.fail_on_data_loss, note), pushdown) as planner:
        return planner.splits(), noted


def aborted_transactions(options: Mapping[str, Any]) -> int:
    """How many aborted transactions the partitions a read with these source options covers
    hold (their .txnindex files, else entry headers; never records).  Driver side."""
    ro = ReadOptions.parse(dict(options, mode="DROPMALFORMED", failOnDataLoss="false"))
    with Planner(ro, Reporter(ro.mode, False, lambda problem: None)) as planner:
        return sum(len(planner.aborted_and_lso(p)[0]) for p in planner.partitions())


# ------------------------------------------------------------------------------ executors

def int64_values(column: Any) -> Any:
    """A numpy view of an int64 Arrow array without nulls (the decoder's offsets).  Not
    `to_numpy()`: pyarrow imports pandas on its first conversion to numpy (0.3-0.4 s of a
    `kafkacodec read`)."""
    import numpy as np

    return np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=8 * column.offset)


def boolean_array(mask: Any) -> Any:
    """A numpy bool mask as an Arrow boolean array (no pandas import, as int64_values)."""
    import numpy as np
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def read_split(split: Split, *, validate_crc: bool = True, include_headers: bool = True,
               keep_control: bool = False, max_rows: int = 65536, mode: str = "FAILFAST",
               corrupt_column: str = "_corrupt_record",
               on_error: Callable[[KafkaCodecError], None] | None = None,
               fail_on_data_loss: bool = True, columns: Sequence[str] | None = None,
               pushdown: Pushdown | None = None,
               on_problem: Callable[[Problem], None] | None = None,
               on_aborted: Callable[[int], None] | None = None) -> Iterator[Any]:
    """Decode one split into Arrow record batches.

    Damage (corrupt entries, a partial entry at the end, an unreadable segment) follows `mode`:
    FAILFAST raises; DROPMALFORMED skips the entry (the rest of the split when its framing is
    lost) and reports it; PERMISSIVE also yields one row naming the problem in `corrupt_column`
    (null on every good row).  Offsets outside the segment's range (overlapping copies), going
    back, or missing before the next segment follow `fail_on_data_loss`: raise, or report and
    read each offset once.  Problems go to `on_problem`, else damage to `on_error(exc)`, else
    stderr.  `columns` selects (and orders) the output columns; `pushdown` rows are filtered.
    The records of the split's aborted transactions (`split.aborted`: read_committed) are passed
    over by the walker's filter; `on_aborted(n)` hears how many, per decode of the split that
    succeeds (its rows are yielded; a decode that raises is read again and counted then).
    A segment that another process cuts while it is read, or since it was planned, is not damage:
    FileTruncatedError in every mode (the zeros read past the cut are never rows)."""
    def tell(problem: Problem) -> None:
        if on_problem is not None:
            on_problem(problem)
        elif on_error is not None and problem.kind in DAMAGE:
            on_error(problem.error or CorruptRecordError(problem.message, position=problem.position))
        else:
            warn(problem)

    reader = _SplitReader(split, Reporter(mode, fail_on_data_loss, tell), validate_crc=validate_crc,
                          include_headers=include_headers, keep_control=keep_control, max_rows=max_rows,
                          corrupt_column=corrupt_column, columns=columns, pushdown=pushdown,
                          on_aborted=on_aborted)
    yield from reader.batches()


def count_split(split: Split, *, validate_crc: bool = True, keep_control: bool = False,
                mode: str = "FAILFAST", corrupt_column: str = "_corrupt_record",
                fail_on_data_loss: bool = True, pushdown: Pushdown | None = None,
                on_problem: Callable[[Problem], None] | None = None) -> int:
    """The number of rows read_split() yields for the same arguments, answered from batch headers
    where they hold it: a v2 batch wholly inside the offsets wanted, its checksum checked (with
    validate_crc), counts its header's record count (none when it is a control batch and
    keep_control is off) without decompressing.  Everything else is decoded as read_split does:
    legacy entries, batches at the edges of the range, damaged ones, transactional batches when
    the split has aborted transactions, every batch when a predicate other than a range of
    offsets or a partition or topic is pushed, or when offsets may go back and be read once
    (fail_on_data_loss false).  Damage and data loss are reported as read_split reports them.
    What a header cannot prove is a batch whose checksum holds but whose records do not hold
    what its header says (more records than its count, a malformed record, an offset outside
    its span: a client's bug or a crafted file, which Kafka's broker refuses on append):
    read_split raises on it or drops it, this counts what the header says."""
    reader = _SplitReader(split, Reporter(mode, fail_on_data_loss, on_problem or warn), validate_crc=validate_crc,
                          include_headers=False, keep_control=keep_control, max_rows=65536,
                          corrupt_column=corrupt_column, columns=["offset"], pushdown=pushdown)
    return reader.count()


class _SplitReader:
    def __init__(self, split: Split, reporter: Reporter, *, validate_crc: bool, include_headers: bool,
                 keep_control: bool, max_rows: int, corrupt_column: str, columns: Sequence[str] | None,
                 pushdown: Pushdown | None, on_aborted: Callable[[int], None] | None = None):
        from kafkacodec.arrow import SCHEMA, SCHEMA_NO_HEADERS

        self.split = split
        self.reporter = reporter
        self.permissive = reporter.mode == "PERMISSIVE"
        self.corrupt_column = corrupt_column
        self.pushdown = pushdown if pushdown else None
        full = SCHEMA if include_headers else SCHEMA_NO_HEADERS
        self.columns = list(columns) if columns is not None else list(full.names)
        wanted = set(self.columns) | {"offset"} | {p.column for p in (pushdown.predicates if pushdown else ())}
        self.decode_columns = [n for n in full.names if n in wanted]
        # the records wanted, within the segment's own offsets (a read-once bound on overlaps)
        start, end = split.start_offset, split.end_offset
        if split.low is not None:
            start = split.low if start is None else max(start, split.low)
        if split.high is not None:
            end = split.high if end is None else min(end, split.high)
        self.kwargs: dict[str, Any] = dict(validate_crc=validate_crc, include_headers=include_headers, keep_control=keep_control,
                           start_offset=start, end_offset=end, aborted=split.aborted, max_rows=max_rows,
                           source=split.uri)
        self.on_aborted = on_aborted
        self.counted: tuple[int, int] | None = None   # count(): the offsets batch headers may answer
        self.dedupe = False                 # offsets went back in this split: read each once
        self.running_max = -(2**63)         # the largest offset yielded
        self.src: Any = None                # the open segment (a storage.Source)
        self.read_end = 0                   # the end of the window being read

    def decoder(self) -> Any:
        """A decoder of the columns wanted only (unselected keys, values and headers are skipped)."""
        from kafkacodec.arrow import ArrowDecoder

        return ArrowDecoder(self.split.topic, self.split.partition, columns=self.decode_columns, **self.kwargs)

    def count(self) -> int:
        """The rows batches() yields, from batch headers where they answer (count_split)."""
        self.counted = self._header_range()
        return sum(out if isinstance(out, int) else out.num_rows for out in self.batches())

    def _header_range(self) -> tuple[int, int] | None:
        """[lo, hi): the offsets whose batches' headers give their rows, or None (decode all)."""
        s, lo, hi = self.split, INT64_MIN, INT64_MAX
        if not self.reporter.fail_on_data_loss:         # going back would be read once: per row
            return None
        if self.pushdown is not None:
            for p in self.pushdown.predicates:
                # a partition, a topic and a range of offsets keep or drop whole batches
                if not (p.column in ("partition", "topic") or p.column == "offset" and p.op != "in"):
                    return None
            if not self.pushdown.wants(s.topic, s.partition):
                return None
            lo, hi = (v if v is not None else d for v, d in zip(self.pushdown.offsets(), (lo, hi)))
        start, end = self.kwargs["start_offset"], self.kwargs["end_offset"]
        return max(lo, start if start is not None else lo), min(hi, end if end is not None else hi)

    # ---------------------------------------------------------------------- output
    def finish(self, rb: Any, reason: str | None = None) -> Any:
        """Projection, pushed predicates, read-once filter and the corrupt column."""
        import numpy as np
        import pyarrow as pa

        if reason is None and rb.num_rows:
            offsets = int64_values(rb.column("offset"))
            if self.dedupe:                  # offsets went back: keep each offset's first row
                before = np.maximum.accumulate(np.concatenate([[self.running_max], offsets[:-1]]))
                rb = rb.filter(boolean_array(offsets > before))
            self.running_max = max(self.running_max, int(offsets.max()))
        if self.permissive:
            rb = rb.append_column(self.corrupt_column,
                                  pa.nulls(rb.num_rows, pa.string()) if reason is None
                                  else pa.array([reason] * rb.num_rows, pa.string()))
        if self.pushdown is not None and rb.num_rows:
            rb = rb.filter(self.pushdown.mask(rb))
        wanted = self.columns + ([self.corrupt_column] if self.permissive else [])
        return rb.select(wanted) if rb.schema.names != wanted else rb

    def corrupt_row(self, reason: str, offset: int | None) -> Any:
        import pyarrow as pa

        from kafkacodec.arrow import SCHEMA

        s = self.split
        fixed = {"topic": s.topic, "partition": s.partition, "offset": offset}
        columns = [pa.array([fixed[n]], SCHEMA.field(n).type) if n in fixed else pa.nulls(1, SCHEMA.field(n).type)
                   for n in self.decode_columns]
        return self.finish(pa.RecordBatch.from_arrays(columns, names=self.decode_columns), reason)

    def report(self, problem: Problem) -> None:
        """Damage found in the segment, unless another process cut it while it was read: the
        zeros past the cut are not data, FileTruncatedError (docs/reading.md, "Truncated live
        segments").  Every damage found while reading passes here."""
        if isinstance(problem.error, FileTruncatedError):
            raise problem.error
        if self.src is not None:
            self.src.check(self.read_end, problem.position, problem.offset, problem.error)
        self.reporter.damage(problem)

    def damage(self, problem: Problem) -> Iterator[Any]:
        self.report(problem)
        if self.permissive:
            rb = self.corrupt_row(problem.message, problem.offset)
            if rb.num_rows:
                yield rb

    # ---------------------------------------------------------------------- reading
    def batches(self) -> Iterator[Any]:
        s = self.split
        if s.problem is not None:
            yield from self.damage(s.problem)
            return
        try:
            src = s.storage.open(s.path)
        except OSError as exc:
            yield from self.damage(Problem("unreadable", s.uri, f"{s.uri} cannot be read: {exc}"))
            return
        self.src = src
        try:
            yield from self._read(src)
        finally:
            self.src = None
            src.close()

    def _read(self, src: Any) -> Iterator[Any]:
        from kafkacodec.arrow import scan_entries

        s = self.split
        end = s.end
        if src.size < s.end:                        # cut since the plan: what it planned is gone
            raise FileTruncatedError(f"{s.uri}: the file shrank to {src.size} bytes (the plan read {s.end}) "
                                     "while being read", path=s.uri, size=src.size, position=src.size)
        pos, want, last_seen, prev_last = s.start, WINDOW, None, None
        while pos < end:
            window_end = self.read_end = min(end, pos + want)   # bounds the scan table, not only the reads
            view, base = src.view(pos, window_end)
            scan = scan_entries(view, pos - base, window_end - base, source=s.uri, base=base, strict=False,
                                check_crc=self.counted is not None and self.kwargs["validate_crc"])
            stop, error = int(scan["stop"]), scan["error"]
            if len(scan["position"]):
                prev_last = self._check_offsets(scan, prev_last)
                last_seen = int(scan["last_offset"][-1]) if last_seen is None else max(last_seen, int(scan["last_offset"].max()))
            yield from (self._count if self.counted is not None else self._decode)(view, base, pos, stop, scan)
            if error:
                reason = not_a_segment(bytes(memoryview(view)[0 - base:17 - base]), src.size) if stop == 0 else None
                if reason is not None:              # the first entry is not one: not a Kafka file at all
                    yield from self.damage(Problem("corrupt", s.uri, f"{s.uri}: this is not a Kafka segment: "
                                                   f"{reason}", 0))
                    return
                yield from self.damage(Problem("corrupt", s.uri, f"{error}; the rest of the segment is "
                                               "unreadable (its framing is lost)", error.position, error.offset, error))
                return
            if stop >= window_end:
                pos, want = stop, WINDOW
                continue
            head = entry_head(memoryview(view)[:window_end - base], stop - base)   # None: < 12 bytes left
            declared = 0 if head is None else head[1]
            if window_end < end and stop + declared <= end:
                pos, want = stop, max(WINDOW, declared)  # the next window starts at this entry
                continue
            tail = end - stop
            what = (f"an entry at byte {stop} declares {declared} bytes but only {tail} remain" if declared
                    else f"{tail} bytes at byte {stop} are too few for an entry header")
            yield from self.damage(Problem(
                "partial", s.uri, f"{s.uri}: {what} (a segment cut short, a corrupt size field, or an append "
                "still in progress)", stop, None if head is None else head[0]))
            return
        if s.check_gap:
            self._check_gap(last_seen)

    def decode(self, dec: Any, view: Any, base: int, pos: int, stop: int) -> tuple[Any, int]:
        """One dec.decode() call; the aborted records it passed over go to on_aborted (a call
        that raises passes over none: its entries are read again)."""
        before = dec.aborted_records if self.on_aborted is not None else 0
        rb, nxt = dec.decode(view, pos - base, stop - base, base)
        if self.on_aborted is not None and dec.aborted_records != before:
            self.on_aborted(dec.aborted_records - before)
        return rb, nxt

    def _decode(self, view: Any, base: int, pos: int, stop: int, scan: dict[str, Any]) -> Iterator[Any]:
        dec = self.decoder()
        while pos < stop:
            try:
                rb, nxt = self.decode(dec, view, base, pos, stop)
            except DataError as exc:          # misuse and a cut file are not damage
                failed = dec.failed_entry + base
                self.report(Problem("corrupt", self.split.uri, str(exc), exc.position, exc.offset, exc))
                dec = self.decoder()
                while pos < failed:                  # the rows before the failed entry
                    rb, nxt = self.decode(dec, view, base, pos, failed)
                    pos = nxt + base
                    if rb.num_rows:
                        yield self.finish(rb)
                if self.permissive:
                    row = self.corrupt_row(str(exc), exc.offset)
                    if row.num_rows:
                        yield row
                j = int(scan["position"].searchsorted(failed))
                pos = failed + int(scan["size"][j]) if j < len(scan["position"]) else stop
                dec = self.decoder()
                continue
            if rb.num_rows:
                out = self.finish(rb)
                if out.num_rows:
                    yield out
            new = nxt + base
            if new == pos and not rb.num_rows:     # an entry split at the Arrow size limit
                break                              # returns rows at the same position
            pos = new

    def _count(self, view: Any, base: int, pos: int, stop: int, scan: dict[str, Any]) -> Iterator[Any]:
        """count(): the header counts of the entries in [pos, stop) that they answer for (ints),
        the others decoded (their row batches), in runs."""
        import numpy as np

        assert self.counted is not None
        if pos == stop:
            return
        lo, hi = self.counted
        magic, attributes, base_offset, last_offset = scan["magic"], scan["attributes"], scan["base_offset"], scan["last_offset"]
        count = scan["count"].astype(np.int64)
        # (a last offset below the base one wrapped past 2^63 - 1: its records' offsets too)
        known = (magic == 2) & (base_offset >= lo) & (last_offset < hi) & (last_offset >= base_offset)
        # a count no batch can hold is decoded (and found out): each record has its own offset
        # in the batch's span, and an uncompressed record takes 7 bytes at least
        known &= (count >= 0) & (count <= last_offset - base_offset + 1)
        known &= ((attributes & COMPRESSION_MASK) != 0) | (count * MIN_V2_RECORD <= scan["size"] - V2_HEADER_SIZE)
        if self.kwargs["validate_crc"]:
            known &= scan["crc_valid"]
        if self.split.aborted:                  # read_committed: the decoder's aborted-transaction filter
            known &= (attributes & TRANSACTIONAL_FLAG) == 0
        control = (attributes & CONTROL_FLAG) != 0
        counts = np.where(control & (not self.kwargs["keep_control"]), 0, count)
        positions = scan["position"]
        cuts = np.flatnonzero(np.diff(known.astype(np.int8))) + 1     # where runs change
        for i, j in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(known)]])):
            if known[i]:
                yield int(counts[i:j].sum())
            else:
                run_end = int(positions[j]) if j < len(positions) else stop
                yield from self._decode(view, base, int(positions[i]), run_end, scan)

    def _check_offsets(self, scan: dict[str, Any], prev_last: int | None) -> int:
        """Data loss in this window: offsets below the segment's name, reaching the next
        segment, or going back (returns the window's last offset)."""
        import numpy as np

        s = self.split
        base, last = scan["base_offset"], scan["last_offset"]
        first_base = np.where(scan["magic"] == 2, base, last)     # a legacy wrapper names its last offset
        if s.low is not None and (first_base < s.low).any():
            j = int(np.flatnonzero(first_base < s.low)[0])
            self.reporter.data_loss(Problem(
                "overlap", s.uri, f"{s.uri} holds offset {int(first_base[j])} at byte {int(scan['position'][j])}, "
                f"below its name ({s.low}): it overlaps the segment before it (duplicate offsets)",
                int(scan["position"][j]), int(first_base[j])))
        if s.high is not None and (last >= s.high).any():
            j = int(np.flatnonzero(last >= s.high)[0])
            self.reporter.data_loss(Problem(
                "overlap", s.uri, f"{s.uri} holds offsets up to {int(last.max())} from byte "
                f"{int(scan['position'][j])}, but the next segment starts at {s.high}: they overlap "
                "(duplicate offsets)", int(scan["position"][j]), s.high))
        previous = np.concatenate([[prev_last if prev_last is not None else np.iinfo(np.int64).min], last[:-1]])
        back = np.flatnonzero(first_base <= previous)
        if len(back):
            j = int(back[0])
            self.reporter.data_loss(Problem(
                "overlap", s.uri, f"{s.uri}: offsets go back at byte {int(scan['position'][j])} (offset "
                f"{int(first_base[j])} after {int(previous[j])}): duplicate offsets", int(scan["position"][j]),
                int(first_base[j])))
            self.dedupe = True
        return int(last[-1])

    def _check_gap(self, last_seen: int | None) -> None:
        s = self.split
        if s.high is None:
            return
        following = (last_seen + 1) if last_seen is not None else s.low
        if following is None or following >= s.high:
            return
        if s.cleaned_to is not None and s.high <= s.cleaned_to:
            return                                   # compaction removed them (cleaner-offset-checkpoint)
        self.reporter.data_loss(Problem(
            "gap", s.uri, f"{s.topic}-{s.partition}: offsets {following}..{s.high - 1} are missing between "
            f"{s.uri} (ends at {following - 1}) and the next segment (starts at {s.high}): a missing segment "
            "(on a compacted topic such gaps are normal: read it with failOnDataLoss=false)", offset=following))


def describe(path: Paths) -> dict[str, Any]:
    """Counts for a log directory (logdir._counts: data records per topic and in all, control
    records, records of aborted transactions), segments, bytes and the damage found."""
    from dataclasses import replace

    from kafkacodec.logdir._counts import COUNT_COLUMNS, RecordCounts

    ro = read_options(path, {"mode": "DROPMALFORMED", "failOnDataLoss": "false"})
    problems: list[Problem] = []
    planner = Planner(ro, Reporter(ro.mode, False, problems.append))
    splits = planner.splits()
    aborted = {(p.topic, p.partition): planner.aborted_and_lso(p)[0] for p in planner.partitions()}
    total, per_topic = RecordCounts(), dict[str, RecordCounts]()
    size = 0
    for s in splits:
        if s.start == 0 and s.problem is None:
            size += s.storage.info(s.path).size
        counts = per_topic.setdefault(s.topic, RecordCounts())
        for rb in read_split(replace(s, aborted=aborted.get((s.topic, s.partition), [])), include_headers=False,
                             keep_control=True, mode="DROPMALFORMED", fail_on_data_loss=False, columns=COUNT_COLUMNS,
                             on_problem=problems.append, on_aborted=counts.add_aborted):
            counts.add(rb)
    for counts in per_topic.values():
        for name, value in counts.as_dict().items():
            setattr(total, name, getattr(total, name) + value)
    return {"segments": len({s.path for s in splits if s.problem is None}), "bytes": size, **total.as_dict(),
            "per_topic": {t: c.records for t, c in per_topic.items()},
            "corrupt": sum(p.kind in DAMAGE for p in problems)}
