"""Memory stays flat while decoding, building and converting 100,000 batches in a loop.

Two views: tracemalloc (Python-level allocations: objects, bytes, memoryviews left behind) and
the process RSS (C-level malloc in the Cython core, mmap, codec contexts). Each check warms up
first (caches, free lists, lazily built tables), then runs the loop and compares.
Tests for an entry point that is not in this build skip and name it."""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import pytest

import kafkacodec

# ASan's allocator keeps freed memory in quarantine: the RSS is not the program's (the installed run
# has these; the sanitizer run looks for the errors behind leaks instead).
pytestmark = pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                                reason="ASan's quarantine keeps freed memory: the RSS is not the program's")

BATCHES = 100_000
PER_BUFFER = 1_000            # batches per buffer: the loop decodes/converts it BATCHES/PER_BUFFER times
TRACED_LIMIT = 256 * 1024     # bytes of Python-level growth tolerated after warm-up
RSS_LIMIT = 16 * 1024 * 1024  # bytes of RSS growth tolerated after warm-up (allocator noise)


def need(name: str):
    obj = getattr(kafkacodec, name, None)
    if obj is None:
        pytest.skip(f"kafkacodec.{name} is not in this build")
    return obj


# Under ASan (scripts/sanitize.sh) freed memory sits in the allocator's quarantine, so RSS
# only grows: the RSS half of the check is off there, the tracemalloc half stays.
SANITIZED = os.environ.get("KAFKACODEC_SANITIZED") == "1"


