# cython: language_level=3
"""Columnar decode: Kafka log entries (v0/v1 messages, v2 batches) straight into Arrow buffers.

One `ArrowDecoder` walks a byte range of a segment (or a fetched record set) entry by entry and
appends every record to C column buffers: key/value binary (offsets, data, validity), headers
list<struct<key:string,value:binary>>, offset, timestamp, timestampType and the batch columns
(magic, producerId, isTransactional, isControl).  No Python object is made per record and the
record loop runs without the GIL; only decompression goes back to Python for now.
The finished buffers are handed to pyarrow without a copy (`_Memory` owns them).

`scan_entries()` is the shallow walk (12-byte overhead + batch header, no record decode) that the
Spark planner uses to split segments at batch boundaries and to find aborted transactions.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyBuffer_FillInfo

from kafkacodec._crc cimport kc_crc32, kc_crc32c, kc_crc_init
from kafkacodec._cursor cimport load_u16, load_u32, load_u64

import numpy as np
import pyarrow as pa

from kafkacodec.errors import CorruptRecordError, InvalidCrcError, UnsupportedCompressionError

kc_crc_init()

DEF LOG_OVERHEAD = 12
DEF V2_HEADER = 61


# Error codes set by the nogil loop, raised once the GIL is back.
cdef enum:
    OK = 0
    E_CORRUPT = 1
    E_CRC = 2
    E_NOMEM = 3
    E_CODEC = 4

# What the nogil loop stopped for.
cdef enum:
    S_END = 0            # reached the end of the range (or a partial trailing entry)
    S_FULL = 1           # the output batch is full; resume at state.pos
    S_DECOMPRESS = 2     # the entry at state.pos is compressed: decompress it with the GIL
    S_ERROR = 3

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: Spark's Kafka source schema plus the batch columns (the order of the columns produced).
SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
    pa.field("magic", pa.int8()),
    pa.field("producerId", pa.int64()),
    pa.field("isTransactional", pa.bool_()),
    pa.field("isControl", pa.bool_()),
])
SCHEMA_NO_HEADERS = SCHEMA.remove(SCHEMA.get_field_index("headers"))


# --------------------------------------------------------------------------------------------
# Growable C buffers and the object that hands them to Arrow.

cdef struct Buf:
    unsigned char* ptr
    Py_ssize_t len
    Py_ssize_t cap

cdef int buf_grow(Buf* b, Py_ssize_t need) noexcept nogil:
    cdef Py_ssize_t cap = b.cap if b.cap > 0 else 4096
    cdef unsigned char* p
    while cap < need:
        cap *= 2
    p = <unsigned char*>realloc(b.ptr, cap)
    if p == NULL:
        return -1
    memset(p + b.cap, 0, cap - b.cap)      # validity bitmaps rely on zeroed growth
    b.ptr = p
    b.cap = cap
    return 0

cdef inline int buf_ensure(Buf* b, Py_ssize_t extra) noexcept nogil:
    if b.cap - b.len < extra:
        return buf_grow(b, b.len + extra)
    return 0


cdef class _Memory:
    """Owns one malloc'd block and exposes it through the buffer protocol (for pa.py_buffer)."""
    cdef unsigned char* ptr
    cdef Py_ssize_t size

    def __dealloc__(self):
        free(self.ptr)

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.ptr, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef object take_buffer(Buf* b):
    """Move the block of `b` into an Arrow buffer (no copy); `b` starts over empty."""
    cdef _Memory m
    if b.ptr == NULL:
        return pa.py_buffer(b"")
    m = _Memory.__new__(_Memory)
    m.ptr = b.ptr
    m.size = b.len
    b.ptr = NULL
    b.len = 0
    b.cap = 0
    return pa.py_buffer(m)


# A variable-length column (binary or string): int32 offsets, data, validity bitmap.
cdef struct VarCol:
    Buf offsets
    Buf data
    Buf valid
    Py_ssize_t n
    Py_ssize_t nulls

cdef int varcol_start(VarCol* c) noexcept nogil:
    if buf_ensure(&c.offsets, 4) < 0:
        return -1
    (<int32_t*>c.offsets.ptr)[0] = 0
    c.offsets.len = 4
    return 0

