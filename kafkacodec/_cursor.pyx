# cython: language_level=3
"""Out-of-line error paths of the read cursor (see _cursor.pxd)."""

from kafkacodec.errors import CorruptRecordError, RecordTooLargeError


cdef int raise_short(const Cursor* cur, Py_ssize_t wanted, const char* what) except -1 nogil:
    with gil:
        raise CorruptRecordError(
            f"truncated {what.decode()}: needs {wanted} bytes, {cur.end - cur.pos} left",
            position=cur.base + cur.pos)


cdef int raise_corrupt(const Cursor* cur, const char* what) except -1 nogil:
    with gil:
        raise CorruptRecordError(f"invalid {what.decode()}", position=cur.base + cur.pos)


cdef int raise_too_many(const Cursor* cur, Py_ssize_t n, Py_ssize_t left, const char* what) except -1:
    raise RecordTooLargeError(f"{what.decode()}: {n} entries where {left} more are allowed",
                              position=cur.base + cur.pos)


cdef int read_varint_long(Cursor* cur, int32_t* out, const char* what) except -1 nogil:
    cdef uint64_t raw
    read_uvarint64(cur, &raw, 5, what)
    if raw > 0xFFFFFFFFULL:
        cur.pos -= 5
        return raise_corrupt(cur, what)
    out[0] = <int32_t>((<uint32_t>raw >> 1) ^ -(<uint32_t>(raw & 1)))
    return 0
