# cython: language_level=3
"""FetchRequest (api key 1) encoding and FetchResponse decoding, versions 4 to 16.

decode_fetch_response walks the whole response once with the read cursor (every length and
array count checked, every error raised there) and keeps only where each topic starts.  The
Python objects of a topic (its name, partitions, aborted transactions) are made when the topic
is looked at, and not kept by the response: a hostile response of tiny arrays cannot turn a
few megabytes into hundreds of megabytes of objects (protocol.md).  Each partition's records
come back as a memoryview slice of the caller's buffer (no copy), possibly ending in a partial
batch.  Tagged fields (partition: diverging epoch, current leader, snapshot id; top level:
node endpoints) are skipped.
"""

import uuid as _uuid
from collections.abc import Sequence as _Sequence

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t
from kafkacodec._cursor cimport Cursor, cursor_init, raise_corrupt
from kafkacodec._writer cimport (Writer, WriteBuffer, put_int8, put_int32, put_int64,
                                 put_bytes, put_uvarint)
from kafkacodec.protocol._wire cimport (skip_tagged_fields, put_length, put_string,
                                        put_empty_tags, begin_request, end_frame,
                                        checked_version, open_message, put_topic_id,
                                        API_FETCH, FETCH_FLEXIBLE)

from kafkacodec.protocol._types import AbortedTransaction, FetchTopicResponse, FetchResponse

MIN_VERSION = FETCH_MIN_VERSION
MAX_VERSION = FETCH_MAX_VERSION


cdef class FetchPartitionData:
    """One partition of a FetchResponse.

    ``records`` is a zero-copy memoryview slice of the buffer the response was decoded from
    (None when the broker sent null), made on first access; it may end with a partial batch.
    ``records_position`` / ``records_size`` say where it lies in that buffer (-1 when null).
    ``aborted_transactions`` is read from that buffer on first access."""

    @property
    def records(self):
        if self.records_position < 0:
            return None
        if self._records is None:
            self._records = self._buffer[self.records_position:
                                         self.records_position + self.records_size]
        return self._records

    @property
    def aborted_transactions(self):
        """A read-only sequence of AbortedTransaction(producer_id, first_offset) (16 bytes an
        entry until one is looked at), or None when the broker sent null."""
        cdef Py_buffer view
        cdef Cursor cur
        cdef AbortedTransactions aborted
        cdef Py_ssize_t i
        if self._aborted_count < 0 or self._aborted is not None:
            return self._aborted
        aborted = AbortedTransactions.__new__(AbortedTransactions)
        aborted._pairs = <int64_t*>PyMem_Malloc(2 * sizeof(int64_t) * max(self._aborted_count, 1))
        if aborted._pairs == NULL:
            raise MemoryError()
        PyObject_GetBuffer(self._buffer, &view, PyBUF_SIMPLE)
        try:
            cursor_init(&cur, <const unsigned char*>view.buf, view.len, 0)
            cur.pos = self._aborted_position
            for i in range(self._aborted_count):
                read_aborted_transaction(&cur, self._flexible, &aborted._pairs[2 * i],
                                         &aborted._pairs[2 * i + 1])
                aborted._count += 1
        finally:
            PyBuffer_Release(&view)
        self._aborted = aborted
        return aborted

    def __repr__(self):
        return (f"FetchPartitionData(partition_index={self.partition_index}, "
                f"error_code={self.error_code}, high_watermark={self.high_watermark}, "
                f"last_stable_offset={self.last_stable_offset}, "
                f"log_start_offset={self.log_start_offset}, "
                f"aborted_transactions={self.aborted_transactions!r}, "
                f"preferred_read_replica={self.preferred_read_replica}, "
                f"records_position={self.records_position}, records_size={self.records_size})")


cdef class _LazySequence:
    """A read-only sequence whose items are made on access, new ones every time (keep what
    you need); item_at() makes one.  Equal to any sequence of equal items."""

    def __len__(self):
        return self._count

    cdef object item_at(self, Py_ssize_t i):
        raise NotImplementedError

    def __getitem__(self, index):
        cdef Py_ssize_t i
        if isinstance(index, slice):
            return [self.item_at(i) for i in range(*index.indices(self._count))]
        i = index
        if i < 0:
            i += self._count
        if i < 0 or i >= self._count:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self.item_at(i)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self._count):
            yield self.item_at(i)

    def __reversed__(self):
        cdef Py_ssize_t i
        for i in range(self._count - 1, -1, -1):
            yield self.item_at(i)

    def index(self, value, start=0, stop=None):
        for i in range(*slice(start, stop).indices(self._count)):
            if self.item_at(i) == value:
                return i
        raise ValueError(f"{value!r} is not in the {type(self).__name__}")

    def count(self, value):
        return sum(1 for item in self if item == value)

    def __eq__(self, other):
        if not isinstance(other, _Sequence) or isinstance(other, (str, bytes, bytearray)):
            return NotImplemented
        return len(other) == self._count and all(a == b for a, b in zip(self, other))

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None


