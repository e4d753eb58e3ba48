# Message format v0/v1 primitives (spec record-formats.md §2-4): parse and write one message
# (a standalone record or a compressed wrapper) and scan an inner (decompressed) message set.

from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy
from kafkacodec._cursor cimport Cursor, need, take, get_int32, get_int64, load_u32, raise_corrupt
from kafkacodec._writer cimport Writer, ensure, store_u32, store_u64
from kafkacodec._format cimport (LOG_OVERHEAD, MAGIC_OFFSET, V0_RECORD_OVERHEAD, SIZE_OFFSET,
                                 LEGACY_TIMESTAMP_OFFSET, TIMESTAMP_TYPE_MASK, COMPRESSION_MASK,
                                 TIMESTAMP_LOG_APPEND, TIMESTAMP_NONE, NO_TIMESTAMP, wrap_sub)
from kafkacodec._crc cimport kc_crc32

cdef struct LegacyMessage:
    int64_t offset
    Py_ssize_t size                  # whole entry, LOG_OVERHEAD included
    uint32_t crc
    int8_t magic
    int8_t attributes
    int64_t timestamp                # -1 for v0
    const unsigned char* key         # NULL for a null key
    int32_t key_length               # -1 = null
    const unsigned char* value
    int32_t value_length             # -1 = null

cdef inline int read_legacy_message(const unsigned char* entry, Py_ssize_t size,
                                    Py_ssize_t position, LegacyMessage* m) except -1 nogil:
    """Parse a complete v0/v1 entry of `size` bytes (framing already checked)."""
    cdef Cursor c
    cdef int32_t length
    c.data = entry
    c.pos = 0
    c.end = size
    c.base = position
    need(&c, LOG_OVERHEAD + V0_RECORD_OVERHEAD, b"legacy message")
    m.offset = get_int64(&c)
    get_int32(&c)
    m.size = size
    m.crc = load_u32(entry + LOG_OVERHEAD)
    m.magic = <int8_t>entry[MAGIC_OFFSET]
    m.attributes = <int8_t>entry[MAGIC_OFFSET + 1]
    c.pos = MAGIC_OFFSET + 2
    if m.magic == 1:
        need(&c, 8, b"v1 message timestamp")
        m.timestamp = get_int64(&c)
    else:
        m.timestamp = -1
    need(&c, 4, b"message key length")
    length = get_int32(&c)
    if length < 0:                    # any negative length is null
        m.key = NULL
        m.key_length = -1
    else:
        m.key = take(&c, length, b"message key")
        m.key_length = length
    need(&c, 4, b"message value length")
    length = get_int32(&c)
    if length < 0:
        m.value = NULL
        m.value_length = -1
    else:
        m.value = take(&c, length, b"message value")
        m.value_length = length
    return 0

cdef inline Py_ssize_t legacy_message_size(int8_t magic, int32_t key_length,
                                           int32_t value_length) noexcept nogil:
    """Whole entry size, LOG_OVERHEAD included (lengths -1 = null)."""
    return (LOG_OVERHEAD + V0_RECORD_OVERHEAD + (8 if magic == 1 else 0)
            + (key_length if key_length > 0 else 0) + (value_length if value_length > 0 else 0))

cdef inline unsigned char* legacy_message_head(unsigned char* start, int8_t magic, int64_t offset,
                                               int64_t timestamp, int8_t attributes,
                                               const unsigned char* key,
                                               int32_t key_length) noexcept nogil:
    """Write [offset][size][crc][magic][attributes][timestamp (v1)][key length][key] at
    `start`, size and CRC left for the caller; returns where the value length goes."""
    cdef unsigned char* p = start + MAGIC_OFFSET + 2
    store_u64(start, <uint64_t>offset)
    start[MAGIC_OFFSET] = <unsigned char>magic
    start[MAGIC_OFFSET + 1] = <unsigned char>attributes
    if magic == 1:
        store_u64(p, <uint64_t>timestamp)
        p += 8
    store_u32(p, <uint32_t>key_length)
    p += 4
    if key_length > 0:
        memcpy(p, key, key_length)
        p += key_length
    return p

cdef inline void seal_legacy_message(unsigned char* start, Py_ssize_t total) noexcept nogil:
    """Fill in the size and the CRC-32 (over magic..end) of the `total`-byte entry at start."""
    store_u32(start + SIZE_OFFSET, <uint32_t>(total - LOG_OVERHEAD))
    store_u32(start + LOG_OVERHEAD, kc_crc32(0, start + MAGIC_OFFSET, total - MAGIC_OFFSET))

