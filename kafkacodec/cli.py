"""The `kafkacodec` command: dump, verify, convert and generate Kafka log segments, serve log
directories (or a cluster) to Kafka clients, run the segments <-> Parquet job on Spark, and mirror
topics between clusters.  `kafkacodec --help` and `kafkacodec COMMAND --help`.

Every command that writes a file goes through _atomic.atomic_output (a temporary file beside
the target, fsync, rename): OUT is complete or untouched, never the input, and nothing the
command did not create is ever deleted.  main() turns every error into one line on stderr and
the documented exit code."""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafkacodec._records import FileRecords, Record, RecordBatch, Records

EXIT_OK = 0
EXIT_DATA = 1          # corrupt data found (verify), or corrupt data stopped the command
EXIT_USAGE = 2         # bad arguments: argparse, OUT is the input, segments in the way
EXIT_INPUT = 3         # a file that cannot be read or written (missing, not regular, disk full)
EXIT_UNAVAILABLE = 4   # an optional part is not installed (pyarrow, pyspark)

EXIT_CODES = """exit codes:
  0  success
  1  corrupt data found (verify), or corrupt data stopped the command
  2  bad arguments (also: OUT is the input, or generate would replace other segments)
  3  a file could not be read or written: missing, not a regular file, no permission,
     no space left (OUT is then left as it was)
  4  optional part missing: pip install "kafkacodec[arrow]" (verify),
     "kafkacodec[spark]" (spark)"""

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
TS_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
# The extra that provides each optional top-level module.
OPTIONAL_MODULES = {"pyarrow": "arrow", "pyspark": "spark", "pandas": "spark", "kafka": "mirror",
                    "prometheus_client": "mirror", "tqdm": "mirror"}
# Commands whose extra holds every optional module they import.
COMMAND_EXTRAS = {"serve": "serve", "mirror": "mirror"}


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_DATA):
        super().__init__(message)
        self.code = code


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, default=str)
    sys.stdout.write("\n")


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def _open_segment(path: str | Path, command: str) -> FileRecords:
    """A segment file, mapped (FileRecords).  Anything but a regular file is refused before it
    is opened: a FIFO would block, a device (/dev/zero) never ends."""
    from kafkacodec import FileRecords

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CliError(f"{path}: no such file; give a Kafka segment such as "
                       "my-topic-0/00000000000000000000.log", EXIT_INPUT) from None
    if not stat.S_ISREG(mode):
        hint = " (`kafkacodec verify DIR` checks a whole directory)" if stat.S_ISDIR(mode) else ""
        raise CliError(f"{path} is a {_file_kind(mode)}, not a regular file; {command} takes "
                       f"segment files{hint}", EXIT_INPUT)
    return FileRecords.open(path)


def _name_output(error: OSError, path: str | Path) -> OSError:
    """An OSError from writing, with the output's name when the system gave none."""
    if error.filename is None:
        error.filename = os.fspath(path)
    return error


# ---------------------------------------------------------------------------------- dump

def _batch_info(batch: RecordBatch) -> dict[str, Any]:
    """The fields kafka-dump-log prints for one entry (a kafkacodec RecordBatch)."""
    common = {
        "position": batch.position, "timestampType": TS_NAMES[int(batch.timestamp_type)],
        "timestamp": batch.max_timestamp, "size": batch.size_in_bytes, "magic": batch.magic,
        "compresscodec": batch.compression.name.lower(), "crc": batch.crc, "isvalid": batch.is_valid(),
    }
    if batch.magic < 2:
        return {"offset": batch.last_offset, **common}
    return {
        "baseOffset": batch.base_offset, "lastOffset": batch.last_offset, "count": batch.record_count,
        "baseSequence": batch.base_sequence, "lastSequence": batch.last_sequence,
        "producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional, "isControl": batch.is_control,
        "deleteHorizonMs": batch.delete_horizon_ms, **common,
    }


def _batch_line(b: dict[str, Any]) -> str:
    def text(v: object) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    if "baseOffset" in b:              # magic >= 2: the v2 header (as Kafka reads it)
        dh = "OptionalLong.empty" if b["deleteHorizonMs"] is None else f"OptionalLong[{b['deleteHorizonMs']}]"
        head = " ".join(f"{k}: {text(b[k])}" for k in (
            "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId",
            "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl"))
        head += f" deleteHorizonMs: {dh}"
    else:
        head = f"offset: {b['offset']}"
    return (f"{head} position: {b['position']} {b['timestampType']}: {b['timestamp']} size: {b['size']} "
            f"magic: {b['magic']} compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {text(b['isvalid'])}")


def _record_fields(b: dict[str, Any], r: Record, print_data: bool) -> dict[str, Any]:
    """kafka-dump-log's fields for one record; timestamps are printed as the int64 they are."""
    from kafkacodec import ControlType

    key, value = r.key, r.value
    out: dict[str, Any] = {"offset": r.offset, b["timestampType"]: r.timestamp,
                           "keySize": -1 if key is None else len(key),
                           "valueSize": -1 if value is None else len(value)}
    if b["magic"] >= 2:
        out["sequence"] = r.sequence
        out["headerKeys"] = [k for k, _ in r.headers]
    control = r.control_type
    if control is not None:
        if control in (ControlType.ABORT, ControlType.COMMIT) and r.coordinator_epoch is not None:
            out["endTxnMarker"] = ControlType(control).name
            out["coordinatorEpoch"] = r.coordinator_epoch
        else:
            out["controlType"] = int(control)
    elif print_data:
        if key is not None:
            out["key"] = key.decode("utf-8", "replace")
        if value is not None:
            out["payload"] = value.decode("utf-8", "replace")
    return out


