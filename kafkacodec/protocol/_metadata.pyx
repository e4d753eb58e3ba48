# cython: language_level=3
"""ApiVersions (api key 18, versions 0-3) and Metadata (api key 3, versions 0-12): enough to
learn what a broker speaks and which broker leads each partition."""

import uuid as _uuid
from collections.abc import Sequence as _Sequence

from libc.stdint cimport int8_t, int16_t, int32_t
from cpython.buffer cimport PyBuffer_Release
from cpython.bytes cimport PyBytes_FromStringAndSize
from kafkacodec._cursor cimport Cursor, cursor_init, need, get_int8, get_int16, get_int32
from kafkacodec._writer cimport Writer, WriteBuffer, put_int8, put_int32, put_bytes
from kafkacodec.protocol._wire cimport (read_string, read_array_length, skip_tagged_fields,
                                        read_response_header, read_uuid, put_length, put_string,
                                        put_empty_tags, begin_request, end_frame, API_METADATA,
                                        API_API_VERSIONS, METADATA_FLEXIBLE, checked_version,
                                        open_message,
                                        API_VERSIONS_FLEXIBLE)
from kafkacodec.protocol._fetch cimport _WalkedSequence

from kafkacodec.protocol._types import (ApiVersionRange, ApiVersionsResponse, MetadataBroker,
                                        MetadataPartition, MetadataTopic, MetadataResponse)

API_VERSIONS_MAX_VERSION = 3
METADATA_MAX_VERSION = 12
cdef bytes ZERO_UUID = bytes(16)


cdef int check_version(const char* api, object version, int highest) except -1:
    return checked_version(version, api, 0, highest)


# --- ApiVersions -----------------------------------------------------------------------------
def encode_api_versions_request(*, api_version=3, int32_t correlation_id=0,
                                client_id="kafkacodec", client_software_name="kafkacodec",
                                client_software_version="0.1.0"):
    """A framed ApiVersionsRequest as bytes (versions 0-3; 3 carries the client software)."""
    cdef int version = check_version(b"ApiVersions", api_version, API_VERSIONS_MAX_VERSION)
    cdef WriteBuffer out = WriteBuffer(64)
    cdef Writer* w = &out.w
    cdef bint flexible = version >= API_VERSIONS_FLEXIBLE
    frame = begin_request(w, API_API_VERSIONS, version, correlation_id, client_id, flexible)
    if flexible:
        put_string(w, client_software_name, True)
        put_string(w, client_software_version, True)
        put_empty_tags(w)
    end_frame(w, frame)
    return out.getvalue()


def decode_api_versions_response(data, api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                                 bint header=True):
    """Decode an ApiVersionsResponse from any C-contiguous buffer (read as raw bytes).  Its
    header is always v0 (no tagged section), even for the flexible body versions
    (protocol.md §1)."""
    cdef int version = check_version(b"ApiVersions", api_version, API_VERSIONS_MAX_VERSION)
    cdef Py_buffer view
    cdef Cursor cur
    open_message(&view, data, offset, size, &cur)
    try:
        return read_api_versions_response(&cur, version, header)
    finally:
        PyBuffer_Release(&view)


cdef object read_api_versions_response(Cursor* cur, int api_version, bint header):
    cdef bint flexible = api_version >= API_VERSIONS_FLEXIBLE
    cdef object correlation_id = None
    cdef int16_t error_code
    cdef int32_t throttle_time_ms = 0
    cdef Py_ssize_t n, i
    cdef list api_keys = []
    if header:
        correlation_id = read_response_header(cur, False)
    need(cur, 2, b"api versions error code")
    error_code = get_int16(cur)
    n = read_array_length(cur, flexible, False, 7 if flexible else 6, b"api versions keys")
    for i in range(n):
        need(cur, 6, b"api versions key")
        api_keys.append(ApiVersionRange(get_int16(cur), get_int16(cur), get_int16(cur)))
        if flexible:
            skip_tagged_fields(cur)
    if api_version >= 1:
        need(cur, 4, b"api versions throttle time")
        throttle_time_ms = get_int32(cur)
    if flexible:
        skip_tagged_fields(cur)
    return ApiVersionsResponse(api_version, correlation_id, error_code, api_keys, throttle_time_ms)


