# cython: language_level=3
"""Reading record sets (issue 2): MemoryRecords, FileRecords, RecordBatch and Record.

Shape of the module
- `_Buffer` holds the caller's buffer (one buffer-protocol export, or a mapped file) and counts
  our own users of it: memoryviews we handed out, loops running without the GIL, and reads
  during which Python code may run (a GC-tracked allocation can run a finaliser).  Closing a
  FileRecords marks it released at once (every batch and record set then raises
  BufferReleasedError) and unmaps when the last user is gone, so no pointer ever dangles.
  Nothing reads the buffer after a point where Python code may have run unless it counted
  itself a user before that point.
- A FileRecords mapping is guarded against truncation by another process (_mapguard): a read
  past the cut reads zeros instead of SIGBUS.  Every read of the mapping checks the guard
  afterwards (`check_cut`, a load while intact) and every failure asks whether the file shrank
  (`explain`, an fstat), raising FileTruncatedError instead of what the zeros looked like.
- `Records` (base of MemoryRecords and FileRecords) walks entries with `frame_entry()`, a
  GIL-free framing step that follows either the in-memory rules (spec §9.1) or the file rules
  (§9.2), shared with every other walker in _format.pxd; errors are raised afterwards by
  `raise_frame_error()`.
- `RecordBatch` is a parsed 61-byte (or legacy) header plus the batch's place in the buffer.
- Decoding is lazy, one record per next() (`_RecordIterator`), as Kafka's iterators are: a
  corrupt record ends the iteration after the records before it.  A compressed batch is
  decompressed once, into the thread's reusable Decompressor chunk, which the iterator pins
  while it reads from it: no copy before or after decompressing, no list of records.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_Fetch, PyErr_Restore
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kafkacodec._cursor cimport Cursor, cursor_init, load_u32, load_u64
from kafkacodec._format cimport (
    BatchHeader, parse_entry_header, compute_crc, frame_entry, raise_frame_error, FRAME_END,
    FRAME_OK, LOG_OVERHEAD, SIZE_OFFSET, MAGIC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC, V0_RECORD_OVERHEAD, V1_RECORD_OVERHEAD, V2_HEADER_SIZE,
    V2_RECORDS_COUNT_OFFSET, COMPRESSION_MASK, TRANSACTIONAL_FLAG, CONTROL_FLAG,
    DELETE_HORIZON_FLAG, NO_SEQUENCE, wrap_add,
    increment_sequence, CODEC_NONE, CODEC_ZSTD, V2_ATTRIBUTES_OFFSET)
from kafkacodec._v2 cimport V2Record, read_v2_record, read_v2_record_checked, scan_v2_record, \
    read_v2_header, read_control_type, \
    read_end_txn_coordinator_epoch, record_timestamp
from kafkacodec._legacy cimport LegacyMessage, read_legacy_message, next_inner_entry, \
    inner_base_offset, inner_timestamp, inner_timestamp_type
from kafkacodec._crc cimport kc_crc_init
from kafkacodec._compression cimport _Chunk, Decompressor, DEFAULT_MAX_DECOMPRESSED
from kafkacodec._mapguard cimport Guard, KC_INTACT, ensure_handler, kc_guard_cut
from kafkacodec._prefetch cimport kc_prefetch
cimport numpy as cnp

import os as _os
import threading as _threading

import numpy as _np

from kafkacodec._mapguard import map_file
from kafkacodec._types import Compression, ControlType, TimestampType
from kafkacodec.errors import (BufferReleasedError, ConcurrentUseError, CorruptRecordError,
                               FileTruncatedError, InvalidCrcError, KafkaCodecError,
                               UnsupportedCompressionError, UnsupportedVersionError)

kc_crc_init()
cnp.import_array()

cdef tuple _TIMESTAMP_TYPES = (TimestampType.NO_TIMESTAMP_TYPE, TimestampType.CREATE_TIME,
                               TimestampType.LOG_APPEND_TIME)
cdef tuple _COMPRESSIONS = tuple(Compression)
cdef tuple _CONTROL_TYPES = tuple(ControlType)
cdef tuple _NO_HEADERS = ()


# --- the caller's buffer --------------------------------------------------------------------
# The cyclic GC and the buffers we hold or export (a dead cycle torn down by the collector
# crashed the process, issue 14):
# - it must not clear (set to None) the fields of an object that exports or holds a buffer:
#   the releases that run while the collector tears the cycle down call back into it
#   (Records/RecordBatch.__releasebuffer__ -> _buf.leave(); _Buffer.free() closes its mapping;
#   _RecordIterator.__dealloc__ unpins its chunk).  These classes keep tp_traverse and drop
#   tp_clear (no_gc_clear): the collector breaks such a cycle at its other members;
# - it must not reach the caller's object through our export of it: CPython's memoryview
#   tp_clear drops its managed buffer even while exported (it only reports "memoryview has 1
#   exported buffer"), and our release then crashed in the cleared view.  So the Py_buffer sits
#   in a struct, which Cython's tp_traverse does not look into: the export is a strong
#   reference the collector does not see, like ResponseRingBuffer.pool_view.  A cycle through
#   the caller's object back to the records is then never collected (a leak, not a crash).
cdef struct Export:
    Py_buffer view


@cython.final
@cython.no_gc_clear
cdef class _Buffer:
    """One export of the caller's buffer (or a file we mapped) and the count of our users."""
    cdef Export export             # .view: not traversed by the cyclic GC (see above)
    cdef bint has_view
    cdef const unsigned char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t users          # live memoryviews we exported + reads in progress (see enter)
    cdef Py_ssize_t verified_end   # a mapped file: read intact up to here at the last fstat
    cdef bint released             # closed: refuse access from now on
    cdef object mapping            # FileRecords: the MappedFile to close once nobody uses it
    cdef Guard guard               # ...and its truncation guard (None for MemoryRecords)

    cdef int attach(self, object obj) except -1:
        PyObject_GetBuffer(obj, &self.export.view, PyBUF_SIMPLE)
        self.has_view = True
        self.data = <const unsigned char*>self.export.view.buf
        self.size = self.export.view.len
        return 0

    cdef inline int enter(self) except -1:
        if self.released:
            raise BufferReleasedError("the records' file was closed")
        self.users += 1
        return 0

    cdef inline void leave(self) noexcept:
        self.users -= 1
        if self.released and self.users == 0:
            self.free()

    cdef void close(self) noexcept:
        self.released = True
        if self.users == 0:
            self.free()

    cdef void free(self) noexcept:
        # Also runs from __releasebuffer__ when a failing call drops its argument, with the
        # call's error pending: the Python code below must neither see nor clear that error.
        cdef PyObject* kind
        cdef PyObject* error
        cdef PyObject* traceback
        PyErr_Fetch(&kind, &error, &traceback)
        if self.has_view:
            self.has_view = False
            PyBuffer_Release(&self.export.view)
        self.data = NULL
        self.guard = None
        if self.mapping is not None:
            mapping, self.mapping = self.mapping, None
            try:
                mapping._release()     # unregister from the guard, unmap
            except BaseException:      # already closed: nothing left to free
                pass
        PyErr_Restore(kind, error, traceback)

    cdef inline bint intact(self) noexcept:
        """No cut seen in the mapped file (always, for a caller's buffer): a load and a
        compare, for per-record paths to test before calling check_cut()."""
        return (self.guard is None or self.guard.slot == NULL
                or kc_guard_cut(self.guard.slot) == KC_INTACT)

    cdef int check_cut(self, Py_ssize_t end, Py_ssize_t position, object offset) except -1:
        """After reading the buffer up to `end` (while a user, or with nothing run since the
        read): FileTruncatedError when another process cut the mapped file before `end`: a
        fault past the cut, or (one fstat, when `end` passes what the last one saw) a file now
        shorter than `end`, whose last page reads zeros without a fault."""
        cdef Guard guard = self.guard      # held: a close() while the check runs drops ours
        mapping = self.mapping
        if guard is not None and (end > self.verified_end or not self.intact()):
            self.verified_end = guard.check(mapping, end, position, offset, None)
        return 0

    cdef int check_all(self, Py_ssize_t end, Py_ssize_t position) except -1:
        """At the end of a walk that read up to `end`: one fstat whatever the last one saw (the
        file may have been cut meanwhile inside what the walk had checked before)."""
        self.verified_end = 0
        return self.check_cut(end, position, None)

    cdef int explain(self, object cause, Py_ssize_t end, Py_ssize_t position,
                     object offset) except -1:
        """A read up to `end` failed (`cause`: its error, or None for a checksum mismatch):
        FileTruncatedError, chained to it, when the mapped file is now shorter than `end` (its
        last page reads zeros past the new end without any fault).  Returns 0 otherwise, and
        the caller raises its own error."""
        cdef Guard guard = self.guard
        mapping = self.mapping
        if guard is not None and mapping is not None:
            guard.check(mapping, end, position, offset, cause)
        return 0

    cdef int frame_error(self, int code, const unsigned char* entry, Py_ssize_t position,
                         Py_ssize_t end) except -1:
        """Raise the framing error of frame_entry()'s `code` for the entry at `entry`, or
        FileTruncatedError when the file shrank under it (`end`: the bytes the framing read)."""
        try:
            raise_frame_error(code, entry, position)
        except KafkaCodecError as err:
            self.explain(err, end, position, err.offset)
            raise

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.export.view)


