# cython: language_level=3
"""MemoryRecordsBuilder: write record batches (magic 2) and message sets (magic 0/1) exactly as
Kafka 3.8's MemoryRecordsBuilder does (spec record-formats.md; docs/building.md for the API).

Records are encoded straight into one C write buffer (`_writer.pxd`) by the `_v2.pxd` /
`_legacy.pxd` primitives; `build()` fills the batch header (or the compressed wrapper) and
returns the bytes (`build_into()` writes them into the caller's buffer instead), then the
builder continues with the next batch.

Errors: a wrong Python type raises TypeError; a value out of range for its argument (negative
timestamp other than -1, offsets that do not increase, bad producer state) raises ValueError;
what a magic cannot carry (headers, transactions, producer ids, control batches or a delete
horizon below magic 2) raises UnsupportedVersionError, zstd below magic 2 or an unknown codec
raises UnsupportedCompressionError, and a key/value/record beyond 2 GiB RecordTooLargeError.
"""

import operator
import sys
import time
import weakref

cimport cython
from cpython.buffer cimport (PyObject_CheckBuffer, PyObject_GetBuffer, PyBuffer_Release,
                             PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_SIMPLE, PyBUF_WRITABLE)
from cpython.bytes cimport (PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize,
                            PyBytes_GET_SIZE)
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_Check
from cpython.ref cimport PyObject
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t,
                          INT32_MAX, INT64_MAX)
from libc.stdlib cimport free
from libc.string cimport memcpy

from kafkacodec._columns cimport ArrowBinary, arrow_binary_init, arrow_binary_row
from kafkacodec._crc cimport kc_crc_init
from kafkacodec._guard cimport Guard, guard_enter, guard_leave
from kafkacodec._prefetch cimport kc_prefetch
from kafkacodec._writer cimport (Writer, WriteBuffer, ensure, put_bytes, reserve, store_u16,
                                 store_u32, store_varint, varint_size)
from kafkacodec._format cimport (BatchHeader, LOG_OVERHEAD, V2_HEADER_SIZE, V0_RECORD_OVERHEAD,
                                 V1_RECORD_OVERHEAD, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG,
                                 CONTROL_FLAG, DELETE_HORIZON_FLAG, NO_TIMESTAMP, CODEC_NONE,
                                 wrap_sub)
from kafkacodec._v2 cimport write_v2_record, write_v2_batch_header, v2_record_body_size
from kafkacodec._legacy cimport (write_legacy_message, legacy_message_size, begin_legacy_wrapper,
                                 end_legacy_wrapper)
from kafkacodec._compression cimport compress_into

from kafkacodec._types import Compression, ControlType, TimestampType, compression_of
from kafkacodec.errors import (RecordTooLargeError, UnsupportedCompressionError,
                               UnsupportedVersionError)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    const Py_ssize_t PY_SSIZE_T_MAX

kc_crc_init()

cdef enum:
    KAFKA_DEFAULT_LEVEL = -1     # _compression's LEVEL_DEFAULT: Kafka's default for the codec

# Kafka estimates a compressed batch as uncompressed size x ratio (1.0 at first) x 1.05.
cdef double COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05


# --- borrowed views of bytes-like arguments ---------------------------------------------------
cdef struct Span:
    const unsigned char* data    # NULL for None
    Py_ssize_t length            # -1 for None
    bint release                 # view holds a buffer to release
    Py_buffer view


cdef int span_of(object obj, Span* s, const char* what) except -1:
    """Borrow the bytes of None / bytes / any contiguous buffer (not str)."""
    s.release = False
    if obj is None:
        s.data = NULL
        s.length = -1
        return 0
    if PyBytes_CheckExact(obj):
        s.data = <const unsigned char*>PyBytes_AS_STRING(obj)
        s.length = PyBytes_GET_SIZE(obj)
    else:
        if PyUnicode_Check(obj) or not PyObject_CheckBuffer(obj):
            raise TypeError(f"{what.decode()} must be bytes-like or None, not "
                            f"{type(obj).__name__}" + (" (encode it first)" if PyUnicode_Check(obj) else ""))
        PyObject_GetBuffer(obj, &s.view, PyBUF_SIMPLE)
        s.release = True
        s.data = <const unsigned char*>s.view.buf
        s.length = s.view.len
    if s.length > INT32_MAX:
        span_release(s)
        raise RecordTooLargeError(f"{what.decode()} of {s.length} bytes exceeds Kafka's 2 GiB limit")
    return 0


cdef inline void span_release(Span* s) noexcept:
    if s.release:
        PyBuffer_Release(&s.view)
        s.release = False


# --- columns for append_many: a list/tuple of objects or an Arrow binary/string array ----------
# Python code can run in the middle of append_many (a timestamp's __index__, a headers
# generator, a buffer exporter, a finaliser run by a collection), and it may change or empty
# the caller's lists.  Lists are read in place while only exact bytes, None and ints have been
# read (that runs no Python code); before the first thing that may run code (headers, another
# item type), they are copied to tuples (column_snapshot), which hold a reference to every
# item for the rest of the call.  Arrow arrays are read through _columns.pxd, which checks
# every row's offsets.
cdef enum:
    COLUMN_NULL = 0          # None: every entry null
    COLUMN_LIST = 1          # read in place (no Python code runs during the call)
    COLUMN_TUPLE = 2         # the caller's tuple, or a copy of the caller's list
    COLUMN_ARROW = 3         # binary / string / large_binary / large_string

cdef struct Column:
    int kind
    PyObject* items          # list or tuple, referenced by the caller for the whole call
    Py_ssize_t start         # the first row read (Arrow: also added to arrow.first)
    ArrowBinary arrow

cdef extern from "Python.h":
    PyObject** PySequence_Fast_ITEMS(object seq)
    PyObject** items_of "PySequence_Fast_ITEMS"(PyObject* seq)     # no reference taken
    bint bytes_exact "PyBytes_CheckExact"(PyObject* o)
    bint int_exact "PyLong_CheckExact"(PyObject* o)
    char* bytes_data "PyBytes_AS_STRING"(PyObject* o)
    Py_ssize_t bytes_size "PyBytes_GET_SIZE"(PyObject* o)


cdef int column_snapshot(Column* c, list keep) except -1:
    """Read c's list through a tuple copy from now on: Python code may run from here.  No code
    ran before, so the copy holds what the list held when the call started."""
    if c.kind == COLUMN_LIST:
        items = tuple(<object>c.items)
        keep.append(items)
        c.items = <PyObject*>items
        c.kind = COLUMN_TUPLE
    return 0


# pyarrow's binary and string array classes -> whether their offsets are int64 (filled when the
# first Arrow column comes): one dict lookup instead of four type tests a call.
cdef dict ARROW_BINARY_CLASSES = {}


