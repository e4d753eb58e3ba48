"""The `kafkacodec` command: dump, verify, convert and generate Kafka log segments, and run the
segments <-> Parquet job on Spark.  `kafkacodec --help` and `kafkacodec COMMAND --help`."""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_DATA = 1          # corrupt data found (verify), or a conversion hit corrupt data
EXIT_USAGE = 2         # bad arguments (argparse)
EXIT_INPUT = 3         # missing or unreadable input
EXIT_UNAVAILABLE = 4   # an optional part is not installed (pyspark) or not built yet

EXIT_CODES = """exit codes:
  0  success
  1  corrupt data found (verify), or corrupt data stopped the command
  2  bad arguments
  3  missing or unreadable input
  4  optional part missing (install kafkacodec[spark] for `spark`)"""

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
TS_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_DATA):
        super().__init__(message)
        self.code = code


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, default=str)
    sys.stdout.write("\n")


def _read_file(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file; give a Kafka segment such as "
                       "my-topic-0/00000000000000000000.log", EXIT_INPUT) from None
    except IsADirectoryError:
        raise CliError(f"{path} is a directory; dump takes segment files "
                       "(use `kafkacodec verify DIR` for a whole directory)", EXIT_INPUT) from None


# ---------------------------------------------------------------------------------- dump

def _batch_info(batch: Any) -> dict[str, Any]:
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
    if b["magic"] == 2:
        dh = "OptionalLong.empty" if b["deleteHorizonMs"] is None else f"OptionalLong[{b['deleteHorizonMs']}]"
        head = " ".join(f"{k}: {text(b[k])}" for k in (
            "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId",
            "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl"))
        head += f" deleteHorizonMs: {dh}"
    else:
        head = f"offset: {b['offset']}"
    return (f"{head} position: {b['position']} {b['timestampType']}: {b['timestamp']} size: {b['size']} "
            f"magic: {b['magic']} compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {text(b['isvalid'])}")


def _records(view: memoryview, pos: int, size: int, path: str) -> list[dict[str, Any]]:
    from kafkacodec._arrow import ArrowDecoder

    dec = ArrowDecoder(validate_crc=False, keep_control=True, source=path)
    rb, _ = dec.decode(view, pos, pos + size, 0)
    rows: list[dict[str, Any]] = rb.to_pylist()
    return rows


def _record_fields(b: dict[str, Any], r: dict[str, Any], print_data: bool) -> dict[str, Any]:
    ms = int(r["timestamp"].timestamp() * 1000) if r["timestamp"] is not None else -1
    out: dict[str, Any] = {"offset": r["offset"], b["timestampType"]: ms,
           "keySize": -1 if r["key"] is None else len(r["key"]),
           "valueSize": -1 if r["value"] is None else len(r["value"])}
    if b["magic"] == 2:
        seq = -1 if b["baseSequence"] < 0 else (b["baseSequence"] + r["offset"] - b["baseOffset"]) & 0x7FFFFFFF
        out["sequence"] = seq
        out["headerKeys"] = [h["key"] for h in (r["headers"] or [])]
    if b.get("isControl"):
        key = r["key"] or b""
        ctype = struct.unpack_from(">h", key, 2)[0] if len(key) >= 4 else -1
        if ctype in (0, 1) and r["value"] and len(r["value"]) >= 6:
            out["endTxnMarker"] = "ABORT" if ctype == 0 else "COMMIT"
            out["coordinatorEpoch"] = struct.unpack_from(">i", r["value"], 2)[0]
        else:
            out["controlType"] = ctype
    elif print_data:
        if r["key"] is not None:
            out["key"] = r["key"].decode("utf-8", "replace")
        if r["value"] is not None:
            out["payload"] = r["value"].decode("utf-8", "replace")
    return out


def _record_line(fields: dict[str, Any]) -> str:
    parts = []
    for k, v in fields.items():
        if k == "headerKeys":
            v = "[" + ",".join(v) + "]"
        parts.append(f"{k}: {v}")
    return "| " + " ".join(parts)


