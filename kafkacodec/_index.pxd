# The shallow index: one row per complete log entry (its framing and header, no record decode).
# The one implementation under Records.index() (_records) and kafkacodec.arrow.scan_entries
# (_arrow): index_entries() walks, INDEX_DTYPE (in _index.pyx) names the row's fields.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

cdef packed struct IndexEntry:
    int64_t position
    int64_t size_in_bytes
    int64_t base_offset             # legacy compressed wrapper: -1 (unknown without decompressing)
    int64_t last_offset
    int64_t max_timestamp
    int64_t producer_id             # legacy: -1
    int32_t records_count           # legacy: 1, compressed wrapper -1
    uint32_t crc
    int16_t attributes
    int8_t magic
    int8_t compression
    int8_t timestamp_type
    int8_t control_type             # uncompressed v2 control batch: its first record's type, else -1
    uint8_t crc_valid
    uint8_t _pad

# (rows, code, pos, first_bad, error): rows (INDEX_DTYPE) for the complete entries of
# data[0:size] from the start; code: the frame_entry() code that ended the walk (FRAME_END, or
# negative: a framing error at pos); first_bad: where the first checksum mismatch is (-1: none;
# only with check_crc); error: the KafkaCodecError an entry's control record raised at pos
# (rows end before it), else None.  Positions are start + the offset in data.
cdef tuple index_entries(const unsigned char* data, Py_ssize_t size, Py_ssize_t start,
                         bint file_rules, bint check_crc)
