"""ResponseRingBuffer (KAFKA-2045): framing, skip headers, back-pressure, lifetimes, sockets."""

import asyncio
import gc
import random
import socket
import struct
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kafkacodec import (BufferReleasedError, CorruptRecordError, MemoryPoolError,
                        RecordTooLargeError, ResponseRingBuffer, SimpleMemoryPool)


def frame(correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def drain(ring, out):
    while (resp := ring.next_response()) is not None:
        out.append((resp.correlation_id, bytes(resp.payload)))
        resp.release()


def test_responses_come_out_whole_from_byte_by_byte_input():
    frames = [frame(i, bytes([i]) * (i * 7)) for i in range(20)]
    ring = ResponseRingBuffer(200)
    out = []
    for byte in b"".join(frames):
        assert ring.feed(bytes([byte])) == 1
        drain(ring, out)
    assert out == [(i, struct.pack(">i", i) + bytes([i]) * (i * 7)) for i in range(20)]
    assert ring.skips > 0 and ring.responses == 20


def test_skip_header_only_when_the_tail_is_too_short():
    ring = ResponseRingBuffer(40)
    first = frame(1, b"a" * 10)            # 18 bytes on the wire, 19 in the ring
    ring.feed(first)
    r1 = ring.next_response()
    assert r1.offset == 0
    ring.feed(first)                        # fits at 19..37
    r2 = ring.next_response()
    assert r2.offset == 19 and ring.skips == 0
    r1.release()
    ring.feed(frame(3, b"c" * 10))          # 37 + 19 > 40: skip to the front
    r3 = ring.next_response()
    assert r3.offset == 0 and ring.skips == 1
    assert r3.correlation_id == 3 and r2.correlation_id == 1


def test_back_pressure_never_overwrites_unread_data():
    ring = ResponseRingBuffer(64)
    data = frame(1, b"x" * 40) + frame(2, b"y" * 40)
    accepted = ring.feed(data)
    assert accepted == 48 + 4               # the first response and the next size prefix
    assert ring.writable() == 0 and ring.feed(data[accepted:]) == 0
    r1 = ring.next_response()
    assert ring.next_response() is None
    r1.release()
    assert ring.writable() > 0
    assert ring.feed(data[accepted:]) == len(data) - accepted
    r2 = ring.next_response()
    assert r2.correlation_id == 2 and bytes(r2.payload)[4:] == b"y" * 40 and r2.offset == 0


def test_a_response_larger_than_the_ring_names_both_sizes():
    ring = ResponseRingBuffer(100)
    with pytest.raises(RecordTooLargeError, match=r"96 bytes.*101\).*ring of 100 bytes"):
        ring.feed(frame(1, b"z" * 92))
    with pytest.raises(RecordTooLargeError):  # the stream stays broken
        ring.feed(b"more")
    ResponseRingBuffer(101).feed(frame(1, b"z" * 92))   # exactly fits


def test_negative_size_prefix_is_corrupt():
    ring = ResponseRingBuffer(100)
    with pytest.raises(CorruptRecordError, match="invalid response size -2"):
        ring.feed(struct.pack(">i", -2))


def test_response_without_correlation_id():
    ring = ResponseRingBuffer(100)
    ring.feed(struct.pack(">i", 2) + b"ab")
    resp = ring.next_response()
    assert resp.size == 2 and bytes(resp.payload) == b"ab"
    with pytest.raises(CorruptRecordError, match="no correlation id"):
        resp.correlation_id


def test_views_raise_after_release():
    ring = ResponseRingBuffer(100)
    ring.feed(frame(7, b"hello world"))
    resp = ring.next_response()
    payload = resp.payload
    piece = payload[4:9]
    assert piece == b"hello" and payload[4] == ord("h") and len(payload) == 15
    assert payload.tobytes() == resp.copy() == struct.pack(">i", 7) + b"hello world"
    kept = resp.copy()
    resp.release()
    resp.release()                                       # idempotent
    for touch in (lambda: bytes(payload), lambda: piece[0], lambda: resp.correlation_id,
                  lambda: resp.payload, lambda: memoryview(piece), lambda: payload == b"",
                  lambda: payload.tobytes()):
        with pytest.raises(BufferReleasedError):
            touch()
    assert payload.released and resp.released
    assert kept == struct.pack(">i", 7) + b"hello world"


def test_a_live_raw_export_makes_the_ring_wait_instead_of_overwriting():
    ring = ResponseRingBuffer(40)
    ring.feed(frame(1, b"A" * 20))
    resp = ring.next_response()
    raw = np.frombuffer(resp.payload, dtype=np.uint8)     # a raw buffer export
    resp.release()
    assert ring.unreleased == 1                           # the bytes stay
    data = frame(2, b"B" * 20)
    accepted = ring.feed(data)
    assert accepted < len(data)                            # cannot go where `raw` points
    assert raw.tobytes() == struct.pack(">i", 1) + b"A" * 20
    with pytest.raises(BufferReleasedError):
        ring.close()                                       # not while the export lives
    del raw
    gc.collect()
    assert ring.unreleased == 0
    assert ring.feed(data[accepted:]) == len(data) - accepted
    assert ring.next_response().correlation_id == 2
    ring.close()
    with pytest.raises(BufferReleasedError):
        ring.next_response()
    with pytest.raises(BufferReleasedError):
        ring.feed(b"x")


def test_ring_memory_comes_from_the_pool():
    pool = SimpleMemoryPool(1000, 600, strict=True)
    ring = ResponseRingBuffer(600, pool)
    assert pool.available_memory == 400
    with pytest.raises(MemoryPoolError, match="refused 600 bytes"):
        ResponseRingBuffer(600, pool)
    ring.feed(frame(5, b"pooled"))
    resp = ring.next_response()
    assert resp.correlation_id == 5
    resp.release()
    ring.close()
    assert pool.available_memory == 1000
    other = ResponseRingBuffer(100, pool)
    del other
    gc.collect()
    assert pool.available_memory == 1000


def test_constructor_arguments():
    with pytest.raises(ValueError):
        ResponseRingBuffer(4)
    with pytest.raises(ValueError):
        ResponseRingBuffer(100, SimpleMemoryPool(1000, 50))   # Kafka: larger than max single


def test_responses_may_be_released_out_of_order():
    ring = ResponseRingBuffer(60)
    ring.feed(frame(1, b"1" * 10) + frame(2, b"2" * 10) + frame(3, b"3" * 10))
    a, b, c = ring.next_response(), ring.next_response(), ring.next_response()
    b.release()
    assert ring.unreleased == 3 and c.payload[4:] == b"3" * 10
    a.release()
    assert ring.unreleased == 1
    c.release()
    assert ring.unreleased == 0 and ring.buffered_bytes == 0


# -- properties ------------------------------------------------------------------------------
def put_feed(ring, data):
    return ring.feed(data)


def put_buffered(ring, data):
    """The BufferedProtocol path: greedy windows, several responses per write."""
    if not data or ring.writable() == 0:
        return 0
    window = ring.get_buffer(-1)
    n = min(len(window), len(data))
    window[:n] = data[:n]
    del window
    ring.buffer_updated(n)
    return n


@pytest.mark.parametrize("put", [put_feed, put_buffered])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_property_complete_in_order_no_overwrite_skip_exactly_when_needed(put, data):
    sizes = data.draw(st.lists(st.integers(0, 300), min_size=1, max_size=40))
    capacity = data.draw(st.integers(max(sizes) + 4 + 5, max(sizes) + 4 + 5 + 600))
    frames = [frame(i, bytes([(i * 31 + j) & 0xFF for j in range(n)])) for i, n in enumerate(sizes)]
    stream = b"".join(frames)
    ring = ResponseRingBuffer(capacity)
    hold = data.draw(st.integers(0, 4))         # keep this many responses unreleased
    held, seen = [], []
    expected_next = 0                            # where the next response's header should go
    skips = 0
    pos = 0
    while len(seen) < len(frames):
        chunk = data.draw(st.integers(1, 700))
        accepted = put(ring, stream[pos:pos + chunk])
        pos += accepted
        while (resp := ring.next_response()) is not None:
            i = len(seen)
            need = len(frames[i]) + 1
            # the skip header is used exactly when the tail is too short
            if expected_next + need <= capacity:
                assert resp.offset == expected_next
            else:
                assert resp.offset == 0
                skips += 1
            expected_next = resp.offset + need
            seen.append(resp.correlation_id)
            held.append((resp, frames[i][4:]))
        for resp, body in held:                  # nothing unread was overwritten
            assert resp.payload == body
        if accepted == 0 or len(held) > hold:
            if not held:
                assert accepted or pos == len(stream)
                continue
            resp, body = held.pop(0)
            assert bytes(resp.payload) == body
            resp.release()
    assert seen == list(range(len(frames)))
    assert ring.skips == skips


# -- sockets ---------------------------------------------------------------------------------
def serve(frames, seed):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run():
        conn, _ = listener.accept()
        rng = random.Random(seed)
        stream = b"".join(frames)
        pos = 0
        with conn:
            while pos < len(stream):
                n = rng.choice((1, 3, 7, 100, 1000, 5000, 20000))
                conn.sendall(stream[pos:pos + n])
                pos += n
        listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, thread


def test_loopback_tcp_random_chunks_many_wraps():
    rng = random.Random(1)
    frames = [frame(i, rng.randbytes(rng.choice((0, 10, 500, 3000, 9000)))) for i in range(600)]
    port, thread = serve(frames, seed=2)
    ring = ResponseRingBuffer(16384)
    out = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while True:
            if ring.writable() == 0:
                assert ring.pending > 0
            elif ring.recv_into(sock) == 0:
                break
            while (resp := ring.next_response()) is not None:
                assert resp.payload == frames[len(out)][4:]
                out.append(resp.correlation_id)
                resp.release()
    thread.join()
    assert ring.eof and out == list(range(600))
    assert ring.skips > 20                   # wrapped many times


def test_recv_into_with_a_timeout_socket():
    frames = [frame(i, bytes(1000)) for i in range(50)]
    port, thread = serve(frames, seed=3)
    ring = ResponseRingBuffer(3000)
    count = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5.0)
        while ring.recv_into(sock) or not ring.eof:
            while (resp := ring.next_response()) is not None:
                assert resp.correlation_id == count
                count += 1
                resp.release()
    thread.join()
    assert count == 50


