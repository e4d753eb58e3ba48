"""`kafkacodec dump` of a log segment or a KRaft snapshot: kafka-dump-log's batch and record lines
(Kafka 4.1), or one JSON object per batch, streamed through FileRecords (memory stays about one
batch)."""

from __future__ import annotations

import base64
import json
import os
import re
import struct
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kafkacodec.cli._cluster_metadata import CONTROL_LABELS, control_record
from kafkacodec.cli._exit import EXIT_DATA, EXIT_OK
from kafkacodec.cli._files import open_segment, segment_head

if TYPE_CHECKING:
    from kafkacodec._records import Record, RecordBatch, Records
    from kafkacodec.cli.dump import Dump

__all__ = ["dump_log", "DECODERS", "ParseRecord"]

TS_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
# kafka-dump-log's ControlRecordType names (the key's int16 type after its int16 version)
CONTROL_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
# kafka-dump-log 4.1's label before a KRaft control record's JSON, by the controlType text
_LABELS = {f"{CONTROL_NAMES[c]}({c})": label for c, label in CONTROL_LABELS.items()}
GAPS_KEPT = 100                 # non-consecutive offsets listed per file (the rest are counted)
# KRaft snapshots (Kafka's Snapshots.SUFFIX): <end offset, 20 digits>-<epoch, 10 digits>.checkpoint,
# and the bootstrap snapshot kafka-storage format writes (BootstrapDirectory's file name)
SNAPSHOT_SUFFIX = ".checkpoint"
SNAPSHOT_RE = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"

# (key or value bytes) -> text, as kafka-dump-log's --key-decoder-class / --value-decoder-class
DECODERS: dict[str, Callable[[bytes], str]] = {
    "string": lambda b: b.decode("utf-8", "replace"),     # Java's new String(bytes, UTF_8)
    "hex": bytes.hex,
    "base64": lambda b: base64.b64encode(b).decode(),
    "int": lambda b: str(struct.unpack(">i", b)[0]) if len(b) == 4 else f"<{len(b)} bytes, not an int>",
    "long": lambda b: str(struct.unpack(">q", b)[0]) if len(b) == 8 else f"<{len(b)} bytes, not a long>",
}

# key, value, offset -> (key text or None, payload text or None)
ParseRecord = Callable[[bytes | None, bytes | None, int], tuple[str | None, str | None]]


def batch_fields(batch: RecordBatch) -> dict[str, Any]:
    """The fields kafka-dump-log prints for one entry (v2 batch, or v0/v1 message)."""
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


