"""SimpleMemoryPool against Kafka's SimpleMemoryPool contract (spec memory-pool.md §1-2) and
against Kafka's own class run in a JVM, plus what we add: bounded memory (an arena, the heap
beyond it), misuse detection, lifetimes, priority allocations, sharing between threads."""

import collections
import ctypes
import gc
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kafkacodec import MemoryPool, MemoryPoolError, SimpleMemoryPool
from kafkacodec._pool import ARENA_LIMIT
from kafkacodec._writer import WriteBuffer

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
SANITIZED = os.environ.get("KAFKACODEC_SANITIZED") == "1"


# -- Kafka's accounting written from its rules (spec memory-pool.md §2.2-2.3) -----------------
class KafkaModel:
    def __init__(self, size, max_single, strict):
        if size <= 0 or max_single <= 0 or max_single > size:
            raise ValueError("IllegalArgumentException")
        self.size, self.max_single, self.strict = size, max_single, strict
        self.available = size

    def try_allocate(self, n):
        if n < 1 or n > self.max_single:
            raise ValueError("IllegalArgumentException")
        if self.available < (n if self.strict else 1):
            return False
        self.available -= n
        return True

    def release(self, n):
        self.available += n


def address(view):
    holder = (ctypes.c_char * len(view)).from_buffer(view)
    addr = ctypes.addressof(holder)
    del holder
    return addr


def assert_disjoint(views):
    spans = sorted((address(b), len(b)) for b in views)
    for (a, n), (b, _) in zip(spans, spans[1:]):
        assert a + n <= b, "two live blocks share bytes"


@pytest.mark.parametrize("size, max_single", [(0, 1), (-5, 1), (10, 0), (10, -1), (10, 11)])
def test_constructor_rejects_what_kafka_rejects(size, max_single):
    for strict in (False, True):
        with pytest.raises(ValueError, match="positive size and max single allocation"):
            SimpleMemoryPool(size, max_single, strict)


def test_constructor_accepts_max_equal_to_size():
    pool = SimpleMemoryPool(10, 10)
    assert (pool.size, pool.available_memory, pool.is_out_of_memory) == (10, 10, False)


@pytest.mark.parametrize("n", [0, -1, 61])
def test_try_allocate_argument_errors(n):
    pool = SimpleMemoryPool(100, 60)
    with pytest.raises(ValueError, match="requested size"):
        pool.try_allocate(n)
    assert pool.available_memory == 100


# Scripted traces with Kafka's answers worked out by hand from SimpleMemoryPool.tryAllocate:
# (operation, argument, returns a buffer?, available afterwards, isOutOfMemory afterwards)
NON_STRICT_TRACE = [
    ("alloc", 60, True, 40, False),
    ("alloc", 60, True, -20, True),    # threshold is 1: 40 >= 1, available goes negative
    ("alloc", 1, False, -20, True),
    ("release", 0, None, 40, False),
    ("alloc", 50, True, -10, True),
    ("alloc", 1, False, -10, True),
    ("release", 1, None, 50, False),
    ("alloc", 50, True, 0, True),      # available == 0 counts as out of memory
    ("alloc", 1, False, 0, True),
    ("release", 2, None, 50, False),
    ("release", 3, None, 100, False),
]
STRICT_TRACE = [
    ("alloc", 60, True, 40, False),
    ("alloc", 60, False, 40, False),   # strict: needs the whole request available
    ("alloc", 41, False, 40, False),   # not out of memory, yet a larger request fails
    ("alloc", 40, True, 0, True),
    ("alloc", 1, False, 0, True),
    ("release", 1, None, 40, False),   # release the 40
    ("alloc", 30, True, 10, False),
    ("release", 0, None, 70, False),
    ("alloc", 60, True, 10, False),
    ("release", 2, None, 40, False),
    ("release", 3, None, 100, False),
]


@pytest.mark.parametrize("strict, trace", [(False, NON_STRICT_TRACE), (True, STRICT_TRACE)])
def test_trace_reproduces_kafka(strict, trace):
    pool = SimpleMemoryPool(100, 60, strict)
    model = KafkaModel(100, 60, strict)
    held = []                          # buffers in allocation order (released ones stay as None)
    for op, arg, expect_buffer, expect_available, expect_oom in trace:
        if op == "alloc":
            buf = pool.try_allocate(arg)
            assert (buf is not None) == expect_buffer == model.try_allocate(arg)
            if buf is not None:
                assert len(buf) == arg and not buf.readonly
                held.append(buf)
        else:
            buf = held[arg]
            model.release(len(buf))
            pool.release(buf)
        assert pool.available_memory == expect_available == model.available
        assert pool.is_out_of_memory is expect_oom
        assert pool.metrics()["memory-pool-free"] == expect_available
        assert pool.metrics()["memory-pool-used"] == 100 - expect_available