# --- Metadata --------------------------------------------------------------------------------
def encode_metadata_request(topics=None, *, api_version=12, int32_t correlation_id=0,
                            client_id="kafkacodec", bint allow_auto_topic_creation=True,
                            bint include_topic_authorized_operations=False):
    """A framed MetadataRequest as bytes.  `topics` None asks for every topic (version 0 sends
    an empty array, which means the same there)."""
    cdef int version = check_version(b"Metadata", api_version, METADATA_MAX_VERSION)
    cdef WriteBuffer out = WriteBuffer(128)
    cdef Writer* w = &out.w
    cdef bint flexible = version >= METADATA_FLEXIBLE
    frame = begin_request(w, API_METADATA, version, correlation_id, client_id, flexible)
    if topics is None:
        put_length(w, 0 if version == 0 else -1, flexible, True)
    else:
        topics = list(topics)
        put_length(w, len(topics), flexible, True)
        for name in topics:
            if version >= 10:
                put_bytes(w, <const unsigned char*><char*>ZERO_UUID, 16)
            put_string(w, name, flexible)
            if flexible:
                put_empty_tags(w)
    if version >= 4:
        put_int8(w, allow_auto_topic_creation)
    if 8 <= version <= 10:
        put_int8(w, 0)                                   # IncludeClusterAuthorizedOperations
    if version >= 8:
        put_int8(w, include_topic_authorized_operations)
    if flexible:
        put_empty_tags(w)
    end_frame(w, frame)
    return out.getvalue()


cdef list read_int32_array(Cursor* cur, bint flexible, bint make, const char* what):
    """An int32 array: a list when `make`, else None (walked and checked only)."""
    cdef Py_ssize_t n = read_array_length(cur, flexible, False, 4, what), i
    cdef list out = [] if make else None
    if n > 0:
        need(cur, 4 * n, what)
        if not make:
            cur.pos += 4 * n
            return None
        for i in range(n):
            out.append(get_int32(cur))
    return out


def decode_metadata_response(data, api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                             bint header=True):
    """Decode a MetadataResponse (versions 0-12) from any C-contiguous buffer (raw bytes).

    The response is walked (and checked) once; `brokers` and `topics` keep where each item
    starts in one bytes copy of the response and make it when looked at (see MetadataTopics).
    The result does not hold `data` (e.g. a ring slot may be released).
    """
    cdef int version = check_version(b"Metadata", api_version, METADATA_MAX_VERSION)
    cdef bint flexible = version >= METADATA_FLEXIBLE
    cdef Py_buffer view
    cdef Cursor cur
    cdef object correlation_id = None, cluster_id = None
    cdef int32_t throttle_time_ms = 0, controller_id = -1
    cdef Py_ssize_t i
    cdef MetadataBrokers brokers = MetadataBrokers.__new__(MetadataBrokers)
    cdef MetadataTopics topics = MetadataTopics.__new__(MetadataTopics)
    open_message(&view, data, offset, size, &cur)
    try:
        if header:
            correlation_id = read_response_header(&cur, flexible)
        if version >= 3:
            need(&cur, 4, b"metadata throttle time")
            throttle_time_ms = get_int32(&cur)
        brokers.allocate(max(0, read_array_length(&cur, flexible, False, 8,
                                                  b"metadata brokers")))
        for i in range(brokers._count):
            brokers._starts[i] = cur.pos
            read_broker(&cur, version, False)
        if version >= 2:
            cluster_id = read_string(&cur, flexible, True, b"metadata cluster id")
        if version >= 1:
            need(&cur, 4, b"metadata controller id")
            controller_id = get_int32(&cur)
        topics.allocate(max(0, read_array_length(&cur, flexible, False, 4, b"metadata topics")))
        for i in range(topics._count):
            topics._starts[i] = cur.pos
            read_topic(&cur, version, None)
        if 8 <= version <= 10:
            need(&cur, 4, b"metadata cluster authorized operations")
            get_int32(&cur)
        if flexible:
            skip_tagged_fields(&cur)
        brokers._end = topics._end = cur.end
        if brokers._count or topics._count:
            brokers._buffer = topics._buffer = PyBytes_FromStringAndSize(<const char*>cur.data,
                                                                         cur.end)
    finally:
        PyBuffer_Release(&view)
    brokers._version = topics._version = version
    return MetadataResponse(version, correlation_id, throttle_time_ms, brokers, cluster_id,
                            controller_id, topics)