def rss_bytes() -> int | None:
    if SANITIZED:
        return None
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def assert_flat(step, rounds: int, warmup: int) -> None:
    """Run step() `warmup` times, then `rounds` times under tracemalloc; memory must not grow."""
    for _ in range(warmup):
        step()
    gc.collect()
    rss_before = rss_bytes()
    tracemalloc.start()
    try:
        for _ in range(max(1, rounds // 10)):  # traced warm-up: tracemalloc's own structures
            step()
        gc.collect()
        traced_before, _ = tracemalloc.get_traced_memory()
        snapshot_before = tracemalloc.take_snapshot()
        for _ in range(rounds):
            step()
        gc.collect()
        traced_after, _ = tracemalloc.get_traced_memory()
        growth = traced_after - traced_before
        if growth > TRACED_LIMIT:
            top = tracemalloc.take_snapshot().compare_to(snapshot_before, "lineno")[:8]
            pytest.fail(f"Python-level memory grew by {growth} bytes over {rounds} rounds:\n"
                        + "\n".join(str(stat) for stat in top))
    finally:
        tracemalloc.stop()
    rss_after = rss_bytes()
    if rss_before is not None and rss_after is not None:
        assert rss_after - rss_before < RSS_LIMIT, (
            f"RSS grew by {(rss_after - rss_before) / 1e6:.1f} MB over {rounds} rounds")


def _log(magic: int = 2, compression: str = "none", batches: int = PER_BUFFER) -> bytes:
    Builder = need("MemoryRecordsBuilder")
    parts = []
    for b in range(batches):
        builder = Builder(magic=magic, compression=compression, base_offset=b * 5)
        for i in range(5):
            builder.append(1_700_000_000_000 + i, b"k%d" % i, b"v" * 40,
                           **({"headers": (("h", b"x"),)} if magic == 2 else {}))
        parts.append(bytes(builder.build()))
    return b"".join(parts)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_decode_100k_batches_keeps_memory_flat(compression):
    MemoryRecords = need("MemoryRecords")
    log = _log(2, compression)

    def step():
        records = 0
        for batch in MemoryRecords(log).batches():
            assert batch.is_valid()
            for record in batch:
                record.key, record.value, record.headers
                records += 1
        assert records == 5 * PER_BUFFER

    assert_flat(step, rounds=BATCHES // PER_BUFFER, warmup=3)


def test_build_100k_batches_keeps_memory_flat():
    Builder = need("MemoryRecordsBuilder")
    value = b"v" * 100

    def step():
        for b in range(PER_BUFFER):
            builder = Builder(magic=2, compression="none", base_offset=b)
            builder.append(1_700_000_000_000, b"key", value, headers=(("h", b"x"),))
            builder.append(1_700_000_000_001, None, value)
            assert len(builder.build()) > 61

    assert_flat(step, rounds=BATCHES // PER_BUFFER, warmup=2)


@pytest.mark.parametrize("to_magic", [1, 0])
def test_down_convert_100k_batches_keeps_memory_flat(to_magic):
    down_convert = need("down_convert")
    MemoryRecords = need("MemoryRecords")
    source = MemoryRecords(_log(2, "none"))

    def step():
        converted = down_convert(source, to_magic)
        records = getattr(converted, "records", converted)
        assert records.size_in_bytes > 0

    assert_flat(step, rounds=BATCHES // PER_BUFFER, warmup=3)


def test_write_buffer_and_crc_loops_keep_memory_flat():
    """The foundation every builder uses: grow, export views, copy out, reset, checksum."""
    from kafkacodec import WriteBuffer, crc

    payload = os.urandom(1000)

    def step():
        for _ in range(PER_BUFFER):
            buffer = WriteBuffer()
            buffer.write(payload)
            buffer.write(payload)
            with memoryview(buffer) as view:
                assert crc.crc32c(view) == crc.crc32c(payload + payload)
            assert len(buffer.getvalue()) == 2000
            buffer.clear()

    assert_flat(step, rounds=BATCHES // PER_BUFFER, warmup=2)


@pytest.mark.skipif(sys.platform != "linux" or SANITIZED, reason="RSS read from /proc")
def test_rss_probe_sees_a_real_leak():
    """The RSS check is not vacuous: holding 64 MB shows up."""
    import mmap

    before = rss_bytes()
    # fresh anonymous pages (a bytearray may reuse memory a long suite already made resident)
    hold = mmap.mmap(-1, 64 * 1024 * 1024)
    hold[::4096] = b"x" * len(hold[::4096])  # touch every page
    assert rss_bytes() - before > RSS_LIMIT
    hold.close()


def test_tracemalloc_probe_sees_a_real_leak():
    """The traced check is not vacuous: 4 KB kept per round over 100 rounds fails it."""
    kept = []
    with pytest.raises(pytest.fail.Exception, match="Python-level memory grew"):
        assert_flat(lambda: kept.append(bytes(4096)), rounds=100, warmup=1)


BIG_BATCH_PER_THREAD = '''
import gc, json, os, sys, threading
from concurrent.futures import ThreadPoolExecutor
from kafkacodec import MemoryRecords, MemoryRecordsBuilder

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

inflated = int(sys.argv[1])
builder = MemoryRecordsBuilder(compression="zstd")
value = bytes(1 << 20)
for i in range(inflated >> 20):
    builder.append(i, None, value)
batch = builder.build()               # a few KiB of zstd that inflate to `inflated` bytes
del builder, value
threads = 4
pool = ThreadPoolExecutor(threads)
together = threading.Barrier(threads)

def decode(_):
    together.wait()
    return sum(len(r.value) for r in MemoryRecords(batch).records())

list(pool.map(lambda _: together.wait(), range(threads)))    # the pool threads, started
gc.collect()
before = rss()
decoded = list(pool.map(decode, range(threads)))             # each thread decodes it once
gc.collect()
after = rss()                                                # nothing is referenced now
print(json.dumps({"before": before, "after": after, "decoded": decoded, "batch": len(batch)}))
pool.shutdown()
'''


@pytest.mark.skipif(sys.platform != "linux" or SANITIZED, reason="RSS read from /proc")
def test_per_thread_decompression_buffers_shrink_after_a_big_batch():
    # A small zstd batch inflating to 128 MiB, read once by each of 4 pool threads: the
    # threads' reusable decompression buffers must not keep 4 x 128 MiB resident afterwards.
    import json
    import subprocess

    inflated = 128 << 20
    from isolated import child_env
    env = child_env()
    proc = subprocess.run([sys.executable, "-c", BIG_BATCH_PER_THREAD, str(inflated)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["decoded"] == [inflated] * 4 and info["batch"] < 64 * 1024, info
    growth = info["after"] - info["before"]
    assert growth < 4 * RSS_LIMIT, f"RSS stayed {growth / 2**20:.0f} MiB above the baseline"


BIG_BATCH_KEPT_BY = '''
import gc, json, os, sys
from kafkacodec import MemoryRecordsBuilder

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

inflated, user = int(sys.argv[1]), sys.argv[2]
builder = MemoryRecordsBuilder(compression="gzip")
value = bytes(1 << 20)
for i in range(inflated >> 20):
    builder.append(i, None, value)
batch = builder.build()                # ~128 KiB of gzip that inflate to `inflated` bytes
del builder, value
if user == "DownConverter":
    from kafkacodec._convert import DownConverter
    kept = DownConverter(1)
    before = rss()
    kept.convert(batch)
    out = kept.take()[0]
    done = len(out)
    del out
else:
    from kafkacodec.arrow import ArrowDecoder
    kept = ArrowDecoder()
    kept.decode(batch[:0])                 # pyarrow's first batch loads code: not ours
    before = rss()
    rb, _ = kept.decode(batch)
    done = sum(len(v) for v in rb.column("value").to_pylist())
    del rb
gc.collect()
print(json.dumps({"before": before, "after": rss(), "done": done}))
'''


@pytest.mark.skipif(sys.platform != "linux" or SANITIZED, reason="RSS read from /proc")
@pytest.mark.parametrize("user", ["DownConverter", "ArrowDecoder"])
def test_a_big_batch_is_not_kept_by_the_object_that_decompressed_it(user):
    # Kept alive after converting / decoding one batch that inflates to 128 MiB, the object
    # must not keep its decompression buffer (or its inner-set scratch) that size.
    import json
    import subprocess

    inflated = 128 << 20
    root = os.path.dirname(os.path.dirname(os.path.abspath(kafkacodec.__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", BIG_BATCH_KEPT_BY, str(inflated), user],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["done"] > 0, info
    growth = info["after"] - info["before"]
    assert growth < 2 * RSS_LIMIT, f"{user} kept {growth / 2**20:.0f} MiB after the batch"
