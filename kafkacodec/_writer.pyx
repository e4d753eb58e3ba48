# cython: language_level=3
"""Growable write buffer (see _writer.pxd for the inline writers)."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport (PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_SIMPLE)
from libc.stdlib cimport free, realloc

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

cdef Py_ssize_t INITIAL_CAPACITY = 256


# Freed large blocks, kept for the next large buffer (an eager conversion's output, a log built
# batch after batch, a lazy conversion's chunks): a fresh block faults its pages in on first
# touch, one fault per 4 KiB (about 2.4 us each on the project's VMs, far more under load: 17 MB
# took 10-40 ms), a kept one is already mapped.  POOL_MIN_BLOCK is glibc's smallest mmap
# threshold (M_MMAP_THRESHOLD's default): a block that size or more may be a fresh mapping, so
# 128 KiB conversion chunks faulted ~29 pages each, or none, with the allocator's history.
# Bounded: POOL_SLOTS blocks of POOL_MIN_BLOCK bytes or more, POOL_MAX_BYTES in all; only
# touched with the GIL held (writer_grow, WriteBuffer.__dealloc__).
cdef enum:
    POOL_SLOTS = 8
    POOL_MIN_BLOCK = 128 << 10
    POOL_MAX_BYTES = 64 << 20
cdef unsigned char* pool_ptr[8]
cdef Py_ssize_t pool_cap[8]
cdef Py_ssize_t pool_bytes = 0


cdef unsigned char* pool_take(Py_ssize_t need, Py_ssize_t* capacity) noexcept:
    """The smallest kept block of need..4*need bytes (its size in *capacity), or NULL."""
    global pool_bytes
    cdef int i, best = -1
    cdef unsigned char* p
    for i in range(POOL_SLOTS):
        if (pool_ptr[i] != NULL and need <= pool_cap[i] and pool_cap[i] // 4 <= need
                and (best < 0 or pool_cap[i] < pool_cap[best])):
            best = i
    if best < 0:
        return NULL
    p = pool_ptr[best]
    capacity[0] = pool_cap[best]
    pool_ptr[best] = NULL
    pool_bytes -= capacity[0]
    return p


cdef void block_release(unsigned char* buf, Py_ssize_t capacity) noexcept:
    """Free a writer's block, or keep it for the next large buffer (in a free slot, else in
    place of the smallest kept block when that one is smaller: the big blocks are the ones
    worth keeping)."""
    global pool_bytes
    cdef int i, slot = -1
    cdef Py_ssize_t dropped = 0
    if capacity >= POOL_MIN_BLOCK:
        for i in range(POOL_SLOTS):
            if pool_ptr[i] == NULL:
                slot = i
                break
            if slot < 0 or pool_cap[i] < pool_cap[slot]:
                slot = i
        if pool_ptr[slot] != NULL:
            dropped = pool_cap[slot]
        if dropped < capacity and pool_bytes - dropped + capacity <= POOL_MAX_BYTES:
            free(pool_ptr[slot])
            pool_ptr[slot] = buf
            pool_cap[slot] = capacity
            pool_bytes += capacity - dropped
            return
    free(buf)


cdef void writer_release(Writer* w) noexcept:
    block_release(w.buf, w.capacity)
    w.buf = NULL
    w.length = w.capacity = 0


cdef unsigned char* writer_detach(Writer* w, Py_ssize_t* capacity) noexcept:
    cdef unsigned char* buf = w.buf
    cdef unsigned char* trimmed
    capacity[0] = w.capacity
    if w.length and w.capacity > 2 * w.length + 4096:   # slack bounded by what was written
        trimmed = <unsigned char*>realloc(buf, w.length)
        if trimmed != NULL:
            buf = trimmed
            capacity[0] = w.length
    w.buf = NULL
    w.length = w.capacity = 0
    return buf


def _pooled_bytes() -> int:
    """Bytes of freed blocks kept for reuse (tests)."""
    return pool_bytes


cdef int writer_grow(Writer* w, Py_ssize_t extra) except -1:
    """Room for `extra` more bytes: a first block is what is needed (256 bytes at least; a
    kept block when one fits), then the capacity doubles until it holds them, or becomes
    exactly what is needed once doubling would pass PY_SSIZE_T_MAX."""
    cdef Py_ssize_t wanted, capacity = w.capacity
    cdef unsigned char* grown
    if w.exports > 0:
        raise BufferError("cannot grow a WriteBuffer while a memoryview of it is alive")
    if extra < 0:
        raise ValueError(f"cannot grow a WriteBuffer by {extra} bytes")
    if extra > PY_SSIZE_T_MAX - w.length:
        raise MemoryError(f"a WriteBuffer of {w.length} + {extra} bytes exceeds the address space")
    wanted = w.length + extra
    if w.buf == NULL:
        if wanted >= POOL_MIN_BLOCK:
            w.buf = pool_take(wanted, &w.capacity)
            if w.buf != NULL:
                return 0
        capacity = max(wanted, INITIAL_CAPACITY)
    while capacity < wanted:
        if capacity > PY_SSIZE_T_MAX // 2:
            capacity = wanted
        else:
            capacity *= 2
    grown = <unsigned char*>realloc(w.buf, capacity)
    if grown == NULL:
        raise MemoryError(f"cannot grow write buffer to {capacity} bytes")
    w.buf = grown
    w.capacity = capacity
    return 0


cdef class WriteBuffer:
    """WriteBuffer(capacity=0)

    A growable byte buffer; `memoryview(buffer)` exposes what was written.  Every operation
    holds the GIL from start to end (nothing runs without it), so sharing one between threads
    cannot corrupt it; a buffer with a live memoryview refuses to grow or reset (BufferError)."""

    def __cinit__(self, Py_ssize_t capacity=0):
        if capacity > 0:
            writer_grow(&self.w, capacity)

    def __dealloc__(self):
        writer_release(&self.w)

    def __len__(self):
        return self.w.length

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.w.buf, self.w.length, 1, flags)
        self.w.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.w.exports -= 1

    def write(self, data) -> int:
        """Append the raw bytes of any contiguous buffer; returns how many."""
        cdef Py_buffer view
        cdef Py_ssize_t n
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            n = view.len
            put_bytes(&self.w, <const unsigned char*>view.buf, n)
        finally:
            PyBuffer_Release(&view)
        return n

    def clear(self):
        if self.w.exports > 0:
            raise BufferError("cannot reset a WriteBuffer while a memoryview of it is alive")
        self.w.length = 0

    def getvalue(self) -> bytes:
        return PyBytes_FromStringAndSize(<char*>self.w.buf, self.w.length)

    cdef bytes take_bytes(self):
        """Copy out what was written and start over (the buffer keeps its capacity)."""
        cdef bytes out = PyBytes_FromStringAndSize(<char*>self.w.buf, self.w.length)
        self.w.length = 0
        return out