cdef inline int varcol_append(VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    # size < 0: null
    if buf_ensure(&c.offsets, 4) < 0 or buf_ensure(&c.valid, 1) < 0:
        return -1
    if size > 0:
        if buf_ensure(&c.data, size) < 0:
            return -1
        memcpy(c.data.ptr + c.data.len, p, size)
        c.data.len += size
    if size >= 0:
        c.valid.ptr[c.n >> 3] |= <unsigned char>(1 << (c.n & 7))
    else:
        c.nulls += 1
    c.n += 1
    c.valid.len = (c.n + 7) >> 3
    (<int32_t*>(c.offsets.ptr + c.offsets.len))[0] = <int32_t>c.data.len
    c.offsets.len += 4
    return 0

cdef object varcol_take(VarCol* c, object arrow_type):
    cdef Py_ssize_t n = c.n, nulls = c.nulls
    if c.offsets.len == 0:
        varcol_start(c)
    validity = take_buffer(&c.valid) if nulls else None
    if not nulls:
        free(c.valid.ptr)
        c.valid.ptr = NULL
        c.valid.len = c.valid.cap = 0
    offsets = take_buffer(&c.offsets)
    data = take_buffer(&c.data)
    c.n = 0
    c.nulls = 0
    return pa.Array.from_buffers(arrow_type, n, [validity, offsets, data], null_count=nulls)

cdef void buf_free(Buf* b) noexcept nogil:
    free(b.ptr)
    memset(b, 0, sizeof(Buf))

cdef void varcol_free(VarCol* c) noexcept nogil:
    free(c.offsets.ptr)
    free(c.data.ptr)
    free(c.valid.ptr)
    memset(c, 0, sizeof(VarCol))

cdef inline int put_i64(Buf* b, int64_t v) noexcept nogil:
    if buf_ensure(b, 8) < 0:
        return -1
    (<int64_t*>(b.ptr + b.len))[0] = v
    b.len += 8
    return 0

cdef inline int put_i32(Buf* b, int32_t v) noexcept nogil:
    if buf_ensure(b, 4) < 0:
        return -1
    (<int32_t*>(b.ptr + b.len))[0] = v
    b.len += 4
    return 0

cdef inline int put_u8(Buf* b, uint8_t v) noexcept nogil:
    if buf_ensure(b, 1) < 0:
        return -1
    b.ptr[b.len] = v
    b.len += 1
    return 0


# --------------------------------------------------------------------------------------------
# nogil varint readers over (pointer, position, end).  TODO(merge): use the shared nogil
# record primitives of _v2.pxd once they exist; _cursor.pxd's readers raise, so need the GIL.

cdef inline int rd_varint(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                          int32_t* out) noexcept nogil:
    cdef uint32_t raw = 0
    cdef unsigned char byte
    cdef int shift = 0
    while True:
        if pos[0] >= end or shift > 28:
            return -1
        byte = p[pos[0]]
        pos[0] += 1
        if shift == 28 and byte > 0x0F:
            return -1
        raw |= <uint32_t>(byte & 0x7F) << shift
        if not (byte & 0x80):
            out[0] = <int32_t>((raw >> 1) ^ -(raw & 1))
            return 0
        shift += 7

cdef inline int rd_varlong(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                           int64_t* out) noexcept nogil:
    cdef uint64_t raw = 0
    cdef unsigned char byte
    cdef int shift = 0
    while True:
        if pos[0] >= end or shift > 63:
            return -1
        byte = p[pos[0]]
        pos[0] += 1
        raw |= <uint64_t>(byte & 0x7F) << shift
        if not (byte & 0x80):
            out[0] = <int64_t>((raw >> 1) ^ -(raw & 1))
            return 0
        shift += 7


# --------------------------------------------------------------------------------------------
# The decoder state.

cdef struct Batch:              # what a record needs from its batch / wrapper
    int64_t base_offset
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int32_t ts_type             # -1 none, 0 create, 1 log-append
    int8_t magic
    uint8_t transactional
    uint8_t control
    uint8_t skip                # aborted data: parse and validate, but emit nothing

cdef struct State:
    const unsigned char* data
    Py_ssize_t pos              # next entry to read
    Py_ssize_t end
    Py_ssize_t base             # file position of data[0]
    # options
    int validate_crc
    int include_headers
    int keep_control
    int64_t start_offset
    int64_t end_offset          # exclusive
    Py_ssize_t max_rows
    Py_ssize_t max_bytes
    const int64_t* aborted      # triples (producer id, first offset, last offset)
    Py_ssize_t n_aborted
    # output
    VarCol key
    VarCol value
    Buf offset
    Buf timestamp
    Buf ts_type
    Buf magic
    Buf producer_id
    Buf transactional
    Buf control
    Buf hdr_offsets             # int32 list offsets
    Buf hdr_valid
    VarCol hkey
    VarCol hvalue
    Py_ssize_t rows
    Py_ssize_t hdr_nulls
    # statistics
    Py_ssize_t batches
    Py_ssize_t crc_checked
    # error
    int err
    Py_ssize_t err_pos
    int64_t err_offset
    const char* err_what
    uint32_t err_stored
    uint32_t err_computed

cdef inline int fail(State* s, int code, Py_ssize_t pos, int64_t offset,
                     const char* what) noexcept nogil:
    s.err = code
    s.err_pos = pos
    s.err_offset = offset
    s.err_what = what
    return -1

cdef inline int emit_fixed(State* s, const Batch* b, int64_t offset, int64_t ts) noexcept nogil:
    if put_i64(&s.offset, offset) < 0 or put_i32(&s.ts_type, b.ts_type) < 0:
        return -1
    # Spark's timestamp is microseconds; Kafka's -1 "no timestamp" stays -1 ms as Spark's
    # Kafka source gives it.
    if put_i64(&s.timestamp, ts * 1000) < 0 or put_u8(&s.magic, <uint8_t>b.magic) < 0:
        return -1
    if put_i64(&s.producer_id, b.producer_id) < 0:
        return -1
    if put_u8(&s.transactional, b.transactional) < 0 or put_u8(&s.control, b.control) < 0:
        return -1
    s.rows += 1
    return 0

cdef inline int emit_no_headers(State* s) noexcept nogil:
    if not s.include_headers:
        return 0
    if buf_ensure(&s.hdr_valid, 1) < 0 or put_i32(&s.hdr_offsets, <int32_t>s.hkey.n) < 0:
        return -1
    s.hdr_nulls += 1
    s.hdr_valid.len = (s.rows + 7) >> 3          # rows already counts this record
    return 0


cdef int decode_v2_records(State* s, const Batch* b, const unsigned char* p, Py_ssize_t n,
                           int32_t count, Py_ssize_t err_base) noexcept nogil:
    """Records of one v2 batch: `p[0:n]` is the (decompressed) records section.  err_base is
    the file position of p[0], or the batch position when p is decompressed data."""
    cdef Py_ssize_t pos = 0, body_end, rec_start
    cdef int32_t i, length, offset_delta, key_len, value_len, n_headers, h, hk_len, hv_len
    cdef int64_t ts_delta, offset, ts
    cdef const unsigned char* key
    cdef const unsigned char* value
    cdef int emit
    cdef int32_t row_hdr
    for i in range(count):
        rec_start = pos
        if rd_varint(p, &pos, n, &length) < 0 or length < 0 or length > n - pos:
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset,
                        "record length (premature end of the batch)")
        body_end = pos + length
        pos += 1                                               # attributes (unused)
        if (pos > body_end or rd_varlong(p, &pos, body_end, &ts_delta) < 0
                or rd_varint(p, &pos, body_end, &offset_delta) < 0
                or rd_varint(p, &pos, body_end, &key_len) < 0):
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "record header")
        if key_len > body_end - pos:
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "record key length")
        key = p + pos
        if key_len > 0:
            pos += key_len
        if rd_varint(p, &pos, body_end, &value_len) < 0 or value_len > body_end - pos:
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "record value length")
        value = p + pos
        if value_len > 0:
            pos += value_len
        if (rd_varint(p, &pos, body_end, &n_headers) < 0 or n_headers < 0
                or n_headers > body_end - pos):
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "header count")
        offset = b.base_offset + offset_delta
        emit = not b.skip and s.start_offset <= offset < s.end_offset
        if emit:
            if varcol_append(&s.key, key, key_len) < 0 or varcol_append(&s.value, value, value_len) < 0:
                return fail(s, E_NOMEM, 0, 0, "")
            ts = b.max_timestamp if b.ts_type == 1 else b.base_timestamp + ts_delta
            if emit_fixed(s, b, offset, ts) < 0:
                return fail(s, E_NOMEM, 0, 0, "")
        for h in range(n_headers):
            if rd_varint(p, &pos, body_end, &hk_len) < 0 or hk_len < 0 or hk_len > body_end - pos:
                return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "header key length")
            key = p + pos
            pos += hk_len
            if rd_varint(p, &pos, body_end, &hv_len) < 0 or hv_len > body_end - pos:
                return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset, "header value length")
            value = p + pos
            if hv_len > 0:
                pos += hv_len
            if emit and s.include_headers:
                if varcol_append(&s.hkey, key, hk_len) < 0 or varcol_append(&s.hvalue, value, hv_len) < 0:
                    return fail(s, E_NOMEM, 0, 0, "")
        if pos != body_end:
            return fail(s, E_CORRUPT, err_base + rec_start, b.base_offset,
                        "record (its length does not match its fields)")
        if emit and s.include_headers:
            # list entry: null when the record has no header (as Spark's Kafka source)
            if buf_ensure(&s.hdr_valid, 1) < 0 or put_i32(&s.hdr_offsets, <int32_t>s.hkey.n) < 0:
                return fail(s, E_NOMEM, 0, 0, "")
            row_hdr = <int32_t>(s.rows - 1)
            if n_headers > 0:
                s.hdr_valid.ptr[row_hdr >> 3] |= <unsigned char>(1 << (row_hdr & 7))
            else:
                s.hdr_nulls += 1
            s.hdr_valid.len = (s.rows + 7) >> 3
    if pos != n:
        return fail(s, E_CORRUPT, err_base + pos, b.base_offset,
                    "batch (bytes remain after its last record)")
    return 0