# arena_bytes: None = the default arena, 0 = every block from the heap, else a small arena so
# that most traces need the heap beyond it.
@settings(max_examples=200, deadline=None)
@given(strict=st.booleans(), size=st.integers(1, 400), arena=st.sampled_from([None, 0, 64]),
       data=st.data())
def test_random_traces_match_kafka_exactly(strict, size, arena, data):
    max_single = data.draw(st.integers(1, size))
    pool = SimpleMemoryPool(size, max_single, strict, arena_bytes=arena)
    model = KafkaModel(size, max_single, strict)
    held = []
    for step in range(data.draw(st.integers(1, 60))):
        if held and data.draw(st.booleans()):
            buf = held.pop(data.draw(st.integers(0, len(held) - 1)))
            model.release(len(buf))
            pool.release(buf)
        elif data.draw(st.booleans()):
            n = data.draw(st.integers(1, max_single))
            buf = pool.try_allocate(n)
            assert (buf is not None) == model.try_allocate(n)
            if buf is not None:
                buf[:] = bytes([step % 251]) * n
                held.append(buf)
        else:                          # the same accounting for a WriteBuffer's own block
            n = data.draw(st.integers(1, max_single))
            written = WriteBuffer()
            written.write(bytes([step % 251]) * n)
            buf = pool.try_adopt(written)
            assert (buf is not None) == model.try_allocate(n)
            assert len(written) == (0 if buf is not None else n)
            if buf is not None:
                assert len(buf) == n and not buf.readonly
                held.append(buf)
        assert pool.available_memory == model.available
        assert pool.is_out_of_memory == (model.available <= 0)
        assert pool.outstanding == len(held)
        assert pool.heap_bytes_in_use <= sum(len(b) for b in held) == size - pool.available_memory
    assert_disjoint(held)
    for buf in held:
        assert bytes(buf) == bytes([buf[0]]) * len(buf)      # nobody else wrote into it
        pool.release(buf)
    assert pool.available_memory == size and pool.outstanding == 0
    assert pool.heap_bytes_in_use == 0
    assert pool.largest_free_block == pool.arena_bytes      # the free list coalesced back


def test_a_fragmented_arena_serves_from_the_heap_as_kafka_grants():
    """Issue 17 item 2: a non-strict pool of 1000 with 600 + 399 out grants 600 (Kafka:
    available 1 >= 1) although the arena's free bytes are split in two."""
    pool = SimpleMemoryPool(1000, 600)
    one = pool.try_allocate(1)
    big = pool.try_allocate(600)
    pool.release(one)
    rest = pool.try_allocate(399)         # does not fit the 1-byte hole: placed after the 600
    assert pool.available_memory == 1 and pool.largest_free_block == 599
    extra = pool.try_allocate(600)
    assert extra is not None and len(extra) == 600
    assert pool.available_memory == -599 and pool.is_out_of_memory
    assert pool.heap_bytes_in_use == 600 and pool.outstanding == 3
    extra[:] = b"h" * 600
    assert_disjoint([big, rest, extra])
    assert pool.try_allocate(1) is None   # available -599 < 1: refused, as Kafka
    for buf in (extra, big, rest):
        pool.release(buf)
    assert pool.available_memory == 1000 and pool.heap_bytes_in_use == 0
    assert pool.largest_free_block == pool.arena_bytes == 1599


def test_a_fragmented_strict_arena_serves_from_the_heap():
    pool = SimpleMemoryPool(100, 50, strict=True)
    a, b, c = (pool.try_allocate(30) for _ in range(3))
    pool.release(b)                       # free: 30 bytes in the middle + 10 at the end
    d = pool.try_allocate(35)             # Kafka: 40 >= 35, granted
    assert d is not None and pool.available_memory == 5 and pool.heap_bytes_in_use == 35
    assert pool.largest_free_block == 30
    assert pool.try_allocate(6) is None   # strict: 5 < 6
    e = pool.try_allocate(5)
    assert pool.heap_bytes_in_use == 35 and pool.largest_free_block == 25   # e: first fit
    for buf in (a, c, d, e):
        pool.release(buf)
    assert pool.largest_free_block == 100 and pool.heap_bytes_in_use == 0


