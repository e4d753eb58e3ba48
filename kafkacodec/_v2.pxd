# Record batch v2 primitives (spec record-formats.md §5-7): parse one record, write one
# record, write a batch header with its CRC-32C, read control records.  All C level; the
# reading and building classes, down-conversion, columnar decode and mirroring use them.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from kafkacodec._cursor cimport (Cursor, need, take, get_int8, get_int16, get_int32,
                                 read_varint, read_varlong, raise_corrupt, load_u16, load_u32)
from kafkacodec._writer cimport (Writer, ensure, reserve, store_u16, store_u32, store_u64,
                                 store_varint, store_varlong, varint_size, varlong_size)
from kafkacodec._format cimport (BatchHeader, V2_HEADER_SIZE, V2_ATTRIBUTES_OFFSET,
                                 V2_CRC_OFFSET, TIMESTAMP_LOG_APPEND, LOG_OVERHEAD, SIZE_OFFSET,
                                 MAGIC_OFFSET, V2_PARTITION_LEADER_EPOCH_OFFSET,
                                 V2_LAST_OFFSET_DELTA_OFFSET, V2_BASE_TIMESTAMP_OFFSET,
                                 V2_MAX_TIMESTAMP_OFFSET, V2_PRODUCER_ID_OFFSET,
                                 V2_PRODUCER_EPOCH_OFFSET, V2_BASE_SEQUENCE_OFFSET,
                                 V2_RECORDS_COUNT_OFFSET, wrap_add)
from kafkacodec._crc cimport kc_crc32c

cdef struct V2Record:
    int8_t attributes                # unused by Kafka, kept as read
    int64_t timestamp_delta
    int32_t offset_delta
    const unsigned char* key         # NULL when key_length < 0 (null key)
    int32_t key_length               # -1 = null
    const unsigned char* value
    int32_t value_length             # -1 = null (tombstone)
    const unsigned char* headers     # the raw header section, right after HeaderCount
    Py_ssize_t headers_size
    int32_t header_count

cdef inline bint small_varint(const unsigned char** at, const unsigned char* end,
                              int32_t* out) noexcept nogil:
    # A zig-zag varint of one or two bytes inside [*at, end) (lengths below 8 KiB, deltas
    # below 8,192): decoded, *at advanced.  False for anything else.
    cdef const unsigned char* p = at[0]
    cdef uint32_t raw
    if p < end and p[0] < 0x80:
        raw = p[0]
        at[0] = p + 1
    elif end - p >= 2 and p[1] < 0x80:
        raw = (p[0] & 0x7F) | (<uint32_t>p[1] << 7)
        at[0] = p + 2
    else:
        return False
    out[0] = <int32_t>((raw >> 1) ^ -(raw & 1))
    return True

cdef inline bint small_blob(const unsigned char** at, const unsigned char* end,
                            const unsigned char** data, int32_t* length) noexcept nogil:
    # A small_varint length (any negative one: null, as -1) and that many bytes inside
    # [*at, end): *data points at them, *at is advanced.  False for anything else.
    if not small_varint(at, end, length):
        return False
    if length[0] < 0:
        data[0] = NULL
        length[0] = -1
    elif length[0] > end - at[0]:
        return False
    else:
        data[0] = at[0]
        at[0] += length[0]
    return True

cdef inline bint scan_v2_record(Cursor* cur, V2Record* rec) noexcept nogil:
    """read_v2_record without error paths, for the common record: every varint of one or two
    bytes.  Parses the record at the cursor and advances past it; returns False, the cursor
    unmoved, for any other record (well-formed or not), which read_v2_record_checked reads or
    rejects.  It accepts exactly what read_v2_record_checked accepts with those varints
    (tests/test_records.py checks both against each other)."""
    cdef const unsigned char* p = cur.data + cur.pos
    cdef const unsigned char* end = cur.data + cur.end
    cdef const unsigned char* header_part
    cdef int32_t length, timestamp_delta, count, header_part_length, i
    if not small_varint(&p, end, &length) or length < 1 or length > end - p:
        return False
    end = p + length                 # the body: nothing may be read past it
    rec.attributes = <int8_t>p[0]
    p += 1
    if (not small_varint(&p, end, &timestamp_delta) or not small_varint(&p, end, &rec.offset_delta)
            or not small_blob(&p, end, &rec.key, &rec.key_length)
            or not small_blob(&p, end, &rec.value, &rec.value_length)):
        return False
    rec.timestamp_delta = timestamp_delta
    if not small_varint(&p, end, &count) or count < 0 or count > end - p:
        return False
    rec.header_count = count
    rec.headers = p
    for i in range(count):
        # a header key may be empty, never null; its value may be null
        if (not small_blob(&p, end, &header_part, &header_part_length) or header_part_length < 0
                or not small_blob(&p, end, &header_part, &header_part_length)):
            return False
    rec.headers_size = p - rec.headers
    if p != end:                     # bytes left over after the last header
        return False
    cur.pos = p - cur.data
    return True

