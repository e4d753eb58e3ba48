"""`kafkacodec dump` of a segment's other files, as kafka-dump-log prints them: `.index` and
`.timeindex` entries checked against their segment (or only Kafka's sanity check), `.txnindex`
aborted transactions, producer `.snapshot` entries.  The files are parsed by
kafkacodec.logdir.indexes and kafkacodec.logdir.snapshots."""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING, Any

from kafkacodec.cli._exit import EXIT_DATA, EXIT_INPUT, EXIT_OK
from kafkacodec.cli._files import check_regular, local

if TYPE_CHECKING:
    from kafkacodec._records import FileRecords
    from kafkacodec.cli.dump import Dump

__all__ = ["dump_offset_index", "dump_time_index", "dump_txn_index", "dump_snapshot"]


def _base_offset(dump: Dump, path: str) -> int | None:
    """The base offset in the file's name (`<20-digit offset>.<suffix>`), or None (reported)."""
    stem = os.path.basename(path).split(".")[0]
    if stem.isdigit():
        return int(stem)
    dump.problem(path, "not named <base offset>.<suffix> as a segment's files are; its base offset is unknown")
    return None


def _sibling(path: str, suffix: str) -> str:
    """The segment's file with `suffix` beside `path` (same base offset)."""
    return os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + suffix)


def _read(path: str) -> bytes:
    check_regular(path, "dump")
    with open(local(path), "rb") as f:           # a stream: its spooled copy
        return f.read()


def _open_log(dump: Dump, path: str) -> FileRecords | None:
    """The segment beside an index file, or None (reported: the entries are not checked)."""
    from kafkacodec import FileRecords

    log = _sibling(path, ".log")
    try:
        check_regular(log, "dump")
        return FileRecords.open(log)
    except Exception as exc:      # CliError or OSError: the index is still printed
        dump.problem(path, f"its entries are not checked: {exc}")
        return None


def _slots(data: bytes, size: int) -> list[bytes]:
    """Kafka's entries of an index opened read-only: every whole slot of the file."""
    return [data[i:i + size] for i in range(0, len(data) - len(data) % size, size)]


def _sanity(dump: Dump, path: str, suffix: str, data: bytes, base: int) -> int:
    from kafkacodec.errors import CorruptRecordError
    from kafkacodec.logdir.indexes import sanity_check

    try:
        sanity_check(suffix, data, base, path)
    except CorruptRecordError as exc:
        dump.problem(path, f"failed Kafka's sanity check (a broker rebuilds it): {exc}")
        return EXIT_DATA
    dump.emit(f"{path} passed sanity check.", {"file": path, "sanityCheck": "passed"})
    return EXIT_OK


def _index_slots(dump: Dump, path: str, suffix: str, entry_size: int) -> tuple[int, list[bytes]] | int:
    """An index file's base offset and slots, or the exit status when that settles it (no base
    offset in the name, or --index-sanity-check)."""
    data, base = _read(path), _base_offset(dump, path)
    if base is None:
        return EXIT_DATA
    if dump.args.index_sanity_check:
        return _sanity(dump, path, suffix, data, base)
    return base, _slots(data, entry_size)


def _first_batch_at(log: FileRecords, position: int, size: int) -> Any:
    from kafkacodec.errors import KafkaCodecError

    if position >= log.size_in_bytes:
        return None
    try:
        return next(log.slice(position, size).batches(), None)
    except KafkaCodecError:
        return None


def dump_offset_index(dump: Dump, path: str) -> int:
    from kafkacodec.logdir.indexes import OFFSET_ENTRY

    settled = _index_slots(dump, path, ".index", OFFSET_ENTRY)
    if isinstance(settled, int):
        return settled
    base, slots = settled
    if not slots:
        dump.emit(f"{path} is empty.", {"file": path, "entries": 0})
        return EXIT_OK
    status = EXIT_OK
    log = _open_log(dump, path)
    mismatches = []
    try:
        for i, slot in enumerate(slots):
            relative, position = struct.unpack(">ii", slot)
            offset = base + relative
            if offset == base and i > 0:         # a preallocated (or crash-zeroed) slot: the end
                break
            if log is not None:
                batch = _first_batch_at(log, position, dump.args.max_message_size)
                found = batch.last_offset if batch is not None else -1
                if found != offset:
                    mismatches.append((offset, found))
            if not dump.args.verify_index_only:
                dump.emit(f"offset: {offset} position: {position}", {"file": path, "offset": offset,
                                                                      "position": position})
    finally:
        if log is not None:
            log.close()
        else:
            status = EXIT_INPUT
    if mismatches:
        dump.report(f"Mismatches in :{os.path.abspath(path)}",
                    [f"  Index offset: {a}, log offset: {b}" for a, b in mismatches],
                    {"file": path, "problem": "index mismatch",
                     "mismatches": [{"indexOffset": a, "logOffset": b} for a, b in mismatches]})
        status = EXIT_DATA
    return status


