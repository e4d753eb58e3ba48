"""The cyclic garbage collector clearing a reference cycle that holds kafkacodec objects over a
caller's buffer never crashes (issue 14).

The collector clears the objects of a dead cycle one at a time, in the order they were tracked,
and every buffer export released along the way calls back into its exporter: an exporter
whose fields were already cleared (set to None) then worked on None and the process died
(SIGSEGV).  Each scenario builds such cycles, with the kafkacodec objects created before the
object that closes the cycle (so they are cleared first), while they hold live exports, and
collects them: from the thread that made them, and from another thread with a threshold of 1
(collections run at every allocation, in whatever thread allocates).  The child prints what it
read from the objects before dropping them, checked against the builder's input."""

from __future__ import annotations

import os
import pathlib

import pytest
from fetch_fixtures import build_fetch_response
from isolated import run_python

import kafkacodec


def build(codec: str) -> bytes:
    """The child's PLAIN and LZ4 batches (the same code runs there)."""
    b = kafkacodec.MemoryRecordsBuilder(magic=2, compression=codec, base_offset=100)
    for i in range(20):
        b.append(1000 + i, b"k%d" % i, b"v%d" % i * 5)
    return bytes(b.build())


PRELUDE = """
import gc, sys, threading, tempfile, os
import kafkacodec
from kafkacodec import MemoryRecords, MemoryRecordsBuilder, FileRecords

def build(codec):
    b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=100)
    for i in range(20):
        b.append(1000 + i, b"k%d" % i, b"v%d" % i * 5)
    return bytes(b.build())

PLAIN, LZ4 = build("none"), build("lz4")
DIR = tempfile.mkdtemp()
PATH = os.path.join(DIR, "00000000000000000100.log")
with open(PATH, "wb") as f:
    f.write(PLAIN + LZ4)

class Cycle:
    # Made after the objects it holds: the collector clears them before it.
    def __init__(self, *held):
        self.held = held
        self.me = self

def run(make, rounds):
    seen = set()
    for _ in range(rounds):
        seen.add(make())
    return seen
"""

SCENARIOS = {
    # Records.__releasebuffer__ on a cleared record set (its _buf set to None)
    "memory_records_buffer": """
def make():
    records = MemoryRecords(memoryview(bytearray(PLAIN)))
    view = records.buffer
    Cycle(records, view)
    return bytes(view[-4:]) == PLAIN[-4:]
""",
    # the same over a bytearray (no memoryview for the collector to clear), with a batch's view
    "bytearray_records_buffer": """
def make():
    records = MemoryRecords(bytearray(PLAIN + LZ4))
    view = records.buffer
    batch = next(records.batches())
    raw = batch.raw
    Cycle(records, view, batch, raw)
    return (bytes(view[-4:]) == LZ4[-4:], batch.base_offset)
""",
    # a batch's raw view and the shallow iterator, over a slice of a memoryview
    "batches": """
def make():
    records = MemoryRecords(memoryview(PLAIN + LZ4)[0:len(PLAIN) + len(LZ4)])
    it = records.batches()
    batch = next(it)
    raw = batch.raw
    Cycle(records, it, batch, raw, records.buffer)
    return (batch.base_offset, len(raw))
""",
    # a record iterator inside a compressed batch: it pins the Decompressor's chunk
    "records_iterator": """
def make():
    records = MemoryRecords(memoryview(bytearray(LZ4)))
    it = records.records()
    first = next(it)
    Cycle(records, it, first, records.buffer)
    return (first.offset, first.value)
""",
    # FileRecords: a mapping, its guard, and views of it
    "file_records": """
def make():
    records = FileRecords.open(PATH)
    batch = next(records.batches())
    it = records.records()
    first = next(it)
    Cycle(records, batch, batch.raw, records.buffer, it, records.slice(0, len(PLAIN)))
    return (first.offset, batch.size_in_bytes)
""",
    # record sets over the Decompressor's output and over a pool block
    "decompressor_and_pool": """
from kafkacodec.compression import Decompressor
from kafkacodec import SimpleMemoryPool
pool = SimpleMemoryPool(1 << 20, 1 << 16, True)
def make():
    block = pool.try_allocate(len(PLAIN))
    block[:] = PLAIN
    in_pool = MemoryRecords(block)
    inner = next(MemoryRecords(LZ4).batches())
    out = Decompressor().decompress("lz4", 2, memoryview(LZ4)[61:])
    decompressed = MemoryRecords(out)
    Cycle(in_pool, in_pool.buffer, block, decompressed, decompressed.buffer, out, inner)
    return (next(in_pool.batches()).base_offset, out.nbytes > 0)
""",
    # an ArrowDecoder and its input
    "arrow_decoder": """
from kafkacodec.arrow import ArrowDecoder
def make():
    records = MemoryRecords(memoryview(bytearray(PLAIN + LZ4)))
    decoder = ArrowDecoder("t", 0)
    batch, position = decoder.decode(records.buffer)
    Cycle(records, decoder, records.buffer, batch)
    return (batch.num_rows, position == records.size_in_bytes)
""",
    # the consumer core's ring (over a pool block) with a response, its views, its records
    # iterator mid-batch (compressed: the Decompressor's chunk) and a record set over a view
    "ring": """
from kafkacodec import ResponseRingBuffer, SimpleMemoryPool
FRAME = bytes.fromhex("FRAME_HEX")
pool = SimpleMemoryPool(1 << 22, 1 << 20, True)
def make():
    ring = ResponseRingBuffer(len(FRAME) + 64, pool)
    ring.feed(FRAME)
    response = ring.next_response()
    payload = response.payload
    view = memoryview(payload)
    fetched = response.records(12)
    first = next(fetched)
    inner = MemoryRecords(view)
    Cycle(ring, response, payload, view, fetched, first, first.value_view, inner, inner.buffer)
    return (first.offset, first.value)
""",
}

