# The ProduceRequest writer (protocol/_produce.pyx) for other modules: one framing of topics and
# partitions, with what goes in each partition's records field left to a _PartitionRecords.

from libc.stdint cimport int16_t, int32_t
from kafkacodec._writer cimport Writer, WriteBuffer

cdef class _PartitionRecords:
    # A partition's records field: buffers sent back to back (this class), or what a subclass
    # makes of its own `records` objects (the mirror's rewritten batches).
    cdef Py_ssize_t measure(self, object records) except -2     # bytes to write; -1: null
    cdef int write(self, Writer* w, object records, Py_ssize_t size) except -1

cdef WriteBuffer write_produce_request(object topic_data, int version, int32_t correlation_id,
                                       object client_id, int16_t acks, int32_t timeout_ms,
                                       object transactional_id, WriteBuffer out,
                                       _PartitionRecords records)
