# cython: language_level=3
"""Growable write buffer (see _writer.pxd for the inline writers)."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport (PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_SIMPLE)
from libc.stdlib cimport free, realloc

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

cdef Py_ssize_t INITIAL_CAPACITY = 256


cdef int writer_grow(Writer* w, Py_ssize_t extra) except -1:
    """Room for `extra` more bytes: the capacity doubles until it holds them, or becomes
    exactly what is needed once doubling would pass PY_SSIZE_T_MAX."""
    cdef Py_ssize_t wanted, capacity = w.capacity if w.capacity > 0 else INITIAL_CAPACITY
    cdef unsigned char* grown
    if w.exports > 0:
        raise BufferError("cannot grow a WriteBuffer while a memoryview of it is alive")
    if extra < 0:
        raise ValueError(f"cannot grow a WriteBuffer by {extra} bytes")
    if extra > PY_SSIZE_T_MAX - w.length:
        raise MemoryError(f"a WriteBuffer of {w.length} + {extra} bytes exceeds the address space")
    wanted = w.length + extra
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
        free(self.w.buf)
        self.w.buf = NULL

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