@pytest.mark.parametrize("strict", [False, True])
def test_any_size_kafka_accepts_is_accepted_up_to_long_max_value(strict):
    pool = SimpleMemoryPool(LONG_MAX, INT_MAX, strict)
    assert (pool.size, pool.available_memory, pool.max_single_allocation) == (LONG_MAX, LONG_MAX,
                                                                               INT_MAX)
    assert pool.arena_bytes == ARENA_LIMIT          # a bounded reservation, not the budget
    small = pool.try_allocate(4096)
    assert pool.available_memory == LONG_MAX - 4096 and pool.heap_bytes_in_use == 0
    huge = pool.try_allocate(INT_MAX)               # larger than the arena: from the heap
    assert len(huge) == INT_MAX and pool.heap_bytes_in_use == INT_MAX
    huge[INT_MAX - 1] = 7                           # touches one page of it
    assert pool.available_memory == LONG_MAX - 4096 - INT_MAX
    assert pool.metrics()["memory-pool-used"] == 4096 + INT_MAX
    pool.release(huge)
    pool.release(small)
    assert pool.available_memory == LONG_MAX and pool.heap_bytes_in_use == 0
    assert SimpleMemoryPool(LONG_MAX, 1, strict).available_memory == LONG_MAX


def test_arena_bytes_is_the_kafka_bound_clamped_and_chosen():
    assert SimpleMemoryPool(1000, 300).arena_bytes == 1299          # size + max_single - 1
    assert SimpleMemoryPool(1000, 300, True).arena_bytes == 1000
    assert SimpleMemoryPool(1000, 300, arena_bytes=10**9).arena_bytes == 1299
    assert SimpleMemoryPool(1000, 300, arena_bytes=0).arena_bytes == 0
    assert SimpleMemoryPool(LONG_MAX, 300, arena_bytes=4096).arena_bytes == 4096
    with pytest.raises(ValueError, match="arena_bytes"):
        SimpleMemoryPool(1000, 300, arena_bytes=-1)


@pytest.mark.skipif(SANITIZED or sys.platform != "linux",
                    reason="needs RLIMIT_AS (ASan reserves terabytes of shadow memory)")
