"""`kafkacodec dump` of a log segment: kafka-dump-log's batch and record lines (Kafka 4.x), or
one JSON object per batch, streamed through FileRecords (memory stays about one batch)."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

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
GAPS_KEPT = 100                 # non-consecutive offsets listed per file (the rest are counted)

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
    control = int(r.control_type)  # type: ignore[arg-type]
    if control in (0, 1) and r.coordinator_epoch is not None:
        return {"endTxnMarker": CONTROL_NAMES[control], "coordinatorEpoch": r.coordinator_epoch}
    return {"controlType": f"{CONTROL_NAMES.get(control, 'UNKNOWN')}({control})"}


class _LogDumper:
    def __init__(self, dump: Dump, path: str):
        self.dump = dump
        self.args = dump.args
        self.path = path
        self.status = EXIT_OK
        self.last_offset: int | None = None
        self.gaps: list[tuple[int, int]] = []
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
            elif "controlType" in f:
                line += f" controlType: {f['controlType']}"
        if "key" in f:
            line += f"{prefix}key: {f['key']}"
        if "payload" in f:
            line += f" payload: {f['payload']}"
        return line

    def note_offset(self, offset: int) -> None:
        if self.last_offset is not None and offset != self.last_offset + 1:
            self.gap_count += 1
            if len(self.gaps) < GAPS_KEPT:
                self.gaps.append((self.last_offset, offset))
        self.last_offset = offset

    def json_record(self, f: dict[str, Any]) -> dict[str, Any]:
        """A record for --json: the internal topics' key and payload as JSON, not as text."""
        if self.dump.structured and f.get("key", "").startswith("{"):
            f = dict(f, key=json.loads(f["key"]), **({"payload": json.loads(f["payload"])}
                                                    if f.get("payload", "").startswith("{") else {}))
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
                if self.gap_count:
                    self.dump.gaps(self.path, self.gaps, self.gap_count)
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
        if self.gap_count:
            self.dump.gaps(self.path, self.gaps, self.gap_count)
        return self.status


def dump_log(dump: Dump, path: str) -> int:
    from kafkacodec.logdir._layout import segment_base
    from kafkacodec.logdir._problems import not_a_segment

    with open_segment(path, "dump") as segment:
        reason = not_a_segment(segment_head(segment), segment.size_in_bytes)
        if reason is not None:
            dump.problem(path, f"this is not a Kafka segment: {reason}")
            status = EXIT_DATA
        else:
            if not dump.args.json:
                base = segment_base(path.rsplit("/", 1)[-1])
                dump.out(f"Log starting offset: {base if base is not None else 0}")
            records = segment if dump.args.max_bytes is None else segment.slice(0, dump.args.max_bytes)
            status = _LogDumper(dump, path).run(records)
    return status
