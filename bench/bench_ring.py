"""The KAFKA-2045 ring against the usual way of reading responses, in the same run.

Usual path (what kafka-python / aiokafka do): every recv() returns a new bytes object, chunks
are concatenated, each response is sliced out as new bytes, then decoded (kafka-python's
FetchResponse + MemoryRecords, or aiokafka's FetchResponse + its C MemoryRecords).
Ring path: feed() the same chunks into the ring, next_response(), iterate the flyweight,
release().

    /work/venv/bin/python -m pytest bench/bench_ring.py --benchmark-enable -q \
        --benchmark-columns=mean,ops --benchmark-sort=name
"""

import os
import struct
import sys
import tracemalloc

import pytest

from kafkacodec import ResponseRingBuffer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from fetch_fixtures import build_fetch_response, build_records  # noqa: E402

CHUNK = 64 * 1024          # bytes per simulated recv()
STREAM_BYTES = 4 << 20     # per round


def make_stream(response_size):
    """Fetch v4 responses of about `response_size` bytes, one partition, one v2 batch each."""
    value = b"v" * 90
    per_batch = max(1, (response_size - 150) // 100)
    frame = build_fetch_response(4, 0, [("bench", [(0, build_records(
        [(1_700_000_000_000 + i, b"key%05d" % i, value, []) for i in range(per_batch)]))])])
    count = max(1, STREAM_BYTES // len(frame))
    stream = frame * count
    return stream, len(frame), count, per_batch


STREAMS = {"1KiB": make_stream(1024), "64KiB": make_stream(64 * 1024)}


def chunks_of(stream):
    view = memoryview(stream)
    return [view[i:i + CHUNK] for i in range(0, len(stream), CHUNK)]


# -- framing only: bytes/s ----------------------------------------------------------------------
def ring_frames(chunks, ring):
    n = 0
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            pos += ring.feed(chunk[pos:] if pos else chunk)
            while (resp := ring.next_response()) is not None:
                resp.correlation_id
                resp.release()
                n += 1
    return n


def split_responses(buffer, on_response):
    """Slice every complete response out of `buffer` (a bytearray) as new bytes; drop the
    consumed prefix once (asyncio StreamReader / kafka-python do no worse)."""
    pos, total = 0, len(buffer)
    while total - pos >= 4:
        size = struct.unpack_from(">i", buffer, pos)[0]
        if total - pos < 4 + size:
            break
        on_response(bytes(buffer[pos + 4:pos + 4 + size]))   # the response as new bytes
        pos += 4 + size
    del buffer[:pos]


def usual_frames(chunks):
    """The usual way: recv -> new bytes, buffer += chunk, slice each response out."""
    n = 0
    out = []
    buffer = bytearray()
    for chunk in chunks:
        buffer += bytes(chunk)                     # recv() hands out a new bytes object
        out.clear()
        split_responses(buffer, out.append)
        for response in out:
            struct.unpack_from(">i", response)     # correlation id
        n += len(out)
    return n


@pytest.mark.parametrize("impl", ["kafkacodec-ring"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_bytes_ring(benchmark, size, impl):
    benchmark.group = f"bytes {size}"
    stream, frame_len, count, _ = STREAMS[size]
    chunks = chunks_of(stream)
    ring = ResponseRingBuffer(4 * max(frame_len + 5, CHUNK))
    benchmark.extra_info["bytes"] = len(stream)
    assert benchmark(ring_frames, chunks, ring) == count


@pytest.mark.parametrize("impl", ["usual"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_bytes_usual(benchmark, size, impl):
    benchmark.group = f"bytes {size}"
    stream, _, count, _ = STREAMS[size]
    chunks = chunks_of(stream)
    benchmark.extra_info["bytes"] = len(stream)
    assert benchmark(usual_frames, chunks) == count


# -- records/s ------------------------------------------------------------------------------------
def ring_records(chunks, ring):
    n = 0
    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            pos += ring.feed(chunk[pos:] if pos else chunk)
            while (resp := ring.next_response()) is not None:
                for rec in resp.records(4):
                    rec.offset
                    rec.value_length
                    n += 1
                resp.release()
    return n


def usual_records(chunks, decode_response, memory_records):
    n = 0
    buffer = bytearray()
    responses = []
    for chunk in chunks:
        buffer += bytes(chunk)
        responses.clear()
        split_responses(buffer, responses.append)
        for response in responses:
            for topic_partitions in decode_response(response):
                records = memory_records(topic_partitions)
                while (batch := records.next_batch()) is not None:
                    for rec in batch:
                        rec.offset
                        len(rec.value)
                        n += 1
    return n


def kafka_python_decoder():
    from kafka.protocol.consumer import FetchResponse
    from kafka.record.memory_records import MemoryRecords

    def decode(response):
        decoded = FetchResponse.decode(response, version=4, header=True)
        return [p.records for t in decoded.responses for p in t.partitions if p.records]
    return decode, MemoryRecords


def aiokafka_decoder():
    from aiokafka.protocol.fetch import FetchResponse_v4
    from aiokafka.record.memory_records import MemoryRecords

    def decode(response):
        decoded = FetchResponse_v4.decode(response[4:])          # after the correlation id
        return [p[-1] for _, parts in decoded.topics for p in parts if p[-1]]
    return decode, MemoryRecords


@pytest.mark.parametrize("impl", ["kafkacodec-ring"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_records_ring(benchmark, size, impl):
    benchmark.group = f"records {size}"
    stream, frame_len, count, per_batch = STREAMS[size]
    chunks = chunks_of(stream)
    ring = ResponseRingBuffer(4 * max(frame_len + 5, CHUNK))
    benchmark.extra_info["records"] = count * per_batch
    assert benchmark(ring_records, chunks, ring) == count * per_batch


@pytest.mark.parametrize("peer", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_records_usual(benchmark, size, peer):
    benchmark.group = f"records {size}"
    stream, _, count, per_batch = STREAMS[size]
    chunks = chunks_of(stream)
    decode, memory_records = (kafka_python_decoder if peer == "kafka-python" else aiokafka_decoder)()
    benchmark.extra_info["records"] = count * per_batch
    rounds = {"rounds": 1, "iterations": 1} if peer == "kafka-python" else {"rounds": 3, "iterations": 1}
    assert benchmark.pedantic(usual_records, (chunks, decode, memory_records), **rounds) == count * per_batch


# -- allocations per response (tracemalloc) -------------------------------------------------------
def traced(fn, *args):
    """(peak traced bytes, net traced blocks) while fn runs."""
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    tracemalloc.reset_peak()
    start_current, _ = tracemalloc.get_traced_memory()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    net_blocks = sum(s.count_diff for s in after.compare_to(before, "filename"))
    return peak - start_current, net_blocks


@pytest.mark.parametrize("size", list(STREAMS))
def test_allocations_per_response(size, capsys):
    stream, frame_len, count, _ = STREAMS[size]
    chunks = chunks_of(stream)
    ring = ResponseRingBuffer(4 * max(frame_len + 5, CHUNK))
    ring_records(chunks, ring)                     # warm: recycled objects, decompressor
    ring_peak, ring_net = traced(ring_records, chunks, ring)
    decode, memory_records = aiokafka_decoder()
    usual_peak, usual_net = traced(usual_records, chunks, decode, memory_records)
    with capsys.disabled():
        print(f"\n{size}: {count} responses; peak traced bytes per run: ring {ring_peak} "
              f"({ring_peak / count:.1f}/response), usual {usual_peak} "
              f"({usual_peak / count:.1f}/response); net blocks ring {ring_net}, usual {usual_net}")
    assert ring_peak < usual_peak


# -- through a real socket (socketpair, a sender thread) ---------------------------------------
import socket  # noqa: E402
import threading  # noqa: E402


def over_socket(stream, receive):
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sender = threading.Thread(target=lambda: (a.sendall(stream), a.shutdown(socket.SHUT_WR)))
    sender.start()
    try:
        return receive(b)
    finally:
        sender.join()
        a.close()
        b.close()


def ring_receive(ring):
    def receive(sock):
        n = 0
        while ring.recv_into(sock) or not ring.eof:
            while (resp := ring.next_response()) is not None:
                resp.correlation_id
                resp.release()
                n += 1
        return n
    return receive


def usual_receive(sock):
    n = 0
    out = []
    buffer = bytearray()
    while chunk := sock.recv(CHUNK):
        buffer += chunk
        out.clear()
        split_responses(buffer, out.append)
        for response in out:
            struct.unpack_from(">i", response)
        n += len(out)
    return n


@pytest.mark.parametrize("impl", ["kafkacodec-ring"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_socket_ring(benchmark, size, impl):
    benchmark.group = f"socket {size}"
    stream, frame_len, count, _ = STREAMS[size]
    benchmark.extra_info["bytes"] = len(stream)
    result = benchmark.pedantic(
        lambda: over_socket(stream, ring_receive(ResponseRingBuffer(4 * max(frame_len + 5, CHUNK)))),
        rounds=5, iterations=1)
    assert result == count


@pytest.mark.parametrize("impl", ["usual"])
@pytest.mark.parametrize("size", list(STREAMS))
def test_socket_usual(benchmark, size, impl):
    benchmark.group = f"socket {size}"
    stream, _, count, _ = STREAMS[size]
    benchmark.extra_info["bytes"] = len(stream)
    assert benchmark.pedantic(lambda: over_socket(stream, usual_receive), rounds=5, iterations=1) == count
