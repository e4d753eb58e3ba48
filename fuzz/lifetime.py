"""Lifetime harness: what was handed out earlier, re-read after every later step.

Every record, batch, view, flyweight and memoryview an object hands out is tracked with a
snapshot of what it showed; after every step (next(), an error, release(), close(), a new
response fed into the space of a released one, a new pool block, another decompression or
conversion) each is read again. It must show its own bytes or raise BufferReleasedError (a
released memoryview: ValueError), never other bytes, never crash.

The input is a record set (`records` corpus, mutated, then `hostile()`: CRC-valid damage that
reaches the record parsers, so errors happen mid-iteration); the steps are drawn from a
generator seeded by the input, so a saved input replays its scenario.
"""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any, Callable

from _harness import Target, arrow_rows, api, fetch_frame, hostile, rng_of, split
from kafkacodec.errors import BufferReleasedError, KafkaCodecError


class Tracker:
    """Things handed out, each with the function that reads it and what it read first."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Callable[[], Any], Any]] = []

    def track(self, label: str, read: Callable[[], Any]) -> None:
        try:
            self.items.append((label, read, read()))
        except (BufferReleasedError, ValueError):
            pass                   # already released when handed out: nothing to compare

    def check(self, after: str) -> None:
        for label, read, first in self.items:
            try:
                now = read()
            except BufferReleasedError:
                continue
            except ValueError as exc:          # a memoryview released by its exporter
                if "released" not in str(exc):
                    raise
                continue
            if now != first:
                raise AssertionError(f"{label} shows other bytes after {after}: first "
                                     f"{_short(first)}, now {_short(now)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def _record_fields(rec: Any) -> Callable[[], Any]:
    return lambda: (rec.offset, rec.timestamp, int(rec.timestamp_type), rec.key, rec.value,
                    tuple(rec.headers), rec.is_control)


def _batch_fields(batch: Any) -> Callable[[], Any]:
    return lambda: (batch.magic, batch.base_offset, batch.last_offset, batch.size_in_bytes,
                    batch.crc, batch.position)


def _view(view: Any) -> Callable[[], bytes]:
    return lambda: bytes(view)


def _input(data: bytes, salt: str) -> tuple[random.Random, bytes]:
    rng = rng_of(data, salt)
    return rng, hostile(data, rng)


# --- records ---------------------------------------------------------------------------------

_DIR = tempfile.mkdtemp(prefix="kc-fuzz-life-")


def _walk(records: Any, rng: random.Random, tracker: Tracker, steps: int,
          close: Callable[[], None] | None) -> None:
    """Random steps over `records`: next() of a records() iterator, of a batches() iterator,
    of a batch's record iterator; keeping what they return; close() at a random step."""
    iterators: list[tuple[str, Any]] = []
    closed = False
    for step in range(steps):
        choice = rng.random()
        if close is not None and not closed and choice < 0.08:
            close()
            closed = True
            tracker.check("close()")
            continue
        if not iterators or choice < 0.25:
            kind = rng.choice(["records", "batches"])
            try:
                iterators.append((kind, iter(getattr(records, kind)())))
            except BufferReleasedError:
                if not closed:
                    raise
            continue
        at = rng.randrange(len(iterators))
        kind, iterator = iterators[at]
        try:
            item = next(iterator)
        except StopIteration:
            iterators.pop(at)
            tracker.check(f"the end of a {kind} iterator")
            continue
        except BufferReleasedError:
            if not closed:
                raise AssertionError("BufferReleasedError before close()") from None
            iterators.pop(at)
            continue
        except KafkaCodecError as exc:
            iterators.pop(at)
            tracker.check(f"{type(exc).__name__} from next()")
            continue
        if kind == "batches":
            tracker.track(f"batch at {item.position}", _batch_fields(item))
            raw = item.raw
            tracker.track(f"batch.raw at {item.position}", _view(raw))
            iterators.append(("batch", iter(item)))
        else:
            tracker.track(f"record {item.offset}", _record_fields(item))
        tracker.check(f"next() of a {kind} iterator")


