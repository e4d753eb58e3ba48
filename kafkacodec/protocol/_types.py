"""The decoded forms of the protocol messages kafkacodec speaks (field names copy Kafka's)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from kafkacodec.protocol._fetch import FetchPartitionData

__all__ = [
    "AbortedTransaction",
    "FetchTopicResponse",
    "FetchResponse",
    "ProducePartitionResponse",
    "ProduceTopicResponse",
    "ProduceResponse",
    "ApiVersionRange",
    "ApiVersionsResponse",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataTopic",
    "MetadataResponse",
]


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


class FetchTopicResponse(NamedTuple):
    topic: str | None            # versions 0-12
    topic_id: uuid.UUID | None   # versions 13+
    partitions: Sequence[FetchPartitionData]   # decoded: FetchPartitions, made on access


class FetchResponse(NamedTuple):
    api_version: int
    correlation_id: int | None   # None when decoded without the response header
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: Sequence[FetchTopicResponse]   # decoded: FetchTopics, made on access
    size: int                    # bytes decoded (header included)


class ProducePartitionResponse(NamedTuple):
    partition_index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: list[tuple[int, str | None]]
    error_message: str | None


class ProduceTopicResponse(NamedTuple):
    name: str
    partition_responses: Sequence[ProducePartitionResponse]   # decoded: ProducePartitions


class ProduceResponse(NamedTuple):
    api_version: int
    correlation_id: int | None
    responses: Sequence[ProduceTopicResponse]   # decoded: ProduceTopics, made on access
    throttle_time_ms: int


class ApiVersionRange(NamedTuple):
    api_key: int
    min_version: int
    max_version: int


class ApiVersionsResponse(NamedTuple):
    api_version: int
    correlation_id: int | None
    error_code: int
    api_keys: list[ApiVersionRange]
    throttle_time_ms: int

    def max_version(self, api_key: int) -> int | None:
        for entry in self.api_keys:
            if entry.api_key == api_key:
                return entry.max_version
        return None


class MetadataBroker(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class MetadataPartition(NamedTuple):
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[MetadataPartition]   # decoded: MetadataPartitions


class MetadataResponse(NamedTuple):
    api_version: int
    correlation_id: int | None
    throttle_time_ms: int
    brokers: Sequence[MetadataBroker]   # decoded: MetadataBrokers, made on access
    cluster_id: str | None
    controller_id: int
    topics: Sequence[MetadataTopic]   # decoded: MetadataTopics, made on access

    def leader(self, topic: str, partition: int) -> MetadataBroker | None:
        """The broker leading `topic`/`partition`, or None when unknown."""
        brokers = {b.node_id: b for b in self.brokers}
        for t in self.topics:
            if t.name == topic:
                for p in t.partitions:
                    if p.partition_index == partition:
                        return brokers.get(p.leader_id)
        return None