MAIN = """
from collections import Counter
HELD = {"MemoryRecords", "FileRecords", "RecordBatch", "_RecordIterator", "_BatchIterator",
        "_Buffer", "ResponseRingBuffer", "Response", "RingView", "FetchRecords", "FetchRecord",
        "ArrowDecoder", "memoryview", "Cycle"}
def alive():
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects() if type(o).__name__ in HELD)
before = alive()
gc.disable()
same = run(make, 300)
gc.enable()
gc.set_threshold(1)
other = []
def worker():
    other.append(run(make, 300))
    gc.collect()
t = threading.Thread(target=worker)
t.start()
while t.is_alive():
    gc.collect()
t.join()
gc.collect()
left = sorted(name for name, n in (alive() - before).items() if n >= 100)   # one a round
print(sorted(same), sorted(other[0]), left, gc.garbage)
"""

EXPECTED = {
    "memory_records_buffer": "[True]",
    "batches": "[(100, %d)]",
    "bytearray_records_buffer": "[(True, 100)]",
    "records_iterator": "[(100, b'v0v0v0v0v0')]",
    "ring": "[(100, b'v0v0v0v0v0')]",
    "file_records": "[(100, %d)]",
    "decompressor_and_pool": "[(100, True)]",
    "arrow_decoder": "[(40, True)]",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_collecting_a_cycle_that_holds_exports_does_not_crash(scenario: str) -> None:
    expected = EXPECTED[scenario].replace("%d", str(len(build("none"))))
    frame = build_fetch_response(12, 1, [("t", [(0, build("lz4"))])])
    code = PRELUDE + SCENARIOS[scenario].replace("FRAME_HEX", frame.hex()) + MAIN
    run = run_python(code, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    # what the cycles held was freed, not left a round at a time (a cycle is still collected
    # when its kafkacodec members are no_gc_clear)
    assert run.stdout.strip() == f"{expected} {expected} [] []", run.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
@pytest.mark.parametrize("exporter", ["records.buffer", "next(records.batches()).raw"])
def test_a_view_released_by_the_collector_still_counts_on_the_shared_mapping(
        exporter: str, tmp_path: pathlib.Path) -> None:
    """The collector cleared a FileRecords (or RecordBatch) before releasing the view it
    exported: the release then decremented a count in None instead of the shared mapping's, so
    closing a slice of the same file never unmapped it (or crashed, depending on what lay there)."""
    builder = kafkacodec.MemoryRecordsBuilder(magic=2)
    for i in range(10):
        builder.append(1000 + i, b"k%d" % i, b"v%d" % i)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(builder.build())
    run = run_python(f"""
        import gc
        from kafkacodec import FileRecords
        PATH = {str(path)!r}
        class Cycle:
            def __init__(self, *held):
                self.held = held
                self.me = self
        def mapped():
            with open("/proc/self/maps") as maps:
                return PATH in maps.read()
        gc.disable()
        records = FileRecords.open(PATH)
        part = records.slice(0, records.size_in_bytes)
        Cycle(records, {exporter})
        del records
        before = mapped()
        gc.collect()
        part.close()
        print(before, mapped())
        """, timeout=60)
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert run.stdout.split() == ["True", "False"], run.stdout
