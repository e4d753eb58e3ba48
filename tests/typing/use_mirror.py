import uuid

from kafkacodec import TimestampType
from kafkacodec._writer import WriteBuffer
from kafkacodec.mirror import RawBatchesBuilder, fetch_to_produce, shallow_records, trim_batch
from kafkacodec.protocol import decode_fetch_response, encode_fetch_request, encode_produce_request

raw: bytes = encode_fetch_request([("t", [(0, 5)])], api_version=12)
response = decode_fetch_response(bytearray(raw), 12, offset=4)
for topic in response.responses:
    for part in topic.partitions:
        if part.records is not None:
            for batch in shallow_records(part.records, 3):
                last: int = batch.offset
                size: int = len(batch.value)
                kind: TimestampType = batch.timestamp_type
builder = RawBatchesBuilder(1 << 20)
ok: bool = builder.append(b"")
frame: WriteBuffer | None = fetch_to_produce(response, next_offsets={}, topic_names={uuid.uuid4(): "t"})
out: WriteBuffer = encode_produce_request([("t", [(0, [b"a", memoryview(b"b")])])])
trimmed = trim_batch(b"", 3)
count: int = trimmed.record_count  # E: has no attribute "record_count" # E: Incompatible types in assignment