cdef inline int32_t sequence_of(int32_t base_sequence, int32_t delta) noexcept nogil:
    # A record's sequence: none without a base sequence, else the base incremented (wrapping).
    return NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, delta)


# --- decompression ---------------------------------------------------------------------------
# One reusable Decompressor per thread.  An iterator reading a decompressed batch pins the
# chunk it was written to (see _RecordIterator), so the next batch goes to another chunk
# only while the first is still being read.
_local = _threading.local()


cdef Decompressor thread_decompressor():
    try:
        return <Decompressor>_local.decompressor
    except AttributeError:
        _local.decompressor = Decompressor()
        return <Decompressor>_local.decompressor


# --- records ---------------------------------------------------------------------------------
@cython.final
@cython.freelist(1024)
@cython.no_gc          # holds only bytes/None and a tuple of (str, bytes): no cycles possible
cdef class Record:
    """One record: offset, timestamp, timestamp_type, key, value, headers (and for v2 the
    producer sequence; for control records the decoded marker)."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int32_t sequence
    cdef int8_t _timestamp_type
    cdef int16_t _control_type        # -1: not a control record
    cdef int64_t _coordinator_epoch   # -1: not an ABORT/COMMIT marker
    # key, value and headers are exposed as member descriptors (see expose_slots below)
    cdef object key
    cdef object value
    cdef tuple headers

    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[self._timestamp_type + 1]

    @property
    def is_control(self):
        return self._control_type != -1

    @property
    def control_type(self):
        """ControlType for a control record (an int for types this version does not know),
        None for a data record."""
        if self._control_type == -1:
            return None
        if 0 <= self._control_type < len(_CONTROL_TYPES):
            return _CONTROL_TYPES[self._control_type]
        return <int>self._control_type

    @property
    def coordinator_epoch(self):
        """The coordinator epoch of an ABORT/COMMIT marker, else None."""
        return None if self._coordinator_epoch == -1 else self._coordinator_epoch

    def _fields(self):
        return (self.offset, self.timestamp, self._timestamp_type, self.sequence, self.key, self.value,
                self.headers, self._control_type, self._coordinator_epoch)

    def __eq__(self, other):
        """Value equality: every field a reader sees (whichever buffer or batch it came from)."""
        if not isinstance(other, Record):
            return NotImplemented
        return self is other or self._fields() == (<Record>other)._fields()

    def __hash__(self):
        """Consistent with ==: a Record is an immutable value (its fields are read-only)."""
        return hash(self._fields())

    def __repr__(self):
        extra = f", control_type={self.control_type!r}" if self._control_type != -1 else ""
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}{extra})")


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    enum:
        T_OBJECT_EX
        READONLY

cdef extern from "Python.h":
    ctypedef struct _TypeWithDict "PyTypeObject":
        PyObject* tp_dict
    object PyDescr_NewMember(type cls, PyMemberDef* member)
    void PyType_Modified(type cls)
    const char* PyUnicode_AsUTF8(object text) except NULL

cdef PyMemberDef _RECORD_MEMBERS[3]


cdef int expose_slots(type cls, object sample, tuple names, tuple markers,
                      PyMemberDef* members) except -1:
    """Expose object fields of a cdef class as read-only member descriptors (T_OBJECT_EX):
    CPython 3.11+ specialises attribute loads of those (LOAD_ATTR_SLOT), not of the getset
    descriptors Cython generates.  Each field's offset is found by locating its marker object
    in `sample` (no dependence on Cython's generated struct names)."""
    cdef PyObject** words = <PyObject**><void*>sample
    cdef Py_ssize_t i, k, count = cls.__basicsize__ // sizeof(PyObject*)
    cdef dict type_dict = <dict>(<_TypeWithDict*>cls).tp_dict
    for k in range(len(names)):
        for i in range(count):
            if words[i] == <PyObject*>markers[k]:
                break
        else:
            raise RuntimeError(f"field {names[k]!r} not found in {cls.__name__}")
        members[k].name = PyUnicode_AsUTF8(names[k])   # interned literals: live forever
        members[k].type = T_OBJECT_EX
        members[k].offset = i * sizeof(PyObject*)
        members[k].flags = READONLY
        members[k].doc = NULL
        type_dict[names[k]] = PyDescr_NewMember(cls, &members[k])
    PyType_Modified(cls)
    return 0


cdef int expose_record_fields() except -1:
    cdef Record sample = Record.__new__(Record)
    sample.key = object()
    sample.value = object()
    sample.headers = ((),)
    return expose_slots(Record, sample, ("key", "value", "headers"),
                        (sample.key, sample.value, sample.headers), _RECORD_MEMBERS)


expose_record_fields()


cdef inline object bytes_or_none(const unsigned char* p, int32_t length):
    if p == NULL:
        return None
    return PyBytes_FromStringAndSize(<const char*>p, length)


cdef tuple decode_headers(const V2Record* rec, Py_ssize_t base):
    cdef Cursor c
    cdef const unsigned char* key
    cdef const unsigned char* value
    cdef int32_t key_length, value_length, i
    cdef tuple headers = PyTuple_New(rec.header_count)
    cdef tuple pair
    cursor_init(&c, rec.headers, rec.headers_size, base)
    for i in range(rec.header_count):
        read_v2_header(&c, &key, &key_length, &value, &value_length)
        # Java decodes keys with new String(bytes, UTF_8): malformed input becomes U+FFFD.
        pair = (PyUnicode_DecodeUTF8(<const char*>key, key_length, "replace"),
                bytes_or_none(value, value_length))
        Py_INCREF(pair)
        PyTuple_SET_ITEM(headers, i, pair)
    return headers


cdef int decode_control(Record r, const V2Record* rec, Py_ssize_t position) except -1:
    cdef int control_type = read_control_type(rec, position)
    r._control_type = <int16_t>control_type
    if control_type == 0 or control_type == 1:       # ABORT / COMMIT: end-transaction marker
        r._coordinator_epoch = read_end_txn_coordinator_epoch(rec, position)
    return 0


cdef Record v2_record(const BatchHeader* h, const V2Record* rec, Py_ssize_t base,
                      Py_ssize_t record_start, Py_ssize_t record_end, _Buffer in_place):
    """The Record of one parsed v2 record (spec §6.1: offset and timestamp are deltas from
    the batch's; LogAppendTime replaces the record's timestamp with MaxTimestamp).
    `in_place`: the caller's buffer when `rec` points into it (the record spans
    [record_start, record_end) there), else None.

    Everything is read from `rec` before the first GC-tracked allocation (the header tuples),
    which may run a collection and with it a finaliser that closes the file; the headers are
    then decoded as a counted user of the buffer."""
    cdef Record r = Record.__new__(Record)     # not GC-tracked: no collection runs here
    r.offset = wrap_add(h.base_offset, rec.offset_delta)
    r.timestamp = record_timestamp(h, rec)
    r._timestamp_type = h.timestamp_type
    r.sequence = sequence_of(h.base_sequence, rec.offset_delta)
    r._control_type = -1
    r._coordinator_epoch = -1
    r.key = None if rec.key == NULL else PyBytes_FromStringAndSize(<const char*>rec.key,
                                                                   rec.key_length)
    r.value = None if rec.value == NULL else PyBytes_FromStringAndSize(
        <const char*>rec.value, rec.value_length)
    if h.attributes & CONTROL_FLAG:
        decode_control(r, rec, record_start)
    if rec.header_count == 0:
        r.headers = _NO_HEADERS
        if in_place is not None and not in_place.intact():
            in_place.check_cut(record_end, record_start, h.base_offset)
    elif in_place is None:
        r.headers = decode_headers(rec, base)
    else:
        in_place.enter()
        try:
            r.headers = decode_headers(rec, base)
            if not in_place.intact():
                in_place.check_cut(record_end, record_start, h.base_offset)
        finally:
            in_place.leave()
    return r


cdef Record legacy_record(const LegacyMessage* m, int64_t offset, int8_t timestamp_type,
                          int64_t timestamp):
    cdef Record r = Record.__new__(Record)
    r.offset = offset
    r.timestamp = timestamp
    r._timestamp_type = timestamp_type
    r.sequence = NO_SEQUENCE
    r._control_type = -1
    r._coordinator_epoch = -1
    r.key = bytes_or_none(m.key, m.key_length)
    r.value = bytes_or_none(m.value, m.value_length)
    r.headers = _NO_HEADERS
    return r


cdef int check_legacy_codec(const BatchHeader* h) except -1:
    if h.compression == CODEC_ZSTD:
        raise UnsupportedCompressionError(f"zstd compression is not allowed for magic {h.magic}",
                                          position=h.position + MAGIC_OFFSET + 1)
    if h.compression > CODEC_ZSTD:
        raise UnsupportedCompressionError(f"unknown compression type id {h.compression}",
                                          position=h.position + MAGIC_OFFSET + 1)
    return 0


cdef object in_batch(object err, const BatchHeader* h, Py_ssize_t data_position,
                     bint decompressed):
    """The same error, naming the batch and (for decompressed data) where it was found."""
    if err.offset is not None and not decompressed:
        return err
    if decompressed and err.position is not None:
        return err.with_context(suffix=f" at byte {err.position} of the decompressed data",
                                position=data_position, offset=h.base_offset)
    return err.with_context(position=data_position if decompressed else err.position,
                            offset=h.base_offset)


# --- batches ---------------------------------------------------------------------------------
@cython.final
@cython.no_gc_clear    # see _Buffer
cdef class RecordBatch:
    """One entry of a record set (a v2 batch, or a v0/v1 message / compressed wrapper), read
    without decoding its records.  Iterating it yields its records."""
    cdef BatchHeader h
    cdef _Buffer _buf
    cdef Py_ssize_t _max_decompressed
    cdef object _base_offset            # legacy compressed wrappers: found by decompressing

    def __init__(self):
        raise TypeError("RecordBatch objects come from MemoryRecords/FileRecords.batches()")

    cdef inline const unsigned char* _entry(self) except NULL:
        if self._buf.released:
            raise BufferReleasedError("the records' file was closed",
                                      position=self.h.position, offset=self.h.base_offset)
        return self._buf.data + self.h.position

    @property
    def magic(self):
        return self.h.magic

    @property
    def base_offset(self):
        """v2 BaseOffset; legacy: the first record's offset (decompresses a wrapper once)."""
        if self.h.magic >= 2 or self.h.compression == CODEC_NONE:
            return self.h.base_offset
        if self._base_offset is None:
            for record in self:                 # as Kafka: the first inner record's offset
                self._base_offset = record.offset
                break
        return self._base_offset

    @property
    def last_offset(self):
        return self.h.last_offset

    @property
    def next_offset(self):
        return wrap_add(self.h.last_offset, 1)     # nextOffset(): a Java long

    @property
    def last_offset_delta(self):
        return self.h.last_offset_delta

    @property
    def record_count(self):
        """v2 RecordsCount; 1 for an uncompressed legacy message; None for a legacy compressed
        wrapper (Kafka's countOrNull: unknown without decompressing)."""
        if self.h.magic >= 2 or self.h.compression == CODEC_NONE:
            return self.h.records_count
        return None

    @property
    def compression(self):
        if self.h.compression > CODEC_ZSTD:
            raise UnsupportedCompressionError(f"unknown compression type id {self.h.compression}",
                                              position=self.h.position, offset=self.h.base_offset)
        return _COMPRESSIONS[self.h.compression]

    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[self.h.timestamp_type + 1]

    @property
    def base_timestamp(self):
        return self.h.base_timestamp

    @property
    def max_timestamp(self):
        return self.h.max_timestamp

    @property
    def delete_horizon_ms(self):
        """The log cleaner's delete horizon (BaseTimestamp when attribute bit 6 is set)."""
        if self.h.magic >= 2 and self.h.attributes & DELETE_HORIZON_FLAG:
            return self.h.base_timestamp
        return None

    @property
    def crc(self):
        return self.h.crc

    @property
    def attributes(self):
        return self.h.attributes

    @property
    def producer_id(self):
        return self.h.producer_id

    @property
    def producer_epoch(self):
        return self.h.producer_epoch

    @property
    def base_sequence(self):
        return self.h.base_sequence

    @property
    def last_sequence(self):
        if self.h.base_sequence < 0:
            return NO_SEQUENCE
        return sequence_of(self.h.base_sequence, self.h.last_offset_delta)

    @property
    def is_transactional(self):
        return self.h.magic >= 2 and (self.h.attributes & TRANSACTIONAL_FLAG) != 0

    @property
    def is_control(self):
        return self.h.magic >= 2 and (self.h.attributes & CONTROL_FLAG) != 0

    @property
    def partition_leader_epoch(self):
        return self.h.partition_leader_epoch

    @property
    def size_in_bytes(self):
        return self.h.size

    @property
    def position(self):
        """Byte position of the batch in the buffer (in the file for FileRecords)."""
        return self.h.position

    @property
    def raw(self):
        """The batch's bytes: a memoryview into the caller's buffer (no copy)."""
        return memoryview(self)

    def __getbuffer__(self, Py_buffer* view, int flags):
        cdef const unsigned char* entry = self._entry()
        PyBuffer_FillInfo(view, self, <void*>entry, self.h.size, 1, flags)
        self._buf.users += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._buf.leave()

    cdef uint32_t _computed_crc(self) except? 0xFFFFFFFF:
        cdef const unsigned char* entry = self._entry()
        cdef Py_ssize_t end = self.h.position + self.h.size
        cdef uint32_t crc
        self._buf.enter()
        try:
            with nogil:
                crc = compute_crc(entry, &self.h)
            self._buf.check_cut(end, self.h.position, self.h.base_offset)
            if crc != self.h.crc:
                self._buf.explain(None, end, self.h.position, self.h.base_offset)
        finally:
            self._buf.leave()
        return crc

    def is_valid(self):
        """True when the stored checksum matches (CRC-32C over [21, end) for v2, CRC-32 over
        [16, end) for v0/v1) and the batch is at least its minimum size."""
        if self.h.magic >= 2 and self.h.size < V2_HEADER_SIZE:
            return False
        return self._computed_crc() == self.h.crc

    def ensure_valid(self):
        """Raise InvalidCrcError (with both checksums) unless is_valid()."""
        cdef uint32_t computed
        if self.h.magic >= 2 and self.h.size < V2_HEADER_SIZE:
            raise CorruptRecordError(f"v2 batch of {self.h.size} bytes is shorter than its header",
                                     position=self.h.position, offset=self.h.base_offset)
        computed = self._computed_crc()
        if computed != self.h.crc:
            kind = "CRC-32C" if self.h.magic >= 2 else "CRC-32"
            raise InvalidCrcError(f"{kind} mismatch in magic {self.h.magic} batch",
                                  stored=self.h.crc, computed=computed,
                                  position=self.h.position, offset=self.h.base_offset)

    def __iter__(self):
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        self._entry()                           # BufferReleasedError now, not at next()
        it._buf = self._buf
        it._max_decompressed = self._max_decompressed
        it._h = self.h
        it._state = BATCH_PENDING
        return it

    def __repr__(self):
        return (f"RecordBatch(magic={self.h.magic}, base_offset={self.h.base_offset}, "
                f"last_offset={self.h.last_offset}, size_in_bytes={self.h.size}, "
                f"position={self.h.position})")


cdef RecordBatch make_batch(_Buffer buf, const BatchHeader* h, Py_ssize_t max_decompressed):
    # `h` was parsed before: allocating the batch (GC-tracked) may run a finaliser that
    # closes the file, so nothing is read from the buffer here.
    cdef RecordBatch batch = RecordBatch.__new__(RecordBatch)
    batch.h = h[0]
    batch._buf = buf
    batch._max_decompressed = max_decompressed
    return batch


# --- iterators -------------------------------------------------------------------------------
cdef enum:
    BATCH_NONE = 0       # no batch open: take the record set's next entry, if there is one
    BATCH_PENDING = 1    # _h parsed, records not read yet (decompressed by the first next())
    BATCH_V2 = 2         # reading v2 records with _cur
    BATCH_LEGACY = 3     # reading a legacy wrapper's inner messages with _cur


# One iterator serves one next() at a time: __next__ may release the GIL (decompressing) or run
# Python code (a collection while allocating) with its state half-way.
cdef str ITERATOR_BUSY = ("this records iterator is in use by another thread: one next() at a "
                          "time; hand its records to other threads (a queue), or give each "
                          "thread its own iterator")


@cython.final
@cython.no_gc_clear    # see _Buffer
cdef class _RecordIterator:
    """Records of one batch, or of every batch of a record set (then `_records` is set),
    decoded one per next() as Kafka's record iterators do: a corrupt record ends the
    iteration after the records before it were yielded.

    What the iterator reads, and what keeps it valid:
    - an uncompressed batch is read in place, in the caller's buffer: every next() checks that
      the buffer was not released (FileRecords.close()), and counts itself a user while
      something in the call could run other code (decompressing without the GIL, allocating
      GC-tracked header tuples);
    - a compressed batch is read from the thread Decompressor's chunk, which the iterator
      pins (the chunk's `exports` count) until the batch is done: while it is pinned the
      Decompressor writes elsewhere, so interleaved iterators never see each other's data,
      and one iterator at a time reuses the same warm chunk.

    Not for concurrent use: a next() while another runs (in another thread) raises
    ConcurrentUseError and changes nothing."""
    cdef _Buffer _buf
    cdef Records _records
    cdef Py_ssize_t _pos               # next entry, relative to the record set
    cdef Py_ssize_t _max_decompressed
    cdef BatchHeader _h                # the current batch
    cdef int _state
    cdef Cursor _cur                   # over its records (v2) or inner messages (legacy)
    cdef int32_t _index                # v2: records read so far
    cdef int64_t _inner_base           # legacy wrapper: added to inner offsets (spec §4.1)
    cdef Py_ssize_t _data_position     # where its (compressed) records start in the buffer
    cdef _Chunk _chunk                 # the decompressed records being read, pinned
    cdef bint _busy                    # a next() is running

    def __dealloc__(self):
        self._unpin()

    def __iter__(self):
        return self

    def __next__(self):
        cdef Record record
        cdef V2Record rec
        cdef Py_ssize_t record_start
        if self._busy:
            raise ConcurrentUseError(ITERATOR_BUSY)
        self._busy = True
        try:
            # The common case first, with nothing that can raise on intact data: a v2 data
            # record, not the batch's last (the trailing-bytes check is _next_v2's), of the
            # shape scan_v2_record takes.  Anything else goes the checked way (_next), which
            # raises what is wrong.
            record_start = self._cur.base + self._cur.pos
            if (self._state == BATCH_V2 and self._index < self._h.records_count - 1
                    and not self._buf.released and not self._h.attributes & CONTROL_FLAG
                    and scan_v2_record(&self._cur, &rec)):
                self._index += 1
                return v2_record(&self._h, &rec, self._cur.base, record_start,
                                 self._cur.base + self._cur.pos, self._in_place())
            record = self._next()
        finally:
            self._busy = False
        if record is None:
            raise StopIteration
        return record

    cdef Record _next(self):
        """The next record, or None at the end."""
        cdef Record record
        while True:
            if self._state != BATCH_NONE:
                record = self._next_in_batch()
                if record is not None:
                    return record
            elif self._records is None or not self._next_entry():
                return None

    cdef inline _Buffer _in_place(self):
        """The caller's buffer when the records are read in place; None when they are read
        from the pinned chunk."""
        return self._buf if self._chunk is None else None

    cdef inline void _unpin(self) noexcept:
        if self._chunk is not None:
            self._chunk.unpin()          # frees it if it is big and nobody else reads it
            self._chunk = None

    cdef inline void _end_batch(self) noexcept:
        self._state = BATCH_NONE
        self._unpin()

    cdef bint _next_entry(self) except -1:
        """Parse the record set's next entry into _h; False at the end."""
        cdef Records records = self._records
        cdef Py_ssize_t size = 0, position = records._start + self._pos
        cdef Py_ssize_t end = position + min(records._size - self._pos,
                                             <Py_ssize_t>V2_HEADER_SIZE)
        cdef const unsigned char* entry
        cdef int code
        if self._buf.released:
            raise BufferReleasedError("the records' file was closed", position=position)
        entry = self._buf.data + position
        code = frame_entry(entry, records._size - self._pos, records._file_rules, &size)
        if code < 0:
            self._records = None
            self._buf.frame_error(code, entry, position, end)
        if code == FRAME_OK:
            parse_entry_header(entry, size, position, &self._h)
        try:
            if code == FRAME_END:
                self._buf.check_all(end, position)
            else:
                self._buf.check_cut(end, position, None)
        except FileTruncatedError:
            self._records = None
            raise
        if code == FRAME_END:
            self._records = None
            return False
        self._pos += size
        self._state = BATCH_PENDING
        return True

    cdef Record _next_in_batch(self):
        """The current batch's next record; None when it has no more (state NONE then)."""
        cdef Py_ssize_t position
        if self._buf.released:
            self._records = None
            self._end_batch()
            raise BufferReleasedError("the records' file was closed",
                                      position=self._h.position, offset=self._h.base_offset)
        try:
            if self._state == BATCH_V2:
                return self._next_v2()
            if self._state == BATCH_LEGACY:
                return self._next_inner()
            return self._open()
        except KafkaCodecError as err:
            decompressed = self._chunk is not None
            self._records = None         # a corrupt batch ends the whole iteration
            self._end_batch()
            if not isinstance(err, FileTruncatedError):
                # zeros read past a cut in the file's last page look like corrupt data (and
                # compressed zeros inflate to garbage: the batch's own position then)
                position = (self._h.position if decompressed or err.position is None
                            else err.position)
                self._buf.explain(err, self._h.position + self._h.size, position,
                                  self._h.base_offset)
            raise in_batch(err, &self._h, self._data_position, decompressed)

    cdef Record _open(self):
        """Start reading _h: return its only record (uncompressed legacy entry) or its first
        one; None for a batch without records."""
        cdef const BatchHeader* h = &self._h
        cdef const unsigned char* entry = self._buf.data + h.position
        cdef const unsigned char* data
        cdef Py_ssize_t size = 0
        cdef LegacyMessage wrapper
        cdef Record record
        self._state = BATCH_NONE
        self._index = 0
        self._data_position = h.position
        if h.magic == 2:
            if h.records_count < 0:      # checked before decompressing, as Kafka does
                raise CorruptRecordError(f"invalid record count {h.records_count} (negative)",
                                         position=h.position + V2_RECORDS_COUNT_OFFSET)
            self._data_position = h.position + V2_HEADER_SIZE
            if h.compression == CODEC_NONE:
                cursor_init(&self._cur, entry + V2_HEADER_SIZE, h.size - V2_HEADER_SIZE,
                            self._data_position)
            elif h.records_count == 0:   # count 0: the records section is not examined
                return None
            elif h.compression > CODEC_ZSTD:
                raise UnsupportedCompressionError(
                    f"unknown compression type id {h.compression}",
                    position=h.position + V2_ATTRIBUTES_OFFSET + 1)
            else:
                data = self._decompress(2, entry + V2_HEADER_SIZE, h.size - V2_HEADER_SIZE,
                                        &size)
                cursor_init(&self._cur, data, size, 0)
            self._state = BATCH_V2
            return self._next_v2()
        if h.magic != 0 and h.magic != 1:
            raise UnsupportedVersionError(f"unknown magic {h.magic}",
                                          position=h.position + MAGIC_OFFSET)
        read_legacy_message(entry, h.size, h.position, &wrapper)
        if h.compression == CODEC_NONE:
            record = legacy_record(&wrapper, h.base_offset, h.timestamp_type, h.max_timestamp)
            self._buf.check_cut(h.position + h.size, h.position, h.base_offset)
            return record
        check_legacy_codec(h)
        if wrapper.value == NULL:
            raise CorruptRecordError("compressed wrapper message with a null value",
                                     position=h.position)
        self._data_position = h.position + (wrapper.value - entry)
        data = self._decompress(h.magic, wrapper.value, wrapper.value_length, &size)
        cursor_init(&self._cur, data, size, 0)
        self._inner_base = self._frame_inner(wrapper.offset)
        self._state = BATCH_LEGACY
        return self._next_inner()

    cdef const unsigned char* _decompress(self, int magic, const unsigned char* data,
                                          Py_ssize_t size, Py_ssize_t* out_size) except NULL:
        """Decompress the batch's records into the thread's chunk and pin it."""
        cdef Decompressor decompressor = thread_decompressor()
        cdef const unsigned char* out
        cdef Py_ssize_t end = self._data_position + size
        decompressor.max_size = self._max_decompressed
        self._buf.enter()                # the GIL is released while `data` is read
        try:
            out = decompressor.decompress_into(self._h.compression, magic, data, size, out_size)
            self._buf.check_cut(end, self._data_position, self._h.base_offset)
        except KafkaCodecError as err:
            if err.position is None or isinstance(err, FileTruncatedError):
                raise
            # the decompressor's positions are inside the compressed data
            raise err.with_context(position=self._data_position + err.position,
                                   offset=self._h.base_offset)
        finally:
            self._buf.leave()
        self._chunk = decompressor._chunk
        self._chunk.exports += 1
        return out

    cdef Record _next_v2(self):
        cdef V2Record rec
        cdef Py_ssize_t record_start
        cdef int32_t count = self._h.records_count
        if self._index >= count:
            self._end_batch()
            return None
        if self._cur.pos >= self._cur.end:
            raise CorruptRecordError(f"premature end of records: the batch declares {count} "
                                     f"records but holds {self._index}",
                                     position=self._cur.base + self._cur.pos)
        record_start = self._cur.base + self._cur.pos
        read_v2_record(&self._cur, &rec)
        self._index += 1
        if self._index == count and self._cur.pos != self._cur.end:
            # Kafka's RecordIterator checks this while reading the last record, which it then
            # never returns.
            raise CorruptRecordError(f"records still remaining: {self._cur.end - self._cur.pos} "
                                     f"bytes after the {count} records the batch declares",
                                     position=self._cur.base + self._cur.pos)
        return v2_record(&self._h, &rec, self._cur.base, record_start,
                         self._cur.base + self._cur.pos, self._in_place())

    cdef int64_t _frame_inner(self, int64_t wrapper_offset) except? -1:
        """Walk the inner message set once (spec §4.1): its base offset needs the last inner
        offset.  Leaves _cur at the first inner message."""
        cdef Py_ssize_t entry_size, count = 0
        cdef int64_t last = -1, base
        while next_inner_entry(&self._cur, &entry_size):
            last = <int64_t>load_u64(self._cur.data + self._cur.pos)
            self._cur.pos += entry_size
            count += 1
        if count == 0:
            raise CorruptRecordError("compressed message set holds no inner messages",
                                     position=0)
        base = inner_base_offset(self._h.magic, wrapper_offset, last, &self._cur)
        self._cur.pos = 0
        return base

    cdef Record _next_inner(self):
        """The next inner message of a decompressed v0/v1 wrapper (spec §4)."""
        cdef Py_ssize_t entry_size
        cdef LegacyMessage m
        cdef Record record
        if not next_inner_entry(&self._cur, &entry_size):
            self._end_batch()
            return None
        read_legacy_message(self._cur.data + self._cur.pos, entry_size, self._cur.pos, &m)
        if m.magic != 0 and m.magic != 1:
            raise CorruptRecordError(f"inner message with magic {m.magic}",
                                     position=self._cur.pos + MAGIC_OFFSET)
        if m.attributes & COMPRESSION_MASK:
            raise CorruptRecordError("compressed inner message inside a compressed wrapper",
                                     position=self._cur.pos + MAGIC_OFFSET + 1)
        record = legacy_record(&m, wrap_add(self._inner_base, m.offset),
                               inner_timestamp_type(&m, self._h.timestamp_type),
                               inner_timestamp(&m, self._h.timestamp_type, self._h.max_timestamp))
        self._cur.pos += entry_size
        return record


@cython.final
cdef class _BatchIterator:
    # No GIL release and no Python code between reading an entry and moving past it (the batch
    # is allocated after its header is parsed): safe to share between threads.
    cdef Records _records
    cdef Py_ssize_t _pos

    def __iter__(self):
        return self

    def __next__(self):
        cdef Records records = self._records
        cdef Py_ssize_t size = 0
        cdef const unsigned char* entry
        cdef Py_ssize_t position, end
        cdef BatchHeader h
        cdef int code
        if records is None:
            raise StopIteration
        if records._buf.released:
            raise BufferReleasedError("the records' file was closed",
                                      position=records._start + self._pos)
        position = records._start + self._pos
        end = position + min(records._size - self._pos, <Py_ssize_t>V2_HEADER_SIZE)
        entry = records._buf.data + position
        code = frame_entry(entry, records._size - self._pos, records._file_rules, &size)
        if code < 0:
            self._records = None
            records._buf.frame_error(code, entry, position, end)
        if code == FRAME_END:
            self._records = None
        else:
            parse_entry_header(entry, size, position, &h)
            self._pos += size
        try:
            if code == FRAME_END:
                records._buf.check_all(end, position)
            else:
                records._buf.check_cut(end, position, None)
        except FileTruncatedError:
            self._records = None
            raise
        if code == FRAME_END:
            raise StopIteration
        return make_batch(records._buf, &h, records._max_decompressed)


# --- record sets -----------------------------------------------------------------------------
cdef packed struct IndexEntry:
    int64_t position
    int64_t size_in_bytes
    int64_t base_offset
    int64_t last_offset
    int64_t max_timestamp
    int32_t records_count
    uint32_t crc
    int16_t attributes
    int8_t magic
    int8_t compression
    int8_t timestamp_type
    uint8_t crc_valid
    uint8_t _pad0
    uint8_t _pad1

# The fields of IndexEntry at their offsets; its two padding bytes are unnamed (itemsize).
INDEX_DTYPE = _np.dtype({
    "names": ["position", "size_in_bytes", "base_offset", "last_offset", "max_timestamp", "records_count",
              "crc", "attributes", "magic", "compression", "timestamp_type", "crc_valid"],
    "formats": ["i8", "i8", "i8", "i8", "i8", "i4", "u4", "i2", "i1", "i1", "i1", "?"],
    "offsets": [0, 8, 16, 24, 32, 40, 44, 48, 50, 51, 52, 53],
    "itemsize": 56})


# index(): rows are filled INDEX_FIRST_ROWS at most before the array is first doubled.
cdef enum:
    INDEX_FIRST_ROWS = 65536
    INDEX_AHEAD = 12             # entries index_rows() loads ahead


cdef int index_rows(const unsigned char* data, Py_ssize_t size, Py_ssize_t start, bint file_rules,
                    bint check_crc, IndexEntry* rows, Py_ssize_t cap, Py_ssize_t* n,
                    Py_ssize_t* pos, Py_ssize_t* first_bad) noexcept nogil:
    """Fill rows[*n:cap] with the entries from data[*pos] on, advancing *n and *pos; returns
    FRAME_OK when the rows are full (more entries may follow), else the frame_entry() code
    that ended the walk (*pos: the entry it stopped at)."""
    cdef Py_ssize_t entry_size = 0
    cdef int code
    cdef BatchHeader h
    cdef IndexEntry* row
    while n[0] < cap:
        code = frame_entry(data + pos[0], size - pos[0], file_rules, &entry_size)
        if code != FRAME_OK:
            return code
        # Each header is a cache (and TLB) miss found only from the one before; a log's batches
        # are mostly alike, so load the header INDEX_AHEAD entries of this size ahead (a wrong
        # guess only wastes the load).
        if entry_size <= (size - pos[0]) // (INDEX_AHEAD + 1):
            kc_prefetch(data + pos[0] + INDEX_AHEAD * entry_size)
        parse_entry_header(data + pos[0], entry_size, start + pos[0], &h)
        row = rows + n[0]
        row.position = h.position
        row.size_in_bytes = entry_size
        row.last_offset = h.last_offset
        row.max_timestamp = h.max_timestamp
        if h.magic < 2 and h.compression != CODEC_NONE:
            row.base_offset = -1
            row.records_count = -1
        else:
            row.base_offset = h.base_offset
            row.records_count = h.records_count
        row.crc = h.crc
        row.attributes = h.attributes
        row.magic = h.magic
        row.compression = h.compression
        row.timestamp_type = h.timestamp_type
        row.crc_valid = check_crc and compute_crc(data + pos[0], &h) == h.crc
        row._pad0 = 0
        row._pad1 = 0
        if check_crc and not row.crc_valid and first_bad[0] < 0:
            first_bad[0] = pos[0]
        pos[0] += entry_size
        n[0] += 1
    return FRAME_OK


@cython.no_gc_clear    # see _Buffer
cdef class Records:
    """A record set: a sequence of entries (v2 batches, v0/v1 messages) in one buffer.
    Use MemoryRecords(buffer) or FileRecords.open(path)."""
    cdef _Buffer _buf
    cdef Py_ssize_t _start             # where the set starts in the buffer (its file position)
    cdef Py_ssize_t _size
    cdef bint _file_rules
    cdef Py_ssize_t _max_decompressed
    cdef Py_ssize_t _valid_bytes       # -1 until walked

    def __init__(self):
        raise TypeError("use MemoryRecords(buffer) or FileRecords.open(path)")

    cdef int _check(self) except -1:
        if self._buf.released:
            raise BufferReleasedError("the records' file was closed", position=self._start)
        if self._buf.guard is not None:
            ensure_handler()           # faulthandler & co. may have replaced the SIGBUS guard
            self._buf.verified_end = 0     # a new walk: its first read looks at the file size
        return 0

    cdef int _settle(self, int code, const unsigned char* data, Py_ssize_t pos) except -1:
        """After a walk of the set that stopped at `pos` with frame_entry() code `code` (while
        still a user of the buffer): FileTruncatedError if the file was cut under the bytes it
        read, else the framing error of a negative code."""
        cdef Py_ssize_t end = self._start + min(self._size, pos + <Py_ssize_t>V2_HEADER_SIZE)
        if code < 0:
            self._buf.frame_error(code, data + pos, self._start + pos, end)
        return self._buf.check_cut(end, self._start + pos, None)

    @property
    def size_in_bytes(self):
        return self._size

    @property
    def buffer(self):
        """The whole record set as a memoryview (no copy)."""
        return memoryview(self)

    def __getbuffer__(self, Py_buffer* view, int flags):
        self._check()
        PyBuffer_FillInfo(view, self, <void*>(self._buf.data + self._start), self._size, 1, flags)
        self._buf.users += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._buf.leave()

    def batches(self):
        """Iterate the entries shallowly (no decompression, no CRC check); a trailing partial
        entry ends the iteration silently (see partial_tail_bytes)."""
        cdef _BatchIterator it = _BatchIterator.__new__(_BatchIterator)
        self._check()
        it._records = self
        return it

    def records(self):
        """Iterate every record of every entry (decompressing as needed)."""
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        self._check()
        it._buf = self._buf
        it._max_decompressed = self._max_decompressed
        it._records = self
        return it

    cdef Py_ssize_t _walk(self) except -1:
        """Bytes taken by complete entries (raises on a framing error)."""
        cdef const unsigned char* data
        cdef Py_ssize_t pos = 0, size = 0
        cdef int code = FRAME_END
        if self._valid_bytes >= 0:
            return self._valid_bytes
        self._check()
        data = self._buf.data + self._start
        self._buf.enter()
        try:
            with nogil:
                while True:
                    code = frame_entry(data + pos, self._size - pos, self._file_rules, &size)
                    if code != FRAME_OK:
                        break
                    pos += size
            self._settle(code, data, pos)
        finally:
            self._buf.leave()
        self._valid_bytes = pos
        return pos

    @property
    def valid_bytes(self):
        """Bytes taken by complete entries (Kafka's validBytes)."""
        return self._walk()

    @property
    def partial_tail_bytes(self):
        """Bytes after the last complete entry (a truncated trailing batch, as fetch responses
        end with): iteration ignores them."""
        return self._size - self._walk()

    def validate(self):
        """Check every entry's framing and checksum without creating Python objects; raise
        InvalidCrcError (both checksums, position, base offset) at the first bad one.
        Returns the number of entries checked."""
        cdef const unsigned char* data
        cdef Py_ssize_t pos = 0, size = 0, count = 0
        cdef int code = FRAME_END
        cdef BatchHeader h
        cdef uint32_t computed = 0
        cdef bint bad = False
        self._check()
        data = self._buf.data + self._start
        self._buf.enter()
        try:
            with nogil:
                while True:
                    code = frame_entry(data + pos, self._size - pos, self._file_rules, &size)
                    if code != FRAME_OK:
                        break
                    parse_entry_header(data + pos, size, self._start + pos, &h)
                    computed = compute_crc(data + pos, &h)
                    if computed != h.crc:
                        bad = True
                        break
                    pos += size
                    count += 1
            if bad:
                kind = "CRC-32C" if h.magic >= 2 else "CRC-32"
                error = InvalidCrcError(f"{kind} mismatch in magic {h.magic} batch",
                                        stored=h.crc, computed=computed, position=h.position,
                                        offset=h.base_offset)
                self._buf.explain(error, h.position + h.size, h.position, h.base_offset)
                raise error
            self._settle(code, data, pos)
        finally:
            self._buf.leave()
        return count

    def index(self, bint check_crc=True):
        """One row per complete entry, computed without the GIL and without Python objects:
        a numpy structured array with fields position, size_in_bytes, base_offset, last_offset,
        max_timestamp, records_count, crc, attributes, magic, compression, timestamp_type,
        crc_valid.  Legacy compressed wrappers have base_offset and records_count -1 (unknown
        without decompressing).  With check_crc=False, crc_valid is False everywhere."""
        cdef Py_ssize_t n = 0, cap, pos = 0, first = 0, first_bad = -1, end
        cdef const unsigned char* data
        cdef int code
        cdef cnp.ndarray result, grown
        assert INDEX_DTYPE.itemsize == sizeof(IndexEntry)
        self._check()
        data = self._buf.data + self._start
        self._buf.enter()
        try:
            # One walk, into rows sized from the first entry (a log's batches are alike):
            # doubled when short, trimmed in place at the end.
            cap = 1                              # (also what ends an empty walk)
            if frame_entry(data, self._size, self._file_rules, &first) == FRAME_OK:
                cap = min(self._size // first + 1, INDEX_FIRST_ROWS)
            result = _np.empty(cap, dtype=INDEX_DTYPE)
            while True:
                with nogil:
                    code = index_rows(data, self._size, self._start, self._file_rules, check_crc,
                                      <IndexEntry*>cnp.PyArray_DATA(result), cap, &n, &pos,
                                      &first_bad)
                if code != FRAME_OK:
                    break
                cap *= 2
                grown = _np.empty(cap, dtype=INDEX_DTYPE)
                memcpy(cnp.PyArray_DATA(grown), cnp.PyArray_DATA(result), n * sizeof(IndexEntry))
                result = grown
            self._settle(code, data, pos)
            if n < cap:
                result.resize(n, refcheck=False)     # nobody else holds it yet
            end = self._start + min(self._size, pos + <Py_ssize_t>V2_HEADER_SIZE)
            if first_bad >= 0:                   # zeros past a cut in the file's last page?
                self._buf.explain(None, end, self._start + first_bad, None)
            return result
        finally:
            self._buf.leave()

    def __repr__(self):
        return f"{type(self).__name__}(size_in_bytes={self._size})"


cdef inline Py_ssize_t max_size_of(object max_decompressed_size) except -1:
    if max_decompressed_size is None:
        return DEFAULT_MAX_DECOMPRESSED
    if max_decompressed_size < 0:
        raise ValueError("max_decompressed_size must be >= 0")
    return max_decompressed_size


@cython.no_gc_clear    # see _Buffer
cdef class MemoryRecords(Records):
    """MemoryRecords(buffer, *, max_decompressed_size=None)

    Records in any buffer-protocol object (bytes, bytearray, memoryview, mmap, numpy...),
    read in place: the object is held (one buffer export) for the records' lifetime."""

    @cython.embedsignature(False)  # written in the class docstring: Cython 3.3 misplaces `*`
    def __init__(self, buffer, *, max_decompressed_size=None):
        self._buf = _Buffer.__new__(_Buffer)
        self._buf.attach(buffer)
        self._start = 0
        self._size = self._buf.size
        self._file_rules = False
        self._max_decompressed = max_size_of(max_decompressed_size)
        self._valid_bytes = -1


@cython.no_gc_clear    # see _Buffer
cdef class FileRecords(Records):
    """A log segment, memory-mapped read-only and walked with Kafka's file reader rules
    (FileLogInputStream, spec §9.2).  close() (or leaving the `with` block) releases the
    mapping: every batch and record set from it then raises BufferReleasedError, while a
    memoryview still held (batch.raw, .buffer) keeps the mapping alive until it is released."""
    cdef readonly object path

    @staticmethod
    def open(path, *, max_decompressed_size=None):
        """Map the segment at `path` read-only (an empty file is an empty record set).  The
        file is opened without blocking and must be a regular file: a FIFO, a device or a
        socket raises NotRegularFileError, a directory IsADirectoryError (both OSErrors, as a
        missing file's FileNotFoundError)."""
        cdef FileRecords records = FileRecords.__new__(FileRecords)
        cdef _Buffer buf = _Buffer.__new__(_Buffer)
        mapping = map_file(path)
        if mapping is not None:
            buf.mapping = mapping
            buf.guard = mapping._guard
            buf.attach(mapping)
        records._buf = buf
        records._start = 0
        records._size = buf.size
        records._file_rules = True
        records._max_decompressed = max_size_of(max_decompressed_size)
        records._valid_bytes = -1
        records.path = _os.fspath(path)
        return records

    def _check_read(self, size_t end_address, position, offset, cause):
        """_mapguard.check_read() for a view of this segment read up to `end_address`."""
        cdef Py_ssize_t end
        if self._buf.data == NULL:           # unmapped: nobody read it after the close
            return
        end = <Py_ssize_t>min(end_address - <size_t>self._buf.data, <size_t>self._buf.size)
        self._buf.explain(cause, end, end if position is None else position, offset)

    def slice(self, Py_ssize_t position, Py_ssize_t size):
        """The records from `position` (relative to this set) for up to `size` bytes (clamped
        to the end, as Kafka's FileRecords.slice); shares the mapping."""
        cdef FileRecords records
        cdef Py_ssize_t end
        self._check()
        if position < 0:
            raise ValueError(f"invalid position {position}")
        if position > self._size:
            raise ValueError(f"slice position {position} is past the end ({self._size} bytes)")
        if size < 0:
            raise ValueError(f"invalid size {size}")
        end = position + size
        if end > self._size or end < 0:
            end = self._size
        records = FileRecords.__new__(FileRecords)
        records._buf = self._buf
        records._start = self._start + position
        records._size = end - position
        records._file_rules = True
        records._max_decompressed = self._max_decompressed
        records._valid_bytes = -1
        records.path = self.path
        return records

    @property
    def position(self):
        """Where this record set starts in its file (0 unless it is a slice)."""
        return self._start

    @property
    def closed(self):
        return self._buf.released

    def close(self):
        """Release the mapping (shared with slices).  Safe to call twice."""
        self._buf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self._buf.released else f"size_in_bytes={self._size}"
        return f"FileRecords({self.path!r}, {state})"


# --- test hook ---------------------------------------------------------------------------------
def _v2_record_parsers(data):
    """For tests: the v2 record at the start of `data` (any C-contiguous buffer, read as its
    raw bytes) as scan_v2_record and read_v2_record_checked see it, as (scanned, read).  Each
    is (attributes, timestamp_delta, offset_delta, key, value, header_count, headers, end
    position); scanned is None where scan_v2_record declines, and read is the KafkaCodecError
    where the checked reader raises."""
    cdef _Buffer buf = _Buffer.__new__(_Buffer)
    cdef Cursor cur
    cdef V2Record rec
    cdef const unsigned char* start
    cdef Py_ssize_t size
    buf.attach(data)
    size = buf.size
    start = buf.data if size else <const unsigned char*>b""

    def fields():
        return (rec.attributes, rec.timestamp_delta, rec.offset_delta,
                None if rec.key == NULL else rec.key[:rec.key_length],
                None if rec.value == NULL else rec.value[:rec.value_length],
                rec.header_count, rec.headers[:rec.headers_size], cur.pos)

    cursor_init(&cur, start, size, 0)
    scanned = fields() if scan_v2_record(&cur, &rec) else None
    if scanned is None and cur.pos != 0:
        raise AssertionError("scan_v2_record moved the cursor and declined")
    cursor_init(&cur, start, size, 0)
    try:
        read_v2_record_checked(&cur, &rec)
    except KafkaCodecError as err:
        return scanned, err
    return scanned, fields()
