"""`kafkacodec verify`: every problem of a log directory, as a PERMISSIVE "kafkalog" read finds them."""

from __future__ import annotations

import argparse
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_DATA, EXIT_INPUT, EXIT_OK, CliError
from kafkacodec.cli._files import shown_problem, spooled
from kafkacodec.cli._output import FORMATTER, emit_json


def run(args: argparse.Namespace) -> int:
    """verify PATH...; a stream (`-`, a FIFO, a device) is read into a file first (_files.spooled)."""
    import pyarrow  # noqa: F401  (before a stream is read: exit 4 with the install hint when missing)

    with spooled(args.paths, "verify") as paths:
        return _verify(args, list(paths))


def _verify(args: argparse.Namespace, paths: list[str]) -> int:
    """Check every segment under PATH and report every problem: unreadable entries, corrupt
    entries (CRC, structure), partial entries, overlapping segments, missing offsets between
    segments, invalid index and checkpoint files.  The same checks, with the same counts, as a
    "kafkalog" read in PERMISSIVE mode with failOnDataLoss=false."""
    from dataclasses import replace

    from kafkacodec._progress import Progress
    from kafkacodec.logdir import Problem, ReadOptions, read_split
    from kafkacodec.logdir._counts import COUNT_COLUMNS, RecordCounts
    from kafkacodec.logdir._plan import Planner
    from kafkacodec.logdir._problems import Reporter

    problems: list[Problem] = []
    try:
        options = ReadOptions.parse({"paths": paths, "mode": "DROPMALFORMED", "failOnDataLoss": "false",
                                     "keepControl": "true"})
        planner = Planner(options, Reporter(options.mode, False, problems.append))
        splits = planner.splits()
        for part in planner.partitions():
            for seg in part.segments:
                planner.check_indexes(seg)
    except FileNotFoundError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    segments = {s.uri for s in splits if s.problem is None}
    total = sum(s.end - s.start for s in splits)
    aborted = {(p.topic, p.partition): planner.aborted_and_lso(p)[0] for p in planner.partitions()}
    counted = RecordCounts()
    with Progress(total, "verify", unit="B", enabled=False if args.no_progress else None) as bar:
        for split in splits:
            for rb in read_split(replace(split, aborted=aborted.get((split.topic, split.partition), [])),
                                 include_headers=False, keep_control=True, mode="DROPMALFORMED",
                                 fail_on_data_loss=False, columns=COUNT_COLUMNS, on_problem=problems.append,
                                 on_aborted=counted.add_aborted):
                counted.add(rb)
            bar.update(split.end - split.start, note=f"{split.topic}-{split.partition}")
    problems = [shown_problem(p) for p in problems]     # a stream by the name given
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    result = {"path": " ".join(map(str, args.paths)), "segments": len(segments), "bytes": total, **counted.as_dict(),
              "problems": [p.as_dict() for p in problems], "counts": counts, "ok": not problems}
    if args.json:
        emit_json(result)
    else:
        for p in problems:
            print(f"{p.kind}: {p.message}")
        verdict = "OK" if not problems else f"{len(problems)} problem(s): " + ", ".join(
            f"{n} {kind}" for kind, n in sorted(counts.items()))
        print(f"verified {len(segments)} segment(s), {total} bytes: {counted.records} records "
              f"({counted.aborted_records} in aborted transactions) and {counted.control_records} "
              f"transaction markers: {verdict}")
    return EXIT_OK if not problems else EXIT_DATA


def add_parser(subparsers: Any) -> None:
    v = subparsers.add_parser("verify", help="check a log directory: CRCs, record structure, overlapping or "
                                             "missing offsets, unreadable entries, index files",
                              formatter_class=FORMATTER,
                              epilog="examples:\n  kafkacodec verify /var/kafka-logs\n"
                                     "  kafkacodec verify --json my-topic-0 | jq .ok\n"
                                     "  zcat 00000000000000000000.log.gz | kafkacodec verify -\n\n" + EXIT_CODES)
    v.add_argument("paths", nargs="+", metavar="PATH",
                   help="a log directory, a partition directory or a .log file (local, file://, s3://, gs://, "
                        "hdfs://; globs); or a stream of one segment: - (stdin), a FIFO, <(zcat seg.log.gz). "
                        "Several are read as one log: a broker's log directory and its tiered-storage store")
    v.add_argument("--json", action="store_true", help="print one JSON result on stdout")
    v.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    v.set_defaults(run=run)