cdef int check_aborted(State* s, Batch* b) noexcept nogil:
    cdef Py_ssize_t i
    b.skip = 0
    if not b.transactional or b.control:
        return 0
    for i in range(s.n_aborted):
        if (s.aborted[3 * i] == b.producer_id and s.aborted[3 * i + 1] <= b.base_offset
                and b.base_offset <= s.aborted[3 * i + 2]):
            b.skip = 1
            return 0
    return 0


cdef int v2_header(State* s, const unsigned char* e, Py_ssize_t size, int check_crc, Batch* b,
                   int16_t* attributes, int32_t* count) noexcept nogil:
    """Parse and check the 61-byte header of the v2 batch at e (size = whole entry)."""
    cdef uint32_t stored, computed
    cdef Py_ssize_t pos = s.pos
    b.base_offset = <int64_t>load_u64(e)
    if size < V2_HEADER:
        return fail(s, E_CORRUPT, s.base + pos, b.base_offset, "v2 batch (shorter than its 61-byte header)")
    stored = load_u32(e + 17)
    if check_crc:
        computed = kc_crc32c(0, e + 21, size - 21)
        s.crc_checked += 1
        if computed != stored:
            s.err_stored = stored
            s.err_computed = computed
            return fail(s, E_CRC, s.base + pos, b.base_offset, "v2 batch")
    attributes[0] = <int16_t>load_u16(e + 21)
    b.magic = 2
    b.ts_type = (attributes[0] >> 3) & 1
    b.transactional = (attributes[0] >> 4) & 1
    b.control = (attributes[0] >> 5) & 1
    b.base_timestamp = <int64_t>load_u64(e + 27)
    b.max_timestamp = <int64_t>load_u64(e + 35)
    b.producer_id = <int64_t>load_u64(e + 43)
    count[0] = <int32_t>load_u32(e + 57)
    if count[0] < 0:
        return fail(s, E_CORRUPT, s.base + pos + 57, b.base_offset, "v2 record count (negative)")
    if (attributes[0] & 7) > 4:
        return fail(s, E_CODEC, s.base + pos + 21, b.base_offset, "compression type id")
    return check_aborted(s, b)