cdef inline bint scan_v2_at(const unsigned char** at, const unsigned char* end,
                            V2Record* rec) noexcept nogil:
    """scan_v2_record() of the record at *at, the records ending at `end`: *at advanced past
    it, or False (*at unmoved).  For a loop that keeps its position in a local (inlined,
    the cursor here is folded away)."""
    cdef Cursor cur
    cur.data = at[0]
    cur.pos = 0
    cur.end = end - at[0]
    cur.base = 0
    if not scan_v2_record(&cur, rec):
        return False
    at[0] += cur.pos
    return True

cdef inline int read_v2_record(Cursor* cur, V2Record* rec) except -1 nogil:
    """Parse the record at the cursor and advance past it (DefaultRecord.readFrom rules).

    The body must hold exactly `Length` bytes: any underflow or leftover raises.  The common
    record takes scan_v2_record's short way; any other is read (or rejected) step by step."""
    if scan_v2_record(cur, rec):
        return 0
    return read_v2_record_checked(cur, rec)

cdef inline int read_v2_record_checked(Cursor* cur, V2Record* rec) except -1 nogil:
    """read_v2_record, every field read with its own checks (and errors)."""
    cdef int32_t length, key_length, value_length
    cdef Py_ssize_t body_end, saved_end = cur.end
    read_varint(cur, &length, b"record length")
    if length < 0:
        raise_corrupt(cur, b"record length (negative)")
    need(cur, length, b"record body")
    body_end = cur.pos + length
    cur.end = body_end               # nothing in the body may read past its declared length
    need(cur, 1, b"record attributes")
    rec.attributes = get_int8(cur)
    read_varlong(cur, &rec.timestamp_delta, b"record timestamp delta")
    read_varint(cur, &rec.offset_delta, b"record offset delta")
    read_varint(cur, &key_length, b"record key length")
    if key_length < 0:               # any negative length reads as null
        rec.key = NULL
        rec.key_length = -1
    else:
        rec.key = take(cur, key_length, b"record key")
        rec.key_length = key_length
    read_varint(cur, &value_length, b"record value length")
    if value_length < 0:
        rec.value = NULL
        rec.value_length = -1
    else:
        rec.value = take(cur, value_length, b"record value")
        rec.value_length = value_length
    read_varint(cur, &rec.header_count, b"record header count")
    if rec.header_count < 0 or rec.header_count > cur.end - cur.pos:
        raise_corrupt(cur, b"record header count")
    rec.headers = cur.data + cur.pos
    skip_v2_headers(cur, rec.header_count)
    rec.headers_size = (cur.data + cur.pos) - rec.headers
    if cur.pos != body_end:
        raise_corrupt(cur, b"record (bytes left over after its last header)")
    cur.end = saved_end
    return 0

cdef inline int skip_v2_headers(Cursor* cur, int32_t count) except -1 nogil:
    cdef int32_t i, key_length, value_length
    for i in range(count):
        read_varint(cur, &key_length, b"header key length")
        if key_length < 0:
            raise_corrupt(cur, b"header key length (negative)")
        take(cur, key_length, b"header key")
        read_varint(cur, &value_length, b"header value length")
        if value_length >= 0:
            take(cur, value_length, b"header value")
    return 0

cdef inline int read_v2_header(Cursor* cur, const unsigned char** key, int32_t* key_length,
                               const unsigned char** value, int32_t* value_length) except -1 nogil:
    """One header from a section already validated by read_v2_record; value NULL when null."""
    read_varint(cur, key_length, b"header key length")
    key[0] = take(cur, key_length[0], b"header key")
    read_varint(cur, value_length, b"header value length")
    if value_length[0] < 0:
        value[0] = NULL
        value_length[0] = -1
    else:
        value[0] = take(cur, value_length[0], b"header value")
    return 0

cdef inline int64_t record_timestamp(const BatchHeader* h, const V2Record* rec) noexcept nogil:
    # LogAppendTime: every record carries the batch MaxTimestamp (deltas are ignored).
    if h.timestamp_type == TIMESTAMP_LOG_APPEND:
        return h.max_timestamp
    return wrap_add(h.base_timestamp, rec.timestamp_delta)

cdef inline Py_ssize_t v2_record_body_size(int32_t offset_delta, int64_t timestamp_delta,
                                           int32_t key_length, int32_t value_length,
                                           Py_ssize_t headers_size, int32_t header_count) noexcept nogil:
    """Bytes after the Length varint (key/value length -1 = null)."""
    return (1 + varlong_size(timestamp_delta) + varint_size(offset_delta)
            + varint_size(key_length) + (key_length if key_length > 0 else 0)
            + varint_size(value_length) + (value_length if value_length > 0 else 0)
            + varint_size(header_count) + headers_size)

