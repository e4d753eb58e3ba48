# Layout constants shared by every magic, the parsed form of an entry header, and the shallow
# walk over a record set (spec record-formats.md §1, §5, §9).

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from kafkacodec._cursor cimport (Cursor, need, get_int8, get_int16, get_int32, get_int64,
                                 get_uint32, load_u32, load_u16, raise_corrupt)
from kafkacodec._crc cimport kc_crc32c, kc_crc32

# cpdef: the Python layers read these from kafkacodec._format too (one definition).
cpdef enum:
    # Log entry framing (all magics): [offset int64][size int32] then the entry.
    LOG_OVERHEAD = 12
    SIZE_OFFSET = 8
    MAGIC_OFFSET = 16              # magic sits at byte 16 for every format
    HEADER_SIZE_UP_TO_MAGIC = 17
    # v0/v1 message (offsets within the entry)
    LEGACY_CRC_OFFSET = 12
    LEGACY_ATTRIBUTES_OFFSET = 17
    LEGACY_TIMESTAMP_OFFSET = 18   # v1 only
    V0_RECORD_OVERHEAD = 14        # crc + magic + attributes + key length + value length
    V1_RECORD_OVERHEAD = 22        # + timestamp
    # v2 batch header (offsets within the batch)
    V2_PARTITION_LEADER_EPOCH_OFFSET = 12
    V2_CRC_OFFSET = 17
    V2_ATTRIBUTES_OFFSET = 21      # CRC-32C covers [21, end)
    V2_LAST_OFFSET_DELTA_OFFSET = 23
    V2_BASE_TIMESTAMP_OFFSET = 27
    V2_MAX_TIMESTAMP_OFFSET = 35
    V2_PRODUCER_ID_OFFSET = 43
    V2_PRODUCER_EPOCH_OFFSET = 51
    V2_BASE_SEQUENCE_OFFSET = 53
    V2_RECORDS_COUNT_OFFSET = 57
    V2_HEADER_SIZE = 61            # RECORD_BATCH_OVERHEAD
    V2_MAX_RECORD_OVERHEAD = 21    # 5 length + 1 attributes + 10 ts delta + 5 offset delta
    # attributes
    COMPRESSION_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08     # 0 CreateTime, 1 LogAppendTime
    TRANSACTIONAL_FLAG = 0x10      # v2
    CONTROL_FLAG = 0x20            # v2
    DELETE_HORIZON_FLAG = 0x40     # v2, KIP-534
    # codec ids (attributes & COMPRESSION_MASK; Kafka's CompressionType; 5-7 are none)
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4                 # v2 only
    # sentinels
    NO_TIMESTAMP = -1
    NO_PRODUCER_ID = -1
    NO_PRODUCER_EPOCH = -1
    NO_SEQUENCE = -1
    NO_PARTITION_LEADER_EPOCH = -1
    TIMESTAMP_NONE = -1            # TimestampType ids
    TIMESTAMP_CREATE = 0
    TIMESTAMP_LOG_APPEND = 1

# --- offset, timestamp and sequence arithmetic: Java's, on every reader's hostile input ------
# Kafka computes base + delta in Java longs (ints for sequences), which wrap; signed overflow
# is undefined in C, so every reader adds and subtracts offsets and timestamps through these.
cdef inline int64_t wrap_add(int64_t a, int64_t b) noexcept nogil:
    return <int64_t>(<uint64_t>a + <uint64_t>b)

cdef inline int64_t wrap_sub(int64_t a, int64_t b) noexcept nogil:
    return <int64_t>(<uint64_t>a - <uint64_t>b)

cdef inline int32_t increment_sequence(int32_t sequence, int32_t increment) noexcept nogil:
    """DefaultRecordBatch.incrementSequence: past 2^31-1 a producer sequence restarts at 0."""
    cdef int32_t limit = <int32_t>(<uint32_t>0x7FFFFFFF - <uint32_t>increment)
    if sequence > limit:
        return <int32_t>(<uint32_t>increment - (<uint32_t>0x7FFFFFFF - <uint32_t>sequence) - 1)
    return <int32_t>(<uint32_t>sequence + <uint32_t>increment)

cdef struct BatchHeader:
    Py_ssize_t position          # where the entry starts in the caller's buffer
    Py_ssize_t size              # whole entry, LOG_OVERHEAD included
    int64_t base_offset          # v2 BaseOffset; legacy: the entry offset (its last offset)
    int64_t last_offset
    int8_t magic
    uint32_t crc                 # as stored
    int16_t attributes           # v2: low byte of the int16; legacy: the attributes byte
    int8_t compression
    int8_t timestamp_type        # -1 (v0), 0 CreateTime, 1 LogAppendTime
    int32_t partition_leader_epoch
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp        # v2 MaxTimestamp; v1 message timestamp; v0 -1
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t records_count        # v2 RecordsCount; uncompressed legacy 1; compressed legacy -1

# --- framing: ByteBufferLogInputStream (in memory, §9.1) / FileLogInputStream (files, §9.2) --
cdef enum:
    FRAME_END = 0                  # no complete entry left (partial tail or end)
    FRAME_OK = 1
    FRAME_BAD_SIZE = -1
    FRAME_BAD_MAGIC = -2
    FRAME_SHORT_V2 = -3
    FRAME_SHORT_V1 = -4
    FILE_MIN_LEFT = 18             # FileLogInputStream stops at position >= end - 17