cdef int legacy_message(State* s, const unsigned char* e, Py_ssize_t size, Py_ssize_t err_pos,
                        int check_crc, Batch* b, int8_t* attributes, const unsigned char** value,
                        int32_t* value_len, const unsigned char** key, int32_t* key_len,
                        int64_t* timestamp) noexcept nogil:
    """Parse one v0/v1 entry e[0:size] (with its 12-byte overhead)."""
    cdef int8_t magic = <int8_t>e[16]
    cdef Py_ssize_t pos, need = 26 if magic == 0 else 34
    cdef uint32_t stored, computed
    cdef int64_t offset = <int64_t>load_u64(e)
    if size < need:
        return fail(s, E_CORRUPT, err_pos, offset, "legacy message (too short)")
    stored = load_u32(e + 12)
    if check_crc:
        computed = kc_crc32(0, e + 16, size - 16)
        s.crc_checked += 1
        if computed != stored:
            s.err_stored = stored
            s.err_computed = computed
            return fail(s, E_CRC, err_pos, offset, "legacy message")
    attributes[0] = <int8_t>e[17]
    pos = 18
    if magic == 1:
        timestamp[0] = <int64_t>load_u64(e + 18)
        pos = 26
    else:
        timestamp[0] = -1
    key_len[0] = <int32_t>load_u32(e + pos)
    pos += 4
    if key_len[0] > size - pos - 4:
        return fail(s, E_CORRUPT, err_pos, offset, "legacy message key length")
    key[0] = e + pos
    if key_len[0] > 0:
        pos += key_len[0]
    value_len[0] = <int32_t>load_u32(e + pos)
    pos += 4
    value[0] = e + pos
    if value_len[0] > size - pos or (value_len[0] < 0 and pos != size) or (value_len[0] >= 0 and pos + value_len[0] != size):
        return fail(s, E_CORRUPT, err_pos, offset, "legacy message value length")
    return 0


cdef int emit_legacy(State* s, const Batch* b, int64_t offset, int64_t timestamp,
                     const unsigned char* key, int32_t key_len,
                     const unsigned char* value, int32_t value_len) noexcept nogil:
    if not (s.start_offset <= offset < s.end_offset):
        return 0
    if varcol_append(&s.key, key, key_len) < 0 or varcol_append(&s.value, value, value_len) < 0:
        return fail(s, E_NOMEM, 0, 0, "")
    if emit_fixed(s, b, offset, timestamp) < 0 or emit_no_headers(s) < 0:
        return fail(s, E_NOMEM, 0, 0, "")
    return 0


cdef int decode_legacy_inner(State* s, const Batch* wrapper, const unsigned char* p,
                             Py_ssize_t n) noexcept nogil:
    """Inner messages of a decompressed v0/v1 wrapper (record-formats.md §4, §9.3)."""
    cdef Py_ssize_t pos = 0, last_pos = -1
    cdef int32_t size, key_len, value_len
    cdef int64_t last_rel = 0, base = 0, timestamp
    cdef int8_t attributes
    cdef const unsigned char* key
    cdef const unsigned char* value
    cdef Batch inner = wrapper[0]
    cdef Py_ssize_t err_pos = s.base + s.pos
    # First pass: find the last complete inner entry (v1 offsets are relative to it).
    while n - pos >= LOG_OVERHEAD:
        size = <int32_t>load_u32(p + pos + 8)
        if size < 14:
            return fail(s, E_CORRUPT, err_pos, wrapper.base_offset, "inner legacy message size")
        if n - pos - LOG_OVERHEAD < size:
            break
        last_pos = pos
        pos += LOG_OVERHEAD + size
    if last_pos < 0:
        return fail(s, E_CORRUPT, err_pos, wrapper.base_offset, "compressed wrapper (no inner message)")
    if wrapper.magic == 1 and wrapper.base_offset != 0:
        last_rel = <int64_t>load_u64(p + last_pos)
        if wrapper.base_offset < last_rel:
            return fail(s, E_CORRUPT, err_pos, wrapper.base_offset, "wrapper offset (below its last inner offset)")
        base = wrapper.base_offset - last_rel
    pos = 0
    while pos <= last_pos:
        size = <int32_t>load_u32(p + pos + 8)
        if legacy_message(s, p + pos, LOG_OVERHEAD + size, err_pos, s.validate_crc, &inner, &attributes,
                          &value, &value_len, &key, &key_len, &timestamp) < 0:
            return -1
        if attributes & 7:
            return fail(s, E_CORRUPT, err_pos, wrapper.base_offset, "inner message (compressed inside a compressed wrapper)")
        if wrapper.magic == 1 and wrapper.ts_type == 1:
            timestamp = wrapper.max_timestamp
        elif p[pos + 16] == 0:
            timestamp = -1
        if emit_legacy(s, &inner, base + <int64_t>load_u64(p + pos), timestamp,
                       key, key_len, value, value_len) < 0:
            return -1
        pos += LOG_OVERHEAD + size
    return 0


cdef int run(State* s, int16_t* codec, int8_t* magic_out) noexcept nogil:
    """Walk entries from s.pos; decode uncompressed ones; stop at a compressed one (S_DECOMPRESS),
    when the output is full (S_FULL), at the end (S_END) or on an error (S_ERROR)."""
    cdef const unsigned char* e
    cdef int32_t size, count, key_len, value_len
    cdef int8_t magic, attributes8
    cdef int16_t attributes
    cdef int64_t timestamp
    cdef Batch b
    cdef const unsigned char* key
    cdef const unsigned char* value
    memset(&b, 0, sizeof(Batch))
    while True:
        if s.rows >= s.max_rows or s.value.data.len + s.key.data.len >= s.max_bytes:
            return S_FULL
        # file reader rules (record-formats.md §9.2): fewer than 17 bytes or a partial entry: stop
        if s.end - s.pos < 17:
            return S_END
        e = s.data + s.pos
        size = <int32_t>load_u32(e + 8)
        if size < 14:
            fail(s, E_CORRUPT, s.base + s.pos, <int64_t>load_u64(e), "entry size (below 14)")
            return S_ERROR
        if s.end - s.pos - LOG_OVERHEAD < size:
            return S_END
        magic = <int8_t>e[16]
        if magic < 0 or magic > 2:
            fail(s, E_CORRUPT, s.base + s.pos + 16, <int64_t>load_u64(e), "magic byte")
            return S_ERROR
        s.batches += 1
        if magic == 2:
            if v2_header(s, e, LOG_OVERHEAD + size, s.validate_crc, &b, &attributes, &count) < 0:
                return S_ERROR
            if b.base_offset + <int32_t>load_u32(e + 23) < s.start_offset or b.base_offset >= s.end_offset:
                pass                                   # whole batch outside the offset range
            elif b.control and not s.keep_control:
                pass
            elif count > 0 and (attributes & 7):
                codec[0] = attributes & 7
                magic_out[0] = 2
                return S_DECOMPRESS
            elif count > 0:
                if decode_v2_records(s, &b, e + V2_HEADER, LOG_OVERHEAD + size - V2_HEADER, count,
                                     s.base + s.pos + V2_HEADER) < 0:
                    return S_ERROR
        else:
            b.magic = magic
            b.producer_id = -1
            b.transactional = 0
            b.control = 0
            b.skip = 0
            b.base_offset = <int64_t>load_u64(e)
            if legacy_message(s, e, LOG_OVERHEAD + size, s.base + s.pos, s.validate_crc, &b, &attributes8,
                              &value, &value_len, &key, &key_len, &timestamp) < 0:
                return S_ERROR
            b.ts_type = -1 if magic == 0 else (attributes8 >> 3) & 1
            b.max_timestamp = timestamp
            if attributes8 & 7:
                if (attributes8 & 7) > 3:
                    fail(s, E_CODEC, s.base + s.pos + 17, b.base_offset, "compression type id for magic 0/1")
                    return S_ERROR
                if b.base_offset >= s.start_offset:     # wrapper offset = last inner offset
                    codec[0] = attributes8 & 7
                    magic_out[0] = magic
                    return S_DECOMPRESS
            elif emit_legacy(s, &b, b.base_offset, timestamp, key, key_len, value, value_len) < 0:
                return S_ERROR
        s.pos += LOG_OVERHEAD + size


