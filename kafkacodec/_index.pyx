# cython: language_level=3
"""The shallow index (see _index.pxd): one walk, one row type, for Records.index() and
scan_entries()."""

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.string cimport memcpy
cimport numpy as cnp

from kafkacodec._cursor cimport Cursor, cursor_init
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from kafkacodec._format cimport (BatchHeader, CODEC_NONE, CONTROL_FLAG, FRAME_OK, V2_HEADER_SIZE,
                                 compute_crc, frame_entry, parse_entry_header, raise_frame_error)
from kafkacodec._mapguard cimport check_read
from kafkacodec._prefetch cimport kc_prefetch
from kafkacodec._v2 cimport V2Record, read_control_type, read_v2_record

import numpy as _np

from kafkacodec.errors import KafkaCodecError

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    # (numpy's .pxd leaves it out: it steals a reference to descr)
    object PyArray_Empty(int nd, cnp.npy_intp* dims, void* descr, int fortran)
    ctypedef struct PyArrayObject_fields:    # numpy's public array struct (PyArray_DESCR reads it)
        PyObject* descr

# The fields of IndexEntry at their offsets; its padding byte is unnamed (itemsize).
INDEX_DTYPE = _np.dtype({
    "names": ["position", "size_in_bytes", "base_offset", "last_offset", "max_timestamp",
              "producer_id", "records_count", "crc", "attributes", "magic", "compression",
              "timestamp_type", "control_type", "crc_valid"],
    "formats": ["i8", "i8", "i8", "i8", "i8", "i8", "i4", "u4", "i2", "i1", "i1", "i1", "i1", "?"],
    "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56, 58, 59, 60, 61, 62],
    "itemsize": 64})
assert INDEX_DTYPE.itemsize == sizeof(IndexEntry)
cdef object INDEX_DESCR = INDEX_DTYPE    # for the C calls below
# Rows are allocated as this field-less dtype of the same size, then given INDEX_DESCR (new_rows)
cdef object ROW_BYTES_DESCR = _np.dtype(("V", sizeof(IndexEntry)))

cdef enum:
    FIRST_ROWS = 65536           # rows filled at most before the array is first doubled
    AHEAD = 12                   # entries index_rows() loads ahead
    RAISED = -9                  # index_rows(): an entry's control record raised


cdef inline int control_type_of(const unsigned char* entry, const BatchHeader* h) except -2 nogil:
    """Control type of an uncompressed v2 control batch (its first record's key), else -1
    (compressed: unknown without decompressing)."""
    cdef Cursor cur
    cdef V2Record rec
    if h.magic < 2 or not h.attributes & CONTROL_FLAG or h.records_count < 1 or h.compression != CODEC_NONE:
        return -1
    cursor_init(&cur, entry + V2_HEADER_SIZE, h.size - V2_HEADER_SIZE, h.position + V2_HEADER_SIZE)
    read_v2_record(&cur, &rec)
    return read_control_type(&rec, h.position)


cdef int index_rows(const unsigned char* data, Py_ssize_t size, Py_ssize_t start, bint file_rules,
                    bint check_crc, IndexEntry* rows, Py_ssize_t cap, Py_ssize_t* n,
                    Py_ssize_t* pos, Py_ssize_t* first_bad) except RAISED nogil:
    """Fill rows[*n:cap] with the entries from data[*pos] on, advancing *n and *pos; returns
    FRAME_OK when the rows are full and another entry follows, else the frame_entry() code
    that ended the walk (*pos: the entry it stopped at, as for a raise)."""
    cdef Py_ssize_t entry_size = 0
    cdef int code
    cdef BatchHeader h
    cdef IndexEntry* row
    while True:
        code = frame_entry(data + pos[0], size - pos[0], file_rules, &entry_size)
        if code != FRAME_OK:
            return code
        if n[0] == cap:              # (framed first: full rows at the end of the data are the end)
            return FRAME_OK
        # Each header is a cache (and TLB) miss found only from the one before; a log's batches
        # are mostly alike, so load the header AHEAD entries of this size ahead (a wrong guess
        # only wastes the load).
        if entry_size <= (size - pos[0]) // (AHEAD + 1):
            kc_prefetch(data + pos[0] + AHEAD * entry_size)
        parse_entry_header(data + pos[0], entry_size, start + pos[0], &h)
        row = rows + n[0]
        row.position = h.position
        row.size_in_bytes = entry_size
        row.last_offset = h.last_offset
        row.max_timestamp = h.max_timestamp
        if h.magic < 2:
            row.producer_id = -1
            row.base_offset = -1 if h.compression != CODEC_NONE else h.base_offset
        else:
            row.producer_id = h.producer_id
            row.base_offset = h.base_offset
        row.records_count = h.records_count
        row.crc = h.crc
        row.attributes = h.attributes
        row.magic = h.magic
        row.compression = h.compression
        row.timestamp_type = h.timestamp_type
        row.control_type = -1
        if h.magic >= 2 and h.attributes & CONTROL_FLAG:
            row.control_type = <int8_t>control_type_of(data + pos[0], &h)
        row.crc_valid = check_crc and compute_crc(data + pos[0], &h) == h.crc
        row._pad = 0
        if check_crc and not row.crc_valid and first_bad[0] < 0:
            first_bad[0] = pos[0]
        pos[0] += entry_size
        n[0] += 1


