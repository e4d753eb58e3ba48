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
- `Records` (base of MemoryRecords and FileRecords) walks entries and records with the batch
  walker (_walk.pxd), GIL-free steps that frame entries by either the in-memory rules (spec
  §9.1) or the file rules (§9.2) and fill a RecordView per record; this module keeps the
  Python objects, the buffer's lifetime and the truncation guard.  Framing errors are raised
  afterwards by `raise_frame_error()`.
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
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t

from kafkacodec._cursor cimport Cursor, cursor_init
from kafkacodec._format cimport (
    BatchHeader, compute_crc, frame_entry, raise_frame_error, FRAME_END,
    FRAME_OK, V2_HEADER_SIZE, TRANSACTIONAL_FLAG, CONTROL_FLAG, DELETE_HORIZON_FLAG,
    NO_SEQUENCE, wrap_add, increment_sequence, CODEC_NONE, CODEC_ZSTD)
from kafkacodec._v2 cimport V2Record, read_v2_record_checked, scan_v2_record, read_v2_header
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_entry, walk_entries, walk_open,
                               walk_decompressed, walk_scan, walk_next, pin_output, unpin_chunk,
                               WALK_DONE, OPEN_COMPRESSED)
from kafkacodec._legacy cimport LegacyMessage, read_legacy_message
from kafkacodec._crc cimport kc_crc_init
from kafkacodec._compression cimport (_Chunk, Decompressor, DEFAULT_MAX_DECOMPRESSED,
                                      thread_decompressor)
from kafkacodec._mapguard cimport Guard, KC_INTACT, ensure_handler, kc_guard_cut
from kafkacodec._index cimport index_entries
cimport numpy as cnp

import os as _os

import numpy as _np

from kafkacodec._mapguard import map_file
import kafkacodec._types as _types
from kafkacodec._types import ControlType
from kafkacodec.errors import (BufferReleasedError, ConcurrentUseError, CorruptRecordError,
                               FileTruncatedError, InvalidCrcError, KafkaCodecError,
                               UnsupportedCompressionError)

kc_crc_init()
cnp.import_array()

cdef tuple _TIMESTAMP_TYPES = _types.TIMESTAMP_TYPES
cdef tuple _COMPRESSIONS = _types.COMPRESSIONS
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

    cdef inline int check_entry(self, int code, Py_ssize_t end, Py_ssize_t position) except -1:
        """After framing the entry at `position` (read up to `end`; `code`: frame_entry's):
        check_all at the end of the walk, check_cut otherwise; nothing for a caller's buffer."""
        if self.guard is None:
            return 0
        if code == FRAME_END:
            return self.check_all(end, position)
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


cdef tuple decode_headers(const RecordView* v, Py_ssize_t base):
    cdef Cursor c
    cdef const unsigned char* key
    cdef const unsigned char* value
    cdef int32_t key_length, value_length, i
    cdef tuple headers = PyTuple_New(v.rec.header_count)
    cdef tuple pair
    cursor_init(&c, v.rec.headers, v.rec.headers_size, base)
    for i in range(v.rec.header_count):
        read_v2_header(&c, &key, &key_length, &value, &value_length)
        # Java decodes keys with new String(bytes, UTF_8): malformed input becomes U+FFFD.
        pair = (PyUnicode_DecodeUTF8(<const char*>key, key_length, "replace"),
                bytes_or_none(value, value_length))
        Py_INCREF(pair)
        PyTuple_SET_ITEM(headers, i, pair)
    return headers