cdef object byte_view(data):
    """Any contiguous buffer as unsigned bytes (pyarrow buffers export signed chars)."""
    if isinstance(data, (bytes, bytearray)):
        return data
    mv = memoryview(data)
    return mv if mv.format == "B" else mv.cast("B")


def _decompress_fallback(int codec, int magic, data):
    # TODO(merge): replace by kafkacodec._compression.Decompressor.decompress_into once on main.
    from kafkacodec.spark._codecs import decompress
    return decompress(codec, magic, data)


cdef class ArrowDecoder:
    """Decode log entries into `pyarrow.RecordBatch`es with Spark's Kafka schema.

    ArrowDecoder(topic="", partition=0, *, validate_crc=True, include_headers=True,
                 keep_control=False, start_offset=None, end_offset=None, aborted=None,
                 max_rows=65536, max_bytes=64 MiB, source="<buffer>")

    `aborted`: (producer id, first offset, last offset) of aborted transactions; their data
    batches are validated but not emitted.  `end_offset` is exclusive.
    """
    cdef State s
    cdef readonly str topic
    cdef readonly int partition
    cdef readonly str source
    cdef object _aborted_arr
    cdef readonly Py_ssize_t trailing_bytes
    cdef readonly Py_ssize_t failed_entry

    def __init__(self, str topic="", int partition=0, *, bint validate_crc=True,
                 bint include_headers=True, bint keep_control=False, start_offset=None,
                 end_offset=None, aborted=None, Py_ssize_t max_rows=65536,
                 Py_ssize_t max_bytes=64 << 20, str source="<buffer>"):
        self.topic = topic
        self.partition = partition
        self.source = source
        self.s.validate_crc = validate_crc
        self.s.include_headers = include_headers
        self.s.keep_control = keep_control
        self.s.start_offset = INT64_MIN if start_offset is None else start_offset
        self.s.end_offset = INT64_MAX if end_offset is None else end_offset
        if max_rows < 1 or max_bytes < 1 or max_bytes > (1 << 30):
            raise ValueError("max_rows must be >= 1 and max_bytes within 1..2**30")
        self.s.max_rows = max_rows
        self.s.max_bytes = max_bytes
        arr = np.ascontiguousarray(np.asarray(aborted if aborted else [], dtype=np.int64).reshape(-1, 3))
        self._aborted_arr = arr
        cdef const int64_t[:, ::1] mv = arr
        self.s.aborted = &mv[0, 0] if mv.shape[0] else NULL
        self.s.n_aborted = mv.shape[0]

    def __dealloc__(self):
        self._reset()

    cdef void _reset(self) noexcept:
        varcol_free(&self.s.key)
        varcol_free(&self.s.value)
        varcol_free(&self.s.hkey)
        varcol_free(&self.s.hvalue)
        buf_free(&self.s.offset)
        buf_free(&self.s.timestamp)
        buf_free(&self.s.ts_type)
        buf_free(&self.s.magic)
        buf_free(&self.s.producer_id)
        buf_free(&self.s.transactional)
        buf_free(&self.s.control)
        buf_free(&self.s.hdr_offsets)
        buf_free(&self.s.hdr_valid)
        self.s.rows = 0
        self.s.hdr_nulls = 0

    @property
    def schema(self):
        return SCHEMA if self.s.include_headers else SCHEMA_NO_HEADERS

    @property
    def crc_checked(self) -> int:
        """Number of CRCs verified so far (batches and legacy messages)."""
        return self.s.crc_checked

    @property
    def entries(self) -> int:
        """Number of log entries (batches / top-level messages) walked so far."""
        return self.s.batches

    def decode(self, data, Py_ssize_t start=0, Py_ssize_t end=-1, Py_ssize_t base=0):
        """Decode entries of data[start:end] until the batch is full; return
        (RecordBatch, next position).  Next position == end (or the start of a partial trailing
        entry, see `trailing_bytes`) when done.  `base` is the file position of data[0]."""
        cdef const unsigned char[::1] view = byte_view(data)
        cdef int status
        cdef int16_t codec = 0
        cdef int8_t magic = 0
        cdef Batch b
        cdef int16_t attributes
        cdef int32_t count
        cdef int8_t attributes8
        cdef const unsigned char* key
        cdef const unsigned char* value
        cdef int32_t key_len, value_len
        cdef int64_t timestamp
        cdef const unsigned char[::1] plain
        cdef const unsigned char* e
        cdef int32_t size
        if end < 0 or end > view.shape[0]:
            end = view.shape[0]
        if start < 0 or start > end:
            raise ValueError(f"start {start} outside 0..{end}")
        self._reset()
        self.s.data = &view[0] if view.shape[0] else NULL
        self.s.pos = start
        self.s.end = end
        self.s.base = base
        self.s.err = OK
        self.failed_entry = -1
        if (varcol_start(&self.s.key) < 0 or varcol_start(&self.s.value) < 0
                or varcol_start(&self.s.hkey) < 0 or varcol_start(&self.s.hvalue) < 0
                or put_i32(&self.s.hdr_offsets, 0) < 0):
            raise MemoryError()
        while True:
            with nogil:
                status = run(&self.s, &codec, &magic)
            if status == S_ERROR:
                self._raise()
            if status != S_DECOMPRESS:
                break
            e = self.s.data + self.s.pos
            size = <int32_t>load_u32(e + 8)
            memset(&b, 0, sizeof(Batch))
            try:
                if magic == 2:
                    v2_header(&self.s, e, LOG_OVERHEAD + size, 0, &b, &attributes, &count)
                    plain = _decompress_fallback(codec, 2, view[self.s.pos + V2_HEADER:self.s.pos + LOG_OVERHEAD + size])
                else:
                    b.magic = magic
                    b.producer_id = -1
                    b.base_offset = <int64_t>load_u64(e)
                    legacy_message(&self.s, e, LOG_OVERHEAD + size, 0, 0, &b, &attributes8,
                                   &value, &value_len, &key, &key_len, &timestamp)
                    b.ts_type = -1 if magic == 0 else (attributes8 >> 3) & 1
                    b.max_timestamp = timestamp
                    if value_len < 0:
                        raise CorruptRecordError(f"{self.source}: compressed wrapper has a null value",
                                                 position=base + self.s.pos, offset=b.base_offset)
                    vstart = value - &view[0]
                    plain = _decompress_fallback(codec, magic, view[vstart:vstart + value_len])
            except CorruptRecordError:
                self.failed_entry = self.s.pos
                raise
            except Exception as exc:
                self.failed_entry = self.s.pos
                raise CorruptRecordError(
                    f"{self.source}: cannot decompress the {('none', 'gzip', 'snappy', 'lz4', 'zstd')[codec]} "
                    f"records of a magic {magic} entry ({exc})", position=base + self.s.pos,
                    offset=<int64_t>load_u64(e)) from None
            with nogil:
                if magic == 2:
                    status = decode_v2_records(&self.s, &b, &plain[0] if plain.shape[0] else NULL,
                                               plain.shape[0], count, self.s.base + self.s.pos)
                else:
                    status = decode_legacy_inner(&self.s, &b, &plain[0] if plain.shape[0] else NULL,
                                                 plain.shape[0])
            if status < 0:
                self._raise()
            self.s.pos += LOG_OVERHEAD + size
        self.trailing_bytes = self.s.end - self.s.pos if status == S_END else 0
        return self._finish(), self.s.pos

    def _finish(self):
        cdef Py_ssize_t n = self.s.rows
        cdef bytes topic = self.topic.encode()
        key = varcol_take(&self.s.key, pa.binary())
        value = varcol_take(&self.s.value, pa.binary())
        topic_offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(topic))
        topic_col = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(topic_offsets),
                                                           pa.py_buffer(topic * n)])
        partition = pa.array(np.full(n, self.partition, dtype=np.int32))
        offset = pa.Array.from_buffers(pa.int64(), n, [None, take_buffer(&self.s.offset)])
        timestamp = pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, take_buffer(&self.s.timestamp)])
        ts_type = pa.Array.from_buffers(pa.int32(), n, [None, take_buffer(&self.s.ts_type)])
        magic = pa.Array.from_buffers(pa.int8(), n, [None, take_buffer(&self.s.magic)])
        producer_id = pa.Array.from_buffers(pa.int64(), n, [None, take_buffer(&self.s.producer_id)])
        transactional = pa.array(np.frombuffer(take_buffer(&self.s.transactional), dtype=np.bool_, count=n))
        control = pa.array(np.frombuffer(take_buffer(&self.s.control), dtype=np.bool_, count=n))
        columns = [key, value, topic_col, partition, offset, timestamp, ts_type]
        if self.s.include_headers:
            hkey = varcol_take(&self.s.hkey, pa.string())
            hvalue = varcol_take(&self.s.hvalue, pa.binary())
            entries = pa.StructArray.from_arrays([hkey, hvalue], fields=list(HEADERS_TYPE.value_type))
            nulls = self.s.hdr_nulls
            valid = take_buffer(&self.s.hdr_valid) if nulls else None
            headers = pa.Array.from_buffers(HEADERS_TYPE, n, [valid, take_buffer(&self.s.hdr_offsets)],
                                            null_count=nulls, children=[entries])
            columns.append(headers)
        columns += [magic, producer_id, transactional, control]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _raise(self):
        cdef State* s = &self.s
        self.failed_entry = s.pos
        where = f"{self.source}: "
        if s.err == E_NOMEM:
            raise MemoryError("out of memory while decoding records")
        if s.err == E_CRC:
            raise InvalidCrcError(where + f"corrupt {s.err_what.decode()} (CRC mismatch)",
                                  stored=s.err_stored, computed=s.err_computed,
                                  position=s.err_pos, offset=s.err_offset)
        if s.err == E_CODEC:
            raise UnsupportedCompressionError(where + f"unknown {s.err_what.decode()}",
                                              position=s.err_pos, offset=s.err_offset)
        raise CorruptRecordError(where + f"invalid {s.err_what.decode()}",
                                 position=s.err_pos, offset=s.err_offset)


