# cython: language_level=3
"""The broker side of Fetch (api key 1), versions 0 to 17: request decoding and response
framing (spec protocol.md §3-4; Kafka 3.9's FetchRequest/FetchResponse definitions).

`decode_fetch_request` walks the request body once with the read cursor.  The response is
written without its records: `encode_fetch_response` returns the frame (int32 size included)
with every partition's records left out, and the byte positions where each partition's records
go, so the caller sends head[:cut0], records 0, head[cut0:cut1], records 1, ... and can take
each partition's records straight from the segment file (sendfile) or from a lazy
down-conversion.  The frame size counts the records' committed sizes.
"""

import uuid as _uuid

from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t
from kafkacodec._cursor cimport (Cursor, need, take, get_int8, get_int16, get_int32, get_int64)
from kafkacodec._writer cimport (Writer, WriteBuffer, ensure, put_int8, put_int16, put_int32,
                                 put_int64, put_bytes, put_uvarint, store_u32)
from kafkacodec.protocol._wire cimport (read_string, read_entries, skip_tagged_fields, decode_body,
                                        read_uuid, put_length, put_string, put_empty_tags,
                                        put_topic_id, read_int32_if, read_int64_if,
                                        FETCH_FLEXIBLE)

from kafkacodec.errors import CorruptRecordError, UnsupportedVersionError

MIN_VERSION = 0
MAX_VERSION = 17

__all__ = ["FetchRequest", "FetchPartition", "decode_fetch_request", "encode_fetch_response",
           "MIN_VERSION", "MAX_VERSION"]


cdef class FetchPartition:
    """One partition of a FetchRequest (Kafka's FetchPartition; -1 where a version lacks the
    field)."""
    cdef readonly int32_t partition
    cdef readonly int32_t current_leader_epoch
    cdef readonly int64_t fetch_offset
    cdef readonly int32_t last_fetched_epoch
    cdef readonly int64_t log_start_offset
    cdef readonly int32_t partition_max_bytes

    def __repr__(self):
        return (f"FetchPartition(partition={self.partition}, fetch_offset={self.fetch_offset}, "
                f"partition_max_bytes={self.partition_max_bytes})")


cdef class FetchRequest:
    """A decoded FetchRequest.  `topics` is a list of (topic name or None, topic id (UUID) or
    None, [FetchPartition]): names up to version 12, ids from 13.  `forgotten_topics` likewise
    with partition numbers."""
    cdef readonly int api_version
    cdef readonly int32_t replica_id
    cdef readonly int32_t max_wait_ms
    cdef readonly int32_t min_bytes
    cdef readonly int32_t max_bytes
    cdef readonly int8_t isolation_level
    cdef readonly int32_t session_id
    cdef readonly int32_t session_epoch
    cdef readonly list topics
    cdef readonly list forgotten_topics
    cdef readonly object rack_id

    def __repr__(self):
        return (f"FetchRequest(api_version={self.api_version}, max_wait_ms={self.max_wait_ms}, "
                f"min_bytes={self.min_bytes}, max_bytes={self.max_bytes}, "
                f"isolation_level={self.isolation_level}, topics={self.topics!r})")


cdef int check_version(int version) except -1:
    if version < MIN_VERSION or version > MAX_VERSION:
        raise UnsupportedVersionError(
            f"Fetch version {version} is not supported (kafkacodec serves {MIN_VERSION}-{MAX_VERSION})")
    return 0


cdef object read_topic(Cursor* cur, int version, bint flexible):
    """(name, None) up to version 12, (None, UUID) from 13."""
    if version >= 13:
        return None, _uuid.UUID(bytes=read_uuid(cur, b"fetch request topic id"))
    return read_string(cur, flexible, False, b"fetch request topic name"), None


def decode_fetch_request(data, int api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                         bint strict=True, Py_ssize_t max_entries=PY_SSIZE_T_MAX):
    """The FetchRequest body at data[offset:offset+size] (after the request header).
    CorruptRecordError (with the byte position) when malformed or, if `strict`, followed by
    extra bytes (Kafka's broker ignores them); RecordTooLargeError when its arrays (topics,
    partitions, forgotten ones) hold more than `max_entries` elements in all."""
    check_version(api_version)
    return decode_body(data, offset, size, read_request, api_version, strict, max_entries)


