"""`kafkacodec read` (alias `cat`): the records of log files and directories one per line, in
kcat's spirit: a format string (`-f '%t %p %o %k %s %T %h\\n'`), offset and time ranges
(`-o beginning|end|N|-N|s@ts|e@ts`), a count, topic and partition filters, kcat's JSON (`-J`,
its layout, so jq scripts written for kcat work) or JSON Lines with the Spark source's columns
(`--json-columns`), and kcat's -Z, -u, -q, -e.

The name: `read` is what the library and the "kafkalog" data source call it (a *read* of a log
directory, with the same options); `cat` is accepted for kcat's muscle memory.

It reads as the Spark source does: kafkacodec.logdir plans and reads the same splits with the
same options (`-X name=value` takes any "kafkalog" read option: mode, failOnDataLoss,
kafka.isolation.level, keepControl...), damage policy, isolation level and index files, so its
counts are the Spark source's counts.  Memory is bounded by one Arrow batch (maxRowsPerBatch
rows, 16 MiB)."""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_DATA, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._files import shown_problem, spooled
from kafkacodec.cli._output import FORMATTER, count_arg

__all__ = ["add_parser", "run", "parse_format", "unescape"]

TS_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
ENCODINGS: dict[str, Callable[[bytes], str]] = {"base64": lambda b: base64.b64encode(b).decode(), "hex": bytes.hex}
TOKENS = "tpokKsSRTh%"


_NUMBER = re.compile(rb"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")
_HEX_BYTE = re.compile(rb"[0-9a-fA-F]{1,2}")


def unescape(text: str) -> bytes:
    """kcat's escapes: \\n \\r \\t, \\xHH (hex), \\NNN (a number as C reads it: decimal,
    0-prefixed octal, 0x hex; its low byte); any other escaped character stands for itself."""
    raw = text.encode()
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] != 0x5C or i + 1 == len(raw):        # not a backslash, or a trailing one
            out.append(raw[i])
            i += 1
            continue
        nxt = raw[i + 1:i + 2]
        if nxt in (b"n", b"r", b"t"):
            out += {b"n": b"\n", b"r": b"\r", b"t": b"\t"}[nxt]
            i += 2
        elif nxt == b"x" and (m := _HEX_BYTE.match(raw, i + 2)):
            out.append(int(m.group(), 16))
            i = m.end()
        elif nxt.isdigit() and (m := _NUMBER.match(raw, i + 1)):
            digits = m.group()
            value = int(digits, 16) if digits[1:2] in (b"x", b"X") else int(digits, 8) if digits[:1] == b"0" \
                else int(digits)
            out.append(value & 0xFF)
            i = m.end()
        else:
            out += nxt
            i += 2
    return bytes(out)


def parse_format(fmt: str) -> list[bytes | str]:
    """The format as literal byte pieces and one-letter tokens (kcat's: %t topic, %p
    partition, %o offset, %k key, %K key length, %s value, %S value length, %R value length as
    a big-endian int32, %T timestamp in ms, %h headers as name=value CSV, %% a percent sign)."""
    parts: list[bytes | str] = []
    literal = ""
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            literal += fmt[i]
            i += 1
            continue
        if i + 1 >= len(fmt):
            raise CliError(f"-f {fmt!r}: a format ends with a lone %", EXIT_USAGE)
        token = fmt[i + 1]
        if token not in TOKENS:
            raise CliError(f"-f {fmt!r}: unsupported formatter %{token} (use %t %p %o %k %K %s %S %R %T %h %%)",
                           EXIT_USAGE)
        if token == "%":
            literal += "%"
        else:
            if literal:
                parts.append(unescape(literal))
                literal = ""
            parts.append(token)
        i += 2
    if literal:
        parts.append(unescape(literal))
    return parts


def _headers_csv(headers: list[dict[str, Any]] | None) -> bytes:
    if not headers:
        return b""
    return b",".join(h["key"].encode() + b"=" + (b"NULL" if h["value"] is None else h["value"]) for h in headers)


#: kcat -J's "tstype" for Kafka's timestamp types (the field is left out without a timestamp)
KCAT_TSTYPES = {0: "create", 1: "logappend"}


def _kcat_string(data: bytes) -> str:
    """Bytes as kcat's yajl writes them into a JSON string: as they are (a surrogate per byte
    that is not UTF-8 here, turned back into that byte on output), control characters escaped."""
    return data.decode("utf-8", "surrogateescape")