def cmd_dump(args: argparse.Namespace) -> int:
    from kafkacodec import MemoryRecords
    from kafkacodec._arrow import scan_entries
    from kafkacodec.logdir import SEGMENT_RE

    status = EXIT_OK
    gaps = []
    for path in args.files:
        data = _read_file(path)
        view = memoryview(data)
        end = len(view) if args.max_bytes is None else min(len(view), args.max_bytes)
        scan = scan_entries(view, 0, end, source=path, strict=False)
        m = SEGMENT_RE.match(Path(path).name)
        if not args.json:
            print(f"Dumping {path}")
            print(f"Log starting offset: {int(m.group(1)) if m else 0}")
        last = None
        for batch in MemoryRecords(view[:int(scan["stop"])]).batches():
            b = _batch_info(batch)
            pos, size = batch.position, batch.size_in_bytes
            if not b["isvalid"]:
                status = EXIT_DATA
            records = []
            if args.deep or args.print_data:
                try:
                    for r in _records(view, pos, size, path):
                        f = _record_fields(b, r, args.print_data)
                        records.append(f)
                        if last is not None and r["offset"] != last + 1:
                            gaps.append((path, last, r["offset"]))
                        last = r["offset"]
                except Exception as exc:      # a corrupt batch: say so and go on
                    records.append({"error": str(exc)})
                    status = EXIT_DATA
            if args.json:
                _emit_json({"file": path, **b, **({"records": records} if records else {})})
            else:
                print(_batch_line(b))
                for f in records:
                    print(_record_line(f) if "error" not in f else f"| error: {f['error']}")
        rest = end - int(scan["stop"])
        if scan["error"]:
            print(f"{scan['error']} at byte {scan['stop']}", file=sys.stderr)
            status = EXIT_DATA
        elif rest and args.max_bytes is None and not args.json:
            print(f"Found {rest} invalid bytes at the end of {Path(path).name}")
    if gaps:
        print("Non-consecutive offsets:", file=sys.stderr)
        for path, a, b in gaps:
            print(f"  {path}: {a} is followed by {b}", file=sys.stderr)
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
    """Down-convert a segment lazily (KIP-283 chunks): memory stays bounded by the chunk size."""
    from kafkacodec import LazyDownConvertRecords
    from kafkacodec._progress import Progress

    src = Path(args.input)
    if not src.is_file():
        raise CliError(f"{src}: no such file; give a segment file (.log)", EXIT_INPUT)
    total = src.stat().st_size
    converted = out_bytes = 0
    try:
        with open(src, "rb") as f, open(args.output, "wb") as out, \
                Progress(total, "convert", unit="B", enabled=False if args.no_progress else None) as bar:
            for chunk in LazyDownConvertRecords(f, args.to_magic):
                out_bytes += out.write(chunk.records.buffer)
                converted += chunk.stats.records_converted
                bar.set(f.tell())
    except BaseException:
        Path(args.output).unlink(missing_ok=True)        # no half-converted segment left behind
        raise
    result = {"input": str(src), "output": str(args.output), "to_magic": args.to_magic,
              "input_bytes": total, "output_bytes": out_bytes, "records_converted": converted}
    if args.json:
        _emit_json(result)
    else:
        print(f"{src} -> {args.output}: magic {args.to_magic}, {converted} records rebuilt, "
              f"{total} -> {out_bytes} bytes (control batches dropped)")
    return EXIT_OK


# ---------------------------------------------------------------------------------- generate

def generate(directory: str | Path, topics: Iterable[str] = ("orders", "clicks"), *,
             partitions: int = 2, seed: int = 0, records_per_batch: int = 20,
             batches_per_segment: int = 8) -> dict[str, Any]:
    """The sample log (kafkacodec._sample: magics 0, 1, 2, every codec, headers, an idempotent
    producer, committed and aborted transactions) for each topic; returns describe()'s counts."""
    from kafkacodec._sample import write_sample_log
    from kafkacodec.logdir import describe

    for i, topic in enumerate(topics):
        write_sample_log(directory, topic=topic, partitions=partitions, seed=seed + i,
                         records_per_batch=records_per_batch, batches_per_segment=batches_per_segment)
    return {"directory": str(directory), **describe(directory)}


def cmd_generate(args: argparse.Namespace) -> int:
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    result = generate(args.dir, topics, partitions=args.partitions, seed=args.seed,
                      records_per_batch=args.records_per_batch,
                      batches_per_segment=args.batches_per_segment)
    if args.json:
        _emit_json(result)
    else:
        print(f"wrote {result['segments']} segment(s), {result['records']} records "
              f"({result['aborted_records']} in aborted transactions) and {result['control_records']} "
              f"transaction markers, {result['bytes']} bytes, to {result['directory']}")
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

    owned = SparkSession.getActiveSession() is None
    spark = make_session(args.master)
    try:
        with Progress(None, "spark", enabled=False if args.no_progress else None) as bar, \
                StageProgress(spark, bar):
            s = convert(spark, src, args.output, compression=args.compression, mode=args.mode,
                        validate_crc=not args.no_crc)
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


