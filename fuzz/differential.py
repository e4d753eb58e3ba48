"""Differential harness: every reader of a record set on the same CRC-valid hostile bytes.

The input is a record set (the `records` corpus, mutated by the engine); `hostile()` damages it
where the record parsers read (inner message sets and compressed sections included) and
recomputes every checksum. Then, record for record (offset, timestamp, timestamp type, key,
value, headers, control flag), the readers must agree with `MemoryRecords.records()`:

- `MemoryRecords` batch iteration, `FileRecords` (the same bytes in a file), `ArrowDecoder`,
  the ring's records (a `ResponseRingBuffer` fed a FetchResponse wrapping the record set):
  the same records before the same error class (the Arrow decoder: the same error class; its
  rows of a failed call are not returned); the ring returns no control records (as Kafka's
  consumer), so it is compared without them, read_uncommitted and read_committed;
- `down_convert` to magic 1 and 0, decoded again: when the source reads cleanly, exactly the
  source's data records as that magic holds them (no headers; magic 0: no timestamps);
  `LazyDownConvertRecords` (write_to) gives a prefix of that, cut where its committed size ends;
- the mirror's `trim_batch` at a fetch offset inside an entry: the batch it writes reads as
  the entry's records at or after that offset, or it raises the same error class;
- kafka-python and aiokafka (its pure-Python reader) as independent references, where they
  accept the input: the same data records;
- `logdir.count_split` (a segment's rows counted from batch headers) against `read_split`'s
  rows and problems of the same segment file, where no CRC-valid header is contradicted by its
  records (the one thing a header is trusted for).

Adding a reader is one entry in TARGETS (a function of the hostile bytes that raises
AssertionError on a difference).
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
from typing import Any, Callable

from _harness import Missing, Target, api, codec_of, entry_spans, fetch_frame, hostile, rng_of
from kafkacodec.errors import KafkaCodecError

Rec = tuple                      # (offset, ts, ts_type, key, value, headers, is_control)
Outcome = tuple[list[Rec], "type | None"]


def _record(r: Any) -> Rec:
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers),
            bool(r.is_control))


def _read(iterate: Callable[[], Any]) -> Outcome:
    out: list[Rec] = []
    try:
        for rec in iterate():
            out.append(_record(rec))
    except KafkaCodecError as exc:
        _positions[id(out)] = exc.position
        return out, type(exc)
    return out, None


_positions: dict[int, int | None] = {}     # where a reader's error was (by its record list)


# --- the readers ---------------------------------------------------------------------------

def memory_records(data: bytes) -> Outcome:
    return _read(lambda: api("kafkacodec.MemoryRecords")(data).records())


def memory_batches(data: bytes) -> Outcome:
    def walk() -> Any:
        for batch in api("kafkacodec.MemoryRecords")(data).batches():
            yield from batch
    return _read(walk)


_DIR = tempfile.mkdtemp(prefix="kc-fuzz-diff-")


def file_records(data: bytes) -> tuple[Outcome, Outcome]:
    """records() and batch iteration of a FileRecords over the same bytes."""
    path = os.path.join(_DIR, "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    FileRecords = api("kafkacodec.FileRecords")
    with FileRecords.open(path) as records:
        flat = _read(records.records)

        def walk() -> Any:
            for batch in records.batches():
                yield from batch
        nested = _read(walk)
    return flat, nested


def file_rules(data: bytes, expected: Outcome) -> Outcome:
    """MemoryRecords' outcome as the file reader's framing rules change it (docs/reading.md,
    Kafka's FileLogInputStream): fewer than 18 bytes left end the walk; the magic is not
    range-checked while framing, so an entry with a magic outside 0..2 ends the walk when it
    is incomplete and fails when its records are read (UnsupportedVersionError) otherwise."""
    records, error = expected
    at = _positions.get(id(records))
    if error is None or at is None:
        return expected
    pos = 0
    for start, end in entry_spans(data):        # the entries before the error frame alike
        if end + 8 > at:
            break
        pos = end
    if at not in (pos + 8, pos + 16) or len(data) - pos < 12:
        return expected                 # an error inside an entry, not a framing one
    left = len(data) - pos
    size = struct.unpack_from(">i", data, pos + 8)[0]
    if size < 14:
        return (records, None) if left < 18 else expected
    if at != pos + 16:
        return expected
    magic = struct.unpack_from(">b", data, pos + 16)[0]
    if left < 18 or left - 12 < size:
        return records, None
    if magic > 2 and size < 49:
        return expected                 # too short for a v2 header: corrupt for both
    return records, api("kafkacodec.UnsupportedVersionError")


def _micros(ms: int) -> int | None:
    return ms * 1000 if -2**63 <= ms * 1000 < 2**63 else None


def in_micros(outcome: Outcome) -> Outcome:
    """Timestamps as the Arrow column holds them (microseconds; null when they do not fit)."""
    return [(r[0], _micros(r[1])) + r[2:] for r in outcome[0]], outcome[1]


def arrow(data: bytes) -> Outcome:
    import pyarrow as pa

    decoder = api("kafkacodec._arrow.ArrowDecoder")("t", 0, keep_control=True, validate_crc=False)
    rows: list[Rec] = []
    pos = 0
    try:
        while pos < len(data):
            rb, new = decoder.decode(data, pos)
            rb.validate(full=True)
            stamps = rb.column("timestamp").cast(pa.int64()).to_pylist()
            for r, ts in zip(rb.drop_columns(["timestamp"]).to_pylist(), stamps):
                rows.append((r["offset"], ts, r["timestampType"], r["key"], r["value"],
                             tuple((h["key"], h["value"]) for h in r["headers"] or ()),
                             r["isControl"]))
            if decoder.trailing_bytes or (new == pos and not rb.num_rows):
                break
            pos = new
    except KafkaCodecError as exc:
        return [], type(exc)
    return rows, None


def ring(data: bytes, isolation_level: int = 0) -> Outcome:
    """The ring's records; read_committed (1) with no aborted transaction listed drops
    nothing, but walks each control batch's first record ahead (its ABORT check)."""
    frame = fetch_frame(data)
    ring = api("kafkacodec.ResponseRingBuffer")(len(frame) + 64)
    if ring.feed(frame) != len(frame):
        raise AssertionError("the ring refused a frame that fits")
    out: list[Rec] = []
    try:
        for rec in ring.next_response().records(4, isolation_level):
            out.append((rec.offset, rec.timestamp, rec.timestamp_type, rec.key, rec.value,
                        tuple(rec.headers), False))
    except KafkaCodecError as exc:
        return out, type(exc)
    finally:
        ring.close()
    return out, None


def data_only(outcome: Outcome) -> Outcome:
    return [r for r in outcome[0] if not r[6]], outcome[1]


def expect_same(name: str, expected: Outcome, got: Outcome, data: bytes,
                records_on_error: bool = True) -> None:
    if not records_on_error and expected[1] is not None:
        expected, got = ([], expected[1]), ([], got[1])
    if got != expected:
        raise AssertionError(f"{name} differs from MemoryRecords.records():\n"
                             f"  MemoryRecords: {_show(expected, got)}\n  {name}: {_show(got, expected)}\n"
                             f"  input: {data.hex()}")


def _show(outcome: Outcome, other: Outcome) -> str:
    records, error = outcome
    i = next((i for i, (a, b) in enumerate(zip(records, other[0])) if a != b),
             min(len(records), len(other[0])))
    at = f"record {i}: {_short(records[i])}" if i < len(records) else "no record there"
    return f"{len(records)} records, error {error.__name__ if error else None}; {at}"


def _short(record: Rec) -> str:
    return repr(tuple(v[:40] if isinstance(v, bytes) else v for v in record))


# --- targets -------------------------------------------------------------------------------

def readers(data: bytes) -> None:
    readers_agree(hostile(data, rng_of(data)))


def readers_agree(data: bytes) -> None:
    """MemoryRecords records()/batches, FileRecords, ArrowDecoder and the ring agree (none of
    them checks checksums here: records() does not)."""
    expected = memory_records(data)
    expect_same("MemoryRecords batches", expected, memory_batches(data), data)
    flat, nested = file_records(data)
    in_file = file_rules(data, expected)
    expect_same("FileRecords.records()", in_file, flat, data)
    expect_same("FileRecords batches", in_file, nested, data)
    expect_same("ArrowDecoder", in_micros(expected), arrow(data), data, records_on_error=False)
    expect_same("ring records", data_only(expected), ring(data), data)
    expect_same("ring records (read_committed)", data_only(expected), ring(data, 1), data)


def conversion_of(data: bytes, to_magic: int) -> tuple[list[tuple], type | None]:
    """What down-converting a record set that reads cleanly gives, by Kafka's rules
    (RecordsUtil.downConvert, MemoryRecordsBuilder.appendWithOffset; spec downconvert.md):
    entries at or below `to_magic` are copied; control batches vanish below magic 2; zstd and
    unknown codecs cannot go below magic 2; a batch converted record by record (uncompressed)
    drops records below first offset 0, a compressed one keeps them all; every converted
    record needs an offset >= 0 above the previous one in its batch and a timestamp >= -1.
    Records: (offset, key, value, timestamp, timestamp type) as the new magic holds them (no
    headers; magic 0: no timestamp)."""
    from kafkacodec import CorruptRecordError, MemoryRecords, UnsupportedCompressionError

    out: list[tuple] = []
    for batch in MemoryRecords(data).batches():
        records = [_record(r) for r in batch]
        if to_magic < 2:
            if batch.magic >= 2 and batch.is_control:
                continue
            if int(batch.compression) >= 4:
                return out, UnsupportedCompressionError
        if batch.magic > to_magic:
            last = None
            kept = []
            for r in records:
                if int(batch.compression) == 0 and r[0] < 0:
                    continue
                if r[0] < 0 or r[1] < -1 or (last is not None and r[0] <= last):
                    return out, CorruptRecordError
                last = r[0]
                kept.append(r)
            records = kept
        # a copied entry reads as before (a magic-1 message inside a magic-0 wrapper keeps
        # the timestamp the reader gives it); a converted one holds what its magic holds
        copied = batch.magic <= to_magic
        out += [(o, k, v) + ((ts, tt) if to_magic == 1 or copied else (-1, -1))
                for o, ts, tt, k, v, _, control in records if not control]
    return out, None


def _project_read(data: Any) -> tuple[list[tuple], type | None]:
    records, error = _read(lambda: api("kafkacodec.MemoryRecords")(data).records())
    return [(o, k, v, ts, tt) for o, ts, tt, k, v, _, _ in records], error


def down_convert(data: bytes) -> None:
    """down_convert (eager) and LazyDownConvertRecords, decoded again, against what Kafka's
    conversion rules give for a source that reads cleanly."""
    rng = rng_of(data, "convert")
    down_convert_agrees(hostile(data, rng), rng)


def down_convert_agrees(data: bytes, rng: Any) -> None:
    """down_convert and LazyDownConvertRecords of `data` (a hostile record set; `rng` picks
    the lazy chunk sizes) against Kafka's conversion rules."""
    if memory_records(data)[1] is not None:
        return                # entries at or below the target are copied, errors and all
    convert = api("kafkacodec.down_convert")
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    for to_magic in (0, 1):
        expected, expected_error = conversion_of(data, to_magic)
        try:
            converted = bytes(convert(MemoryRecords(data), to_magic).records.buffer)
            got, got_error = _project_read(converted)
        except KafkaCodecError as exc:
            converted, got, got_error = None, [], type(exc)
        if (got, got_error) != ((expected, None) if expected_error is None
                                else ([], expected_error)):
            raise AssertionError(
                f"down_convert to {to_magic} gives {len(got)} records (error {got_error}), "
                f"Kafka's rules {len(expected)} (error {expected_error}); first difference: "
                f"{_first_difference(got, expected)}: {data.hex()}")
        sink = io.BytesIO()
        try:
            lazy = Lazy(MemoryRecords(data), to_magic,
                        chunk_size=rng.choice([0, 64, 300, 1 << 17]))
            while lazy.write_to(sink):
                pass
        except KafkaCodecError as exc:
            if type(exc) is not expected_error:
                raise AssertionError(f"lazy conversion to {to_magic} raised {exc!r}, eager "
                                     f"{expected_error}: {data.hex()}") from exc
            continue
        out = sink.getvalue()
        if len(out) != lazy.size_in_bytes:
            raise AssertionError(f"lazy wrote {len(out)} bytes, committed {lazy.size_in_bytes}")
        lazy_got, lazy_error = _project_read(out)
        if lazy_error is not None or lazy_got != expected[:len(lazy_got)]:
            raise AssertionError(f"lazy conversion to {to_magic} decodes to {len(lazy_got)} "
                                 f"records (error {lazy_error}), not a prefix of the "
                                 f"{len(expected)} expected: "
                                 f"{_first_difference(lazy_got, expected)}: {data.hex()}")
        if expected_error is None and len(converted) <= lazy.size_in_bytes and lazy_got != expected:
            raise AssertionError(f"lazy conversion to {to_magic} lost records it had room for: "
                                 f"{len(lazy_got)} of {len(expected)}: {data.hex()}")


def mirror_trim(data: bytes) -> None:
    trim_agrees(hostile(data, rng_of(data, "trim")))


def trim_agrees(data: bytes) -> None:
    """The mirror's trim_batch, for a fetch offset inside each entry: the new batch it writes
    reads as the entry's records at or after that offset (MemoryRecords), or it raises the
    error class MemoryRecords raises for the entry.  A batch passed through untouched, or one
    that ends before the offset (a fetch never returns it), has nothing to compare; nor has an
    entry whose codec id is none (5-7): a RawBytesBatchRecord names its codec, so the shallow
    path refuses it whatever its records."""
    MemoryRecords = api("kafkacodec.MemoryRecords")
    trim_batch = api("kafkacodec.mirror.trim_batch")
    for start, end in entry_spans(data):
        entry = data[start:end]
        if codec_of(entry) > 4:
            continue
        expected, error = memory_records(entry)
        try:
            last = next(iter(MemoryRecords(entry).batches())).last_offset
        except (KafkaCodecError, StopIteration):
            continue                    # not a batch the framing accepts alone
        offsets = sorted({r[0] for r in expected})
        first = struct.unpack_from(">q", entry)[0]
        for fetch in {*offsets[1:3], first + 1 if first < 2**63 - 1 else first}:
            try:
                trimmed = trim_batch(entry, fetch)
            except KafkaCodecError as exc:
                got: Outcome = ([], type(exc))
            else:
                if trimmed is None and last < fetch:
                    continue
                if trimmed is not None and bytes(trimmed.value) == entry:
                    continue
                got = ([], None) if trimmed is None else memory_records(bytes(trimmed.value))
            want = ([r for r in expected if r[0] >= fetch], error)
            if error is None and entry[16] >= 2 and _beyond_int32(want[0]):
                want = ([], api("kafkacodec.CorruptRecordError"))   # a new batch cannot hold them
            expect_same(f"trim_batch at offset {fetch}", want, got, entry,
                        records_on_error=False)


def _beyond_int32(records: list[Rec]) -> bool:
    """Whether a kept record's offset is more than an int32 delta from the first one kept
    (offsets that wrapped as Java longs; a v2 batch holds int32 deltas)."""
    return any(not -2**31 <= (r[0] - records[0][0] + 2**63) % 2**64 - 2**63 < 2**31
               for r in records)


def _first_difference(got: list, expected: list) -> str:
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return f"record {i}: {a!r} != {b!r}"
    return f"lengths {len(got)} != {len(expected)}"


def _kafka_python(data: bytes) -> list[tuple] | None:
    try:
        from kafka.record import MemoryRecords
    except ImportError:
        raise Missing("kafka-python") from None
    return _reference(MemoryRecords, data)


def _aiokafka(data: bytes) -> list[tuple] | None:
    try:
        from aiokafka.record.memory_records import _MemoryRecordsPy
    except ImportError:
        raise Missing("aiokafka") from None
    return _reference(_MemoryRecordsPy, data)


def _reference(MemoryRecords: Any, data: bytes) -> list[tuple] | None:
    """The data records as another implementation reads them; None when it refuses."""
    out = []
    try:
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            if getattr(batch, "is_control_batch", False):
                continue
            for r in batch:
                headers = tuple((k, None if v is None else bytes(v)) for k, v in r.headers) \
                    if batch.magic == 2 else ()
                out.append((r.offset, -1 if r.timestamp is None else r.timestamp,
                            -1 if r.timestamp_type is None else int(r.timestamp_type),
                            None if r.key is None else bytes(r.key),
                            None if r.value is None else bytes(r.value), headers))
    except Exception:          # their error (or their bug): no verdict from this reference
        return None
    return out


def references(data: bytes) -> None:
    """kafka-python and aiokafka, where both read the input and agree with each other, give
    our data records. (Alone, each reads past some damage Kafka's reader refuses: kafka-python
    reads a cut inner message of a wrapper; a verdict needs both.)"""
    data = hostile(data, rng_of(data, "references"))
    ours, error = memory_records(data)
    if error is not None:
        return
    ours_data = [r[:6] for r in ours if not r[6]]
    theirs = _kafka_python(data)
    if theirs is None or theirs != _aiokafka(data):
        return
    if theirs != ours_data:
        raise AssertionError(f"kafka-python and aiokafka read {theirs[:3]!r} ({len(theirs)} "
                             f"records), MemoryRecords {ours_data[:3]!r} ({len(ours_data)}): "
                             f"{data.hex()}")


def count_split(data: bytes) -> None:
    """logdir.count_split (batch headers where they answer) against read_split's rows of the
    same segment, in every mode, CRCs checked or not, control records kept or not: where the
    read finds no corrupt entry, the same count and the same problems reported.  Where it does,
    or where a batch's records have offsets outside its header's span, the count may answer
    from a header: a CRC-valid batch whose records do not hold what its header says is the one
    thing a header is trusted for (docs/spark-and-cli.md); the count must then only not crash
    or hang."""
    data = hostile(data, rng_of(data, "count_split"))
    plan = api("kafkacodec.logdir.plan")
    read_split = api("kafkacodec.logdir.read_split")
    count = api("kafkacodec.logdir.count_split")
    ReadOptions = api("kafkacodec.logdir.ReadOptions")
    with tempfile.TemporaryDirectory(prefix="kc-fuzz-count-") as root:
        os.mkdir(os.path.join(root, "t-0"))
        with open(os.path.join(root, "t-0", "00000000000000000000.log"), "wb") as f:
            f.write(data)
        for options in ({}, {"mode": "DROPMALFORMED", "keepControl": "true"},
                        {"mode": "PERMISSIVE", "validateCrc": "false"}):
            ro = ReadOptions.parse({"paths": [root], "failOnDataLoss": "false", **options})
            try:
                splits, _ = plan(None, ro, on_problem=lambda p: None)
            except KafkaCodecError:
                return
            common = dict(validate_crc=ro.validate_crc, keep_control=ro.keep_control, mode=ro.mode,
                          fail_on_data_loss=True)
            for split in splits:
                read_problems: list[Any] = []
                try:
                    rows = sum(rb.num_rows for rb in read_split(split, columns=["offset"], on_problem=read_problems.append,
                                                                **common))
                except KafkaCodecError:
                    try:
                        count(split, on_problem=lambda p: None, **common)
                    except KafkaCodecError:
                        pass
                    continue
                counted_problems: list[Any] = []
                # (damage to the framing, "partial", both read alike: compared)
                if any(p.kind == "corrupt" for p in read_problems) or _offsets_outside_span(data):
                    count(split, on_problem=counted_problems.append, **common)
                    continue
                try:
                    counted = count(split, on_problem=counted_problems.append, **common)
                except KafkaCodecError as exc:
                    raise AssertionError(f"count_split raised {exc!r} where read_split read {rows} rows "
                                         f"({options}): {data.hex()}") from None
                if counted != rows or [(p.kind, p.message) for p in counted_problems] != \
                        [(p.kind, p.message) for p in read_problems]:
                    raise AssertionError(f"count_split {counted} ({len(counted_problems)} problems), read_split "
                                         f"{rows} ({len(read_problems)} problems), {options}: {data.hex()}")


def _offsets_outside_span(data: bytes) -> bool:
    """Whether a v2 batch holds a record whose offset is outside [base offset, last offset]
    (a delta Kafka never writes, under a recomputed CRC): a header that says what its records
    do not."""
    try:
        for batch in api("kafkacodec.MemoryRecords")(data).batches():
            if batch.magic == 2 and any(not batch.base_offset <= r.offset <= batch.last_offset for r in batch):
                return True
    except KafkaCodecError:
        pass
    return False


def produce_request(data: bytes) -> None:
    """serve's C decoder of ProduceRequest bodies against the generic codec built from Kafka's
    message definitions: the same dict, or both refuse (the first byte picks the version)."""
    from kafkacodec.protocol import messages as m
    from kafkacodec.protocol._produce_server import decode_produce_request

    version, body = (data[0] % 12, data[1:]) if data else (0, b"")
    outcomes = []
    for decode in (decode_produce_request, m.PRODUCE_REQUEST.decode):
        try:
            outcomes.append(decode(body, version))
        except KafkaCodecError as error:
            outcomes.append(type(error))
    if outcomes[0] != outcomes[1]:
        raise AssertionError(f"Produce v{version}: ours {outcomes[0]!r:.200}, generic {outcomes[1]!r:.200}")


TARGETS: dict[str, Target] = {
    "readers": Target(readers, "records"),
    "produce_request": Target(produce_request, "produce_request"),
    "count_split": Target(count_split, "records"),
    "down_convert": Target(down_convert, "records"),
    "references": Target(references, "records"),
    "mirror_trim": Target(mirror_trim, "records"),
}