class _Printer:
    def __init__(self, args: argparse.Namespace):
        self.out = sys.stdout.buffer
        self.json = args.json
        self.columns_json = args.json_columns
        self.null = b"NULL" if args.null_as_text else b""        # kcat -Z
        self.unbuffered = args.unbuffered                        # kcat -u
        self.ends: dict[tuple[str, int], int] = {}               # kcat -e's end-of-partition note
        self.encode = ENCODINGS[args.binary]
        fmt = args.format
        if fmt is None:
            fmt = ("%k" + args.key_delimiter if args.key_delimiter is not None else "") + "%s" + args.delimiter
        self.parts = parse_format(fmt)
        self.columns = ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"]

    def batch(self, rb: Any) -> Iterator[None]:
        """Writes the batch's rows; yields after each one (the caller counts them)."""
        cols = {name: rb.column(name) for name in self.columns if name in rb.schema.names}
        rows = {name: col.to_pylist() for name, col in cols.items() if name != "timestamp"}
        # ms since the epoch, -1 for none (kcat's); without pyarrow.compute's scalars, whose
        # conversion imports pandas (0.3-0.4 s of a short read)
        micros = cols["timestamp"].cast("int64").to_pylist()
        rows["timestamp"] = [-1 if t is None else t // 1000 for t in micros]
        for i in range(rb.num_rows):
            row = {name: values[i] for name, values in rows.items()}
            self.out.write(self.kcat_json_line(row) if self.json else
                           self.json_line(row) if self.columns_json else self.format(row))
            if self.unbuffered:
                self.out.flush()
            self.ends[(row["topic"], row["partition"])] = row["offset"] + 1
            yield None

    def kcat_json_line(self, row: dict[str, Any]) -> bytes:
        """kcat -J's layout: topic, partition, offset, tstype and ts (with a timestamp), broker
        (-1: no broker here), headers as [name, value, ...] (when the record has any), key,
        payload; keys, values and header values as strings of their bytes, null for null."""
        doc: dict[str, Any] = {"topic": row["topic"], "partition": row["partition"], "offset": row["offset"]}
        if row["timestamp"] != -1 and row["timestampType"] in KCAT_TSTYPES:
            doc["tstype"] = KCAT_TSTYPES[row["timestampType"]]
            doc["ts"] = row["timestamp"]
        doc["broker"] = -1
        if row.get("headers"):
            doc["headers"] = [x for h in row["headers"]
                              for x in (h["key"], None if h["value"] is None else _kcat_string(h["value"]))]
        doc["key"] = None if row["key"] is None else _kcat_string(row["key"])
        doc["payload"] = None if row["value"] is None else _kcat_string(row["value"])
        return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"

    def json_line(self, row: dict[str, Any]) -> bytes:
        encode = self.encode
        doc = {"topic": row["topic"], "partition": row["partition"], "offset": row["offset"],
               "timestamp": row["timestamp"], "timestampType": TS_TYPES.get(row["timestampType"], "NoTimestampType"),
               "key": None if row["key"] is None else encode(row["key"]),
               "value": None if row["value"] is None else encode(row["value"]),
               "headers": [{"key": h["key"], "value": None if h["value"] is None else encode(h["value"])}
                           for h in row.get("headers") or ()]}
        return json.dumps(doc, ensure_ascii=False).encode() + b"\n"

    def format(self, row: dict[str, Any]) -> bytes:
        out = bytearray()
        for part in self.parts:
            if isinstance(part, bytes):
                out += part
            elif part == "t":
                out += row["topic"].encode()
            elif part == "p":
                out += b"%d" % row["partition"]
            elif part == "o":
                out += b"%d" % row["offset"]
            elif part in "ks":
                data = row["key" if part == "k" else "value"]
                out += self.null if data is None else data
            elif part in "KSR":
                data = row["key" if part == "K" else "value"]
                n = -1 if data is None else len(data)
                out += n.to_bytes(4, "big", signed=True) if part == "R" else b"%d" % n
            elif part == "T":
                out += b"%d" % row["timestamp"]
            elif part == "h":
                out += _headers_csv(row.get("headers"))
        return bytes(out)


def _offsets(specs: list[str]) -> tuple[dict[str, str], str | None, int | None]:
    """kcat's -o values as "kafkalog" options; also 'end' or a tail length (resolved per
    partition once the log ends are known)."""
    options: dict[str, str] = {}
    special: str | None = None
    tail: int | None = None
    for spec in specs:
        text = spec.strip()
        if text == "beginning":
            options["startingOffsets"] = "earliest"
        elif text == "end":
            special = "end"
        elif text == "stored":
            raise CliError("-o stored: a log directory has no committed offsets (they are in __consumer_offsets: "
                           "`kafkacodec dump --offsets-decoder`); give beginning, end, N, -N, s@ms or e@ms",
                           EXIT_USAGE)
        elif re.fullmatch(r"s@-?\d+", text):
            options["startingTimestamp"] = text[2:]
        elif re.fullmatch(r"e@-?\d+", text):
            options["endingTimestamp"] = text[2:]
        elif re.fullmatch(r"-\d+", text):
            tail = int(text[1:])
        elif re.fullmatch(r"\d+", text):
            options["startingOffsets"] = text
        else:
            raise CliError(f"-o {spec!r}: use beginning, end, N (an offset), -N (the last N of each partition), "
                           "s@MS (from this timestamp) or e@MS (before this timestamp)", EXIT_USAGE)
    return options, special, tail


def _options(args: argparse.Namespace) -> tuple[dict[str, str], str | None, int | None]:
    options, special, tail = _offsets(args.offset)
    options["paths"] = json.dumps(args.paths)
    if args.topic:
        options["subscribe"] = ",".join(t for group in args.topic for t in group.split(",") if t)
    if args.partition:
        from kafkacodec.logdir import discover

        wanted = {int(p) for group in args.partition for p in group.split(",") if p}
        topics = set(options["subscribe"].split(",")) if "subscribe" in options else None
        assign: dict[str, list[int]] = {}
        for seg in discover(args.paths):
            if seg.partition in wanted and (topics is None or seg.topic in topics):
                assign.setdefault(seg.topic, [])
                if seg.partition not in assign[seg.topic]:
                    assign[seg.topic].append(seg.partition)
        if not assign:
            raise CliError(f"no partition {', '.join(map(str, sorted(wanted)))} of "
                           f"{'topics ' + options['subscribe'] if topics else 'any topic'} under "
                           f"{', '.join(args.paths)}", EXIT_USAGE)
        options.pop("subscribe", None)
        options["assign"] = json.dumps(assign)
    options["includeHeaders"] = "true"
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"-X {item!r}: use NAME=VALUE (a kafkalog read option)", EXIT_USAGE)
        options[name.strip()] = value
    return options, special, tail