# --------------------------------------------------------------------------------------------
# Shallow scan: one row per complete entry, no record decode.

SCAN_FIELDS = ("position", "size", "base_offset", "last_offset", "magic", "attributes",
               "producer_id", "count", "max_timestamp", "control_type")


cdef int16_t control_type_of(const unsigned char* e, Py_ssize_t size) noexcept nogil:
    """Control type of an uncompressed v2 control batch (its first record's key), else -1."""
    cdef Py_ssize_t pos = V2_HEADER
    cdef int32_t length, key_len, offset_delta
    cdef int64_t ts_delta
    if size < V2_HEADER or <int32_t>load_u32(e + 57) < 1 or (load_u16(e + 21) & 7):
        return -1
    if rd_varint(e, &pos, size, &length) < 0:
        return -1
    pos += 1
    if (rd_varlong(e, &pos, size, &ts_delta) < 0 or rd_varint(e, &pos, size, &offset_delta) < 0
            or rd_varint(e, &pos, size, &key_len) < 0 or key_len < 4 or key_len > size - pos):
        return -1
    if <int16_t>load_u16(e + pos) < 0:
        return -1
    return <int16_t>load_u16(e + pos + 2)


cdef Py_ssize_t walk(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* stop,
                     int64_t[:, ::1] out) noexcept nogil:
    """Count (out is empty) or fill the entry table.  Returns the number of entries, or -1 on a
    corrupt entry header (stop = its position)."""
    cdef Py_ssize_t n = 0
    cdef const unsigned char* e
    cdef int32_t size
    cdef int8_t magic
    cdef int fill = out.shape[0] > 0
    while end - pos >= 17:
        e = data + pos
        size = <int32_t>load_u32(e + 8)
        magic = <int8_t>e[16]
        if size < 14 or magic < 0 or magic > 2 or (magic == 2 and size < V2_HEADER - LOG_OVERHEAD):
            stop[0] = pos
            return -1
        if end - pos - LOG_OVERHEAD < size:
            break
        if fill:
            out[n, 0] = pos
            out[n, 1] = LOG_OVERHEAD + size
            out[n, 2] = <int64_t>load_u64(e)
            out[n, 4] = magic
            if magic == 2:
                out[n, 3] = out[n, 2] + <int32_t>load_u32(e + 23)
                out[n, 5] = <int16_t>load_u16(e + 21)
                out[n, 6] = <int64_t>load_u64(e + 43)
                out[n, 7] = <int32_t>load_u32(e + 57)
                out[n, 8] = <int64_t>load_u64(e + 35)
                out[n, 9] = control_type_of(e, LOG_OVERHEAD + size) if (e[22] & 0x20) else -1
            else:
                out[n, 3] = out[n, 2]
                out[n, 5] = e[17]
                out[n, 6] = -1
                out[n, 7] = -1 if (e[17] & 7) else 1
                out[n, 8] = <int64_t>load_u64(e + 18) if magic == 1 else -1
                out[n, 9] = -1
        n += 1
        pos += LOG_OVERHEAD + size
    stop[0] = pos
    return n


