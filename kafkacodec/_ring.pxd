# KAFKA-2045 response ring buffer: one buffer per connection, each response stored
# contiguously behind a one-byte header (1 = complete response follows, 0 = skip to the front).

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

cdef struct Slot:
    Py_ssize_t pos        # position of the one-byte header in the ring
    Py_ssize_t size       # response size: bytes after the int32 size prefix
    Py_ssize_t exports    # live buffer-protocol exports of views into this slot
    int released          # release() was called (the bytes stay until exports == 0)


cdef class ResponseRingBuffer:
    cdef unsigned char* buf
    cdef readonly Py_ssize_t capacity
    cdef object pool                # SimpleMemoryPool or None
    cdef PyObject* pool_view        # the memoryview the pool handed out: a strong reference
                                    # the cyclic GC does not traverse (it would clear the view
                                    # under pool_buffer's export, and the dealloc then crashed)
    cdef Py_buffer* pool_buffer     # our export of it (heap-allocated, so Cython's traverse
                                    # never shows the collector the memoryview it holds)
    cdef bint has_pool_buffer
    cdef bint owns_buf              # buf came from PyMem_RawMalloc (no pool)
    # writer (network) side
    cdef Py_ssize_t h               # header position of the response being received
    cdef Py_ssize_t got             # bytes of it received so far (size prefix included)
    cdef Py_ssize_t size            # its size once the 4-byte prefix is in, else -1
    cdef bint placed                # [h, h + 5 + size) (or [h, h + 5) before size) is reserved
    cdef object error               # sticky stream error (bad size prefix)
    # reader side
    cdef Py_ssize_t r               # header position of the oldest unfreed response
    cdef Py_ssize_t used            # bytes from r to h, skipped tail included
    cdef Slot* slots                # circular queue of committed, unfreed responses
    cdef Py_ssize_t slots_cap
    cdef Py_ssize_t slots_head
    cdef Py_ssize_t nslots
    cdef Py_ssize_t nhanded         # how many of them next_response() has returned
    cdef int64_t first_seq          # sequence number of slots[slots_head]
    cdef Py_ssize_t exports         # all live exports (close() refuses while any is alive)
    cdef Py_ssize_t window_exports  # of them, live exports of the write window (get_buffer)
    cdef Py_ssize_t nogil_users     # recvs and decompressions reading or writing the memory
                                    # without the GIL: close() leaves the release to the last
    cdef bint writing               # feed/recv_into/buffer_updated running (one writer)
    cdef bint closed
    cdef readonly bint eof
    cdef readonly Py_ssize_t skips
    cdef readonly int64_t responses
    cdef list free_responses        # recycled Response objects

    cdef Py_ssize_t* bounds         # scratch for landed(): (size, next start) pairs
    cdef Py_ssize_t bounds_cap

    cdef Py_ssize_t window(self, Py_ssize_t* start) except -1
    cdef Py_ssize_t limit(self) noexcept
    cdef Py_ssize_t greedy_window(self, Py_ssize_t* start) except -1
    cdef int landed(self, Py_ssize_t n) except -1
    cdef int wrote(self, Py_ssize_t n) except -1
    cdef int try_place(self, Py_ssize_t need) noexcept
    cdef int commit(self) except -1
    cdef int advance(self) except -1
    cdef Slot* slot_of(self, int64_t seq) noexcept
    cdef bint is_released(self, int64_t seq) noexcept
    cdef int release_memory(self) except -1
    cdef int check_writer(self) except -1
    cdef int begin_write(self, bint through_window) except -1
    cdef Py_ssize_t receive(self, sock, int fd, Py_ssize_t start, Py_ssize_t n) except -1
    cdef int enter_reader(self, int64_t seq) except -1
    cdef void leave_reader(self, int64_t seq) noexcept
    cdef void leave_nogil(self) noexcept
    cpdef release_response(self, Response resp)


cdef class Response:
    cdef ResponseRingBuffer ring
    cdef int64_t seq
    cdef Py_ssize_t pos
    cdef Py_ssize_t size
    cdef const unsigned char* check(self) except NULL


cdef class RingView:
    cdef ResponseRingBuffer ring
    cdef Response resp              # keeps the response (and so its slot) from auto-release
    cdef int64_t seq
    cdef Py_ssize_t start
    cdef Py_ssize_t length
    cdef const unsigned char* check(self) except NULL
