"""Record-like classes agree on types (issue 15 item 5): for the same record, Record,
RecordBatch, the ring's FetchRecord (and its copy()), the builder and the mirror's
RawBytesBatchRecord give `timestamp_type` as TimestampType, `compression` as Compression,
headers as a tuple of (str, bytes | None) tuples, and a topic id as uuid.UUID (as the protocol
decoder does); the enums stay ints, so comparing with 0/1 still works."""

import os
import sys
import uuid

from kafkacodec import (Compression, MemoryRecords, MemoryRecordsBuilder, ResponseRingBuffer,
                        TimestampType)
from kafkacodec.mirror.shallow import shallow_records
from kafkacodec.protocol import decode_fetch_response

sys_path_entry = os.path.dirname(__file__)   # --import-mode=importlib: helpers beside the tests
if sys_path_entry not in sys.path:
    sys.path.insert(0, sys_path_entry)
from fetch_fixtures import build_fetch_response, topic_id  # noqa: E402

HEADERS = [("h", b"v"), ("n", None)]


def one_batch():
    builder = MemoryRecordsBuilder(magic=2, compression="gzip", base_offset=10,
                                   timestamp_type=TimestampType.LOG_APPEND_TIME,
                                   log_append_time=1_700_000_000_123)
    builder.append(1_700_000_000_000, b"k", b"v", headers=HEADERS)
    return builder, builder.build()


def assert_header_types(headers):
    assert type(headers) is tuple
    for pair in headers:
        assert type(pair) is tuple and type(pair[0]) is str
        assert pair[1] is None or type(pair[1]) is bytes
    assert headers == tuple(HEADERS)


def assert_enum_types(owner, compression=True):
    assert type(owner.timestamp_type) is TimestampType, type(owner).__name__
    assert owner.timestamp_type == TimestampType.LOG_APPEND_TIME == 1       # still an int
    if compression:
        assert type(owner.compression) is Compression, type(owner).__name__
        assert owner.compression == Compression.GZIP == 1


def test_every_record_like_class_gives_the_same_types_for_the_same_record():
    builder, data = one_batch()
    assert_enum_types(builder)

    batch = next(MemoryRecords(data).batches())
    record = next(MemoryRecords(data).records())
    assert_enum_types(batch)
    assert_enum_types(record, compression=False)       # a Record has no codec of its own
    assert_header_types(record.headers)

    raw = next(shallow_records(data))
    assert_enum_types(raw)

    frame = build_fetch_response(13, 1, [("orders", [(0, data)])])
    ring = ResponseRingBuffer(len(frame) + 5)
    ring.feed(frame)
    resp = ring.next_response()
    decoded = decode_fetch_response(resp.payload, 13)
    protocol_id = decoded.responses[0].topic_id
    del decoded                                   # it held raw exports of the payload
    for rec in resp.records(13):
        assert_enum_types(rec)
        assert_header_types(rec.headers)
        assert type(rec.topic_id) is uuid.UUID and type(protocol_id) is uuid.UUID
        assert rec.topic_id == protocol_id == topic_id("orders")
        assert rec.topic_id.bytes == topic_id("orders").bytes     # the raw 16 bytes
        kept = rec.copy()
        assert_header_types(kept[6])
        assert (rec.offset, rec.timestamp, rec.key, rec.value) == (
            record.offset, record.timestamp, record.key, record.value)
    resp.release()