def run(args: argparse.Namespace) -> int:
    import pyarrow.compute  # noqa: F401  (first: exit 4 with the install hint when missing)

    if args.json and args.json_columns:
        raise CliError("give -J (kcat's JSON) or --json-columns, not both", EXIT_USAGE)

    # streams among the paths (`-`, a FIFO, a device) are read into files first (_files.spooled)
    with spooled(args.paths, "read") as args.paths:
        return _read(args)


def _read(args: argparse.Namespace) -> int:
    import pyarrow.compute as pc

    from kafkacodec.errors import KafkaCodecError
    from kafkacodec.logdir import Problem, ReadOptions, read_split
    from kafkacodec.logdir._plan import Planner
    from kafkacodec.logdir._problems import Reporter, warn
    from kafkacodec.logdir._readopts import OffsetBound

    printer = _Printer(args)
    options, special, tail = _options(args)
    problems: list[Problem] = []

    def report(problem: Problem) -> None:
        problems.append(problem)
        warn(shown_problem(problem))        # a stream by the name given

    try:
        ro = ReadOptions.parse(options)
        planner = Planner(ro, Reporter(ro.mode, ro.fail_on_data_loss, report))
        if special == "end":                     # a log directory ends: nothing after its end
            planner.partitions()                 # (the paths and filters are still checked)
            return EXIT_OK
        if tail is not None:                     # the last N of each partition (of what is stable)
            starts = {}
            for part in planner.partitions():
                end = planner.log_end(part)
                if ro.read_committed:
                    lso = planner.aborted_and_lso(part)[1]
                    end = end if lso is None else min(end, lso)
                starts[(part.topic, part.partition)] = max(planner.earliest(part), end - tail)
            ro.starting = OffsetBound("offsets", starts)
        splits = planner.splits()
    except ValueError as exc:
        if isinstance(exc, KafkaCodecError):     # damage found while planning: exit 1, not 2
            raise
        raise CliError(str(exc), EXIT_USAGE) from None
    left = args.count
    for split in splits:
        # a generator: closed below when -c stops early
        batches = read_split(split, validate_crc=ro.validate_crc, include_headers=True, keep_control=ro.keep_control,
                             max_rows=ro.max_rows, mode=ro.mode, corrupt_column=ro.corrupt_column,
                             fail_on_data_loss=ro.fail_on_data_loss, on_problem=report)
        try:
            for rb in batches:
                if ro.mode == "PERMISSIVE":          # the problem rows were reported already
                    rb = rb.filter(pc.is_null(rb.column(ro.corrupt_column)))
                for _ in printer.batch(rb if left is None else rb.slice(0, left)):
                    if left is not None:
                        left -= 1
                if left == 0:
                    break
        finally:
            batches.close()                      # type: ignore[attr-defined]
        if left == 0:
            break
    sys.stdout.flush()
    if args.kcat_flags and not args.quiet and left != 0:    # kcat -e's note, unless -q
        for (topic, partition), end in printer.ends.items():
            print(f"% Reached end of topic {topic} [{partition}] at offset {end}: exiting", file=sys.stderr)
    return EXIT_DATA if any(p.kind in ("corrupt", "partial", "unreadable", "overlap", "gap", "range")
                            for p in problems) else EXIT_OK


