# cython: language_level=3
"""SimpleMemoryPool (KIP-72, used for KIP-81's consumer `buffer.memory`) and MemoryPool.NONE.

Accounting: exactly Kafka's SimpleMemoryPool (org.apache.kafka.common.memory; see
docs/pool-and-ring.md): strict pools need `available >= n`, non-strict pools only
`available >= 1`, so `available_memory` may go down to `1 - max_single_allocation`.  The
accounting alone decides every answer; where the bytes come from never changes one.

Memory: the bytes handed out never exceed Kafka's bound (`size` strict, `size +
max_single_allocation - 1` non-strict) because the accounting is the bound.  They come from one
arena of at most that bound (capped, ARENA_LIMIT by default, so a pool of Long.MAX_VALUE reserves
no more) when it has a contiguous block, else from the heap.  Arena blocks are handed out
first-fit from a free list of extents sorted by offset; a released block coalesces with its
neighbours.

Lifetime: `try_allocate` returns a writable memoryview over a PoolBuffer exporter.
`release(view)` refuses (MemoryPoolError) while any other view of the block is alive
(slices, numpy arrays, memoryview(view.obj)); otherwise it releases the memoryview itself, so a
later access to it raises ValueError ("released memoryview") instead of reading reused bytes.
"""

import abc
import operator

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.memoryview cimport PyMemoryView_FromObject
from cpython.mem cimport PyMem_RawMalloc, PyMem_RawFree, PyMem_RawRealloc
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport PyObject, Py_REFCNT
from libc.stdint cimport int64_t, INT64_MAX, uintptr_t
from libc.string cimport memmove

from kafkacodec._writer cimport WriteBuffer, writer_detach, block_release
from kafkacodec.errors import MemoryPoolError


cdef extern from *:
    """
    /* A test-and-set spin lock: critical sections are a few dozen instructions of C. */
    #if defined(_MSC_VER)
    #include <intrin.h>
    static inline void kc_spin_lock(volatile char* l) {
        while (_InterlockedExchange8(l, 1)) { while (*l) _mm_pause(); }
    }
    static inline void kc_spin_unlock(volatile char* l) { _InterlockedExchange8(l, 0); }
    #else
    static inline void kc_spin_lock(volatile char* l) {
        while (__atomic_test_and_set((void*)l, __ATOMIC_ACQUIRE)) {
            while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
    #if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
    #endif
            }
        }
    }
    static inline void kc_spin_unlock(volatile char* l) { __atomic_clear((void*)l, __ATOMIC_RELEASE); }
    #endif
    """
    void kc_spin_lock(char* l) noexcept nogil
    void kc_spin_unlock(char* l) noexcept nogil


cdef extern from "Python.h":
    # CPython's memoryview internals (Include/cpython/memoryobject.h, 3.3 .. 3.14): needed to
    # know whether other views share the block before it is handed to someone else.
    ctypedef struct RawBuffer "Py_buffer":
        void* buf
        PyObject* obj
        Py_ssize_t len
    ctypedef struct _PyManagedBufferObject:
        Py_ssize_t exports
    ctypedef struct PyMemoryViewObject:
        _PyManagedBufferObject* mbuf
        int flags
        Py_ssize_t exports
        RawBuffer view
    int _Py_MEMORYVIEW_RELEASED


cdef extern from *:
    """
    #if defined(_WIN32)
    #include <windows.h>
    static int64_t kc_monotonic_ns(void) {
        LARGE_INTEGER f, c;
        QueryPerformanceFrequency(&f);
        QueryPerformanceCounter(&c);
        return (int64_t)((double)c.QuadPart * 1e9 / (double)f.QuadPart);
    }
    #else
    #include <time.h>
    static int64_t kc_monotonic_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    #endif
    """
    int64_t kc_monotonic_ns() noexcept nogil


DEF SAMPLES = 2            # Kafka MetricConfig default: 2 samples ...
cdef int64_t DEFAULT_WINDOW_MS = 30000   # ... of 30 s each
# The default arena reservation at most (address space, committed page by page as used): a larger
# budget is served from the heap beyond it.
ARENA_LIMIT = 256 << 20