def scan_entries(data, Py_ssize_t start=0, Py_ssize_t end=-1, *, str source="<buffer>",
                 Py_ssize_t base=0, bint strict=True):
    """Shallow scan of data[start:end]: a dict of int64 numpy arrays (SCAN_FIELDS, one row per
    complete entry) plus "stop" (position after the last complete entry) and "error" (None, or
    what was wrong at "stop" when strict is False; strict raises CorruptRecordError)."""
    cdef const unsigned char[::1] view = byte_view(data)
    cdef Py_ssize_t n, stop = 0
    cdef int64_t[:, ::1] empty = np.empty((0, len(SCAN_FIELDS)), dtype=np.int64)
    cdef int64_t[:, ::1] table
    cdef const unsigned char* p
    if end < 0 or end > view.shape[0]:
        end = view.shape[0]
    p = &view[0] if view.shape[0] else NULL
    with nogil:
        n = walk(p, start, end, &stop, empty)
    error = None
    limit = end
    if n < 0:
        error = f"{source}: invalid entry header (size below 14, unknown magic or short v2 batch)"
        if strict:
            raise CorruptRecordError(error, position=base + stop, offset=<int64_t>load_u64(p + stop))
        limit = stop
    with nogil:
        n = walk(p, start, limit, &stop, empty)
    arr = np.zeros((n, len(SCAN_FIELDS)), dtype=np.int64)
    table = arr
    if n:
        with nogil:
            walk(p, start, limit, &stop, table)
    result = {name: arr[:, i] + (base if name == "position" else 0) for i, name in enumerate(SCAN_FIELDS)}
    result["stop"] = base + stop
    result["error"] = error
    return result


# --------------------------------------------------------------------------------------------
# Columnar encode: Arrow columns of one topic-partition -> v2 record batches.
# TODO(merge): write records through _v2.pxd's record writer once it is on main.

cdef struct BinCol:             # a binary/string Arrow array: offsets, data, validity
    const int32_t* offsets
    const unsigned char* data
    const unsigned char* valid
    Py_ssize_t offset

cdef object bincol_of(BinCol* c, arr):
    """Fill c from a pyarrow binary/string array; returns the objects keeping it alive."""
    bufs = arr.buffers()
    c.offset = arr.offset
    c.valid = NULL if bufs[0] is None or arr.null_count == 0 else <const unsigned char*><size_t>bufs[0].address
    c.offsets = <const int32_t*><size_t>bufs[1].address
    c.data = <const unsigned char*><size_t>bufs[2].address if bufs[2] is not None and bufs[2].size else NULL
    return bufs

