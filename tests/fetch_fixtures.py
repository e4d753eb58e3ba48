"""FetchResponses built by kafka-python (an independent implementation) for the ring tests."""

import uuid

from kafka.protocol.consumer import FetchResponse
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData


def build_records(records, *, magic=2, compression=0):
    """records: [(timestamp, key, value, headers)] -> one batch (or message set) as bytes."""
    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 26)
    for timestamp, key, value, headers in records:
        builder.append(timestamp=timestamp, key=key, value=value,
                       headers=headers if magic == 2 else None)
    builder.close()
    return bytes(builder.buffer())


def build_fetch_response(version, correlation_id, topics, aborted=None):
    """topics: [(name, [(partition, records bytes or None)])] -> framed response bytes.
    aborted: [(producer_id, first_offset)] listed for every partition (None: null)."""
    aborted_list = None if aborted is None else [
        PartitionData.AbortedTransaction(producer_id=pid, first_offset=first)
        for pid, first in aborted]
    response = FetchResponse[version](
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[TopicResponse(**topic_field(version, name), partitions=[
            PartitionData(partition_index=p, error_code=0, high_watermark=100,
                          last_stable_offset=100, log_start_offset=0,
                          aborted_transactions=aborted_list, preferred_read_replica=-1,
                          records=r)
            for p, r in parts]) for name, parts in topics])
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def topic_id(name):
    return uuid.uuid5(uuid.NAMESPACE_URL, "kafka:" + name)


def topic_field(version, name):
    """Fetch v13+ names topics by id."""
    return {"topic_id": topic_id(name)} if version >= 13 else {"topic": name}


def reference_records(frame, version):
    """Decode a framed response with kafka-python: [(topic, partition, offset, timestamp,
    key, value, headers)]."""
    decoded = FetchResponse.decode(frame, version=version, header=True, framed=True)
    out = []
    for topic in decoded.responses:
        for part in topic.partitions:
            if not part.records:
                continue
            records = MemoryRecords(bytes(part.records))
            while (batch := records.next_batch()) is not None:
                for rec in batch:
                    out.append((topic.topic if version < 13 else topic.topic_id,
                                part.partition_index, rec.offset, rec.timestamp,
                                rec.key, rec.value, tuple((k, v) for k, v in rec.headers)))
    return out