def _index_position(dump: Dump, path: str, base: int, offset: int) -> int:
    """Kafka's OffsetIndex.lookup(offset) on the segment's `.index` (0 without one)."""
    from kafkacodec.logdir.indexes import OFFSET_ENTRY

    index = _sibling(path, ".index")
    if index not in dump.offset_indexes:
        try:
            rows = [struct.unpack(">ii", s) for s in _slots(_read(index), OFFSET_ENTRY)]
        except Exception:
            rows = []
        dump.offset_indexes[index] = [(base + r, p) for i, (r, p) in enumerate(rows) if r or not i]
    position = 0
    for entry_offset, entry_position in dump.offset_indexes[index]:
        if entry_offset > offset:
            break
        position = entry_position
    return position


def dump_time_index(dump: Dump, path: str) -> int:
    from kafkacodec.logdir.indexes import TIME_ENTRY

    settled = _index_slots(dump, path, ".timeindex", TIME_ENTRY)
    if isinstance(settled, int):
        return settled
    base, slots = settled
    log = _open_log(dump, path)
    where = os.path.abspath(path)
    mismatch, out_of_order, not_found = [], [], []
    previous = -1                                   # RecordBatch.NO_TIMESTAMP
    try:
        for i, slot in enumerate(slots):
            timestamp, relative = struct.unpack(">qi", slot)
            offset = base + relative
            if offset == base and i > 0:
                break
            if log is not None:
                batch = None
                for candidate in log.slice(_index_position(dump, path, base, offset), log.size_in_bytes).batches():
                    if candidate.last_offset >= offset:
                        batch = candidate
                        break
                if batch is None or batch.last_offset != offset:
                    not_found.append((offset, -1 if batch is None else batch.last_offset))
                else:
                    largest = max((r.timestamp for r in batch), default=-1)
                    if largest != timestamp:
                        mismatch.append((timestamp, largest))
                    if previous >= timestamp:
                        out_of_order.append((timestamp, previous))
            if not dump.args.verify_index_only:
                dump.emit(f"timestamp: {timestamp} offset: {offset}", {"file": path, "timestamp": timestamp,
                                                                       "offset": offset})
            previous = timestamp
    finally:
        if log is not None:
            log.close()
    for title, rows, fmt, kind in (
            (f"Found timestamp mismatch in :{where}", mismatch, "  Index timestamp: {}, log timestamp: {}",
             "time index mismatch"),
            (f"Found out of order timestamp in :{where}", out_of_order,
             "  Index timestamp: {}, Previously indexed timestamp: {}", "time index out of order"),
            ("The following indexed offsets are not found in the log.", not_found,
             "Indexed offset: {}, found log offset: {}", "indexed offset not found")):
        if rows:
            dump.report(title, [fmt.format(a, b) for a, b in rows],
                        {"file": path, "problem": kind, "entries": [list(r) for r in rows]})
    if mismatch or out_of_order or not_found:
        return EXIT_DATA
    return EXIT_OK if log is not None else EXIT_INPUT


def dump_txn_index(dump: Dump, path: str) -> int:
    from kafkacodec.errors import CorruptRecordError
    from kafkacodec.logdir.indexes import read_txn_index

    data, base = _read(path), _base_offset(dump, path)
    if base is None:
        return EXIT_DATA
    try:
        entries = read_txn_index(data, base, path)
    except CorruptRecordError as exc:
        dump.problem(path, str(exc))
        return EXIT_DATA
    for t in entries:
        dump.emit(f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
                  f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}",
                  {"file": path, "version": t.version, "producerId": t.producer_id, "firstOffset": t.first_offset,
                   "lastOffset": t.last_offset, "lastStableOffset": t.last_stable_offset})
    return EXIT_OK


def dump_snapshot(dump: Dump, path: str) -> int:
    from kafkacodec.errors import CorruptRecordError
    from kafkacodec.logdir.snapshots import parse_producer_snapshot

    try:
        entries = parse_producer_snapshot(_read(path), path)
    except CorruptRecordError as exc:
        dump.problem(path, str(exc))
        return EXIT_DATA
    for e in entries:
        open_txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {open_txn} lastTimestamp: {e.timestamp} ")
        fields: dict[str, Any] = {"file": path, "producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                                  "coordinatorEpoch": e.coordinator_epoch,
                                  "currentTxnFirstOffset": None if e.current_txn_first_offset < 0
                                  else e.current_txn_first_offset, "lastTimestamp": e.timestamp}
        if e.last_offset >= 0:                      # the producer's last batch
            line += (f"firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} lastOffset: "
                     f"{e.last_offset} offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")
            fields.update(firstSequence=e.first_sequence, lastSequence=e.last_sequence, lastOffset=e.last_offset,
                          offsetDelta=e.offset_delta, timestamp=e.timestamp)
        dump.emit(line, fields)
    return EXIT_OK