def test_asyncio_buffered_protocol_reads_straight_into_the_ring():
    rng = random.Random(4)
    frames = [frame(i, rng.randbytes(rng.randint(0, 4000))) for i in range(300)]
    port, thread = serve(frames, seed=5)

    class RingProtocol(asyncio.BufferedProtocol):
        def __init__(self, ring, done):
            self.ring, self.done, self.out = ring, done, []

        def get_buffer(self, sizehint):
            return self.ring.get_buffer(sizehint)

        def buffer_updated(self, nbytes):
            self.ring.buffer_updated(nbytes)
            while (resp := self.ring.next_response()) is not None:
                assert resp.payload == frames[len(self.out)][4:]
                self.out.append(resp.correlation_id)
                resp.release()

        def eof_received(self):
            self.done.set_result(None)

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        ring = ResponseRingBuffer(8192)
        transport, protocol = await loop.create_connection(
            lambda: RingProtocol(ring, done), "127.0.0.1", port)
        await asyncio.wait_for(done, 20)
        transport.close()
        return protocol.out, ring.skips

    out, skips = asyncio.run(main())
    thread.join()
    assert out == list(range(300)) and skips > 10


def test_memory_stays_flat_over_thousands_of_responses():
    import tracemalloc
    frames = b"".join(frame(i, bytes(100 + i % 50)) for i in range(200))
    ring = ResponseRingBuffer(4096)

    def run(rounds):
        for _ in range(rounds):
            pos = 0
            while pos < len(frames):
                pos += ring.feed(frames[pos:])
                while (resp := ring.next_response()) is not None:
                    resp.correlation_id
                    resp.release()

    run(2)
    tracemalloc.start()
    run(1)
    one = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    run(20)                                  # 4000 responses
    twenty = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert twenty <= one + 512               # the peak does not grow with the responses


