# cython: language_level=3
"""FetchRequest (api key 1) encoding and FetchResponse decoding, versions 4 to 16.

The response walk is one pass of the read cursor over the caller's buffer; each partition's
records come back as a memoryview slice of that buffer (no copy), possibly ending in a partial
batch.  Tagged fields (partition: diverging epoch, current leader, snapshot id; top level:
node endpoints) are skipped.
"""

import uuid as _uuid

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t
from kafkacodec._cursor cimport (Cursor, cursor_init, need, take, get_int8, get_int16, get_int32,
                                 get_int64)
from kafkacodec._writer cimport (Writer, WriteBuffer, put_int8, put_int32, put_int64,
                                 put_bytes, put_uvarint)
from kafkacodec.protocol._wire cimport (read_string, read_array_length, read_bytes_length,
                                        skip_tagged_fields, read_response_header, read_uuid,
                                        put_length, put_string, put_empty_tags, begin_request,
                                        end_frame, API_FETCH, FETCH_FLEXIBLE)

from kafkacodec.errors import UnsupportedVersionError
from kafkacodec.protocol._types import AbortedTransaction, FetchTopicResponse, FetchResponse

MIN_VERSION = 4
MAX_VERSION = 16


cdef class FetchPartitionData:
    """One partition of a FetchResponse.

    ``records`` is a zero-copy memoryview slice of the buffer the response was decoded from
    (None when the broker sent null), made on first access; it may end with a partial batch.
    ``records_position`` / ``records_size`` say where it lies in that buffer (-1 when null)."""

    cdef readonly int32_t partition_index
    cdef readonly int16_t error_code
    cdef readonly int64_t high_watermark
    cdef readonly int64_t last_stable_offset
    cdef readonly int64_t log_start_offset
    cdef readonly object aborted_transactions
    cdef readonly int32_t preferred_read_replica
    cdef readonly Py_ssize_t records_position
    cdef readonly Py_ssize_t records_size
    cdef object _buffer            # 1-d byte memoryview of the whole caller buffer
    cdef object _records

    @property
    def records(self):
        if self.records_position < 0:
            return None
        if self._records is None:
            self._records = self._buffer[self.records_position:
                                         self.records_position + self.records_size]
        return self._records

    def __repr__(self):
        return (f"FetchPartitionData(partition_index={self.partition_index}, "
                f"error_code={self.error_code}, high_watermark={self.high_watermark}, "
                f"last_stable_offset={self.last_stable_offset}, "
                f"log_start_offset={self.log_start_offset}, "
                f"aborted_transactions={self.aborted_transactions!r}, "
                f"preferred_read_replica={self.preferred_read_replica}, "
                f"records_position={self.records_position}, records_size={self.records_size})")


cdef int check_version(int version) except -1:
    if version < MIN_VERSION or version > MAX_VERSION:
        raise UnsupportedVersionError(
            f"Fetch version {version} is not supported (kafkacodec speaks {MIN_VERSION}-{MAX_VERSION})")
    return 0


cdef object as_byte_view(object data):
    """A 1-d unsigned-byte memoryview of any contiguous buffer (for zero-copy slicing)."""
    cdef object view = memoryview(data)
    if view.ndim != 1 or view.format not in ("B", "b", "c") or view.itemsize != 1:
        view = view.cast("B")
    elif view.format != "B":
        view = view.cast("B")
    return view


