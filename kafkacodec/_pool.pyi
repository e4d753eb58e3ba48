"""SimpleMemoryPool (Kafka's accounting; blocks from a bounded arena, else the heap) and
MemoryPool.NONE."""

import abc
from typing import ClassVar, TypedDict

from typing_extensions import Buffer

from kafkacodec._writer import WriteBuffer

ARENA_LIMIT: int
"""The default arena reservation at most (bytes); a larger budget is served from the heap."""

_PoolMetrics = TypedDict("_PoolMetrics", {
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
    """SimpleMemoryPool(size_bytes, max_single_allocation, strict=False, *, metrics_window_ms=30000, arena_bytes=None)

    Kafka's SimpleMemoryPool: the same answers for every sequence of try_allocate / release.
    ValueError (Kafka's IllegalArgumentException) unless 0 < max_single_allocation <= size_bytes.
    arena_bytes: the arena to reserve (default: Kafka's bound, at most ARENA_LIMIT; clamped to
    the bound; 0: every block from the heap).  Safe to share between threads.
    """

    @property
    def size(self) -> int: ...
    @property
    def max_single_allocation(self) -> int: ...
    @property
    def strict(self) -> bool: ...
    @property
    def leaked(self) -> int:
        """Buffers garbage-collected without release() (their bytes were credited back)."""
    def __init__(self, size_bytes: int, max_single_allocation: int, strict: bool = False,
                 *, metrics_window_ms: int = 30000, arena_bytes: int | None = None) -> None: ...
    def try_allocate(self, n: int, priority: bool = False) -> memoryview | None:
        """A writable memoryview of exactly n bytes, or None when Kafka's accounting refuses
        (never blocks).  ValueError for n < 1 or n > max_single_allocation; MemoryError
        (accounting unchanged) when the heap cannot give granted bytes.  priority=True: served
        from the heap, outside the budget, when the pool refuses (KIP-81 coordinator traffic)."""
    def try_adopt(self, buffer: WriteBuffer) -> memoryview | None:
        """try_allocate(len(buffer)) whose block is ``buffer``'s own (no copy; ``buffer`` is
        left empty); None, ``buffer`` untouched, when the pool refuses.  ValueError as
        try_allocate; BufferError while a view of ``buffer`` is alive."""
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
    def heap_bytes_in_use(self) -> int:
        """Bytes of granted blocks served from the heap (the arena had no contiguous block)."""
    @property
    def outstanding(self) -> int: ...
    @property
    def priority_bytes_in_use(self) -> int: ...
    @property
    def largest_free_block(self) -> int: ...
    def metrics(self) -> _PoolMetrics: ...