cdef cnp.ndarray new_rows(Py_ssize_t count):
    """An uninitialised INDEX_DTYPE array of `count` rows that owns its memory.  Through numpy's
    C API, not np.empty(): a walk of a 16 MB log takes ~70 us when the log comes from memory,
    and there the Python-level call and method lookup, in caches as cold as the log, cost ~5-10
    us.  Allocated as plain bytes, then given INDEX_DESCR: for a dtype with fields numpy looks
    up a zero-fill loop field by field on every allocation (half of a cold index() of one batch),
    and these fields need none.  The swap is numpy's own dtype setter without its checks, which
    hold here: the same itemsize, no object fields, an array nobody else has seen."""
    cdef cnp.npy_intp dims = count
    cdef PyArrayObject_fields* fields
    Py_INCREF(ROW_BYTES_DESCR)              # PyArray_Empty steals it
    rows = PyArray_Empty(1, &dims, <void*>ROW_BYTES_DESCR, 0)
    fields = <PyArrayObject_fields*><PyObject*>rows
    Py_INCREF(INDEX_DESCR)
    Py_DECREF(<object>fields.descr)
    fields.descr = <PyObject*>INDEX_DESCR
    return rows


cdef int trim_rows(cnp.ndarray rows, Py_ssize_t count) except -1:
    """Shrink rows (that nobody else holds yet) to its first `count` rows, in place."""
    cdef cnp.npy_intp dims = count
    cdef cnp.PyArray_Dims shape
    shape.ptr = &dims
    shape.len = 1
    cnp.PyArray_Resize(rows, &shape, 0, cnp.NPY_CORDER)     # 0: no reference check
    return 0


cdef tuple index_entries(const unsigned char* data, Py_ssize_t size, Py_ssize_t start,
                         bint file_rules, bint check_crc):
    cdef Py_ssize_t n = 0, cap = 1, pos = 0, first = 0, first_bad = -1
    cdef int code = FRAME_OK
    cdef cnp.ndarray result, grown
    error = None
    # One walk, into rows sized from the first entry (a log's batches are alike): doubled when
    # short, trimmed in place at the end.
    if frame_entry(data, size, file_rules, &first) == FRAME_OK:
        cap = min(size // first, FIRST_ROWS)
    result = new_rows(cap)
    while True:
        try:
            with nogil:
                code = index_rows(data, size, start, file_rules, check_crc,
                                  <IndexEntry*>cnp.PyArray_DATA(result), cap, &n, &pos, &first_bad)
        except KafkaCodecError as exc:
            error = exc
            break
        if code != FRAME_OK:
            break
        cap *= 2
        grown = new_rows(cap)
        memcpy(cnp.PyArray_DATA(grown), cnp.PyArray_DATA(result), n * sizeof(IndexEntry))
        result = grown
    if n < cap:
        trim_rows(result, n)
    return result, code, pos, first_bad, error


# scan_entries' names for the index's fields (size: size_in_bytes, count: records_count).
SCAN_FIELDS = ("position", "size", "base_offset", "last_offset", "magic", "attributes",
               "producer_id", "count", "max_timestamp", "control_type")
cdef tuple SCAN_COLUMNS = tuple(zip(SCAN_FIELDS, (
    "position", "size_in_bytes", "base_offset", "last_offset", "magic", "attributes", "producer_id",
    "records_count", "max_timestamp", "control_type")))


def scan_entries(data, Py_ssize_t start=0, Py_ssize_t end=-1, *, str source="<buffer>",
                 Py_ssize_t base=0, bint strict=True, bint check_crc=False):
    """The shallow index of data[start:end] (Records.index(check_crc=False) with the in-memory
    framing rules: the same walk and rows), as a dict of its columns under the names
    SCAN_FIELDS (numpy views of one structured array; legacy compressed wrappers have
    base_offset and count -1), plus "stop" (position after the last complete entry, or of the
    corrupt one) and "error" (None, or the KafkaCodecError found at "stop", its message
    naming `source`, when strict is False; strict raises it).  With check_crc, also
    "crc_valid": whether each entry's checksum matches (a mismatch is not an error here: the
    walk goes on).  Positions are base + the byte in data.  `data` is any C-contiguous buffer,
    read as raw bytes.  Safe to call from several threads at once."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t pos, first_bad
    cdef int code
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if end < 0 or end > view.len:
            end = view.len
        if start < 0 or start > end:
            raise ValueError(f"start {start} outside 0..{end}")
        p = <const unsigned char*>view.buf + start
        rows, code, pos, first_bad, error = index_entries(p, end - start, base + start, False, check_crc)
        try:
            if code < 0:
                raise_frame_error(code, p + pos, base + start + pos)
            if error is not None:
                raise error
        except KafkaCodecError as exc:
            check_read(data, end, exc.position, exc.offset, exc)
            error = exc.with_context(f"{source}: ")
            if strict:
                raise error
        # the entries up to "stop" were judged complete: they must still be there
        check_read(data, min(end, start + pos + <Py_ssize_t>V2_HEADER_SIZE))
        result = {name: rows[field] for name, field in SCAN_COLUMNS}
        if check_crc:
            result["crc_valid"] = rows["crc_valid"]
        result["stop"] = base + start + pos
        result["error"] = error
        return result
    finally:
        PyBuffer_Release(&view)
