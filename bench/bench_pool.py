"""try_allocate + release pair: SimpleMemoryPool (blocks from its arena, and with arena_bytes=0
from the heap, as when the arena is fragmented or smaller than the budget) against
MemoryPool.NONE (a fresh bytearray per allocation, Kafka's no-pool), same run.

    /work/venv/bin/python -m pytest bench/bench_pool.py --benchmark-enable -q \
        --benchmark-columns=min,mean,ops
"""

import pytest

from kafkacodec import MemoryPool, SimpleMemoryPool

PAIRS = 10_000


def pairs(allocate, release, n):
    for _ in range(PAIRS):
        release(allocate(n))


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("n", [100, 16384])
@pytest.mark.parametrize("source", ["arena", "heap"])
def test_pair_simple_pool(benchmark, n, strict, source):
    benchmark.group = f"pair {n}"
    pool = SimpleMemoryPool(1 << 24, 1 << 20, strict, arena_bytes=None if source == "arena" else 0)
    benchmark.extra_info["pairs"] = PAIRS
    benchmark(pairs, pool.try_allocate, pool.release, n)
    assert pool.available_memory == 1 << 24


@pytest.mark.parametrize("n", [100, 16384])
def test_pair_memory_pool_none(benchmark, n):
    benchmark.group = f"pair {n}"
    benchmark.extra_info["pairs"] = PAIRS
    benchmark(pairs, MemoryPool.NONE.try_allocate, MemoryPool.NONE.release, n)


@pytest.mark.parametrize("n", [100, 16384])
def test_pair_loop_overhead(benchmark, n):
    """The Python loop + two calls with nothing behind them: subtract it to get the pair."""
    benchmark.group = f"pair {n}"
    benchmark.extra_info["pairs"] = PAIRS
    benchmark(pairs, lambda n: n, lambda b: None, 100)
