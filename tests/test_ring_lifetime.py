"""What a ring's records, views and memory are after next(), an error, release() and close(),
and when threads share a ring: the previous record shows its own bytes or raises
BufferReleasedError, never other bytes; concurrent use works or raises ConcurrentUseError
("in use by another thread"); pool memory is never written after it went back to the pool."""

import gc
import os
import random
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kafkacodec import (
    BufferReleasedError,
    ConcurrentUseError,
    CorruptRecordError,
    KafkaCodecError,
    MemoryRecordsBuilder,
    ResponseRingBuffer,
    SimpleMemoryPool,
    _crc,
)

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)
from fetch_fixtures import build_fetch_response  # noqa: E402



def v2_batch(n, fill, compression="none", base=0, size=100):
    builder = MemoryRecordsBuilder(compression=compression, base_offset=base)
    for i in range(n):
        builder.append(1000 + i, b"k%d" % (base + i), fill * size, [("h", fill)])
    return builder.build()


def with_records_count(batch: bytes, count: int) -> bytes:
    """The batch with another RecordsCount and a CRC-32C recomputed to match."""
    b = bytearray(batch)
    struct.pack_into(">i", b, 57, count)
    struct.pack_into(">I", b, 17, _crc.crc32c(bytes(b[21:])))
    return bytes(b)


def ring_with(*frames, capacity=None):
    ring = ResponseRingBuffer(capacity or sum(len(f) for f in frames) + 64)
    for f in frames:
        assert ring.feed(f) == len(f)
    return ring


def own_or_released(rec, fill: bytes):
    """The record shows its own value (`fill` bytes) or raises BufferReleasedError."""
    try:
        value = rec.value
    except BufferReleasedError:
        return "released"
    assert value is not None and set(value) == set(fill), value[:16]
    return "own"


# -- item 2: the flyweight after an error, the end, the next response --------------------------
def test_a_negative_records_count_is_refused_before_decompressing_and_the_record_dies():
    # The second batch inflates to ~5 MB: before the fix it was decompressed into the buffer
    # the first batch's record pointed into (moving it), then rejected; the record then showed
    # freed heap bytes.  Run where a crash cannot take the test run along.
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from test_ring_lifetime import v2_batch, with_records_count, ring_with, own_or_released
        from fetch_fixtures import build_fetch_response
        from kafkacodec import CorruptRecordError
        first = v2_batch(3, b"A", "gzip")
        hostile = with_records_count(v2_batch(50, b"Z", "gzip", base=3, size=100_000), -1)
        ring = ring_with(build_fetch_response(12, 1, [("t", [(0, first + hostile)])]))
        records = ring.next_response().records(12)
        rec = next(records)
        assert own_or_released(rec, b"A") == "own"
        next(records), next(records)
        try:
            next(records)
        except CorruptRecordError as exc:
            assert "negative" in str(exc) and exc.position is not None, exc
        else:
            raise AssertionError("no error")
        junk = [b"Z" * 4000 + bytes([i % 256]) for i in range(3000)]   # reuse freed memory
        print(own_or_released(rec, b"A"))
        assert next(records, None) is None                  # the error ended the iteration
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "released"


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy", "none"])
def test_the_reused_decompressor_never_stales_the_previous_responses_record(codec):
    a = build_fetch_response(12, 1, [("t", [(0, v2_batch(3, b"A", codec))])])
    b = build_fetch_response(12, 2, [("t", [(0, v2_batch(3, b"B", codec))])])
    ring = ring_with(a, b)
    first, second = ring.next_response(), ring.next_response()
    for rec in first.records(12):
        kept = rec
        assert own_or_released(kept, b"A") == "own"
    assert own_or_released(kept, b"A") == "released"         # the iterator moved on (ended)
    for rec in second.records(12):
        assert own_or_released(kept, b"A") == "released"
        assert own_or_released(rec, b"B") == "own"