@cython.no_gc            # holds a plain array only
cdef class AbortedTransactions(_LazySequence):
    """The aborted transactions of a partition: (producer_id, first_offset) pairs in one
    array; indexing makes an AbortedTransaction."""

    def __dealloc__(self):
        PyMem_Free(self._pairs)

    cdef object item_at(self, Py_ssize_t i):
        return AbortedTransaction(self._pairs[2 * i], self._pairs[2 * i + 1])

    def __repr__(self):
        return repr(list(self))


cdef class _WalkedSequence(_LazySequence):
    """Items read again from the decoded buffer at the positions the first walk kept (8
    bytes an item).  The buffer was validated then, so reading only raises if the caller
    changed its bytes since (CorruptRecordError)."""

    def __dealloc__(self):
        PyMem_Free(self._starts)

    cdef int allocate(self, Py_ssize_t count) except -1:
        """Room for `count` starts, in one allocation (counts are bounded by the bytes left)."""
        self._starts = <Py_ssize_t*>PyMem_Malloc(max(count, 1) * sizeof(Py_ssize_t))
        if self._starts == NULL:
            raise MemoryError()
        self._count = count
        return 0

    cdef object item_at(self, Py_ssize_t i):
        cdef Py_buffer view
        cdef Cursor cur
        PyObject_GetBuffer(self._buffer, &view, PyBUF_SIMPLE)
        try:
            cursor_init(&cur, <const unsigned char*>view.buf, min(self._end, view.len), 0)
            cur.pos = self._starts[i]
            return self.read_item(&cur)
        finally:
            PyBuffer_Release(&view)

    cdef int share_buffer(self, _WalkedSequence child) except -1:
        """`child` (an item's inner sequence, such as a topic's partitions) reads this buffer."""
        child._buffer = self._buffer
        child._version = self._version
        child._end = self._end
        return 0

    cdef object read_item(self, Cursor* cur):
        raise NotImplementedError

    def __repr__(self):
        return repr(list(self))


cdef class FetchTopics(_WalkedSequence):
    """The topics of a decoded FetchResponse: a read-only sequence of FetchTopicResponse,
    made when looked at (a topic's partitions too, one FetchPartitionData at a time)."""

    cdef object read_item(self, Cursor* cur):
        cdef const unsigned char* name
        cdef Py_ssize_t name_length, p
        cdef FetchPartitions partitions = FetchPartitions.__new__(FetchPartitions)
        cdef FetchPartitionHeader h
        cdef bint flexible = self._version >= FETCH_FLEXIBLE
        partitions.allocate(read_fetch_topic(cur, self._version, flexible, &name, &name_length))
        if self._version >= FETCH_TOPIC_IDS:
            topic = None
            topic_id = _uuid.UUID(bytes=(<char*>name)[:16])
        else:
            topic = topic_name(cur, name, name_length)
            topic_id = None
        for p in range(partitions._count):
            partitions._starts[p] = cur.pos
            read_fetch_partition(cur, self._version, flexible, &h)
        self.share_buffer(partitions)
        return FetchTopicResponse(topic, topic_id, partitions)

    def __repr__(self):
        return f"<FetchTopics: {self._count} topic(s) of a Fetch v{self._version} response>"


cdef class FetchPartitions(_WalkedSequence):
    """The partitions of one topic: a read-only sequence of FetchPartitionData."""

    cdef object read_item(self, Cursor* cur):
        cdef FetchPartitionHeader h
        cdef bint flexible = self._version >= FETCH_FLEXIBLE
        cdef FetchPartitionData part = FetchPartitionData.__new__(FetchPartitionData)
        read_fetch_partition(cur, self._version, flexible, &h)
        part.partition_index = h.partition_index
        part.error_code = h.error_code
        part.high_watermark = h.high_watermark
        part.last_stable_offset = h.last_stable_offset
        part.log_start_offset = h.log_start_offset
        part.preferred_read_replica = h.preferred_read_replica
        part.records_position = h.records_pos
        part.records_size = h.records_size
        part._aborted_position = h.aborted_pos
        part._aborted_count = h.aborted_count
        part._flexible = flexible
        part._buffer = self._buffer
        return part

    def __repr__(self):
        return f"<FetchPartitions: {self._count} partition(s)>"


for _cls in (AbortedTransactions, FetchTopics, FetchPartitions):
    _Sequence.register(_cls)