def test_a_heap_that_cannot_give_the_bytes_raises_memory_error_and_keeps_the_accounting():
    code = textwrap.dedent("""
        import resource
        from kafkacodec import SimpleMemoryPool
        pool = SimpleMemoryPool(2**62, 2**31 - 1, arena_bytes=0)
        vm = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize:")))
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + (256 << 20),) * 2)
        kept = pool.try_allocate(1 << 20)
        try:
            pool.try_allocate(2**31 - 1)
        except MemoryError as exc:
            print("MemoryError:", exc)
        print(pool.available_memory, pool.outstanding, pool.heap_bytes_in_use)
        pool.release(kept)
        print(pool.available_memory, pool.outstanding, pool.heap_bytes_in_use)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"MemoryError: cannot allocate {2**31 - 1} bytes"
    assert lines[1:] == [f"{2**62 - (1 << 20)} 1 {1 << 20}", f"{2**62} 0 0"]


# -- Kafka's own SimpleMemoryPool as the oracle (tests/java/PoolOracle.java) ------------------
KAFKA_VERSIONS = ["3.9.1", "4.1.1"]


@pytest.fixture(scope="module", params=KAFKA_VERSIONS)
def kafka_pool(request, tmp_path_factory):
    """run(size, max_single, strict, ops) -> Kafka's answer lines (one JVM per version)."""
    import shutil

    from kafka_broker import BrokerUnavailable, classpath

    if not shutil.which("javac"):
        pytest.skip("needs javac")
    try:
        jars = [p for p in classpath(request.param).split(os.pathsep)
                if "/kafka-clients-" in p or "/slf4j-api-" in p]
    except BrokerUnavailable as exc:
        pytest.skip(f"no kafka-clients {request.param} jar: {exc}")
    classes = tmp_path_factory.mktemp("pool-oracle")
    source = Path(__file__).with_name("java") / "PoolOracle.java"
    subprocess.run(["javac", "-d", str(classes), "-cp", os.pathsep.join(jars), str(source)],
                   check=True)
    log = classes / "stderr.txt"
    with open(log, "w") as stderr:
        jvm = subprocess.Popen(["java", "-Xmx256m", "-cp", os.pathsep.join(jars + [str(classes)]),
                                "PoolOracle"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=stderr, text=True)

    def ask(lines):
        jvm.stdin.write("\n".join(lines + ["sync"]) + "\n")
        jvm.stdin.flush()
        answers = [jvm.stdout.readline().strip() for _ in lines]
        assert "" not in answers, f"PoolOracle stopped: {log.read_text()[-2000:]}"
        return answers

    def run(size, max_single, strict, ops):
        created = ask([f"pool {size} {max_single} {str(strict).lower()}"])
        return created if created != ["ok"] else created + ask([f"{op} {arg}" for op, arg in ops])

    yield run
    jvm.stdin.close()
    jvm.wait(timeout=30)


def our_answers(size, max_single, strict, ops):
    """The same script against our pool, in PoolOracle's answer format."""
    try:
        pool = SimpleMemoryPool(size, max_single, strict)
    except ValueError:
        return ["error"]
    answers, held = ["ok"], []
    for op, arg in ops:
        if op == "alloc":
            try:
                buf = pool.try_allocate(arg)
            except ValueError:
                verdict = "error"
            else:
                verdict = "refused" if buf is None else "granted"
                if buf is not None:
                    assert len(buf) == arg
                    held.append(buf)
        elif held:
            pool.release(held.pop(arg % len(held)))
            verdict = "ok"
        else:
            verdict = "none"
        answers.append(f"{verdict} {pool.available_memory} {str(pool.is_out_of_memory).lower()}")
    assert_disjoint(held)
    return answers


# Sizes near 0, small enough to fragment the arena and to go negative, and near
# Long.MAX_VALUE; allocations stay <= 64 KiB because Kafka's pool really allocates them.
SIZES = st.one_of(st.integers(-2, 3000), st.integers(1, 300), st.integers(1, 300),
                  st.integers(LONG_MAX - 2**20, LONG_MAX), st.integers(1, LONG_MAX))


@st.composite
def scripts(draw):
    size = draw(SIZES)
    cap = max(1, min(size, INT_MAX))
    if draw(st.booleans()):                          # any limits, any requests
        max_single = draw(st.one_of(st.integers(1, min(cap, 2000)), st.just(cap),
                                    st.integers(1, cap), st.sampled_from([-1, 0, cap + 1])))
        largest = max(1, min(max_single, 1 << 16))
        n = st.one_of(st.integers(1, largest), st.integers(1, 40),
                      st.sampled_from([-1, 0, max_single + 1]).filter(lambda v: v <= INT_MAX))
    else:                         # a pool a few requests large: fragments, goes negative
        max_single = draw(st.integers(1, 2000))
        size = draw(st.integers(max_single, 5 * max_single))
        n = st.integers(max(1, max_single // 5), max_single)
    length = draw(st.integers(0, 80))               # hypothesis' own lists are short
    ops = draw(st.lists(st.one_of(st.tuples(st.just("alloc"), n),
                                  st.tuples(st.just("release"), st.integers(0, 1000))),
                        min_size=length, max_size=length))
    return size, max_single, draw(st.booleans()), ops


@settings(max_examples=300, deadline=None)
@given(script=scripts())
def test_every_answer_equals_kafkas_own_pool(kafka_pool, script):
    size, max_single, strict, ops = script
    assert our_answers(size, max_single, strict, ops) == kafka_pool(size, max_single, strict, ops)


def test_the_oracle_sees_the_fragmentation_case(kafka_pool):
    """The issue's case through Kafka's class: the oracle itself answers what we assert."""
    ops = [("alloc", 1), ("alloc", 600), ("release", 0), ("alloc", 399), ("alloc", 600)]
    kafka = kafka_pool(1000, 600, False, ops)
    assert kafka[-1] == "granted -599 true"
    assert our_answers(1000, 600, False, ops) == kafka


# -- what we add ------------------------------------------------------------------------------
@pytest.mark.parametrize("strict", [False, True])
def test_blocks_come_from_one_bounded_arena_and_never_overlap(strict):
    pool = SimpleMemoryPool(1000, 300, strict)
    assert pool.arena_bytes == (1000 if strict else 1299)
    held = []
    while (buf := pool.try_allocate(random.randint(1, 300))) is not None:
        buf[:] = bytes([len(held) % 251]) * len(buf)
        held.append(buf)
    spans = sorted((address(b), len(b)) for b in held)
    assert spans[-1][0] + spans[-1][1] - spans[0][0] <= pool.arena_bytes
    assert_disjoint(held)
    for i, buf in enumerate(held):
        assert bytes(buf) == bytes([i % 251]) * len(buf)
    assert sum(len(b) for b in held) <= pool.arena_bytes and pool.heap_bytes_in_use == 0
    for buf in held:
        pool.release(buf)


# Every misuse check holds for arena blocks and for heap blocks (arena_bytes=0).
@pytest.fixture(params=[None, 0], ids=["arena", "heap"])
def arena(request):
    return request.param


def test_double_release_and_foreign_buffers_raise(arena):
    pool = SimpleMemoryPool(100, 50, arena_bytes=arena)
    other = SimpleMemoryPool(100, 50, arena_bytes=arena)
    buf = pool.try_allocate(10)
    with pytest.raises(MemoryPoolError, match="foreign"):
        pool.release(memoryview(bytearray(10)))
    with pytest.raises(MemoryPoolError, match="another pool"):
        other.release(buf)
    with pytest.raises(MemoryPoolError):
        pool.release(bytearray(10))
    with pytest.raises(ValueError, match="null"):
        pool.release(None)
    pool.release(buf)
    with pytest.raises(MemoryPoolError, match="double release"):
        pool.release(buf)
    assert pool.available_memory == 100 and other.available_memory == 100


def test_release_refuses_while_other_views_are_alive(arena):
    pool = SimpleMemoryPool(100, 50, arena_bytes=arena)
    buf = pool.try_allocate(20)
    piece = buf[2:5]
    with pytest.raises(MemoryPoolError, match="slice"):
        pool.release(piece)
    with pytest.raises(MemoryPoolError, match="1 other view"):
        pool.release(buf)
    del piece
    array = np.frombuffer(buf, dtype=np.uint8)
    with pytest.raises(MemoryPoolError, match="other view"):
        pool.release(buf)
    del array
    again = memoryview(buf.obj)
    with pytest.raises(MemoryPoolError, match="other view"):
        pool.release(buf)
    del again
    assert pool.available_memory == 80
    pool.release(buf)
    assert pool.available_memory == 100


def test_a_released_buffer_is_not_usable_any_more(arena):
    pool = SimpleMemoryPool(100, 50, arena_bytes=arena)
    buf = pool.try_allocate(20)
    buf[:] = b"x" * 20
    where = address(buf)
    pool.release(buf)
    with pytest.raises(ValueError, match="released"):
        buf[0]
    with pytest.raises(ValueError, match="released"):
        bytes(buf)
    reused = pool.try_allocate(20)              # arena: the same bytes, handed to someone else
    if arena is None:
        assert address(reused) == where
    with pytest.raises(ValueError, match="released"):
        buf[0:1] = b"y"                         # so the old view must stay dead
    pool.release(reused)


def test_a_dropped_buffer_is_reclaimed_when_collected(arena):
    pool = SimpleMemoryPool(100, 50, arena_bytes=arena)
    buf = pool.try_allocate(30)
    assert pool.available_memory == 70
    del buf
    gc.collect()
    assert pool.available_memory == 100 and pool.leaked == 1 and pool.outstanding == 0
    assert pool.heap_bytes_in_use == 0


def _written(n, fill=b"x", capacity=0):
    buffer = WriteBuffer(capacity)
    buffer.write(fill * n)
    return buffer


def test_an_adopted_buffer_is_a_pool_block_without_a_copy():
    pool = SimpleMemoryPool(1 << 20, 1 << 20)
    buffer = _written(300_000, b"a")
    before = np.frombuffer(memoryview(buffer), np.uint8).ctypes.data
    block = pool.try_adopt(buffer)
    assert len(buffer) == 0 and buffer.getvalue() == b""     # the buffer gave its block away
    assert np.frombuffer(block, np.uint8).ctypes.data == before
    assert bytes(block) == b"a" * 300_000 and not block.readonly
    assert pool.available_memory == (1 << 20) - 300_000 and pool.outstanding == 1
    assert pool.heap_bytes_in_use == 300_000
    buffer.write(b"again")              # still usable, with a block of its own
    assert buffer.getvalue() == b"again"
    pool.release(block)
    assert pool.available_memory == 1 << 20 and pool.outstanding == 0
    assert pool.heap_bytes_in_use == 0
    with pytest.raises(ValueError):
        bytes(block)                    # released like any pool block


def test_adoption_refuses_as_try_allocate_does_and_leaves_the_buffer():
    pool = SimpleMemoryPool(100, 60, strict=True)
    held = pool.try_allocate(50)
    buffer = _written(60)
    assert pool.try_adopt(buffer) is None                  # strict: 60 > 50 available
    assert buffer.getvalue() == b"x" * 60
    assert pool.metrics()["memory-pool-avg-depleted-percent"] >= 0
    with pytest.raises(ValueError, match="larger than maxSingleAllocationSize"):
        pool.try_adopt(_written(61))
    with pytest.raises(ValueError, match="<=0"):
        pool.try_adopt(WriteBuffer())
    with pytest.raises(TypeError):
        pool.try_adopt(bytearray(10))
    view = memoryview(buffer)
    with pytest.raises(BufferError, match="view of it is alive"):
        pool.try_adopt(buffer)
    view.release()
    assert pool.available_memory == 50 and pool.outstanding == 1   # nothing changed
    pool.release(held)
    block = pool.try_adopt(buffer)
    with pytest.raises(MemoryPoolError, match="other view"):
        extra = block[1:]
        pool.release(block)
    del extra
    pool.release(block)
    assert pool.available_memory == 100


def test_a_dropped_adopted_block_is_reclaimed():
    pool = SimpleMemoryPool(8 << 20, 4 << 20)
    block = pool.try_adopt(_written(1 << 20, capacity=(1 << 20) + 100))
    del block
    gc.collect()
    assert pool.available_memory == 8 << 20 and pool.leaked == 1 and pool.heap_bytes_in_use == 0
    block = pool.try_adopt(_written(1 << 20, b"o"))
    pool.release(block)                 # to the write buffers' kept blocks, or freed
    assert pool.available_memory == 8 << 20 and pool.leaked == 1 and pool.outstanding == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_usable_size")
def test_an_adopted_block_keeps_little_slack():
    usable_size = ctypes.CDLL(None).malloc_usable_size
    usable_size.argtypes, usable_size.restype = [ctypes.c_void_p], ctypes.c_size_t
    pool = SimpleMemoryPool(64 << 20, 32 << 20)
    buffer = WriteBuffer(16 << 20)      # room for far more than is written
    buffer.write(b"z" * 1000)
    block = pool.try_adopt(buffer)
    assert bytes(block) == b"z" * 1000
    assert usable_size(np.frombuffer(block, np.uint8).ctypes.data) < 2 * 1000 + 4096
    pool.release(block)


def test_priority_allocations_bypass_a_full_pool():
    pool = SimpleMemoryPool(100, 100, strict=True)
    big = pool.try_allocate(100)
    assert pool.try_allocate(10) is None
    urgent = pool.try_allocate(10, priority=True)
    assert urgent is not None and len(urgent) == 10
    urgent[:] = b"heartbeat!"
    assert pool.available_memory == 0 and pool.priority_bytes_in_use == 10
    assert pool.heap_bytes_in_use == 0 and pool.outstanding == 1    # outside the budget
    pool.release(urgent)
    assert pool.priority_bytes_in_use == 0 and pool.available_memory == 0
    pool.release(big)
    normal = pool.try_allocate(10, priority=True)   # room in the pool: taken from it
    assert pool.available_memory == 90 and pool.priority_bytes_in_use == 0
    pool.release(normal)


def test_a_dropped_priority_buffer_is_freed_and_uncounted():
    pool = SimpleMemoryPool(10, 10, strict=True)
    full = pool.try_allocate(10)
    urgent = pool.try_allocate(5, priority=True)
    assert pool.priority_bytes_in_use == 5
    del urgent
    gc.collect()
    assert pool.priority_bytes_in_use == 0 and pool.available_memory == 0
    pool.release(full)


def test_memory_pool_none_is_unbounded_and_release_is_a_no_op():
    none = MemoryPool.NONE
    assert isinstance(none, MemoryPool) and isinstance(SimpleMemoryPool(1, 1), MemoryPool)
    buf = none.try_allocate(1000)
    assert len(buf) == 1000 and not buf.readonly
    assert len(none.try_allocate(0)) == 0
    with pytest.raises(ValueError):
        none.try_allocate(-1)
    none.release(buf)
    none.release(buf)
    assert none.size == none.available_memory == 2**63 - 1
    assert none.is_out_of_memory is False


def test_depletion_metrics():
    pool = SimpleMemoryPool(10, 10, strict=True)
    buf = pool.try_allocate(10)
    assert pool.try_allocate(1) is None            # opens a depletion period
    assert pool.try_allocate(1) is None            # still the same period
    time.sleep(0.02)
    m = pool.metrics()
    assert m["memory-pool-depleted-time-total"] == 0.0      # open periods are not visible yet
    pool.release(buf)                              # closes it (Kafka: any release closes it)
    m = pool.metrics()
    assert 20.0 <= m["memory-pool-depleted-time-total"] < 60_000
    assert 0.0 < m["memory-pool-avg-depleted-percent"] <= 1.0  # a ratio, as Kafka reports
    assert m["memory-pool-free"] == 10 and m["memory-pool-used"] == 0
    total = m["memory-pool-depleted-time-total"]
    pool.release(pool.try_allocate(5))             # no refusal: nothing more recorded
    assert pool.metrics()["memory-pool-depleted-time-total"] == total


@pytest.mark.parametrize("strict", [False, True])
def test_threads_sharing_one_pool_keep_the_accounting_and_never_share_a_block(strict):
    """8 threads hammer one pool; buffers are handed between threads (the network thread
    allocates, a consumer releases). Every block is filled with its owner's tag and checked
    whole before release (a block handed out twice, or overlapping another, is overwritten);
    the pool is small enough to fragment, so blocks come from the arena and the heap."""
    size, max_single, threads, rounds = 20_000, 4096, 8, 20_000
    pool = SimpleMemoryPool(size, max_single, strict=strict)
    floor = 0 if strict else 1 - max_single           # Kafka's lowest possible availability
    errors, low_water, heap_seen = [], [size], [0]
    refusals, releases = [0] * threads, [0] * threads
    handoff = collections.deque()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def worker(seed):
        rng = random.Random(seed)
        sizes = [rng.randint(1, max_single) for _ in range(64)]
        allocate, release = pool.try_allocate, pool.release
        try:
            for i in range(rounds):
                buf = allocate(sizes[i & 63])
                if buf is None:
                    refusals[seed] += 1
                else:
                    tag = bytes([seed, i & 0xFF]) * (len(buf) // 2 + 1)
                    buf[:] = tag[:len(buf)]
                    handoff.append((tag, buf))
                heap_seen[0] = max(heap_seen[0], pool.heap_bytes_in_use)
                if len(handoff) > 12 or buf is None:    # release one, maybe another's
                    try:
                        tag, buf = handoff.popleft()
                    except IndexError:
                        continue
                    if buf != tag[:len(buf)]:
                        errors.append(f"a block of thread {tag[0]} was overwritten")
                    release(buf)
                    releases[seed] += 1
                available = pool.available_memory
                low_water[0] = min(low_water[0], available)
                if available < floor or available > size:
                    errors.append(f"available {available} outside [{floor}, {size}]")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    try:
        workers = [threading.Thread(target=worker, args=(seed,)) for seed in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        sys.setswitchinterval(old)
    live = [buf for _, buf in handoff]
    assert_disjoint(live)
    assert sum(map(len, live)) == size - pool.available_memory
    assert pool.outstanding == len(live)
    while handoff:
        pool.release(handoff.popleft()[1])
    assert errors == []
    assert pool.available_memory == size and pool.outstanding == 0 and pool.leaked == 0
    assert pool.heap_bytes_in_use == 0 and pool.largest_free_block == pool.arena_bytes
    assert sum(releases) > threads * rounds // 4      # many attempts succeed ...
    assert sum(refusals) > 0 and low_water[0] < (max_single if strict else 0)  # ... runs dry
    assert heap_seen[0] > 0                           # ... and fragments: the heap served some


def test_one_buffer_released_by_many_threads_at_once_is_credited_once():
    pool = SimpleMemoryPool(1000, 100)
    for _ in range(100):
        buf = pool.try_allocate(100)
        start = threading.Barrier(4)
        outcomes = []

        def release():
            start.wait()
            try:
                pool.release(buf)
                outcomes.append("released")
            except MemoryPoolError as exc:
                outcomes.append(str(exc).split(":")[0])

        workers = [threading.Thread(target=release) for _ in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        assert sorted(outcomes) == ["double release"] * 3 + ["released"]
        assert pool.available_memory == 1000 and pool.outstanding == 0