cdef inline int32_t bincol_len(const BinCol* c, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t j = c.offset + i
    if c.valid != NULL and not (c.valid[j >> 3] >> (j & 7)) & 1:
        return -1
    return c.offsets[j + 1] - c.offsets[j]

cdef inline const unsigned char* bincol_ptr(const BinCol* c, Py_ssize_t i) noexcept nogil:
    return c.data + c.offsets[c.offset + i]


from kafkacodec._writer cimport (Writer, WriteBuffer, put_bytes, put_int8, put_int16, put_int32,
                                 put_int64, put_varint, put_varlong, reserve, store_u32,
                                 varint_size, varlong_size)


def encode_v2(key, value, timestamp_ms, headers=None, *, int codec=0, Py_ssize_t batch_bytes=16384,
              Py_ssize_t max_records=1 << 20, int64_t base_offset=0, compress=None):
    """Encode rows into v2 batches: `key`, `value` pyarrow binary arrays, `timestamp_ms` an int64
    numpy array, `headers` a pyarrow list<struct<key:string,value:binary>> array or None.
    A batch closes before the record that would take its records section past `batch_bytes`
    (every batch holds at least one record).  Offsets are dense from base_offset.  `compress`
    (codec, bytes) -> bytes compresses a records section.  Returns (bytes, number of batches)."""
    cdef Py_ssize_t n = len(value), i, j, batch_start, h, h0, h1
    cdef BinCol k, v, hk, hv
    cdef const int64_t[::1] ts = timestamp_ms
    cdef const int32_t[::1] hoff
    cdef const uint8_t[::1] hvalid
    cdef int32_t klen, vlen, hklen, hvlen, body
    cdef int64_t first_ts, max_ts
    cdef Writer* w
    cdef WriteBuffer out = WriteBuffer(), records = WriteBuffer()
    cdef Py_ssize_t batches = 0
    if len(key) != n or ts.shape[0] != n or (headers is not None and len(headers) != n):
        raise ValueError("key, value, timestamp_ms and headers must have the same length")
    if not 0 <= codec <= 4:
        raise UnsupportedCompressionError(f"unknown compression type id {codec}")
    keep = [bincol_of(&k, key), bincol_of(&v, value)]
    has_headers = headers is not None and headers.null_count < n
    if has_headers:
        hoff = np.asarray(headers.offsets, dtype=np.int32)
        entries = headers.values
        keep += [bincol_of(&hk, entries.field(0)), bincol_of(&hv, entries.field(1)), entries]
        hvalid = np.ascontiguousarray(headers.is_valid().to_numpy(zero_copy_only=False), dtype=np.uint8)
    i = 0
    while i < n:
        batch_start = i
        w = &records.w
        w.length = 0
        first_ts = ts[i]
        max_ts = -1
        while i < n and i - batch_start < max_records:
            klen = bincol_len(&k, i)
            vlen = bincol_len(&v, i)
            h0 = h1 = 0
            if has_headers and hvalid[i]:
                h0 = hoff[i]
                h1 = hoff[i + 1]
            body = (1 + varlong_size(ts[i] - first_ts) + varint_size(<int32_t>(i - batch_start))
                    + varint_size(klen) + (klen if klen > 0 else 0)
                    + varint_size(vlen) + (vlen if vlen > 0 else 0) + varint_size(<int32_t>(h1 - h0)))
            for h in range(h0, h1):
                hklen = bincol_len(&hk, h)
                hvlen = bincol_len(&hv, h)
                if hklen < 0:
                    raise ValueError(f"row {i}: a header key is null (Kafka header keys are strings)")
                body += varint_size(hklen) + hklen + varint_size(hvlen) + (hvlen if hvlen > 0 else 0)
            if i > batch_start and w.length + varint_size(body) + body > batch_bytes:
                break
            put_varint(w, body)
            put_int8(w, 0)
            put_varlong(w, ts[i] - first_ts)
            put_varint(w, <int32_t>(i - batch_start))
            put_varint(w, klen)
            if klen > 0:
                put_bytes(w, bincol_ptr(&k, i), klen)
            put_varint(w, vlen)
            if vlen > 0:
                put_bytes(w, bincol_ptr(&v, i), vlen)
            put_varint(w, <int32_t>(h1 - h0))
            for h in range(h0, h1):
                hklen = bincol_len(&hk, h)
                hvlen = bincol_len(&hv, h)
                put_varint(w, hklen)
                put_bytes(w, bincol_ptr(&hk, h), hklen)
                put_varint(w, hvlen)
                if hvlen > 0:
                    put_bytes(w, bincol_ptr(&hv, h), hvlen)
            if ts[i] > max_ts:
                max_ts = ts[i]
            i += 1
        section = memoryview(records)
        if codec:
            section = compress(codec, section)
        _batch_header(&out.w, base_offset + batch_start, <int32_t>(i - 1 - batch_start), first_ts,
                      max_ts, codec, <int32_t>(i - batch_start), section)
        del section
        batches += 1
    return out.getvalue(), batches


cdef int _batch_header(Writer* w, int64_t base_offset, int32_t last_delta, int64_t first_ts,
                       int64_t max_ts, int codec, int32_t count, section) except -1:
    cdef const unsigned char[::1] body = section
    cdef Py_ssize_t start = w.length
    cdef Py_ssize_t size = V2_HEADER + body.shape[0]
    put_int64(w, base_offset)
    put_int32(w, <int32_t>(size - LOG_OVERHEAD))
    put_int32(w, -1)                  # partition leader epoch
    put_int8(w, 2)
    reserve(w, 4)                     # crc
    put_int16(w, codec)               # CreateTime, not transactional
    put_int32(w, last_delta)
    put_int64(w, first_ts)
    put_int64(w, max_ts)
    put_int64(w, -1)                  # producer id
    put_int16(w, -1)                  # producer epoch
    put_int32(w, -1)                  # base sequence
    put_int32(w, count)
    put_bytes(w, &body[0] if body.shape[0] else NULL, body.shape[0])
    store_u32(w.buf + start + 17, kc_crc32c(0, w.buf + start + 21, size - 21))
    return 0
