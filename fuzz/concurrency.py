"""Concurrency harness: each stateful public object shared by threads doing random operations.

Every call either works, giving what the same call gives in a single-threaded run, or raises
ConcurrentUseError ("X is in use by another thread: ..."); never wrong data, never a crash,
never a hang. Objects whose docstring says they are safe to share (the scenarios run with
`shareable=True`) must never raise it. Threads start together (a barrier) with a tiny switch interval, so calls overlap
where the GIL is released (decompression, decode and conversion loops, socket waits).

`COVERAGE` names every public class of kafkacodec (kafkacodec.__all__ and the public names of
every submodule, compiled ones included) with the scenario that shares it, or why sharing it
needs none (a value object, an error class...): a new public class that is not listed fails
the harness (`uncovered()`, checked by every target and by tests/test_fuzz_harnesses.py).

The input is a record set (the `records` corpus), damaged CRC-validly by `hostile()`; the
operations are drawn from a generator seeded by it.
"""

from __future__ import annotations

import inspect
import io
import os
import random
import socket
import struct
import sys
import tempfile
import threading
from typing import Any, Callable

from _harness import Target, arrow_rows, api, fetch_frame, hostile, rng_of
from kafkacodec.errors import (BufferReleasedError, ConcurrentUseError, KafkaCodecError)

THREADS = 4


# --- running threads ---------------------------------------------------------------------------

def race(threads: int, work: Callable[[int], Any]) -> list[tuple[Any, BaseException | None]]:
    """Run work(i) in `threads` threads released together; (result, exception) per thread."""
    barrier = threading.Barrier(threads)
    results: list[tuple[Any, BaseException | None]] = [(None, None)] * threads

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = (work(i), None)
        except BaseException as exc:      # judged by the caller
            results[i] = (None, exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return results


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except KafkaCodecError as exc:
        return "error", type(exc)


def busy(got: tuple[str, Any]) -> bool:
    return got == ("error", ConcurrentUseError)


def judge(name: str, got: tuple[str, Any], expected: tuple[str, Any], shareable: bool) -> None:
    if got == expected:
        return
    if busy(got) and not shareable:
        return
    if busy(got):
        raise AssertionError(f"{name}: ConcurrentUseError from an object documented as safe "
                             f"to share")
    raise AssertionError(f"{name}: shared by threads gave {_short(got)}, alone "
                         f"{_short(expected)}")


def reraise(results: list[tuple[Any, BaseException | None]]) -> list[Any]:
    for _, exc in results:
        if exc is not None:
            raise exc
    return [r for r, _ in results]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


def ops_race(name: str, make: Callable[[], Any], ops: dict[str, Callable[[Any], Any]],
             rng: random.Random, shareable: bool, calls: int = 6) -> Any:
    """Each op alone on a fresh object, then random ops on one shared object in threads: each
    call gives its single-threaded outcome (or ConcurrentUseError where allowed)."""
    expected = {label: outcome(lambda op=op: op(make())) for label, op in ops.items()}
    shared = make()
    plans = [[rng.choice(list(ops)) for _ in range(calls)] for _ in range(THREADS)]

    def work(i: int) -> None:
        for label in plans[i]:
            judge(f"{name}.{label}", outcome(lambda: ops[label](shared)), expected[label],
                  shareable)

    reraise(race(THREADS, work))
    return shared


# --- what the records readers give ----------------------------------------------------------

def rec(r: Any) -> tuple:
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers),
            r.is_control)


def all_records(records: Any) -> list[tuple]:
    return [rec(r) for r in records.records()]


def batch_walk(records: Any) -> list[tuple]:
    return [(b.position, b.base_offset, b.is_valid(), tuple(rec(r) for r in b))
            for b in records.batches()]


RECORDS_OPS: dict[str, Callable[[Any], Any]] = {
    "records": all_records,
    "batches": batch_walk,
    "validate": lambda r: r.validate(),
    "index": lambda r: r.index().tolist(),
    "valid_bytes": lambda r: r.valid_bytes,
    "partial_tail_bytes": lambda r: r.partial_tail_bytes,
    "buffer": lambda r: bytes(r.buffer),
}

_DIR = tempfile.mkdtemp(prefix="kc-fuzz-threads-")


