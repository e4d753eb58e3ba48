"""The control-plane messages of the consumer core and the mirror, through kafka-python's
protocol classes (generated from Kafka's own message schemas, every version from 0): ListOffsets,
FindCoordinator, OffsetCommit, OffsetFetch and InitProducerId.  Needs the ``kafkacodec[consumer]``
extra (kafka-python >= 3.0).  The hot messages (Fetch, Produce) and Metadata/ApiVersions have
compiled codecs of their own in this package.

`encode_request(message, api_version, correlation_id, client_id)` frames any of them (int32 size
+ request header + body); `decode_response(cls, data, api_version)` reads a response payload
(starting at the correlation id, the int32 size already consumed) and raises
:class:`kafkacodec.CorruptRecordError` for bytes the schema does not accept.  The ``*_request``
helpers build the message objects with the fields every supported version has; ``MAX_VERSIONS``
caps each api at the last version whose layout they fill (later versions change the shape:
topic ids, batched coordinator keys).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from kafkacodec.errors import CorruptRecordError

__all__ = [
    "LIST_OFFSETS",
    "FIND_COORDINATOR",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "INIT_PRODUCER_ID",
    "MAX_VERSIONS",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "encode_request",
    "decode_response",
    "list_offsets_request",
    "find_coordinator_request",
    "offset_commit_request",
    "offset_fetch_request",
    "init_producer_id_request",
    "request_encoder",
    "response_decoder",
    "RESPONSES",
]

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID = 2, 8, 9, 10, 22

#: The newest version of each api whose layout the helpers below fill (and the oldest a
#: Kafka 4 broker still answers is at or below it).
MAX_VERSIONS = {LIST_OFFSETS: 7, OFFSET_COMMIT: 9, OFFSET_FETCH: 7, FIND_COORDINATOR: 3,
                INIT_PRODUCER_ID: 4}

#: ListOffsets timestamps (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP / LATEST_TIMESTAMP).
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1

RESPONSES: dict[int, Any] = {
    LIST_OFFSETS: ListOffsetsResponse,
    OFFSET_COMMIT: OffsetCommitResponse,
    OFFSET_FETCH: OffsetFetchResponse,
    FIND_COORDINATOR: FindCoordinatorResponse,
    INIT_PRODUCER_ID: InitProducerIdResponse,
}


def encode_request(message: Any, api_version: int, correlation_id: int,
                   client_id: str | None = "kafkacodec") -> bytes:
    """`message` framed for `api_version`: int32 size + request header + body."""
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(version=api_version, header=True, framed=True))


def decode_response(response_class: Any, data: Any, api_version: int) -> Any:
    """Decode a response payload (correlation id first).  CorruptRecordError when the schema
    does not accept the bytes (kafka-python's reader does not say where it stopped)."""
    try:
        return response_class.decode(bytes(data), version=api_version, header=True)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError, TypeError) as exc:
        raise CorruptRecordError(f"malformed {response_class.__name__} v{api_version}: {exc}",
                                 position=0) from None


def request_encoder(message: Any, client_id: str | None) -> Callable[[int, int], bytes]:
    """`encode(api_version, correlation_id)`, the consumer core's Request.encode, for `message`."""
    def encode(api_version: int, correlation_id: int) -> bytes:
        return encode_request(message, api_version, correlation_id, client_id)

    return encode


def response_decoder(api_key: int) -> Callable[[Any, int], Any]:
    """`decode(response, api_version)` for Cluster.call: a ring response's payload decoded."""
    response_class = RESPONSES[api_key]

    def decode(response: Any, api_version: int) -> Any:
        return decode_response(response_class, response.payload, api_version)

    return decode


def list_offsets_request(partitions: Mapping[str, Iterable[tuple[int, int]]], *,
                         isolation_level: int = 0) -> Any:
    """ListOffsets for {topic: [(partition, timestamp)]} (timestamp -2 earliest, -1 latest:
    with isolation_level 1 the last stable offset)."""
    topic = ListOffsetsRequest.ListOffsetsTopic
    part = topic.ListOffsetsPartition
    return ListOffsetsRequest(
        replica_id=-1, isolation_level=isolation_level,
        topics=[topic(name=name, partitions=[
            part(partition_index=p, current_leader_epoch=-1, timestamp=ts, max_num_offsets=1)
            for p, ts in parts]) for name, parts in partitions.items()])


def find_coordinator_request(key: str, key_type: int = 0) -> Any:
    """FindCoordinator for a group (key_type 0) or a transactional id (1)."""
    return FindCoordinatorRequest(key=key, key_type=key_type)


def offset_commit_request(group_id: str, offsets: Mapping[str, Iterable[tuple[int, int]]], *,
                          generation_id: int = -1, member_id: str = "",
                          metadata: str | None = "") -> Any:
    """OffsetCommit of {topic: [(partition, next offset to read)]}; generation -1 and an empty
    member id commit for a group without active members (a "simple" consumer's commit)."""
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=generation_id, member_id=member_id,
        group_instance_id=None, retention_time_ms=-1,
        topics=[topic(name=name, partitions=[
            part(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                 commit_timestamp=-1, committed_metadata=metadata) for p, o in parts])
            for name, parts in offsets.items()])


def offset_fetch_request(group_id: str, partitions: Mapping[str, Iterable[int]]) -> Any:
    topic = OffsetFetchRequest.OffsetFetchRequestTopic
    return OffsetFetchRequest(group_id=group_id, require_stable=True,
                              topics=[topic(name=name, partition_indexes=list(parts))
                                      for name, parts in partitions.items()])


def init_producer_id_request(transactional_id: str | None = None, *,
                             transaction_timeout_ms: int = 60000) -> Any:
    """InitProducerId for an idempotent producer (no transactional id)."""
    return InitProducerIdRequest(transactional_id=transactional_id,
                                 transaction_timeout_ms=transaction_timeout_ms,
                                 producer_id=-1, producer_epoch=-1)
