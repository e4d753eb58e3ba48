# The write buffer every encoder uses: one growable C buffer with inline big-endian and varint
# writers.  Length and CRC fields are reserved first and patched when the body is done.
# `WriteBuffer` owns a Writer, exports the buffer protocol and refuses to grow (or be
# reset) while a view of it is alive, so a view never dangles.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef struct Writer:
    unsigned char* buf
    Py_ssize_t length        # bytes written
    Py_ssize_t capacity
    int exports              # live buffer-protocol views (growth is refused while > 0)

cdef int writer_grow(Writer* w, Py_ssize_t extra) except -1
# Free w's block (a large one is kept for the next large buffer, see _writer.pyx); w is empty.
cdef void writer_release(Writer* w) noexcept
# Hand w's block over, w left empty: the block (NULL if w had none), its size in *capacity
# (trimmed when far larger than what was written).  Give it back with block_release().
cdef unsigned char* writer_detach(Writer* w, Py_ssize_t* capacity) noexcept
cdef void block_release(unsigned char* buf, Py_ssize_t capacity) noexcept

cdef inline int ensure(Writer* w, Py_ssize_t extra) except -1:
    if w.capacity - w.length < extra:
        return writer_grow(w, extra)
    return 0

cdef inline void store_u16(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 8)
    p[1] = <unsigned char>v

cdef inline void store_u32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v

cdef inline void store_le32(unsigned char* p, uint32_t v) noexcept nogil:
    # little-endian: the gzip trailer and Kafka's LZ4 frame (codec containers, not Kafka fields)
    p[0] = <unsigned char>v
    p[1] = <unsigned char>(v >> 8)
    p[2] = <unsigned char>(v >> 16)
    p[3] = <unsigned char>(v >> 24)

cdef inline void store_u64(unsigned char* p, uint64_t v) noexcept nogil:
    store_u32(p, <uint32_t>(v >> 32))
    store_u32(p + 4, <uint32_t>v)

cdef inline int put_int8(Writer* w, int8_t v) except -1:
    ensure(w, 1)
    w.buf[w.length] = <unsigned char>v
    w.length += 1
    return 0

cdef inline int put_int16(Writer* w, int16_t v) except -1:
    ensure(w, 2)
    store_u16(w.buf + w.length, <uint16_t>v)
    w.length += 2
    return 0

cdef inline int put_int32(Writer* w, int32_t v) except -1:
    ensure(w, 4)
    store_u32(w.buf + w.length, <uint32_t>v)
    w.length += 4
    return 0

cdef inline int put_int64(Writer* w, int64_t v) except -1:
    ensure(w, 8)
    store_u64(w.buf + w.length, <uint64_t>v)
    w.length += 8
    return 0

cdef inline int put_bytes(Writer* w, const unsigned char* data, Py_ssize_t n) except -1:
    ensure(w, n)
    if n > 0:
        memcpy(w.buf + w.length, data, n)
    w.length += n
    return 0

cdef inline Py_ssize_t reserve(Writer* w, Py_ssize_t n) except -1:
    """Skip n bytes (a length or CRC to patch later); return their position."""
    ensure(w, n)
    w.length += n
    return w.length - n

cdef inline int uvarint_size(uint64_t v) noexcept nogil:
    cdef int size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size

# Zig-zag (v2 records encode every length and delta so): the one encoding of signed varints.
cdef inline uint32_t zigzag32(int32_t v) noexcept nogil:
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)

cdef inline uint64_t zigzag64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)

cdef inline int varint_size(int32_t v) noexcept nogil:
    return uvarint_size(zigzag32(v))

cdef inline int varlong_size(int64_t v) noexcept nogil:
    return uvarint_size(zigzag64(v))

cdef inline unsigned char* store_uvarint(unsigned char* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <unsigned char>(v | 0x80)
        v >>= 7
        p += 1
    p[0] = <unsigned char>v
    return p + 1

cdef inline unsigned char* store_varint(unsigned char* p, int32_t v) noexcept nogil:
    return store_uvarint(p, zigzag32(v))

cdef inline unsigned char* store_varlong(unsigned char* p, int64_t v) noexcept nogil:
    return store_uvarint(p, zigzag64(v))

cdef inline int put_uvarint(Writer* w, uint64_t v) except -1:
    ensure(w, 10)
    w.length = store_uvarint(w.buf + w.length, v) - w.buf
    return 0

cdef inline int put_varint(Writer* w, int32_t v) except -1:
    return put_uvarint(w, zigzag32(v))

cdef inline int put_varlong(Writer* w, int64_t v) except -1:
    return put_uvarint(w, zigzag64(v))


cdef class WriteBuffer:
    cdef Writer w
    cdef bytes take_bytes(self)