def test_views_outlive_the_flyweight_and_show_their_own_bytes():
    batches = v2_batch(4, b"A", "gzip") + v2_batch(4, b"B", "gzip", base=4)
    other = v2_batch(4, b"C", "gzip")
    ring = ring_with(build_fetch_response(12, 1, [("t", [(0, batches)])]),
                     build_fetch_response(12, 2, [("t", [(0, other)])]))
    first, second = ring.next_response(), ring.next_response()
    views = [(rec.value_view, rec.key) for rec in first.records(12)]
    list(second.records(12))                                   # reuses the decompressor
    first.release()
    assert [bytes(v) for v, _ in views] == [b"A" * 100] * 4 + [b"B" * 100] * 4


def test_after_every_step_the_previous_record_is_its_own_or_released():
    rng = random.Random(5)
    for _ in range(30):
        batches, fills, base = b"", [], 0
        for i in range(rng.randint(1, 5)):
            fill = bytes([65 + rng.randrange(26)])
            n = rng.randint(1, 4)
            batch = v2_batch(n, fill, rng.choice(["none", "gzip", "zstd"]), base)
            if rng.random() < 0.2:
                batch = with_records_count(batch, rng.choice([-1, -5, n + 3]))
            batches += batch
            fills += [fill] * n
            base += n
        ring = ring_with(build_fetch_response(12, 1, [("t", [(0, batches)])]))
        resp = ring.next_response()
        records = resp.records(12)
        previous = None
        while True:
            try:
                rec = next(records)
            except StopIteration:
                break
            except (CorruptRecordError, KafkaCodecError):
                if previous is not None:
                    assert own_or_released(*previous) == "released"
                continue
            if previous is not None:
                assert own_or_released(previous[0], rec.value[:1]) == "own"   # the same flyweight
            previous = (rec, fills[rec.offset])
            assert own_or_released(*previous) == "own"
        if previous is not None:
            assert own_or_released(*previous) == "released"
            if rng.random() < 0.5:
                resp.release()
            else:
                ring.close()
            assert own_or_released(*previous) == "released"


def test_release_and_close_kill_the_record_and_its_ring_views():
    ring = ring_with(build_fetch_response(12, 1, [("t", [(0, v2_batch(2, b"A"))])]))
    resp = ring.next_response()
    records = resp.records(12)
    rec = next(records)
    view = rec.value_view
    assert bytes(view) == b"A" * 100
    resp.release()
    for touch in (lambda: rec.value, lambda: rec.offset, lambda: rec.topic, lambda: bytes(view),
                  lambda: rec.headers, lambda: next(records), lambda: rec.copy()):
        with pytest.raises(BufferReleasedError):
            touch()
    assert "no record" in repr(rec)


# -- item 20 (ring part): repr never raises ----------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 3, 4, 9])
def test_response_repr_never_raises(size):
    ring = ring_with(struct.pack(">i", size) + b"\x07" * size, capacity=64)
    resp = ring.next_response()
    text = repr(resp)
    assert f"size={size}" in text and ("correlation_id=" in text) == (size >= 4)
    payload = resp.payload
    resp.release()
    assert "released" in repr(resp) and "released" in repr(payload)
    ring.close()
    assert "released" in repr(resp)


def test_a_response_of_another_ring_is_not_released_by_this_one():
    frame = struct.pack(">ii", 4, 1)
    one, two = ring_with(frame, capacity=64), ring_with(frame, capacity=64)
    mine, theirs = one.next_response(), two.next_response()
    with pytest.raises(ValueError, match="of this ring"):
        one.release_response(theirs)
    with pytest.raises(ValueError, match="of this ring"):
        one.release_response(None)
    assert not mine.released and not theirs.released


@pytest.mark.parametrize("name", ["Response", "RingView", "FetchRecord", "FetchRecords",
                                  "_Window"])