def _record_line(fields: dict[str, Any]) -> str:
    parts = []
    for k, v in fields.items():
        if k == "headerKeys":
            v = "[" + ",".join(v) + "]"
        parts.append(f"{k}: {v}")
    return "| " + " ".join(parts)


class _Gaps:
    """Non-consecutive record offsets, as kafka-dump-log lists them (the first 100 kept)."""
    KEEP = 100

    def __init__(self) -> None:
        self.kept: list[tuple[str, int, int]] = []
        self.count = 0

    def add(self, path: str, previous: int, offset: int) -> None:
        self.count += 1
        if len(self.kept) < self.KEEP:
            self.kept.append((path, previous, offset))

    def report(self) -> None:
        if not self.count:
            return
        print("Non-consecutive offsets:", file=sys.stderr)
        for path, a, b in self.kept:
            print(f"  {path}: {a} is followed by {b}", file=sys.stderr)
        if self.count > len(self.kept):
            print(f"  ... and {self.count - len(self.kept)} more", file=sys.stderr)


def _dump_records(batch: RecordBatch, b: dict[str, Any], print_data: bool) -> Iterator[dict[str, Any]]:
    """The batch's records as kafka-dump-log fields, then {"error": ...} if they cannot all be
    read (the next batch is still dumped)."""
    from kafkacodec.errors import KafkaCodecError

    try:
        for r in batch:
            yield _record_fields(b, r, print_data)
    except KafkaCodecError as exc:
        yield {"error": str(exc)}


def _dump_segment(path: str, records: Records, args: argparse.Namespace, gaps: _Gaps) -> int:
    """Stream one segment: batches are walked shallowly in the mapping, records are decoded
    one batch at a time and printed as they come, so memory stays about one batch."""
    from kafkacodec.errors import KafkaCodecError
    from kafkacodec.logdir import SEGMENT_RE

    out = sys.stdout
    status = EXIT_OK
    deep = args.deep or args.print_data
    if not args.json:
        m = SEGMENT_RE.match(Path(path).name)
        out.write(f"Dumping {path}\nLog starting offset: {int(m.group(1)) if m else 0}\n")
    end = 0
    last = None
    batches = records.batches()
    while True:
        try:
            batch = next(batches, None)
        except KafkaCodecError as exc:      # broken framing: the rest cannot be walked
            print(f"kafkacodec: error: {path}: {exc}", file=sys.stderr)
            return EXIT_DATA
        if batch is None:
            break
        end = batch.position + batch.size_in_bytes
        b = _batch_info(batch)
        if not b["isvalid"]:
            status = EXIT_DATA
        if args.json:
            head = json.dumps({"file": path, **b})
        else:
            out.write(_batch_line(b) + "\n")
        n = 0
        for fields in (_dump_records(batch, b, args.print_data) if deep else ()):
            if "error" in fields:
                status = EXIT_DATA
            elif last is not None and fields["offset"] != last + 1:
                gaps.add(path, last, fields["offset"])
            last = fields.get("offset", last)
            if args.json:
                out.write((head[:-1] + ', "records": [' if n == 0 else ", ") + json.dumps(fields))
            else:
                out.write(_record_line(fields) + "\n" if "error" not in fields else f"| error: {fields['error']}\n")
            n += 1
        if args.json:
            out.write(("]}" if n else head) + "\n")
    rest = records.size_in_bytes - end
    if rest and args.max_bytes is None:
        message = f"Found {rest} invalid bytes at the end of {Path(path).name}"
        print(message, file=sys.stderr if args.json else sys.stdout)
    return status


def cmd_dump(args: argparse.Namespace) -> int:
    status = EXIT_OK
    gaps = _Gaps()
    for path in args.files:
        with _open_segment(path, "dump") as segment:
            records = segment if args.max_bytes is None else segment.slice(0, args.max_bytes)
            status = max(status, _dump_segment(path, records, args, gaps))
    gaps.report()
    return status


# ---------------------------------------------------------------------------------- verify