def test_a_dropped_response_frees_its_slot_unless_a_view_keeps_it():
    ring = ResponseRingBuffer(64)
    ring.feed(frame(1, b"a" * 20) + frame(2, b"b" * 20))
    ring.next_response()                         # dropped at once, never released
    assert ring.unreleased == 1
    payload = ring.next_response().payload       # the response lives on through its view
    gc.collect()
    assert ring.unreleased == 1 and payload[4:] == b"b" * 20
    del payload
    assert ring.unreleased == 0 and ring.buffered_bytes == 0


def test_a_bad_size_inside_a_greedy_read_keeps_the_responses_before_it():
    ring = ResponseRingBuffer(256)
    stream = frame(1, b"one") + frame(2, b"two") + struct.pack(">i", -5) + b"junk"
    with pytest.raises(CorruptRecordError, match="invalid response size -5"):
        put_buffered(ring, stream)
    assert [ring.next_response().correlation_id for _ in range(2)] == [1, 2]
    assert ring.next_response() is None
    with pytest.raises(CorruptRecordError):
        ring.get_buffer(-1)                      # the stream stays broken
    too_big = ResponseRingBuffer(64)
    with pytest.raises(RecordTooLargeError, match="ring of 64 bytes"):
        put_buffered(too_big, frame(1, b"x") + frame(2, b"y" * 100))
    assert too_big.next_response().correlation_id == 1
