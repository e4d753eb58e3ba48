"""`kafkacodec dump`: kafka-dump-log (Kafka 4.1's `kafka.tools.DumpLogSegments`) for a segment's
files, with its options and output: `.log` batches and records (streamed, memory about one
batch) and KRaft `.checkpoint` snapshots alike, `__consumer_offsets`, `__transaction_state` and
`__cluster_metadata` records decoded from Kafka's schemas, `.index` / `.timeindex` entries
checked against the segment (or Kafka's sanity check only), `.txnindex` and producer `.snapshot`
entries.  `--json`: one JSON object per line instead."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kafkacodec.cli._dump_log import DECODERS, ParseRecord
from kafkacodec.cli._exit import EXIT_CODES, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import check_regular, shown, spooled, stream_kind
from kafkacodec.cli._output import FORMATTER, count_arg

__all__ = ["add_parser", "run", "Dump"]

# kafka-dump-log's decoder classes (org.apache.kafka.tools.api.*, kafka.serializer.*) by their
# simple name; DefaultDecoder hands Java a byte[], printed here as hex
JAVA_DECODERS = {"StringDecoder": "string", "IntegerDecoder": "int", "LongDecoder": "long",
                 "DefaultDecoder": "hex"}


def _decoder(text: str) -> str:
    if text in DECODERS:
        return text
    simple = text.rsplit(".", 1)[-1]
    if simple in JAVA_DECODERS:
        return JAVA_DECODERS[simple]
    raise argparse.ArgumentTypeError(f"{text!r}: use one of {', '.join(DECODERS)} (or kafka-dump-log's "
                                     f"{', '.join(JAVA_DECODERS)})")


class Dump:
    """What one `dump` run shares between files: the options, the output and the reports that
    kafka-dump-log prints at the end (on stderr; with --json as objects on stdout)."""

    def __init__(self, args: argparse.Namespace):
        from kafkacodec.cli._cluster_metadata import metadata_record
        from kafkacodec.cli._internal_topics import offsets_record, transaction_record

        self.args = args
        self.reports: list[tuple[str, list[str], dict[str, Any]]] = []
        self.offset_indexes: dict[str, list[tuple[int, int]]] = {}
        self.structured = args.offsets_decoder or args.transaction_log_decoder or args.cluster_metadata_decoder
        self.parse_record: ParseRecord
        if args.offsets_decoder:
            self.parse_record = offsets_record
        elif args.transaction_log_decoder:
            self.parse_record = transaction_record
        elif args.cluster_metadata_decoder:
            self.parse_record = metadata_record
        else:
            decode_key, decode_value = DECODERS[args.key_decoder], DECODERS[args.value_decoder]
            self.parse_record = lambda key, value, offset: (
                None if key is None else decode_key(key), None if value is None else decode_value(value))

    def out(self, line: str) -> None:
        sys.stdout.write(shown(line) + "\n")

    def emit(self, line: str, fields: dict[str, Any]) -> None:
        """One output line: `line`, or `fields` as JSON with --json."""
        self.out(json.dumps(fields) if self.args.json else line)

    def problem(self, path: str, message: str, *, stdout: bool = False) -> None:
        """Something wrong with a file, reported at once (the caller sets the exit status)."""
        if self.args.json:
            self.out(json.dumps({"file": path, "problem": message}))
        elif stdout:
            self.out(message)
        else:
            print(shown(f"kafkacodec: error: {path}: {message}"), file=sys.stderr)

    def report(self, title: str, lines: list[str], fields: dict[str, Any]) -> None:
        """A list printed after every file is dumped, as kafka-dump-log does."""
        self.reports.append((title, lines, fields))

    def gaps(self, path: str, latest: list[tuple[int, int]], count: int) -> None:
        """Non-consecutive record offsets: the latest pairs, latest first (kafka-dump-log's order)."""
        lines = [f"  {a} is followed by {b}" for a, b in latest]
        if count > len(latest):
            lines.append(f"  ... and {count - len(latest)} earlier")
        self.report(f"Non-consecutive offsets in {os.path.abspath(path) if path != '-' else path}", lines,
                    {"file": path, "problem": "non-consecutive offsets", "count": count,
                     "latest": [list(pair) for pair in latest]})

    def finish(self) -> None:
        for title, lines, fields in self.reports:
            if self.args.json:
                self.out(json.dumps(fields))
            else:
                print(shown("\n".join([title, *lines])), file=sys.stderr)


def _files(args: argparse.Namespace) -> list[str]:
    files = [f for group in args.files_option for f in group.split(",") if f] + list(args.files)
    if not files:
        raise CliError("give the files to dump: kafkacodec dump FILE... (or --files a.log,b.index as "
                       "kafka-dump-log takes them)", EXIT_USAGE)
    return files


def _dumper(path: str, by_suffix: dict[str, Any]) -> Any:
    """What dumps `path`, by its suffix (None: nothing); a stream with no known suffix (`-`,
    `<(zcat seg.log.gz)`) carries a segment, dumped as a .log."""
    name = os.path.basename(path)
    command = by_suffix.get(name[name.rfind("."):] if "." in name else "")
    if command is None and stream_kind(path) is not None:
        return by_suffix[".log"]
    return command


def run(args: argparse.Namespace) -> int:
    from kafkacodec.cli._dump_index import dump_offset_index, dump_snapshot, dump_time_index, dump_txn_index
    from kafkacodec.cli._dump_log import dump_log

    topics = args.offsets_decoder + args.transaction_log_decoder + args.cluster_metadata_decoder
    if topics > 1:
        raise CliError("give one of --offsets-decoder, --transaction-log-decoder and --cluster-metadata-decoder",
                       EXIT_USAGE)
    if topics or args.key_decoder_given or args.value_decoder_given:
        args.print_data = True                  # as kafka-dump-log: any decoder prints the data
    # a KRaft snapshot (.checkpoint) is record batches, dumped as a segment is (Kafka's dumpLog)
    by_suffix = {".log": dump_log, ".checkpoint": dump_log, ".index": dump_offset_index,
                 ".timeindex": dump_time_index, ".txnindex": dump_txn_index, ".snapshot": dump_snapshot}
    dump = Dump(args)
    status = EXIT_OK
    files = [(path, _dumper(path, by_suffix)) for path in _files(args)]
    # streams (`-`, a FIFO, a device) are read first, those not dumped never; of a .log, only
    # the bytes --max-bytes examines
    with spooled([p for p, command in files if command is dump_log], "dump", keep=args.max_bytes), \
            spooled([p for p, command in files if command not in (None, dump_log)], "dump"):
        for path, command in files:
            if not args.json:
                dump.out(f"Dumping {path}")
            check_regular(path, "dump")         # a stream: its spooled copy
            if command is None:
                print(f"Ignoring unknown file {path} (dump reads .log, .checkpoint, .index, .timeindex, "
                      ".txnindex and .snapshot files)", file=sys.stderr)
                continue
            status = max(status, command(dump, path))
    dump.finish()
    return status


class _Given(argparse.Action):
    """Stores the value and notes that the option was given (decoders imply --print-data-log)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def add_parser(subparsers: Any) -> None:
    d = subparsers.add_parser(
        "dump", help="print a segment's batches and records, indexes, snapshots (like kafka-dump-log)",
        formatter_class=FORMATTER,
        description="kafka-dump-log for a segment's files, with its options and output (Kafka 4.1): "
                    ".log batches (records with --deep-iteration), KRaft .checkpoint snapshots likewise, "
                    ".index and .timeindex entries checked "
                    "against their segment, .txnindex aborted transactions, producer .snapshot entries. "
                    "Problems (bad CRCs, broken framing, a partial last batch, index entries that do not "
                    "match) are listed and make the exit status 1.",
        epilog="examples:\n  kafkacodec dump 00000000000000000000.log\n"
               "  kafkacodec dump --deep-iteration --print-data-log 00000000000000000000.log\n"
               "  kafkacodec dump --files 00000000000000000000.index,00000000000000000000.timeindex\n"
               "  kafkacodec dump --offsets-decoder __consumer_offsets-7/00000000000000000000.log\n"
               "  kafkacodec dump --cluster-metadata-decoder __cluster_metadata-0/*.{log,checkpoint}\n"
               "  kafkacodec dump --value-decoder-class base64 --print-data-log seg.log\n"
               "  kafkacodec dump --json --deep seg.log | jq .records[].offset\n"
               "  zcat seg.log.gz | kafkacodec dump --deep -\n\n" + EXIT_CODES)
    d.add_argument("files", nargs="*", metavar="FILE", help="segment files: .log, .checkpoint, .index, "
                                                            ".timeindex, .txnindex, .snapshot; or streams: - "
                                                            "(stdin), a FIFO, <(zcat seg.log.gz), a .log "
                                                            "unless named otherwise")
    d.add_argument("--files", dest="files_option", action="append", default=[], metavar="FILE,FILE",
                   help="comma-separated files, as kafka-dump-log takes them (repeatable)")
    d.add_argument("--deep", "--deep-iteration", action="store_true", help="print every record")
    d.add_argument("--print-data", "--print-data-log", action="store_true",
                   help="also print keys and values; implies --deep-iteration")
    d.add_argument("--skip-record-metadata", action="store_true",
                   help="print only the keys and values of records, not their offsets, sizes...")
    d.add_argument("--key-decoder-class", dest="key_decoder", type=_decoder, default="string", action=_Given,
                   metavar="DECODER", help=f"keys as {', '.join(DECODERS)} (default string: UTF-8); implies "
                                           "--print-data-log")
    d.add_argument("--value-decoder-class", dest="value_decoder", type=_decoder, default="string",
                   action=_Given, metavar="DECODER", help="values, likewise")
    d.add_argument("--offsets-decoder", action="store_true",
                   help="records are __consumer_offsets' (offset commits, group metadata), printed as JSON")
    d.add_argument("--transaction-log-decoder", action="store_true",
                   help="records are __transaction_state's (transactional ids' state), printed as JSON")
    d.add_argument("--cluster-metadata-decoder", action="store_true",
                   help="records are __cluster_metadata's (KRaft's topics, partitions, brokers, configs, "
                        "features...), printed as JSON")
    d.add_argument("--index-sanity-check", action="store_true",
                   help=".index/.timeindex: only Kafka's sanity check at broker start (fails: a broker rebuilds it)")
    d.add_argument("--verify-index-only", action="store_true",
                   help=".index/.timeindex: check every entry against the segment, print only the mismatches")
    d.add_argument("--max-message-size", type=count_arg(1), default=5 * 1024 * 1024, metavar="N",
                   help="the largest batch an index entry may point at (default 5 MiB)")
    d.add_argument("--max-bytes", type=count_arg(0), metavar="N",
                   help="examine only the batches within the first N bytes of each .log file")
    d.add_argument("--json", action="store_true",
                   help="one JSON object per line on stdout (per batch, with its records; per index entry...)")
    d.set_defaults(run=run, key_decoder_given=False, value_decoder_given=False)