def _file(data: bytes, name: str = "00000000000000000000.log") -> str:
    path = os.path.join(_DIR, f"{threading.get_ident()}-{name}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def _input(data: bytes, salt: str) -> tuple[random.Random, bytes]:
    rng = rng_of(data, salt)
    return rng, hostile(data, rng)


# --- scenarios ---------------------------------------------------------------------------------

def records(data: bytes) -> None:
    """MemoryRecords and FileRecords (documented shareable): every walk from every thread at
    once; one FileRecords closed by a thread meanwhile (then BufferReleasedError, after
    records that were right)."""
    rng, data = _input(data, "records")
    MemoryRecords, FileRecords = api("kafkacodec.MemoryRecords"), api("kafkacodec.FileRecords")
    ops_race("MemoryRecords", lambda: MemoryRecords(data), RECORDS_OPS, rng, shareable=True)
    path = _file(data)
    ops_race("FileRecords", lambda: FileRecords.open(path), RECORDS_OPS, rng, shareable=True)
    expected = _partial(lambda: FileRecords.open(path).records(), rec)
    records_alone, error_alone = (expected[1], None) if expected[0] == "ok" else expected[1]
    shared = FileRecords.open(path)

    def work(i: int) -> None:
        if i == 0:
            shared.close()
            return
        got: list[tuple] = []
        try:
            for r in shared.records():
                got.append(rec(r))
        except BufferReleasedError:
            if got != records_alone[:len(got)]:
                raise AssertionError("FileRecords closed meanwhile: the records before "
                                     "BufferReleasedError differ") from None
            return
        except KafkaCodecError as exc:
            if (got, type(exc)) != (records_alone, error_alone):
                raise AssertionError(f"FileRecords.records() while closed: {type(exc)} after "
                                     f"{len(got)} records, alone {error_alone} after "
                                     f"{len(records_alone)}") from None
            return
        if (got, None) != (records_alone, error_alone):
            raise AssertionError("FileRecords.records() while closed: other records")

    reraise(race(THREADS, work))


def _shared_iterator(name: str, make: Callable[[], Any], expected: tuple[str, Any],
                     shareable: bool, copy: Callable[[Any], Any] = lambda x: x,
                     flyweight: bool = False) -> None:
    """One iterator, next() from every thread: the items come out once each, in order, and
    the iteration ends as it ends alone (the same error after the same items). A `flyweight`
    item is refilled by the next next() in any thread: a copy taken after that shows the
    later record (of the same response), so only how many came out and what each is count."""
    iterator = make()

    def work(i: int) -> list[tuple[int, Any]]:
        got = []
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                return got
            except ConcurrentUseError:
                if shareable:
                    raise AssertionError(f"{name}: ConcurrentUseError from an iterator "
                                         f"documented as safe to share") from None
                continue
            except KafkaCodecError as exc:
                got.append((-1, type(exc)))
                continue            # an error ends the iteration: the next call stops
            try:
                got.append((0, copy(item)))
            except BufferReleasedError:
                got.append((1, None))     # a flyweight refilled meanwhile (see ring_records)

    results = reraise(race(THREADS, work))
    items = [x for r in results for k, x in r if k == 0]
    refilled = sum(1 for r in results for k, _ in r if k == 1)
    errors = [x for r in results for k, x in r if k == -1]
    status, alone = expected
    want_items = alone if status == "ok" else alone[0]
    want_error = None if status == "ok" else alone[1]
    if errors != ([want_error] if want_error else []):
        raise AssertionError(f"{name}: shared, the iteration raised {errors}, alone "
                             f"{want_error}")
    if len(items) + refilled != len(want_items) or any(x not in want_items for x in items):
        raise AssertionError(f"{name}: shared, {len(items) + refilled} items came out "
                             f"({_short(items[:3])}), alone {len(want_items)}")
    if not flyweight and sorted(map(repr, items)) != sorted(map(repr, want_items)):
        raise AssertionError(f"{name}: shared, other items came out than alone")


def _partial(iterate: Callable[[], Any], item: Callable[[Any], Any]) -> tuple[str, Any]:
    got: list[Any] = []
    try:
        for x in iterate():
            got.append(item(x))
    except KafkaCodecError as exc:
        return "error", (got, type(exc))
    return "ok", got


def records_iterator(data: bytes) -> None:
    """One records() iterator shared (documented: one call at a time, ConcurrentUseError)."""
    _, data = _input(data, "iterator")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    expected = _partial(lambda: MemoryRecords(data).records(), rec)
    _shared_iterator("records() iterator", lambda: MemoryRecords(data).records(), expected,
                     shareable=False, copy=rec)
    expected_batches = _partial(lambda: MemoryRecords(data).batches(), lambda b: b.position)
    _shared_iterator("batches() iterator", lambda: MemoryRecords(data).batches(),
                     expected_batches, shareable=True, copy=lambda b: b.position)


def record_batch(data: bytes) -> None:
    """One RecordBatch (documented shareable): its records, checks and bytes from every
    thread."""
    rng, data = _input(data, "batch")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    try:
        positions = [b.position for b in MemoryRecords(data).batches()]
    except KafkaCodecError:
        return
    for position in positions[:3]:
        def make(position: int = position) -> Any:
            return next(b for b in MemoryRecords(data).batches() if b.position == position)
        ops_race("RecordBatch", make, {
            "records": lambda b: [rec(r) for r in b],
            "is_valid": lambda b: b.is_valid(),
            "ensure_valid": lambda b: b.ensure_valid(),
            "raw": lambda b: bytes(b.raw),
            "fields": lambda b: (b.base_offset, b.last_offset, b.record_count, b.max_timestamp),
        }, rng, shareable=True)


def arrow_decoder(data: bytes) -> None:
    """One ArrowDecoder (one per thread: ConcurrentUseError)."""
    rng, data = _input(data, "arrow")
    Decoder = api("kafkacodec._arrow.ArrowDecoder")
    options = {"validate_crc": rng.random() < 0.5, "keep_control": rng.random() < 0.5,
               "max_rows": rng.choice([2, 100, 65536])}
    starts = sorted({0, *(rng.randrange(len(data) + 1) for _ in range(2))})
    ops = {f"decode@{s}": (lambda d, s=s: arrow_rows(d.decode(data, s)[0])) for s in starts}
    ops_race("ArrowDecoder", lambda: Decoder("t", 0, **options), ops, rng, shareable=False)


def decompressor(data: bytes) -> None:
    """One Decompressor (one per thread: ConcurrentUseError); views keep their bytes."""
    rng = rng_of(data, "decompressor")
    compress = api("kafkacodec._compression.compress")
    Decompressor = api("kafkacodec._compression.Decompressor")
    payloads = {}
    for k in range(3):
        codec = rng.randint(1, 4)
        magic = 2 if codec == 4 else rng.randint(0, 2)
        packed = compress(codec, magic, data[rng.randrange(len(data) + 1):] * rng.randint(1, 40))
        payloads[f"{codec}/{magic}/{k}"] = (codec, magic, packed)
    views: list[tuple[memoryview, bytes]] = []

    def op(key: str) -> Callable[[Any], Any]:
        codec, magic, packed = payloads[key]

        def call(d: Any) -> bytes:
            view = d.decompress(codec, magic, packed)
            out = bytes(view)
            views.append((view, out))
            return out
        return call

    ops_race("Decompressor", Decompressor, {k: op(k) for k in payloads}, rng, shareable=False)
    for view, out in views:
        if bytes(view) != out:
            raise AssertionError("Decompressor: a view changed after other calls")


def _decoded(buffers: list[bytes]) -> list[tuple]:
    MemoryRecords = api("kafkacodec.MemoryRecords")
    return sorted((repr(rec(r)) for b in buffers for r in MemoryRecords(b).records()))


def _record_sets(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    """n record sets that read cleanly (distinct offsets), from the input when it does."""
    Builder = api("kafkacodec.MemoryRecordsBuilder")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    out = []
    for i in range(n):
        try:
            all_records(MemoryRecords(data))
            usable = data and rng.random() < 0.5
        except KafkaCodecError:
            usable = False
        if usable:
            out.append(data)
            continue
        builder = Builder(magic=rng.randint(1, 2), compression=rng.choice(["none", "gzip", "lz4"]),
                          base_offset=1000 * i)
        for j in range(rng.randint(1, 30)):
            builder.append(j, b"k%d" % j, data[j:j + 50] * rng.randint(1, 20))
        out.append(builder.build())
    return out


def down_converter(data: bytes) -> None:
    """One DownConverter: convert() + take() from every thread; what comes out is the
    conversion of the record sets whose convert() worked, each whole."""
    rng = rng_of(data, "converter")
    DownConverter = api("kafkacodec._convert.DownConverter")
    down_convert = api("kafkacodec.down_convert")
    to_magic = rng.randint(0, 1)
    sets = _record_sets(data, rng, THREADS)
    alone = [outcome(lambda s=s: bytes(down_convert(s, to_magic).records.buffer)) for s in sets]
    shared = DownConverter(to_magic)
    taken: list[bytes] = []

    def work(i: int) -> list[int]:
        done = []
        for _ in range(3):
            got = outcome(lambda: shared.convert(sets[i]))
            if busy(got):
                continue
            if got[0] == "error":
                if alone[i] != got:
                    raise AssertionError(f"DownConverter.convert: {got} shared, {alone[i]} alone")
                continue
            done.append(i)
            if rng.random() < 0.5:
                got = outcome(lambda: bytes(memoryview(shared.take()[0])))
                if not busy(got):
                    taken.append(got[1])
        return done

    converted = [i for r in reraise(race(THREADS, work)) for i in r]
    taken.append(bytes(memoryview(shared.take()[0])))
    expected = [alone[i][1] for i in converted if alone[i][0] == "ok"]
    if _decoded(taken) != _decoded(expected):
        raise AssertionError("DownConverter shared by threads: the output is not the "
                             "conversion of the record sets converted")


def lazy(data: bytes) -> None:
    """One LazyDownConvertRecords: write_to() and iteration from every thread. write_to()
    delivers the committed bytes once, in order (one sink; or ConcurrentUseError)."""
    rng, data = _input(data, "lazy")
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    to_magic, chunk = rng.randint(0, 1), rng.choice([0, 64, 1000])

    def fresh() -> Any:
        return Lazy(MemoryRecords(data), to_magic, chunk_size=chunk)

    try:
        alone_sink = io.BytesIO()
        lazy_alone = fresh()
        while lazy_alone.write_to(alone_sink):
            pass
        chunks_alone = [bytes(c.records.buffer) for c in fresh()]
    except KafkaCodecError:
        return
    shared = fresh()
    sink = io.BytesIO()
    lock = threading.Lock()

    class Sink:
        def write(self, b: Any) -> int:
            with lock:
                return sink.write(b)

    def work(i: int) -> None:
        for _ in range(50):
            if i % 2:
                got = outcome(lambda: shared.write_to(Sink()))
            else:
                got = outcome(lambda: [bytes(c.records.buffer) for c in shared])
                if got[0] == "ok" and got[1] != chunks_alone:
                    raise AssertionError("LazyDownConvertRecords shared: its chunks differ")
            if got[0] == "error" and not busy(got):
                raise AssertionError(f"LazyDownConvertRecords shared: {got}")
            if shared.completed:
                return

    reraise(race(THREADS, work))
    while shared.write_to(sink):
        pass
    if sink.getvalue() != alone_sink.getvalue():
        raise AssertionError(f"LazyDownConvertRecords shared by threads wrote "
                             f"{len(sink.getvalue())} bytes unlike alone "
                             f"({len(alone_sink.getvalue())})")


def builder(data: bytes) -> None:
    """One MemoryRecordsBuilder (one per thread: ConcurrentUseError): every append that worked
    is in the built batches exactly once, at consecutive offsets."""
    rng = rng_of(data, "builder")
    Builder = api("kafkacodec.MemoryRecordsBuilder")
    MemoryRecords = api("kafkacodec.MemoryRecords")
    compression = rng.choice(["none", "gzip", "zstd", "lz4", "snappy"])
    shared = Builder(compression=compression, base_offset=5)
    built: list[bytes] = []

    def work(i: int) -> list[bytes]:
        appended = []
        for j in range(20):
            value = b"%d-%d-" % (i, j) + data[:rng.randint(0, 200)]
            call = rng.random()
            if call < 0.7:
                got = outcome(lambda: shared.append(j, b"k%d" % i, value, [("t", b"%d" % i)]))
                values = [value]
            elif call < 0.9:
                values = [value, value + b"+"]
                got = outcome(lambda: shared.append_many([j, j], [None, b"x"], values,
                                                         [[("t", b"%d" % i)], []]))
            else:
                got = outcome(shared.build)
                if got[0] == "ok":
                    built.append(got[1])
                values = []
            if got[0] == "ok":
                appended += values
            elif not busy(got):
                raise AssertionError(f"MemoryRecordsBuilder shared: {got}")
        return appended

    appended = sorted(v for r in reraise(race(THREADS, work)) for v in r)
    built.append(shared.build())
    records = [r for b in built for r in MemoryRecords(b).records()]
    if sorted(r.value for r in records) != appended:
        raise AssertionError(f"MemoryRecordsBuilder shared: {len(appended)} appends worked, "
                             f"the batches hold {len(records)} other records")
    offsets = sorted(r.offset for r in records)
    if offsets != list(range(5, 5 + len(offsets))):
        raise AssertionError(f"MemoryRecordsBuilder shared: offsets {offsets[:10]}...")
    for b in built:
        for batch in MemoryRecords(b).batches():
            batch.ensure_valid()


def raw_batches_builder(data: bytes) -> None:
    """One RawBatchesBuilder: appends from every thread (they hold the GIL: all work); the
    built set holds each appended batch once, whole."""
    rng, data = _input(data, "raw")
    shallow = api("kafkacodec.shallow_records")
    Builder = api("kafkacodec.RawBatchesBuilder")
    try:
        raws = [bytes(r.value) for r in shallow(data)]
    except KafkaCodecError:
        return
    shared = Builder(1 << 24)

    def work(i: int) -> list[bytes]:
        done = []
        for raw in raws[i::THREADS] * 2:
            got = outcome(lambda: shared.append(raw))
            if got == ("ok", True):
                done.append(raw)
            elif got[0] != "ok" and not busy(got):
                raise AssertionError(f"RawBatchesBuilder shared: {got}")
        return done

    appended = sorted(r for done in reraise(race(THREADS, work)) for r in done)
    out = shared.build()
    pieces = sorted(bytes(r.value) for r in shallow(out))
    if pieces != appended:
        raise AssertionError("RawBatchesBuilder shared: the built set is not the batches "
                             "appended")


def write_buffer(data: bytes) -> None:
    """One WriteBuffer (documented: every operation holds the GIL): writes from every thread
    land whole; a live view makes write() refuse (BufferError) instead of moving the bytes."""
    rng = rng_of(data, "writer")
    WriteBuffer = api("kafkacodec._writer.WriteBuffer")
    shared = WriteBuffer(rng.choice([0, 16, 4096]))
    pieces = [bytes([65 + i]) * rng.randint(1, 300) for i in range(THREADS)]
    views: list[tuple[memoryview, bytes]] = []

    def work(i: int) -> int:
        n = 0
        for _ in range(30):
            if rng.random() < 0.1:
                view = memoryview(shared)
                views.append((view, bytes(view)))
            try:
                shared.write(pieces[i])
                n += 1
            except BufferError:
                pass           # a view is alive
            if rng.random() < 0.2 and views:
                try:
                    view, first = views.pop()
                except IndexError:
                    continue
                if bytes(view) != first:
                    raise AssertionError("WriteBuffer: a view changed under a write")
                view.release()
        return n

    counts = reraise(race(THREADS, work))
    for view, first in views:
        if bytes(view) != first:
            raise AssertionError("WriteBuffer: a view changed under a write")
        view.release()
    value = shared.getvalue()
    pos = 0
    seen = [0] * THREADS
    while pos < len(value):
        i = value[pos] - 65
        if not 0 <= i < THREADS or value[pos:pos + len(pieces[i])] != pieces[i]:
            raise AssertionError(f"WriteBuffer shared: a write was split or lost at {pos}")
        seen[i] += 1
        pos += len(pieces[i])
    if seen != counts:
        raise AssertionError(f"WriteBuffer shared: writes {counts}, found {seen}")


def pool(data: bytes) -> None:
    """One SimpleMemoryPool (documented shareable): grants, writes, checks and releases from
    every thread; each block keeps its owner's bytes; every byte comes back."""
    rng = rng_of(data, "pool")
    Pool = api("kafkacodec.SimpleMemoryPool")
    size = 1 << rng.randint(12, 18)
    shared = Pool(size, max(64, size // rng.randint(1, 16)), strict=rng.random() < 0.3,
                  arena_bytes=rng.choice([None, 0, size // 2]))
    none = api("kafkacodec.MemoryPool").NONE

    def work(i: int) -> None:
        held: list[tuple[Any, Any, int]] = []
        local = random.Random(rng.random() + i)
        for step in range(60):
            target = shared if local.random() < 0.9 else none
            if local.random() < 0.6 or not held:
                n = local.randint(1, shared.max_single_allocation)
                try:
                    block = target.try_allocate(n, local.random() < 0.1)
                except ConcurrentUseError:
                    raise AssertionError("SimpleMemoryPool raised ConcurrentUseError "
                                         "(documented safe to share)") from None
                if block is not None:
                    fill = (i * 64 + step) % 256
                    block[:] = bytes([fill]) * n
                    held.append((target, block, fill))
            else:
                owner, block, fill = held.pop(local.randrange(len(held)))
                if block.tobytes() != bytes([fill]) * len(block):
                    raise AssertionError("SimpleMemoryPool: a block changed under its owner")
                owner.release(block)
        for owner, block, fill in held:
            if block.tobytes() != bytes([fill]) * len(block):
                raise AssertionError("SimpleMemoryPool: a block changed under its owner")
            owner.release(block)

    reraise(race(THREADS, work))
    if shared.available_memory != shared.size or shared.outstanding:
        raise AssertionError(f"SimpleMemoryPool shared: {shared.available_memory} of "
                             f"{shared.size} bytes back, {shared.outstanding} outstanding")


def ring(data: bytes) -> None:
    """One ResponseRingBuffer: a thread feeding responses, threads taking, reading and
    releasing them: each response comes out once with its own payload and records."""
    rng, data = _input(data, "ring")
    Ring = api("kafkacodec.ResponseRingBuffer")
    Pool = api("kafkacodec.SimpleMemoryPool")
    frames = {i: fetch_frame(data, correlation_id=i) for i in range(1, rng.randint(3, 12))}
    capacity = max(len(f) for f in frames.values()) * rng.randint(1, 3) + 5
    pool = Pool(capacity * 2, capacity) if rng.random() < 0.5 else None
    shared = Ring(capacity, pool)
    expected_records = _partial(lambda: _ring_records(frames[1]), lambda x: x)
    taken: list[int] = []
    fed = threading.Event()

    def work(i: int) -> None:
        if i == 0:                          # the feeder
            stream = b"".join(frames.values())
            pos = 0
            try:
                while pos < len(stream):
                    got = outcome(lambda: shared.feed(stream[pos:pos + rng.randint(1, 4096)]))
                    if got[0] == "ok":
                        pos += got[1]
                    elif not busy(got):
                        raise AssertionError(f"ResponseRingBuffer.feed shared: {got}")
            finally:
                fed.set()
            return
        while True:
            done = fed.is_set()             # everything was in the ring before this look
            got = outcome(shared.next_response)
            if busy(got):
                continue
            if got == ("ok", None):
                if done:
                    return
                continue
            if got[0] != "ok":
                raise AssertionError(f"ResponseRingBuffer.next_response shared: {got}")
            resp = got[1]
            cid = resp.correlation_id
            taken.append(cid)
            if resp.copy() != frames[cid][4:]:
                raise AssertionError(f"response {cid}: other bytes than were fed")
            records = _partial(lambda: resp.records(4), lambda r: r.copy()[2:])
            if records != expected_records:
                raise AssertionError(f"response {cid}'s records: {_short(records)} shared, "
                                     f"{_short(expected_records)} alone")
            resp.release()

    reraise(race(THREADS, work))
    shared.close()
    if sorted(taken) != sorted(frames):
        raise AssertionError(f"ResponseRingBuffer shared: responses {sorted(taken)} came out, "
                             f"{sorted(frames)} went in")


def _ring_records(frame: bytes) -> Any:
    Ring = api("kafkacodec.ResponseRingBuffer")
    ring = Ring(len(frame) + 8)
    ring.feed(frame)
    for r in ring.next_response().records(4):
        yield r.copy()[2:]


def ring_records(data: bytes) -> None:
    """One FetchRecords iterator shared (one call at a time: ConcurrentUseError). Its record
    is a flyweight refilled by every next() (from any thread): a copy shows some record of
    the response or raises BufferReleasedError, never other bytes."""
    _, data = _input(data, "ring records")
    Ring = api("kafkacodec.ResponseRingBuffer")
    frame = fetch_frame(data)
    ring = Ring(len(frame) + 8)
    ring.feed(frame)
    response = ring.next_response()
    expected = _partial(lambda: _ring_records(frame), lambda x: x)
    _shared_iterator("FetchRecords", lambda: response.records(4), expected, shareable=False,
                     copy=lambda r: r.copy()[2:], flyweight=True)
    ring.close()


def fetch_response(data: bytes) -> None:
    """A decoded FetchResponse (its topics, partitions and aborted transactions are made on
    access) read from every thread: the same objects' contents as alone."""
    rng, data = _input(data, "fetch")
    decode = api("kafkacodec.protocol.decode_fetch_response")
    frame = fetch_frame(data)[4:]

    def walk(response: Any) -> list:
        return [(t.topic, [(p.partition_index, p.high_watermark, p.aborted_transactions,
                            None if p.records is None else bytes(p.records))
                           for p in t.partitions]) for t in response.responses]

    ops_race("FetchResponse", lambda: decode(frame, 4), {"walk": walk, "repr": repr}, rng,
             shareable=True)


def produce_metadata_responses(data: bytes) -> None:
    """A decoded ProduceResponse and MetadataResponse (topics, partitions and brokers made on
    access) read from every thread: the same objects' contents as alone."""
    rng, _ = _input(data, "produce_metadata")
    topics = [(f"t{i}", [rng.randrange(1 << 31) for _ in range(rng.randrange(4))])
              for i in range(rng.randrange(1, 4))]
    produce = struct.pack(">i", len(topics)) + b"".join(
        struct.pack(">h", len(name)) + name.encode() + struct.pack(">i", len(parts))
        + b"".join(struct.pack(">ihqq", p, 0, p, -1) for p in parts) for name, parts in topics)
    metadata = struct.pack(">ii", 1, 1) + struct.pack(">h", 1) + b"h" + struct.pack(">ii", 9092,
                                                                                 len(topics))
    metadata += b"".join(
        struct.pack(">hh", 0, len(name)) + name.encode() + struct.pack(">i", len(parts))
        + b"".join(struct.pack(">hiiii", 0, p, 1, 1, 1) + struct.pack(">ii", 1, 1) for p in parts)
        for name, parts in topics)
    decode_produce = api("kafkacodec.protocol.decode_produce_response")
    decode_metadata = api("kafkacodec.protocol.decode_metadata_response")

    def walk_produce(response: Any) -> list:
        return [(t.name, list(t.partition_responses)) for t in response.responses]

    def walk_metadata(response: Any) -> list:
        return [list(response.brokers)] + [(t.name, list(t.partitions)) for t in response.topics]

    ops_race("ProduceResponse", lambda: decode_produce(produce + struct.pack(">i", 0), 3,
                                                       header=False),
             {"walk": walk_produce, "repr": repr}, rng, shareable=True)
    ops_race("MetadataResponse", lambda: decode_metadata(metadata, 0, header=False),
             {"walk": walk_metadata, "repr": repr}, rng, shareable=True)


def _recv(conn: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


TARGETS: dict[str, Target] = {
    "records": Target(records, "records"),
    "records_iterator": Target(records_iterator, "records"),
    "record_batch": Target(record_batch, "records"),
    "arrow_decoder": Target(arrow_decoder, "records"),
    "decompressor": Target(decompressor, "records"),
    "down_converter": Target(down_converter, "records"),
    "lazy": Target(lazy, "records"),
    "builder": Target(builder, "records"),
    "raw_batches_builder": Target(raw_batches_builder, "records"),
    "write_buffer": Target(write_buffer, "records"),
    "pool": Target(pool, "records"),
    "ring": Target(ring, "records"),
    "ring_records": Target(ring_records, "records"),
    "fetch_response": Target(fetch_response, "records"),
    "produce_metadata_responses": Target(produce_metadata_responses, "records"),
}


# --- coverage of the public classes -------------------------------------------------------------

VALUE = "a value: fields only, nothing changes after it is made"
ERROR = "an exception class"
COVERAGE: dict[str, str] = {
    "kafkacodec._records.MemoryRecords": "records",
    "kafkacodec._records.FileRecords": "records",
    "kafkacodec._records.Records": "records",
    "kafkacodec._records._RecordIterator": "records_iterator",
    "kafkacodec._records._BatchIterator": "records_iterator",
    "kafkacodec._records.RecordBatch": "record_batch",
    "kafkacodec._records.Record": VALUE + " (it owns its key, value and headers)",
    "kafkacodec._mapguard.MappedFile": "records (the mapping behind a FileRecords)",
    "kafkacodec._mapguard.Guard": "internal: held by one MappedFile, never handed out",
    "kafkacodec._inuse.InUse": "internal: the in-use guard of the Python classes itself",
    "kafkacodec._arrow.ArrowDecoder": "arrow_decoder",
    "kafkacodec._compression.Decompressor": "decompressor",
    "kafkacodec._convert.DownConverter": "down_converter",
    "kafkacodec._convert.ChunkReader": "lazy (each LazyDownConvertRecords chunk walk owns one)",
    "kafkacodec._convert.ConvertedRecords": VALUE,
    "kafkacodec._convert.RecordConversionStats": VALUE + " (add() is one GIL-held update)",
    "kafkacodec.lazy.LazyDownConvertRecords": "lazy",
    "kafkacodec._builder.MemoryRecordsBuilder": "builder",
    "kafkacodec._mirror.RawBatchesBuilder": "raw_batches_builder",
    "kafkacodec._mirror.RawBytesBatchRecord": VALUE + " (its value is a read-only view)",
    "kafkacodec._writer.WriteBuffer": "write_buffer",
    "kafkacodec._pool.SimpleMemoryPool": "pool",
    "kafkacodec._pool.MemoryPool": "pool (MemoryPool.NONE)",
    "kafkacodec._pool.PoolBuffer": "pool (the exporter of each block)",
    "kafkacodec._ring.ResponseRingBuffer": "ring",
    "kafkacodec._ring.Response": "ring",
    "kafkacodec._ring.RingView": "ring (payload views)",
    "kafkacodec._ring.FetchRecords": "ring_records",
    "kafkacodec._ring.FetchRecord": "ring_records (the flyweight)",
    "kafkacodec.protocol._types.FetchResponse": "fetch_response",
    "kafkacodec.protocol._types.FetchTopicResponse": "fetch_response",
    "kafkacodec.protocol._fetch.FetchPartitionData": "fetch_response",
    "kafkacodec.protocol._fetch.FetchTopics": "fetch_response",
    "kafkacodec.protocol._fetch.FetchPartitions": "fetch_response",
    "kafkacodec.protocol._fetch.AbortedTransactions": "fetch_response",
    "kafkacodec.protocol._produce.ProduceTopics": "produce_metadata_responses",
    "kafkacodec.protocol._produce.ProducePartitions": "produce_metadata_responses",
    "kafkacodec.protocol._metadata.MetadataBrokers": "produce_metadata_responses",
    "kafkacodec.protocol._metadata.MetadataTopics": "produce_metadata_responses",
    "kafkacodec.protocol._metadata.MetadataPartitions": "produce_metadata_responses",
    "kafkacodec._types.Compression": VALUE,
    "kafkacodec._types.ControlType": VALUE,
    "kafkacodec._types.TimestampType": VALUE,
    "kafkacodec._progress.Progress": "the CLI's progress bar: made and used by one command",
    "kafkacodec.logdir._read.Options": VALUE,
    "kafkacodec.logdir._read.Segment": VALUE,
    "kafkacodec.logdir._read.Split": VALUE + " (read_split makes its own decoder per call)",
    "kafkacodec.spark.datasource.KafkaLogDataSource":
        "Spark: one per query plan; readers run one per task (read_split)",
    "kafkacodec.spark.datasource.KafkaLogReader": "Spark: one per task",
    "kafkacodec.spark.writer.KafkaLogWriter": "Spark: one per task",
    "kafkacodec.spark.job.ConvertSummary": VALUE,
    "kafkacodec.spark.job.StageProgress": "Spark: the driver's progress listener",
}
for _name in ("AbortedTransaction", "ApiVersionRange", "ApiVersionsResponse", "MetadataBroker",
              "MetadataPartition", "MetadataResponse", "MetadataTopic",
              "ProducePartitionResponse", "ProduceResponse", "ProduceTopicResponse"):
    COVERAGE[f"kafkacodec.protocol._types.{_name}"] = VALUE


# The pure-Python packages hold the GIL in every step; their objects' contract is one owner
# thread (documented in each module), and the public entry points say how they are shared.
_OWNED = {
    "kafkacodec.serve.": "internal to serve: owned by the server's loop thread (a Server is "
                         "started and stopped from the thread that made it)",
    "kafkacodec.consumer.": "internal to the consumer core: used by the one thread inside its "
                            "Consumer (Consumer refuses a second one with ConcurrentUseError: "
                            "tests/test_consumer.py)",
    **{f"kafkacodec.mirror.{m}.": "internal to the mirror process: one thread drives it"
       for m in ("_checkpoint", "_metrics", "_producer", "process")},
    "kafkacodec.logdir.": "internal to the log-directory reader and writer: made and used by one "
                          "call (plan, read_split, describe, write_log) or one task",
    "kafkacodec.cli.": "the CLI: made and used by one command",
    "kafkacodec.protocol._schema.": "a value: the message schemas, read-only after import",
    "kafkacodec.protocol.api.": "a value: ApiKey and Error, enums",
    "kafkacodec.protocol.control.": "a value: a request to send (Outgoing), made per call",
    "kafkacodec.protocol._fetch_server.": "a value: a decoded request, fields only",
    "kafkacodec.spark.": "Spark: one per task or query plan",
    **{f"kafkacodec.net.{m}.": "internal to the network layer: owned by the thread running its "
                               "Loop (Loop.call_soon_threadsafe is the one entry from others)"
       for m in ("loop", "connection", "client", "transport", "pieces", "authentication")},
    **{f"kafkacodec.net.{m}.": "a value: settings, rules and secrets, read-only once loaded"
       for m in ("properties", "acl", "_secret")},
    "kafkacodec.net.sasl.": "internal: one SASL exchange of one connection, on its loop",
    "kafkacodec.net.users.": "internal: the credentials file, read once by its owner; writers "
                             "of the file are serialized by a file lock (tests/test_net_users.py)",
    "kafkacodec._statestore.": "internal: a state store has one owner (serve's loop thread, the "
                               "mirror's thread)",
}


def public_classes() -> dict[str, type]:
    """Every class kafkacodec makes public: kafkacodec.__all__ and the public names of every
    submodule (compiled and private modules included), plus the iterator classes the readers
    hand out."""
    import importlib
    import pkgutil

    import kafkacodec

    found: dict[str, type] = {}
    modules = [kafkacodec]
    for info in pkgutil.walk_packages(kafkacodec.__path__, "kafkacodec."):
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:        # an optional dependency (pyspark...) is missing
            continue
    for module in modules:
        for name in getattr(module, "__all__", None) or dir(module):
            obj = getattr(module, name, None)
            if (name.startswith("_") or not inspect.isclass(obj)
                    or not obj.__module__.startswith("kafkacodec")
                    or issubclass(obj, BaseException)):
                continue
            found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    empty = kafkacodec.MemoryRecords(b"")
    for it in (empty.records(), empty.batches()):
        found[f"{type(it).__module__}.{type(it).__qualname__}"] = type(it)
    return found


def uncovered() -> list[str]:
    """Public classes with no entry in COVERAGE, and entries naming no scenario."""
    missing = sorted(n for n in set(public_classes()) - set(COVERAGE)
                     if not any(n.startswith(prefix) for prefix in _OWNED))
    unknown = sorted(n for n, how in COVERAGE.items()
                     if how.split(" ")[0] not in TARGETS and not _explained(how))
    return missing + [f"{n}: scenario {COVERAGE[n].split(' ')[0]!r} does not exist"
                      for n in unknown]


def _explained(how: str) -> bool:
    return how.startswith(("a value", "internal", "the CLI", "Spark"))


_checked = False


def _coverage_guard(fn: Callable[[bytes], None]) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        global _checked
        if not _checked:
            missing = uncovered()
            if missing:
                raise AssertionError("public classes no concurrency scenario covers (add them "
                                     f"to fuzz/concurrency.py COVERAGE): {missing}")
            _checked = True
        fn(data)
    run.__doc__ = fn.__doc__
    return run


TARGETS = {name: Target(_coverage_guard(t.fn), t.kind) for name, t in TARGETS.items()}
