"""zstd v2 batches rebuilt with another codec, the batches staying v2: for readers that cannot
read zstd although they read v2 batches (Fetch v4-v9: Kafka's Java clients 0.11-2.0, librdkafka
and kafka-python of that age; Kafka answers them UNSUPPORTED_COMPRESSION_TYPE, KIP-110).

A rebuilt batch keeps what a reader or a later writer relies on: base offset and each record's
offset (compaction gaps too), timestamps and the timestamp type (LogAppendTime: the batch's max
timestamp), keys, values, headers, producer id, epoch, base sequence, the transactional flag and
the partition leader epoch.  Its CRC is new (the bytes are).  Other entries pass unchanged; a
partial last entry (a fetch cut at max_bytes) is left out, as the reader would drop it."""

from __future__ import annotations

from kafkacodec._builder import MemoryRecordsBuilder
from kafkacodec._records import Records
from kafkacodec._types import Compression, TimestampType

__all__ = ["recompress_zstd"]


def recompress_zstd(records: Records, codec: str) -> bytes | None:
    """`records` with every zstd v2 batch rebuilt with `codec` ("none", "gzip", "snappy",
    "lz4"), or None when it holds no zstd batch (send it as it is).  Raises the reader's
    KafkaCodecError for a corrupt batch."""
    batches = list(records.batches())
    if not any(b.compression == Compression.ZSTD for b in batches):
        return None
    out = bytearray()
    for batch in batches:
        if batch.compression != Compression.ZSTD:
            out += batch.raw
            continue
        append_time = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        builder = MemoryRecordsBuilder(
            magic=2, compression=codec, timestamp_type=batch.timestamp_type, base_offset=batch.base_offset,
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence, is_transactional=batch.is_transactional,
            log_append_time=batch.max_timestamp if append_time else None,
            partition_leader_epoch=batch.partition_leader_epoch,
            delete_horizon_ms=batch.delete_horizon_ms)
        for record in batch:
            builder.append_with_offset(record.offset, record.timestamp, record.key, record.value, record.headers)
        out += builder.build()
    return bytes(out)
