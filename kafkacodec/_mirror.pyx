# cython: language_level=3
"""KIP-712 shallow mirroring, the hot parts: batches as records, trimming the first batch of a
fetch that starts inside it, raw multi-batch record sets and FetchResponse -> ProduceRequest.

Only the entry framing (offset, size, magic) and the batch header are read; a batch's bytes are
never decompressed except to trim the one batch that straddles the fetch offset.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t, INT32_MIN, INT32_MAX
from libc.string cimport memcpy

from kafkacodec._cursor cimport Cursor, cursor_init, raise_corrupt
from kafkacodec._writer cimport Writer, WriteBuffer, ensure, put_bytes, store_u64
from kafkacodec._format cimport (BatchHeader, next_entry, LOG_OVERHEAD, V2_HEADER_SIZE,
                                 CONTROL_FLAG, TRANSACTIONAL_FLAG, DELETE_HORIZON_FLAG,
                                 TIMESTAMP_LOG_APPEND, wrap_add, wrap_sub, increment_sequence,
                                 CODEC_NONE, CODEC_ZSTD)
from kafkacodec._v2 cimport V2Record, write_v2_record, write_v2_batch_header
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_open, walk_decompressed, walk_v2_record,
                               walk_next_inner,
                               pin_output, unpin_chunk, OPEN_COMPRESSED)

from kafkacodec._legacy cimport begin_legacy_wrapper, end_legacy_wrapper, wrapper_fits
from kafkacodec._compression cimport (compress_into, Decompressor, _Chunk, thread_decompressor,
                                      DEFAULT_MAX_DECOMPRESSED, LEVEL_DEFAULT)
from kafkacodec._crc cimport kc_crc_init
from kafkacodec.protocol._produce cimport _PartitionRecords, write_produce_request

import kafkacodec._types as _types
from kafkacodec.errors import (CorruptRecordError, RecordTooLargeError,
                               UnsupportedCompressionError, UnsupportedVersionError)


kc_crc_init()      # kc_crc.h keeps its dispatch state per extension module

cdef tuple _TIMESTAMP_TYPES = _types.TIMESTAMP_TYPES      # TimestampType by id + 1
cdef tuple _COMPRESSIONS = _types.COMPRESSIONS            # Compression by id


# A legacy entry's Size field is an int32: a wrapper whose compressed value makes it larger
# cannot be written (RecordTooLargeError).  A variable only so tests can lower the limit
# (_set_max_wrapper_size) instead of compressing 2 GiB.
cdef Py_ssize_t max_wrapper_size = INT32_MAX


def _set_max_wrapper_size(Py_ssize_t size):
    """Test hook: the largest Size a written wrapper may have (INT32_MAX); returns the old."""
    global max_wrapper_size
    old, max_wrapper_size = max_wrapper_size, size
    return old


cdef object as_byte_view(object data):
    """Any C-contiguous buffer as one dimension of its raw bytes (a non-contiguous one:
    TypeError from memoryview.cast)."""
    cdef object view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


# --- RawBytesBatchRecord ------------------------------------------------------------------------
cdef class RawBytesBatchRecord:
    """One whole batch (v2) or wrapper message (v0/v1) as a record (KIP-712).

    ``value`` is a zero-copy memoryview of the entire entry, still compressed (for a trimmed
    batch: a new bytes object).  ``offset`` is the batch's last offset; ``timestamp`` its max
    timestamp.  ``key`` and ``headers`` are None.  For a compressed v0/v1 wrapper the base offset
    and record count are not known without decompressing: they are None."""

    cdef readonly object value
    cdef readonly int64_t offset
    cdef readonly object base_offset
    cdef readonly int magic
    cdef readonly object compression
    cdef readonly object record_count
    cdef readonly int64_t timestamp
    cdef readonly object timestamp_type
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t partition_leader_epoch
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly bint trimmed

    @property
    def key(self):
        return None

    @property
    def headers(self):
        return None

    @property
    def size(self):
        return len(self.value)

    def __len__(self):
        return len(self.value)

    def __repr__(self):
        return (f"RawBytesBatchRecord(base_offset={self.base_offset}, offset={self.offset}, "
                f"magic={self.magic}, compression={self.compression!r}, "
                f"record_count={self.record_count}, size={len(self.value)}"
                f"{', trimmed' if self.trimmed else ''})")


cdef RawBytesBatchRecord make_record(const BatchHeader* h, object value, bint trimmed):
    cdef RawBytesBatchRecord r = RawBytesBatchRecord.__new__(RawBytesBatchRecord)
    r.value = value
    r.offset = h.last_offset
    r.magic = h.magic
    if h.compression > CODEC_ZSTD:  # ids 5-7 are not codecs: refuse before the lookup below
        raise UnsupportedCompressionError(f"unknown compression type id {h.compression}",
                                          position=h.position, offset=h.base_offset)
    r.compression = _COMPRESSIONS[h.compression]
    r.timestamp = h.max_timestamp
    r.timestamp_type = _TIMESTAMP_TYPES[h.timestamp_type + 1]    # -1 (magic 0), 0 or 1
    r.producer_id = h.producer_id
    r.producer_epoch = h.producer_epoch
    r.base_sequence = h.base_sequence
    r.partition_leader_epoch = h.partition_leader_epoch
    r.trimmed = trimmed
    if h.magic >= 2:
        r.base_offset = h.base_offset
        r.record_count = h.records_count
        r.is_transactional = (h.attributes & TRANSACTIONAL_FLAG) != 0
        r.is_control = (h.attributes & CONTROL_FLAG) != 0
    elif h.compression == CODEC_NONE:
        r.base_offset = h.base_offset
        r.record_count = 1
    else:
        r.base_offset = None
        r.record_count = None
    return r


def shallow_records(records, fetch_offset=None):
    """Yield a RawBytesBatchRecord per complete batch of a record set (one partition's records
    from a FetchResponse, a log segment slice, ...); a trailing partial batch is ignored.

    With `fetch_offset`, batches that end before it are skipped and the first batch that starts
    before it is replaced by a new batch holding only the records at or after it (trim_batch);
    every later batch is passed through byte for byte.
    """
    cdef object view = as_byte_view(records)
    cdef const unsigned char[::1] buf = view
    cdef Cursor cur
    cdef BatchHeader h
    cdef Py_ssize_t n = buf.shape[0]
    cdef bint check = fetch_offset is not None
    cdef int64_t start_offset = fetch_offset if check else 0
    cdef object trimmed
    cursor_init(&cur, &buf[0] if n else NULL, n, 0)
    while next_entry(&cur, &h):
        if check:
            if h.last_offset < start_offset:
                continue
            check = False     # only the first batch reaching the fetch offset can straddle it
            if needs_trim(&h, start_offset):
                trimmed = trim_entry(&buf[0] + h.position, &h, start_offset)
                if trimmed is None:          # no record left at or after the fetch offset
                    continue
                if trimmed is not True:
                    yield trimmed
                    continue
        yield make_record(&h, view[h.position:h.position + h.size], False)


cdef inline bint needs_trim(const BatchHeader* h, int64_t fetch_offset) noexcept:
    if h.magic >= 2:
        return h.base_offset < fetch_offset and h.records_count > 0 and not (h.attributes & CONTROL_FLAG)
    return h.compression != CODEC_NONE     # a compressed wrapper's first offset is inside it


def trim_batch(batch, int64_t fetch_offset):
    """Return a RawBytesBatchRecord for the records of one complete batch at or after
    `fetch_offset`: the batch itself (a view) when nothing is before the offset, a new batch
    otherwise, or None when no record is left."""
    cdef const unsigned char[::1] buf = as_byte_view(batch)
    cdef Cursor cur
    cdef BatchHeader h
    cdef object result
    cursor_init(&cur, &buf[0] if buf.shape[0] else NULL, buf.shape[0], 0)
    if not next_entry(&cur, &h) or cur.pos != buf.shape[0]:
        raise CorruptRecordError("trim_batch needs exactly one complete batch", position=0)
    if h.last_offset < fetch_offset:
        return None
    if needs_trim(&h, fetch_offset):
        result = trim_entry(&buf[0], &h, fetch_offset)
        if result is not True:
            return result
    return make_record(&h, as_byte_view(batch), False)


cdef object trim_entry(const unsigned char* entry, BatchHeader* h, int64_t fetch_offset):
    """A trimmed RawBytesBatchRecord, None (nothing left) or True (nothing to trim).  The
    batch walker reads the records (decompressed into the thread's pinned chunk)."""
    cdef BatchWalk w
    cdef const unsigned char* data
    cdef Py_ssize_t size = 0
    cdef Decompressor decompressor
    cdef _Chunk chunk = None
    w.h = h[0]
    try:
        if walk_open(&w, entry, &data, &size) == OPEN_COMPRESSED:
            decompressor = thread_decompressor()
            decompressor.max_size = DEFAULT_MAX_DECOMPRESSED
            data = decompressor.decompress_into(h.compression, h.magic, data, size, &size)
            chunk = pin_output(decompressor)
            walk_decompressed(&w, data, size)
        if h.magic >= 2:
            return trim_v2(&w, fetch_offset)
        return trim_legacy(&w, data, fetch_offset)
    finally:
        if chunk is not None:
            unpin_chunk(chunk)


cdef object trim_v2(BatchWalk* w, int64_t fetch_offset):
    cdef const BatchHeader* h = &w.h
    cdef V2Record rec
    cdef int32_t kept = 0, first_delta = 0
    cdef int64_t timestamp, delta, max_timestamp = -1, new_base_timestamp = 0
    cdef bint horizon = (h.attributes & DELETE_HORIZON_FLAG) != 0
    cdef WriteBuffer records = WriteBuffer(w.cur.end + 64)
    cdef BatchHeader out
    cdef bytes result
    # One pass: the first kept record fixes the new base offset and base timestamp; every kept
    # record is re-written with deltas relative to them (as stored: LogAppendTime keeps them).
    # walk_v2_record(): the records' deltas and bytes, no RecordView (a trim of small records
    # spent 4% more instructions filling views than dbff049's own loop, callgrind); its one
    # call site lets GCC inline it into this loop.
    while walk_v2_record(w, &rec):
        if wrap_add(h.base_offset, rec.offset_delta) < fetch_offset:
            continue
        timestamp = wrap_add(h.base_timestamp, rec.timestamp_delta)
        if kept == 0:
            first_delta = rec.offset_delta
            new_base_timestamp = h.base_timestamp if horizon else timestamp
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        kept += 1
        # deltas from the first kept record; offsets that wrapped past 2^63-1 can be kept
        # more than an int32 apart, which no batch can hold
        delta = <int64_t>rec.offset_delta - first_delta
        if delta < INT32_MIN or delta > INT32_MAX:
            raise_corrupt(&w.cur, b"record offset delta (over 2^31-1 from the first one kept)")
        write_v2_record(&records.w, <int32_t>delta, wrap_sub(timestamp, new_base_timestamp),
                        rec.key, rec.key_length, rec.value, rec.value_length,
                        rec.headers, rec.headers_size, rec.header_count)
    if kept == 0:
        return None
    if kept == h.records_count:
        return True                  # nothing before the fetch offset: keep the batch as is
    if h.compression != CODEC_NONE:
        body = WriteBuffer()
        compress_into(&(<WriteBuffer>body).w, h.compression, 2, records.w.buf, records.w.length,
                      LEVEL_DEFAULT)
    else:
        body = records
    out = h[0]
    out.base_offset = wrap_add(h.base_offset, first_delta)
    out.last_offset_delta = <int32_t>wrap_sub(h.last_offset, out.base_offset)
    out.base_timestamp = new_base_timestamp
    if h.timestamp_type != TIMESTAMP_LOG_APPEND:
        out.max_timestamp = max_timestamp
    if h.base_sequence >= 0:
        out.base_sequence = increment_sequence(h.base_sequence, first_delta)
    out.records_count = kept
    result = assemble_v2(&out, body)
    parse_v2_header_into(result, &out)
    return make_record(&out, result, True)


cdef bytes assemble_v2(const BatchHeader* h, object body):
    cdef Py_buffer view
    cdef bytes result
    cdef unsigned char* p
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        result = PyBytes_FromStringAndSize(NULL, V2_HEADER_SIZE + view.len)
        p = <unsigned char*>PyBytes_AS_STRING(result)
        memcpy(p + V2_HEADER_SIZE, view.buf, view.len)
        write_v2_batch_header(p, V2_HEADER_SIZE + view.len, h)
    finally:
        PyBuffer_Release(&view)
    return result


cdef int parse_v2_header_into(bytes batch, BatchHeader* h) except -1:
    cdef Cursor cur
    cursor_init(&cur, <const unsigned char*>PyBytes_AS_STRING(batch), len(batch), 0)
    next_entry(&cur, h)
    return 0


cdef object trim_legacy(BatchWalk* w, const unsigned char* data, int64_t fetch_offset):
    """A compressed wrapper (w: its inner set, decompressed at `data`): keep the inner
    messages at or after the fetch offset, as they are, in a new wrapper."""
    cdef const BatchHeader* h = &w.h
    cdef RecordView v
    cdef int64_t inner_offset, first_kept_inner = -1, max_timestamp = -1
    cdef int32_t kept = 0, total = 0
    cdef Py_ssize_t entry_size
    cdef WriteBuffer inner_set = WriteBuffer(w.cur.end)
    cdef WriteBuffer result
    cdef Py_ssize_t start, compressed
    cdef BatchHeader out
    cdef RawBytesBatchRecord record
    while walk_next_inner(w, &v):    # a compressed wrapper (needs_trim()): WALK_INNER
        total += 1
        if v.offset < fetch_offset:
            continue
        inner_offset = wrap_sub(v.offset, w.inner_base)       # as the message stores it
        if kept == 0:
            first_kept_inner = inner_offset
        if v.timestamp > max_timestamp:
            max_timestamp = v.timestamp
        entry_size = v.end - v.start
        ensure(&inner_set.w, entry_size)
        memcpy(inner_set.w.buf + inner_set.w.length, data + v.start, entry_size)
        # v1 relative offsets restart at 0 (the wrapper offset, the last, is unchanged);
        # the offset field is outside the message CRC.
        if h.magic == 1 and h.base_offset != 0:
            store_u64(inner_set.w.buf + inner_set.w.length,
                      <uint64_t>wrap_sub(inner_offset, first_kept_inner))
        inner_set.w.length += entry_size
        kept += 1
    if kept == 0:
        return None
    if kept == total:
        return True
    out = h[0]
    if h.magic == 1 and h.timestamp_type != TIMESTAMP_LOG_APPEND:
        out.max_timestamp = max_timestamp
    result = WriteBuffer()
    start = begin_legacy_wrapper(&result.w, h.magic, h.base_offset, out.max_timestamp,
                                 w.message.attributes, w.message.key, w.message.key_length)
    compressed = compress_into(&result.w, h.compression, h.magic, inner_set.w.buf,
                               inner_set.w.length, LEVEL_DEFAULT)
    if not wrapper_fits(&result.w, start, max_wrapper_size):
        raise RecordTooLargeError(
            f"the trimmed wrapper ({compressed} compressed bytes) is larger than a legacy "
            f"message's int32 size field can hold", position=h.position, offset=h.base_offset)
    end_legacy_wrapper(&result.w, start, <int32_t>compressed)     # fits: so does the value
    record = make_record(&out, result.getvalue(), True)
    record.base_offset = wrap_add(w.inner_base, first_kept_inner)
    record.record_count = kept
    return record


# --- RawBatchesBuilder ---------------------------------------------------------------------------
cdef Py_ssize_t count_entries(const unsigned char* data, Py_ssize_t n, Py_ssize_t* last_end) except -1:
    """Number of complete entries; *last_end = where the last one ends."""
    cdef Cursor cur
    cdef BatchHeader h
    cdef Py_ssize_t count = 0
    cursor_init(&cur, data, n, 0)
    while next_entry(&cur, &h):
        count += 1
    last_end[0] = cur.pos
    return count


cdef class RawBatchesBuilder:
    """Accumulate raw batches (from any source: RawBytesBatchRecord, a fetched record set,
    bytes) into one record set for a ProduceRequest `records` field, up to `max_bytes`.

    append() returns False, appending nothing, when the batch would take the set past
    `max_bytes` (send what was built, then start a new set); it raises RecordTooLargeError when
    the batch alone is larger than `max_bytes` (it could never be sent), and CorruptRecordError
    when the bytes are not whole batches.  Each appended byte is copied once."""

    cdef WriteBuffer _buffer
    cdef readonly Py_ssize_t max_bytes
    cdef readonly Py_ssize_t batch_count

    def __init__(self, Py_ssize_t max_bytes):
        if max_bytes < LOG_OVERHEAD:
            raise ValueError(f"max_bytes must be at least {LOG_OVERHEAD}")
        self.max_bytes = max_bytes
        self._buffer = WriteBuffer(min(max_bytes, 1 << 20))
        self.batch_count = 0

    def append(self, batch) -> bool:
        cdef object source = batch.value if isinstance(batch, RawBytesBatchRecord) else batch
        cdef const unsigned char[::1] buf = as_byte_view(source)
        cdef Py_ssize_t n = buf.shape[0], end = 0, count
        cdef const unsigned char* p = &buf[0] if n else NULL
        count = count_entries(p, n, &end)
        if count == 0 or end != n:
            raise CorruptRecordError(
                "RawBatchesBuilder.append needs whole batches "
                f"({n - end} trailing bytes do not form a complete batch)", position=end)
        if n > self.max_bytes:
            raise RecordTooLargeError(
                f"a batch of {n} bytes can never fit max_bytes={self.max_bytes}", position=0)
        if self._buffer.w.length + n > self.max_bytes:
            return False
        put_bytes(&self._buffer.w, p, n)
        self.batch_count += count
        return True

    def has_room_for(self, Py_ssize_t size) -> bool:
        return self._buffer.w.length + size <= self.max_bytes

    @property
    def size_in_bytes(self) -> int:
        return self._buffer.w.length

    def __len__(self):
        return self._buffer.w.length

    def records(self) -> memoryview:
        """A zero-copy view of the record set (append() refuses to grow it while alive)."""
        return memoryview(self._buffer)

    def build(self) -> bytes:
        """The record set as bytes (a copy)."""
        return self._buffer.getvalue()

    def clear(self):
        self._buffer.clear()
        self.batch_count = 0


# --- FetchResponse -> ProduceRequest ---------------------------------------------------------------
cdef class _PartitionPlan:
    cdef Py_ssize_t size
    cdef list pieces          # (start, end) spans of `records`, or bytes of a trimmed batch
    cdef object records


cdef class _ForwardedRuns(_PartitionRecords):
    """fetch_to_produce's records fields: each partition's _PartitionPlan copied piece by
    piece from its fetch buffer."""

    cdef Py_ssize_t measure(self, object records) except -2:
        return (<_PartitionPlan>records).size

    cdef int write(self, Writer* w, object records, Py_ssize_t size) except -1:
        cdef _PartitionPlan plan = <_PartitionPlan>records
        cdef Py_buffer view
        cdef Py_ssize_t start, end
        PyObject_GetBuffer(plan.records, &view, PyBUF_SIMPLE)
        try:
            for piece in plan.pieces:
                if type(piece) is tuple:
                    start, end = piece
                    put_bytes(w, <const unsigned char*>view.buf + start, end - start)
                else:
                    put_bytes(w, <const unsigned char*>PyBytes_AS_STRING(piece), len(piece))
        finally:
            PyBuffer_Release(&view)
        return 0


cdef _ForwardedRuns FORWARDED = _ForwardedRuns()


def fetch_to_produce(fetch_response, *, int api_version=9, int32_t correlation_id=0,
                     client_id="kafkacodec", int16_t acks=-1, int32_t timeout_ms=30000,
                     transactional_id=None, fetch_offsets=None, topic_names=None,
                     bint drop_control_batches=True, Py_ssize_t max_batches_per_partition=1,
                     dict next_offsets=None, WriteBuffer out=None):
    """Turn a decoded FetchResponse into a framed ProduceRequest for the same topics and
    partitions, written by protocol's ProduceRequest writer: each contiguous run of forwarded
    batches is copied once from the fetch buffer into the returned WriteBuffer (no
    decompression).  Returns None when no partition has a complete batch to forward.

    - Partitions with an error code or null/empty records, and trailing partial batches, are
      left out.
    - `fetch_offsets` {(topic, partition): offset}: batches ending before the offset are
      skipped and the first batch starting before it is trimmed (trim_batch).
    - `drop_control_batches` (default): transaction markers are not forwarded (brokers refuse
      control batches from clients).
    - `max_batches_per_partition` (default 1): real brokers accept exactly one batch per
      partition per ProduceRequest v3+ (INVALID_RECORD otherwise; KIP-712 was never adopted).
      -1 = every batch, for a broker that accepts more.
    - `next_offsets`, when given, receives {(topic, partition): last forwarded offset + 1}.
    - Fetch v13+ names topics by id: pass `topic_names` {uuid.UUID: name}.
    - v0/v1 batches cannot be sent in ProduceRequest v3+: UnsupportedVersionError.
    """
    cdef Py_buffer view
    cdef Cursor cur
    cdef BatchHeader h
    cdef Py_ssize_t batches, span_start, span_end
    cdef int64_t fetch_offset, last_offset
    cdef bint check, have_offsets = fetch_offsets is not None
    cdef int32_t index
    cdef list topics = [], partitions
    cdef _PartitionPlan plan
    cdef object trimmed, name
    if api_version < 3 or api_version > 11:
        raise UnsupportedVersionError(f"Produce version {api_version} is not supported (3-11)")
    # Walk every partition's batch headers: what is forwarded becomes spans of the fetch
    # buffer (one per contiguous run of batches) and trimmed copies; nothing is copied yet.
    for topic in fetch_response.responses:
        name = topic.topic
        if name is None:
            if topic_names is None or topic.topic_id not in topic_names:
                raise KeyError(f"no topic name for topic id {topic.topic_id} (pass topic_names)")
            name = topic_names[topic.topic_id]
        partitions = []
        for part in topic.partitions:
            if part.error_code != 0 or part.records is None or len(part.records) == 0:
                continue
            index = part.partition_index
            plan = _PartitionPlan.__new__(_PartitionPlan)
            plan.pieces = []
            plan.size = 0
            plan.records = part.records
            fetch_offset = 0
            check = False
            if have_offsets:
                key = (name, index)
                if key in fetch_offsets:
                    fetch_offset = fetch_offsets[key]
                    check = True
            span_start = span_end = -1
            batches = 0
            last_offset = -1
            PyObject_GetBuffer(plan.records, &view, PyBUF_SIMPLE)
            try:
                cursor_init(&cur, <const unsigned char*>view.buf, view.len, 0)
                while (max_batches_per_partition < 0 or batches < max_batches_per_partition) \
                        and next_entry(&cur, &h):
                    trimmed = None
                    if h.magic < 2:
                        raise UnsupportedVersionError(
                            f"a magic {h.magic} batch cannot be sent in ProduceRequest v3+ "
                            f"(partition {name}-{index})",
                            position=part.records_position + h.position, offset=h.base_offset)
                    if h.compression == CODEC_ZSTD and api_version < 7:
                        raise UnsupportedCompressionError(
                            f"zstd batches need ProduceRequest v7+ (partition {name}-{index})",
                            position=part.records_position + h.position, offset=h.base_offset)
                    if check:
                        if h.last_offset < fetch_offset:
                            continue
                        check = False
                        if needs_trim(&h, fetch_offset):
                            trimmed = trim_entry(<const unsigned char*>view.buf + h.position,
                                                 &h, fetch_offset)
                            if trimmed is None:
                                continue
                            if trimmed is True:
                                trimmed = None
                    if drop_control_batches and (h.attributes & CONTROL_FLAG):
                        last_offset = h.last_offset
                        continue
                    batches += 1
                    last_offset = h.last_offset
                    if trimmed is not None:
                        if span_start >= 0:
                            plan.pieces.append((span_start, span_end))
                            span_start = -1
                        plan.pieces.append((<RawBytesBatchRecord>trimmed).value)
                        plan.size += len((<RawBytesBatchRecord>trimmed).value)
                        continue
                    if span_start >= 0 and h.position == span_end:
                        span_end += h.size
                    else:
                        if span_start >= 0:
                            plan.pieces.append((span_start, span_end))
                        span_start = h.position
                        span_end = h.position + h.size
                    plan.size += h.size
                if span_start >= 0:
                    plan.pieces.append((span_start, span_end))
            finally:
                PyBuffer_Release(&view)
            if next_offsets is not None and last_offset >= 0:
                next_offsets[(name, index)] = last_offset + 1
            if plan.pieces:
                partitions.append((index, plan))
        if partitions:
            topics.append((name, partitions))
    if not topics:
        return None
    return write_produce_request(topics, api_version, correlation_id, client_id, acks, timeout_ms,
                                 transactional_id, out, FORWARDED)