cdef inline Py_ssize_t write_v2_record(Writer* w, int32_t offset_delta, int64_t timestamp_delta,
                                       const unsigned char* key, int32_t key_length,
                                       const unsigned char* value, int32_t value_length,
                                       const unsigned char* headers, Py_ssize_t headers_size,
                                       int32_t header_count) except -1:
    """Append one record; `headers` is an encoded header section (as V2Record.headers holds).
    Returns the record's size in bytes."""
    cdef Py_ssize_t body = v2_record_body_size(offset_delta, timestamp_delta, key_length,
                                                value_length, headers_size, header_count)
    cdef Py_ssize_t total = varint_size(<int32_t>body) + body
    cdef unsigned char* p
    ensure(w, total)
    p = w.buf + w.length
    p = store_varint(p, <int32_t>body)
    p[0] = 0                                    # record attributes: unused, written as 0
    p = store_varlong(p + 1, timestamp_delta)
    p = store_varint(p, offset_delta)
    p = store_varint(p, key_length)
    if key_length > 0:
        memcpy(p, key, key_length)
        p += key_length
    p = store_varint(p, value_length)
    if value_length > 0:
        memcpy(p, value, value_length)
        p += value_length
    p = store_varint(p, header_count)
    if headers_size > 0:
        memcpy(p, headers, headers_size)
    w.length += total
    return total

cdef inline void write_v2_batch_header(unsigned char* batch, Py_ssize_t size,
                                       const BatchHeader* h) noexcept nogil:
    """Fill the 61-byte header of a complete batch of `size` bytes (records already behind
    it) from h, then its CRC-32C over [21, size).  h.attributes must include the codec."""
    store_u64(batch, <uint64_t>h.base_offset)
    store_u32(batch + SIZE_OFFSET, <uint32_t>(size - LOG_OVERHEAD))
    store_u32(batch + V2_PARTITION_LEADER_EPOCH_OFFSET, <uint32_t>h.partition_leader_epoch)
    batch[MAGIC_OFFSET] = 2
    store_u16(batch + V2_ATTRIBUTES_OFFSET, <uint16_t>h.attributes)
    store_u32(batch + V2_LAST_OFFSET_DELTA_OFFSET, <uint32_t>h.last_offset_delta)
    store_u64(batch + V2_BASE_TIMESTAMP_OFFSET, <uint64_t>h.base_timestamp)
    store_u64(batch + V2_MAX_TIMESTAMP_OFFSET, <uint64_t>h.max_timestamp)
    store_u64(batch + V2_PRODUCER_ID_OFFSET, <uint64_t>h.producer_id)
    store_u16(batch + V2_PRODUCER_EPOCH_OFFSET, <uint16_t>h.producer_epoch)
    store_u32(batch + V2_BASE_SEQUENCE_OFFSET, <uint32_t>h.base_sequence)
    store_u32(batch + V2_RECORDS_COUNT_OFFSET, <uint32_t>h.records_count)
    store_u32(batch + V2_CRC_OFFSET,
              kc_crc32c(0, batch + V2_ATTRIBUTES_OFFSET, size - V2_ATTRIBUTES_OFFSET))

# --- control records (spec §7) ------------------------------------------------------------
cdef inline int read_control_type(const V2Record* rec, Py_ssize_t position) except -2 nogil:
    """The control type id from a control record's key: int16 version (>= 0) + int16 type."""
    cdef Cursor c
    if rec.key == NULL or rec.key_length < 4:
        c.data = rec.key; c.pos = 0; c.end = 0; c.base = position
        raise_corrupt(&c, b"control record key (needs 4 bytes: version, type)")
    if <int16_t>load_u16(rec.key) < 0:
        c.data = rec.key; c.pos = 0; c.end = 0; c.base = position
        raise_corrupt(&c, b"control record key version (negative)")
    return <int16_t>load_u16(rec.key + 2)

cdef inline int32_t read_end_txn_coordinator_epoch(const V2Record* rec,
                                                   Py_ssize_t position) except? -1 nogil:
    """The coordinator epoch of an ABORT/COMMIT marker value: int16 version + int32 epoch."""
    cdef Cursor c
    if rec.value == NULL or rec.value_length < 6 or <int16_t>load_u16(rec.value) < 0:
        c.data = rec.value; c.pos = 0; c.end = 0; c.base = position
        raise_corrupt(&c, b"end transaction marker value (needs version >= 0 and an int32 epoch)")
    return <int32_t>load_u32(rec.value + 2)