def decode_fetch_response(data, int api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                          bint header=True):
    """Decode a FetchResponse from `data[offset:offset+size]` (size -1: to the end).

    `data` starts at the response header's correlation id (the int32 frame size already read),
    unless `header` is False.  The header version follows the api version (v1 with a tagged
    section from version 12).  Records are memoryview slices of `data`.
    """
    cdef const unsigned char[::1] buf = data
    cdef Py_ssize_t total = buf.shape[0]
    cdef Cursor cur
    cdef bint flexible = api_version >= FETCH_FLEXIBLE
    cdef object correlation_id = None
    cdef int32_t throttle_time_ms, session_id = 0
    cdef int16_t error_code = 0
    cdef Py_ssize_t ntopics, nparts, naborted, nrecords, t, p, a
    cdef int32_t partition_index, preferred_read_replica
    cdef int16_t partition_error
    cdef int64_t high_watermark, last_stable_offset, log_start_offset, producer_id, first_offset
    cdef object topic, topic_id, aborted, view = None
    cdef FetchPartitionData part
    cdef list responses, partitions
    check_version(api_version)
    if offset < 0 or offset > total:
        raise ValueError(f"offset {offset} outside a buffer of {total} bytes")
    if size < 0:
        size = total - offset
    elif size > total - offset:
        size = total - offset          # the cursor reports the truncation with its position
    cursor_init(&cur, &buf[0] + offset if total else NULL, size, offset)
    if header:
        correlation_id = read_response_header(&cur, flexible)
    need(&cur, 4, b"fetch response throttle time")
    throttle_time_ms = get_int32(&cur)
    if api_version >= 7:
        need(&cur, 6, b"fetch response error code and session id")
        error_code = get_int16(&cur)
        session_id = get_int32(&cur)
    ntopics = read_array_length(&cur, flexible, False, 2, b"fetch response topics")
    responses = []
    for t in range(ntopics):
        if api_version >= 13:
            topic = None
            topic_id = _uuid.UUID(bytes=read_uuid(&cur, b"fetch response topic id"))
        else:
            topic = read_string(&cur, flexible, False, b"fetch response topic name")
            topic_id = None
        nparts = read_array_length(&cur, flexible, False, 8, b"fetch response partitions")
        partitions = []
        for p in range(nparts):
            need(&cur, 4 + 2 + 8 + 8, b"fetch response partition")
            partition_index = get_int32(&cur)
            partition_error = get_int16(&cur)
            high_watermark = get_int64(&cur)
            last_stable_offset = get_int64(&cur)
            log_start_offset = -1
            if api_version >= 5:
                need(&cur, 8, b"fetch response log start offset")
                log_start_offset = get_int64(&cur)
            naborted = read_array_length(&cur, flexible, True, 16,
                                         b"fetch response aborted transactions")
            if naborted < 0:
                aborted = None
            else:
                aborted = []
                for a in range(naborted):
                    need(&cur, 16, b"fetch response aborted transaction")
                    producer_id = get_int64(&cur)
                    first_offset = get_int64(&cur)
                    aborted.append(AbortedTransaction(producer_id, first_offset))
                    if flexible:
                        skip_tagged_fields(&cur)
            preferred_read_replica = -1
            if api_version >= 11:
                need(&cur, 4, b"fetch response preferred read replica")
                preferred_read_replica = get_int32(&cur)
            nrecords = read_bytes_length(&cur, flexible, True, b"fetch response records")
            part = FetchPartitionData.__new__(FetchPartitionData)
            part.partition_index = partition_index
            part.error_code = partition_error
            part.high_watermark = high_watermark
            part.last_stable_offset = last_stable_offset
            part.log_start_offset = log_start_offset
            part.aborted_transactions = aborted
            part.preferred_read_replica = preferred_read_replica
            if nrecords < 0:
                part.records_position = -1
                part.records_size = -1
            else:
                take(&cur, nrecords, b"fetch response records")
                part.records_position = cur.base + cur.pos - nrecords
                part.records_size = nrecords
                if view is None:
                    view = as_byte_view(data)
                part._buffer = view
            if flexible:
                skip_tagged_fields(&cur)
            partitions.append(part)
        if flexible:
            skip_tagged_fields(&cur)
        responses.append(FetchTopicResponse(topic, topic_id, partitions))
    if flexible:
        skip_tagged_fields(&cur)
    return FetchResponse(api_version, correlation_id, throttle_time_ms, error_code, session_id,
                         responses, cur.pos)


def encode_fetch_request(topics, *, int api_version=12, int32_t correlation_id=0,
                         client_id="kafkacodec", int32_t max_wait_ms=500, int32_t min_bytes=1,
                         int32_t max_bytes=52428800, int8_t isolation_level=0,
                         int32_t session_id=0, int32_t session_epoch=-1, int32_t replica_id=-1,
                         int32_t partition_max_bytes=1048576, rack_id=""):
    """A framed FetchRequest (int32 size + header + body) as bytes.

    `topics`: [(topic, [(partition, fetch_offset) or (partition, fetch_offset, max_bytes)])].
    A topic is a name for versions 4-12 and a uuid.UUID (or 16 bytes) for versions 13+.
    Consumers send replica_id -1 (not written from version 15, where it became a tagged field
    that only followers set).
    """
    cdef WriteBuffer out = WriteBuffer(256)
    cdef Writer* w = &out.w
    cdef bint flexible = api_version >= FETCH_FLEXIBLE
    cdef Py_ssize_t frame
    cdef bytes topic_id
    check_version(api_version)
    frame = begin_request(w, API_FETCH, api_version, correlation_id, client_id, flexible)
    if api_version < 15:
        put_int32(w, replica_id)
    put_int32(w, max_wait_ms)
    put_int32(w, min_bytes)
    put_int32(w, max_bytes)
    put_int8(w, isolation_level)
    if api_version >= 7:
        put_int32(w, session_id)
        put_int32(w, session_epoch)
    topics = list(topics)
    put_length(w, len(topics), flexible, True)
    for topic, partitions in topics:
        if api_version >= 13:
            topic_id = topic.bytes if isinstance(topic, _uuid.UUID) else bytes(topic)
            if len(topic_id) != 16:
                raise ValueError("Fetch v13+ identifies topics by a 16-byte topic id")
            put_bytes(w, <const unsigned char*><char*>topic_id, 16)
        else:
            put_string(w, topic, flexible)
        partitions = list(partitions)
        put_length(w, len(partitions), flexible, True)
        for entry in partitions:
            put_int32(w, entry[0])                       # Partition
            if api_version >= 9:
                put_int32(w, -1)                         # CurrentLeaderEpoch: unknown
            put_int64(w, entry[1])                       # FetchOffset
            if api_version >= 12:
                put_int32(w, -1)                         # LastFetchedEpoch: unknown
            if api_version >= 5:
                put_int64(w, -1)                         # LogStartOffset: consumers send -1
            put_int32(w, entry[2] if len(entry) > 2 else partition_max_bytes)
            if flexible:
                put_empty_tags(w)
        if flexible:
            put_empty_tags(w)
    if api_version >= 7:
        put_length(w, 0, flexible, True)                 # ForgottenTopicsData: none
    if api_version >= 11:
        put_string(w, rack_id, flexible)
    if flexible:
        put_empty_tags(w)
    end_frame(w, frame)
    return out.getvalue()