def add_parser(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "read", aliases=["cat"], formatter_class=FORMATTER,
        help="print the records of log files or directories, one per line (kcat-style format, JSON Lines)",
        description="Print records of Kafka log segments, partition directories or log directories "
                    "(local, file://, s3://, gs://, hdfs://; globs), one per line, partition by partition "
                    "in offset order. Reads as the Spark \"kafkalog\" source does, with its options (-X).",
        epilog="format tokens (-f): %t topic, %p partition, %o offset, %k key, %K key length (-1: null),\n"
               "  %s value, %S value length, %R value length as a 4-byte big-endian int, %T timestamp (ms),\n"
               "  %h headers (name=value,...; NULL for a null value), %% a percent sign;\n"
               "  escapes \\n \\r \\t \\xHH \\NNN\n"
               "offsets (-o, repeatable): beginning, end, N (from offset N), -N (the last N of each\n"
               "  partition), s@MS (from the first record at or after this timestamp), e@MS (stop\n"
               "  before it)\n\n"
               "examples:\n"
               "  kafkacodec read /var/kafka-logs -t orders -p 0 -o -10\n"
               "  kafkacodec read /var/kafka-logs -t orders -f '%t [%p] %o %T: %k=%s\\n'\n"
               "  kafkacodec read -J -c 100 -o s@1700000000000 orders-0/ | jq .payload\n"
               "  kafkacodec read -X kafka.isolation.level=read_committed -X mode=DROPMALFORMED /logs\n"
               "  kafkacodec read -J <(zcat orders-0/00000000000000000000.log.gz)\n\n"
               + EXIT_CODES)
    r.add_argument("paths", nargs="+", metavar="PATH", help="log directory, partition directory or segment files; "
                                                             "or a stream of one segment: - (stdin), a FIFO, "
                                                             "<(zcat seg.log.gz)")
    r.add_argument("-t", "--topic", action="append", default=[], metavar="TOPIC",
                   help="only these topics (repeatable, or comma-separated)")
    r.add_argument("-p", "--partition", action="append", default=[], metavar="N",
                   help="only these partitions (repeatable, or comma-separated)")
    r.add_argument("-o", "--offset", action="append", default=[], metavar="OFFSET",
                   help="where to start (and stop): beginning (default), end, N, -N, s@MS, e@MS")
    r.add_argument("-c", "--count", type=count_arg(0), metavar="COUNT", help="stop after COUNT records")
    r.add_argument("-f", "--format", metavar="FMT", help="output format (default: the value and a newline)")
    r.add_argument("-K", dest="key_delimiter", metavar="DELIM",
                   help="without -f: print the key and DELIM before each value")
    r.add_argument("-D", dest="delimiter", default="\\n", metavar="DELIM",
                   help="without -f: the delimiter after each record (default \\n)")
    r.add_argument("-J", "--json", action="store_true",
                   help="kcat's JSON, a line per record: topic, partition, offset, tstype, ts, broker, "
                        "headers ([name, value, ...]), key, payload (bytes as they are, null for null)")
    r.add_argument("--json-columns", action="store_true",
                   help="JSON Lines with the Spark source's columns: topic, partition, offset, timestamp, "
                        "timestampType, key, value, headers ([{key, value}]), bytes in --binary")
    r.add_argument("--binary", choices=tuple(ENCODINGS), default="base64",
                   help="keys, values and header values in --json-columns (default base64)")
    r.add_argument("-Z", dest="null_as_text", action="store_true",
                   help="print a null key or value (%%k, %%s) as NULL instead of nothing (as kcat -Z)")
    r.add_argument("-u", dest="unbuffered", action="store_true", help="flush after every record (as kcat -u)")
    r.add_argument("-q", dest="quiet", action="store_true",
                   help="no end-of-partition notes with -e (as kcat -q); problems are still reported")
    r.add_argument("-X", dest="option", action="append", default=[], metavar="NAME=VALUE",
                   help="a kafkalog read option (repeatable): mode, failOnDataLoss, kafka.isolation.level, "
                        "keepControl, validateCrc, endingOffsets...")
    r.add_argument("-e", dest="kcat_flags", action="count", default=0,
                   help="exit at the end of the log (always so here) and say where each partition "
                        "ended on stderr, as kcat -e does")
    r.add_argument("-C", dest="consumer_mode", action="store_true",
                   help=argparse.SUPPRESS)        # kcat's consumer mode: the only mode here
    r.set_defaults(run=run)