cdef object topic_name(Cursor* cur, const unsigned char* name, Py_ssize_t length):
    """The topic name as str; invalid UTF-8 is a CorruptRecordError."""
    try:
        return PyUnicode_DecodeUTF8(<const char*>name, length, NULL)
    except UnicodeDecodeError:
        cur.pos = name - cur.data
        raise_corrupt(cur, b"fetch response topic name (not UTF-8)")


cdef int check_version(object version) except -1:
    return checked_version(version, b"Fetch", FETCH_MIN_VERSION, FETCH_MAX_VERSION)


cdef object as_byte_view(object data):
    """A 1-d unsigned-byte memoryview of any contiguous buffer (for zero-copy slicing)."""
    cdef object view = memoryview(data)
    if view.ndim != 1 or view.format != "B" or view.itemsize != 1:
        view = view.cast("B")
    return view


def decode_fetch_response(data, api_version, Py_ssize_t offset=0, Py_ssize_t size=-1,
                          bint header=True):
    """Decode a FetchResponse from `data[offset:offset+size]` (size -1: to the end).

    `data` is any C-contiguous buffer, read as raw bytes; it starts at the response header's
    correlation id (the int32 frame size already read), unless `header` is False.  The header
    version follows the api version (v1 with a tagged section from version 12).  Records are
    memoryview slices of `data`; `responses` re-reads topics from it on access (see
    FetchTopics), so the result keeps a read-only export of `data` alive.
    """
    cdef int version = check_version(api_version)
    cdef bint flexible = version >= FETCH_FLEXIBLE
    cdef Py_buffer view
    cdef Cursor cur
    cdef FetchPartitionHeader h
    cdef const unsigned char* name
    cdef int32_t correlation_id, throttle_time_ms, session_id
    cdef int16_t error_code
    cdef Py_ssize_t ntopics, nparts, t, p, name_length, decoded
    cdef FetchTopics topics = FetchTopics.__new__(FetchTopics)
    open_message(&view, data, offset, size, &cur)
    try:
        ntopics = read_fetch_start(&cur, version, flexible, header, &correlation_id,
                                   &throttle_time_ms, &error_code, &session_id)
        topics.allocate(ntopics)
        for t in range(ntopics):
            topics._starts[t] = cur.base + cur.pos
            nparts = read_fetch_topic(&cur, version, flexible, &name, &name_length)
            if version < FETCH_TOPIC_IDS:
                topic_name(&cur, name, name_length)          # validated now, made on access
            for p in range(nparts):
                read_fetch_partition(&cur, version, flexible, &h)
            if flexible:
                skip_tagged_fields(&cur)
        if flexible:
            skip_tagged_fields(&cur)
        decoded = cur.pos
        topics._end = cur.base + cur.end
    finally:
        PyBuffer_Release(&view)
    topics._version = version
    if ntopics:
        topics._buffer = as_byte_view(data)
    return FetchResponse(version, correlation_id if header else None, throttle_time_ms,
                         error_code, session_id, topics, decoded)


def encode_fetch_request(topics, *, api_version=12, int32_t correlation_id=0,
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
    cdef int version = check_version(api_version)
    cdef WriteBuffer out = WriteBuffer(256)
    cdef Writer* w = &out.w
    cdef bint flexible = version >= FETCH_FLEXIBLE
    cdef Py_ssize_t frame
    cdef bytes topic_id
    frame = begin_request(w, API_FETCH, version, correlation_id, client_id, flexible)
    if version < 15:
        put_int32(w, replica_id)
    put_int32(w, max_wait_ms)
    put_int32(w, min_bytes)
    put_int32(w, max_bytes)
    put_int8(w, isolation_level)
    if version >= 7:
        put_int32(w, session_id)
        put_int32(w, session_epoch)
    topics = list(topics)
    put_length(w, len(topics), flexible, True)
    for topic, partitions in topics:
        if version >= 13:
            put_topic_id(w, topic)
        else:
            put_string(w, topic, flexible)
        partitions = list(partitions)
        put_length(w, len(partitions), flexible, True)
        for entry in partitions:
            put_int32(w, entry[0])                       # Partition
            if version >= 9:
                put_int32(w, -1)                         # CurrentLeaderEpoch: unknown
            put_int64(w, entry[1])                       # FetchOffset
            if version >= 12:
                put_int32(w, -1)                         # LastFetchedEpoch: unknown
            if version >= 5:
                put_int64(w, -1)                         # LogStartOffset: consumers send -1
            put_int32(w, entry[2] if len(entry) > 2 else partition_max_bytes)
            if flexible:
                put_empty_tags(w)
        if flexible:
            put_empty_tags(w)
    if version >= 7:
        put_length(w, 0, flexible, True)                 # ForgottenTopicsData: none
    if version >= 11:
        put_string(w, rack_id, flexible)
    if flexible:
        put_empty_tags(w)
    end_frame(w, frame)
    return out.getvalue()
