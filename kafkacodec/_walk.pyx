# cython: language_level=3
"""Out-of-line error paths of the batch walker (see _walk.pxd)."""

from libc.stdint cimport int64_t
from kafkacodec._format cimport (BatchHeader, MAGIC_OFFSET, V2_ATTRIBUTES_OFFSET,
                                 V2_RECORDS_COUNT_OFFSET)

from kafkacodec.errors import (CorruptRecordError, MisuseError, UnsupportedCompressionError,
                               UnsupportedVersionError)


cdef int raise_walk_fault(int fault, const BatchHeader* h, Py_ssize_t position,
                          int64_t a, int64_t b) except -1 nogil:
    """Raise `fault` for the batch h; `position` (records and inner messages: where the
    fault is) and a, b (numbers for the message) as _walk.pxd passes them."""
    with gil:
        offset = h.base_offset
        if fault == FAULT_NEGATIVE_COUNT:
            raise CorruptRecordError(f"invalid record count {h.records_count} (negative)",
                                     position=h.position + V2_RECORDS_COUNT_OFFSET, offset=offset)
        if fault == FAULT_V2_CODEC:
            raise UnsupportedCompressionError(f"unknown compression type id {h.compression}",
                                              position=h.position + V2_ATTRIBUTES_OFFSET + 1,
                                              offset=offset)
        if fault == FAULT_MAGIC:
            raise UnsupportedVersionError(f"unknown magic {h.magic}",
                                          position=h.position + MAGIC_OFFSET, offset=offset)
        if fault == FAULT_LEGACY_ZSTD:
            raise UnsupportedCompressionError(
                f"zstd compression is not allowed for magic {h.magic}",
                position=h.position + MAGIC_OFFSET + 1, offset=offset)
        if fault == FAULT_LEGACY_CODEC:
            raise UnsupportedCompressionError(f"unknown compression type id {h.compression}",
                                              position=h.position + MAGIC_OFFSET + 1,
                                              offset=offset)
        if fault == FAULT_NULL_WRAPPER:
            raise CorruptRecordError("compressed wrapper message with a null value",
                                     position=h.position, offset=offset)
        if fault == FAULT_NO_INNER:
            raise CorruptRecordError("compressed message set holds no inner messages",
                                     position=position, offset=offset)
        if fault == FAULT_PREMATURE_END:
            raise CorruptRecordError(f"premature end of records: the batch declares {a} "
                                     f"records but holds {b}", position=position, offset=offset)
        if fault == FAULT_LEFT_OVER:
            raise CorruptRecordError(f"records still remaining: {a} bytes left after the {b} "
                                     f"records the batch declares", position=position,
                                     offset=offset)
        if fault == FAULT_INNER_MAGIC:
            raise CorruptRecordError(f"inner message with magic {a}",
                                     position=position + MAGIC_OFFSET, offset=offset)
        raise CorruptRecordError("compressed inner message inside a compressed wrapper",
                                 position=position + MAGIC_OFFSET + 1, offset=offset)


cdef int raise_abort_not_loaded(const char* remedy) except -1 nogil:
    """A read_committed read whose aborted-transaction list stopped loading (MemoryError or bad
    data while it was listed): answering would read a half-built producer set."""
    with gil:
        raise MisuseError("the aborted-transaction list failed to load: "
                          + remedy.decode("ascii"))
