from kafkacodec import Compression, ControlType, FileRecords, MemoryRecords, TimestampType

records = MemoryRecords(b"", max_decompressed_size=1 << 20)
for batch in records.batches():
    codec: Compression = batch.compression
    kind: TimestampType = batch.timestamp_type
    raw: memoryview = batch.raw
    count: int | None = batch.record_count
    horizon: int | None = batch.delete_horizon_ms
    for r in batch:
        value: bytes | None = r.value
        headers: tuple[tuple[str, bytes | None], ...] = r.headers
        marker: ControlType | int | None = r.control_type
    bad: bytes = batch.record_count  # E: Incompatible types in assignment
n: int = records.validate()
rows = records.index(check_crc=False)
with FileRecords.open("x.log") as segment:
    part: FileRecords = segment.slice(0, 10)
MemoryRecords(1)  # E: Argument 1 to "MemoryRecords" has incompatible type "int"