def cmd_verify(args: argparse.Namespace) -> int:
    """Check every segment under PATH and report every problem: unreadable entries, corrupt
    entries (CRC, structure), partial entries, overlapping segments, missing offsets between
    segments, invalid index and checkpoint files.  The same checks, with the same counts, as a
    "kafkalog" read in PERMISSIVE mode with failOnDataLoss=false."""
    from kafkacodec._progress import Progress
    from kafkacodec.logdir import Problem, ReadOptions, read_split
    from kafkacodec.logdir._plan import Planner
    from kafkacodec.logdir._problems import Reporter

    problems: list[Problem] = []
    try:
        options = ReadOptions.parse({"paths": [args.path], "mode": "DROPMALFORMED", "failOnDataLoss": "false",
                                     "keepControl": "true"})
        planner = Planner(options, Reporter(options.mode, False, problems.append))
        splits = planner.splits()
        for part in planner.partitions():
            for seg in part.segments:
                planner.check_indexes(seg)
    except FileNotFoundError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    segments = {s.uri for s in splits}
    total = sum(s.end - s.start for s in splits)
    records = 0
    with Progress(total, "verify", unit="B", enabled=False if args.no_progress else None) as bar:
        for split in splits:
            for rb in read_split(split, include_headers=False, keep_control=True, mode="DROPMALFORMED",
                                 fail_on_data_loss=False, columns=["offset"], on_problem=problems.append):
                records += rb.num_rows
            bar.update(split.end - split.start, note=f"{split.topic}-{split.partition}")
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    result = {"path": str(args.path), "segments": len(segments), "bytes": total, "records": records,
              "problems": [p.as_dict() for p in problems], "counts": counts, "ok": not problems}
    if args.json:
        _emit_json(result)
    else:
        for p in problems:
            print(f"{p.kind}: {p.message}")
        verdict = "OK" if not problems else f"{len(problems)} problem(s): " + ", ".join(
            f"{n} {kind}" for kind, n in sorted(counts.items()))
        print(f"verified {len(segments)} segment(s), {records} records, {total} bytes: {verdict}")
    return EXIT_OK if not problems else EXIT_DATA


# ---------------------------------------------------------------------------------- convert

def cmd_convert(args: argparse.Namespace) -> int:
    """Down-convert a segment lazily (KIP-283 chunks): memory stays bounded by the chunk size.

    First every CRC is checked (unless --no-verify: the rebuilt batches would get fresh, valid
    CRCs for corrupt data) and a partial last batch is looked for (exit 1 unless
    --allow-partial-tail); the conversion writes OUT atomically, so on any failure OUT is as
    it was."""
    from kafkacodec import LazyDownConvertRecords
    from kafkacodec._atomic import atomic_output
    from kafkacodec._progress import Progress
    from kafkacodec.errors import InvalidCrcError

    src = args.input
    warnings = []
    with _open_segment(src, "convert") as segment, \
            atomic_output(args.output, inputs=[src]) as out, open(src, "rb") as f:
        total = segment.size_in_bytes
        if not args.no_verify:
            try:
                segment.validate()
            except InvalidCrcError as exc:
                raise CliError(f"{src}: {exc}; not converting corrupt data (--no-verify converts "
                               "it anyway, with new checksums on the rebuilt batches)") from None
        tail = segment.partial_tail_bytes
        if tail:
            at = total - tail
            problem = (f"{tail} bytes of a partial batch at byte {at} of {src} (a cut last batch; "
                       "Kafka's recovery truncates it)")
            if not args.allow_partial_tail:
                raise CliError(f"{problem}: not converting; --allow-partial-tail converts the "
                               "complete batches before it")
            warnings.append(f"left out {problem}")
            print(f"kafkacodec: warning: {warnings[-1]}", file=sys.stderr)
        converted = out_bytes = 0
        with Progress(total, "convert", unit="B", enabled=False if args.no_progress else None) as bar:
            for chunk in LazyDownConvertRecords(f, args.to_magic):
                try:
                    out_bytes += out.write(chunk.records.buffer)
                except OSError as exc:
                    raise _name_output(exc, args.output)
                converted += chunk.stats.records_converted
                bar.set(min(out_bytes, total))      # output bytes: about the input's
    result = {"input": str(src), "output": str(args.output), "to_magic": args.to_magic,
              "input_bytes": total, "output_bytes": out_bytes, "records_converted": converted,
              "crc_checked": not args.no_verify, "partial_tail_bytes": tail,
              "partial_tail_position": total - tail if tail else None, "warnings": warnings}
    if args.json:
        _emit_json(result)
    else:
        print(f"{src} -> {args.output}: magic {args.to_magic}, {converted} records rebuilt, "
              f"{total} -> {out_bytes} bytes (control batches dropped)")
    return EXIT_OK


# ---------------------------------------------------------------------------------- generate

# Kafka's topic names (Topic.validate): 1-249 of [a-zA-Z0-9._-], not "." or "..".
TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _same_content(path: Path, content: bytes) -> bool:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) or os.path.getsize(path) != len(content):
            return False
        return path.read_bytes() == content        # no larger than `content`
    except FileNotFoundError:
        return False


def _count(segments: list[tuple[str, bytes]]) -> dict[str, Any]:
    """describe()'s counts for the segments generate wrote, read back with the core reader
    (no pyarrow): data records per topic, control records, records of aborted transactions
    (a transactional producer's records before its ABORT marker)."""
    from kafkacodec import ControlType, MemoryRecords

    per_topic: dict[str, int] = {}
    result: dict[str, Any] = {"segments": len(segments), "bytes": 0, "records": 0,
                              "aborted_records": 0, "control_records": 0, "per_topic": per_topic}
    open_transactions: dict[tuple[str, int], int] = {}     # (partition dir, producer) -> records
    for name, content in segments:
        partition_dir = name.split("/")[0]
        topic = partition_dir.rsplit("-", 1)[0]
        per_topic.setdefault(topic, 0)
        result["bytes"] += len(content)
        for batch in MemoryRecords(content).batches():
            producer = (partition_dir, batch.producer_id)
            records = list(batch)
            if batch.is_control:
                result["control_records"] += len(records)
                for r in records:
                    if r.control_type == ControlType.ABORT:
                        result["aborted_records"] += open_transactions.pop(producer, 0)
                    elif r.control_type == ControlType.COMMIT:
                        open_transactions.pop(producer, None)
                continue
            result["records"] += len(records)
            per_topic[topic] += len(records)
            if batch.is_transactional:
                open_transactions[producer] = open_transactions.get(producer, 0) + len(records)
    return result