def test_ring_objects_made_outside_a_ring_raise_instead_of_crashing(name):
    # They used to dereference a missing ring (SIGSEGV): run where a crash is contained.
    code = textwrap.dedent(f"""
        from kafkacodec import _ring
        cls = getattr(_ring, "{name}")
        try:
            cls()
        except TypeError as exc:
            assert "come from a ResponseRingBuffer" in str(exc), exc
        else:
            raise AssertionError("constructed")
        obj = cls.__new__(cls)
        repr(obj)
        for name in dir(obj):
            if name.startswith("__") and name not in ("__bytes__", "__len__", "__next__"):
                continue
            try:
                attr = getattr(obj, name)
                if callable(attr):
                    attr()
            except (TypeError, StopIteration):
                pass
        try:
            memoryview(obj)
        except TypeError:
            pass
        print("ok")
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.strip() == "ok"


# -- item 7: close() during a GIL-free recv_into() ---------------------------------------------
def test_close_during_a_blocked_recv_keeps_the_pool_block_until_recv_returns():
    capacity = 4096
    pool = SimpleMemoryPool(capacity, capacity, strict=True)
    ring = ResponseRingBuffer(capacity, pool)
    left, right = socket.socketpair()
    outcome = []

    def receive():
        try:
            outcome.append(ring.recv_into(right))
        except Exception as exc:                     # noqa: BLE001 - reported below
            outcome.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    time.sleep(0.3)                                  # blocked in recv() without the GIL
    assert thread.is_alive()
    ring.close()
    reused = pool.try_allocate(capacity)             # the block, if close() gave it back
    if reused is not None:
        reused[:] = bytes(capacity)
    left.sendall(b"\xAB" * 64)
    thread.join(10)
    assert not thread.is_alive()
    if reused is not None:
        assert bytes(reused) == bytes(capacity), "socket bytes landed in a block handed out again"
        pytest.fail("close() returned the block while recv() could still write into it")
    assert isinstance(outcome[0], BufferReleasedError), outcome
    reused = pool.try_allocate(capacity)             # given back once recv() returned
    assert reused is not None
    left.close()
    right.close()


def test_close_during_a_decompression_keeps_the_memory_until_it_is_done():
    # The iterating thread reads the response (compressed bytes in the ring) without the GIL
    # while the main thread closes the ring: it ends with its own records or
    # BufferReleasedError, and the pool gets its block back once, after the thread is done.
    pool = SimpleMemoryPool(1 << 20, 1 << 20, strict=True)
    frame = build_fetch_response(12, 1, [("t", [(0, b"".join(
        v2_batch(4, bytes([65 + i]), "gzip", base=4 * i, size=50_000) for i in range(10)))])])
    ring = ResponseRingBuffer(1 << 20, pool)
    ring.feed(frame)
    resp = ring.next_response()
    outcome = []

    def iterate():
        try:
            for rec in resp.records(12):
                assert rec.value == bytes([65 + rec.offset // 4]) * 50_000
            outcome.append("done")
        except BufferReleasedError:
            outcome.append("released")
        except BaseException as exc:                  # noqa: BLE001 - reported below
            outcome.append(exc)

    thread = threading.Thread(target=iterate)
    thread.start()
    time.sleep(0.005)
    ring.close()
    thread.join(60)
    assert outcome in (["done"], ["released"]), outcome
    gc.collect()
    assert pool.available_memory == 1 << 20


# -- concurrency: one ring, many threads -------------------------------------------------------
# Run in a fresh interpreter: without the guards these crash (SIGSEGV), which must not take
# the test run along.
def run_isolated(scenario):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        import test_ring_lifetime
        test_ring_lifetime.{scenario.__name__}()
        print("ok")
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert result.stdout.strip().endswith("ok")


def test_one_ring_shared_by_threads_works_or_says_it_is_in_use():
    run_isolated(shared_ring)


def test_one_records_iterator_shared_by_threads_works_or_says_it_is_in_use():
    run_isolated(shared_iterator)


def shared_ring():
    rng = random.Random(11)
    frames = [build_fetch_response(12, cid, [("t", [(0, v2_batch(
        rng.randint(1, 5), bytes([65 + cid % 26]), rng.choice(["none", "gzip", "zstd"]), base=cid * 10))])])
        for cid in range(300)]
    stream = b"".join(frames)
    ring = ResponseRingBuffer(max(map(len, frames)) * 4 + 64)
    left, right = socket.socketpair()
    right.settimeout(None)
    stop = threading.Event()
    guard_seen = threading.Event()
    results, problems, in_use = {}, [], []
    lock = threading.Lock()

    def saw_in_use(exc):
        in_use.append(exc)
        guard_seen.set()

    def sender():
        # Nothing is sent until the writer-side guard has refused a call: with no bytes to
        # read, a receiver waits inside recv_into() (the GIL released, the ring's writer
        # taken), so the meddler or the other receiver is refused, whatever the timing.
        while not guard_seen.wait(0.01):
            if stop.is_set():
                return
        pos = 0
        while pos < len(stream):
            n = rng.choice((1, 7, 100, 3000))
            left.sendall(stream[pos:pos + n])
            pos += n
            if rng.random() < 0.05:
                time.sleep(0.001)
        left.shutdown(socket.SHUT_WR)

    def receiver():
        while not stop.is_set():
            try:
                if ring.recv_into(right) == 0 and ring.eof:
                    return
            except KafkaCodecError as exc:
                if not isinstance(exc, ConcurrentUseError):
                    problems.append(exc)
                    return
                saw_in_use(exc)
                time.sleep(0)

    def meddler():
        while not stop.is_set():
            for call in (lambda: ring.feed(b""), ring.writable):
                try:
                    call()
                except KafkaCodecError as exc:
                    if not isinstance(exc, ConcurrentUseError):
                        problems.append(exc)
                    else:
                        saw_in_use(exc)
            time.sleep(0)

    def consumer():
        while not stop.is_set():
            resp = ring.next_response()
            if resp is None:
                time.sleep(0)
                continue
            try:
                got = [(rec.offset, rec.value) for rec in resp.records(12)]
                with lock:
                    results[resp.correlation_id] = got
            except Exception as exc:                 # noqa: BLE001 - reported below
                problems.append(exc)
            finally:
                resp.release()

    threads = [threading.Thread(target=f) for f in
               (sender, receiver, receiver, meddler, consumer, consumer)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while len(results) < len(frames) and not problems and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    left.close()
    for t in threads:
        t.join(30)
    right.close()
    assert not problems, problems[:3]
    assert len(results) == len(frames)
    for cid, got in results.items():
        n = len(got)
        assert got == [(cid * 10 + i, bytes([65 + cid % 26]) * 100) for i in range(n)]
    assert in_use, "the writer-side guard was never exercised"


def shared_iterator():
    batches = b"".join(v2_batch(3, bytes([65 + i]), "gzip", base=3 * i, size=50_000)
                       for i in range(20))
    ring = ring_with(build_fetch_response(12, 1, [("t", [(0, batches)])]))
    records = ring.next_response().records(12)
    seen, problems, in_use = [], [], []

    def work():
        while True:
            try:
                # the flyweight is shared too: what one thread reads may be the record another
                # thread's next() put there, but copy() is one consistent record
                _, _, offset, _, key, value, _ = next(records).copy()
                seen.append((offset, key, value))
            except StopIteration:
                return
            except BufferReleasedError:
                continue                              # another thread moved the flyweight on
            except KafkaCodecError as exc:
                (in_use if isinstance(exc, ConcurrentUseError) else problems).append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not problems, problems[:3]
    assert seen
    for offset, key, value in seen:
        assert key == b"k%d" % offset and value == bytes([65 + offset // 3]) * 50_000