cdef object _memoryview_release = memoryview.release


@cython.no_gc_clear
cdef class PoolBuffer:
    """The exporter behind a pool memoryview (reach it as `view.obj`)."""

    def __cinit__(self):
        self.pool = None
        self.ptr = NULL
        self.size = 0
        self.exports = 0
        self.released = False
        self.priority = False
        self.adopted = 0

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.released:
            from kafkacodec.errors import BufferReleasedError
            raise BufferReleasedError("pool buffer used after release")
        PyBuffer_FillInfo(view, self, self.ptr, self.size, 0, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def __len__(self):
        return self.size

    def __dealloc__(self):
        # Dropped without release(): give the block back (GarbageCollectedMemoryPool's
        # behaviour) so a leak never shrinks the pool for good.
        if self.released or self.ptr == NULL or self.pool is None:
            return
        if self.priority:
            (<SimpleMemoryPool>self.pool).free_priority(self.ptr, self.size)
        else:
            (<SimpleMemoryPool>self.pool).leaked += 1
            (<SimpleMemoryPool>self.pool).credit(self.ptr, self.size, self.adopted)
        self.ptr = NULL


cdef inline object wrap(SimpleMemoryPool pool, unsigned char* ptr, Py_ssize_t n, bint priority,
                        Py_ssize_t adopted=0):
    cdef PoolBuffer pb
    if pool.ncached:
        pool.ncached -= 1
        pb = pool.cached[pool.ncached]
        pool.cached[pool.ncached] = None
        pb.released = False
    else:
        pb = PoolBuffer.__new__(PoolBuffer)
    pb.pool = pool
    pb.ptr = ptr
    pb.size = n
    pb.priority = priority
    pb.adopted = adopted
    return PyMemoryView_FromObject(pb)


cdef class SimpleMemoryPool:
    """SimpleMemoryPool(size_bytes, max_single_allocation, strict=False, *, metrics_window_ms=30000, arena_bytes=None)

    Kafka's SimpleMemoryPool: the same grants, refusals, available_memory and is_out_of_memory
    for every sequence of try_allocate / release.  Granted blocks come from an arena of
    `arena_bytes` (default: Kafka's bound, at most ARENA_LIMIT; 0: none) when it has a
    contiguous block, else from the heap.

    Thread safety: safe to share between threads (one pool for every connection).  The
    accounting, the arena's free list, the heap and priority counters and the depletion clock
    change only inside one short C critical section (a spin lock; no Python inside), so every
    grant is counted once and every block is handed to exactly one caller; release() checks
    ownership and live views while holding the GIL, so two threads releasing the same buffer
    get one success and one MemoryPoolError.  A buffer's bytes are not synchronised: hand a
    buffer from thread to thread, don't write it from two at once.
    """

    def __cinit__(self, long long size_bytes, long long max_single_allocation, bint strict=False,
                  *, long long metrics_window_ms=30000, arena_bytes=None):
        cdef int64_t bound
        cdef Py_ssize_t reserve
        self.lock = 0
        self.arena = NULL
        self.free_list = NULL
        if size_bytes <= 0 or max_single_allocation <= 0 or max_single_allocation > size_bytes:
            # Kafka: IllegalArgumentException, same wording.
            raise ValueError(
                "must provide a positive size and max single allocation size smaller than size."
                f"provided {size_bytes} and {max_single_allocation} respectively")
        if max_single_allocation > 0x7FFFFFFF:
            raise ValueError(f"max_single_allocation {max_single_allocation} exceeds Java int range")
        if metrics_window_ms <= 0:
            raise ValueError(f"metrics_window_ms must be positive, got {metrics_window_ms}")
        self.size = size_bytes
        self.max_single_allocation = <Py_ssize_t>max_single_allocation
        self.strict = strict
        self.available = size_bytes
        self.window_ms = metrics_window_ms
        self.cached = [None] * 8
        self.free_cap = 16
        self.free_list = <Extent*>PyMem_RawMalloc(self.free_cap * sizeof(Extent))
        if self.free_list == NULL:
            raise MemoryError("cannot allocate the pool's free list")
        # Kafka's bound on the bytes outstanding: strict pools never go below 0 available,
        # non-strict ones never below 1 - max_single (saturated at Long.MAX_VALUE).
        bound = size_bytes
        if not strict:
            bound = (INT64_MAX if size_bytes > INT64_MAX - (max_single_allocation - 1)
                     else size_bytes + (max_single_allocation - 1))
        if arena_bytes is None:
            reserve = <Py_ssize_t>min(bound, ARENA_LIMIT)
        elif operator.index(arena_bytes) < 0:
            raise ValueError(f"arena_bytes must be >= 0, got {arena_bytes}")
        else:
            reserve = <Py_ssize_t>min(bound, operator.index(arena_bytes), PY_SSIZE_T_MAX)
        if reserve > 0:
            # Untouched pages of a large malloc are not resident: the arena costs what is used.
            self.arena = <unsigned char*>PyMem_RawMalloc(reserve)
            if self.arena == NULL:
                if arena_bytes is not None:
                    raise MemoryError(f"cannot reserve a {reserve}-byte pool arena")
                reserve = 0                 # the default arena is an optimisation: use the heap
        self.arena_size = reserve
        self.nfree = 1 if reserve > 0 else 0
        self.free_list[0].off = 0
        self.free_list[0].length = reserve

    def __dealloc__(self):
        # Every PoolBuffer holds a reference to its pool, so no block is alive here.
        PyMem_RawFree(self.arena)
        PyMem_RawFree(self.free_list)

    # -- the arena (call with the lock held; no Python inside) ------------------------------
    cdef Py_ssize_t take_extent(self, Py_ssize_t n) noexcept nogil:
        cdef Py_ssize_t i, off
        for i in range(self.nfree):
            if self.free_list[i].length >= n:
                off = self.free_list[i].off
                self.free_list[i].off += n
                self.free_list[i].length -= n
                if self.free_list[i].length == 0:
                    self.nfree -= 1
                    memmove(&self.free_list[i], &self.free_list[i + 1],
                            (self.nfree - i) * sizeof(Extent))
                return off
        return -1

    cdef int give_extent(self, Py_ssize_t off, Py_ssize_t n) noexcept nogil:
        # Returns -1 if the free list could not grow (the block is then lost to the arena,
        # never handed out twice).
        cdef Py_ssize_t lo = 0, hi = self.nfree, mid
        cdef Extent* grown
        while lo < hi:                      # first extent starting after `off`
            mid = (lo + hi) >> 1
            if self.free_list[mid].off < off:
                lo = mid + 1
            else:
                hi = mid
        if lo > 0 and self.free_list[lo - 1].off + self.free_list[lo - 1].length == off:
            self.free_list[lo - 1].length += n
            if lo < self.nfree and off + n == self.free_list[lo].off:
                self.free_list[lo - 1].length += self.free_list[lo].length
                self.nfree -= 1
                memmove(&self.free_list[lo], &self.free_list[lo + 1],
                        (self.nfree - lo) * sizeof(Extent))
            return 0
        if lo < self.nfree and off + n == self.free_list[lo].off:
            self.free_list[lo].off = off
            self.free_list[lo].length += n
            return 0
        if self.nfree == self.free_cap:
            grown = <Extent*>PyMem_RawRealloc(self.free_list, 2 * self.free_cap * sizeof(Extent))
            if grown == NULL:
                return -1
            self.free_list = grown
            self.free_cap *= 2
        memmove(&self.free_list[lo + 1], &self.free_list[lo], (self.nfree - lo) * sizeof(Extent))
        self.free_list[lo].off = off
        self.free_list[lo].length = n
        self.nfree += 1
        return 0

    cdef void close_depletion(self) noexcept nogil:
        # Kafka: a depletion period ends at the next successful allocation or release.
        cdef int64_t now_ms, now
        cdef double elapsed_ms
        if self.depleted_since == 0:
            return
        now = kc_monotonic_ns()
        elapsed_ms = (now - self.depleted_since) / 1e6
        self.depleted_since = 0
        self.depleted_total_ms += elapsed_ms
        now_ms = now // 1000000
        if self.sample_count == 0:
            self.sample_count = 1
            self.sample_current = 0
            self.sample_start_ms[0] = now_ms
            self.sample_value[0] = 0.0
        elif now_ms - self.sample_start_ms[self.sample_current] >= self.window_ms:
            self.sample_current = (self.sample_current + 1) % SAMPLES
            if self.sample_count < SAMPLES:
                self.sample_count += 1
            self.sample_start_ms[self.sample_current] = now_ms
            self.sample_value[self.sample_current] = 0.0
        self.sample_value[self.sample_current] += elapsed_ms

    # -- C API (the ring buffer may use these) -----------------------------------------------
    cdef bint grant(self, Py_ssize_t n) noexcept nogil:
        """Kafka's tryAllocate accounting for n bytes (call with the lock held)."""
        # A strict pool needs n available, a non-strict one any (>= 1).
        if self.available < (n if self.strict else 1):
            if self.depleted_since == 0:    # Kafka: a refusal opens a depletion period
                self.depleted_since = kc_monotonic_ns()
            return False
        self.available -= n
        self.outstanding_count += 1
        self.close_depletion()              # Kafka: a success closes one
        return True

    cdef unsigned char* acquire(self, Py_ssize_t n) except? NULL:
        """A block of n bytes (1 <= n <= max_single_allocation, checked by the caller), or NULL
        when Kafka's accounting refuses (its null).  MemoryError (accounting unchanged) when the
        heap cannot give the bytes the accounting granted."""
        cdef Py_ssize_t off
        cdef unsigned char* ptr
        kc_spin_lock(&self.lock)
        if not self.grant(n):
            kc_spin_unlock(&self.lock)
            return NULL
        off = self.take_extent(n)
        if off < 0:
            self.heap_bytes += n
        kc_spin_unlock(&self.lock)
        if off >= 0:
            return self.arena + off
        ptr = <unsigned char*>PyMem_RawMalloc(n)
        if ptr != NULL:
            return ptr
        kc_spin_lock(&self.lock)            # give the grant back (Kafka would keep it: a leak)
        self.available += n
        self.outstanding_count -= 1
        self.heap_bytes -= n
        kc_spin_unlock(&self.lock)
        raise MemoryError(f"cannot allocate {n} bytes")

    cdef int credit(self, unsigned char* ptr, Py_ssize_t n, Py_ssize_t adopted=0) except -1:
        """Give back a block acquire() returned (or try_adopt() took: `adopted` is its
        capacity): Kafka's release (credit n, close a depletion period), then the bytes to the
        arena's free list, to the heap, or to the write buffers' block cache."""
        cdef bint in_arena = <uintptr_t>ptr - <uintptr_t>self.arena < <uintptr_t>self.arena_size
        cdef int lost = 0
        kc_spin_lock(&self.lock)
        if in_arena:
            lost = self.give_extent(ptr - self.arena, n)
        else:
            self.heap_bytes -= n
        self.available += n
        self.outstanding_count -= 1
        self.close_depletion()
        kc_spin_unlock(&self.lock)
        if adopted:
            block_release(ptr, adopted)
        elif not in_arena:
            PyMem_RawFree(ptr)
        if lost:
            raise MemoryError("cannot grow the pool's free list")
        return 0

    cdef int free_priority(self, unsigned char* ptr, Py_ssize_t n) except -1:
        # A priority block from the heap, outside the budget: nothing to credit.
        kc_spin_lock(&self.lock)
        self.priority_bytes -= n
        kc_spin_unlock(&self.lock)
        PyMem_RawFree(ptr)
        return 0

    cdef int check_size(self, Py_ssize_t n) except -1:
        # Kafka's IllegalArgumentException, same wording
        if n < 1:
            raise ValueError(f"requested size {n}<=0")
        if n > self.max_single_allocation:
            raise ValueError(f"requested size {n} is larger than maxSingleAllocationSize "
                             f"{self.max_single_allocation}")
        return 0

    # -- Kafka's MemoryPool API ---------------------------------------------------------------
    def try_allocate(self, Py_ssize_t n, bint priority=False):
        """A writable memoryview of exactly n bytes, or None when the pool refuses now.

        `priority=True` (KIP-81 coordinator traffic): when the pool refuses, the bytes come from
        the heap instead, outside the pool's budget; such a buffer is still given back with
        release().
        """
        cdef unsigned char* ptr
        self.check_size(n)
        ptr = self.acquire(n)
        if ptr != NULL:
            return wrap(self, ptr, n, False)
        if not priority:
            return None
        ptr = <unsigned char*>PyMem_RawMalloc(n)
        if ptr == NULL:
            raise MemoryError(f"cannot allocate {n} bytes")
        kc_spin_lock(&self.lock)
        self.priority_bytes += n
        kc_spin_unlock(&self.lock)
        return wrap(self, ptr, n, True)

    def try_adopt(self, WriteBuffer buffer not None):
        """try_allocate(len(buffer)) without a copy: on a grant the block is `buffer`'s own
        (`buffer` is left empty) and the memoryview is released like any other; None, `buffer`
        untouched, when the pool refuses.  The accounting is Kafka's for len(buffer) bytes (the
        answer try_allocate would give); the block behind it is at most twice that plus 4 KiB.
        ValueError for a size try_allocate refuses; BufferError while a view of `buffer` is
        alive."""
        cdef Py_ssize_t n = buffer.w.length, capacity
        cdef bint granted
        cdef unsigned char* ptr
        self.check_size(n)
        if buffer.w.exports > 0:
            raise BufferError("cannot hand over a WriteBuffer while a memoryview of it is alive")
        kc_spin_lock(&self.lock)
        granted = self.grant(n)
        if granted:
            self.heap_bytes += n
        kc_spin_unlock(&self.lock)
        if not granted:
            return None
        ptr = writer_detach(&buffer.w, &capacity)
        return wrap(self, ptr, n, False, capacity)

    def release(self, buf):
        """Give back a memoryview from try_allocate() or try_adopt(); refuses foreign buffers, double
        releases, and releases while other views of the block are alive (MemoryPoolError)."""
        cdef PyMemoryViewObject* mv
        cdef PoolBuffer pb
        cdef object owner
        if buf is None:
            raise ValueError("provided null buffer")       # Kafka's IllegalArgumentException
        if type(buf) is not memoryview:
            raise MemoryPoolError(
                f"release() takes the memoryview try_allocate() returned, got {type(buf).__name__}")
        mv = <PyMemoryViewObject*>buf
        if mv.flags & _Py_MEMORYVIEW_RELEASED:
            raise MemoryPoolError("double release: this memoryview was already released")
        if mv.view.obj == NULL or type(<object>mv.view.obj) is not PoolBuffer:
            raise MemoryPoolError("foreign buffer: this memoryview was not allocated by a pool")
        pb = <PoolBuffer><object>mv.view.obj
        if pb.pool is not self:
            raise MemoryPoolError("foreign buffer: this memoryview belongs to another pool")
        if pb.released:
            raise MemoryPoolError("double release: this buffer was already released")
        if mv.view.buf != <void*>pb.ptr or mv.view.len != pb.size:
            raise MemoryPoolError(
                f"release() takes the whole {pb.size}-byte buffer, not a {mv.view.len}-byte slice")
        if mv.exports != 0 or mv.mbuf.exports != 1 or pb.exports != 1:
            raise MemoryPoolError(
                f"cannot release a {pb.size}-byte buffer while "
                f"{mv.exports + mv.mbuf.exports - 1 + pb.exports - 1} other view(s) of it are alive")
        _memoryview_release(buf)          # later use of `buf` raises ValueError
        pb.released = True
        if pb.priority:
            self.free_priority(pb.ptr, pb.size)
        else:
            self.credit(pb.ptr, pb.size, pb.adopted)
        pb.ptr = NULL
        # Recycle the exporter when nobody else can reach it (saves an allocation per block).
        if Py_REFCNT(pb) == 1 and self.ncached < 8:
            pb.pool = None
            self.cached[self.ncached] = pb
            self.ncached += 1

    @property
    def available_memory(self) -> int:
        return self.available

    @property
    def is_out_of_memory(self) -> bool:
        return self.available <= 0

    @property
    def arena_bytes(self) -> int:
        """Bytes of the arena (reserved, resident only where used)."""
        return self.arena_size

    @property
    def heap_bytes_in_use(self) -> int:
        """Bytes of granted blocks served from the heap (the arena had no contiguous block)."""
        return self.heap_bytes

    @property
    def outstanding(self) -> int:
        """Number of blocks granted within the budget and not yet released."""
        return self.outstanding_count

    @property
    def priority_bytes_in_use(self) -> int:
        """Bytes of priority allocations served from the heap, outside the budget."""
        return self.priority_bytes

    @property
    def largest_free_block(self) -> int:
        cdef Py_ssize_t i, best = 0
        kc_spin_lock(&self.lock)
        for i in range(self.nfree):
            if self.free_list[i].length > best:
                best = self.free_list[i].length
        kc_spin_unlock(&self.lock)
        return best

    def metrics(self) -> dict:
        """KIP-81's metrics (our lowercase names; Kafka's broker names in brackets):

        memory-pool-free [MemoryPoolAvailable]: available_memory, bytes (may be negative).
        memory-pool-used [MemoryPoolUsed]: size - available_memory, bytes.
        memory-pool-avg-depleted-percent [MemoryPoolAvgDepletedPercent]: a RATIO 0..1, as Kafka
            reports it despite the name: depleted ms in the sampled window / window ms
            (2 samples x metrics_window_ms, Kafka's Rate windowing).
        memory-pool-depleted-time-total [MemoryPoolDepletedTimeTotal]: cumulative depleted
            time, milliseconds (float).  Like Kafka, a still-open period counts once it closes.
        """
        cdef int64_t now_ms, oldest, elapsed
        cdef double total = 0.0
        cdef int i, full
        kc_spin_lock(&self.lock)
        now_ms = kc_monotonic_ns() // 1000000
        oldest = now_ms
        for i in range(self.sample_count):
            if now_ms - self.sample_start_ms[i] >= SAMPLES * self.window_ms:
                continue                    # expired sample (Kafka purges it)
            total += self.sample_value[i]
            if self.sample_start_ms[i] < oldest:
                oldest = self.sample_start_ms[i]
        available = self.available
        depleted_total = self.depleted_total_ms
        kc_spin_unlock(&self.lock)
        elapsed = now_ms - oldest
        full = <int>(elapsed // self.window_ms)
        if full < SAMPLES - 1:
            elapsed += (SAMPLES - 1 - full) * self.window_ms
        return {
            "memory-pool-free": available,
            "memory-pool-used": self.size - available,
            "memory-pool-avg-depleted-percent": total / elapsed if elapsed > 0 else 0.0,
            "memory-pool-depleted-time-total": depleted_total,
        }

    def __repr__(self):
        return (f"SimpleMemoryPool(size={self.size}, available={self.available}, "
                f"max_single_allocation={self.max_single_allocation}, strict={self.strict})")


cdef class _NoPool:
    """MemoryPool.NONE: a fresh bytearray per allocation, release is a no-op (Kafka)."""

    def try_allocate(self, Py_ssize_t n, bint priority=False):
        if n < 0:
            raise ValueError(f"capacity < 0: ({n} < 0)")
        return memoryview(bytearray(n))

    def release(self, buf):
        pass

    @property
    def size(self) -> int:
        return INT64_MAX

    @property
    def available_memory(self) -> int:
        return INT64_MAX

    @property
    def is_out_of_memory(self) -> bool:
        return False

    def metrics(self) -> dict:
        return {"memory-pool-free": INT64_MAX, "memory-pool-used": 0,
                "memory-pool-avg-depleted-percent": 0.0, "memory-pool-depleted-time-total": 0.0}

    def __repr__(self):
        return "MemoryPool.NONE"


class MemoryPool(abc.ABC):
    """Kafka's MemoryPool interface; `MemoryPool.NONE` is the unbounded no-op pool."""

    NONE: "MemoryPool"

    @abc.abstractmethod
    def try_allocate(self, n, priority=False): ...

    @abc.abstractmethod
    def release(self, buf): ...


MemoryPool.register(SimpleMemoryPool)
MemoryPool.register(_NoPool)
MemoryPool.NONE = _NoPool()
