"""kafka-python as the independent oracle: decode a log file record by record into the same
row dicts our Arrow decoder produces (Spark's Kafka schema plus the batch columns)."""

from __future__ import annotations

import datetime

from kafka.record.memory_records import MemoryRecords

UTC = datetime.timezone.utc


def kafka_python_rows(data: bytes, topic: str, partition: int, *, keep_control=False,
                      include_headers=True):
    rows = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        magic = batch.magic
        control = magic == 2 and batch.is_control_batch
        if control and not keep_control:
            continue
        for rec in batch:
            ts = rec.timestamp if rec.timestamp is not None else -1
            row = {
                "key": rec.key, "value": rec.value, "topic": topic, "partition": partition,
                "offset": rec.offset,
                "timestamp": datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=ts),
                "timestampType": rec.timestamp_type if rec.timestamp_type is not None else -1,
            }
            if include_headers:
                headers = list(rec.headers) if magic == 2 else []
                row["headers"] = [{"key": k, "value": v} for k, v in headers] or None
            row.update({
                "magic": magic,
                "producerId": batch.producer_id if magic == 2 else -1,
                "isTransactional": bool(magic == 2 and batch.is_transactional),
                "isControl": bool(control),
            })
            rows.append(row)
    return rows
