# The read cursor every decoder is built on (modelled on asyncpg's pgproto ReadBuffer).
#
# A Cursor is a plain C struct: the start of the caller's buffer, the current position and the
# end.  `need()` is the single bounds check; after it the fixed-width readers are unchecked.
# Varint readers check every byte themselves.  All positions are relative to `data`, which
# lets errors name the byte position in the caller's buffer (`base` is added for slices).

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef struct Cursor:
    const unsigned char* data   # start of the region being parsed
    Py_ssize_t pos              # next byte to read, relative to data
    Py_ssize_t end              # one past the last readable byte, relative to data
    Py_ssize_t base             # position of data[0] in the caller's buffer (for messages)

# Out-of-line raisers (in _cursor.pyx): they keep the inline fast paths small.
# Declared nogil (they take the GIL to raise) so that every reader below can run without the
# GIL: a hot loop calls them inside `with nogil` and the exception still propagates.
cdef int raise_short(const Cursor* cur, Py_ssize_t wanted, const char* what) except -1 nogil
cdef int raise_corrupt(const Cursor* cur, const char* what) except -1 nogil
# An array past a request's allowance of entries (max_request_entries): RecordTooLargeError.
cdef int raise_too_many(const Cursor* cur, Py_ssize_t n, Py_ssize_t left, const char* what) except -1
# The 3..5-byte case of read_varint (out of line, so the inline part stays small).
cdef int read_varint_long(Cursor* cur, int32_t* out, const char* what) except -1 nogil

cdef inline void cursor_init(Cursor* cur, const unsigned char* data, Py_ssize_t size,
                             Py_ssize_t base) noexcept nogil:
    cur.data = data
    cur.pos = 0
    cur.end = size
    cur.base = base

cdef inline Py_ssize_t remaining(const Cursor* cur) noexcept nogil:
    return cur.end - cur.pos

cdef inline int need(const Cursor* cur, Py_ssize_t n, const char* what) except -1 nogil:
    if n < 0 or cur.end - cur.pos < n:
        return raise_short(cur, n, what)
    return 0

# --- unchecked big-endian readers: call need() first -------------------------------------
cdef inline uint16_t load_u16(const unsigned char* p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]

cdef inline uint32_t load_u32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]

cdef inline uint32_t load_le32(const unsigned char* p) noexcept nogil:
    # little-endian: the gzip trailer and Kafka's LZ4 frame (codec containers, not Kafka fields)
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)

cdef inline uint64_t load_u64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>load_u32(p) << 32) | load_u32(p + 4)

cdef inline int8_t get_int8(Cursor* cur) noexcept nogil:
    cur.pos += 1
    return <int8_t>cur.data[cur.pos - 1]

cdef inline int16_t get_int16(Cursor* cur) noexcept nogil:
    cur.pos += 2
    return <int16_t>load_u16(cur.data + cur.pos - 2)

cdef inline int32_t get_int32(Cursor* cur) noexcept nogil:
    cur.pos += 4
    return <int32_t>load_u32(cur.data + cur.pos - 4)

cdef inline uint32_t get_uint32(Cursor* cur) noexcept nogil:
    cur.pos += 4
    return load_u32(cur.data + cur.pos - 4)

cdef inline int64_t get_int64(Cursor* cur) noexcept nogil:
    cur.pos += 8
    return <int64_t>load_u64(cur.data + cur.pos - 8)

# --- checked readers ------------------------------------------------------------------------
cdef inline const unsigned char* take(Cursor* cur, Py_ssize_t n, const char* what) except NULL nogil:
    """Return a pointer to the next n bytes and advance past them."""
    need(cur, n, what)
    cur.pos += n
    return cur.data + cur.pos - n

cdef inline int read_uvarint64(Cursor* cur, uint64_t* out, int max_bytes,
                               const char* what) except -1 nogil:
    # Unsigned LEB128: 7 bits per byte, least significant group first (protobuf varint).
    cdef uint64_t value = 0
    cdef unsigned char byte
    cdef int shift = 0
    cdef int count = 0
    while True:
        if cur.pos >= cur.end:
            return raise_short(cur, 1, what)
        byte = cur.data[cur.pos]
        cur.pos += 1
        value |= <uint64_t>(byte & 0x7F) << shift
        count += 1
        if not (byte & 0x80):
            out[0] = value
            return 0
        if count >= max_bytes:
            # Kafka: a varint has at most 5 bytes, a varlong at most 10.
            cur.pos -= count
            return raise_corrupt(cur, what)
        shift += 7

cdef inline int read_varint(Cursor* cur, int32_t* out, const char* what) except -1 nogil:
    # Zig-zag signed varint (v2 records): (n << 1) ^ (n >> 31), at most 5 bytes.  One- and
    # two-byte values (most lengths and deltas) are decoded here; longer ones out of line.
    cdef const unsigned char* p = cur.data + cur.pos
    cdef Py_ssize_t left = cur.end - cur.pos
    cdef uint32_t raw
    if left >= 1 and not (p[0] & 0x80):
        cur.pos += 1
        raw = p[0]
    elif left >= 2 and not (p[1] & 0x80):
        cur.pos += 2
        raw = (p[0] & 0x7F) | (<uint32_t>p[1] << 7)
    else:
        return read_varint_long(cur, out, what)
    out[0] = <int32_t>((raw >> 1) ^ -(raw & 1))
    return 0

cdef inline int read_varlong(Cursor* cur, int64_t* out, const char* what) except -1 nogil:
    # Zig-zag signed varlong (v2 timestamp deltas), at most 10 bytes.
    cdef const unsigned char* p = cur.data + cur.pos
    cdef Py_ssize_t left = cur.end - cur.pos
    cdef uint64_t raw
    if left >= 1 and not (p[0] & 0x80):
        cur.pos += 1
        raw = p[0]
    elif left >= 2 and not (p[1] & 0x80):      # deltas under 8.2 s: two bytes
        cur.pos += 2
        raw = (p[0] & 0x7F) | (<uint64_t>p[1] << 7)
    else:
        read_uvarint64(cur, &raw, 10, what)
    out[0] = <int64_t>((raw >> 1) ^ -(raw & 1))
    return 0

cdef inline int read_uvarint(Cursor* cur, uint32_t* out, const char* what) except -1 nogil:
    # Unsigned varint of the flexible protocol versions (compact lengths), at most 5 bytes.
    cdef uint64_t raw
    read_uvarint64(cur, &raw, 5, what)
    if raw > 0xFFFFFFFFULL:
        return raise_corrupt(cur, what)
    out[0] = <uint32_t>raw
    return 0