cdef inline Py_ssize_t write_legacy_message(Writer* w, int8_t magic, int64_t offset,
                                            int64_t timestamp, int8_t attributes,
                                            const unsigned char* key, int32_t key_length,
                                            const unsigned char* value,
                                            int32_t value_length) except -1:
    """Append [offset][size][crc][magic][attributes][timestamp (v1)][key][value]; the CRC-32
    covers magic..end.  Returns the entry size.  (A compressed wrapper: begin_legacy_wrapper.)"""
    cdef Py_ssize_t total = legacy_message_size(magic, key_length, value_length)
    cdef unsigned char* start
    cdef unsigned char* p
    ensure(w, total)
    start = w.buf + w.length
    p = legacy_message_head(start, magic, offset, timestamp, attributes, key, key_length)
    store_u32(p, <uint32_t>value_length)
    if value_length > 0:
        memcpy(p + 4, value, value_length)
    seal_legacy_message(start, total)
    w.length += total
    return total

cdef inline Py_ssize_t begin_legacy_wrapper(Writer* w, int8_t magic, int64_t offset,
                                            int64_t timestamp, int8_t attributes,
                                            const unsigned char* key,
                                            int32_t key_length) except -1:
    """Start a compressed wrapper message (the codec in attributes): everything before its
    value, which the caller appends to w (compress_into), then end_legacy_wrapper.  Returns
    where the message starts."""
    cdef Py_ssize_t head = legacy_message_size(magic, key_length, 0)
    cdef Py_ssize_t start = w.length
    ensure(w, head)
    legacy_message_head(w.buf + start, magic, offset, timestamp, attributes, key, key_length)
    w.length += head
    return start

cdef inline bint wrapper_fits(const Writer* w, Py_ssize_t start, Py_ssize_t max_size) noexcept nogil:
    """Whether the wrapper begun at `start`, its compressed value appended (the rest of w),
    has a Size (everything after the 12-byte log overhead) of at most max_size: INT32_MAX,
    what the int32 field holds, checked before end_legacy_wrapper() writes it."""
    return w.length - start - LOG_OVERHEAD <= max_size

cdef inline Py_ssize_t end_legacy_wrapper(Writer* w, Py_ssize_t start,
                                          int32_t value_length) except -1:
    """Finish the wrapper begun at `start` whose value is the last value_length bytes of w;
    returns the entry size."""
    store_u32(w.buf + w.length - value_length - 4, <uint32_t>value_length)
    seal_legacy_message(w.buf + start, w.length - start)
    return w.length - start

cdef inline int next_inner_entry(Cursor* cur, Py_ssize_t* entry_size) except -1 nogil:
    """Frame the next message of a decompressed inner set (spec §9.3): returns 1 with its size,
    or 0 when the set ends (a truncated trailing entry ends it silently)."""
    cdef int32_t size
    if cur.end - cur.pos < LOG_OVERHEAD:
        return 0
    size = <int32_t>load_u32(cur.data + cur.pos + SIZE_OFFSET)
    if size < V0_RECORD_OVERHEAD:
        raise_corrupt(cur, b"inner message size (below the 14-byte minimum)")
    if cur.end - cur.pos - LOG_OVERHEAD < size:
        return 0
    entry_size[0] = LOG_OVERHEAD + <Py_ssize_t>size
    return 1

cdef inline int64_t inner_base_offset(int8_t wrapper_magic, int64_t wrapper_offset,
                                      int64_t last_inner_offset, Cursor* cur) except? -1 nogil:
    """Add this to an inner offset to get the absolute offset (spec §4.1): v0 inner offsets
    are absolute; v1 ones are relative, based so the last lands on the wrapper offset, except
    that a wrapper offset of 0 means base 0 (librdkafka leniency)."""
    if wrapper_magic == 0 or wrapper_offset == 0:
        return 0
    if wrapper_offset < last_inner_offset:
        raise_corrupt(cur, b"v1 wrapper offset (below its last inner offset)")
    return wrap_sub(wrapper_offset, last_inner_offset)

cdef inline const char* inner_message_fault(const LegacyMessage* m) noexcept nogil:
    """What is wrong with an inner message of a decompressed wrapper, or NULL: it must be a
    v0/v1 message and not compressed itself (DeepRecordsIterator: "Inner messages must not be
    compressed")."""
    if m.magic != 0 and m.magic != 1:
        return b"inner message magic (not 0 or 1)"
    if m.attributes & COMPRESSION_MASK:
        return b"inner message (compressed inside a compressed wrapper)"
    return NULL

# LegacyRecord's rules for an inner message of a wrapper (every reader applies these two).
cdef inline int64_t inner_timestamp(const LegacyMessage* m, int8_t wrapper_timestamp_type,
                                    int64_t wrapper_timestamp) noexcept nogil:
    """timestamp(): magic 0 has none; otherwise a LogAppendTime wrapper's timestamp replaces
    the message's own."""
    if m.magic == 0:
        return NO_TIMESTAMP
    return wrapper_timestamp if wrapper_timestamp_type == TIMESTAMP_LOG_APPEND else m.timestamp

cdef inline int8_t inner_timestamp_type(const LegacyMessage* m,
                                        int8_t wrapper_timestamp_type) noexcept nogil:
    """timestampType(): none for magic 0, else the wrapper's."""
    return TIMESTAMP_NONE if m.magic == 0 else wrapper_timestamp_type
