# cython: language_level=3
"""The broker side of Produce (api key 0), versions 0 to 11: request decoding and response
encoding, with the read cursor and the write buffer (Kafka 3.9's ProduceRequest and
ProduceResponse definitions; protocol/_schema.py's generic codec gives the same values and
bytes, tests/test_protocol_produce_server.py compares them).  Every Produce through `serve`
goes through these two, so they are written out, not planned field by field.

The decoded request is the generic codec's dict: {"transactional_id", "acks", "timeout_ms",
"topic_data": [{"name", "partition_data": [{"index", "records"}]}]}, each partition's records
a bytes copy (None when null).  The response is written from the same dicts the generic codec
takes.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport int16_t, int32_t, uint64_t
from kafkacodec._cursor cimport Cursor, need, take, get_int16, get_int32
from kafkacodec._writer cimport (Writer, WriteBuffer, put_int16, put_int32, put_int64,
                                 put_uvarint, put_bytes)
from kafkacodec.protocol._wire cimport (read_string, read_entries, read_bytes_length,
                                        skip_tagged_fields, put_length, put_string,
                                        put_empty_tags, decode_body, PRODUCE_FLEXIBLE)

from kafkacodec.errors import CorruptRecordError, UnsupportedVersionError

MIN_VERSION = 0
MAX_VERSION = 11

__all__ = ["decode_produce_request", "encode_produce_response", "MIN_VERSION", "MAX_VERSION"]


cdef int check_version(int version) except -1:
    if version < MIN_VERSION or version > MAX_VERSION:
        raise UnsupportedVersionError(
            f"Produce version {version} is not supported (kafkacodec serves {MIN_VERSION}-{MAX_VERSION})")
    return 0


def decode_produce_request(data, int api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                           bint strict=True, Py_ssize_t max_entries=PY_SSIZE_T_MAX):
    """The ProduceRequest body at data[offset:offset+size] (after the request header), as the
    generic codec's dict.  CorruptRecordError (with the byte position) when malformed or, if
    `strict`, followed by extra bytes (Kafka's broker ignores them); RecordTooLargeError when
    its topics and partitions are more than `max_entries` in all."""
    check_version(api_version)
    return decode_body(data, offset, size, read_request, api_version, strict, max_entries)


cdef object read_request(Cursor* cur, int api_version, bint strict, Py_ssize_t max_entries):
    cdef Py_ssize_t left = max_entries
    cdef bint flexible = api_version >= PRODUCE_FLEXIBLE
    cdef Py_ssize_t ntopics, nparts, n, t, p
    cdef const unsigned char* raw
    cdef int16_t acks
    cdef int32_t timeout_ms, index
    cdef list topics, partitions
    cdef object transactional_id = None, records
    if api_version >= 3:
        transactional_id = read_string(cur, flexible, True, b"produce request transactional id")
    need(cur, 2, b"produce request acks")
    acks = get_int16(cur)
    need(cur, 4, b"produce request timeout")
    timeout_ms = get_int32(cur)
    topics = []
    # a topic takes at least its name's length and its partition count; a partition its
    # index and its records' length
    ntopics = read_entries(cur, flexible, 2, &left, b"produce request topics")
    for t in range(ntopics):
        name = read_string(cur, flexible, False, b"produce request topic name")
        nparts = read_entries(cur, flexible, 5, &left, b"produce request partitions")
        partitions = []
        for p in range(nparts):
            need(cur, 4, b"produce request partition index")
            index = get_int32(cur)
            n = read_bytes_length(cur, flexible, True, b"produce request records")
            if n < 0:
                records = None
            else:                               # a copy: the request's buffer goes back now
                raw = take(cur, n, b"produce request records")
                records = PyBytes_FromStringAndSize(<const char*>raw, n)
            if flexible:
                skip_tagged_fields(cur)
            partitions.append({"index": index, "records": records})
        if flexible:
            skip_tagged_fields(cur)
        topics.append({"name": name, "partition_data": partitions})
    if flexible:
        skip_tagged_fields(cur)
    if strict and cur.pos != cur.end:
        raise CorruptRecordError(f"produce request v{api_version}: {cur.end - cur.pos} bytes left "
                                 "after the last field", position=cur.base + cur.pos)
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": topics}


cdef int put_tagged(Writer* w, WriteBuffer payload) except -1:
    """One tagged field, tag 0 (the only one Produce responses have at each level)."""
    put_uvarint(w, 1)
    put_uvarint(w, 0)
    put_uvarint(w, <uint64_t>payload.w.length)
    return put_bytes(w, payload.w.buf, payload.w.length)


def encode_produce_response(int api_version, dict value):
    """The ProduceResponse body (after the response header) for the generic codec's dict:
    {"responses": [{"name", "partition_responses": [{"index", "error_code", "base_offset",
    "log_append_time_ms", "log_start_offset", "record_errors", "error_message",
    "current_leader"}]}], "throttle_time_ms", "node_endpoints"}, absent keys taking Kafka's
    defaults.  Returns bytes."""
    cdef WriteBuffer out = WriteBuffer(256)
    cdef WriteBuffer tagged
    cdef Writer* w = &out.w
    cdef bint flexible = api_version >= PRODUCE_FLEXIBLE
    cdef list responses = value["responses"]
    check_version(api_version)
    put_length(w, len(responses), flexible, True)
    for topic in responses:
        put_string(w, topic["name"], flexible)
        parts = topic["partition_responses"]
        put_length(w, len(parts), flexible, True)
        for part in parts:
            put_int32(w, part["index"])
            put_int16(w, part["error_code"])
            put_int64(w, part["base_offset"])
            if api_version >= 2:
                put_int64(w, part.get("log_append_time_ms", -1))
            if api_version >= 5:
                put_int64(w, part.get("log_start_offset", -1))
            if api_version >= 8:
                errors = part.get("record_errors") or ()
                put_length(w, len(errors), flexible, True)
                for error in errors:
                    put_int32(w, error["batch_index"])
                    put_string(w, error.get("batch_index_error_message"), flexible)
                    if flexible:
                        put_empty_tags(w)
                put_string(w, part.get("error_message"), flexible)
            if flexible:
                leader = part.get("current_leader") if api_version >= 10 else None
                if leader is None or (leader.get("leader_id", -1) == -1
                                      and leader.get("leader_epoch", -1) == -1):
                    put_empty_tags(w)           # Kafka writes a tagged field that differs
                else:
                    tagged = WriteBuffer(16)
                    put_int32(&tagged.w, leader.get("leader_id", -1))
                    put_int32(&tagged.w, leader.get("leader_epoch", -1))
                    put_empty_tags(&tagged.w)
                    put_tagged(w, tagged)
        if flexible:
            put_empty_tags(w)
    if api_version >= 1:
        put_int32(w, value.get("throttle_time_ms", 0))
    if flexible:
        endpoints = value.get("node_endpoints") if api_version >= 10 else None
        if not endpoints:
            put_empty_tags(w)
        else:
            tagged = WriteBuffer(64)
            put_length(&tagged.w, len(endpoints), True, True)
            for node in endpoints:
                put_int32(&tagged.w, node["node_id"])
                put_string(&tagged.w, node["host"], True)
                put_int32(&tagged.w, node["port"])
                put_string(&tagged.w, node.get("rack"), True)
                put_empty_tags(&tagged.w)
            put_tagged(w, tagged)
    return out.getvalue()