@cython.final
cdef class _ArrowColumnCache:
    """The last Arrow array one append_many column read a row range of, parsed: a caller
    writing batch after batch from one array (start=, stop=) pays pyarrow's buffer lookups
    once, not once a batch.  The array is held weakly (nothing of it is kept alive): a call
    finds it again only while the caller passes that very object, which keeps its buffers;
    a pyarrow array never changes its buffers, and every row's offsets are still checked as
    they are read."""
    cdef object source                # weakref.ref to the array, or None
    cdef ArrowBinary arrow            # binary/string columns
    cdef const int64_t* int64_values  # timestamps: the array's values
    cdef Py_ssize_t rows

    cdef inline bint holds(self, object obj):
        return self.source is not None and self.source() is obj

    cdef inline void store(self, object source_ref, const ArrowBinary* arrow,
                           const int64_t* int64_values, Py_ssize_t rows):
        # source_ref made by the caller first: making it may run Python code (a collection),
        # which may store another entry; nothing from here on runs any
        if arrow != NULL:
            self.arrow = arrow[0]
        self.int64_values = int64_values
        self.rows = rows
        self.source = source_ref


cdef object column_of(object obj, Column* c, str name, list keep, _ArrowColumnCache cache=None):
    """Set up c over obj; returns its length (-1 for None).  What c points into is appended to
    `keep`, which the caller holds for the call.  With `cache`, an Arrow array is parsed once
    while it stays the same object (see _ArrowColumnCache)."""
    c.kind = COLUMN_NULL
    c.start = 0
    if obj is None:
        return -1
    if cache is not None and cache.holds(obj):
        c.arrow = cache.arrow
        c.kind = COLUMN_ARROW
        return cache.rows
    if type(obj) is list or type(obj) is tuple:
        keep.append(obj)
        c.kind = COLUMN_LIST if type(obj) is list else COLUMN_TUPLE
        c.items = <PyObject*>obj
        return len(obj)
    wide = ARROW_BINARY_CLASSES.get(type(obj))
    if wide is None:
        pa = sys.modules.get("pyarrow")
        if pa is None or not isinstance(obj, pa.Array):
            raise TypeError(f"{name} must be a list, a tuple or a pyarrow binary/string array"
                            f"{' (or None)' if name == 'keys' else ''}, not {type(obj).__name__}")
        if not ARROW_BINARY_CLASSES:
            ARROW_BINARY_CLASSES.update({pa.BinaryArray: False, pa.StringArray: False,
                                         pa.LargeBinaryArray: True, pa.LargeStringArray: True})
        t = obj.type
        if pa.types.is_binary(t) or pa.types.is_string(t):
            wide = False
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            wide = True
        else:
            raise TypeError(f"{name} as an Arrow array must be binary or string, not {t}")
    keep.append(obj)
    n = len(obj)
    keep.append(arrow_binary_init(&c.arrow, obj, wide, n, name))
    c.kind = COLUMN_ARROW
    if cache is not None and type(obj) in ARROW_BINARY_CLASSES:    # pyarrow's own: immutable
        cache.store(weakref.ref(obj), &c.arrow, NULL, n)
    return n


cdef inline void column_from(Column* c, Py_ssize_t start) noexcept:
    """Read c from row `start` on: row i is the column's row start + i (errors name the
    column's row)."""
    c.start = start
    if c.kind == COLUMN_ARROW:
        c.arrow.first += start


cdef enum:
    SPAN_OK = 0
    SPAN_MAY_RUN_CODE = 1    # nothing read: snapshot the lists first (column_snapshot)

cdef inline int column_span(const Column* c, Py_ssize_t i, Span* s, const char* what) except -1:
    """Borrow row i into s: SPAN_OK, or SPAN_MAY_RUN_CODE for an item of a list read in place
    that is neither bytes nor None (its buffer export may run Python code)."""
    cdef PyObject* item
    cdef int64_t size
    cdef int found
    s.release = False
    s.data = NULL
    s.length = -1
    if c.kind == COLUMN_LIST or c.kind == COLUMN_TUPLE:
        item = items_of(c.items)[c.start + i]
        if item == <PyObject*>None:
            return SPAN_OK
        if not bytes_exact(item):
            if c.kind == COLUMN_LIST:
                return SPAN_MAY_RUN_CODE
            return span_of(<object>item, s, what)
        s.data = <const unsigned char*>bytes_data(item)
        s.length = bytes_size(item)
        if s.length > INT32_MAX:
            raise RecordTooLargeError(f"{what.decode()} of {s.length} bytes exceeds Kafka's 2 GiB limit")
        return SPAN_OK
    if c.kind == COLUMN_NULL:
        return SPAN_OK
    found = arrow_binary_row(&c.arrow, i, &s.data, &size)
    if found < 0:
        raise ValueError(f"{what.decode()} {c.start + i}: its Arrow offsets are out of order or past the "
                         f"data buffer")
    if found == 0:
        s.data = NULL
        return SPAN_OK
    if size > INT32_MAX:
        raise RecordTooLargeError(f"{what.decode()} of {size} bytes exceeds Kafka's 2 GiB limit")
    s.length = size
    return SPAN_OK


cdef enum:
    PREFETCH_ROWS = 8        # rows ahead: about one memory latency of appending

cdef inline void column_prefetch(const Column* c, Py_ssize_t i) noexcept:
    """Start loading row i's object (its header and first bytes): a list's items lie wherever
    Python allocated them, and each row would otherwise wait for memory in turn."""
    cdef const char* item
    if c.kind == COLUMN_LIST or c.kind == COLUMN_TUPLE:
        item = <const char*>items_of(c.items)[c.start + i]
        kc_prefetch(item)
        kc_prefetch(item + 64)


cdef enum:
    PREFETCH_BYTES_ROWS = 2  # rows ahead whose bytes are loaded (their objects are cached by then)
    PREFETCH_BYTES_MAX = 4096

cdef inline void column_prefetch_bytes(const Column* c, Py_ssize_t i) noexcept:
    """Start loading row i's bytes (up to PREFETCH_BYTES_MAX) while earlier rows are copied:
    each value otherwise waits for memory line after line in its memcpy."""
    cdef PyObject* item
    cdef const unsigned char* p
    cdef int64_t n
    cdef Py_ssize_t at = 0
    if c.kind == COLUMN_LIST or c.kind == COLUMN_TUPLE:
        item = items_of(c.items)[c.start + i]
        if not bytes_exact(item):
            return
        p = <const unsigned char*>bytes_data(item)
        n = bytes_size(item)
        at = 64                  # the first line: column_prefetch loaded it
    elif c.kind == COLUMN_ARROW:
        if arrow_binary_row(&c.arrow, i, &p, &n) <= 0:     # null, or bad offsets (raised later)
            return
    else:
        return
    while at < n and at < PREFETCH_BYTES_MAX:
        kc_prefetch(p + at)
        at += 64


