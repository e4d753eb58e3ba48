# cython: language_level=3
"""Columnar decode: Kafka log entries (v0/v1 messages, v2 batches) straight into Arrow buffers.

One `ArrowDecoder` walks a byte range of a segment (or a fetched record set) entry by entry and
appends every record to C column buffers: key/value binary (offsets, data, validity), headers
list<struct<key:string,value:binary>>, offset, timestamp, timestampType and the batch columns
(magic, producerId, isTransactional, isControl).  The batch walker (_walk.pxd: framing,
header checks, the decompression policy, v2 records and legacy inner sets) reads the entries;
this module keeps the columns, the output limits and resuming, the offset range and the
control / aborted filters.  No Python object is made per record and the loop runs without the
GIL (it takes it only to call the codec or to raise).  The finished buffers are handed to
pyarrow without a copy (`_Memory` owns them).  It reads every entry as MemoryRecords does
(tests/test_arrow_differential.py and tests/test_differential_readers.py hold them to the same
records and errors on hostile input).

`scan_entries()` is the shallow index (_index.pyx: entry headers, no record decode; the same walk
and rows as Records.index()) that the Spark planner uses to split segments at batch boundaries
and to find aborted transactions.
"""

cimport cython
from libc.stdint cimport (int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t,
                          INT32_MAX, INT64_MAX, INT64_MIN)
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF

from kafkacodec._columns cimport ArrowBinary, arrow_binary_init, arrow_binary_row
from kafkacodec._compression cimport (Decompressor, DEFAULT_MAX_DECOMPRESSED, LEVEL_DEFAULT, _Chunk,
                                      compress, thread_decompressor)
from kafkacodec._crc cimport kc_crc32c, kc_crc_init
from kafkacodec._cursor cimport Cursor, cursor_init, load_u32, load_u64, remaining
from kafkacodec._format cimport (BatchHeader, LOG_OVERHEAD, MAGIC_OFFSET, LEGACY_CRC_OFFSET,
                                 V2_HEADER_SIZE, CONTROL_FLAG, TRANSACTIONAL_FLAG, FRAME_OK,
                                 compute_crc, wrap_add, wrap_sub, SIZE_OFFSET, CODEC_ZSTD, CODEC_NONE,
                                 raise_frame_error)
from kafkacodec._guard cimport Guard, guard_enter, guard_leave
from kafkacodec._index import SCAN_FIELDS, scan_entries   # the shallow index (core: no pyarrow)
from kafkacodec._mapguard cimport MEMORY_ANONYMOUS, MEMORY_FILE, check_read, memory_kind
from kafkacodec._legacy cimport read_legacy_message
from kafkacodec._v2 cimport (V2Record, read_v2_header, record_timestamp, v2_record_body_size, write_v2_batch_header,
                             write_v2_record)
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_entry, walk_open, walk_decompressed,
                               walk_next, DataRun, walk_data_begin, walk_data_record,
                               walk_data_end, legacy_view, pin_output, unpin_chunk,
                               OPEN_NONE, OPEN_COMPRESSED, AbortFilter, abort_filter_init,
                               abort_filter_add, abort_filter_ready, abort_filter_batch,
                               abort_filter_free, ABORT_SKIP, ABORT_NOT_LOADED,
                               raise_abort_not_loaded)
from kafkacodec._writer cimport Writer, WriteBuffer, put_bytes, put_varint, reserve

cdef extern from "kc_copy.h" nogil:
    void kc_copy_stream(unsigned char* dst, const unsigned char* src, size_t n)
    void kc_stream_fence()

# Every `cdef inline` function this module uses is inlined (kc_inline.h says why).
cdef extern from "kc_inline.h":
    pass

import os as _os

import numpy as np
import pyarrow as pa

from kafkacodec.errors import (CorruptRecordError, InvalidCrcError, KafkaCodecError,
                               RecordTooLargeError, UnsupportedCompressionError)

kc_crc_init()

# What the decode loop stopped for.
cdef enum:
    S_END = 0            # reached the end of the range (or a partial trailing entry)
    S_FULL = 1           # the output batch is full; resume at state.pos

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


cdef object selected_schema(object full, object columns):
    """The schema of ArrowDecoder(columns=...): full's fields named by `columns`, in that order."""
    if columns is None:
        return full
    if isinstance(columns, (str, bytes)):
        raise TypeError("columns must be a sequence of column names, not one string")
    names = list(columns)
    if not names:
        raise ValueError("columns selects no column (None selects them all)")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"column names are strings, not {type(name).__name__}")
        if name not in full.names:
            hint = " (include_headers is False)" if name == "headers" else ""
            raise ValueError(f"unknown column {name!r}{hint}; the columns are {', '.join(full.names)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a column is selected twice: {', '.join(names)}")
    return pa.schema([full.field(name) for name in names])


# --------------------------------------------------------------------------------------------
# Growable C buffers and the object that hands them to Arrow.

cdef struct Buf:
    unsigned char* ptr
    Py_ssize_t len
    Py_ssize_t cap

cdef int buf_grow(Buf* b, Py_ssize_t need) noexcept nogil:
    # Double when growing; the first allocation is exact (presized buffers stay below glibc's
    # mmap threshold, so freed blocks are reused without fresh page faults).
    cdef Py_ssize_t cap = b.cap * 2 if b.cap > 0 else 4096
    cdef unsigned char* p
    if cap < need:
        cap = need
    p = <unsigned char*>realloc(b.ptr, cap)
    if p == NULL:
        return -1
    b.ptr = p
    b.cap = cap
    return 0

cdef inline int buf_ensure(Buf* b, Py_ssize_t extra) noexcept nogil:
    if b.cap - b.len < extra:
        return buf_grow(b, b.len + extra)
    return 0


# Freed output blocks kept for reuse, so steady-state decoding writes into pages that are
# already mapped instead of faulting fresh ones in (a quarter of the time otherwise).  Only
# touched with the GIL held: by _Memory.__dealloc__ and by ArrowDecoder.decode before its
# nogil loop.  Bounded: POOL_SLOTS blocks of at least POOL_MIN_BLOCK, POOL_MAX_BYTES in all.
cdef enum:
    POOL_SLOTS = 16
    POOL_MIN_BLOCK = 256 * 1024
    POOL_MAX_BYTES = 64 * 1024 * 1024
cdef unsigned char* pool_ptr[16]
cdef Py_ssize_t pool_cap[16]
cdef Py_ssize_t pool_bytes = 0


cdef bint pool_put(unsigned char* p, Py_ssize_t cap) noexcept:
    global pool_bytes
    cdef int i
    if cap < POOL_MIN_BLOCK or pool_bytes + cap > POOL_MAX_BYTES:
        return False
    for i in range(POOL_SLOTS):
        if pool_ptr[i] == NULL:
            pool_ptr[i] = p
            pool_cap[i] = cap
            pool_bytes += cap
            return True
    return False


cdef int buf_presize(Buf* b, Py_ssize_t need) noexcept:
    """Give an empty b at least `need` bytes, from the pool when a block fits (best fit)."""
    global pool_bytes
    cdef int i, best = -1
    if b.cap >= need:
        return 0
    if b.ptr == NULL and need >= POOL_MIN_BLOCK // 4:
        for i in range(POOL_SLOTS):
            # at most 4x the need: a small buffer does not take the block a large one reuses
            if (pool_ptr[i] != NULL and need <= pool_cap[i] <= 4 * need
                    and (best < 0 or pool_cap[i] < pool_cap[best])):
                best = i
        if best >= 0:
            b.ptr = pool_ptr[best]
            b.cap = pool_cap[best]
            pool_ptr[best] = NULL
            pool_bytes -= b.cap
            return 0
    return buf_grow(b, need)


cdef class _Memory:
    """Owns one malloc'd block and exposes it through the buffer protocol (for pa.py_buffer)."""
    cdef unsigned char* ptr
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity

    def __dealloc__(self):
        if not pool_put(self.ptr, self.capacity):
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
    m.capacity = b.cap
    b.ptr = NULL
    b.len = 0
    b.cap = 0
    return pa.py_buffer(m)


cdef object int32_buffer(Py_ssize_t n, int64_t first, int64_t step):
    """An Arrow buffer of the n int32 values first, first + step, ... (the caller keeps them in
    range), in pooled memory: a numpy temporary of a large output would fault its pages in
    afresh on every call."""
    cdef Buf b
    cdef int32_t* p
    cdef Py_ssize_t i
    memset(&b, 0, sizeof(Buf))
    if buf_presize(&b, 4 * n + 4) < 0:
        raise MemoryError()
    p = <int32_t*>b.ptr
    for i in range(n):
        p[i] = <int32_t>(first + i * step)
    b.len = 4 * n
    return take_buffer(&b)


cdef object repeated_buffer(bytes item, Py_ssize_t n):
    """An Arrow buffer of `item` n times, in pooled memory (see int32_buffer)."""
    cdef Buf b
    cdef Py_ssize_t size = len(item), total = size * n, done
    memset(&b, 0, sizeof(Buf))
    if total == 0:
        return pa.py_buffer(b"")
    if buf_presize(&b, total) < 0:
        raise MemoryError()
    memcpy(b.ptr, <const char*>item, size)
    done = size
    while done < total:                         # doubling copies
        memcpy(b.ptr + done, b.ptr, min(done, total - done))
        done += min(done, total - done)
    b.len = total
    return take_buffer(&b)


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