def _text(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def batch_line(b: dict[str, Any]) -> str:
    if "baseOffset" in b:              # magic 2: the v2 header (as Kafka reads it)
        dh = "OptionalLong.empty" if b["deleteHorizonMs"] is None else f"OptionalLong[{b['deleteHorizonMs']}]"
        head = " ".join(f"{k}: {_text(b[k])}" for k in (
            "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId",
            "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl"))
        head += f" deleteHorizonMs: {dh}"
    else:
        head = f"offset: {b['offset']}"
    return (f"{head} position: {b['position']} {b['timestampType']}: {b['timestamp']} size: {b['size']} "
            f"magic: {b['magic']} compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {_text(b['isvalid'])}")


def _legacy_checks(batch: RecordBatch) -> list[tuple[bool, int]]:
    """(is valid, CRC-32) of each message of a v0/v1 entry (what kafka-dump-log prints per
    record): the entry itself, or the inner messages of a compressed wrapper."""
    return [(m.is_valid(), m.crc) for m in batch.inner_batches()]


def _control_fields(r: Record) -> dict[str, Any]:
    """A control record as kafka-dump-log 4.1 prints it: a transaction marker, a KRaft control
    record's message (`controlRecord`; `controlError` when it cannot be read), else its type."""
    from kafkacodec.errors import DataError

    control = int(r.control_type)  # type: ignore[arg-type]
    if control in (0, 1) and r.coordinator_epoch is not None:
        return {"endTxnMarker": CONTROL_NAMES[control], "coordinatorEpoch": r.coordinator_epoch}
    out: dict[str, Any] = {"controlType": f"{CONTROL_NAMES.get(control, 'UNKNOWN')}({control})"}
    try:
        message = control_record(control, r.value)
    except DataError as exc:
        out["controlError"] = str(exc)
    else:
        if message is not None:
            out["controlRecord"] = message
    return out


class _LogDumper:
    def __init__(self, dump: Dump, path: str):
        self.dump = dump
        self.args = dump.args
        self.path = path
        self.status = EXIT_OK
        self.last_offset: int | None = None
        self.gaps: deque[tuple[int, int]] = deque(maxlen=GAPS_KEPT)     # the latest ones
        self.gap_count = 0

    def records(self, batch: RecordBatch, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The batch's records as kafka-dump-log fields, then {"error": ...} if they cannot all
        be read (the next batch is still dumped)."""
        from kafkacodec.errors import KafkaCodecError

        try:
            checks = _legacy_checks(batch) if batch.magic < 2 else None
            for i, r in enumerate(batch):
                yield self.record_fields(b, r, checks[i] if checks and i < len(checks) else None)
        except KafkaCodecError as exc:
            yield {"error": str(exc)}

    def record_fields(self, b: dict[str, Any], r: Record, check: tuple[bool, int] | None) -> dict[str, Any]:
        """kafka-dump-log's fields for one record; timestamps are printed as the int64 they are."""
        args = self.args
        key, value = r.key, r.value
        out: dict[str, Any] = {"offset": r.offset, "timestampType": b["timestampType"], "timestamp": r.timestamp,
                               "keySize": -1 if key is None else len(key),
                               "valueSize": -1 if value is None else len(value)}
        if b["magic"] >= 2:
            out["sequence"] = r.sequence
            out["headerKeys"] = [k for k, _ in r.headers]
        elif check is not None:
            out["isValid"], out["crc"] = check
        if r.control_type is not None:
            out.update(_control_fields(r))
        elif args.print_data:
            key_text, payload = self.dump.parse_record(key, value, r.offset)
            if key_text is not None:
                out["key"] = key_text
            if payload is not None:
                out["payload"] = payload
        return out

    def record_line(self, f: dict[str, Any]) -> str:
        """kafka-dump-log's record line (with --skip-record-metadata only the data, as it does)."""
        if "error" in f:
            return f"| error: {f['error']}"
        line, prefix = "", "| "
        if not self.args.skip_record_metadata:
            line = (f"{prefix}offset: {f['offset']} {f['timestampType']}: {f['timestamp']} "
                    f"keySize: {f['keySize']} valueSize: {f['valueSize']}")
            prefix = " "
            if "sequence" in f:
                line += f" sequence: {f['sequence']} headerKeys: [{','.join(f['headerKeys'])}]"
            if "isValid" in f:
                line += f" isValid: {_text(f['isValid'])} crc: {f['crc']}"
            if "endTxnMarker" in f:
                line += f" endTxnMarker: {f['endTxnMarker']} coordinatorEpoch: {f['coordinatorEpoch']}"
            elif "controlRecord" in f:
                text = json.dumps(f["controlRecord"], separators=(",", ":"), ensure_ascii=False)
                line += f" {_LABELS[f['controlType']]}{text}"
            elif "controlType" in f:
                line += f" controlType: {f['controlType']}"
                if "controlError" in f:
                    line += f" error: {f['controlError']}"
        if "key" in f:
            line += f"{prefix}key: {f['key']}"
        if "payload" in f:
            line += f" payload: {f['payload']}"
        return line

    def note_offset(self, offset: int) -> None:
        if self.last_offset is not None and offset != self.last_offset + 1:
            self.gap_count += 1
            self.gaps.append((self.last_offset, offset))
        self.last_offset = offset

    def report_gaps(self) -> None:
        if self.gap_count:      # kafka-dump-log lists them latest first (it prepends each pair)
            self.dump.gaps(self.path, list(reversed(self.gaps)), self.gap_count)

    def json_record(self, f: dict[str, Any]) -> dict[str, Any]:
        """A record for --json: the internal topics' key and payload as JSON, not as text."""
        if self.dump.structured:
            f = dict(f, **{k: json.loads(f[k]) for k in ("key", "payload") if (f.get(k) or "").startswith("{")})
        return f

    def run(self, records: Records) -> int:
        from kafkacodec.errors import KafkaCodecError

        args, out = self.args, self.dump.out
        deep = args.deep or args.print_data
        end = 0
        batches = records.batches()
        while True:
            try:
                batch = next(batches, None)
            except KafkaCodecError as exc:      # broken framing: the rest cannot be walked
                self.dump.problem(self.path, f"{exc}; the rest of the file cannot be read (its framing is lost)")
                self.report_gaps()
                return EXIT_DATA
            if batch is None:
                break
            end = batch.position + batch.size_in_bytes
            b = batch_fields(batch)
            if not b["isvalid"]:
                self.status = EXIT_DATA
            if not args.json:
                out(batch_line(b))
            rows = []
            for f in (self.records(batch, b) if deep else ()):
                if "error" in f:
                    self.status = EXIT_DATA
                else:
                    self.note_offset(f["offset"])
                    if "controlError" in f:
                        self.status = EXIT_DATA
                if args.json:
                    rows.append(self.json_record(f))
                else:
                    out(self.record_line(f))
            if args.json:
                out(json.dumps({"file": self.path, **b, **({"records": rows} if deep else {})}))
        rest = records.size_in_bytes - end
        if rest and args.max_bytes is None:
            # kafka-dump-log's words (it exits 0; a partial last batch is damage, as for verify)
            self.dump.problem(self.path, f"Found {rest} invalid bytes at the end of {self.path.rsplit('/', 1)[-1]}",
                              stdout=not args.json)
            self.status = EXIT_DATA
        self.report_gaps()
        return self.status


def _first_line(path: str) -> str | None:
    """kafka-dump-log's line before a file's batches: a segment's base offset, a KRaft
    snapshot's end offset and epoch (from its name); None for a snapshot misnamed."""
    from kafkacodec.logdir._layout import segment_base

    name = os.path.basename(path)
    if not name.endswith(SNAPSHOT_SUFFIX):
        base = segment_base(name)
        return f"Log starting offset: {base if base is not None else 0}"
    if name == BOOTSTRAP_SNAPSHOT:
        return "KRaft bootstrap snapshot"
    m = SNAPSHOT_RE.fullmatch(name)
    return None if m is None else f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}"


def dump_log(dump: Dump, path: str) -> int:
    """A segment (`.log`) or a KRaft snapshot (`.checkpoint`: record batches too)."""
    from kafkacodec.logdir._problems import not_a_segment

    with open_segment(path, "dump") as segment:
        reason = not_a_segment(segment_head(segment), segment.size_in_bytes)
        if reason is not None:
            dump.problem(path, f"this is not a Kafka segment: {reason}")
            status = EXIT_DATA
        else:
            first = _first_line(path)
            if first is None:
                dump.problem(path, "a KRaft snapshot is named <end offset: 20 digits>-<epoch: 10 digits>.checkpoint "
                                   "(or bootstrap.checkpoint); its records follow")
            elif not dump.args.json:
                dump.out(first)
            records = segment if dump.args.max_bytes is None else segment.slice(0, dump.args.max_bytes)
            status = _LogDumper(dump, path).run(records)
    return status
