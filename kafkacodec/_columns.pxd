# Arrow variable-width arrays (binary, string, large_binary, large_string) read in place by
# the encoders that take Arrow input (_builder.append_many, _arrow.encode_v2).
#
# Nothing in the array is trusted: pyarrow checks only the first and last offsets of an array
# made with from_buffers, and a buffer may be writable memory (a numpy array) that Python code
# run during the call rewrites.  So the buffer sizes are checked once against the rows to read,
# and every row's two offsets are loaded once and checked (in order, inside the data buffer)
# before its bytes are read.  The caller keeps the buffers (arrow_binary_init's result)
# referenced for as long as it reads.

from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t

cdef struct ArrowBinary:
    const uint8_t* validity          # NULL: no nulls
    const unsigned char* offsets     # int32 entries, or int64 when wide
    const unsigned char* data
    int64_t data_size
    Py_ssize_t first                 # the array's slice offset
    bint wide

cdef inline object arrow_binary_init(ArrowBinary* c, object arr, bint wide, Py_ssize_t rows,
                                     str name):
    """Point c at rows [0, rows) of the pyarrow array `arr` (wide: int64 offsets).  Returns its
    buffers, to keep referenced; ValueError when one is too short for those rows."""
    cdef Py_ssize_t first = arr.offset
    bufs = arr.buffers()
    validity, offsets, data = bufs[0], bufs[1], bufs[2]
    c.first = first
    c.wide = wide
    c.validity = NULL
    c.offsets = NULL
    c.data = NULL
    c.data_size = 0 if data is None else data.size
    if rows == 0:
        return bufs
    if offsets is None or offsets.size < (first + rows + 1) * (8 if wide else 4):
        raise ValueError(f"{name}: the Arrow offsets buffer is too short for {rows} rows")
    c.offsets = <const unsigned char*><uintptr_t>offsets.address
    if c.data_size:
        c.data = <const unsigned char*><uintptr_t>data.address
    if validity is not None and arr.null_count:
        if validity.size < (first + rows + 7) // 8:
            raise ValueError(f"{name}: the Arrow validity bitmap is too short for {rows} rows")
        c.validity = <const uint8_t*><uintptr_t>validity.address
    return bufs

cdef inline int arrow_binary_row(const ArrowBinary* c, Py_ssize_t i, const unsigned char** p,
                                 int64_t* size) noexcept nogil:
    """Row i: 1 with its bytes in (*p, *size), 0 when it is null, -1 when its offsets are out
    of order or outside the data buffer."""
    cdef Py_ssize_t j = c.first + i
    cdef int64_t start, end
    if c.validity != NULL and not (c.validity[j >> 3] >> (j & 7)) & 1:
        return 0
    if c.wide:
        start = (<const int64_t*>c.offsets)[j]
        end = (<const int64_t*>c.offsets)[j + 1]
    else:
        start = (<const int32_t*>c.offsets)[j]
        end = (<const int32_t*>c.offsets)[j + 1]
    if start < 0 or end < start or end > c.data_size:
        return -1
    p[0] = c.data + start if c.data != NULL else <const unsigned char*>c   # empty: not NULL
    size[0] = end - start
    return 1