cdef object read_broker(Cursor* cur, int version, bint make):
    """One broker, its tagged fields included: a MetadataBroker when `make`, else None."""
    cdef bint flexible = version >= METADATA_FLEXIBLE
    cdef int32_t node_id, port
    need(cur, 4, b"metadata broker node id")
    node_id = get_int32(cur)
    host = read_string(cur, flexible, False, b"metadata broker host")
    need(cur, 4, b"metadata broker port")
    port = get_int32(cur)
    rack = read_string(cur, flexible, True, b"metadata broker rack") if version >= 1 else None
    if flexible:
        skip_tagged_fields(cur)
    return MetadataBroker(node_id, host, port, rack) if make else None


cdef object read_topic(Cursor* cur, int version, MetadataPartitions partitions):
    """One topic, its tagged fields included: a MetadataTopic of `partitions` (their starts
    recorded there), or None when `partitions` is None (walked and checked only)."""
    cdef bint flexible = version >= METADATA_FLEXIBLE
    cdef int16_t error_code
    cdef bint is_internal = False
    cdef Py_ssize_t n, j
    need(cur, 2, b"metadata topic error code")
    error_code = get_int16(cur)
    name = read_string(cur, flexible, version >= 12, b"metadata topic name")
    topic_id = None
    if version >= 10:
        topic_id = read_uuid(cur, b"metadata topic id")
    if version >= 1:
        need(cur, 1, b"metadata topic is_internal")
        is_internal = get_int8(cur) != 0
    n = max(0, read_array_length(cur, flexible, False, 10, b"metadata partitions"))
    if partitions is not None:
        partitions.allocate(n)
    for j in range(n):
        if partitions is not None:
            partitions._starts[j] = cur.pos
        read_partition(cur, version, False)
    if version >= 8:
        need(cur, 4, b"metadata topic authorized operations")
        get_int32(cur)
    if flexible:
        skip_tagged_fields(cur)
    if partitions is None:
        return None
    return MetadataTopic(error_code, name, None if topic_id is None else _uuid.UUID(bytes=topic_id),
                         is_internal, partitions)


cdef object read_partition(Cursor* cur, int version, bint make):
    """One partition, its tagged fields included: a MetadataPartition when `make`, else
    None."""
    cdef bint flexible = version >= METADATA_FLEXIBLE
    cdef int16_t error_code
    cdef int32_t partition_index, leader_id, leader_epoch = -1
    need(cur, 10, b"metadata partition")
    error_code = get_int16(cur)
    partition_index = get_int32(cur)
    leader_id = get_int32(cur)
    if version >= 7:
        need(cur, 4, b"metadata partition leader epoch")
        leader_epoch = get_int32(cur)
    replicas = read_int32_array(cur, flexible, make, b"metadata partition replicas")
    isr = read_int32_array(cur, flexible, make, b"metadata partition isr")
    offline = (read_int32_array(cur, flexible, make, b"metadata partition offline replicas")
               if version >= 5 else [])
    if flexible:
        skip_tagged_fields(cur)
    if not make:
        return None
    return MetadataPartition(error_code, partition_index, leader_id, leader_epoch, replicas,
                             isr, offline)


cdef class MetadataBrokers(_WalkedSequence):
    """The brokers of a decoded MetadataResponse: a read-only sequence of MetadataBroker, made
    when looked at.  Safe to share between threads (it only reads its buffer)."""

    cdef object read_item(self, Cursor* cur):
        return read_broker(cur, self._version, True)


cdef class MetadataTopics(_WalkedSequence):
    """The topics of a decoded MetadataResponse: a read-only sequence of MetadataTopic, made
    when looked at (its partitions too, one MetadataPartition at a time).  Safe to share
    between threads (it only reads its buffer)."""

    cdef object read_item(self, Cursor* cur):
        cdef MetadataPartitions partitions = MetadataPartitions.__new__(MetadataPartitions)
        topic = read_topic(cur, self._version, partitions)
        self.share_buffer(partitions)
        return topic


cdef class MetadataPartitions(_WalkedSequence):
    """The partitions of one topic: a read-only sequence of MetadataPartition."""

    cdef object read_item(self, Cursor* cur):
        return read_partition(cur, self._version, True)


for _cls in (MetadataBrokers, MetadataTopics, MetadataPartitions):
    _Sequence.register(_cls)
