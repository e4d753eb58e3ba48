# SimpleMemoryPool (KIP-72 / KIP-81): Kafka's accounting, served from an arena and the heap.
#
# The accounting (`available`, strict / non-strict thresholds, depletion periods) alone decides,
# as in Kafka's SimpleMemoryPool.  A granted block comes from the arena (at most Kafka's bound:
# `size` strict, `size + max_single_allocation - 1` non-strict, capped) first-fit from a free
# list of extents kept sorted by offset (neighbours coalesce on release), else from the heap.

from libc.stdint cimport int64_t

cdef struct Extent:
    Py_ssize_t off
    Py_ssize_t length


cdef class PoolBuffer:
    # The exporter behind each memoryview try_allocate() returns.
    cdef object pool              # the SimpleMemoryPool (None while cached for reuse)
    cdef unsigned char* ptr
    cdef Py_ssize_t size
    cdef Py_ssize_t exports       # live Py_buffer exports (memoryview managers)
    cdef readonly bint released
    cdef bint priority            # a priority allocation outside the budget (PyMem_Raw)
    cdef Py_ssize_t adopted       # > 0: a WriteBuffer's block of this capacity (try_adopt)


cdef class SimpleMemoryPool:
    cdef readonly int64_t size
    cdef readonly Py_ssize_t max_single_allocation
    cdef readonly bint strict
    cdef int64_t available
    cdef unsigned char* arena     # NULL when arena_size is 0 (every block from the heap)
    cdef Py_ssize_t arena_size
    cdef Py_ssize_t heap_bytes    # budget bytes served from the heap (outside the arena)
    cdef Extent* free_list
    cdef Py_ssize_t nfree
    cdef Py_ssize_t free_cap
    cdef char lock
    # depletion periods (monotonic ns; 0 = no period open)
    cdef int64_t depleted_since
    cdef double depleted_total_ms
    cdef double sample_value[2]
    cdef int64_t sample_start_ms[2]
    cdef int sample_count
    cdef int sample_current
    cdef int64_t window_ms
    cdef Py_ssize_t outstanding_count
    cdef Py_ssize_t priority_bytes
    cdef readonly Py_ssize_t leaked
    cdef list cached              # recycled PoolBuffer exporters
    cdef Py_ssize_t ncached

    cdef Py_ssize_t take_extent(self, Py_ssize_t n) noexcept nogil
    cdef int give_extent(self, Py_ssize_t off, Py_ssize_t n) noexcept nogil
    cdef void close_depletion(self) noexcept nogil
    cdef int check_size(self, Py_ssize_t n) except -1
    cdef bint grant(self, Py_ssize_t n) noexcept nogil
    cdef unsigned char* acquire(self, Py_ssize_t n) except? NULL
    cdef int credit(self, unsigned char* ptr, Py_ssize_t n, Py_ssize_t adopted=*) except -1
    cdef int free_priority(self, unsigned char* ptr, Py_ssize_t n) except -1