cdef inline int varcol_put(VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    """Append a value (size < 0: null) whose offset slot and bitmap byte are reserved (the data
    is checked); the bitmap's length is the caller's to set."""
    if (c.n & 7) == 0:
        c.valid.ptr[c.n >> 3] = 0              # a fresh bitmap byte (growth is not zeroed)
    if size >= 0:
        if size > 0:
            if buf_ensure(&c.data, size) < 0:
                return -1
            # the output outgrows the caches and is not read back here (_decode fences)
            kc_copy_stream(c.data.ptr + c.data.len, p, size)
            c.data.len += size
        c.valid.ptr[c.n >> 3] |= <unsigned char>(1 << (c.n & 7))
    else:
        c.nulls += 1
    c.n += 1
    (<int32_t*>(c.offsets.ptr + c.offsets.len))[0] = <int32_t>c.data.len
    c.offsets.len += 4
    return 0

cdef inline int varcol_append(VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    # size < 0: null
    if buf_ensure(&c.offsets, 4) < 0 or buf_ensure(&c.valid, 1) < 0 or varcol_put(c, p, size) < 0:
        return -1
    c.valid.len = (c.n + 7) >> 3
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
# Header keys: Arrow strings must be UTF-8.  Kafka's header keys are decoded by Java's
# new String(bytes, UTF_8), and by MemoryRecords with Python's "replace" handler, both of which
# turn each maximal ill-formed subsequence into U+FFFD (Unicode's "substitution of maximal
# subparts").  is_ascii is the fast check (most keys), utf8_valid_prefix the full one, and
# utf8_repair writes the replaced form.

cdef inline bint is_ascii(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef uint64_t word, bits = 0
    while n - i >= 8:
        memcpy(&word, p + i, 8)
        bits |= word
        i += 8
    while i < n:
        bits |= p[i]
        i += 1
    return (bits & 0x8080808080808080ULL) == 0


cdef Py_ssize_t utf8_valid_prefix(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """Length of the longest well-formed UTF-8 prefix of p[:n] (n when it is all valid)."""
    cdef Py_ssize_t i = 0
    cdef int step
    while i < n:
        if p[i] < 0x80:
            i += 1
            continue
        step = utf8_sequence(p + i, n - i)
        if step <= 0:
            return i
        i += step
    return n


cdef inline int utf8_sequence(const unsigned char* p, Py_ssize_t left) noexcept nogil:
    """At a byte >= 0x80: the length of the well-formed sequence starting there (Unicode
    table 3-7), or -k when it is ill-formed and its maximal subpart is k bytes long."""
    cdef unsigned char b = p[0], low = 0x80, high = 0xBF
    cdef int length, j
    if 0xC2 <= b <= 0xDF:
        length = 2
    elif 0xE0 <= b <= 0xEF:
        length = 3
        if b == 0xE0:
            low = 0xA0                    # no overlong forms
        elif b == 0xED:
            high = 0x9F                   # no surrogates
    elif 0xF0 <= b <= 0xF4:
        length = 4
        if b == 0xF0:
            low = 0x90
        elif b == 0xF4:
            high = 0x8F                   # nothing above U+10FFFF
    else:
        return -1                         # a continuation byte, C0, C1 or F5..FF
    for j in range(1, length):
        if j >= left or not (low <= p[j] <= high):
            return -j
        low = 0x80
        high = 0xBF
    return length


cdef Py_ssize_t utf8_repair(const unsigned char* p, Py_ssize_t n, unsigned char* out) noexcept nogil:
    """Write p[:n] with every maximal ill-formed subsequence replaced by U+FFFD to out (NULL:
    only count); returns the length (at most 3 * n)."""
    cdef Py_ssize_t i = 0, size = 0
    cdef int step
    while i < n:
        step = 1 if p[i] < 0x80 else utf8_sequence(p + i, n - i)
        if step > 0:
            if out != NULL:
                memcpy(out + size, p + i, step)
            size += step
            i += step
        else:
            if out != NULL:
                out[size] = 0xEF
                out[size + 1] = 0xBF
                out[size + 2] = 0xBD
            size += 3
            i -= step
    return size


cdef inline Py_ssize_t header_key_size(const unsigned char* p, int32_t n) noexcept nogil:
    """Bytes a header key takes in the Arrow column (its repaired form when it is not UTF-8)."""
    return n if is_ascii(p, n) or utf8_valid_prefix(p, n) == n else utf8_repair(p, n, NULL)


cdef int varcol_put_repaired(VarCol* c, const unsigned char* p, int32_t n) noexcept nogil:
    """varcol_put of a header key that is not ASCII: repaired when it is not UTF-8."""
    cdef Py_ssize_t valid = utf8_valid_prefix(p, n), size
    if valid == n:
        return varcol_put(c, p, n)
    size = utf8_repair(p + valid, n - valid, NULL)
    if buf_ensure(&c.data, valid + size) < 0:
        return -1
    memcpy(c.data.ptr + c.data.len, p, valid)
    utf8_repair(p + valid, n - valid, c.data.ptr + c.data.len + valid)
    c.data.len += valid + size
    return varcol_put(c, p, 0)             # closes the entry over the bytes just written


cdef inline int varcol_reserve(VarCol* c, Py_ssize_t entries, Py_ssize_t slot=4) noexcept nogil:
    """Room for `entries` more offsets (slot 16: views) and their validity bits (varcol_put's
    and view_put's precondition)."""
    if buf_ensure(&c.offsets, slot * entries) < 0 or buf_ensure(&c.valid, (entries >> 3) + 2) < 0:
        return -1
    return 0


# --------------------------------------------------------------------------------------------
# The decoder state and loop.  Everything below runs without the GIL; the walker (_walk.pxd)
# raises by taking the GIL itself, and decompression takes it for the codec call.
#
# Output limits.  max_rows and max_bytes end an output batch at the first entry boundary at
# or past them (one entry may take it beyond).  The hard limit, output_limit (2^31-1: what an
# int32 Arrow offset addresses), bounds the bytes of every variable-width column together
# (keys, values, header keys and values, and the topic string each row repeats): a record
# that would pass it ends the output batch inside its entry, and the next decode() call,
# started at the position returned, goes on with that entry's next record (`resume_*`,
# `skip_records`).  Only a record that alone passes it raises RecordTooLargeError.

cdef enum:
    ENTRY_DONE = 0
    ENTRY_STOPPED = 1    # the output is full inside the entry: stop_index is its next record

cdef struct Batch:              # what a record needs from its batch / wrapper
    int64_t producer_id
    int32_t ts_type             # -1 none, 0 create, 1 log-append
    int8_t magic
    uint8_t transactional
    uint8_t control
    uint8_t skip                # aborted data: parse and validate, but emit nothing

cdef struct State:
    const unsigned char* data
    Py_ssize_t pos              # next entry to read (its start, also while it is decoded)
    Py_ssize_t end
    Py_ssize_t base             # file position of data[0]
    PyObject* decompressor      # the decoding thread's Decompressor (set by decode())
    PyObject* chunk             # the chunk it decompressed the current batch into, pinned
    int decompressing           # the failing entry was compressed (for error messages)
    int64_t entry_offset        # base offset of the entry being decoded
    # options
    int validate_crc
    int include_headers         # the headers column is selected: header sections are parsed
    int want_key                # the key / value columns are selected: their bytes are copied (or viewed)
    int want_value
    int views                   # key and value are binary_view columns (view_put)
    const unsigned char* view_base   # views: data[start] of this call, and the bytes from it
    size_t view_span
    int view_chunks             # views: input chunks (2^view_chunk_bits bytes apart) the views use
    int view_chunk_bits
    int keep_control
    int64_t start_offset        # the offsets emitted: start_offset..last_offset (inclusive)
    int64_t last_offset
    Py_ssize_t max_rows
    Py_ssize_t max_bytes
    Py_ssize_t output_limit     # hard: variable-width bytes of one output (int32 offsets)
    Py_ssize_t topic_size       # bytes of the topic string, repeated on every row (0: no topic column)
    AbortFilter aborted         # read_committed: the walker's aborted-transaction filter
    # an entry that ended the previous output inside it
    Py_ssize_t resume_pos       # its position (-1: none)
    Py_ssize_t resume_index     # records of it already emitted (or filtered out)
    Py_ssize_t resume_size      # its size, stored CRC and base offset: the same entry?
    uint32_t resume_crc
    int64_t resume_offset
    Py_ssize_t skip_records     # records of the current entry to pass over (resuming)
    Py_ssize_t stop_index       # ENTRY_STOPPED: the record the next output starts with
    # output
    VarCol key
    VarCol value
    Buf offset
    Buf timestamp
    Buf ts_nulls                # int64 rows whose timestamp is null (microseconds overflow)
    Buf ts_type
    Buf magic
    Buf producer_id
    Buf transactional           # isTransactional and isControl: bitmaps (bits_fill)
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
    Py_ssize_t aborted_records   # data records of aborted transactions passed over


# binary_view columns (views=True).  A view is 16 bytes: the length, then up to 12 bytes
# inline, or the first 4 bytes, a buffer index and an offset in it (Arrow's BinaryView layout).
# Buffer 0 holds the bytes copied out of decompressed records; buffer 1 + k is the call's input
# from its start + k * 2^view_chunk_bits on (2^30 but in tests), so every offset fits an int32.
cdef enum:
    VIEW_INLINE = 12
    VIEW_CHUNK_BITS = 30


cdef inline int view_put(State* s, VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    """varcol_put of views=True: one view (size < 0: null) into reserved room, pointing into the
    input when p is in it, else at a copy in buffer 0."""
    cdef unsigned char* view = c.offsets.ptr + c.offsets.len
    cdef size_t at = <size_t>(<uintptr_t>p - <uintptr_t>s.view_base)   # huge when p is before it
    cdef int32_t chunk
    if (c.n & 7) == 0:
        c.valid.ptr[c.n >> 3] = 0
    memset(view, 0, 16)
    if size >= 0:
        (<int32_t*>view)[0] = size
        if size <= VIEW_INLINE:
            if size > 0:
                memcpy(view + 4, p, size)
        else:
            memcpy(view + 4, p, 4)
            if at < s.view_span:
                chunk = <int32_t>(at >> s.view_chunk_bits)
                (<int32_t*>(view + 8))[0] = 1 + chunk
                (<int32_t*>(view + 12))[0] = <int32_t>(at & ((<size_t>1 << s.view_chunk_bits) - 1))
                if chunk >= s.view_chunks:
                    s.view_chunks = chunk + 1
            else:                           # decompressed: the chunk is reused, copy it out
                if buf_ensure(&c.data, size) < 0:
                    return -1
                memcpy(c.data.ptr + c.data.len, p, size)
                (<int32_t*>(view + 12))[0] = <int32_t>c.data.len
                c.data.len += size
        c.valid.ptr[c.n >> 3] |= <unsigned char>(1 << (c.n & 7))
    else:
        c.nulls += 1
    c.n += 1
    c.offsets.len += 16
    return 0


cdef inline int col_put(State* s, VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    """A key or value: a view, or a copy (varcol_put)."""
    return view_put(s, c, p, size) if s.views else varcol_put(c, p, size)


cdef inline int col_append(State* s, VarCol* c, const unsigned char* p, int32_t size) noexcept nogil:
    """col_put with its room ensured (varcol_append)."""
    if varcol_reserve(c, 1, 16 if s.views else 4) < 0 or col_put(s, c, p, size) < 0:
        return -1
    c.valid.len = (c.n + 7) >> 3
    return 0


cdef int refuse_file_memory(object data, const void* buf, Py_ssize_t length) except -1:
    """ValueError unless the memory views=True would point into is known
    to have no file behind it.  A batch of views reads its input for as long as it lives, and a
    cut of a mapped file (Kafka truncates its active segment) turns a later read of a page past
    the new end into SIGBUS, which kills the process (or, under the truncation guard, into
    zeros).  So the rule is about the memory, not the Python type that hands it over (a pyarrow
    memory map, a numpy memmap, a ctypes array or pa.foreign_buffer over an mmap, a memfd):
    _mapguard.memory_kind() looks the address range up in the process's mappings; where it
    cannot tell, the input is refused too.  Checked before any view exists."""
    cdef int error = 0
    cdef int kind = memory_kind(data, buf, length, &error)
    if kind == MEMORY_ANONYMOUS:
        return 0
    if kind == MEMORY_FILE:
        raise ValueError(
            f"views=True does not decode a file mapping: this {type(data).__name__}'s memory has "
            "a file behind it (the process's mappings say so: an mmap, a memory map, a memfd or "
            "shared memory); the batch would read the file for as long as it lives, and a cut of the "
            "file (Kafka truncates its active segment) would fault the process (SIGBUS) or turn "
            "its values into zeros; pass the file's bytes, or decode with views=False (copies)")
    raise ValueError(
        f"views=True cannot tell whether this {type(data).__name__} is a file mapping "
        f"({_os.strerror(error)}: the process's mappings are read from /proc/self/maps, on "
        "Linux); pass bytes, a bytearray or a numpy array that owns its data, or decode with "
        "views=False (copies)")


cdef object viewcol_take(VarCol* c, list chunks):
    """The binary_view array of c's views over buffer 0 (its copies) and the input `chunks`."""
    cdef Py_ssize_t n = c.n, nulls = c.nulls
    validity = take_buffer(&c.valid) if nulls else None
    if not nulls:
        buf_free(&c.valid)
    views = take_buffer(&c.offsets)
    if c.data.len == 0 and c.data.ptr != NULL:   # nothing copied: its presized block is not kept
        if not pool_put(c.data.ptr, c.data.cap):
            free(c.data.ptr)
        c.data.ptr = NULL
        c.data.cap = 0
    copies = take_buffer(&c.data)
    c.n = 0
    c.nulls = 0
    return pa.Array.from_buffers(pa.binary_view(), n, [validity, views, copies, *chunks],
                                 null_count=nulls)


cdef int no_memory() except -1 nogil:
    with gil:
        raise MemoryError("out of memory while building Arrow columns")


cdef int crc_failed(State* s, const BatchHeader* h, uint32_t computed) except -1 nogil:
    with gil:
        raise InvalidCrcError(f"corrupt magic {h.magic} entry (CRC mismatch)", stored=h.crc,
                              computed=computed, position=h.position, offset=h.base_offset)


cdef int check_crc(State* s, const unsigned char* entry, const BatchHeader* h) except -1 nogil:
    cdef uint32_t computed
    if s.validate_crc:
        s.crc_checked += 1
        computed = compute_crc(entry, h)
        if computed != h.crc:
            crc_failed(s, h, computed)
    return 0


cdef const unsigned char* decompress_records(State* s, const BatchHeader* h,
                                             const unsigned char* data, Py_ssize_t size,
                                             Py_ssize_t* out_size) except NULL nogil:
    """The batch's records decompressed by the walker's policy (_walk.pxd): into the chunk of
    the decoding thread's Decompressor, pinned until the next batch is decompressed or
    decode() returns (the rows are copied out; a resume re-decompresses its entry)."""
    s.decompressing = 1
    with gil:
        return decompress_pinned(s, h.compression, h.magic, data, size, out_size)


cdef const unsigned char* decompress_pinned(State* s, int codec, int magic,
                                            const unsigned char* data, Py_ssize_t size,
                                            Py_ssize_t* out_size) except NULL:
    cdef Decompressor decompressor = <Decompressor>s.decompressor
    cdef const unsigned char* out
    cdef _Chunk chunk
    release_chunk(s)                    # the last batch's rows are copied: its chunk is reused
    decompressor.max_size = DEFAULT_MAX_DECOMPRESSED
    out = decompressor.decompress_into(codec, magic, data, size, out_size)
    chunk = pin_output(decompressor)
    Py_INCREF(chunk)
    s.chunk = <PyObject*>chunk
    return out


cdef void release_chunk(State* s) noexcept:
    """Unpin the chunk decompress_pinned() pinned, if any (a big one is freed)."""
    cdef _Chunk chunk
    if s.chunk != NULL:
        chunk = <_Chunk>s.chunk
        s.chunk = NULL
        Py_DECREF(chunk)                # `chunk` still holds a reference
        unpin_chunk(chunk)


cdef inline Py_ssize_t output_bytes(const State* s) noexcept nogil:
    """Bytes of the variable-width columns so far, the topic strings included."""
    return (s.key.data.len + s.value.data.len + s.hkey.data.len + s.hvalue.data.len
            + s.rows * s.topic_size)


cdef int room_for(State* s, const BatchHeader* h, Py_ssize_t need) except -1 nogil:
    """1 when a record adding `need` variable-width bytes fits in this output, 0 when it ends
    the output before it; RecordTooLargeError when it cannot fit in any."""
    if output_bytes(s) + need <= s.output_limit:
        return 1
    if s.rows:
        return 0
    with gil:
        raise RecordTooLargeError(
            f"a record of {need} bytes (key, value, headers and topic) does not fit in an Arrow "
            f"batch: at most {s.output_limit} bytes (int32 offsets)",
            position=h.position, offset=h.base_offset)


cdef inline int store_timestamp(State* s, int64_t ms) except -1 nogil:
    """The row's timestamp, into room reserved: Spark's microseconds (Kafka's -1 "no timestamp"
    stays -1 ms, as Spark's Kafka source gives it); null when they do not fit in an int64."""
    cdef int64_t us = 0
    # -MS_LIMIT <= ms <= MS_LIMIT (INT64_MAX // 1000) in one unsigned comparison
    if <uint64_t>ms + <uint64_t>9223372036854775ULL <= <uint64_t>18446744073709550ULL:
        us = ms * 1000
    elif put_i64(&s.ts_nulls, s.rows) < 0:
        return no_memory()
    (<int64_t*>(s.timestamp.ptr + s.timestamp.len))[0] = us
    s.timestamp.len += 8
    return 0


cdef void bits_fill(Buf* b, Py_ssize_t start, Py_ssize_t end, bint value) noexcept nogil:
    """Bits start..end of the bitmap b (Arrow's order: row i is bit i % 8 of byte i // 8), whose
    bits from start on are clear, set to value, in room reserved; b.len covers end bits."""
    cdef Py_ssize_t i = start, size = (end + 7) >> 3
    if size > b.len:
        memset(b.ptr + b.len, 0, size - b.len)
        b.len = size
    if not value:
        return
    while i < end and (i & 7):
        b.ptr[i >> 3] |= <unsigned char>(1 << (i & 7))
        i += 1
    if end - i >= 8:
        memset(b.ptr + (i >> 3), 0xFF, (end - i) >> 3)
        i += (end - i) & ~7
    while i < end:
        b.ptr[i >> 3] |= <unsigned char>(1 << (i & 7))
        i += 1


cdef inline int emit_fixed(State* s, const Batch* b, int32_t ts_type, int64_t offset,
                           int64_t ts) except -1 nogil:
    if buf_ensure(&s.timestamp, 8) < 0:
        return no_memory()
    store_timestamp(s, ts)
    if (put_i64(&s.offset, offset) < 0 or put_i32(&s.ts_type, ts_type) < 0
            or put_u8(&s.magic, <uint8_t>b.magic) < 0 or put_i64(&s.producer_id, b.producer_id) < 0
            or buf_ensure(&s.transactional, 1) < 0 or buf_ensure(&s.control, 1) < 0):
        return no_memory()
    bits_fill(&s.transactional, s.rows, s.rows + 1, b.transactional)
    bits_fill(&s.control, s.rows, s.rows + 1, b.control)
    s.rows += 1
    return 0


cdef inline int emit_headers_entry(State* s, int32_t count) except -1 nogil:
    """Close the headers list of the row just emitted (null when it has none, as Spark)."""
    cdef Py_ssize_t row = s.rows - 1
    if buf_ensure(&s.hdr_valid, 1) < 0 or put_i32(&s.hdr_offsets, <int32_t>s.hkey.n) < 0:
        return no_memory()
    if (row & 7) == 0:
        s.hdr_valid.ptr[row >> 3] = 0
    if count > 0:
        s.hdr_valid.ptr[row >> 3] |= <unsigned char>(1 << (row & 7))
    else:
        s.hdr_nulls += 1
    s.hdr_valid.len = (s.rows + 7) >> 3
    return 0


cdef int reserve_rows(State* s, Py_ssize_t rows) except -1 nogil:
    """Room for `rows` more rows in every fixed-width column, the variable columns' offsets
    and the validity bitmaps, so a batch's records are appended without per-row checks."""
    cdef Py_ssize_t bits = (rows >> 3) + 2
    cdef Py_ssize_t slot = 16 if s.views else 4
    if ((s.want_key and varcol_reserve(&s.key, rows, slot) < 0)
            or (s.want_value and varcol_reserve(&s.value, rows, slot) < 0)
            or buf_ensure(&s.offset, 8 * rows) < 0 or buf_ensure(&s.timestamp, 8 * rows) < 0
            or buf_ensure(&s.ts_type, 4 * rows) < 0 or buf_ensure(&s.magic, rows) < 0
            or buf_ensure(&s.producer_id, 8 * rows) < 0 or buf_ensure(&s.transactional, rows) < 0
            or buf_ensure(&s.control, rows) < 0
            or (s.include_headers and (buf_ensure(&s.hdr_offsets, 4 * rows) < 0
                                       or buf_ensure(&s.hdr_valid, bits) < 0))):
        return no_memory()
    return 0


cdef void fill_batch_columns(State* s, const Batch* b, Py_ssize_t first_row) noexcept nogil:
    """The columns every row of a batch shares, for rows first_row..s.rows (reserved)."""
    cdef Py_ssize_t i, n = s.rows - first_row
    cdef int32_t* ts_type = <int32_t*>(s.ts_type.ptr + s.ts_type.len)
    cdef int64_t* producer_id = <int64_t*>(s.producer_id.ptr + s.producer_id.len)
    for i in range(n):
        ts_type[i] = b.ts_type
        producer_id[i] = b.producer_id
    memset(s.magic.ptr + s.magic.len, <uint8_t>b.magic, n)
    bits_fill(&s.transactional, first_row, s.rows, b.transactional)     # (bitmaps: one bit a row)
    bits_fill(&s.control, first_row, s.rows, b.control)
    s.ts_type.len += 4 * n
    s.producer_id.len += 8 * n
    s.magic.len += n


cdef inline Py_ssize_t row_bytes_selected(const State* s, int32_t key_length, int32_t value_length) noexcept nogil:
    """The variable-width bytes a row's key, value (null: length < 0) and topic add to the
    selected columns."""
    return ((key_length if s.want_key and key_length > 0 else 0)
            + (value_length if s.want_value and value_length > 0 else 0) + s.topic_size)


cdef inline Py_ssize_t v2_record_bound(const State* s, const V2Record* rec) noexcept nogil:
    """An upper bound of the variable-width bytes the record adds (a header key that is not
    UTF-8 grows to at most 3 bytes a byte when repaired)."""
    cdef Py_ssize_t size = row_bytes_selected(s, rec.key_length, rec.value_length)
    return size + 3 * rec.headers_size if s.include_headers else size


cdef Py_ssize_t v2_record_size(const State* s, const V2Record* rec) except -1 nogil:
    """The variable-width bytes the record adds (walks its headers: only near the limit)."""
    cdef Py_ssize_t size = row_bytes_selected(s, rec.key_length, rec.value_length)
    cdef Cursor hc
    cdef const unsigned char* hk
    cdef const unsigned char* hv
    cdef int32_t j, hk_len, hv_len
    if s.include_headers:
        cursor_init(&hc, rec.headers, rec.headers_size, 0)
        for j in range(rec.header_count):
            read_v2_header(&hc, &hk, &hk_len, &hv, &hv_len)
            size += header_key_size(hk, hk_len) + (hv_len if hv_len > 0 else 0)
    return size


cdef int decode_v2_records(State* s, BatchWalk* w, const Batch* b) except -1 nogil:
    """The records of the v2 batch w walks, from record s.skip_records on, into the columns
    (walk_data_record(): no RecordView fields the columns do not take)."""
    cdef const BatchHeader* h = &w.h
    cdef RecordView v
    cdef DataRun r               # the walk's position, in registers for the batch
    cdef int64_t offset
    cdef int32_t j, hk_len, hv_len
    cdef Cursor hc
    cdef const unsigned char* hk
    cdef const unsigned char* hv
    cdef Py_ssize_t first_row = s.rows
    cdef Py_ssize_t row
    # A parsed v2 record takes at least 7 bytes (length, attributes, timestamp and offset
    # deltas, key and value lengths, header count: one byte each at least), so a hostile
    # RecordsCount reserves no more than the records section could hold.
    cdef Py_ssize_t rows = min(<Py_ssize_t>h.records_count, remaining(&w.cur) // 7 + 1)
    # Records are checked against the output limit only when the whole section might not fit:
    # its keys, values and headers are disjoint parts of it (header keys grow at most 3x when
    # repaired), plus the topic string a row.
    cdef bint check_room = (output_bytes(s) + 3 * remaining(&w.cur) + rows * s.topic_size
                            > s.output_limit)
    cdef int stopped = 0
    reserve_rows(s, rows)
    walk_data_begin(w, &r)
    try:
        # resuming: the first s.skip_records were emitted before (r.left counts down from
        # RecordsCount: h.records_count - r.left records are read)
        while h.records_count - r.left < s.skip_records and walk_data_record(w, &r, &v):
            pass
        while walk_data_record(w, &r, &v):
            offset = wrap_add(h.base_offset, v.rec.offset_delta)
            if not (s.start_offset <= offset and offset <= s.last_offset):
                continue
            if b.skip:                      # aborted data: read_committed passes it over
                s.aborted_records += 1
                continue
            # the bound first (cheap); the exact size only near the limit
            if (check_room and output_bytes(s) + v2_record_bound(s, &v.rec) > s.output_limit
                    and not room_for(s, h, v2_record_size(s, &v.rec))):
                s.stop_index = h.records_count - r.left - 1
                stopped = 1
                break
            if ((s.want_key and col_put(s, &s.key, v.rec.key, v.rec.key_length) < 0)
                    or (s.want_value and col_put(s, &s.value, v.rec.value, v.rec.value_length) < 0)):
                return no_memory()
            (<int64_t*>(s.offset.ptr + s.offset.len))[0] = offset
            s.offset.len += 8
            store_timestamp(s, record_timestamp(h, &v.rec))
            row = s.rows
            s.rows += 1
            if s.include_headers:
                if v.rec.header_count > 0:
                    if (varcol_reserve(&s.hkey, v.rec.header_count) < 0
                            or varcol_reserve(&s.hvalue, v.rec.header_count) < 0):
                        return no_memory()
                    cursor_init(&hc, v.rec.headers, v.rec.headers_size, 0)
                    for j in range(v.rec.header_count):
                        read_v2_header(&hc, &hk, &hk_len, &hv, &hv_len)
                        # header keys are Arrow strings: UTF-8 (ASCII first, the common case)
                        if ((varcol_put(&s.hkey, hk, hk_len) if is_ascii(hk, hk_len)
                                else varcol_put_repaired(&s.hkey, hk, hk_len)) < 0
                                or varcol_put(&s.hvalue, hv, hv_len) < 0):
                            return no_memory()
                    s.hkey.valid.len = (s.hkey.n + 7) >> 3
                    s.hvalue.valid.len = (s.hvalue.n + 7) >> 3
                # the row's headers list: null when it has none, as Spark gives it
                (<int32_t*>(s.hdr_offsets.ptr + s.hdr_offsets.len))[0] = <int32_t>s.hkey.n
                s.hdr_offsets.len += 4
                if (row & 7) == 0:
                    s.hdr_valid.ptr[row >> 3] = 0
                if v.rec.header_count > 0:
                    s.hdr_valid.ptr[row >> 3] |= <unsigned char>(1 << (row & 7))
                else:
                    s.hdr_nulls += 1
    finally:
        walk_data_end(w, &r)
        # every column keeps one entry per emitted row, also when a record fails to parse
        s.key.valid.len = (s.key.n + 7) >> 3
        s.value.valid.len = (s.value.n + 7) >> 3
        if s.include_headers:
            s.hdr_valid.len = (s.rows + 7) >> 3
        fill_batch_columns(s, b, first_row)
    return ENTRY_STOPPED if stopped else ENTRY_DONE


cdef int is_aborted(State* s, const BatchHeader* h) except -1 nogil:
    cdef int answer = abort_filter_batch(&s.aborted, h, -1)
    if answer == ABORT_NOT_LOADED:              # __init__ raised while listing `aborted`
        raise_abort_not_loaded(b"call __init__ again")
    return answer == ABORT_SKIP


cdef int first_control_type(State* s, const unsigned char* entry,
                            const BatchHeader* h) except -2 nogil:
    """The control type of a control batch's first record (-1: it has none), read as Kafka's
    consumer reads it for an ABORT marker (the walker's rules)."""
    cdef BatchWalk w
    cdef RecordView v
    cdef const unsigned char* data
    cdef Py_ssize_t size = 0
    cdef int opened
    w.h = h[0]
    opened = walk_open(&w, entry, &data, &size)
    if opened == OPEN_NONE:
        return -1
    if opened == OPEN_COMPRESSED:
        data = decompress_records(s, h, data, size, &size)
        walk_decompressed(&w, data, size)
    if not walk_next(&w, &v):
        return -1
    return v.control_type


cdef int decode_v2(State* s, BatchWalk* w, const unsigned char* entry) except -1 nogil:
    """A v2 batch, read as MemoryRecords reads it (walk_open() checks it in Kafka's order)."""
    cdef Batch b
    cdef const BatchHeader* h = &w.h
    cdef const unsigned char* data
    cdef Py_ssize_t size = 0
    cdef int opened
    check_crc(s, entry, h)
    opened = walk_open(w, entry, &data, &size)
    if opened == OPEN_NONE:                     # RecordsCount 0: the records are not examined
        return ENTRY_DONE
    if h.last_offset < s.start_offset or h.base_offset > s.last_offset:
        return ENTRY_DONE
    if (h.attributes & CONTROL_FLAG) and h.producer_id >= 0 and s.aborted.n:
        # read_committed: an ABORT marker ends its producer's aborted transaction
        abort_filter_batch(&s.aborted, h, first_control_type(s, entry, h))
    if (h.attributes & CONTROL_FLAG) and not s.keep_control:
        return ENTRY_DONE
    b.magic = 2
    b.producer_id = h.producer_id
    b.ts_type = h.timestamp_type
    b.transactional = (h.attributes & TRANSACTIONAL_FLAG) != 0
    b.control = (h.attributes & CONTROL_FLAG) != 0
    b.skip = is_aborted(s, h)
    if opened == OPEN_COMPRESSED:
        data = decompress_records(s, h, data, size, &size)
        walk_decompressed(w, data, size)
    return decode_v2_records(s, w, &b)


cdef inline int emit_legacy(State* s, const BatchHeader* h, const Batch* b,
                            const RecordView* v) except -1 nogil:
    """One v0/v1 message: ENTRY_DONE (emitted or filtered out) or ENTRY_STOPPED (full)."""
    if not (s.start_offset <= v.offset and v.offset <= s.last_offset):
        return ENTRY_DONE
    if not room_for(s, h, row_bytes_selected(s, v.rec.key_length, v.rec.value_length)):
        return ENTRY_STOPPED
    if ((s.want_key and col_append(s, &s.key, v.rec.key, v.rec.key_length) < 0)
            or (s.want_value and col_append(s, &s.value, v.rec.value, v.rec.value_length) < 0)):
        return no_memory()
    emit_fixed(s, b, v.timestamp_type, v.offset, v.timestamp)
    if s.include_headers:
        emit_headers_entry(s, 0)
    return ENTRY_DONE


cdef inline int check_inner_crc(State* s, const BatchWalk* w, const RecordView* v) except -1 nogil:
    """The CRC of the inner message walk_next() just read (errors name the wrapper)."""
    cdef BatchHeader ih
    cdef const unsigned char* message = w.cur.data + v.start
    ih.magic = message[MAGIC_OFFSET]
    ih.size = v.end - v.start
    ih.crc = load_u32(message + LEGACY_CRC_OFFSET)
    ih.position = w.h.position
    ih.base_offset = w.h.base_offset
    return check_crc(s, message, &ih)


cdef int decode_legacy(State* s, BatchWalk* w, const unsigned char* entry) except -1 nogil:
    """A v0/v1 entry: one message, or a compressed wrapper around an inner message set,
    read as MemoryRecords reads it (walk_open(), walk_decompressed() and walk_next() in
    _walk.pxd; record-formats.md §4)."""
    cdef Batch b
    cdef RecordView v
    cdef const BatchHeader* h = &w.h
    cdef const unsigned char* data = NULL
    cdef Py_ssize_t size = 0, index = 0
    check_crc(s, entry, h)
    b.magic = h.magic
    b.producer_id = -1
    b.ts_type = h.timestamp_type
    b.transactional = 0
    b.control = 0
    b.skip = 0
    if h.compression == CODEC_NONE:
        # One message, the entry itself: the WALK_ONE record of walk_open() and walk_next()
        # without setting the walk up (framing checked the magic), as MemoryRecords' loop
        # reads it (callgrind: 7% fewer instructions on uncompressed v0/v1).
        read_legacy_message(entry, h.size, h.position, &w.message)
        legacy_view(&w.message, h.base_offset, h.timestamp_type, h.max_timestamp, &v)
        s.stop_index = 0
        return emit_legacy(s, h, &b, &v)
    walk_open(w, entry, &data, &size)           # OPEN_COMPRESSED, or it raises
    if h.base_offset < s.start_offset:          # the wrapper offset is its last inner offset
        return ENTRY_DONE
    data = decompress_records(s, h, data, size, &size)
    walk_decompressed(w, data, size)
    while walk_next(w, &v):
        if s.validate_crc:
            check_inner_crc(s, w, &v)
        if index >= s.skip_records and emit_legacy(s, h, &b, &v) == ENTRY_STOPPED:
            s.stop_index = index
            return ENTRY_STOPPED
        index += 1
    return ENTRY_DONE


cdef int run(State* s) except -1 nogil:
    """Decode entries from s.pos until the end (S_END) or a full output batch (S_FULL)."""
    cdef BatchWalk w
    cdef const unsigned char* entry
    cdef int status, code
    while True:
        if s.rows >= s.max_rows or output_bytes(s) >= s.max_bytes:
            return S_FULL
        s.decompressing = 0
        s.entry_offset = <int64_t>load_u64(s.data + s.pos) if s.end - s.pos >= 8 else -1
        s.skip_records = 0
        code = walk_entry(s.data, s.end, s.pos, s.base, False, &w.h)   # in-memory rules
        if code != FRAME_OK:
            if code < 0:
                raise_frame_error(code, s.data + s.pos, s.base + s.pos)
            s.resume_pos = -1
            return S_END
        if s.resume_pos >= 0:                   # only ever the first entry of a call
            if (s.resume_pos == s.pos and s.resume_size == w.h.size and s.resume_crc == w.h.crc
                    and s.resume_offset == w.h.base_offset):
                s.skip_records = s.resume_index
            s.resume_pos = -1
        entry = s.data + s.pos
        if s.skip_records == 0:
            s.batches += 1
        status = decode_v2(s, &w, entry) if w.h.magic == 2 else decode_legacy(s, &w, entry)
        if status == ENTRY_STOPPED:
            s.resume_pos = s.pos
            s.resume_index = s.stop_index
            s.resume_size = w.h.size
            s.resume_crc = w.h.crc
            s.resume_offset = w.h.base_offset
            return S_FULL
        s.pos += w.h.size


cdef class ArrowDecoder:
    """ArrowDecoder(topic="", partition=0, *, validate_crc=True, include_headers=True, keep_control=False, start_offset=None, end_offset=None, aborted=None, max_rows=65536, max_bytes=16777216, source="<buffer>", columns=None, views=False)

    Decode log entries into `pyarrow.RecordBatch`es with Spark's Kafka schema.

    Records come out as MemoryRecords reads them (offsets and timestamps wrap as Java longs,
    header keys that are not UTF-8 get U+FFFD replacements).  `timestamp` is Spark's
    microseconds: null for a millisecond value whose microseconds do not fit in 64 bits
    (beyond about +-292,000 years), which Spark's own source rejects with an overflow.

    `aborted`: (producer id, first offset, last offset: the ABORT marker's) of aborted
    transactions, as a .txnindex lists them; their data batches are validated but not emitted,
    by Kafka's read_committed rule (docs/reading.md, "read_committed": the consumer's algorithm
    over the list a broker would send for a fetch at this read's start).  The filter follows
    the log across decode() calls: one decoder reads one partition's log forward.
    `start_offset` is inclusive, `end_offset` exclusive (None: no end).  An output batch is full at max_rows rows or max_bytes bytes of
    keys, values, headers and topic strings (checked between entries), and never holds more
    than 2^31-1 such bytes (Arrow's int32 offsets; see decode()).

    `columns` (None: all) selects output columns by name from SCHEMA (SCHEMA_NO_HEADERS when
    include_headers is False); the batches hold them in the order given.  The key and value
    bytes of an unselected column are never copied, and header sections are not parsed unless
    "headers" is selected; only selected bytes count towards max_bytes and the 2^31-1 limit.
    Every entry is still validated as in a full decode (CRC, framing, record and header
    lengths), so bad input raises the same errors.  An unknown or repeated name, or none,
    raises ValueError.

    `views=True` makes the key and value columns `binary_view` (pyarrow >= 16) and copies no
    byte of a record stored uncompressed: its key and value are views of the `data` passed to
    decode(), up to 12 bytes inline and longer ones pointing into it.  So a batch keeps `data`
    alive and holds one buffer export of it while it or any array taken from it lives (a
    bytearray cannot be resized then).  Change `data` in place only once the batch is gone: its
    values longer than 12 bytes are read from `data`.  Memory with a file behind it is refused
    with ValueError before any view exists, whatever the Python type that hands it over (an mmap,
    a FileRecords, a pyarrow memory map, a numpy memmap, a memfd or shared memory, or any buffer
    over one): a cut of the file under a live batch would kill the process (SIGBUS) or turn its
    values into zeros.  What the memory is comes from the process's mappings (Linux's
    /proc/self/maps, through _mapguard.memory_kind); bytes, bytearray and numpy arrays that own
    their data need no lookup, and where the mappings cannot be read (macOS, Windows) only those
    are taken.
    Keys and values of compressed entries are copied out, as in the default mode; of keys and
    values, only those copies count towards max_bytes.

    Not for concurrent use: decode() runs without the GIL on the decoder's buffers, and a call
    while another runs (from another thread) raises ConcurrentUseError.  Use one per thread.
    """
    cdef State s
    cdef readonly str topic
    cdef readonly int partition
    cdef bytes _topic
    cdef readonly str source
    cdef object _schema
    cdef readonly Py_ssize_t trailing_bytes
    cdef readonly Py_ssize_t failed_entry
    cdef Guard guard

    @cython.embedsignature(False)  # written in the class docstring: Cython 3.3 misplaces `*`
    def __init__(self, str topic="", int partition=0, *, bint validate_crc=True,
                 bint include_headers=True, bint keep_control=False, start_offset=None,
                 end_offset=None, aborted=None, Py_ssize_t max_rows=65536,
                 Py_ssize_t max_bytes=16 << 20, str source="<buffer>", columns=None,
                 bint views=False):
        cdef const int64_t[:, ::1] mv
        cdef Py_ssize_t i
        if max_rows < 1 or max_bytes < 1 or max_bytes > (1 << 30):
            raise ValueError("max_rows must be >= 1 and max_bytes within 1..2**30")
        schema = selected_schema(SCHEMA if include_headers else SCHEMA_NO_HEADERS, columns)
        if views:
            if not hasattr(pa, "binary_view"):
                raise ValueError(f"views=True needs pyarrow >= 16 (binary_view), this is {pa.__version__}")
            for name in ("key", "value"):
                if name in schema.names:
                    schema = schema.set(schema.get_field_index(name), pa.field(name, pa.binary_view()))
        arr = np.ascontiguousarray(np.asarray([] if aborted is None else aborted, dtype=np.int64).reshape(-1, 3))
        mv = arr
        guard_enter(&self.guard, b"ArrowDecoder")
        try:
            self.topic = topic
            self._topic = topic.encode()
            self.partition = partition
            self.source = source
            self.s.validate_crc = validate_crc
            self._schema = schema
            self.s.include_headers = "headers" in schema.names
            self.s.want_key = "key" in schema.names
            self.s.want_value = "value" in schema.names
            self.s.views = views
            self.s.view_chunk_bits = VIEW_CHUNK_BITS
            self.s.keep_control = keep_control
            self.s.start_offset = INT64_MIN if start_offset is None else start_offset
            self.s.last_offset = INT64_MAX
            if end_offset is not None:
                if end_offset == INT64_MIN:     # an empty range
                    self.s.start_offset = INT64_MAX
                    self.s.last_offset = INT64_MIN
                else:
                    self.s.last_offset = <int64_t>end_offset - 1
            self.s.max_rows = max_rows
            self.s.max_bytes = max_bytes
            self.s.output_limit = INT32_MAX
            self.s.topic_size = len(self._topic) if "topic" in schema.names else 0
            self.s.resume_pos = -1
            abort_filter_free(&self.s.aborted)     # the read starts at start_offset (or its first batch)
            abort_filter_init(&self.s.aborted, self.s.start_offset)
            for i in range(mv.shape[0]):
                abort_filter_add(&self.s.aborted, mv[i, 0], mv[i, 1], mv[i, 2])
            abort_filter_ready(&self.s.aborted)
        finally:
            guard_leave(&self.guard)

    def __dealloc__(self):
        self._reset()
        abort_filter_free(&self.s.aborted)

    cdef void _reset(self) noexcept:
        varcol_free(&self.s.key)
        varcol_free(&self.s.value)
        varcol_free(&self.s.hkey)
        varcol_free(&self.s.hvalue)
        buf_free(&self.s.offset)
        buf_free(&self.s.timestamp)
        buf_free(&self.s.ts_nulls)
        buf_free(&self.s.ts_type)
        buf_free(&self.s.magic)
        buf_free(&self.s.producer_id)
        buf_free(&self.s.transactional)
        buf_free(&self.s.control)
        buf_free(&self.s.hdr_offsets)
        buf_free(&self.s.hdr_valid)
        self.s.rows = 0
        self.s.hdr_nulls = 0

    def _set_output_limit(self, Py_ssize_t limit):
        """Test hook: lower the hard limit on an output's variable-width bytes (2^31-1) so tests
        reach it without gigabytes of output."""
        if not 1 <= limit <= INT32_MAX:
            raise ValueError(f"limit must be within 1..2**31-1, got {limit}")
        self.s.output_limit = limit

    def _set_view_chunk_bits(self, int bits):
        """Test hook: views=True addresses the input in chunks of 2^bits bytes (2^30: int32
        offsets for any input); smaller ones let tests use many chunks on small inputs."""
        if not 1 <= bits <= VIEW_CHUNK_BITS:
            raise ValueError(f"bits must be within 1..{VIEW_CHUNK_BITS}, got {bits}")
        self.s.view_chunk_bits = bits

    @property
    def schema(self):
        """The schema of the batches decode() returns (the selected columns)."""
        return self._schema

    @property
    def crc_checked(self) -> int:
        """Number of CRCs verified so far (batches and legacy messages)."""
        return self.s.crc_checked

    @property
    def aborted_records(self) -> int:
        """Number of records of aborted transactions (`aborted`) passed over so far, within
        the offset range: what read_committed drops."""
        return self.s.aborted_records

    @property
    def entries(self) -> int:
        """Number of log entries (batches / top-level messages) walked so far."""
        return self.s.batches

    def decode(self, data, Py_ssize_t start=0, Py_ssize_t end=-1, Py_ssize_t base=0):
        """Decode entries of data[start:end] until the batch is full; return
        (RecordBatch, next position).  Next position == end (or the start of a partial trailing
        entry, see `trailing_bytes`) when done.  `base` is the file position of data[0];
        `data` is any C-contiguous buffer, read as raw bytes.

        A batch that reaches the 2^31-1 byte limit inside an entry ends there and the position
        returned is that entry's: the next call on this decoder started there (with the same
        data) goes on with the entry's next record.  So a call made progress when it moved the
        position or returned rows; a loop stops when neither happened."""
        cdef Py_buffer view
        guard_enter(&self.guard, b"ArrowDecoder")
        try:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            source = None
            if self.s.views:            # the bytes read are those of the export the batch keeps
                PyBuffer_Release(&view)
                source = pa.py_buffer(data)
                PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)
            try:
                if self.s.views:
                    refuse_file_memory(data, view.buf, view.len)
                if end < 0 or end > view.len:
                    end = view.len
                if start < 0 or start > end:
                    raise ValueError(f"start {start} outside 0..{end}")
                try:
                    result = self._decode(<const unsigned char*>view.buf, start, end, base, source)
                except KafkaCodecError as error:
                    # zeros read past a cut of a mapped segment look like corrupt data
                    check_read(data, self._entry_end(<const unsigned char*>view.buf, end),
                               error.position, error.offset, error)
                    raise
                check_read(data, min(end, self.s.pos + <Py_ssize_t>V2_HEADER_SIZE))
                return result
            finally:
                PyBuffer_Release(&view)
        finally:
            guard_leave(&self.guard)

    cdef Py_ssize_t _entry_end(self, const unsigned char* data, Py_ssize_t end) noexcept:
        """Where the entry a failed decode stopped in ends (as far as it was read)."""
        cdef Py_ssize_t at = self.s.pos
        cdef int32_t size
        if end - at < LOG_OVERHEAD:
            return end
        size = <int32_t>load_u32(data + at + SIZE_OFFSET)
        return min(end, at + LOG_OVERHEAD + size) if size >= 0 else min(end, at + <Py_ssize_t>V2_HEADER_SIZE)

    cdef object _decode(self, const unsigned char* data, Py_ssize_t start, Py_ssize_t end,
                        Py_ssize_t base, object source):
        cdef int status
        self._reset()
        if self.s.resume_pos != start:          # not where the last call stopped: start afresh
            self.s.resume_pos = -1
        self.s.data = data
        self.s.pos = start
        self.s.end = end
        self.s.base = base
        self.s.view_base = data + start
        self.s.view_span = end - start
        self.s.view_chunks = 0
        self.failed_entry = -1
        if (self._presize(end - start) < 0
                or (not self.s.views and (varcol_start(&self.s.key) < 0 or varcol_start(&self.s.value) < 0))
                or varcol_start(&self.s.hkey) < 0 or varcol_start(&self.s.hvalue) < 0
                or put_i32(&self.s.hdr_offsets, 0) < 0):
            raise MemoryError()
        # the walker's decompression policy: the Decompressor of the thread decoding
        decompressor = thread_decompressor()
        self.s.decompressor = <PyObject*>decompressor
        try:
            with nogil:
                status = run(&self.s)
        except KafkaCodecError as exc:
            self.failed_entry = self.s.pos
            self.s.resume_pos = -1
            raise self._located(exc) from None
        finally:
            kc_stream_fence()                   # the value copies' streaming stores
            # the rows are copied out: a chunk a big batch inflated into goes now (the
            # thread keeps one up to 8 MiB for the next call)
            release_chunk(&self.s)
            self.s.decompressor = NULL
        self.trailing_bytes = self.s.end - self.s.pos if status == S_END else 0
        bits = self.s.view_chunk_bits
        chunks = [source.slice(start + (k << bits), end - start - (k << bits))
                  for k in range(self.s.view_chunks)]
        return self._finish(chunks), self.s.pos

    cdef int _presize(self, Py_ssize_t size) noexcept:
        """Allocate once for what this range can hold (untouched capacity costs no memory):
        record values cannot outgrow the input unless it is compressed, when buffers grow."""
        cdef State* s = &self.s
        cdef Py_ssize_t rows = min(s.max_rows, size // 7 + 1)
        cdef Py_ssize_t data = min(size, s.max_bytes) + 16
        cdef Py_ssize_t slots = (16 if s.views else 4) * rows + 8
        if ((s.want_value and (buf_presize(&s.value.data, data) < 0 or buf_presize(&s.value.offsets, slots) < 0
                               or buf_presize(&s.value.valid, rows // 8 + 1) < 0))
                or (s.want_key and (buf_presize(&s.key.data, data // 4) < 0 or buf_presize(&s.key.offsets, slots) < 0
                                    or buf_presize(&s.key.valid, rows // 8 + 1) < 0))
                or buf_presize(&s.offset, 8 * rows) < 0 or buf_presize(&s.timestamp, 8 * rows) < 0
                or buf_presize(&s.producer_id, 8 * rows) < 0 or buf_presize(&s.ts_type, 4 * rows) < 0
                or buf_presize(&s.magic, rows) < 0 or buf_presize(&s.transactional, rows) < 0
                or buf_presize(&s.control, rows) < 0
                or (s.include_headers and (buf_presize(&s.hdr_offsets, 4 * rows + 8) < 0
                                           or buf_presize(&s.hdr_valid, rows // 8 + 1) < 0))):
            return -1
        return 0

    def _located(self, exc):
        """The error with the file name, the entry position and its offset."""
        entry = self.s.base + self.s.pos
        where = f"{self.source}: "
        if self.s.decompressing:
            where += f"in the decompressed data of the entry at byte {entry}: "
            position = entry
        else:
            position = exc.position if exc.position is not None else entry
        offset = exc.offset if exc.offset is not None else (
            self.s.entry_offset if self.s.entry_offset >= 0 else None)
        return exc.with_context(where, position=position, offset=offset)

    def _finish(self, list chunks):
        cdef Py_ssize_t n = self.s.rows
        names = self._schema.names
        columns = [self._column(name, n, chunks) for name in names]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    cdef object _column(self, str name, Py_ssize_t n, list chunks):
        """One selected output column of the n rows decoded (takes its buffers; key and value
        views use the input `chunks`)."""
        cdef Py_ssize_t ts_nulls, nulls
        cdef bytes topic = self._topic
        if name == "key":
            return viewcol_take(&self.s.key, chunks) if self.s.views else varcol_take(&self.s.key, pa.binary())
        if name == "value":
            return viewcol_take(&self.s.value, chunks) if self.s.views else varcol_take(&self.s.value, pa.binary())
        if name == "topic":
            # n * len(topic) <= output_limit < 2^31 (room_for): the int32 offsets cannot wrap
            return pa.Array.from_buffers(pa.string(), n, [None, int32_buffer(n + 1, 0, len(topic)),
                                                          repeated_buffer(topic, n)])
        if name == "partition":
            return pa.Array.from_buffers(pa.int32(), n, [None, int32_buffer(n, self.partition, 0)])
        if name == "offset":
            return pa.Array.from_buffers(pa.int64(), n, [None, take_buffer(&self.s.offset)])
        if name == "timestamp":
            ts_nulls = self.s.ts_nulls.len // 8
            ts_valid = None
            if ts_nulls:
                valid = np.ones(n, dtype=np.bool_)
                valid[np.frombuffer(take_buffer(&self.s.ts_nulls), dtype=np.int64, count=ts_nulls)] = False
                ts_valid = pa.py_buffer(np.packbits(valid, bitorder="little"))
            return pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                                         [ts_valid, take_buffer(&self.s.timestamp)], null_count=ts_nulls)
        if name == "timestampType":
            return pa.Array.from_buffers(pa.int32(), n, [None, take_buffer(&self.s.ts_type)])
        if name == "headers":
            hkey = varcol_take(&self.s.hkey, pa.string())
            hvalue = varcol_take(&self.s.hvalue, pa.binary())
            entries = pa.StructArray.from_arrays([hkey, hvalue], fields=list(HEADERS_TYPE.value_type))
            nulls = self.s.hdr_nulls
            valid = take_buffer(&self.s.hdr_valid) if nulls else None
            return pa.Array.from_buffers(HEADERS_TYPE, n, [valid, take_buffer(&self.s.hdr_offsets)],
                                         null_count=nulls, children=[entries])
        if name == "magic":
            return pa.Array.from_buffers(pa.int8(), n, [None, take_buffer(&self.s.magic)])
        if name == "producerId":
            return pa.Array.from_buffers(pa.int64(), n, [None, take_buffer(&self.s.producer_id)])
        if name == "isTransactional":
            return pa.Array.from_buffers(pa.bool_(), n, [None, take_buffer(&self.s.transactional)])
        if name == "isControl":
            return pa.Array.from_buffers(pa.bool_(), n, [None, take_buffer(&self.s.control)])
        raise AssertionError(name)


# --------------------------------------------------------------------------------------------
# Shallow scan: one row per complete entry, no record decode.

# --------------------------------------------------------------------------------------------
# Columnar encode: Arrow columns of one topic-partition -> v2 record batches.  The Arrow input
# is read in place through _columns.pxd: every row's offsets are checked before its bytes are
# read (pyarrow checks only an array's first and last offsets).

cdef object one_array(object arr, str name):
    """A pyarrow Array for an Array or a ChunkedArray (chunks concatenated: a copy unless one)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    if isinstance(arr, pa.Array):
        return arr
    raise TypeError(f"{name} must be a pyarrow Array or ChunkedArray, not {type(arr).__name__}")


cdef object binary_column(ArrowBinary* c, object arr, Py_ssize_t rows, str name):
    """c over rows of a binary / string / large_binary / large_string array; returns what keeps
    the memory it points into alive."""
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        wide = False
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        wide = True
    else:
        raise TypeError(f"{name} must be a binary or string Arrow array (or large_*), not {t}")
    return arr, arrow_binary_init(c, arr, wide, rows, name)


cdef int32_t row_bytes(const ArrowBinary* c, Py_ssize_t i, const unsigned char** p,
                       const char* name) except -2:
    """Length of row i (-1: null), *p at its bytes."""
    cdef int64_t size
    cdef int found = arrow_binary_row(c, i, p, &size)
    if found < 0:
        raise ValueError(f"{name.decode()} {i}: its Arrow offsets are out of order or past the "
                         f"data buffer")
    if found == 0:
        return -1
    if size > INT32_MAX:
        raise RecordTooLargeError(f"{name.decode()} {i} of {size} bytes exceeds Kafka's 2 GiB limit")
    return <int32_t>size


def encode_v2(key, value, timestamp_ms, headers=None, *, int codec=0, Py_ssize_t batch_bytes=16384,
              Py_ssize_t max_records=1 << 20, int64_t base_offset=0, int level=LEVEL_DEFAULT,
              offsets=None):
    """Encode rows into v2 batches: `key`, `value` pyarrow binary or string arrays (large_*,
    sliced and chunked ones too), `timestamp_ms` an int64 numpy array, `headers` None or a
    pyarrow list (or large_list) array of struct<key: string, value: binary> (either may be
    large_*).  A batch closes before the record that would take its records section past
    `batch_bytes` (every batch holds at least one record).  Offsets are dense from base_offset,
    or `offsets` (an int64 array, one per row, >= 0 and increasing; gaps allowed, as compaction
    leaves them: a batch's base offset is its first record's, its lastOffsetDelta its last
    record's delta, and a batch closes before an offset delta would pass 2^31-1).  As Kafka's
    MemoryRecordsBuilder, a timestamp below -1 (none) is refused (ValueError).  CreateTime, no
    producer.  Returns (bytes, number of batches).  Safe to call from several threads at once."""
    cdef Py_ssize_t n, i, batch_start, h, h0, h1, size, j, entry_count = 0, first = 0
    cdef ArrowBinary k, v, hk, hv
    cdef const int64_t[::1] ts = timestamp_ms
    cdef const uint8_t[::1] entry_valid = None
    cdef const unsigned char* list_offsets = NULL
    cdef const uint8_t* list_valid = NULL
    cdef bint wide_list = False
    cdef const unsigned char* kp
    cdef const unsigned char* vp
    cdef const unsigned char* hkp
    cdef const unsigned char* hvp
    cdef int32_t klen, vlen, hklen, hvlen
    cdef int64_t first_ts, max_ts, delta
    cdef Writer* w
    cdef Writer* hw
    cdef WriteBuffer out = WriteBuffer(), records = WriteBuffer(), hdrs = WriteBuffer()
    cdef Py_ssize_t batches = 0, start
    cdef const int64_t[::1] given_view = None
    cdef const int64_t* given = NULL          # the offsets given (NULL: dense from base_offset)
    cdef int64_t batch_base
    cdef BatchHeader bh
    cdef bytes packed
    cdef const unsigned char* section
    cdef Py_ssize_t section_size
    key = one_array(key, "key")
    value = one_array(value, "value")
    n = len(value)
    if headers is not None:
        headers = one_array(headers, "headers")
    if len(key) != n or ts.shape[0] != n or (headers is not None and len(headers) != n):
        raise ValueError("key, value, timestamp_ms and headers must have the same length")
    if not CODEC_NONE <= codec <= CODEC_ZSTD:
        raise UnsupportedCompressionError(f"unknown compression type id {codec}")
    if not 1 <= max_records <= INT32_MAX:
        raise ValueError(f"max_records must be within 1..2**31-1, got {max_records}")
    if offsets is None:
        if base_offset < 0 or (n and base_offset > INT64_MAX - (n - 1)):
            raise ValueError(f"base_offset {base_offset}: {n} records would not fit below offset 2^63-1")
    else:
        if base_offset != 0:
            raise ValueError("give base_offset or offsets, not both")
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) != n:
            raise ValueError(f"offsets must be a one-dimensional array of the {n} rows' offsets")
        if n:
            # Kafka's MemoryRecordsBuilder: offsets increase monotonically (and a log holds none below 0)
            back = np.flatnonzero(offsets[1:] <= offsets[:-1])
            if offsets[0] < 0:
                raise ValueError(f"offsets 0: {offsets[0]} is negative")
            if len(back):
                i = int(back[0]) + 1
                raise ValueError(f"offsets {i}: {offsets[i]} does not follow {offsets[i - 1]} (offsets must increase)")
            given_view = offsets
            given = &given_view[0]
    if n:
        low = np.flatnonzero(np.asarray(ts) < -1)
        if len(low):
            # Kafka's MemoryRecordsBuilder: no negative timestamp but -1 (NO_TIMESTAMP)
            raise ValueError(f"timestamp_ms {int(low[0])}: {ts[low[0]]} is negative; Kafka accepts no "
                             "negative timestamp but -1 (none)")
    keep = [binary_column(&k, key, n, "key"), binary_column(&v, value, n, "value")]
    has_headers = headers is not None and headers.null_count < n
    if has_headers:
        t = headers.type
        if (not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type)
                or t.value_type.num_fields != 2):
            raise TypeError(f"headers must be a list of struct<key, value>, not {t}")
        wide_list = pa.types.is_large_list(t)
        first = headers.offset
        bufs = headers.buffers()
        if bufs[1] is None or bufs[1].size < (first + n + 1) * (8 if wide_list else 4):
            raise ValueError(f"headers: the Arrow list offsets buffer is too short for {n} rows")
        list_offsets = <const unsigned char*><uintptr_t>bufs[1].address
        if headers.null_count:
            if bufs[0] is None or bufs[0].size < (first + n + 7) // 8:
                raise ValueError(f"headers: the Arrow validity bitmap is too short for {n} rows")
            list_valid = <const uint8_t*><uintptr_t>bufs[0].address
        entries = headers.values             # what the list offsets index (the list's slice aside)
        entry_count = len(entries)
        if entries.null_count:
            entry_valid = entries.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
        keep += [bufs, entries, entry_valid,
                 binary_column(&hk, entries.field(0), entry_count, "header key"),
                 binary_column(&hv, entries.field(1), entry_count, "header value")]
    w = &records.w
    hw = &hdrs.w
    memset(&bh, 0, sizeof(BatchHeader))
    bh.partition_leader_epoch = -1
    bh.producer_id = -1
    bh.producer_epoch = -1
    bh.base_sequence = -1
    bh.attributes = codec
    i = 0
    while i < n:
        batch_start = i
        batch_base = given[i] if given != NULL else base_offset + i
        w.length = 0
        first_ts = ts[i]
        max_ts = -1
        while i < n and i - batch_start < max_records:
            # a v2 record's offset delta is an int32: a larger gap starts a new batch
            delta = given[i] - batch_base if given != NULL else i - batch_start
            if delta > INT32_MAX:
                break
            klen = row_bytes(&k, i, &kp, b"key")
            vlen = row_bytes(&v, i, &vp, b"value")
            h0 = h1 = 0
            j = first + i
            if has_headers and (list_valid == NULL or (list_valid[j >> 3] >> (j & 7)) & 1):
                if wide_list:
                    h0 = (<const int64_t*>list_offsets)[j]
                    h1 = (<const int64_t*>list_offsets)[j + 1]
                else:
                    h0 = (<const int32_t*>list_offsets)[j]
                    h1 = (<const int32_t*>list_offsets)[j + 1]
                if h0 < 0 or h1 < h0 or h1 > entry_count:
                    raise ValueError(f"headers {i}: its Arrow list offsets are out of order or past "
                                     f"the {entry_count} header entries")
            hw.length = 0
            for h in range(h0, h1):
                if entry_valid is not None and not entry_valid[h]:
                    raise ValueError(f"row {i}: a header is null")
                hklen = row_bytes(&hk, h, &hkp, b"header key")
                hvlen = row_bytes(&hv, h, &hvp, b"header value")
                if hklen < 0:
                    raise ValueError(f"row {i}: a header key is null (Kafka header keys are strings)")
                put_varint(hw, hklen)
                put_bytes(hw, hkp, hklen)
                put_varint(hw, hvlen)
                if hvlen > 0:
                    put_bytes(hw, hvp, hvlen)
            if (<int64_t>(klen if klen > 0 else 0) + (vlen if vlen > 0 else 0) + hw.length
                    > <int64_t>INT32_MAX - 32 or h1 - h0 > INT32_MAX):
                raise RecordTooLargeError(f"row {i} exceeds Kafka's 2 GiB record limit")
            size = v2_record_body_size(<int32_t>delta, wrap_sub(ts[i], first_ts),
                                       klen, vlen, hw.length, <int32_t>(h1 - h0))
            if i > batch_start and w.length + size + 5 > batch_bytes:
                break
            write_v2_record(w, <int32_t>delta, wrap_sub(ts[i], first_ts),
                            kp, klen, vp, vlen, hw.buf, hw.length, <int32_t>(h1 - h0))
            if ts[i] > max_ts:
                max_ts = ts[i]
            i += 1
        if codec:
            packed = compress(codec, 2, w.buf, w.length, level)
            section = packed
            section_size = len(packed)
        else:
            section = w.buf
            section_size = w.length
        if section_size > INT32_MAX - V2_HEADER_SIZE:
            raise RecordTooLargeError("a batch exceeds Kafka's 2 GiB limit", offset=batch_base)
        start = reserve(&out.w, V2_HEADER_SIZE)
        put_bytes(&out.w, section, section_size)
        bh.base_offset = batch_base
        bh.last_offset_delta = <int32_t>((given[i - 1] - batch_base) if given != NULL else i - 1 - batch_start)
        bh.base_timestamp = first_ts
        bh.max_timestamp = max_ts
        bh.records_count = <int32_t>(i - batch_start)
        write_v2_batch_header(out.w.buf + start, V2_HEADER_SIZE + section_size, &bh)
        batches += 1
    return out.getvalue(), batches

