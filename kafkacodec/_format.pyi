# The record-format layout constants (defined once, in _format.pxd: a cpdef enum), for the
# Python layers: entry framing, v0/v1 and v2 header field offsets, attribute bits, codec ids,
# sentinels.  The C-level framing and header parsing are not Python-visible.

from typing_extensions import Buffer

CODEC_GZIP: int
CODEC_LZ4: int
CODEC_NONE: int
CODEC_SNAPPY: int
CODEC_ZSTD: int
COMPRESSION_MASK: int
CONTROL_FLAG: int
DELETE_HORIZON_FLAG: int
HEADER_SIZE_UP_TO_MAGIC: int
LEGACY_ATTRIBUTES_OFFSET: int
LEGACY_CRC_OFFSET: int
LEGACY_TIMESTAMP_OFFSET: int
LOG_OVERHEAD: int
MAGIC_OFFSET: int
NO_PARTITION_LEADER_EPOCH: int
NO_PRODUCER_EPOCH: int
NO_PRODUCER_ID: int
NO_SEQUENCE: int
NO_TIMESTAMP: int
SIZE_OFFSET: int
TIMESTAMP_CREATE: int
TIMESTAMP_LOG_APPEND: int
TIMESTAMP_NONE: int
TIMESTAMP_TYPE_MASK: int
TRANSACTIONAL_FLAG: int
V0_RECORD_OVERHEAD: int
V1_RECORD_OVERHEAD: int
V2_ATTRIBUTES_OFFSET: int
V2_BASE_SEQUENCE_OFFSET: int
V2_BASE_TIMESTAMP_OFFSET: int
V2_CRC_OFFSET: int
V2_HEADER_SIZE: int
V2_LAST_OFFSET_DELTA_OFFSET: int
V2_MAX_RECORD_OVERHEAD: int
V2_MAX_TIMESTAMP_OFFSET: int
V2_PARTITION_LEADER_EPOCH_OFFSET: int
V2_PRODUCER_EPOCH_OFFSET: int
V2_PRODUCER_ID_OFFSET: int
V2_RECORDS_COUNT_OFFSET: int

def entry_head(data: Buffer, position: int = 0) -> tuple[int, int] | None: ...