def file_records(data: bytes) -> None:
    """FileRecords (whole file or a slice): records, batches, batch.raw, buffer, before and
    after close()."""
    rng, data = _input(data, "file")
    FileRecords = api("kafkacodec.FileRecords")
    path = os.path.join(_DIR, "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    records = FileRecords.open(path)
    if rng.random() < 0.3 and data:
        records = records.slice(rng.randrange(len(data)), rng.randrange(len(data) + 1))
    tracker = Tracker()
    tracker.track("records.buffer", _view(records.buffer))
    _walk(records, rng, tracker, rng.randint(5, 60), records.close)
    records.close()
    tracker.check("the last close()")


def memory_records(data: bytes) -> None:
    """MemoryRecords over a bytearray: its views pin the bytearray (a resize raises
    BufferError instead of moving the bytes under them)."""
    rng, data = _input(data, "memory")
    buf = bytearray(data)
    records = api("kafkacodec.MemoryRecords")(buf)
    tracker = Tracker()
    _walk(records, rng, tracker, rng.randint(5, 60), None)
    try:
        buf += b"\0" * 4096
    except BufferError:
        pass                  # exported: the views are pinned
    tracker.check("growing the bytearray")


# --- the ring and the pool ---------------------------------------------------------------------

def ring(data: bytes) -> None:
    """Responses fed into a small ring (with or without a pool), their payload views, record
    flyweights and their key/value views, across next(), errors, release(), new responses
    written where released ones were, and close()."""
    rng, data = _input(data, "ring")
    Ring = api("kafkacodec.ResponseRingBuffer")
    Pool = api("kafkacodec.SimpleMemoryPool")
    frames = [fetch_frame(data, correlation_id=i) for i in range(rng.randint(2, 6))]
    capacity = max(len(f) for f in frames) + 5 + rng.randrange(max(len(frames[0]), 1) * 2)
    pool = Pool(capacity * 4, capacity) if rng.random() < 0.5 else None
    ring = Ring(capacity, pool)
    tracker = Tracker()
    pending = list(frames)
    responses: list[Any] = []
    iterators: list[Any] = []
    flyweights: dict[int, tuple[Any, Any, bool]] = {}   # iterator -> (record, copy, ended)
    for step in range(rng.randint(10, 80)):
        choice = rng.random()
        if choice < 0.25 and pending:
            accepted = ring.feed(pending[0])
            pending[0] = pending[0][accepted:]
            if not pending[0]:
                pending.pop(0)
            after = "feed()"
        elif choice < 0.4:
            resp = ring.next_response()
            if resp is not None:
                responses.append(resp)
                tracker.track(f"payload of response {len(responses)}", _view(resp.payload))
            after = "next_response()"
        elif choice < 0.55 and responses:
            rng.choice(responses).release()
            after = "release()"
        elif choice < 0.85 and responses:
            if not iterators or rng.random() < 0.3:
                try:
                    iterators.append(rng.choice(responses).records(4))
                except BufferReleasedError:
                    pass
                continue
            iterator = rng.choice(iterators)
            try:
                rec = next(iterator)
            except (StopIteration, KafkaCodecError) as exc:   # BufferReleasedError included
                iterators.remove(iterator)
                if id(iterator) in flyweights:
                    flyweights[id(iterator)] = flyweights[id(iterator)][:2] + (True,)
                after = f"{type(exc).__name__} from next()"
            else:
                flyweights[id(iterator)] = (rec, rec.copy(), False)
                tracker.track(f"record {rec.offset}: key_view", _view_or_none(rec.key_view))
                tracker.track(f"record {rec.offset}: value_view", _view_or_none(rec.value_view))
                after = "next()"
        elif 0.85 <= choice < 0.88:
            break                       # close() mid-way
        else:
            continue
        tracker.check(after)
        _check_flyweights(flyweights, after)
    ring.close()
    tracker.check("close()")
    _check_flyweights(flyweights, "close()")


def _view_or_none(view: Any) -> Callable[[], Any]:
    return lambda: None if view is None else bytes(view)


def _check_flyweights(flyweights: dict[int, tuple[Any, Any, bool]], after: str) -> None:
    """A record flyweight shows the record its iterator's last next() returned, or is
    released; once its iterator ended (an error, the end), it is released."""
    for rec, first, ended in flyweights.values():
        try:
            now = rec.copy()
        except BufferReleasedError:
            continue
        if ended:
            raise AssertionError(f"a record flyweight still reads after {after} ended its "
                                 f"iterator: {_short(now)}")
        if now != first:
            raise AssertionError(f"a record flyweight shows other bytes after {after}: first "
                                 f"{_short(first)}, now {_short(now)}")


def pool(data: bytes) -> None:
    """SimpleMemoryPool blocks written, viewed, sliced, released and granted again: a released
    block's views and its exporter refuse access; a live block keeps its bytes."""
    rng = rng_of(data, "pool")
    Pool = api("kafkacodec.SimpleMemoryPool")
    MemoryPoolError = api("kafkacodec.MemoryPoolError")
    size = 1 << rng.randint(10, 16)
    pool = Pool(size, max(1, size // rng.randint(1, 8)), strict=rng.random() < 0.3)
    tracker = Tracker()
    live: list[tuple[memoryview, list[memoryview]]] = []
    for step in range(rng.randint(10, 100)):
        if rng.random() < 0.55 or not live:
            n = rng.randint(1, pool.max_single_allocation)
            block = pool.try_allocate(n, priority=rng.random() < 0.1)
            if block is None:
                continue
            block[:] = bytes([step % 256]) * n
            slices = [block[rng.randrange(n):]] if rng.random() < 0.4 else []
            live.append((block, slices))
            tracker.track(f"block {step}", _view(block))
            tracker.track(f"block {step}'s exporter", _view(block.obj))
            for piece in slices:
                tracker.track(f"a slice of block {step}", _view(piece))
            tracker.check("try_allocate()")
            continue
        block, slices = live.pop(rng.randrange(len(live)))
        if slices and rng.random() < 0.5:
            try:
                pool.release(block)
            except MemoryPoolError:
                pass          # a slice is alive: refused, the block stays granted
            else:
                raise AssertionError("release() accepted a block with a live slice")
        for piece in slices:
            piece.release()
        pool.release(block)
        tracker.check("release()")
    for block, slices in live:
        for piece in slices:
            piece.release()
        pool.release(block)
    tracker.check("releasing everything")
    if pool.available_memory != pool.size:
        raise AssertionError(f"{pool.available_memory} bytes available after every block "
                             f"went back, of {pool.size}")


# --- decompression and conversion outputs -----------------------------------------------------

def decompressor(data: bytes) -> None:
    """Decompressor views across later calls (successful or failing) and the decompressor's
    end: each keeps the bytes it was returned with."""
    param, payload = split(data)
    rng = rng_of(data, "decompressor")
    Decompressor = api("kafkacodec._compression.Decompressor")
    compress = api("kafkacodec._compression.compress")
    decompressor = Decompressor(1 << 20)
    tracker = Tracker()
    for step in range(rng.randint(2, 12)):
        codec = rng.randint(1, 4)
        magic = 2 if codec == 4 else rng.randint(0, 2)
        plain = payload[rng.randrange(len(payload) + 1):] * rng.randint(1, 3)
        packed = compress(codec, magic, plain)
        if rng.random() < 0.3 and packed:            # damaged: an error after earlier views
            cut = bytearray(packed)
            cut[rng.randrange(len(cut))] ^= 0xFF
            packed = bytes(cut)
        try:
            view = decompressor.decompress(codec, magic, packed)
        except KafkaCodecError:
            tracker.check("a failing decompress()")
            continue
        if rng.random() < 0.7:
            tracker.track(f"output {step}", _view(view))
        else:
            view.release()
        tracker.check("decompress()")
    del decompressor
    tracker.check("the decompressor's end")


def converters(data: bytes) -> None:
    """down_convert results, DownConverter.take() buffers and LazyDownConvertRecords chunks
    across later conversions."""
    rng, data = _input(data, "convert")
    DownConverter = api("kafkacodec._convert.DownConverter")
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    tracker = Tracker()
    converter = DownConverter(rng.randint(0, 1))
    for step in range(rng.randint(1, 6)):
        start = rng.randrange(len(data) + 1)
        try:
            converter.convert(data[start:], rng.choice([-1, 100, 4000]))
        except KafkaCodecError:
            tracker.check("a failing convert()")
            continue
        out, _, _ = converter.take(rng.random() < 0.5)
        tracker.track(f"take() {step}", lambda out=out: bytes(memoryview(out)))
        tracker.check("convert() + take()")
    try:
        lazy = Lazy(MemoryRecords(data), rng.randint(0, 1), chunk_size=rng.choice([0, 100, 4000]))
        for i, chunk in enumerate(lazy):
            tracker.track(f"lazy chunk {i}", _view(chunk.records.buffer))
            tracker.check("the next lazy chunk")
    except KafkaCodecError:
        tracker.check("a failing lazy chunk")


def arrow(data: bytes) -> None:
    """ArrowDecoder outputs across later decode() calls (failing ones too) and the end of the
    buffer they were decoded from (a FileRecords closed)."""
    rng, data = _input(data, "arrow")
    Decoder = api("kafkacodec._arrow.ArrowDecoder")
    FileRecords = api("kafkacodec.FileRecords")
    path = os.path.join(_DIR, "00000000000000000001.log")
    with open(path, "wb") as f:
        f.write(data)
    records = FileRecords.open(path)
    decoder = Decoder("t", 0, validate_crc=rng.random() < 0.5, keep_control=rng.random() < 0.5,
                      max_rows=rng.choice([1, 3, 1000]))
    tracker = Tracker()
    start = 0
    for step in range(rng.randint(1, 10)):
        try:
            batch, start = decoder.decode(records.buffer, start)
        except BufferReleasedError:
            break
        except KafkaCodecError:
            tracker.check("a failing decode()")
            start = rng.randrange(len(data) + 1)
            continue
        tracker.track(f"output {step}", lambda batch=batch: arrow_rows(batch))
        tracker.check("decode()")
        if rng.random() < 0.2:
            records.close()
            tracker.check("closing the FileRecords decoded from")
        if not batch.num_rows and rng.random() < 0.5:
            break
    records.close()
    tracker.check("close()")


def mirror(data: bytes) -> None:
    """shallow_records values (zero-copy views of the input) and RawBatchesBuilder.records()
    across later appends, clear() and build()."""
    rng, data = _input(data, "mirror")
    shallow = api("kafkacodec.shallow_records")
    Builder = api("kafkacodec.RawBatchesBuilder")
    builder = Builder(rng.choice([100, 1 << 16, 1 << 22]))
    tracker = Tracker()
    try:
        for raw in shallow(data, rng.choice([None, 0, 3, 100])):
            tracker.track(f"raw batch at offset {raw.offset}", _view(raw.value))
            builder.append(raw)
            tracker.check("append()")
            if rng.random() < 0.3:
                view = builder.records()
                tracker.track("builder.records()", _view(view))
            if rng.random() < 0.1:
                try:
                    builder.clear()
                except BufferError:
                    pass          # a view of the records is alive
                tracker.check("clear()")
    except KafkaCodecError:
        tracker.check("an error of shallow_records()")
    builder.build()
    tracker.check("build()")


TARGETS: dict[str, Target] = {
    "file_records": Target(file_records, "records"),
    "memory_records": Target(memory_records, "records"),
    "ring": Target(ring, "records"),
    "pool": Target(pool, "records"),
    "decompressor": Target(decompressor, "records+param"),
    "converters": Target(converters, "records"),
    "arrow": Target(arrow, "records"),
    "mirror": Target(mirror, "records"),
}
