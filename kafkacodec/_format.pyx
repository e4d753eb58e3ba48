# cython: language_level=3
"""Out-of-line error path of the entry framing (see _format.pxd) and entry_head() for the Python
layers; the layout constants of _format.pxd (a cpdef enum) are this module's Python-visible
names."""

from libc.stdint cimport int8_t, int32_t, int64_t
from kafkacodec._cursor cimport load_u32, load_u64

from kafkacodec.errors import CorruptRecordError


cdef int raise_frame_error(int code, const unsigned char* p, Py_ssize_t position) except -1 nogil:
    cdef int64_t offset = <int64_t>load_u64(p)
    cdef int32_t size = <int32_t>load_u32(p + SIZE_OFFSET)
    with gil:
        if code == FRAME_BAD_SIZE:
            raise CorruptRecordError(f"invalid entry size {size} (the minimum message is 14 bytes)",
                                     position=position + SIZE_OFFSET, offset=offset)
        if code == FRAME_BAD_MAGIC:
            raise CorruptRecordError(f"invalid magic byte {<int8_t>p[MAGIC_OFFSET]} (not 0, 1 or 2)",
                                     position=position + MAGIC_OFFSET, offset=offset)
        if code == FRAME_SHORT_V2:
            raise CorruptRecordError(f"v2 batch of {LOG_OVERHEAD + size} bytes is shorter than its "
                                     f"61-byte header", position=position + SIZE_OFFSET, offset=offset)
        raise CorruptRecordError(f"v1 message of {LOG_OVERHEAD + size} bytes is shorter than its "
                                 f"34-byte minimum", position=position + SIZE_OFFSET, offset=offset)


def entry_head(data, Py_ssize_t position=0):
    """(offset, size) that the entry at `position` of `data` declares in its first LOG_OVERHEAD
    bytes (size counts them, as a framed entry's size does), as stored; None when fewer are
    left.  For the Python layers to report an entry the framing stopped at (partial, or larger
    than the window read) without parsing bytes themselves."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B")
    if position < 0:
        raise ValueError(f"position {position} is negative")
    if view.shape[0] - position < LOG_OVERHEAD:
        return None
    return (<int64_t>load_u64(&view[position]),
            LOG_OVERHEAD + <Py_ssize_t><int32_t>load_u32(&view[position + SIZE_OFFSET]))