cdef inline bint row_of(const Column* c, Py_ssize_t i, const unsigned char** data,
                        Py_ssize_t* length) noexcept:
    """Row i in place when that runs no Python code and needs no check beyond this one: null,
    an exact bytes item of a list or tuple, an Arrow row whose offsets hold; False for anything
    else (column_span then reads it, or raises what is wrong with it)."""
    cdef PyObject* item
    cdef int64_t size
    cdef int found
    data[0] = NULL
    length[0] = -1
    if c.kind == COLUMN_LIST or c.kind == COLUMN_TUPLE:
        item = items_of(c.items)[c.start + i]
        if item == <PyObject*>None:
            return True
        if not bytes_exact(item) or bytes_size(item) > INT32_MAX:
            return False
        data[0] = <const unsigned char*>bytes_data(item)
        length[0] = bytes_size(item)
        return True
    if c.kind == COLUMN_NULL:
        return True
    found = arrow_binary_row(&c.arrow, i, data, &size)
    if found == 0:
        data[0] = NULL
        return True
    if found < 0 or size > INT32_MAX:
        return False
    length[0] = size
    return True


cdef bint LITTLE_ENDIAN = sys.byteorder == "little"


cdef int int64_column(object obj, Py_buffer* view, _ArrowColumnCache cache=None) except -1:
    """Export obj's int64 values into view (the caller releases it): a 1-D C-contiguous buffer
    of native int64 (numpy arrays...) as it is, a pyarrow int64 or timestamp[ms] array without
    nulls zero-copy (and noted in `cache`).  The raw buffer protocol: a typed memoryview costs
    several times more."""
    cdef const char* f
    array = None
    # numpy arrays and other buffers first: a pyarrow Array exports no buffer
    pa = None if PyObject_CheckBuffer(obj) else sys.modules.get("pyarrow")
    if pa is not None and isinstance(obj, pa.Array):
        t = obj.type
        if not (pa.types.is_int64(t) or (pa.types.is_timestamp(t) and t.unit == "ms")):
            raise TypeError(f"timestamps as an Arrow array must be int64 or timestamp[ms], not {t}")
        if obj.null_count:
            raise ValueError("Arrow timestamps must not contain nulls (use -1 for no timestamp)")
        array = obj
        obj = obj.view(pa.int64()).to_numpy(zero_copy_only=True)
    try:
        PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (TypeError, ValueError, BufferError):
        raise TypeError("timestamps must be an int, a list/tuple of ints or a contiguous int64 "
                        f"buffer, not {type(obj).__name__}") from None
    f = view.format
    if f == NULL:                        # unsigned bytes (PEP 3118)
        f = b"B"
    if f[0] == b"@" or f[0] == b"=" or (f[0] == b"<" and LITTLE_ENDIAN):
        f += 1                           # native order ('=': standard sizes, itemsize says)
    if (view.ndim != 1 or view.itemsize != 8 or f[1] != 0
            or not (f[0] == b"q" or (f[0] == b"l" and sizeof(long) == 8))):
        PyBuffer_Release(view)
        raise TypeError("timestamps must be an int, a list/tuple of ints or a contiguous int64 "
                        f"buffer, not {type(obj).__name__}")
    if cache is not None and array is not None and type(array) in (pa.Int64Array, pa.TimestampArray):
        try:
            source_ref = weakref.ref(array)
        except BaseException:
            PyBuffer_Release(view)
            raise
        cache.store(source_ref, NULL, <const int64_t*>view.buf, view.len // 8)
    return 0


cdef int32_t encode_headers(Writer* w, object headers) except -1:
    """Encode a v2 header section (after HeaderCount) into w; return the header count."""
    cdef Py_ssize_t key_size
    cdef const char* key
    cdef Span value
    cdef int32_t count = 0
    cdef unsigned char* p
    for item in headers:
        try:
            name, val = item
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes-or-None) pair, not {item!r}") from None
        if not PyUnicode_Check(name):
            raise TypeError(f"a header key must be str, not {type(name).__name__}")
        key = PyUnicode_AsUTF8AndSize(name, &key_size)
        if key_size > INT32_MAX:
            raise RecordTooLargeError("header key exceeds Kafka's 2 GiB limit")
        span_of(val, &value, b"header value")
        try:
            ensure(w, 10 + key_size + 5 + (value.length if value.length > 0 else 0))
            p = w.buf + w.length
            p = store_varint(p, <int32_t>key_size)
            memcpy(p, key, key_size)
            p += key_size
            p = store_varint(p, <int32_t>value.length)
            if value.length > 0:
                memcpy(p, value.data, value.length)
                p += value.length
            w.length = p - w.buf
        finally:
            span_release(&value)
        count += 1
    return count


cdef object as_int(object v, str name):
    """v as a Python int: ints and integer-like objects (numpy integers), not bool or float."""
    if type(v) is int:
        return v
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(v).__name__}") from None


cdef int64_t check_timestamp(object timestamp) except? -2:
    cdef int64_t ts
    if type(timestamp) is not int:
        timestamp = as_int(timestamp, "timestamp (milliseconds, -1 for none)")
    try:
        ts = timestamp
    except OverflowError:
        raise ValueError(f"timestamp {timestamp} does not fit in 64 bits") from None
    if ts < NO_TIMESTAMP:
        raise ValueError(f"invalid negative timestamp {ts}: use -1 for no timestamp")
    return ts


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


cdef int64_t check_int(object v, str name, int64_t low, int64_t high) except? -1:
    v = as_int(v, name)
    if v < low or v > high:
        raise ValueError(f"{name} {v} is out of range [{low}, {high}]")
    return v


