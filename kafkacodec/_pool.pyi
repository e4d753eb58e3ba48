"""SimpleMemoryPool (Kafka 3.8's accounting over one bounded arena) and MemoryPool.NONE."""

import abc
from typing import ClassVar, TypedDict

from typing_extensions import Buffer

__all__ = ["MemoryPool", "SimpleMemoryPool", "PoolBuffer"]

PoolMetrics = TypedDict("PoolMetrics", {
    "memory-pool-free": int,                      # bytes (MemoryPoolAvailable), may be < 0
    "memory-pool-used": int,                      # bytes (MemoryPoolUsed)
    "memory-pool-avg-depleted-percent": float,    # ratio 0..1 (MemoryPoolAvgDepletedPercent)
    "memory-pool-depleted-time-total": float,     # milliseconds (MemoryPoolDepletedTimeTotal)
})

class MemoryPool(abc.ABC):
    """Kafka's MemoryPool interface.  ``MemoryPool.NONE``: unbounded, a fresh buffer per
    allocation, release() is a no-op."""

    NONE: ClassVar[MemoryPool]
    @abc.abstractmethod
    def try_allocate(self, n: int, priority: bool = False) -> memoryview | None: ...
    @abc.abstractmethod
    def release(self, buf: memoryview) -> None: ...

class PoolBuffer:
    """The exporter behind a pool memoryview (``view.obj``)."""

    @property
    def released(self) -> bool: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class SimpleMemoryPool:
    """SimpleMemoryPool(size_bytes, max_single_allocation, strict=False).

    ValueError (Kafka's IllegalArgumentException) unless 0 < max_single_allocation <= size_bytes.
    """

    @property
    def size(self) -> int: ...
    @property
    def max_single_allocation(self) -> int: ...
    @property
    def strict(self) -> bool: ...
    @property
    def fragmentation_refusals(self) -> int:
        """Refusals where Kafka's accounting allowed the request but the arena had no
        contiguous block (the one difference from Kafka's answers)."""
    @property
    def leaked(self) -> int:
        """Buffers garbage-collected without release() (their bytes were credited back)."""
    def __init__(self, size_bytes: int, max_single_allocation: int, strict: bool = False,
                 *, metrics_window_ms: int = 30000) -> None: ...
    def try_allocate(self, n: int, priority: bool = False) -> memoryview | None:
        """A writable memoryview of exactly n bytes, or None (never blocks).  ValueError for
        n < 1 or n > max_single_allocation.  priority=True: served from the heap, outside the
        budget, when the pool refuses (KIP-81 coordinator traffic)."""
    def release(self, buf: memoryview) -> None:
        """MemoryPoolError for a foreign buffer, a double release, a slice, or while other
        views of the block are alive; ValueError for None.  Afterwards ``buf`` is released
        (using it raises ValueError)."""
    @property
    def available_memory(self) -> int: ...
    @property
    def is_out_of_memory(self) -> bool: ...
    @property
    def arena_bytes(self) -> int: ...
    @property
    def outstanding(self) -> int: ...
    @property
    def priority_bytes_in_use(self) -> int: ...
    @property
    def largest_free_block(self) -> int: ...
    def metrics(self) -> PoolMetrics: ...
