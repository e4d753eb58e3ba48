"""The broker's record of its remote segments (KIP-405), read offline from the
`__remote_log_metadata-<n>` partitions of its log directory (Kafka's topic-based
RemoteLogMetadataManager writes them): which remote segments finished copying, which are being
deleted, which partitions were deleted.

Each record's value is a frame (unsigned varints: frame version 1, record type, version, as
Kafka's metadata records) then the record: RemoteLogSegmentMetadataRecord (type 0: a copy
started, with the segment's offsets), RemoteLogSegmentMetadataUpdateRecord (type 1: a new state)
and RemotePartitionDeleteMetadataRecord (type 2).  A segment's state is its last record's:
COPY_SEGMENT_STARTED (0), COPY_SEGMENT_FINISHED (1), DELETE_SEGMENT_STARTED (2),
DELETE_SEGMENT_FINISHED (3).  Only a finished copy is part of the log: a listing of the remote
store also finds copies still in progress (or abandoned by a broker that failed) and segments
being deleted.  The schemas are our own definitions of Kafka 4.1's, read by protocol/_schema.py.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

from kafkacodec.errors import KafkaCodecError
from kafkacodec.logdir._layout import METADATA_TOPIC
from kafkacodec.protocol._schema import BOOL, BYTES, INT8, INT32, INT64, STRING, UUID, Message, Reader, array, f, \
    struct_field

__all__ = ["RemoteSegment", "METADATA_TOPIC", "COPY_FINISHED", "remote_segments", "segment_id_of"]

COPY_STARTED, COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED = range(4)
STATES = {COPY_STARTED: "COPY_SEGMENT_STARTED", COPY_FINISHED: "COPY_SEGMENT_FINISHED",
          DELETE_STARTED: "DELETE_SEGMENT_STARTED", DELETE_FINISHED: "DELETE_SEGMENT_FINISHED"}

_TOPIC_ID_PARTITION = (f("name", STRING), f("id", UUID), f("partition", INT32))
_SEGMENT_ID = (struct_field("topic_id_partition", _TOPIC_ID_PARTITION), f("id", UUID))
RECORDS = {m.api_key: m for m in (
    Message("RemoteLogSegmentMetadataRecord", 0, "0-1", "0+", (
        struct_field("remote_log_segment_id", _SEGMENT_ID), f("start_offset", INT64), f("end_offset", INT64),
        f("broker_id", INT32), f("max_timestamp_ms", INT64), f("event_timestamp_ms", INT64),
        array("segment_leader_epochs", (f("leader_epoch", INT32), f("offset", INT64))),
        f("segment_size_in_bytes", INT32), f("custom_metadata", BYTES, nullable="0+", default=None),
        f("remote_log_segment_state", INT8), f("txn_index_empty", BOOL, tag=0, default=False),
        f("broker_leader_epoch", INT32, "1+", tag=1, default=-1))),
    Message("RemoteLogSegmentMetadataUpdateRecord", 1, "0-1", "0+", (
        struct_field("remote_log_segment_id", _SEGMENT_ID), f("broker_id", INT32), f("event_timestamp_ms", INT64),
        f("custom_metadata", BYTES, nullable="0+", default=None), f("remote_log_segment_state", INT8),
        f("broker_leader_epoch", INT32, "1+", tag=0, default=-1), f("end_offset", INT64, "1+", tag=1, default=-1))),
    Message("RemotePartitionDeleteMetadataRecord", 2, "0-1", "0+", (
        struct_field("topic_id_partition", _TOPIC_ID_PARTITION), f("broker_id", INT32),
        f("event_timestamp_ms", INT64), f("remote_partition_delete_state", INT8),
        f("broker_leader_epoch", INT32, "1+", tag=0, default=-1))),
)}


def segment_id_of(value: uuid.UUID) -> str:
    """A segment id as Kafka names its files (`Uuid.toString()`: URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


@dataclass
class RemoteSegment:
    """What the broker recorded of one remote segment: its offsets and last state."""
    topic: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    state: int

    @property
    def state_name(self) -> str:
        return STATES.get(self.state, f"state {self.state}")


def _record(value: bytes) -> tuple[int, dict[str, Any]]:
    reader = Reader(value)
    frame = reader.uvarint("frame version")
    kind = reader.uvarint("record type")
    version = reader.uvarint("record version")
    message = RECORDS.get(kind)
    if frame != 1 or message is None or not message.min_version <= version <= message.max_version:
        raise ValueError(f"frame version {frame}, record type {kind} version {version}: not a record of Kafka's "
                         "remote log metadata")
    return kind, message.decode(value, version, reader.pos)


def remote_segments(values: list[bytes | None]) -> tuple[dict[tuple[str, int], dict[str, RemoteSegment]],
                                                         set[tuple[str, int]], list[str]]:
    """The remote segments recorded by the values of `__remote_log_metadata` records (in offset
    order, partitions in any order): ((topic, partition) -> segment id -> RemoteSegment, the
    partitions whose remote data was deleted, what could not be read)."""
    segments: dict[tuple[str, int], dict[str, RemoteSegment]] = {}
    deleted: set[tuple[str, int]] = set()
    unreadable: list[str] = []
    for value in values:
        if value is None:
            continue
        try:
            kind, record = _record(value)
        except (KafkaCodecError, ValueError) as exc:
            unreadable.append(str(exc))
            continue
        if kind == 2:
            tp = record["topic_id_partition"]
            deleted.add((tp["name"], tp["partition"]))
            continue
        sid = record["remote_log_segment_id"]
        tp = sid["topic_id_partition"]
        key, name = (tp["name"], tp["partition"]), segment_id_of(sid["id"])
        if kind == 0:
            segments.setdefault(key, {})[name] = RemoteSegment(
                key[0], key[1], name, record["start_offset"], record["end_offset"], record["remote_log_segment_state"])
        elif name in segments.get(key, {}):
            segments[key][name].state = record["remote_log_segment_state"]
    return segments, deleted, unreadable