def generate(directory: str | Path, topics: Iterable[str] = ("orders", "clicks"), *,
             partitions: int = 2, seed: int = 0, records_per_batch: int = 20,
             batches_per_segment: int = 8, force: bool = False) -> dict[str, Any]:
    """Write the sample log (kafkacodec._sample: magics 0, 1, 2, every codec, headers, an
    idempotent producer, committed and aborted transactions) for each topic under `directory`;
    returns the counts of what it wrote (as logdir.describe() gives them).

    Never replaces an existing segment with other content unless `force` (CliError, exit 2,
    before anything is written); one with the same content (the same sample again) is left
    alone.  Each file is written atomically; on failure the files and directories this call
    created are removed again, and nothing else."""
    from kafkacodec._atomic import atomic_output
    from kafkacodec._sample import sample_segments

    root = Path(directory)
    segments: list[tuple[str, bytes]] = []
    for i, topic in enumerate(topics):
        if not TOPIC_RE.match(topic) or topic in (".", ".."):
            raise CliError(f"invalid topic name {topic!r}: Kafka allows 1-249 characters of "
                           "a-z A-Z 0-9 . _ -", EXIT_USAGE)
        segments += sample_segments(topic, partitions, seed=seed + i, records_per_batch=records_per_batch,
                                    batches_per_segment=batches_per_segment)
    todo = [(root / name, content) for name, content in segments if not _same_content(root / name, content)]
    in_the_way = [path for path, _ in todo if os.path.lexists(path)]
    if in_the_way and not force:
        raise CliError(f"{in_the_way[0]} exists with other content ({len(in_the_way)} segment(s) in the "
                       "way): not replacing Kafka segments; choose an empty directory or --force",
                       EXIT_USAGE)
    created: list[Path] = []                   # files and directories, in creation order
    try:
        for path, content in todo:
            missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
            path.parent.mkdir(parents=True, exist_ok=True)
            created += reversed(missing)
            existed = os.path.lexists(path)
            with atomic_output(path, overwrite=force) as out:
                try:
                    out.write(content)
                except OSError as exc:
                    raise _name_output(exc, path)
            if not existed:
                created.append(path)
    except BaseException:
        for path in reversed(created):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass
        raise
    return {"directory": str(directory), **_count(segments)}


