"""Re-entrancy harness: Python code runs in the middle of a call and changes what it reads.

Every public call that takes Python objects gets arguments that run a *trip* while the call
is under way: an `__index__` (or `__int__`), a sequence's `__len__`/`__iter__`, a generator
body, a key's `__hash__`/`__eq__`, a writer's `write()`, or a finaliser (`__del__` of a cycle
collected during the call, with gc.set_threshold(1)). The trip does what a careless program
does there: closes the FileRecords the call reads, releases the ring response or closes the
ring, releases the pool buffer, empties the caller's lists, drops the last reference to an
argument, resizes a bytearray, or calls the same object again.

Contract: the call gives the result of the arguments as they were when it started (or, where
stated, as the trip left them), or raises a clear error (a KafkaCodecError, such as
BufferReleasedError or ConcurrentUseError; a BufferError for a resize refused while the call
holds the buffer; ValueError/TypeError for arguments made invalid by the trip); never a
crash, never freed memory read (ASan), never other bytes in the result. (`__buffer__` trips
need Python 3.12; the venv runs 3.11, so tests/test_builder_safety.py covers those.)

The input is a record set (`records` corpus, `hostile()` damage); the trip and where it fires
are drawn from a generator seeded by it.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import random
import tempfile
from typing import Any, Callable, Iterator

from _harness import Target, arrow_rows, api, fetch_frame, hostile, rng_of
from kafkacodec.errors import KafkaCodecError

CLEAR = (KafkaCodecError, BufferError, ValueError, TypeError)


# --- trips -------------------------------------------------------------------------------------

class Trip:
    """An action run from inside the call (its own errors swallowed: the trip is the caller's
    code, and what matters is what the call does next). Fires once."""

    def __init__(self, action: Callable[[], Any]):
        self.action = action
        self.fired = False

    def __call__(self) -> None:
        if self.fired:
            return
        self.fired = True
        try:
            self.action()
        except Exception:
            pass


class Index:
    """An int argument whose __index__ trips."""

    def __init__(self, value: int, trip: Trip):
        self.value = value
        self.trip = trip

    def __index__(self) -> int:
        self.trip()
        return self.value

    __int__ = __index__


class Key:
    """A mapping key (or a hashable argument) whose __hash__ and __eq__ trip."""

    def __init__(self, value: Any, trip: Trip):
        self.value = value
        self.trip = trip

    def __hash__(self) -> int:
        self.trip()
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        self.trip()
        return self.value == (other.value if isinstance(other, Key) else other)


class Listing(list):
    """A list whose __len__ and __iter__ trip."""

    def __init__(self, items: Any, trip: Trip):
        super().__init__(items)
        self.trip = trip

    def __len__(self) -> int:
        self.trip()
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        self.trip()
        return super().__iter__()


def generator(items: list[Any], trip: Trip, at: int) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i == at:
            trip()
        yield item
    if at >= len(items):
        trip()


class _Cycle:
    def __init__(self, trip: Trip):
        self.trip = trip
        self.me = self

    def __del__(self) -> None:
        self.trip()


@contextlib.contextmanager
def finaliser(trip: Trip) -> Iterator[None]:
    """A cycle whose __del__ trips, left for the collector, which runs at every allocation
    during the call (gc.set_threshold(1))."""
    old = gc.get_threshold()
    _Cycle(trip)
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.collect()


def int_arg(value: int, trip: Trip, rng: random.Random) -> Any:
    """An int argument: plain (the trip then runs from a finaliser) or one that trips."""
    return Index(value, trip) if rng.random() < 0.6 else value


def call(fn: Callable[[], Any], trip: Trip, rng: random.Random) -> tuple[str, Any]:
    """Run the call (with a finaliser armed half the time); ('ok', result) or ('error', exc)
    for a clear error; anything else propagates (a finding)."""
    try:
        with finaliser(trip) if rng.random() < 0.5 else contextlib.nullcontext():
            return "ok", fn()
    except CLEAR as exc:
        return "error", exc


def records_of(data: Any) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in api("kafkacodec.MemoryRecords")(data).records()]


def expect(name: str, got: tuple[str, Any], *allowed: Any) -> None:
    """An ok result must be one of `allowed` (computed without trips)."""
    if got[0] == "ok" and got[1] not in allowed:
        raise AssertionError(f"{name}: a trip during the call gave {_short(got[1])}, not one of "
                             f"{[_short(a) for a in allowed]}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."


_DIR = tempfile.mkdtemp(prefix="kc-fuzz-reenter-")


def _segment(data: bytes) -> Any:
    path = os.path.join(_DIR, "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    return api("kafkacodec.FileRecords").open(path)


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except KafkaCodecError as exc:
        return type(exc)


def _input(data: bytes, salt: str) -> tuple[random.Random, bytes]:
    rng = rng_of(data, salt)
    return rng, hostile(data, rng)


# --- calls that read a FileRecords the trip closes -------------------------------------------

def file_records_calls(data: bytes) -> None:
    """down_convert, LazyDownConvertRecords (and its write_to's dest), ArrowDecoder.decode,
    FileRecords.slice/records/index, shallow_records and trim_batch over a FileRecords closed
    by a trip mid-call: the result of the bytes the file held, or BufferReleasedError."""
    rng, data = _input(data, "file")
    records = _segment(data)
    trip = Trip(records.close)
    which = rng.randrange(8)
    if which == 0:
        to_magic = rng.randint(0, 1)
        expected = _outcome(lambda: records_of(
            api("kafkacodec.down_convert")(data, to_magic).records.buffer))
        got = call(lambda: records_of(api("kafkacodec.down_convert")(
            records, int_arg(to_magic, trip, rng), int_arg(0, trip, rng)).records.buffer),
            trip, rng)
        expect("down_convert", got, expected)
    elif which == 1:
        Lazy = api("kafkacodec.LazyDownConvertRecords")

        class Dest:
            def write(self, b: Any) -> int:
                sink.write(b)
                trip()
                return len(b)

        sink = io.BytesIO()
        alone = io.BytesIO()
        try:
            lazy_alone = Lazy(data, 0, chunk_size=64)
            while lazy_alone.write_to(alone):
                pass
        except KafkaCodecError:
            alone = None        # type: ignore[assignment]

        def convert() -> bytes:
            lazy = Lazy(records, int_arg(0, trip, rng), chunk_size=int_arg(64, trip, rng))
            while lazy.write_to(Dest()):
                pass
            return sink.getvalue()
        got = call(convert, trip, rng)
        expect("LazyDownConvertRecords", got, None if alone is None else alone.getvalue())
    elif which == 2:
        Decoder = api("kafkacodec._arrow.ArrowDecoder")
        expected = _outcome(lambda: arrow_rows(Decoder("t", 0).decode(data)[0]))
        args = (int_arg(0, trip, rng), int_arg(-1, trip, rng), int_arg(0, trip, rng))
        # the view only the call holds: its release after a failure may unmap the file
        got = call(lambda: arrow_rows(Decoder("t", 0).decode(records.buffer, *args)[0]), trip,
                   rng)
        expect("ArrowDecoder.decode", got, expected)
    elif which == 3:
        at = rng.randrange(len(data) + 1)
        expected = _outcome(lambda: records_of(bytes(_segment(data).slice(at, len(data)).buffer)))
        got = call(lambda: records_of(bytes(records.slice(int_arg(at, trip, rng),
                                                          int_arg(len(data), trip, rng)).buffer)),
                   trip, rng)
        expect("FileRecords.slice", got, expected)
    elif which == 4:
        expected = _outcome(lambda: [(r.offset, r.key, r.value) for r in _segment(data).records()])
        got = call(lambda: [(r.offset, r.key, r.value) for r in records.records()], trip, rng)
        if got[0] == "ok" and got[1] != expected:
            raise AssertionError("FileRecords.records() closed by a finaliser gave other records")
    elif which == 5:
        expected = _outcome(lambda: _segment(data).index(check_crc=True).tolist())
        got = call(lambda: records.index(check_crc=Key(True, trip)).tolist(), trip, rng)
        expect("FileRecords.index", got, expected)
    elif which == 6:
        shallow = api("kafkacodec.shallow_records")
        offset = rng.choice([None, 0, 5, 100])
        expected = _outcome(lambda: [bytes(r.value) for r in shallow(data, offset)])
        got = call(lambda: [bytes(r.value) for r in shallow(
            records, None if offset is None else int_arg(offset, trip, rng))], trip, rng)
        expect("shallow_records", got, expected)
    else:
        trim = api("kafkacodec.mirror.trim_batch")
        offset = rng.choice([0, 3, 100])
        view = records.buffer
        expected = _outcome(lambda: _value(trim(data, offset)))
        got = call(lambda: _value(trim(view, int_arg(offset, trip, rng))), trip, rng)
        expect("trim_batch", got, expected)
    records.close()


def _value(raw: Any) -> Any:
    return None if raw is None else bytes(raw.value)


# --- the ring and the pool -----------------------------------------------------------------------

def ring_calls(data: bytes) -> None:
    """Response.records(api_version, isolation_level), decompress() and MemoryRecords over a
    response payload, get_buffer(sizehint)/buffer_updated(nbytes) and feed(): with the
    response released or the ring closed by a trip: the right records, or
    BufferReleasedError; never bytes of another response."""
    rng, data = _input(data, "ring")
    Ring = api("kafkacodec.ResponseRingBuffer")
    Pool = api("kafkacodec.SimpleMemoryPool")
    frame = fetch_frame(data)
    pool = Pool(4 * len(frame) + 64, 2 * len(frame) + 32) if rng.random() < 0.5 else None
    ring = Ring(2 * len(frame) + 32, pool)
    ring.feed(frame)
    response = ring.next_response()
    expected = _outcome(lambda: _ring_records(frame))
    action = rng.choice(["release", "close", "refill"])

    def sabotage() -> None:
        if action == "release":
            response.release()
        elif action == "close":
            ring.close()
        else:                                   # release, then reuse the space for new bytes
            response.release()
            ring.feed(fetch_frame(b"\xee" * len(data)))
            ring.next_response()

    trip = Trip(sabotage)
    which = rng.randrange(4)
    if which == 0:
        got = call(lambda: [r.copy() for r in response.records(
            int_arg(4, trip, rng), int_arg(0, trip, rng))], trip, rng)
        expect("Response.records", got, expected)
    elif which == 1:
        MemoryRecords = api("kafkacodec.MemoryRecords")
        got = call(lambda: [(r.offset, r.key, r.value) for r in MemoryRecords(
            response.payload, max_decompressed_size=int_arg(1 << 20, trip, rng)).records()],
            trip, rng)
        alone = _outcome(lambda: [(r.offset, r.key, r.value)
                                  for r in MemoryRecords(frame[4:]).records()])
        expect("MemoryRecords(payload)", got, alone)
    elif which == 2:
        ring.close()
        ring = Ring(64 + rng.randrange(4096))
        trip = Trip(ring.close)

        def fill() -> int:
            view = ring.get_buffer(int_arg(rng.randint(-1, 64), trip, rng))
            n = min(len(view), 16)
            view[:n] = b"\x00\x00\x00\x0c" + b"\x01" * (n - 4) if n >= 4 else b"\x00" * n
            del view
            ring.buffer_updated(int_arg(n, trip, rng))
            return n
        call(fill, trip, rng)
    else:
        decompress = api("kafkacodec._compression.decompress")
        compress = api("kafkacodec._compression.compress")
        packed = compress(1, 2, data)
        ring.close()
        ring = Ring(len(packed) + 64)
        ring.feed(len(packed).to_bytes(4, "big") + packed)
        resp = ring.next_response()
        trip = Trip(resp.release)
        got = call(lambda: decompress(Key(1, trip), int_arg(2, trip, rng), resp.payload,
                                      int_arg(1 << 22, trip, rng)), trip, rng)
        expect("decompress(ring payload)", got, data)
    ring.close()


def _ring_records(frame: bytes) -> list[tuple]:
    ring = api("kafkacodec.ResponseRingBuffer")(len(frame) + 8)
    ring.feed(frame)
    return [r.copy() for r in ring.next_response().records(4)]


def pool_calls(data: bytes) -> None:
    """SimpleMemoryPool.try_allocate/release and RawBatchesBuilder.append with the pool
    buffer released (or the pool's blocks churned) by a trip: the pool's accounting and the
    appended bytes stay right."""
    rng = rng_of(data, "pool")
    Pool = api("kafkacodec.SimpleMemoryPool")
    size = 1 << 16
    pool = Pool(size, 4096)
    blocks = [pool.try_allocate(rng.randint(1, 4096)) for _ in range(4)]
    blocks = [b for b in blocks if b is not None]

    def churn() -> None:
        while blocks:
            pool.release(blocks.pop())
        for _ in range(3):
            extra = pool.try_allocate(100)
            if extra is not None:
                extra[:] = b"\xee" * 100
                blocks.append(extra)

    trip = Trip(churn)
    which = rng.randrange(3)
    if which == 0:
        got = call(lambda: pool.try_allocate(int_arg(rng.randint(1, 4096), trip, rng),
                                             Key(False, trip)), trip, rng)
        if got[0] == "ok" and got[1] is not None:
            blocks.append(got[1])
    elif which == 1 and blocks:
        victim = blocks.pop(0)
        call(lambda: pool.release(victim), trip, rng)
    else:
        Builder = api("kafkacodec.RawBatchesBuilder")
        rng2, log = _input(data, "raw")
        shallow = api("kafkacodec.shallow_records")
        try:
            raws = [bytes(r.value) for r in shallow(log)]
        except KafkaCodecError:
            raws = []
        builder = Builder(1 << 22)
        held = pool.try_allocate(max(1, min(4096, len(raws[0]) if raws else 1)))
        if raws and held is not None and len(raws[0]) <= len(held):
            held[:len(raws[0])] = raws[0]
            piece = held[:len(raws[0])]
            trip = Trip(lambda: pool.release(held))
            got = call(lambda: builder.append(piece), trip, rng)
            piece.release()
            if got == ("ok", True) and bytes(builder.records()) != raws[0]:
                raise AssertionError("RawBatchesBuilder.append copied other bytes than the "
                                     "pool buffer held when the call started")
        if held is not None and not held.obj.released:
            pool.release(held)
    for block in blocks:
        pool.release(block)
    if pool.available_memory != pool.size:
        raise AssertionError(f"pool accounting after trips: {pool.available_memory} of "
                             f"{pool.size} available")


# --- builders and encoders ---------------------------------------------------------------------

def builder_calls(data: bytes) -> None:
    """MemoryRecordsBuilder(...) arguments, append/append_with_offset/append_many/
    has_room_for/append_control_record and the static batch makers, with trips that empty the
    caller's lists, drop keys, call the builder again or collect: each record holds its
    arguments as they were when the call started (or raises a clear error)."""
    rng = rng_of(data, "builder")
    Builder = api("kafkacodec.MemoryRecordsBuilder")
    n = rng.randint(1, 30)
    keys: list[Any] = [None if i % 5 == 0 else data[i:i + rng.randint(0, 20)] for i in range(n)]
    values: list[Any] = [data[i:i + rng.randint(0, 300)] for i in range(n)]
    headers: list[Any] = [[("h%d" % i, data[:i])] for i in range(n)]
    snapshot = (list(keys), list(values), [list(h) for h in headers])
    builder = Builder(compression=rng.choice(["none", "gzip", "lz4", "zstd", "snappy"]),
                      base_offset=rng.randint(0, 100))

    def sabotage() -> None:
        choice = rng.randrange(4)
        if choice == 0:
            keys.clear(), values.clear(), headers.clear()
        elif choice == 1:
            for i in range(len(values)):
                values[i] = b"\xee" * 7
        elif choice == 2:
            builder.append(1, b"again", b"again")   # ConcurrentUseError (swallowed)
        gc.collect()

    trip = Trip(sabotage)
    which = rng.randrange(5)
    i = rng.randrange(n)
    key, value, header = keys[i], values[i], list(headers[i])
    allowed = [(k, v, tuple(h)) for k, v, h in zip(*snapshot)]
    allowed += [(k, b"\xee" * 7, tuple(h)) for k, h in zip(snapshot[0], snapshot[2])]
    allowed.append((b"again", b"again", ()))     # the trip's own append, made between calls
    if which == 0:
        args = (Listing([int_arg(1, trip, rng) for _ in range(n)], trip),
                Listing(keys, trip) if rng.random() < 0.5 else keys, Listing(values, trip),
                generator([generator(h, trip, 0) for h in headers], trip, rng.randrange(n + 1)))
        call(lambda: builder.append_many(*args), trip, rng)
    elif which == 1:
        args = (int_arg(1, trip, rng), key, value, generator(header, trip, rng.randint(0, 1)))
        call(lambda: builder.append(*args), trip, rng)
    elif which == 2:
        args = (int_arg(builder.next_offset, trip, rng), int_arg(1, trip, rng), key, value,
                Listing(header, trip))
        call(lambda: builder.append_with_offset(*args), trip, rng)
    elif which == 3:
        args = (int_arg(1, trip, rng), key, value, Listing(header, trip))
        call(lambda: builder.has_room_for(*args), trip, rng)
    else:
        args = (Key(True, trip), int_arg(7, trip, rng), int_arg(1, trip, rng),
                int_arg(3, trip, rng))
        got = call(lambda: Builder.build_end_txn_marker(*args, base_offset=9, timestamp=5),
                   trip, rng)
        expect("build_end_txn_marker", got,
               Builder.build_end_txn_marker(True, 7, 1, 3, base_offset=9, timestamp=5))
        return
    built = builder.build()
    for offset, _, k, v, hdrs in records_of(built):
        if (k, v, hdrs) not in allowed:
            raise AssertionError(f"a trip during the call: record {offset} holds "
                                 f"{_short((k, v, hdrs))}, which no argument held")
    api("kafkacodec.MemoryRecords")(built).validate()


def encoder_calls(data: bytes) -> None:
    """encode_produce_request, encode_fetch_request and mirror.fetch_to_produce with topic
    data whose sequences, strings and mapping keys trip (emptying the caller's lists): a
    frame whose size prefix is its length and that holds the records the call started with,
    or a clear error."""
    rng, log = _input(data, "encoders")
    protocol = api("kafkacodec.protocol")
    partitions = [(i, log) for i in range(rng.randint(1, 4))]
    topics = [("topic-%d" % t, list(partitions)) for t in range(rng.randint(1, 3))]
    snapshot = [(name, list(parts)) for name, parts in topics]

    def sabotage() -> None:
        for _, parts in topics:
            parts.clear()
        topics.clear()
        gc.collect()

    trip = Trip(sabotage)
    which = rng.randrange(3)
    if which == 0:
        version = rng.choice([3, 7, 9])
        args = (Listing([(Key(name, trip) if rng.random() < 0.3 else name,
                          Listing([(int_arg(p, trip, rng), r) for p, r in parts], trip))
                         for name, parts in topics], trip),)
        options = {"api_version": int_arg(version, trip, rng),
                   "correlation_id": int_arg(5, trip, rng)}
        got = call(lambda: bytes(protocol.encode_produce_request(*args, **options)), trip, rng)
        if got[0] == "ok":
            check_produce_frame(got[1], version, log)
    elif which == 1:
        fetch = [(name, [(p, 0) for p, _ in parts]) for name, parts in snapshot]
        arg = generator([(name, Listing([(int_arg(p, trip, rng), int_arg(o, trip, rng))
                                         for p, o in parts], trip))
                         for name, parts in fetch], trip, rng.randint(0, len(fetch)))
        version = int_arg(12, trip, rng)
        got = call(lambda: bytes(protocol.encode_fetch_request(arg, api_version=version)),
                   trip, rng)
        if got[0] == "ok":
            check_frame(got[1])
    else:
        mirror = api("kafkacodec.mirror.fetch_to_produce")
        frame = fetch_frame(log)[4:]
        response = protocol.decode_fetch_response(bytearray(frame), 4)
        offsets = {Key(("t", 0), trip): 0} if rng.random() < 0.5 else None
        options = {"api_version": int_arg(9, trip, rng),
                   "max_batches_per_partition": int_arg(-1, trip, rng)}
        try:
            expected = _frame_bytes(mirror(protocol.decode_fetch_response(frame, 4),
                                           fetch_offsets=None if offsets is None
                                           else {("t", 0): 0},
                                           api_version=9, max_batches_per_partition=-1))
        except KafkaCodecError:
            expected = None
        got = call(lambda: _frame_bytes(mirror(response, fetch_offsets=offsets, **options)),
                   trip, rng)
        expect("fetch_to_produce", got, expected)


def _frame_bytes(frame: Any) -> bytes | None:
    return None if frame is None else bytes(frame)


def check_frame(frame: bytes) -> None:
    if len(frame) < 4 or int.from_bytes(frame[:4], "big") != len(frame) - 4:
        raise AssertionError(f"a trip during the call gave a frame whose size prefix is not "
                             f"its length: {_short(frame[:16])} ({len(frame)} bytes)")


def check_produce_frame(frame: bytes, version: int, records: bytes) -> None:
    """A whole ProduceRequest (kafka-python decodes it) whose every records field holds the
    record set the call was given (the trip may empty the topic list first, never mix)."""
    from kafka.protocol.producer.produce import ProduceRequest

    check_frame(frame)
    request = ProduceRequest.decode(frame[4:], version=version, header=True)
    for topic in request.topic_data:
        for partition in topic.partition_data:
            if bytes(partition.records) != records:
                raise AssertionError("a trip during the call: a records field holds other "
                                     "bytes than the call was given")


def arrow_calls(data: bytes) -> None:
    """ArrowDecoder(aborted=...) iterables and decode() positions that trip (the decoder called
    again, the input bytearray resized, a collection), and encode_v2 with arguments whose
    trips drop the arrays: the single-threaded result or a clear error."""
    rng, log = _input(data, "arrow")
    Decoder = api("kafkacodec._arrow.ArrowDecoder")
    buf = bytearray(log)
    decoder = Decoder("t", 0, keep_control=True)

    def sabotage() -> None:
        try:
            decoder.decode(log)                 # ConcurrentUseError (swallowed)
        finally:
            try:
                buf.extend(b"\0" * 4096)        # BufferError while the call holds it
            finally:
                gc.collect()

    trip = Trip(sabotage)
    if rng.random() < 0.6:
        expected = _outcome(lambda: arrow_rows(Decoder("t", 0, keep_control=True).decode(log)[0]))
        args = (buf, int_arg(0, trip, rng), int_arg(len(log), trip, rng), int_arg(0, trip, rng))
        got = call(lambda: arrow_rows(decoder.decode(*args)[0]), trip, rng)
        expect("ArrowDecoder.decode", got, expected)
        aborted = [(7, 0, 100), (9, 5, 6)]
        expected = _outcome(lambda: arrow_rows(Decoder(aborted=aborted).decode(log)[0]))
        hostile_aborted = generator([Listing([int_arg(x, trip, rng) for x in a], trip)
                                     for a in aborted], trip, rng.randint(0, 2))
        got = call(lambda: arrow_rows(Decoder(aborted=hostile_aborted).decode(log)[0]), trip, rng)
        expect("ArrowDecoder(aborted=...)", got, expected)
        return
    import numpy as np
    import pyarrow as pa

    encode = api("kafkacodec._arrow.encode_v2")
    n = rng.randint(1, 20)
    keys = pa.array([log[i:i + 5] for i in range(n)], pa.binary())
    values = pa.array([log[i:i + 50] for i in range(n)], pa.large_binary())
    stamps = np.arange(n, dtype=np.int64)
    args = {"keys": keys, "values": values}
    trip = Trip(lambda: (args.clear(), gc.collect()))
    expected = encode(keys, values, stamps, codec=1)
    got = call(lambda: encode(args["keys"], args["values"], stamps, codec=int_arg(1, trip, rng),
                              batch_bytes=int_arg(16384, trip, rng),
                              base_offset=int_arg(0, trip, rng)), trip, rng)
    expect("encode_v2", got, expected)


def byte_calls(data: bytes) -> None:
    """crc32c/crc32/xxhash32/compress/decompress/Decompressor and the protocol decoders with
    a bytearray the trip tries to resize and int arguments that trip: the result for the
    bytes at the start, or BufferError/clear errors."""
    rng = rng_of(data, "bytes")
    buf = bytearray(data)
    original = bytes(data)

    def sabotage() -> None:
        try:
            buf[:] = b"\xee" * (len(buf) + 100)
        finally:
            gc.collect()

    trip = Trip(sabotage)
    crc = api("kafkacodec._crc")
    compression = api("kafkacodec._compression")
    protocol = api("kafkacodec.protocol")
    which = rng.randrange(6)
    if which == 0:
        seed = int_arg(0, trip, rng)
        got = call(lambda: crc.crc32c(buf, seed), trip, rng)
        expect("crc32c", got, crc.crc32c(original), crc.crc32c(bytes(buf)))
        got = call(lambda: crc.crc32(buf, seed), trip, rng)
        expect("crc32", got, crc.crc32(original), crc.crc32(bytes(buf)))
    elif which == 1:
        got = call(lambda: compression.xxhash32(buf, int_arg(0, trip, rng)), trip, rng)
        expect("xxhash32", got, compression.xxhash32(original), compression.xxhash32(bytes(buf)))
    elif which == 2:
        codec = rng.randint(1, 4)
        magic = 2 if codec == 4 else rng.randint(0, 2)
        got = call(lambda: compression.decompress(
            codec, magic, compression.compress(Key(codec, trip), int_arg(magic, trip, rng), buf,
                                               None)), trip, rng)
        expect("compress", got, original, bytes(buf))
    elif which == 3:
        packed = bytearray(compression.compress(1, 2, original))
        buf = packed
        trip = Trip(lambda: packed.extend(b"x"))
        d = compression.Decompressor(int_arg(1 << 22, trip, rng))
        got = call(lambda: bytes(d.decompress(Key(1, trip), int_arg(2, trip, rng), packed)),
                   trip, rng)
        expect("Decompressor.decompress", got, original)
    else:
        decode = rng.choice([protocol.decode_fetch_response, protocol.decode_produce_response,
                             protocol.decode_metadata_response,
                             protocol.decode_api_versions_response])
        version = rng.randint(0, 12)
        frame = bytearray(fetch_frame(original)[4:]) if decode is protocol.decode_fetch_response \
            else bytearray(original)
        buf = frame
        snapshot = bytes(frame)
        trip = Trip(lambda: frame.extend(b"\0" * 64))
        alone = _outcome(lambda: repr(decode(snapshot, version)))
        got = call(lambda: repr(decode(frame, int_arg(version, trip, rng),
                                       int_arg(0, trip, rng), int_arg(-1, trip, rng))), trip, rng)
        if got[0] == "ok" and got[1] != alone and bytes(frame) == snapshot:
            raise AssertionError(f"{decode.__name__}: a trip changed the result: "
                                 f"{_short(got[1])} vs {_short(alone)}")


TARGETS: dict[str, Target] = {
    "file_records": Target(file_records_calls, "records"),
    "ring": Target(ring_calls, "records"),
    "pool": Target(pool_calls, "records"),
    "builder": Target(builder_calls, "records"),
    "encoders": Target(encoder_calls, "records"),
    "arrow": Target(arrow_calls, "records"),
    "bytes": Target(byte_calls, "records"),
}