cdef object read_request(Cursor* cur, int api_version, bint strict, Py_ssize_t max_entries):
    cdef Py_ssize_t left = max_entries
    cdef bint flexible = api_version >= FETCH_FLEXIBLE
    cdef FetchRequest request = FetchRequest.__new__(FetchRequest)
    cdef FetchPartition part
    cdef Py_ssize_t ntopics, nparts, t, p
    cdef list partitions, numbers
    request.api_version = api_version
    request.replica_id = read_int32_if(cur, api_version <= 14, -1, b"fetch request replica id")
    need(cur, 8, b"fetch request max wait and min bytes")
    request.max_wait_ms = get_int32(cur)
    request.min_bytes = get_int32(cur)
    request.max_bytes = read_int32_if(cur, api_version >= 3, 0x7FFFFFFF,
                                      b"fetch request max bytes")
    request.isolation_level = 0
    if api_version >= 4:
        need(cur, 1, b"fetch request isolation level")
        request.isolation_level = get_int8(cur)
    request.session_id = 0
    request.session_epoch = -1
    if api_version >= 7:
        need(cur, 8, b"fetch request session")
        request.session_id = get_int32(cur)
        request.session_epoch = get_int32(cur)
    request.topics = []
    ntopics = read_entries(cur, flexible, 2, &left, b"fetch request topics")
    for t in range(ntopics):
        name, topic_id = read_topic(cur, api_version, flexible)
        nparts = read_entries(cur, flexible, 16, &left, b"fetch request partitions")
        partitions = []
        for p in range(nparts):
            part = FetchPartition.__new__(FetchPartition)
            need(cur, 4, b"fetch request partition")
            part.partition = get_int32(cur)
            part.current_leader_epoch = read_int32_if(cur, api_version >= 9, -1,
                                                      b"fetch request current leader epoch")
            need(cur, 8, b"fetch request fetch offset")
            part.fetch_offset = get_int64(cur)
            part.last_fetched_epoch = read_int32_if(cur, api_version >= 12, -1,
                                                    b"fetch request last fetched epoch")
            part.log_start_offset = read_int64_if(cur, api_version >= 5, -1,
                                                  b"fetch request log start offset")
            need(cur, 4, b"fetch request partition max bytes")
            part.partition_max_bytes = get_int32(cur)
            if flexible:
                skip_tagged_fields(cur)        # v17: ReplicaDirectoryId
            partitions.append(part)
        if flexible:
            skip_tagged_fields(cur)
        request.topics.append((name, topic_id, partitions))
    request.forgotten_topics = []
    if api_version >= 7:
        ntopics = read_entries(cur, flexible, 2, &left, b"fetch request forgotten topics")
        for t in range(ntopics):
            name, topic_id = read_topic(cur, api_version, flexible)
            nparts = read_entries(cur, flexible, 4, &left, b"fetch request forgotten partitions")
            need(cur, 4 * nparts, b"fetch request forgotten partitions")
            numbers = [get_int32(cur) for p in range(nparts)]
            if flexible:
                skip_tagged_fields(cur)
            request.forgotten_topics.append((name, topic_id, numbers))
    request.rack_id = ""
    if api_version >= 11:
        request.rack_id = read_string(cur, flexible, False, b"fetch request rack id")
    if flexible:
        skip_tagged_fields(cur)                # ClusterId, ReplicaState
    if strict and cur.pos != cur.end:
        raise CorruptRecordError(f"fetch request v{api_version}: {cur.end - cur.pos} bytes left "
                                 "after the last field", position=cur.base + cur.pos)
    return request


def encode_fetch_response(int api_version, int32_t correlation_id, topics, *,
                          int32_t throttle_time_ms=0, int16_t error_code=0, int32_t session_id=0):
    """(head, cuts, frame_size): the FetchResponse frame without its records.

    `topics`: [(name, topic_id, [partition])] with name for versions 0-12 and a UUID (or 16
    bytes) from 13, each partition a tuple (partition_index, error_code, high_watermark,
    last_stable_offset, log_start_offset, aborted_transactions, records_size):
    aborted_transactions a list of (producer_id, first_offset) or None; records_size the
    committed size of the partition's records, -1 for null.  `head` is bytes starting with the
    int32 frame size, `cuts` the position in `head` where each partition's records go (in
    order), `frame_size` the int32 written (len(head) - 4 + the records' sizes)."""
    cdef WriteBuffer out = WriteBuffer(128)
    cdef Writer* w = &out.w
    cdef bint flexible = api_version >= FETCH_FLEXIBLE
    cdef list cuts = []
    cdef int64_t records_total = 0, frame
    cdef Py_ssize_t records_size
    check_version(api_version)
    ensure(w, 4)
    w.length = 4                                           # the frame size, patched below
    put_int32(w, correlation_id)
    if flexible:
        put_empty_tags(w)                                  # response header v1
    if api_version >= 1:
        put_int32(w, throttle_time_ms)
    if api_version >= 7:
        put_int16(w, error_code)
        put_int32(w, session_id)
    put_length(w, len(topics), flexible, True)
    for name, topic_id, partitions in topics:
        if api_version >= 13:
            put_topic_id(w, topic_id)
        else:
            put_string(w, name, flexible)
        put_length(w, len(partitions), flexible, True)
        for (partition_index, partition_error, high_watermark, last_stable_offset,
             log_start_offset, aborted, records_size) in partitions:
            put_int32(w, partition_index)
            put_int16(w, partition_error)
            put_int64(w, high_watermark)
            if api_version >= 4:
                put_int64(w, last_stable_offset)
            if api_version >= 5:
                put_int64(w, log_start_offset)
            if api_version >= 4:
                if aborted is None:
                    put_length(w, -1, flexible, True)
                else:
                    put_length(w, len(aborted), flexible, True)
                    for producer_id, first_offset in aborted:
                        put_int64(w, producer_id)
                        put_int64(w, first_offset)
                        if flexible:
                            put_empty_tags(w)
            if api_version >= 11:
                put_int32(w, -1)                           # PreferredReadReplica: none
            if records_size < -1:
                raise ValueError(f"invalid records size {records_size}")
            put_length(w, records_size, flexible, True)
            cuts.append(w.length)
            if records_size > 0:
                records_total += records_size
            if flexible:
                put_empty_tags(w)                          # partition tags
        if flexible:
            put_empty_tags(w)                              # topic tags
    if flexible:
        put_empty_tags(w)                                  # top-level tags (v16 NodeEndpoints)
    frame = w.length - 4 + records_total
    if frame > 0x7FFFFFFF:
        raise ValueError(f"fetch response of {frame} bytes does not fit an int32 size")
    store_u32(w.buf, <uint32_t>frame)
    return out.getvalue(), cuts, frame
