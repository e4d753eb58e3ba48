"""`kafkacodec spark convert`: the segments <-> Parquet job on Spark (kafkacodec.spark.job)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_DATA, EXIT_INPUT, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import refuse_stream
from kafkacodec.cli._output import FORMATTER, emit_json
from kafkacodec.cli.generate import generate

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def run(args: argparse.Namespace) -> int:
    if args.sample and args.output is None and args.input is not None:
        args.output, args.input = args.input, None      # --sample DIR OUT
    # Spark's tasks open their files by path: a stream can be neither IN nor OUT
    refuse_stream(args.input, "spark convert", "a log directory, a segment file or a directory of "
                  "Parquet files as IN, which its Spark tasks open by path",
                  advice=" (`kafkacodec read -` and `verify -` read one)")
    refuse_stream(args.output, "spark convert", "a directory to write into as OUT", dash="stdout")
    refuse_stream(args.sample, "spark convert", "a directory for --sample to write the sample log "
                  "into", dash="stdout")
    import pyspark  # noqa: F401  (before any work: exit 4 with the install hint when missing)

    from kafkacodec._progress import Progress
    from kafkacodec.spark.job import StageProgress, convert, make_session

    if args.sample:
        src = args.sample
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
    from kafkacodec.spark.job import check_output

    try:                                      # input and output checked before Spark starts
        check_output(str(src), str(args.output), args.overwrite)
    except (FileExistsError, SameFileError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    _check_input(str(src))

    conf = {}
    for item in args.conf:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--conf {item!r}: use KEY=VALUE (a Spark property)", EXIT_USAGE)
        conf[name.strip()] = value
    owned = SparkSession.getActiveSession() is None
    spark = make_session(args.master, conf=conf)
    try:
        with Progress(None, "spark", unit="task", enabled=False if args.no_progress else None) as bar, \
                StageProgress(spark, bar):
            s = convert(spark, src, args.output, compression=args.compression, mode=args.mode,
                        validate_crc=not args.no_crc, overwrite=args.overwrite)
    except (FileExistsError, SameFileError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    finally:
        if owned:
            spark.stop()
    if args.json:
        emit_json(s.to_dict())
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


def _check_input(src: str) -> None:
    """CliError (exit 3) unless `src` holds Parquet files or at least one file that starts as
    a Kafka segment: seconds, where Spark would take minutes to find nothing to convert."""
    from kafkacodec.logdir import plan
    from kafkacodec.logdir._problems import not_a_segment
    from kafkacodec.spark.job import is_parquet

    if "://" in src or is_parquet(src):
        return
    try:
        splits, _ = plan(src, {"mode": "PERMISSIVE"}, on_problem=lambda problem: None)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(f"{exc}; IN is a Kafka log directory, a segment file or a directory of "
                       "Parquet files", EXIT_INPUT) from None
    reasons = []
    for path in dict.fromkeys(s.path for s in splits):
        try:
            with open(path, "rb") as f:
                head = f.read(17)
            size = os.path.getsize(path)
        except OSError as exc:
            reasons.append(f"{path}: {exc.strerror or exc}")
            continue
        reason = not_a_segment(head, size)
        if reason is None:                    # one segment (even an empty active one) will do
            return
        reasons.append(f"{path}: {reason}")
    raise CliError(f"{src} holds no Kafka segment to convert ({len(reasons)} files, none a "
                   f"segment; {reasons[0] if reasons else 'no segment files'})", EXIT_INPUT)


def add_parser(subparsers: Any) -> None:
    s = subparsers.add_parser("spark", help="Spark jobs (needs kafkacodec[spark])")
    ssub = s.add_subparsers(dest="spark_command", metavar="JOB", required=True)
    sc = ssub.add_parser(
        "convert", formatter_class=FORMATTER,
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
    sc.set_defaults(run=run)