cdef inline int frame_entry(const unsigned char* p, Py_ssize_t left, bint file_rules,
                            Py_ssize_t* entry_size) noexcept nogil:
    """Frame the entry at p with `left` bytes left; never reads past them."""
    cdef int32_t size
    cdef int8_t magic
    if left < (FILE_MIN_LEFT if file_rules else LOG_OVERHEAD):
        return FRAME_END
    size = <int32_t>load_u32(p + SIZE_OFFSET)
    if size < V0_RECORD_OVERHEAD:
        return FRAME_BAD_SIZE
    if left < HEADER_SIZE_UP_TO_MAGIC:
        return FRAME_END
    magic = <int8_t>p[MAGIC_OFFSET]
    if not file_rules and (magic < 0 or magic > 2):   # the file reader has no range check
        return FRAME_BAD_MAGIC
    if left - LOG_OVERHEAD < size:
        return FRAME_END
    if magic >= 2 and size < V2_HEADER_SIZE - LOG_OVERHEAD:
        return FRAME_SHORT_V2
    if magic == 1 and size < V1_RECORD_OVERHEAD:
        return FRAME_SHORT_V1
    entry_size[0] = LOG_OVERHEAD + <Py_ssize_t>size
    return FRAME_OK


# Raises the CorruptRecordError for a negative frame_entry() code (in _format.pyx).
cdef int raise_frame_error(int code, const unsigned char* p, Py_ssize_t position) except -1 nogil

cdef inline int next_entry(Cursor* cur, BatchHeader* h) except -1 nogil:
    """Frame the next entry with the in-memory rules and parse its header into `h`.

    Returns 1 and advances past the entry, or 0 at the end (fewer than 12 bytes left, or a
    trailing partial entry: the cursor then stays at its start, so `remaining()` is the
    partial tail).  A corrupt entry raises CorruptRecordError."""
    cdef Py_ssize_t size
    cdef int code = frame_entry(cur.data + cur.pos, cur.end - cur.pos, False, &size)
    if code == FRAME_END:
        return 0
    if code < 0:
        return raise_frame_error(code, cur.data + cur.pos, cur.base + cur.pos)
    parse_entry_header(cur.data + cur.pos, size, cur.base + cur.pos, h)
    cur.pos += size
    return 1

cdef inline void parse_entry_header(const unsigned char* p, Py_ssize_t size, Py_ssize_t position,
                                    BatchHeader* h) noexcept nogil:
    """Fill `h` from a complete entry of `size` bytes (size checked by the caller)."""
    cdef Cursor c
    c.data = p
    c.pos = 0
    c.end = size
    c.base = position
    h.position = position
    h.size = size
    h.base_offset = get_int64(&c)
    get_int32(&c)
    h.magic = <int8_t>p[MAGIC_OFFSET]
    if h.magic >= 2:
        if size < V2_HEADER_SIZE:
            h.records_count = -1
            return
        h.partition_leader_epoch = get_int32(&c)
        c.pos = V2_CRC_OFFSET
        h.crc = get_uint32(&c)
        h.attributes = get_int16(&c) & 0xFF          # Kafka keeps the low byte only
        h.last_offset_delta = get_int32(&c)
        h.base_timestamp = get_int64(&c)
        h.max_timestamp = get_int64(&c)
        h.producer_id = get_int64(&c)
        h.producer_epoch = get_int16(&c)
        h.base_sequence = get_int32(&c)
        h.records_count = get_int32(&c)
        h.last_offset = wrap_add(h.base_offset, h.last_offset_delta)
        h.compression = h.attributes & COMPRESSION_MASK
        h.timestamp_type = TIMESTAMP_LOG_APPEND if h.attributes & TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE
    else:
        h.crc = load_u32(p + LEGACY_CRC_OFFSET)
        h.attributes = <uint8_t>p[LEGACY_ATTRIBUTES_OFFSET]
        h.compression = h.attributes & COMPRESSION_MASK
        h.partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
        h.last_offset = h.base_offset
        h.last_offset_delta = 0
        h.producer_id = NO_PRODUCER_ID
        h.producer_epoch = NO_PRODUCER_EPOCH
        h.base_sequence = NO_SEQUENCE
        h.records_count = 1 if h.compression == CODEC_NONE else -1
        if h.magic == 1 and size >= LOG_OVERHEAD + V1_RECORD_OVERHEAD:
            c.pos = LEGACY_TIMESTAMP_OFFSET
            h.max_timestamp = get_int64(&c)
            h.timestamp_type = TIMESTAMP_LOG_APPEND if h.attributes & TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE
        else:
            h.max_timestamp = NO_TIMESTAMP
            h.timestamp_type = TIMESTAMP_NONE
        h.base_timestamp = h.max_timestamp

cdef inline uint32_t compute_crc(const unsigned char* entry, const BatchHeader* h) noexcept nogil:
    """The checksum the entry should carry: CRC-32C of [21, end) for v2, CRC-32 of [16, end)."""
    if h.magic >= 2:
        return kc_crc32c(0, entry + V2_ATTRIBUTES_OFFSET, h.size - V2_ATTRIBUTES_OFFSET)
    return kc_crc32(0, entry + MAGIC_OFFSET, h.size - MAGIC_OFFSET)

cdef inline bint crc_is_valid(const unsigned char* entry, const BatchHeader* h) noexcept nogil:
    # Kafka: v2 needs >= 61 bytes, legacy a message of >= 14 bytes, and a matching checksum.
    if h.magic >= 2 and h.size < V2_HEADER_SIZE:
        return False
    return compute_crc(entry, h) == h.crc
