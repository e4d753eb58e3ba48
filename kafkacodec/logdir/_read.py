"""Reading Kafka log directories: discovery of `<topic>-<partition>/<base offset>.log`
segments, planning of reads (splits at batch boundaries, offset ranges, aborted transactions)
and reading a split into Arrow batches with a corrupt-data policy."""

from __future__ import annotations

import json
import mmap
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from kafkacodec.errors import CorruptRecordError, KafkaCodecError

__all__ = ["discover", "plan", "read_split", "describe", "Options", "Segment", "Split", "MODES",
           "SEGMENT_RE"]

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
PARTITION_RE = re.compile(r"^(.+)-(\d+)$")
MODES = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")
EARLIEST, LATEST = -2, -1

PathLike = Union[str, "os.PathLike[str]"]
OffsetSpec = Callable[[str, int], int]


class Options:
    """Spark-style options: case-insensitive names, string (or plain) values."""

    def __init__(self, options: Options | Mapping[str, Any] | None = None):
        if isinstance(options, Options):
            options = options._values
        self._values: dict[str, Any] = {str(k).lower(): v for k, v in (options or {}).items()}

    def get(self, name: str, default: Any = None) -> Any:
        value = self._values.get(name.lower())
        return default if value is None else value

    def bool(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(f"option {name}={value!r}: use true or false")

    def int(self, name: str, default: int) -> int:
        value = self.get(name)
        try:
            return default if value is None else int(value)
        except ValueError:
            raise ValueError(f"option {name}={value!r}: use a whole number") from None


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
    aborted: list[tuple[int, int, int]] = field(default_factory=list)
    corrupt: str | None = None          # shallow-scan error at `end` (non-FAILFAST modes)


def discover(path: PathLike) -> list[Segment]:
    """The segment files under `path`, sorted by topic, partition and base offset."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(
            f"{root}: no such file or directory; give a Kafka log directory (holding "
            f"<topic>-<partition>/<base offset>.log files), a partition directory or a .log file")
    files: list[Path] | None
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


def _offset_spec(value: Any, default: int) -> OffsetSpec:
    """A number for every partition, or Spark's JSON {"topic": {"0": 23}} (-2 earliest, -1 latest)."""
    text = "" if value is None else str(value).strip()
    if text in ("", "earliest", "latest"):
        fixed = {"": default, "earliest": EARLIEST, "latest": LATEST}[text]
        return lambda t, p: fixed
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


def _mapped(path: PathLike) -> bytes | mmap.mmap:
    """The segment mapped read-only (b"" when empty), guarded against truncation by another
    process (kafkacodec._mapguard): a read past the cut reads zeros instead of killing the
    process with SIGBUS, and close() then raises FileTruncatedError.  Opened without blocking:
    a FIFO or a device raises NotRegularFileError (an OSError) at once."""
    from kafkacodec._mapguard import map_file

    mapping = map_file(path)
    return b"" if mapping is None else mapping


def plan(path: PathLike, options: Options | Mapping[str, Any] | None = None
         ) -> tuple[list[Split], list[tuple[str, int, str]]]:
    """Splits to read and the corrupt entry headers found by the shallow scan
    [(file, position, reason)].  Runs on the driver; reads only entry headers."""
    from kafkacodec._arrow import scan_entries

    opts = Options(options)
    topics = {t.strip() for t in str(opts.get("topics", "")).split(",") if t.strip()}
    starting = _offset_spec(opts.get("startingOffsets"), EARLIEST)
    ending = _offset_spec(opts.get("endingOffsets"), LATEST)
    keep_aborted = opts.bool("keepAborted", False)
    mode = str(opts.get("mode", "FAILFAST")).upper()
    split_bytes = opts.int("maxPartitionBytes", 128 << 20)
    segments = [s for s in discover(path) if not topics or s.topic in topics]
    if topics and not segments:
        raise FileNotFoundError(f"{path}: no segment of topics {sorted(topics)} found")
    by_partition: dict[tuple[str, int], list[Segment]] = {}
    for s in segments:
        by_partition.setdefault((s.topic, s.partition), []).append(s)

    splits: list[Split] = []
    corrupt: list[tuple[str, int, str]] = []
    for (topic, partition), segs in by_partition.items():
        start = starting(topic, partition)
        end = ending(topic, partition)
        start_offset = None if start == EARLIEST else start
        end_offset = None if end == LATEST else end
        open_txn: dict[int, int] = {}
        aborted: list[tuple[int, int, int]] = []
        chosen: list[Split] = []
        for i, seg in enumerate(segs):
            next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
            wanted = not ((start_offset is not None and next_base is not None and next_base <= start_offset)
                          or (end_offset is not None and seg.base_offset >= end_offset))
            if not wanted and keep_aborted:
                continue                  # (without keepAborted its markers still count)
            need_scan = not keep_aborted or seg.size > split_bytes
            if not need_scan:
                chosen.append(Split(seg.path, topic, partition, 0, seg.size, start_offset, end_offset))
                continue
            data = _mapped(seg.path)
            try:
                scan = scan_entries(data, source=seg.path, strict=(mode == "FAILFAST"))
            except KafkaCodecError as exc:
                exc.args = (f"{exc}. To skip corrupt data read with option mode=DROPMALFORMED "
                            "(or PERMISSIVE); `kafkacodec verify DIR` lists every problem",)
                raise
            finally:
                if isinstance(data, mmap.mmap):
                    data.close()
            if scan["error"]:
                corrupt.append((seg.path, scan["stop"], scan["error"]))
            if not keep_aborted:
                _collect_aborted(scan, open_txn, aborted)
            if wanted:
                chosen += _cut(seg, scan, split_bytes, start_offset, end_offset)
        for split in chosen:
            split.aborted = aborted
        splits += chosen
    return splits, corrupt


def _collect_aborted(scan: dict[str, Any], open_txn: dict[int, int],
                     aborted: list[tuple[int, int, int]]) -> None:
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


def _cut(seg: Segment, scan: dict[str, Any], split_bytes: int, start_offset: int | None,
         end_offset: int | None) -> list[Split]:
    positions = scan["position"]
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


def read_split(split: Split, *, validate_crc: bool = True, include_headers: bool = True,
               keep_control: bool = False, max_rows: int = 65536, mode: str = "FAILFAST",
               corrupt_column: str = "_corrupt_record",
               on_error: Callable[[KafkaCodecError], None] | None = None) -> Iterator[Any]:
    """Decode one split into Arrow record batches.  mode FAILFAST raises on corrupt data;
    DROPMALFORMED skips the corrupt entry (or the rest of the split when the framing is broken)
    and calls on_error(exc); PERMISSIVE also yields one row naming the problem in
    `corrupt_column` (null on every good row)."""
    report = _warn if on_error is None else on_error
    import pyarrow as pa

    from kafkacodec._arrow import ArrowDecoder

    def decoder() -> ArrowDecoder:
        return ArrowDecoder(split.topic, split.partition, validate_crc=validate_crc,
                            include_headers=include_headers, keep_control=keep_control,
                            start_offset=split.start_offset, end_offset=split.end_offset,
                            aborted=split.aborted, max_rows=max_rows, source=split.path)

    def with_corrupt(rb: Any, reason: str | None = None) -> Any:
        if mode != "PERMISSIVE":
            return rb
        if reason is None:
            return rb.append_column(corrupt_column, pa.nulls(rb.num_rows, pa.string()))
        return rb.append_column(corrupt_column, pa.array([reason] * rb.num_rows, pa.string()))

    def corrupt_row(schema: Any, reason: str, offset: int | None) -> Any:
        columns = [pa.nulls(1, f.type) if f.name not in ("topic", "partition", "offset")
                   else pa.array([{"topic": split.topic, "partition": split.partition,
                                   "offset": offset}[f.name]], f.type) for f in schema]
        return pa.RecordBatch.from_arrays(columns + [pa.array([reason], pa.string())],
                                          names=schema.names + [corrupt_column])

    data = _mapped(split.path)
    try:
        with memoryview(data) as view:
            yield from _read_view(view, split, decoder, with_corrupt, corrupt_row, mode, report)
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


def _warn(exc: KafkaCodecError) -> None:
    print(f"kafkalog: skipping corrupt data: {exc}", file=sys.stderr)


def _read_view(view: memoryview, split: Split, decoder: Callable[[], Any],
               with_corrupt: Callable[..., Any], corrupt_row: Callable[[Any, str, int | None], Any],
               mode: str, on_error: Callable[[KafkaCodecError], None]) -> Iterator[Any]:
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
            on_error(exc)
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
    if split.corrupt and mode != "FAILFAST":
        on_error(CorruptRecordError(split.corrupt, position=end))
    if split.corrupt and mode == "PERMISSIVE":
        yield corrupt_row(dec.schema, f"{split.corrupt} at byte {end}", None)


def describe(path: PathLike) -> dict[str, Any]:
    """Counts for a log directory: segments, bytes, data records per topic (aborted ones
    included), records in aborted transactions, control records."""
    from kafkacodec._arrow import ArrowDecoder

    splits, corrupt = plan(path, {"mode": "DROPMALFORMED"})
    per_topic: dict[str, int] = {}
    result: dict[str, Any] = {"segments": len({s.path for s in splits}), "bytes": 0, "records": 0,
              "aborted_records": 0, "control_records": 0, "per_topic": per_topic, "corrupt": len(corrupt)}
    seen = set()
    for s in splits:
        if s.path not in seen:
            seen.add(s.path)
            result["bytes"] += os.path.getsize(s.path)
        data = _mapped(s.path)
        try:
            with memoryview(data) as view:
                every = ArrowDecoder(s.topic, s.partition, keep_control=True, include_headers=False,
                                     max_rows=1 << 30).decode(view, s.start, s.end)[0]
                kept = ArrowDecoder(s.topic, s.partition, aborted=s.aborted, include_headers=False,
                                    max_rows=1 << 30).decode(view, s.start, s.end)[0]
        finally:
            if isinstance(data, mmap.mmap):
                data.close()
        control = sum(every.column("isControl").to_pylist())
        data_records = every.num_rows - control
        result["control_records"] += control
        result["aborted_records"] += data_records - kept.num_rows
        result["records"] += data_records
        per_topic[s.topic] = per_topic.get(s.topic, 0) + data_records
    return result