def cmd_generate(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    result = generate(args.dir, topics, partitions=args.partitions, seed=args.seed,
                      records_per_batch=args.records_per_batch,
                      batches_per_segment=args.batches_per_segment, force=args.force)
    if args.json:
        _emit_json(result)
    else:
        print(f"wrote {result['segments']} segment(s), {result['records']} records "
              f"({result['aborted_records']} in aborted transactions) and {result['control_records']} "
              f"transaction markers, {result['bytes']} bytes, to {result['directory']}")
    return EXIT_OK


# ---------------------------------------------------------------------------------- serve

_SIZE_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _size_arg(text: str) -> int:
    """BYTES: an integer with an optional binary unit (64MiB, 512k, 1g)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 67108864, 64MiB, 512k)")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def _address_arg(text: str) -> tuple[str, int]:
    from kafkacodec.serve.config import parse_host_port

    try:
        return parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _topic_switch_arg(text: str) -> tuple[str, bool]:
    topic, sep, value = text.rpartition("=")
    if not sep or not topic or value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not TOPIC=true or TOPIC=false")
    return topic, value.lower() == "true"


def cmd_serve(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from kafkacodec.serve import Server, ServeConfig

    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for path in args.log_dirs:
        if not os.path.isdir(path):
            raise CliError(f"{path}: not a directory; give Kafka log directories (holding "
                           "<topic>-<partition>/<base offset>.log files)", EXIT_INPUT)
    try:
        config = ServeConfig(
            log_dirs=args.log_dirs, listen=args.listen, advertised=args.advertised_listener,
            state_dir=args.state_dir, metrics_listen=args.metrics_listen,
            max_conversion_memory=args.max_conversion_memory,
            max_request_memory=args.max_request_memory,
            socket_request_max_bytes=args.socket_request_max_bytes,
            downconversion=not args.no_downconversion,
            topic_downconversion=dict(args.topic_downconversion or []),
            zstd_codec=args.zstd_downconvert_codec, node_id=args.node_id,
            poll_interval_ms=args.poll_interval_ms,
            group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
            upstream=args.upstream, upstream_buffer_memory=args.upstream_buffer_memory,
            upstream_cache_memory=args.upstream_cache_memory)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = Server(config=config).start()
    except OSError as exc:                    # the upstream cluster unreachable, the port taken
        raise CliError(str(exc), EXIT_INPUT) from None
    try:
        host, port = server.address
        print(f"listening on {host}:{port}", flush=True)
        while not stop.wait(0.5) and not server.wait(0):
            pass
    finally:
        server.stop()
    return EXIT_OK


# ---------------------------------------------------------------------------------- spark

def cmd_spark_convert(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise CliError("`kafkacodec spark` needs PySpark: pip install 'kafkacodec[spark]'",
                       EXIT_UNAVAILABLE) from None
    from kafkacodec._progress import Progress
    from kafkacodec.spark.job import StageProgress, convert, make_session

    if args.sample:
        src = args.sample
        if args.output is None and args.input is not None:
            args.output, args.input = args.input, None
        if args.input is not None:
            raise CliError("give either --sample DIR or an input, not both", EXIT_USAGE)
        sample = generate(src, records_per_batch=args.sample_records_per_batch)
        if not args.json:
            print(f"generated the sample log in {src}: {sample['records']} records in "
                  f"{sample['segments']} segments ({sample['bytes']} bytes); the "
                  f"{sample['aborted_records']} in aborted transactions are left out below, as a "
                  "read_committed consumer leaves them")
    else:
        src = args.input
    if src is None or args.output is None:
        raise CliError("usage: kafkacodec spark convert IN OUT (or --sample DIR OUT)", EXIT_USAGE)
    if not Path(src).exists():
        raise CliError(f"{src}: no such file or directory", EXIT_INPUT)
    from pyspark.sql import SparkSession

    from kafkacodec._atomic import SameFileError

    conf = {}
    for item in args.conf:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--conf {item!r}: use KEY=VALUE (a Spark property)", EXIT_USAGE)
        conf[name.strip()] = value
    owned = SparkSession.getActiveSession() is None
    spark = make_session(args.master, conf=conf)
    try:
        with Progress(None, "spark", enabled=False if args.no_progress else None) as bar, \
                StageProgress(spark, bar):
            s = convert(spark, src, args.output, compression=args.compression, mode=args.mode,
                        validate_crc=not args.no_crc, overwrite=args.overwrite)
    except (FileExistsError, SameFileError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    finally:
        if owned:
            spark.stop()
    if args.json:
        _emit_json(s.to_dict())
    else:
        print(f"{s.direction}: {s.source} -> {s.output}")
        print(f"  records      {s.records:,} in {s.seconds:.1f} s (Spark start-up included)")
        print(f"  bytes        {s.input_bytes:,} in, {s.output_bytes:,} out, {s.value_bytes:,} of keys and values")
        for topic, n in s.per_topic.items():
            print(f"  topic {topic:<12} {n:,} records")
        print(f"  CRC failures {s.crc_failures}, corrupt entries skipped {s.corrupt_entries}")
        for p in s.problems[:10]:
            print(f"    {p}")
        print(f"output written to {Path(s.output).resolve()}")
    return EXIT_OK if not s.corrupt_entries else EXIT_DATA


MIRROR_EXIT_CODES = """exit codes:
  0  done (--until-caught-up) or stopped by SIGTERM/SIGINT after a final checkpoint
  1  the target refused a batch (or source data was corrupt): nothing past the last
     acknowledged batch is checkpointed, a restart continues there
  2  bad arguments or a configuration the mirror refuses: missing target topic, a target
     topic with fewer partitions than its source, a --state-dir of other clusters
  3  a cluster could not be reached, or the state directory could not be written
  4  optional part missing: pip install "kafkacodec[mirror]\""""


def _byte_size(text: str) -> int:
    """"64M", "1G", "1048576" -> bytes (K, M, G are powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or with K/M/G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _rename(text: str) -> tuple[str, str]:
    source, sep, target = text.partition(":")
    if not sep or not source or not target:
        raise argparse.ArgumentTypeError(f"--rename takes SOURCE:TARGET, got {text!r}")
    return source, target


def cmd_mirror(args: argparse.Namespace) -> int:
    from kafkacodec.consumer import BrokerError
    from kafkacodec.mirror._checkpoint import StateMismatchError
    from kafkacodec.mirror.process import Mirror, MirrorConfig, MirrorError

    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not topics:
        raise CliError("--topics names no topic", EXIT_USAGE)
    rename = dict(args.rename or [])
    unknown = set(rename) - set(topics)
    if unknown:
        raise CliError(f"--rename names topics not in --topics: {', '.join(sorted(unknown))}", EXIT_USAGE)
    config = MirrorConfig(
        source=args.source, target=args.target, topics=topics, state_dir=args.state_dir,
        rename=rename, until_caught_up=args.until_caught_up, buffer_memory=args.buffer_memory,
        multi_batch=args.multi_batch, group_id=args.group, start=args.start,
        checkpoint_interval=args.checkpoint_interval, max_in_flight=args.max_in_flight,
        request_timeout=args.request_timeout, metrics_listen=args.metrics_listen,
        progress=False if args.no_progress else None)
    mirror = Mirror(config)
    try:
        return mirror.run(install_signals=True)
    except (MirrorError, StateMismatchError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except BrokerError as exc:
        raise CliError(f"{exc}; the checkpoint in {args.state_dir} keeps the last acknowledged "
                       "position", EXIT_DATA) from None
    except (ConnectionError, TimeoutError) as exc:
        raise CliError(f"cannot reach the cluster: {exc}", EXIT_INPUT) from None


# ---------------------------------------------------------------------------------- parser

def _count_arg(least: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="kafkacodec", formatter_class=fmt,
        description="Read, check and convert Kafka log segments (v0/v1 messages, v2 batches).",
        epilog="examples:\n"
               "  kafkacodec generate /tmp/log                 # a sample log directory\n"
               "  kafkacodec dump --deep /tmp/log/events-0/00000000000000000000.log\n"
               "  kafkacodec verify /tmp/log                   # CRC check, exit 1 on corruption\n"
               "  kafkacodec convert --to-magic 1 in.log out.log\n"
               "  kafkacodec spark convert /tmp/log /tmp/parquet\n"
               "  kafkacodec spark convert --sample /tmp/log /tmp/parquet\n"
               "  kafkacodec serve /tmp/log --listen 127.0.0.1:9092\n\n" + EXIT_CODES)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("dump", help="print batches (and records) like kafka-dump-log", formatter_class=fmt,
                       epilog="examples:\n  kafkacodec dump 00000000000000000000.log\n"
                              "  kafkacodec dump --deep --print-data 00000000000000000000.log\n"
                              "  kafkacodec dump --json --deep seg.log | jq .records[].offset")
    d.add_argument("files", nargs="+", metavar="FILE", help="segment files (.log)")
    d.add_argument("--deep", "--deep-iteration", action="store_true", help="print every record")
    d.add_argument("--print-data", "--print-data-log", action="store_true",
                   help="also print keys and values (UTF-8); implies --deep")
    d.add_argument("--max-bytes", type=_count_arg(0), metavar="N",
                   help="examine only the batches within the first N bytes of each file")
    d.add_argument("--json", action="store_true", help="one JSON object per batch on stdout")
    d.set_defaults(func=cmd_dump)

    v = sub.add_parser("verify", help="check a log directory: CRCs, record structure, overlapping or "
                                      "missing offsets, unreadable entries, index files",
                       formatter_class=fmt,
                       epilog="examples:\n  kafkacodec verify /var/kafka-logs\n"
                              "  kafkacodec verify --json my-topic-0 | jq .ok\n\n" + EXIT_CODES)
    v.add_argument("path", help="a log directory, a partition directory or a .log file (local, file://, "
                                "s3://, gs://, hdfs://; globs)")
    v.add_argument("--json", action="store_true", help="print one JSON result on stdout")
    v.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    v.set_defaults(func=cmd_verify)

    c = sub.add_parser("convert", help="down-convert a segment to magic 0 or 1 (lazy, bounded memory)",
                       formatter_class=fmt,
                       description="Down-convert a segment as a broker does for old consumers. Every CRC "
                                   "is checked first, and a partial last batch stops the command, so "
                                   "corrupt data never comes out with fresh checksums. OUT is written "
                                   "to a temporary file beside it and renamed into place: on any "
                                   "failure it is left as it was.",
                       epilog="examples:\n  kafkacodec convert --to-magic 1 in.log out.log\n"
                              "  kafkacodec convert --to-magic 0 --allow-partial-tail active.log out.log\n\n"
                              + EXIT_CODES)
    c.add_argument("--to-magic", type=int, choices=(0, 1), required=True)
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT")
    c.add_argument("--no-verify", action="store_true",
                   help="do not check CRCs first (corrupt batches that are rebuilt get valid CRCs)")
    c.add_argument("--allow-partial-tail", action="store_true",
                   help="convert the complete batches of a segment whose last batch is cut "
                        "(a warning, exit 0) instead of exit 1")
    c.add_argument("--json", action="store_true", help="print one JSON result on stdout")
    c.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    c.set_defaults(func=cmd_convert)

    g = sub.add_parser("generate", help="write a sample log directory (mixed magics, codecs, "
                                        "headers, transactions)", formatter_class=fmt,
                       description="Write the sample log into DIR (<topic>-<partition>/<base "
                                   "offset>.log). Existing segments with other content are not "
                                   "replaced (exit 2) unless --force; the same sample again is a no-op.",
                       epilog="example:\n  kafkacodec generate /tmp/sample-log\n\n" + EXIT_CODES)
    g.add_argument("dir", metavar="DIR")
    g.add_argument("--topics", default="orders,clicks", help="comma-separated topic names (default orders,clicks)")
    g.add_argument("--partitions", type=_count_arg(1), default=2, help="partitions per topic (default 2)")
    g.add_argument("--records-per-batch", type=_count_arg(1), default=20,
                   help="at most this many records per batch")
    g.add_argument("--batches-per-segment", type=_count_arg(1), default=8,
                   help="roll a segment after this many batches")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--force", action="store_true", help="replace existing segments of other content")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_generate)

    sv = sub.add_parser(
        "serve", formatter_class=fmt,
        help="serve log directories to Kafka clients (a read-only broker, old and new clients)",
        description="A read-only Kafka broker over log directories: any consumer (kafka-python, "
                    "librdkafka, aiokafka, the Java client; Fetch v0 to v17) reads the topics "
                    "found there, by assign or in a consumer group. Clients that only speak "
                    "message formats v0/v1 get the data down-converted. Appends to the "
                    "directories are served as they land. Writes are refused (POLICY_VIOLATION). "
                    "The first line on stdout is `listening on HOST:PORT`; SIGTERM and SIGINT "
                    "stop it (exit 0). See docs/serve.md.",
        epilog="examples:\n  kafkacodec serve /backups/kafka-logs --listen 127.0.0.1:9092\n"
               "  kafkacodec serve /var/kafka-logs --listen 0.0.0.0:9092 --advertised-listener "
               "kafka-archive:9092 --state-dir /var/lib/kafkacodec --metrics-listen :9404\n"
               "  kafkacodec serve --upstream kafka4:9092 --listen 0.0.0.0:9092 --advertised-listener "
               "gateway:9092\n\n" + EXIT_CODES)
    sv.add_argument("log_dirs", nargs="*", metavar="LOG_DIR", help="Kafka log directories (log.dirs)")
    sv.add_argument("--upstream", metavar="BOOTSTRAP",
                    help="serve this cluster instead of log directories: a gateway for old clients "
                         "(down-converted) and new ones (the cluster's batches); groups are "
                         "coordinated here and their offsets committed to the cluster")
    sv.add_argument("--upstream-buffer-memory", type=_size_arg, default=64 << 20, metavar="BYTES",
                    help="the upstream consumer's memory (KIP-81 pool of its rings, default 64MiB)")
    sv.add_argument("--upstream-cache-memory", type=_size_arg, default=64 << 20, metavar="BYTES",
                    help="fetched upstream data kept for clients (default 64MiB)")
    sv.add_argument("--listen", type=_address_arg, default=("127.0.0.1", 9092), metavar="HOST:PORT",
                    help="where to listen (port 0: any free port; default 127.0.0.1:9092)")
    sv.add_argument("--advertised-listener", type=_address_arg, metavar="HOST:PORT",
                    help="the address clients are told to connect to (default: the listen address)")
    sv.add_argument("--state-dir", metavar="DIR",
                    help="where consumer group offsets are kept (default: in memory, lost at exit)")
    sv.add_argument("--metrics-listen", type=_address_arg, metavar="HOST:PORT",
                    help="serve Prometheus metrics over HTTP here")
    sv.add_argument("--max-conversion-memory", type=_size_arg, default=64 << 20, metavar="BYTES",
                    help="memory for every down-conversion at once (default 64MiB)")
    sv.add_argument("--max-request-memory", type=_size_arg, default=200 << 20, metavar="BYTES",
                    help="memory for requests being received, Kafka's queued.max.request.bytes "
                         "(0: unbounded; default 200MiB)")
    sv.add_argument("--socket-request-max-bytes", type=_size_arg, default=100 << 20, metavar="BYTES",
                    help="the largest request accepted (socket.request.max.bytes, default 100MiB)")
    sv.add_argument("--no-downconversion", action="store_true",
                    help="log.message.downconversion.enable=false: Fetch v0-3 of newer data gets "
                         "UNSUPPORTED_VERSION")
    sv.add_argument("--topic-downconversion", type=_topic_switch_arg, action="append", metavar="TOPIC=BOOL",
                    help="message.downconversion.enable for one topic (repeatable)")
    sv.add_argument("--zstd-downconvert-codec", choices=("none", "gzip", "snappy", "lz4"),
                    help="rebuild zstd batches with this codec for old clients (default: refuse them "
                         "with UNSUPPORTED_COMPRESSION_TYPE, as Kafka)")
    sv.add_argument("--node-id", type=int, default=0, help="the broker id clients see (default 0)")
    sv.add_argument("--poll-interval-ms", type=_count_arg(1), default=10,
                    help="how often waiting fetches look for new data (default 10)")
    sv.add_argument("--group-initial-rebalance-delay-ms", type=_count_arg(0), default=0,
                    help="group.initial.rebalance.delay.ms (default 0)")
    sv.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    sv.set_defaults(func=cmd_serve)

    s = sub.add_parser("spark", help="Spark jobs (needs kafkacodec[spark])")
    ssub = s.add_subparsers(dest="spark_command", metavar="JOB", required=True)
    sc = ssub.add_parser(
        "convert", formatter_class=fmt,
        help="segments -> Parquet, or Parquet -> segments",
        description="Convert Kafka log segments to Parquet (Spark's Kafka schema + batch columns), "
                    "or Parquet with key/value/topic/partition(/offset/timestamp/headers) back to "
                    "segments, every partition in offset order with its offsets. The direction "
                    "follows IN: a directory of .parquet files is written as segments. OUT must be "
                    "empty or new unless --overwrite; the output appears at once when complete.",
        epilog="examples:\n  kafkacodec spark convert /var/kafka-logs /data/kafka-parquet\n"
               "  kafkacodec spark convert --compression zstd /data/kafka-parquet /tmp/log\n"
               "  kafkacodec spark convert --master spark://host:7077 /shared/log /shared/parquet\n"
               "  kafkacodec spark convert --master spark://host:7077 --conf spark.archives=env.tar.gz#env \\\n"
               "      --conf spark.pyspark.python=./env/bin/python /shared/log /shared/parquet\n"
               "  kafkacodec spark convert --sample /tmp/sample-log /tmp/parquet\n\n" + EXIT_CODES)
    sc.add_argument("input", metavar="IN", nargs="?")
    sc.add_argument("output", metavar="OUT", nargs="?")
    sc.add_argument("--sample", metavar="DIR", help="first generate the sample log in DIR and convert it")
    sc.add_argument("--sample-records-per-batch", type=int, default=20, help=argparse.SUPPRESS)
    sc.add_argument("--master", help="Spark master URL (default: local[*])")
    sc.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark property (repeatable), e.g. spark.executor.memory=4g")
    sc.add_argument("--overwrite", action="store_true",
                    help="replace what an earlier conversion wrote in a non-empty OUT (other files stay)")
    sc.add_argument("--compression", default="none", choices=CODEC_NAMES,
                    help="codec of the written batches (Parquet -> segments)")
    sc.add_argument("--mode", default="PERMISSIVE", choices=("FAILFAST", "PERMISSIVE"),
                    help="corrupt entries: skip and count them (PERMISSIVE, default) or stop (FAILFAST)")
    sc.add_argument("--no-crc", action="store_true", help="do not check CRCs")
    sc.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    sc.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sc.set_defaults(func=cmd_spark_convert)

    m = sub.add_parser(
        "mirror", formatter_class=fmt,
        help="mirror topics between clusters, batches as they are (KIP-712; needs kafkacodec[mirror])",
        description="Copy topics from a source cluster to a target cluster without decompressing: "
                    "whole batches, producer ids rewritten for the target (idempotent, acks=all), "
                    "control batches and aborted transactions dropped. The position after the last "
                    "batch the target acknowledged is checkpointed atomically in --state-dir, so a "
                    "restart (even after kill -9) loses nothing; it may write again what was "
                    "acknowledged after the last checkpoint or in flight (at most --max-in-flight "
                    "batches per partition, plus --checkpoint-interval seconds' worth).",
        epilog="examples:\n"
               "  kafkacodec mirror --source old:9092 --target new:9092 --topics orders,users \\\n"
               "      --state-dir /var/lib/mirror --until-caught-up\n"
               "  kafkacodec mirror --source a:9092 --target b:9092 --topics orders \\\n"
               "      --rename orders:orders-dc1 --state-dir /var/lib/mirror \\\n"
               "      --metrics-listen 127.0.0.1:9400\n\n" + MIRROR_EXIT_CODES)
    m.add_argument("--source", required=True, metavar="BOOTSTRAP", help="source cluster host:port[,host:port]")
    m.add_argument("--target", required=True, metavar="BOOTSTRAP", help="target cluster host:port[,host:port]")
    m.add_argument("--topics", required=True, metavar="T[,T...]", help="source topics to mirror")
    m.add_argument("--rename", type=_rename, action="append", metavar="A:B",
                   help="write source topic A to target topic B (repeatable)")
    m.add_argument("--state-dir", required=True, metavar="DIR", help="where the checkpoint is kept")
    m.add_argument("--until-caught-up", action="store_true",
                   help="exit 0 once everything in the source at start is acknowledged by the target")
    m.add_argument("--buffer-memory", type=_byte_size, default=64 << 20, metavar="BYTES",
                   help="memory for fetched data (KIP-81 pool; default 64M)")
    m.add_argument("--multi-batch", action="store_true",
                   help="several batches per partition per ProduceRequest (only for a target that "
                        "accepts it; Kafka brokers answer INVALID_RECORD)")
    m.add_argument("--group", metavar="GROUP", help="also commit the positions to this source consumer group")
    m.add_argument("--start", choices=("earliest", "latest", "committed"), default="earliest",
                   help="where to start without a checkpoint (committed: --group's offsets)")
    m.add_argument("--checkpoint-interval", type=float, default=1.0, metavar="SECONDS",
                   help="time between checkpoints (0: after every acknowledgement; default 1)")
    m.add_argument("--max-in-flight", type=_count_arg(1), default=5, metavar="N",
                   help="unacknowledged batches per partition (at most 5, Kafka's idempotence limit)")
    m.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS")
    m.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics there")
    m.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    m.set_defaults(func=cmd_mirror)
    return p



def _os_error_text(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; every failure becomes one `kafkacodec: error:` line on stderr and the
    exit code of EXIT_CODES (argparse exits 2 itself on bad arguments)."""
    from kafkacodec._atomic import SameFileError
    from kafkacodec.errors import KafkaCodecError, UnsupportedCompressionError

    args = build_parser().parse_args(argv)
    code, message = EXIT_OK, None
    try:
        status: int = args.func(args)
        return status
    except CliError as exc:
        code, message = exc.code, str(exc)
    except SameFileError as exc:
        code, message = EXIT_USAGE, str(exc)
    except UnsupportedCompressionError as exc:
        code, message = EXIT_DATA, (f"{exc}; Kafka refuses this too (UNSUPPORTED_COMPRESSION_TYPE): "
                                    "old clients cannot read such batches")
    except KafkaCodecError as exc:
        code, message = EXIT_DATA, f"{exc}; `kafkacodec verify PATH` lists every problem"
    except ImportError as exc:
        extra = OPTIONAL_MODULES.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        extra = COMMAND_EXTRAS.get(args.command, extra)
        code, message = EXIT_UNAVAILABLE, (f"`kafkacodec {args.command}` needs {exc.name}, which is not "
                                           f'installed: pip install "kafkacodec[{extra}]"')
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's final flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        code, message = EXIT_INPUT, _os_error_text(exc)
    except KeyboardInterrupt:
        code, message = 130, "interrupted"
    print(f"kafkacodec: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