cdef inline Record make_record(const RecordView* v, int64_t batch_offset, Py_ssize_t base,
                               _Buffer in_place):
    """The Record of the walker's view `v` (its pointers: `base` is where they start in the
    buffer).  `in_place`: the caller's buffer when `v` points into it, else None.

    Everything is read from `v` before the first GC-tracked allocation (the header tuples),
    which may run a collection and with it a finaliser that closes the file; the headers are
    then decoded as a counted user of the buffer."""
    cdef Record r = Record.__new__(Record)     # not GC-tracked: no collection runs here
    r.offset = v.offset
    r.timestamp = v.timestamp
    r._timestamp_type = v.timestamp_type
    r.sequence = v.sequence
    r._control_type = v.control_type
    r._coordinator_epoch = v.coordinator_epoch
    r.key = None if v.rec.key == NULL else PyBytes_FromStringAndSize(<const char*>v.rec.key,
                                                                 v.rec.key_length)
    r.value = None if v.rec.value == NULL else PyBytes_FromStringAndSize(
        <const char*>v.rec.value, v.rec.value_length)
    if v.rec.header_count == 0:
        r.headers = _NO_HEADERS
        if in_place is not None and not in_place.intact():
            in_place.check_cut(base + v.end, base + v.start, batch_offset)
    elif in_place is None:
        r.headers = decode_headers(v, base)
    else:
        in_place.enter()
        try:
            r.headers = decode_headers(v, base)
            if not in_place.intact():
                in_place.check_cut(base + v.end, base + v.start, batch_offset)
        finally:
            in_place.leave()
    return r


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

    def inner_batches(self):
        """A v0/v1 entry's messages as Kafka's deep iteration of a legacy entry sees them: a
        compressed wrapper's inner messages, each a RecordBatch with its own crc and
        is_valid(), read from a decompressed copy (at most the record set's
        max_decompressed_size); an uncompressed message: itself.  Inner offsets are as stored
        (magic 1: relative to the wrapper; iterate the wrapper for absolute offsets)."""
        cdef const unsigned char* entry = self._entry()
        cdef const unsigned char* out
        cdef Py_ssize_t out_size = 0
        cdef Py_ssize_t data_position = -1      # where the compressed value starts, once read
        cdef const unsigned char* value
        cdef Py_ssize_t value_size = 0
        cdef BatchWalk w
        cdef Decompressor decompressor
        if self.h.magic >= 2:
            raise ValueError("a v2 batch holds records, not inner messages: iterate it")
        if self.h.compression == CODEC_NONE:
            return iter((self,))
        self._buf.enter()
        try:
            w.h = self.h
            walk_open(&w, entry, &value, &value_size)   # the wrapper's checks, in Kafka's order
            data_position = w.data_position
            decompressor = thread_decompressor()
            decompressor.max_size = self._max_decompressed
            out = decompressor.decompress_into(self.h.compression, self.h.magic, value,
                                               value_size, &out_size)
            self._buf.check_cut(self.h.position + self.h.size, self.h.position,
                                self.h.base_offset)
            inner = PyBytes_FromStringAndSize(<const char*>out, out_size)
        except KafkaCodecError as err:
            if err.offset is not None or isinstance(err, FileTruncatedError):
                raise
            # as the record iterator reports them: the batch named, the decompressor's
            # positions (inside the compressed value) made positions in the buffer
            position = err.position
            if data_position >= 0 and position is not None:
                position += data_position
            raise err.with_context(position=position, offset=self.h.base_offset)
        finally:
            self._buf.leave()
        return MemoryRecords(inner, max_decompressed_size=self._max_decompressed).batches()

    def __iter__(self):
        cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
        self._entry()                           # BufferReleasedError now, not at next()
        it._buf = self._buf
        it._max_decompressed = self._max_decompressed
        it._w.h = self.h
        it._pending = True
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
      pins (the walker's policy, _walk.pxd) until the batch is done: while it is pinned the
      Decompressor writes elsewhere, so interleaved iterators never see each other's data,
      and one iterator at a time reuses the same warm chunk.

    Not for concurrent use: a next() while another runs (in another thread) raises
    ConcurrentUseError and changes nothing."""
    cdef _Buffer _buf
    cdef Records _records
    cdef Py_ssize_t _pos               # next entry, relative to the record set
    cdef Py_ssize_t _max_decompressed
    cdef BatchWalk _w                  # the current batch and the walk of its records
    cdef bint _pending                 # _w.h parsed, its walk not opened yet
    cdef _Chunk _chunk                 # the decompressed records being read, pinned
    cdef bint _busy                    # a next() is running

    def __dealloc__(self):
        self._unpin()

    def __iter__(self):
        return self

    def __next__(self):
        cdef Record record
        cdef RecordView v
        if self._busy:
            raise ConcurrentUseError(ITERATOR_BUSY)
        self._busy = True
        try:
            # The common case first, with nothing that can raise on intact data (walk_scan);
            # anything else goes the checked way (_next), which raises what is wrong.
            if not self._buf.released and walk_scan(&self._w, &v):
                return make_record(&v, self._w.h.base_offset, self._w.cur.base, self._in_place())
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
            if self._pending or self._w.state != WALK_DONE:
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
            unpin_chunk(self._chunk)
            self._chunk = None

    cdef inline void _end_batch(self) noexcept:
        self._pending = False
        self._w.state = WALK_DONE
        self._unpin()

    cdef bint _next_entry(self) except -1:
        """Parse the record set's next entry into _w.h; False at the end."""
        cdef Records records = self._records
        cdef Py_ssize_t position = records._start + self._pos
        cdef Py_ssize_t end = position + min(records._size - self._pos,
                                             <Py_ssize_t>V2_HEADER_SIZE)
        cdef int code
        if self._buf.released:
            raise BufferReleasedError("the records' file was closed", position=position)
        code = walk_entry(self._buf.data + records._start, records._size, self._pos,
                          records._start, records._file_rules, &self._w.h)
        if code < 0:
            self._records = None
            self._buf.frame_error(code, self._buf.data + position, position, end)
        try:
            self._buf.check_entry(code, end, position)
        except FileTruncatedError:
            self._records = None
            raise
        if code == FRAME_END:
            self._records = None
            return False
        self._pos += self._w.h.size
        self._pending = True
        return True

    cdef Record _next_in_batch(self):
        """The current batch's next record; None when it has no more (its walk done then)."""
        cdef Py_ssize_t position
        cdef RecordView v
        cdef const BatchHeader* h = &self._w.h
        if self._buf.released:
            self._records = None
            self._end_batch()
            raise BufferReleasedError("the records' file was closed",
                                      position=h.position, offset=h.base_offset)
        try:
            if self._pending:
                self._pending = False
                if h.compression == CODEC_NONE and (h.magic == 0 or h.magic == 1):
                    return self._only_record()
                self._open()
            if not walk_next(&self._w, &v):
                self._end_batch()
                return None
            return make_record(&v, h.base_offset, self._w.cur.base, self._in_place())
        except KafkaCodecError as err:
            decompressed = self._chunk is not None
            self._records = None         # a corrupt batch ends the whole iteration
            self._end_batch()
            if not isinstance(err, FileTruncatedError):
                # zeros read past a cut in the file's last page look like corrupt data (and
                # compressed zeros inflate to garbage: the batch's own position then)
                position = (h.position if decompressed or err.position is None
                            else err.position)
                self._buf.explain(err, h.position + h.size, position, h.base_offset)
            raise in_batch(err, h, self._w.data_position, decompressed)

    cdef Record _only_record(self):
        """An uncompressed v0/v1 entry's only record, read as walk_open() and walk_next() read
        it (WALK_ONE) without setting up the walk: one per entry, this is the legacy loop."""
        cdef const BatchHeader* h = &self._w.h
        cdef LegacyMessage m
        cdef Record r
        self._w.data_position = h.position
        read_legacy_message(self._buf.data + h.position, h.size, h.position, &m)
        r = Record.__new__(Record)           # not GC-tracked: no collection runs here
        r.offset = h.base_offset
        r.timestamp = h.max_timestamp        # the entry header's: LogAppendTime applied
        r._timestamp_type = h.timestamp_type
        r.sequence = NO_SEQUENCE
        r._control_type = -1
        r._coordinator_epoch = -1
        r.key = bytes_or_none(m.key, m.key_length)
        r.value = bytes_or_none(m.value, m.value_length)
        r.headers = _NO_HEADERS
        if self._buf.guard is not None:         # (the offset, an int object, only then)
            self._buf.check_cut(h.position + h.size, h.position, h.base_offset)
        return r

    cdef int _open(self) except -1:
        """Open the walk of _w.h: its records in place, or decompressed into a pinned chunk."""
        cdef const unsigned char* data
        cdef Py_ssize_t size = 0
        self._w.data_position = self._w.h.position
        if walk_open(&self._w, self._buf.data + self._w.h.position, &data, &size) == OPEN_COMPRESSED:
            data = self._decompress(data, size, &size)
            walk_decompressed(&self._w, data, size)
        return 0

    cdef const unsigned char* _decompress(self, const unsigned char* data, Py_ssize_t size,
                                          Py_ssize_t* out_size) except NULL:
        """Decompress the batch's records into the thread's chunk and pin it."""
        cdef Decompressor decompressor = thread_decompressor()
        cdef const unsigned char* out
        cdef Py_ssize_t position = self._w.data_position
        decompressor.max_size = self._max_decompressed
        self._buf.enter()                # the GIL is released while `data` is read
        try:
            out = decompressor.decompress_into(self._w.h.compression, self._w.h.magic, data,
                                               size, out_size)
            self._buf.check_cut(position + size, position, self._w.h.base_offset)
        except KafkaCodecError as err:
            if err.position is None or isinstance(err, FileTruncatedError):
                raise
            # the decompressor's positions are inside the compressed data
            raise err.with_context(position=position + err.position,
                                   offset=self._w.h.base_offset)
        finally:
            self._buf.leave()
        self._chunk = pin_output(decompressor)
        return out


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
        code = walk_entry(records._buf.data + records._start, records._size, self._pos,
                          records._start, records._file_rules, &h)
        if code < 0:
            self._records = None
            records._buf.frame_error(code, records._buf.data + position, position, end)
        if code == FRAME_END:
            self._records = None
        else:
            self._pos += h.size
        try:
            records._buf.check_entry(code, end, position)
        except FileTruncatedError:
            self._records = None
            raise
        if code == FRAME_END:
            raise StopIteration
        return make_batch(records._buf, &h, records._max_decompressed)


# --- record sets -----------------------------------------------------------------------------
# index() rows: _index.pyx (one shallow walk, also under kafkacodec.arrow.scan_entries).
from kafkacodec._index import INDEX_DTYPE


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
        cdef Py_ssize_t pos = 0
        cdef int code = FRAME_END
        if self._valid_bytes >= 0:
            return self._valid_bytes
        self._check()
        data = self._buf.data + self._start
        self._buf.enter()
        try:
            with nogil:
                code = walk_entries(data, self._size, self._file_rules, &pos)
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
        cdef Py_ssize_t pos = 0, count = 0
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
                    code = walk_entry(data, self._size, pos, self._start, self._file_rules, &h)
                    if code != FRAME_OK:
                        break
                    computed = compute_crc(data + pos, &h)
                    if computed != h.crc:
                        bad = True
                        break
                    pos += h.size
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
        a numpy structured array (INDEX_DTYPE) with fields position, size_in_bytes,
        base_offset, last_offset, max_timestamp, producer_id, records_count, crc, attributes,
        magic, compression, timestamp_type, control_type, crc_valid.  Legacy compressed
        wrappers have base_offset and records_count -1 (unknown without decompressing), legacy
        entries producer_id -1; control_type is the type of an uncompressed v2 control batch
        (its first record's key: 0 abort, 1 commit), else -1.  With check_crc=False, crc_valid
        is False everywhere."""
        cdef const unsigned char* data
        cdef Py_ssize_t pos, first_bad, end, size = 0
        cdef int code
        self._check()
        data = self._buf.data + self._start
        self._buf.enter()
        try:
            result, code, pos, first_bad, error = index_entries(data, self._size, self._start,
                                                                self._file_rules, check_crc)
            end = self._start + min(self._size, pos + <Py_ssize_t>V2_HEADER_SIZE)
            if error is not None:                # the entry at pos has an unreadable control record
                frame_entry(data + pos, self._size - pos, self._file_rules, &size)
                self._buf.explain(error, self._start + pos + size, self._start + pos, error.offset)
                raise error
            self._settle(code, data, pos)
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