# ---------------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="kafkacodec", formatter_class=fmt,
        description="Read, check and convert Kafka log segments (v0/v1 messages, v2 batches).",
        epilog="examples:\n"
               "  kafkacodec generate /tmp/log                 # a sample log directory\n"
               "  kafkacodec dump --deep /tmp/log/events-0/00000000000000000000.log\n"
               "  kafkacodec verify /tmp/log                   # CRC check, exit 1 on corruption\n"
               "  kafkacodec spark convert /tmp/log /tmp/parquet\n"
               "  kafkacodec spark convert --sample /tmp/log /tmp/parquet\n\n" + EXIT_CODES)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("dump", help="print batches (and records) like kafka-dump-log", formatter_class=fmt,
                       epilog="examples:\n  kafkacodec dump 00000000000000000000.log\n"
                              "  kafkacodec dump --deep --print-data 00000000000000000000.log\n"
                              "  kafkacodec dump --json --deep seg.log | jq .records[].offset")
    d.add_argument("files", nargs="+", metavar="FILE", help="segment files (.log)")
    d.add_argument("--deep", "--deep-iteration", action="store_true", help="print every record")
    d.add_argument("--print-data", "--print-data-log", action="store_true",
                   help="also print keys and values (UTF-8); implies --deep")
    d.add_argument("--max-bytes", type=int, help="examine only the first N bytes of each file")
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
                       formatter_class=fmt, epilog="example:\n  kafkacodec convert --to-magic 1 in.log out.log")
    c.add_argument("--to-magic", type=int, choices=(0, 1), required=True)
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT")
    c.add_argument("--json", action="store_true", help="print one JSON result on stdout")
    c.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    c.set_defaults(func=cmd_convert)

    g = sub.add_parser("generate", help="write a sample log directory (mixed magics, codecs, "
                                        "headers, transactions)", formatter_class=fmt,
                       epilog="example:\n  kafkacodec generate /tmp/sample-log")
    g.add_argument("dir", metavar="DIR")
    g.add_argument("--topics", default="orders,clicks", help="comma-separated topic names (default orders,clicks)")
    g.add_argument("--partitions", type=int, default=2, help="partitions per topic (default 2)")
    g.add_argument("--records-per-batch", type=int, default=20, help="at most this many records per batch")
    g.add_argument("--batches-per-segment", type=int, default=8, help="roll a segment after this many batches")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_generate)

    s = sub.add_parser("spark", help="Spark jobs (needs kafkacodec[spark])")
    ssub = s.add_subparsers(dest="spark_command", metavar="JOB", required=True)
    sc = ssub.add_parser(
        "convert", formatter_class=fmt,
        help="segments -> Parquet, or Parquet -> segments",
        description="Convert Kafka log segments to Parquet (Spark's Kafka schema + batch columns), "
                    "or Parquet with key/value/topic/partition(/timestamp/headers) back to segments. "
                    "The direction follows IN: a directory of .parquet files is written as segments.",
        epilog="examples:\n  kafkacodec spark convert /var/kafka-logs /data/kafka-parquet\n"
               "  kafkacodec spark convert --compression zstd /data/kafka-parquet /tmp/log\n"
               "  kafkacodec spark convert --master spark://host:7077 /shared/log /shared/parquet\n"
               "  kafkacodec spark convert --sample /tmp/sample-log /tmp/parquet\n\n" + EXIT_CODES)
    sc.add_argument("input", metavar="IN", nargs="?")
    sc.add_argument("output", metavar="OUT", nargs="?")
    sc.add_argument("--sample", metavar="DIR", help="first generate the sample log in DIR and convert it")
    sc.add_argument("--sample-records-per-batch", type=int, default=20, help=argparse.SUPPRESS)
    sc.add_argument("--master", help="Spark master URL (default: local[*])")
    sc.add_argument("--compression", default="none", choices=CODEC_NAMES,
                    help="codec of the written batches (Parquet -> segments)")
    sc.add_argument("--mode", default="PERMISSIVE", choices=("FAILFAST", "PERMISSIVE"),
                    help="corrupt entries: skip and count them (PERMISSIVE, default) or stop (FAILFAST)")
    sc.add_argument("--no-crc", action="store_true", help="do not check CRCs")
    sc.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    sc.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sc.set_defaults(func=cmd_spark_convert)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from kafkacodec.errors import KafkaCodecError, UnsupportedCompressionError

    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
        return status
    except CliError as exc:
        print(f"kafkacodec: error: {exc}", file=sys.stderr)
        return exc.code
    except UnsupportedCompressionError as exc:
        print(f"kafkacodec: error: {exc}\n  Kafka refuses this too (UNSUPPORTED_COMPRESSION_TYPE): "
              "old clients cannot read such batches", file=sys.stderr)
        return EXIT_DATA
    except KafkaCodecError as exc:
        print(f"kafkacodec: error: {exc}\n  run `kafkacodec verify PATH` to list every problem",
              file=sys.stderr)
        return EXIT_DATA
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        print(f"kafkacodec: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
