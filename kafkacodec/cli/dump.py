"""`kafkacodec dump`: kafka-dump-log's output for segment files, streamed through FileRecords
(memory stays about one batch)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkacodec.cli._exit import EXIT_DATA, EXIT_OK
from kafkacodec.cli._files import open_segment
from kafkacodec.cli._output import FORMATTER, count_arg

if TYPE_CHECKING:
    from kafkacodec._records import Record, RecordBatch, Records

TS_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


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


def run(args: argparse.Namespace) -> int:
    status = EXIT_OK
    gaps = _Gaps()
    for path in args.files:
        with open_segment(path, "dump") as segment:
            records = segment if args.max_bytes is None else segment.slice(0, args.max_bytes)
            status = max(status, _dump_segment(path, records, args, gaps))
    gaps.report()
    return status


def add_parser(subparsers: Any) -> None:
    d = subparsers.add_parser("dump", help="print batches (and records) like kafka-dump-log", formatter_class=FORMATTER,
                              epilog="examples:\n  kafkacodec dump 00000000000000000000.log\n"
                                     "  kafkacodec dump --deep --print-data 00000000000000000000.log\n"
                                     "  kafkacodec dump --json --deep seg.log | jq .records[].offset")
    d.add_argument("files", nargs="+", metavar="FILE", help="segment files (.log)")
    d.add_argument("--deep", "--deep-iteration", action="store_true", help="print every record")
    d.add_argument("--print-data", "--print-data-log", action="store_true",
                   help="also print keys and values (UTF-8); implies --deep")
    d.add_argument("--max-bytes", type=count_arg(0), metavar="N",
                   help="examine only the batches within the first N bytes of each file")
    d.add_argument("--json", action="store_true", help="one JSON object per batch on stdout")
    d.set_defaults(run=run)
