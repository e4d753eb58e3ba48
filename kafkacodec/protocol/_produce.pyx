# cython: language_level=3
"""ProduceRequest (api key 0) encoding and ProduceResponse decoding, versions 3 to 11 (Kafka 3.8).

A partition's `records` may be one buffer or several (e.g. several raw batches taken from a
fetch, KIP-712): they are copied once, back to back, into the outgoing WriteBuffer, which is
sized before the first byte is written so it never re-allocates.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from kafkacodec._cursor cimport Cursor, cursor_init, need, get_int16, get_int32, get_int64
from kafkacodec._writer cimport (Writer, WriteBuffer, ensure, put_int16, put_int32, put_bytes,
                                 put_uvarint, uvarint_size)
from kafkacodec.protocol._wire cimport (read_string, read_array_length, skip_tagged_fields,
                                        read_response_header, put_length, put_string,
                                        put_empty_tags, begin_produce_request, produce_output,
                                        end_frame, utf8_of, checked_version, open_message,
                                        API_PRODUCE,
                                        PRODUCE_FLEXIBLE, MAX_FRAME)
from kafkacodec.protocol._fetch cimport _WalkedSequence

from collections.abc import Sequence as _Sequence

from kafkacodec.errors import RecordTooLargeError
from kafkacodec.protocol._types import (ProducePartitionResponse, ProduceTopicResponse,
                                        ProduceResponse)

MIN_VERSION = 3
MAX_VERSION = 11


cdef int check_version(object version) except -1:
    return checked_version(version, b"Produce", MIN_VERSION, MAX_VERSION)


cdef inline bint is_buffer_list(object records):
    return type(records) is list or type(records) is tuple


cdef Py_ssize_t records_size(object records) except -2:
    """Total byte length of one buffer or a list of buffers; -1 for None (null records)."""
    cdef Py_ssize_t n = 0
    cdef Py_buffer view
    if records is None:
        return -1
    if not is_buffer_list(records):
        records = (records,)
    for part in records:
        PyObject_GetBuffer(part, &view, PyBUF_SIMPLE)
        if view.len > MAX_FRAME - n:
            PyBuffer_Release(&view)
            raise RecordTooLargeError(f"records of more than {MAX_FRAME} bytes do not fit a "
                                      f"ProduceRequest (int32 sizes)")
        n += view.len
        PyBuffer_Release(&view)
    return n


cdef int put_records(Writer* w, object records, Py_ssize_t expected) except -1:
    """Append the buffers measured as `expected` bytes by records_size()."""
    cdef Py_buffer view
    cdef Py_ssize_t start = w.length
    if not is_buffer_list(records):
        records = (records,)
    for part in records:
        PyObject_GetBuffer(part, &view, PyBUF_SIMPLE)
        try:
            if view.len > expected - (w.length - start):
                break
            put_bytes(w, <const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
    if w.length - start != expected:
        raise ValueError("records changed size while the ProduceRequest was written "
                         f"(measured {expected} bytes)")
    return 0


cdef inline Py_ssize_t grown_estimate(Py_ssize_t estimate, Py_ssize_t n) except -1:
    if n > MAX_FRAME - estimate:
        raise RecordTooLargeError(f"a ProduceRequest of more than {MAX_FRAME} bytes does not "
                                  f"fit its int32 size")
    return estimate + n


cdef class _PartitionRecords:
    """A partition's records as one buffer, a list or tuple of buffers sent back to back (e.g.
    several raw batches taken from a fetch, KIP-712), or None (null)."""

    cdef Py_ssize_t measure(self, object records) except -2:
        return records_size(records)

    cdef int write(self, Writer* w, object records, Py_ssize_t size) except -1:
        return put_records(w, records, size)


cdef _PartitionRecords BUFFERS = _PartitionRecords()


cdef WriteBuffer write_produce_request(object topic_data, int version, int32_t correlation_id,
                                       object client_id, int16_t acks, int32_t timeout_ms,
                                       object transactional_id, WriteBuffer out,
                                       _PartitionRecords records):
    """encode_produce_request with each partition's records measured and written by `records`
    (`version` checked by the caller)."""
    cdef bint flexible = version >= PRODUCE_FLEXIBLE
    cdef Py_ssize_t frame, n, estimate = 64
    cdef int32_t index
    cdef Writer* w
    cdef list topics = [], partitions
    cdef bytes name
    # Pass 1: everything that may run Python code (iteration, __index__, str subclasses) and
    # the real sizes, so the buffer is allocated once and every batch copied once.
    client_id = None if client_id is None else utf8_of(client_id)
    transactional_id = None if transactional_id is None else utf8_of(transactional_id)
    for topic, parts in topic_data:
        name = utf8_of(topic)
        partitions = []
        for entry, data in parts:
            index = entry
            n = records.measure(data)
            partitions.append((index, data, n))
            estimate = grown_estimate(estimate, 4 + 5 + 1 + (n if n > 0 else 0))
        estimate = grown_estimate(estimate, 2 + 5 + 1 + len(name) + 5)
        topics.append((name, partitions))
    out = produce_output(out, estimate, client_id, transactional_id)
    w = &out.w
    # Pass 2: write.
    frame = begin_produce_request(w, version, correlation_id, client_id, transactional_id,
                                  acks, timeout_ms, len(topics))
    for name, partitions in topics:
        put_string(w, name, flexible)
        put_length(w, len(partitions), flexible, True)
        for index, data, n in partitions:
            put_int32(w, index)
            put_length(w, n, flexible, True)
            if n >= 0:
                records.write(w, data, n)
            if flexible:
                put_empty_tags(w)
        if flexible:
            put_empty_tags(w)
    if flexible:
        put_empty_tags(w)
    end_frame(w, frame)
    return out


def encode_produce_request(topic_data, *, api_version=9, int32_t correlation_id=0,
                           client_id="kafkacodec", int16_t acks=-1, int32_t timeout_ms=30000,
                           transactional_id=None, WriteBuffer out=None):
    """A framed ProduceRequest (int32 size + header + body) in a WriteBuffer.

    `topic_data`: [(topic name, [(partition index, records), ...]), ...] where records is a
    buffer, a list of buffers sent back to back in one Records field, or None (null).
    Pass `out` to reuse a buffer (it is cleared first).  `bytes(result)` or
    `sock.sendall(result)` read it.
    """
    return write_produce_request(topic_data, check_version(api_version), correlation_id,
                                 client_id, acks, timeout_ms, transactional_id, out, BUFFERS)


def decode_produce_response(data, api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                            bint header=True):
    """Decode a ProduceResponse from `data[offset:offset+size]` (any C-contiguous buffer, read
    as raw bytes), starting at the correlation id unless `header` is False.

    The response is walked (and checked) once; `responses` keeps where each topic starts in
    one bytes copy of the response and makes a topic, and its partitions, when looked at (see
    ProduceTopics).  The result does not hold `data` (e.g. a ring slot may be released).
    """
    cdef int version = check_version(api_version)
    cdef bint flexible = version >= PRODUCE_FLEXIBLE
    cdef Py_buffer view
    cdef Cursor cur
    cdef Py_ssize_t ntopics, t
    cdef int32_t throttle_time_ms
    cdef object correlation_id = None
    cdef ProduceTopics topics = ProduceTopics.__new__(ProduceTopics)
    open_message(&view, data, offset, size, &cur)
    try:
        if header:
            correlation_id = read_response_header(&cur, flexible)
        ntopics = read_array_length(&cur, flexible, False, 3 if flexible else 6,
                                    b"produce response topics")
        topics.allocate(ntopics if ntopics > 0 else 0)
        for t in range(topics._count):
            topics._starts[t] = cur.pos
            read_topic(&cur, version, None)
        need(&cur, 4, b"produce response throttle time")
        throttle_time_ms = get_int32(&cur)
        if flexible:
            skip_tagged_fields(&cur)
        topics._end = cur.end
        if topics._count:
            topics._buffer = PyBytes_FromStringAndSize(<const char*>cur.data, cur.end)
    finally:
        PyBuffer_Release(&view)
    topics._version = version
    return ProduceResponse(version, correlation_id, topics, throttle_time_ms)


cdef object read_topic(Cursor* cur, int version, ProducePartitions partitions):
    """One topic, its tagged fields included: its name, and where each partition starts in
    `partitions` (allocated here; None: walked and checked only)."""
    cdef bint flexible = version >= PRODUCE_FLEXIBLE
    cdef Py_ssize_t n, p
    name = read_string(cur, flexible, False, b"produce response topic name")
    n = read_array_length(cur, flexible, False, partition_min_size(version, flexible),
                          b"produce response partitions")
    if n < 0:
        n = 0
    if partitions is not None:
        partitions.allocate(n)
    for p in range(n):
        if partitions is not None:
            partitions._starts[p] = cur.pos
        read_partition(cur, version, False)
    if flexible:
        skip_tagged_fields(cur)
    return name


cdef object read_partition(Cursor* cur, int version, bint make):
    """One partition, its tagged fields included: a ProducePartitionResponse when `make`,
    else None (walked and checked only)."""
    cdef bint flexible = version >= PRODUCE_FLEXIBLE
    cdef Py_ssize_t nerrors, e
    cdef int32_t index, batch_index
    cdef int16_t error_code
    cdef int64_t base_offset, log_append_time_ms, log_start_offset = -1
    cdef object error_message = None, message
    cdef list record_errors = [] if make else None
    need(cur, 4 + 2 + 8 + 8, b"produce response partition")
    index = get_int32(cur)
    error_code = get_int16(cur)
    base_offset = get_int64(cur)
    log_append_time_ms = get_int64(cur)
    if version >= 5:
        need(cur, 8, b"produce response log start offset")
        log_start_offset = get_int64(cur)
    if version >= 8:
        nerrors = read_array_length(cur, flexible, False, 6, b"produce response record errors")
        for e in range(nerrors):
            need(cur, 4, b"produce response batch index")
            batch_index = get_int32(cur)
            message = read_string(cur, flexible, True,
                                  b"produce response batch index error message")
            if make:
                record_errors.append((batch_index, message))
            if flexible:
                skip_tagged_fields(cur)
        error_message = read_string(cur, flexible, True, b"produce response error message")
    if flexible:
        skip_tagged_fields(cur)
    if not make:
        return None
    return ProducePartitionResponse(index, error_code, base_offset, log_append_time_ms,
                                    log_start_offset, record_errors, error_message)


cdef class ProduceTopics(_WalkedSequence):
    """The topics of a decoded ProduceResponse: a read-only sequence of ProduceTopicResponse,
    made when looked at (its partitions too, one ProducePartitionResponse at a time).  Safe to
    share between threads (it only reads the buffer it was decoded from)."""

    cdef object read_item(self, Cursor* cur):
        cdef ProducePartitions partitions = ProducePartitions.__new__(ProducePartitions)
        name = read_topic(cur, self._version, partitions)
        self.share_buffer(partitions)
        return ProduceTopicResponse(name, partitions)


cdef class ProducePartitions(_WalkedSequence):
    """The partitions of one topic: a read-only sequence of ProducePartitionResponse."""

    cdef object read_item(self, Cursor* cur):
        return read_partition(cur, self._version, True)


for _cls in (ProduceTopics, ProducePartitions):
    _Sequence.register(_cls)


cdef inline Py_ssize_t partition_min_size(int version, bint flexible) noexcept:
    # index, error code, base offset, log append time, [log start offset], [record errors,
    # error message], [tagged fields]
    cdef Py_ssize_t n = 4 + 2 + 8 + 8
    if version >= 5:
        n += 8
    if version >= 8:
        n += 1 + 1 + 1 if flexible else 4 + 2
    return n