cdef class MemoryRecordsBuilder:
    """MemoryRecordsBuilder(magic=2, compression="none", timestamp_type=TimestampType.CREATE_TIME, base_offset=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, is_transactional=False, log_append_time=None, partition_leader_epoch=-1, compression_level=None, *, is_control_batch=False, delete_horizon_ms=None, max_batch_size=None)

    Write one batch at a time; `build()` returns it (`build_into(buffer)` writes it into a
    buffer the caller owns) and starts the next one.

    The next batch starts at the offset after the last one written (and, for an idempotent
    producer, the base sequence after its last sequence), so the outputs of several builds
    concatenated form a dense multi-batch log.

    Not for concurrent use: build() compresses without the GIL and append() may run Python code
    (a headers iterator), both on the builder's buffers, so a call made while another runs (from
    another thread, or from such code) raises ConcurrentUseError.  Use one builder per thread.
    """

    cdef Writer w                 # v2: 61-byte header slot + records; legacy: messages
    cdef Writer scratch           # encoded headers of one record; the legacy wrapper
    cdef readonly int magic
    cdef int codec
    cdef int level
    cdef int timestamp_type_id
    cdef readonly int64_t base_offset
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly bint is_transactional
    cdef readonly bint is_control_batch
    cdef readonly int32_t partition_leader_epoch
    cdef int64_t log_append_time_ms
    cdef int64_t delete_horizon
    cdef bint has_delete_horizon
    cdef readonly Py_ssize_t max_batch_size
    # per-batch state
    cdef int32_t count
    cdef int64_t last_offset
    cdef int64_t base_timestamp
    cdef bint has_base_timestamp
    cdef int64_t max_timestamp
    cdef bint exhausted           # a batch ended at offset 2^63-1
    cdef Guard guard              # refuses a second call while one runs (see the docstring)
    # append_many(start=, stop=): the Arrow arrays read batch by batch, parsed once
    cdef _ArrowColumnCache timestamp_cache, key_cache, value_cache

    def __cinit__(self):
        self.w.buf = NULL
        self.scratch.buf = NULL

    def __dealloc__(self):
        free(self.w.buf)
        free(self.scratch.buf)

    @cython.embedsignature(False)  # written in the class docstring: Cython 3.3 misplaces `*`
    def __init__(self, magic=2, compression="none", timestamp_type=TimestampType.CREATE_TIME,
                 base_offset=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                 is_transactional=False, log_append_time=None, partition_leader_epoch=-1,
                 compression_level=None, *, is_control_batch=False, delete_horizon_ms=None,
                 max_batch_size=None):
        cdef object codec
        guard_enter(&self.guard, b"MemoryRecordsBuilder")
        try:
            if magic not in (0, 1, 2) or isinstance(magic, bool):
                raise UnsupportedVersionError(f"magic {magic!r} is not a Kafka record format (use 0, 1 or 2)")
            self.magic = magic
            codec = compression_of(compression)
            if codec == Compression.ZSTD and magic < 2:
                raise UnsupportedCompressionError(
                    f"zstd needs magic 2 (Kafka rejects zstd for magic {magic}): use magic=2 or another codec")
            self.codec = codec
            self.level = KAFKA_DEFAULT_LEVEL
            if compression_level is not None:
                self.level = check_level(codec, compression_level)
            try:
                ts_type = TimestampType(timestamp_type)
            except ValueError:
                raise ValueError(f"unknown timestamp_type {timestamp_type!r}: use a TimestampType") from None
            if ts_type == TimestampType.NO_TIMESTAMP_TYPE and magic > 0:
                raise ValueError(f"magic {magic} needs a timestamp type (CREATE_TIME or LOG_APPEND_TIME)")
            if ts_type == TimestampType.LOG_APPEND_TIME and magic == 0:
                raise UnsupportedVersionError("magic 0 has no timestamps: LOG_APPEND_TIME needs magic 1 or 2")
            self.timestamp_type_id = ts_type
            if log_append_time is not None:
                if ts_type != TimestampType.LOG_APPEND_TIME:
                    raise ValueError("log_append_time is only used with timestamp_type=LOG_APPEND_TIME")
                self.log_append_time_ms = check_int(log_append_time, "log_append_time", 0, 2**63 - 1)
            elif ts_type == TimestampType.LOG_APPEND_TIME:
                self.log_append_time_ms = _now_ms()      # as the broker stamps it
            else:
                self.log_append_time_ms = NO_TIMESTAMP
            self.base_offset = check_int(base_offset, "base_offset", 0, 2**63 - 1)
            self.producer_id = check_int(producer_id, "producer_id", -1, 2**63 - 1)
            self.producer_epoch = <int>check_int(producer_epoch, "producer_epoch", -1, 32767)
            self.base_sequence = <int32_t>check_int(base_sequence, "base_sequence", -1, INT32_MAX)
            self.partition_leader_epoch = <int32_t>check_int(
                partition_leader_epoch, "partition_leader_epoch", -1, INT32_MAX)
            self.is_transactional = bool(is_transactional)
            self.is_control_batch = bool(is_control_batch)
            self.has_delete_horizon = delete_horizon_ms is not None
            if self.has_delete_horizon:
                self.delete_horizon = check_int(delete_horizon_ms, "delete_horizon_ms", 0, 2**63 - 1)
            if magic < 2:
                for name, used in (("a producer id", self.producer_id != -1),
                                   ("producer epoch", self.producer_epoch != -1),
                                   ("base sequence", self.base_sequence != -1),
                                   ("transactional batches", self.is_transactional),
                                   ("control batches", self.is_control_batch),
                                   ("a delete horizon", self.has_delete_horizon),
                                   ("a partition leader epoch", self.partition_leader_epoch != -1)):
                    if used:
                        raise UnsupportedVersionError(f"magic {magic} cannot carry {name}: use magic=2")
            if self.is_transactional and self.producer_id == -1:
                raise ValueError("transactional batches need a producer_id (and producer_epoch)")
            if self.producer_id != -1:
                if self.producer_epoch == -1:
                    raise ValueError(f"producer_id {self.producer_id} needs a producer_epoch >= 0")
                if self.base_sequence < 0 and not self.is_control_batch:
                    raise ValueError(f"producer_id {self.producer_id} needs a base_sequence >= 0")
            if max_batch_size is None:
                self.max_batch_size = -1
            else:
                self.max_batch_size = check_int(max_batch_size, "max_batch_size", 1, INT32_MAX)
            self._start_batch()
        finally:
            guard_leave(&self.guard)

    cdef int _start_batch(self) except -1:
        self.w.length = 0
        if self.magic == 2:
            reserve(&self.w, V2_HEADER_SIZE)
        self.count = 0
        self.last_offset = self.base_offset - 1
        self.max_timestamp = NO_TIMESTAMP
        self.has_base_timestamp = self.has_delete_horizon
        self.base_timestamp = self.delete_horizon if self.has_delete_horizon else NO_TIMESTAMP
        return 0

    # --- state --------------------------------------------------------------------------
    @property
    def compression(self):
        return Compression(self.codec)

    @property
    def compression_level(self):
        return None if self.level == KAFKA_DEFAULT_LEVEL else self.level

    @property
    def timestamp_type(self):
        return TimestampType(self.timestamp_type_id)

    @property
    def log_append_time(self):
        return None if self.timestamp_type_id != 1 else self.log_append_time_ms

    @property
    def delete_horizon_ms(self):
        return self.delete_horizon if self.has_delete_horizon else None

    @property
    def record_count(self) -> int:
        """Records in the batch being built."""
        return self.count

    @property
    def next_offset(self) -> int:
        """The offset `append()` will give the next record."""
        return <object>self.last_offset + 1

    @property
    def uncompressed_size_in_bytes(self) -> int:
        """Bytes of the batch so far before compression (v2: header included)."""
        return self.w.length

    @property
    def estimated_size_in_bytes(self) -> int:
        """Size of the batch if built now: exact uncompressed, Kafka's estimate compressed."""
        return self._estimated_size()

    cdef Py_ssize_t _estimated_size(self):
        cdef Py_ssize_t header = 0, records = self.w.length
        if self.magic == 2:
            header = V2_HEADER_SIZE
            records -= V2_HEADER_SIZE
        elif self.codec != CODEC_NONE:
            header = LOG_OVERHEAD + (V1_RECORD_OVERHEAD if self.magic == 1 else V0_RECORD_OVERHEAD)
        if self.codec == CODEC_NONE:
            return header + records
        return header + <Py_ssize_t>(records * COMPRESSION_RATE_ESTIMATION_FACTOR)

    @property
    def is_full(self) -> bool:
        """True when max_batch_size is set, the batch has a record and its estimate reached it."""
        return self.max_batch_size > 0 and self.count > 0 and self._estimated_size() >= self.max_batch_size

    def has_room_for(self, timestamp, key, value, headers=()) -> bool:
        """Kafka's hasRoomFor: would this record keep the batch within max_batch_size?
        (An empty batch always has room; compression of the new record is not counted.)"""
        cdef Span k, v
        cdef Py_ssize_t size
        cdef int32_t hcount
        cdef int64_t ts = check_timestamp(timestamp)
        if self.max_batch_size < 0:
            return True
        if self.is_full:
            return False
        if self.count == 0:
            return True
        span_of(key, &k, b"key")
        span_release(&k)
        span_of(value, &v, b"value")
        span_release(&v)
        if self.magic < 2:
            size = legacy_message_size(self.magic, <int32_t>k.length, <int32_t>v.length)
        else:
            guard_enter(&self.guard, b"MemoryRecordsBuilder")    # the headers go to scratch
            try:
                self.scratch.length = 0
                hcount = encode_headers(&self.scratch, headers)
            finally:
                guard_leave(&self.guard)
            size = v2_record_body_size(<int32_t>(self.last_offset + 1 - self.base_offset),
                                       wrap_sub(ts, self.base_timestamp), <int32_t>k.length,
                                       <int32_t>v.length, self.scratch.length, hcount)
            size += varint_size(<int32_t>size)
        return self.max_batch_size >= self._estimated_size() + size

    # --- appending ------------------------------------------------------------------------
    cdef inline int64_t _next(self) except? -1:
        if self.last_offset == INT64_MAX or self.exhausted:
            raise ValueError("offsets are exhausted: the last record has offset 2^63-1")
        return self.last_offset + 1

    cdef int _check_offset(self, int64_t offset) except -1:
        if offset <= self.last_offset:
            if self.count:
                raise ValueError(f"offset {offset} does not follow the previous offset "
                                 f"{self.last_offset} (offsets must increase)")
            raise ValueError(f"offset {offset} is below the batch base offset {self.base_offset}")
        if offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {offset} is more than 2^31-1 past the batch base offset "
                             f"{self.base_offset}: build() this batch first")
        if self.count == INT32_MAX:
            raise RecordTooLargeError("a batch cannot hold more than 2^31-1 records")
        return 0

    cdef int _write(self, int64_t offset, int64_t timestamp, const Span* key, const Span* value,
                    object headers) except -1:
        """Append one record (offset and timestamp already checked)."""
        cdef int32_t hcount = 0
        cdef int8_t attributes
        cdef int64_t inner_offset
        if self.magic == 2:
            if headers:
                self.scratch.length = 0
                hcount = encode_headers(&self.scratch, headers)
            if not self.has_base_timestamp:
                self.base_timestamp = timestamp
                self.has_base_timestamp = True
            # the body adds at most 26 bytes of varints to the key, value and headers
            if (key.length + value.length + (self.scratch.length if hcount else 0)
                    > <Py_ssize_t>INT32_MAX - 32):
                raise RecordTooLargeError("record exceeds Kafka's 2 GiB limit", offset=offset)
            write_v2_record(&self.w, <int32_t>(offset - self.base_offset),
                            wrap_sub(timestamp, self.base_timestamp),
                            key.data, <int32_t>key.length, value.data, <int32_t>value.length,
                            self.scratch.buf, self.scratch.length if hcount else 0, hcount)
        else:
            if headers:
                raise UnsupportedVersionError(
                    f"magic {self.magic} cannot carry record headers: use magic=2")
            if legacy_message_size(self.magic, <int32_t>key.length, <int32_t>value.length) > INT32_MAX:
                raise RecordTooLargeError("message exceeds Kafka's 2 GiB limit", offset=offset)
            attributes = 0
            if self.timestamp_type_id == 1:
                timestamp = self.log_append_time_ms
                if self.magic == 1:
                    attributes = TIMESTAMP_TYPE_MASK
            # v1 inner messages of a compressed wrapper carry offsets relative to the base
            inner_offset = offset - self.base_offset if (self.magic == 1 and self.codec) else offset
            write_legacy_message(&self.w, <int8_t>self.magic, inner_offset, timestamp, attributes,
                                 key.data, <int32_t>key.length, value.data, <int32_t>value.length)
        self.count += 1
        self.last_offset = offset
        if self.magic > 0 and timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return 0

    @cython.final
    cdef inline int _write_v2(self, int64_t timestamp, const unsigned char* key,
                              Py_ssize_t key_length, const unsigned char* value,
                              Py_ssize_t value_length) except -1:
        """_write() of a v2 record without headers at the next offset (checked by the caller);
        key_length and value_length are at most INT32_MAX, -1 for null."""
        cdef int64_t offset = self.last_offset + 1
        if not self.has_base_timestamp:
            self.base_timestamp = timestamp
            self.has_base_timestamp = True
        if key_length + value_length > <Py_ssize_t>INT32_MAX - 32:   # 26 bytes of varints at most
            raise RecordTooLargeError("record exceeds Kafka's 2 GiB limit", offset=offset)
        write_v2_record(&self.w, <int32_t>(offset - self.base_offset),
                        wrap_sub(timestamp, self.base_timestamp), key, <int32_t>key_length,
                        value, <int32_t>value_length, NULL, 0, 0)
        self.count += 1
        self.last_offset = offset
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return 0

    cdef int _append(self, bint at_next, int64_t offset, int64_t timestamp, object key,
                     object value, object headers) except -1:
        """append / append_with_offset (offset used unless at_next), under the guard."""
        cdef Span k, v
        guard_enter(&self.guard, b"MemoryRecordsBuilder")
        try:
            if at_next:
                offset = self._next()
            self._check_offset(offset)
            span_of(key, &k, b"key")
            try:
                span_of(value, &v, b"value")
                try:
                    self._write(offset, timestamp, &k, &v, headers)
                finally:
                    span_release(&v)
            finally:
                span_release(&k)
        finally:
            guard_leave(&self.guard)
        return 0

    def append(self, timestamp, key, value, headers=()):
        """Append a record at the next offset (base_offset for the first).

        timestamp: ms since the epoch, -1 for none; key, value: bytes-like or None (null is
        not empty); headers: (str, bytes-or-None) pairs (magic 2 only)."""
        cdef int64_t ts = check_timestamp(timestamp)
        if self.is_control_batch:
            raise ValueError("this builder writes a control batch: use append_control_record()")
        self._append(True, 0, ts, key, value, headers)

    def append_with_offset(self, offset, timestamp, key, value, headers=()):
        """Append a record at `offset`, which must be above the previous one (gaps allowed,
        as after compaction) and at or above base_offset."""
        cdef int64_t off = check_int(offset, "offset", 0, 2**63 - 1)
        cdef int64_t ts = check_timestamp(timestamp)
        if self.is_control_batch:
            raise ValueError("this builder writes a control batch: use append_control_record()")
        self._append(False, off, ts, key, value, headers)

    def append_many(self, timestamps, keys, values, headers=None, Py_ssize_t start=0, stop=None):
        """Append rows [start, stop) of the columns (stop None: to the end) as records at
        consecutive offsets, in one call.

        timestamps: one int for all, a list/tuple of ints, a contiguous int64 buffer (numpy
        array) or a pyarrow int64 / timestamp[ms] array without nulls; keys: None (all null),
        a list/tuple of bytes-like-or-None or a pyarrow binary/string array (nulls are null
        keys); values: the same without the None form; headers: None or a list/tuple of
        per-record header sequences.  Every column has one entry per row.  A caller writing
        batch after batch from the same pyarrow arrays passes them whole with a row range:
        they are parsed once (the builder holds them weakly), not sliced per batch.  The lists
        are read as they are when the call starts (Python code run by the call, such as a
        headers generator, does not change what it writes).  All or nothing: on an error the
        batch is left as it was before the call."""
        cdef Py_ssize_t n, i, count, ts_count = 0
        cdef Column key_col, value_col
        cdef list keep = []                # what the columns point into, for the whole call
        cdef int64_t ts = 0
        cdef int64_t* ts_values = NULL
        cdef Py_buffer ts_buffer
        cdef bint ts_held = False, ts_columnar = False
        cdef const int64_t* ts_column = NULL
        cdef PyObject* item
        cdef bint ranged = start != 0 or stop is not None
        if self.is_control_batch:
            raise ValueError("this builder writes a control batch: use append_control_record()")
        if values is None:
            raise TypeError("values must be a list, a tuple or a pyarrow binary/string array, not None")
        if ranged and self.value_cache is None:
            self.timestamp_cache = _ArrowColumnCache()
            self.key_cache = _ArrowColumnCache()
            self.value_cache = _ArrowColumnCache()
        n = column_of(values, &value_col, "values", keep, self.value_cache if ranged else None)
        if column_of(keys, &key_col, "keys", keep, self.key_cache if ranged else None) not in (n, -1):
            raise ValueError(f"{len(keys)} keys for {n} values")
        count = n - start if stop is None else <Py_ssize_t>stop - start
        if start < 0 or count < 0 or start + count > n:
            raise ValueError(f"rows [{start}, {stop}) are not within the {n} rows given")
        column_from(&key_col, start)
        column_from(&value_col, start)
        if headers is not None:
            if type(headers) is not list and type(headers) is not tuple:
                raise TypeError(f"headers must be None, a list or a tuple, not {type(headers).__name__}")
            headers = tuple(headers)
            if len(headers) != n:
                raise ValueError(f"{len(headers)} header sequences for {n} values")
            if ranged:
                headers = headers[start:start + count]
            # headers are iterated while records are written
            column_snapshot(&key_col, keep)
            column_snapshot(&value_col, keep)
        if type(timestamps) is list or type(timestamps) is tuple:
            if len(timestamps) != n:
                raise ValueError(f"{len(timestamps)} timestamps for {n} values")
        elif isinstance(timestamps, int):
            ts = check_timestamp(timestamps)
        elif ranged and self.timestamp_cache.holds(timestamps):
            ts_column = self.timestamp_cache.int64_values
            ts_count = self.timestamp_cache.rows
            ts_columnar = True
        else:
            int64_column(timestamps, &ts_buffer, self.timestamp_cache if ranged else None)
            ts_held = True
            ts_column = <const int64_t*>ts_buffer.buf
            ts_count = ts_buffer.len // 8
            ts_columnar = True
        try:
            if ts_columnar:
                if ts_count != n:
                    raise ValueError(f"{ts_count} timestamps for {n} values")
                ts_column += start
            guard_enter(&self.guard, b"MemoryRecordsBuilder")
            try:
                if count and (self.exhausted or self.last_offset > INT64_MAX - count):
                    raise ValueError(f"{count} more records would pass offset 2^63-1")
                if count and self.last_offset + count - self.base_offset > INT32_MAX:
                    raise ValueError(f"{count} more records would end more than 2^31-1 past the batch base "
                                     f"offset {self.base_offset}: build() this batch first")
                if <int64_t>self.count + count > INT32_MAX:
                    raise RecordTooLargeError("a batch cannot hold more than 2^31-1 records")
                if type(timestamps) is list or type(timestamps) is tuple:
                    # converted before any record is read
                    ts_values = <int64_t*>PyMem_Malloc(max(count, 1) * sizeof(int64_t))
                    if ts_values == NULL:
                        raise MemoryError()
                    for i in range(count):
                        item = PySequence_Fast_ITEMS(timestamps)[start + i]
                        if not int_exact(item):
                            # its __index__ may run Python code: copies from here on
                            if type(timestamps) is list:
                                timestamps = tuple(timestamps)
                            column_snapshot(&key_col, keep)
                            column_snapshot(&value_col, keep)
                        ts_values[i] = check_timestamp(<object>PySequence_Fast_ITEMS(timestamps)[start + i])
                self._append_many(count, ts, ts_values, ts_column, &key_col, &value_col, headers, keep)
            finally:
                PyMem_Free(ts_values)
                guard_leave(&self.guard)
        finally:
            if ts_held:                          # the column stays exported for the call
                PyBuffer_Release(&ts_buffer)

    cdef int _append_many(self, Py_ssize_t n, int64_t ts, const int64_t* ts_values,
                          const int64_t* ts_column, Column* key_col, Column* value_col,
                          object headers, list keep) except -1:
        cdef Py_ssize_t i, key_length, value_length
        cdef const unsigned char* key
        cdef const unsigned char* value
        cdef Span k, v
        cdef object header_obj = None
        # the common rows (v2, no headers, bytes/None/Arrow) go straight to the record writer
        cdef bint direct = self.magic == 2 and headers is None
        # saved state for the all-or-nothing rollback
        cdef Py_ssize_t saved_length = self.w.length
        cdef int32_t saved_count = self.count
        cdef int64_t saved_last = self.last_offset, saved_max = self.max_timestamp
        cdef int64_t saved_base_ts = self.base_timestamp
        cdef bint saved_has_base = self.has_base_timestamp
        try:
            for i in range(min(n, PREFETCH_ROWS)):        # the rows the loop does not prefetch
                column_prefetch(key_col, i)
                column_prefetch(value_col, i)
            for i in range(min(n, PREFETCH_BYTES_ROWS)):
                column_prefetch_bytes(value_col, i)
            for i in range(n):
                if i + PREFETCH_ROWS < n:
                    column_prefetch(key_col, i + PREFETCH_ROWS)
                    column_prefetch(value_col, i + PREFETCH_ROWS)
                if i + PREFETCH_BYTES_ROWS < n:
                    column_prefetch_bytes(value_col, i + PREFETCH_BYTES_ROWS)
                if ts_values != NULL:
                    ts = ts_values[i]
                elif ts_column != NULL:
                    ts = ts_column[i]
                    if ts < NO_TIMESTAMP:
                        raise ValueError(f"invalid negative timestamp {ts} at index {value_col.start + i}: use -1 for none")
                if (direct and row_of(key_col, i, &key, &key_length)
                        and row_of(value_col, i, &value, &value_length)):
                    self._write_v2(ts, key, key_length, value, value_length)
                    continue
                if headers is not None:
                    header_obj = <object>PyTuple_GET_ITEM(headers, i)        # a tuple (copied)
                k.release = v.release = False
                try:
                    if (column_span(key_col, i, &k, b"key") == SPAN_MAY_RUN_CODE
                            or column_span(value_col, i, &v, b"value") == SPAN_MAY_RUN_CODE):
                        # a buffer export may run Python code (__buffer__): copies from here on
                        span_release(&k)
                        column_snapshot(key_col, keep)
                        column_snapshot(value_col, keep)
                        column_span(key_col, i, &k, b"key")
                        column_span(value_col, i, &v, b"value")
                    self._write(self.last_offset + 1, ts, &k, &v, header_obj)
                finally:
                    span_release(&v)
                    span_release(&k)
        except BaseException:
            self.w.length = saved_length
            self.count = saved_count
            self.last_offset = saved_last
            self.max_timestamp = saved_max
            self.base_timestamp = saved_base_ts
            self.has_base_timestamp = saved_has_base
            raise
        return 0

    def append_control_record(self, timestamp, control_type, value):
        """Append a control record (key: version 0 + `control_type`, a ControlType; value as
        given) at the next offset.  Needs a builder made with is_control_batch=True (magic 2)."""
        cdef Span k, v
        cdef unsigned char key[4]
        cdef int64_t ts = check_timestamp(timestamp)
        cdef int type_id
        try:
            type_id = ControlType(as_int(control_type, "control_type"))
        except ValueError:
            raise ValueError(f"unknown control_type {control_type!r}: Kafka writes only the "
                             f"ControlType values") from None
        if not self.is_control_batch:
            raise ValueError("control records need a builder made with is_control_batch=True")
        store_u16(key, 0)
        store_u16(key + 2, <uint32_t>type_id)
        k.data = key
        k.length = 4
        k.release = False
        guard_enter(&self.guard, b"MemoryRecordsBuilder")
        try:
            self._check_offset(self._next())
            span_of(value, &v, b"value")
            try:
                self._write(self.last_offset + 1, ts, &k, &v, None)
            finally:
                span_release(&v)
        finally:
            guard_leave(&self.guard)

    def append_end_txn_marker(self, timestamp, commit, coordinator_epoch):
        """Append a COMMIT (commit=True) or ABORT marker: value = version 0 + coordinator epoch.
        Needs is_control_batch=True, is_transactional=True and a producer_id (Kafka's rule)."""
        cdef unsigned char value[6]
        cdef int32_t epoch = <int32_t>check_int(coordinator_epoch, "coordinator_epoch", -1, INT32_MAX)
        if self.producer_id == -1:
            raise ValueError("an end transaction marker needs a producer_id")
        if not self.is_transactional:
            raise ValueError("an end transaction marker needs is_transactional=True")
        store_u16(value, 0)
        store_u32(value + 2, <uint32_t>epoch)
        self.append_control_record(timestamp, ControlType.COMMIT if commit else ControlType.ABORT,
                                   PyBytes_FromStringAndSize(<const char*>value, 6))

    @classmethod
    def build_end_txn_marker(cls, bint commit, producer_id, producer_epoch, coordinator_epoch,
                             base_offset=0, timestamp=None, partition_leader_epoch=-1) -> bytes:
        """One end-transaction marker batch (78 bytes) as the broker writes it (Kafka's
        MemoryRecords.withEndTransactionMarker): transactional control batch, no sequence.
        timestamp defaults to now."""
        builder = cls(2, "none", TimestampType.CREATE_TIME, base_offset, producer_id,
                      producer_epoch, -1, True, None, partition_leader_epoch,
                      is_control_batch=True)
        builder.append_end_txn_marker(_now_ms() if timestamp is None else timestamp, commit,
                                      coordinator_epoch)
        return builder.build()

    @staticmethod
    def build_empty_batch(base_offset, last_offset, producer_id, producer_epoch, base_sequence,
                          max_timestamp=-1, timestamp_type=TimestampType.CREATE_TIME,
                          is_transactional=False, is_control_batch=False,
                          partition_leader_epoch=-1) -> bytes:
        """A v2 batch with no records (61 bytes), as the log cleaner keeps one to preserve a
        producer's last sequence (Kafka's DefaultRecordBatch.writeEmptyHeader): RecordsCount 0,
        LastOffsetDelta = last_offset - base_offset, BaseTimestamp -1, no compression."""
        cdef BatchHeader h
        cdef bytes out = PyBytes_FromStringAndSize(NULL, V2_HEADER_SIZE)
        h.base_offset = check_int(base_offset, "base_offset", 0, INT64_MAX)
        delta = check_int(last_offset, "last_offset", h.base_offset, INT64_MAX) - h.base_offset
        if delta > INT32_MAX:
            raise ValueError(f"last_offset is more than 2^31-1 past base_offset {h.base_offset}")
        h.last_offset_delta = <int32_t>delta
        h.producer_id = check_int(producer_id, "producer_id", -1, INT64_MAX)
        h.producer_epoch = <int16_t>check_int(producer_epoch, "producer_epoch", -1, 32767)
        h.base_sequence = <int32_t>check_int(base_sequence, "base_sequence", -1, INT32_MAX)
        h.partition_leader_epoch = <int32_t>check_int(partition_leader_epoch, "partition_leader_epoch",
                                                      -1, INT32_MAX)
        h.base_timestamp = NO_TIMESTAMP
        h.max_timestamp = check_timestamp(max_timestamp)
        try:
            ts_type = TimestampType(timestamp_type)
        except ValueError:
            raise ValueError(f"unknown timestamp_type {timestamp_type!r}: use a TimestampType") from None
        if ts_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise ValueError("a v2 batch needs a timestamp type (CREATE_TIME or LOG_APPEND_TIME)")
        h.attributes = ((TIMESTAMP_TYPE_MASK if ts_type == TimestampType.LOG_APPEND_TIME else 0)
                        | (TRANSACTIONAL_FLAG if is_transactional else 0)
                        | (CONTROL_FLAG if is_control_batch else 0))
        h.records_count = 0
        write_v2_batch_header(<unsigned char*>PyBytes_AS_STRING(out), V2_HEADER_SIZE, &h)
        return out

    # --- building -------------------------------------------------------------------------
    def build(self) -> bytes:
        """Close the batch and return its bytes (b"" when empty, as Kafka builds nothing);
        the builder then continues with the next batch."""
        cdef const unsigned char* data
        cdef Py_ssize_t size
        guard_enter(&self.guard, b"MemoryRecordsBuilder")   # codecs run without the GIL
        try:
            if self.count == 0:
                return b""
            out = self._close(&data, &size)
            if out is None:
                out = PyBytes_FromStringAndSize(<const char*>data, size)
            self._advance()
            return out
        finally:
            guard_leave(&self.guard)

    def build_into(self, buffer, position=None) -> int:
        """Close the batch and write its bytes into `buffer` instead of a new bytes object;
        returns the position after them (nothing is written for an empty batch, as Kafka builds
        nothing).  The builder then continues with the next batch.

        `buffer`: a WriteBuffer (the batch is appended to it: several builds make a log in one
        growable buffer; `position`, when given, must be its length), or any writable
        C-contiguous buffer (bytearray, memoryview, numpy array, mmap), written at `position`
        (default 0).  A batch that does not fit in buffer[position:] raises ValueError and
        stays in the builder (build it again into a larger buffer)."""
        cdef const unsigned char* data
        cdef Py_ssize_t size, at
        cdef WriteBuffer out
        cdef Py_buffer view
        guard_enter(&self.guard, b"MemoryRecordsBuilder")
        try:
            if isinstance(buffer, WriteBuffer):
                out = <WriteBuffer>buffer
                if position is not None and position != out.w.length:
                    raise ValueError(f"a WriteBuffer is written at its end ({out.w.length}), not "
                                     f"at {position}")
                if self.count:
                    keep = self._close(&data, &size)
                    put_bytes(&out.w, data, size)        # BufferError under a live view
                    self._advance()
                return out.w.length
            at = 0 if position is None else check_int(position, "position", 0, PY_SSIZE_T_MAX)
            PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
            try:
                if at > view.len:
                    raise ValueError(f"position {at} is past the end of the buffer ({view.len} bytes)")
                if self.count == 0:
                    return at
                keep = self._close(&data, &size)
                if size > view.len - at:
                    raise ValueError(f"the batch takes {size} bytes, {view.len - at} are left in "
                                     f"the buffer after position {at}")
                memcpy(<unsigned char*>view.buf + at, data, size)
                self._advance()
                return at + size
            finally:
                PyBuffer_Release(&view)
        finally:
            guard_leave(&self.guard)

    cdef object _close(self, const unsigned char** data, Py_ssize_t* size):
        """The bytes of the (non-empty) batch, without starting the next one: *data, *size
        point into the builder's buffers or into the returned bytes object (None otherwise),
        valid until the next call that changes the builder."""
        if self.magic == 2:
            return self._close_v2(data, size)
        if self.codec == CODEC_NONE:
            data[0] = self.w.buf
            size[0] = self.w.length
            return None
        self._close_legacy_wrapper()
        data[0] = self.scratch.buf
        size[0] = self.scratch.length
        return None

    cdef int _advance(self) except -1:
        """Start the next batch after the one just closed."""
        cdef int32_t span = <int32_t>(self.last_offset - self.base_offset) + 1
        if self.base_sequence >= 0:          # DefaultRecordBatch.incrementSequence: wraps to 0
            self.base_sequence = <int32_t>((<int64_t>self.base_sequence + span) % (<int64_t>INT32_MAX + 1))
        if self.last_offset == INT64_MAX:       # nothing can follow offset 2^63-1
            self.exhausted = True
        else:
            self.base_offset = self.last_offset + 1
        self._start_batch()
        return 0

    cdef object _close_v2(self, const unsigned char** data, Py_ssize_t* size):
        cdef BatchHeader h
        h.base_offset = self.base_offset
        h.partition_leader_epoch = self.partition_leader_epoch
        h.attributes = self.codec
        if self.timestamp_type_id == 1:
            h.attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            h.attributes |= TRANSACTIONAL_FLAG
        if self.is_control_batch:
            h.attributes |= CONTROL_FLAG
        if self.has_delete_horizon:
            h.attributes |= DELETE_HORIZON_FLAG
        h.last_offset_delta = <int32_t>(self.last_offset - self.base_offset)
        h.base_timestamp = self.base_timestamp
        h.max_timestamp = self.log_append_time_ms if self.timestamp_type_id == 1 else self.max_timestamp
        h.producer_id = self.producer_id
        h.producer_epoch = <int16_t>self.producer_epoch
        h.base_sequence = self.base_sequence
        h.records_count = self.count
        if self.codec == CODEC_NONE:             # the header goes in front of the records
            write_v2_batch_header(self.w.buf, self.w.length, &h)
            data[0] = self.w.buf
            size[0] = self.w.length
            return None
        self.scratch.length = 0                  # header, then the records compressed
        reserve(&self.scratch, V2_HEADER_SIZE)
        if compress_into(&self.scratch, self.codec, 2, self.w.buf + V2_HEADER_SIZE,
                         self.w.length - V2_HEADER_SIZE, self.level) > INT32_MAX - V2_HEADER_SIZE:
            raise RecordTooLargeError("compressed batch exceeds Kafka's 2 GiB limit",
                                      offset=self.base_offset)
        write_v2_batch_header(self.scratch.buf, self.scratch.length, &h)
        data[0] = self.scratch.buf
        size[0] = self.scratch.length
        return None

    cdef int _close_legacy_wrapper(self) except -1:
        """The compressed wrapper message, into scratch.  Kafka's
        writeLegacyCompressedWrapperHeader: wrapper offset = last (absolute) offset, null key,
        v1 timestamp = the append time or the max inner timestamp."""
        cdef int8_t attributes = <int8_t>self.codec
        cdef int64_t timestamp = self.max_timestamp
        cdef Py_ssize_t start, n
        if self.magic == 1 and self.timestamp_type_id == 1:
            attributes |= TIMESTAMP_TYPE_MASK
            timestamp = self.log_append_time_ms
        self.scratch.length = 0
        start = begin_legacy_wrapper(&self.scratch, <int8_t>self.magic, self.last_offset,
                                     timestamp, attributes, NULL, -1)
        n = compress_into(&self.scratch, self.codec, self.magic, self.w.buf, self.w.length, self.level)
        if n > INT32_MAX - LOG_OVERHEAD - V1_RECORD_OVERHEAD:
            raise RecordTooLargeError("compressed message set exceeds Kafka's 2 GiB limit",
                                      offset=self.last_offset)
        end_legacy_wrapper(&self.scratch, start, <int32_t>n)
        return 0

    def __repr__(self):
        return (f"MemoryRecordsBuilder(magic={self.magic}, compression={self.compression.name.lower()!r}, "
                f"base_offset={self.base_offset}, record_count={self.count})")


cdef int check_level(object codec, object level) except? -1:
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"compression_level must be an int or None, not {type(level).__name__}")
    if codec == Compression.NONE:
        raise ValueError("compression_level needs a codec (compression is 'none')")
    if codec == Compression.SNAPPY:
        raise ValueError("snappy has no compression levels (use compression_level=None)")
    # Kafka 3.8 (KIP-390) level ranges; -1 keeps the codec default for gzip.
    low, high = {Compression.GZIP: (1, 9), Compression.LZ4: (1, 17),
                 Compression.ZSTD: (-131072, 22)}[codec]
    if codec == Compression.GZIP and level == -1:
        return KAFKA_DEFAULT_LEVEL
    if codec == Compression.ZSTD and level == -1:
        # -1 is the "Kafka default" marker of the compression module, not zstd's fast level -1
        raise ValueError("zstd compression_level -1 is not supported: use None for Kafka's "
                         "default (3), or another level")
    if not low <= level <= high:
        raise ValueError(f"{Compression(codec).name.lower()} compression_level {level} is out of "
                         f"range [{low}, {high}]")
    return level
