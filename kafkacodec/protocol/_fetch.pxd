# The FetchResponse walk (versions 4-16, flexible from 12), shared by decode_fetch_response and
# the ring's record iterator: inline readers for the response start, a topic's start, one
# partition header and one aborted transaction.  Nothing is allocated; every array count is
# checked against the bytes left (count * smallest element <= remaining) before it is walked.

from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from kafkacodec._cursor cimport Cursor, need, take, get_int16, get_int32, get_int64
from kafkacodec.protocol._wire cimport (read_array_length, read_bytes_length, read_length,
                                        skip_tagged_fields, read_response_header)

cdef enum:
    FETCH_MIN_VERSION = 4
    FETCH_MAX_VERSION = 16
    FETCH_TOPIC_IDS = 13          # topics named by a 16-byte id instead of a string

cdef struct FetchPartitionHeader:
    int32_t partition_index
    int16_t error_code
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset      # -1 before version 5
    Py_ssize_t aborted_count      # -1 when null
    Py_ssize_t aborted_pos        # cursor position of the first aborted transaction
    int32_t preferred_read_replica
    Py_ssize_t records_pos        # cursor position of the records (-1 when null)
    Py_ssize_t records_size       # -1 when null

# --- the smallest wire size of each array element (the count check's divisor) ---------------
cdef inline Py_ssize_t topic_min_size(int version, bint flexible) noexcept nogil:
    # name (int16 / compact length) or topic id, partition count, tagged fields
    if version >= FETCH_TOPIC_IDS:
        return 16 + 1 + 1
    return 1 + 1 + 1 if flexible else 2 + 4

cdef inline Py_ssize_t partition_min_size(int version, bint flexible) noexcept nogil:
    # index, error code, high watermark, last stable offset, [log start offset], aborted
    # transactions (null), [preferred read replica], records (null), [tagged fields]
    cdef Py_ssize_t n = 4 + 2 + 8 + 8
    if version >= 5:
        n += 8
    if version >= 11:
        n += 4
    return n + (1 + 1 + 1 if flexible else 4 + 4)

cdef inline Py_ssize_t aborted_min_size(bint flexible) noexcept nogil:
    return 16 + 1 if flexible else 16          # producer id, first offset, [tagged fields]

# --- readers --------------------------------------------------------------------------------
cdef inline Py_ssize_t read_fetch_start(Cursor* cur, int version, bint flexible, bint header,
                                        int32_t* correlation_id, int32_t* throttle_time_ms,
                                        int16_t* error_code, int32_t* session_id) except -1:
    """The response header (when `header`) and the fields before the topics; returns the
    topic count (0 for a null array)."""
    cdef Py_ssize_t n
    correlation_id[0] = read_response_header(cur, flexible) if header else 0
    need(cur, 4, b"fetch response throttle time")
    throttle_time_ms[0] = get_int32(cur)
    error_code[0] = 0
    session_id[0] = 0
    if version >= 7:
        need(cur, 6, b"fetch response error code and session id")
        error_code[0] = get_int16(cur)
        session_id[0] = get_int32(cur)
    n = read_array_length(cur, flexible, False, topic_min_size(version, flexible),
                          b"fetch response topics")
    return n if n > 0 else 0

cdef inline Py_ssize_t read_fetch_topic(Cursor* cur, int version, bint flexible,
                                        const unsigned char** name,
                                        Py_ssize_t* name_length) except -1:
    """A topic's name (pointer and length, not validated as UTF-8) or, from version 13, its
    16-byte id (name_length 16); returns the partition count."""
    cdef Py_ssize_t n
    if version >= FETCH_TOPIC_IDS:
        name_length[0] = 16
        name[0] = take(cur, 16, b"fetch response topic id")
    else:
        name_length[0] = read_length(cur, flexible, False, 2, b"fetch response topic name")
        name[0] = take(cur, name_length[0], b"fetch response topic name")
    n = read_array_length(cur, flexible, False, partition_min_size(version, flexible),
                          b"fetch response partitions")
    return n if n > 0 else 0

cdef inline int read_fetch_partition(Cursor* cur, int version, bint flexible,
                                     FetchPartitionHeader* p) except -1:
    """One partition, its tagged fields included; the aborted transactions are skipped (walk
    them from aborted_pos with read_aborted_transaction) and the records framed, not read."""
    cdef Py_ssize_t i, length
    need(cur, 4 + 2 + 8 + 8, b"fetch response partition")
    p.partition_index = get_int32(cur)
    p.error_code = get_int16(cur)
    p.high_watermark = get_int64(cur)
    p.last_stable_offset = get_int64(cur)
    p.log_start_offset = -1
    if version >= 5:
        need(cur, 8, b"fetch response log start offset")
        p.log_start_offset = get_int64(cur)
    p.aborted_count = read_array_length(cur, flexible, True, aborted_min_size(flexible),
                                        b"fetch response aborted transactions")
    p.aborted_pos = cur.pos
    for i in range(p.aborted_count):
        take(cur, 16, b"fetch response aborted transaction")
        if flexible:
            skip_tagged_fields(cur)
    p.preferred_read_replica = -1
    if version >= 11:
        need(cur, 4, b"fetch response preferred read replica")
        p.preferred_read_replica = get_int32(cur)
    length = read_bytes_length(cur, flexible, True, b"fetch response records")
    if length < 0:
        p.records_pos = -1
        p.records_size = -1
    else:
        take(cur, length, b"fetch response records")
        p.records_pos = cur.pos - length
        p.records_size = length
    if flexible:
        skip_tagged_fields(cur)
    return 0

cdef inline int read_aborted_transaction(Cursor* cur, bint flexible, int64_t* producer_id,
                                         int64_t* first_offset) except -1:
    """The next aborted transaction of a list read_fetch_partition has walked already."""
    need(cur, 16, b"fetch response aborted transaction")
    producer_id[0] = get_int64(cur)
    first_offset[0] = get_int64(cur)
    if flexible:
        skip_tagged_fields(cur)
    return 0


cdef class FetchPartitionData:
    cdef readonly int32_t partition_index
    cdef readonly int16_t error_code
    cdef readonly int64_t high_watermark
    cdef readonly int64_t last_stable_offset
    cdef readonly int64_t log_start_offset
    cdef readonly int32_t preferred_read_replica
    cdef readonly Py_ssize_t records_position
    cdef readonly Py_ssize_t records_size
    cdef Py_ssize_t _aborted_position   # of the first aborted transaction in _buffer
    cdef Py_ssize_t _aborted_count      # -1: null
    cdef bint _flexible
    cdef object _buffer                 # 1-d byte memoryview of the whole caller buffer
    cdef object _records
    cdef object _aborted


cdef class _LazySequence:
    cdef Py_ssize_t _count
    cdef object item_at(self, Py_ssize_t i)


cdef class AbortedTransactions(_LazySequence):
    cdef int64_t* _pairs                # (producer_id, first_offset) pairs


cdef class _WalkedSequence(_LazySequence):
    cdef object _buffer                 # 1-d byte memoryview of the whole caller buffer
    cdef int _version
    cdef Py_ssize_t _end                # end of the decoded response in _buffer
    cdef Py_ssize_t* _starts            # where each item starts in _buffer
    cdef int allocate(self, Py_ssize_t count) except -1
    cdef int share_buffer(self, _WalkedSequence child) except -1
    cdef object read_item(self, Cursor* cur)


cdef class FetchTopics(_WalkedSequence):
    pass


cdef class FetchPartitions(_WalkedSequence):
    pass
