"""The control-plane requests of the consumer core and the mirror (ListOffsets, FindCoordinator,
OffsetCommit, OffsetFetch, InitProducerId) and of a SASL client (SaslHandshake,
SaslAuthenticate), through the schema codec (protocol/messages.py, protocol/_schema.py).  The
hot messages (Fetch, Produce) and Metadata/ApiVersions have compiled codecs of their own in
this package.

`encode_request(message, api_version, correlation_id, client_id)` frames any of them (int32 size
+ request header + body); `decode_response(message, data, api_version)` reads a response
payload (starting at the correlation id, the int32 size already consumed) into `Struct`s whose
fields read as attributes (`answer.topics[0].partitions[0].error_code`), and raises
:class:`kafkacodec.CorruptRecordError` naming the byte where the schema does not accept them.
The ``*_request`` helpers fill the fields of every version up to ``MAX_VERSIONS[api_key]``, the
last version whose layout they fill (later versions change the shape: topic ids, batched
coordinator keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from kafkacodec.protocol import messages
from kafkacodec.protocol._schema import Message
from kafkacodec.protocol.api import ApiKey

__all__ = [
    "MAX_VERSIONS",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "RESPONSES",
    "Outgoing",
    "encode_request",
    "decode_response",
    "list_offsets_request",
    "find_coordinator_request",
    "offset_commit_request",
    "offset_fetch_request",
    "init_producer_id_request",
    "describe_configs_request",
    "create_topics_request",
    "sasl_handshake_request",
    "sasl_authenticate_request",
    "request_encoder",
    "response_decoder",
]

#: The newest version of each api whose layout the helpers below fill (and the oldest a
#: Kafka 4 broker still answers is at or below it).
MAX_VERSIONS: dict[int, int] = {
    ApiKey.LIST_OFFSETS: 7, ApiKey.OFFSET_COMMIT: 9, ApiKey.OFFSET_FETCH: 7,
    ApiKey.FIND_COORDINATOR: 3, ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.CREATE_TOPICS: 7,
    ApiKey.SASL_HANDSHAKE: 1, ApiKey.SASL_AUTHENTICATE: 2}

#: DescribeConfigs resource type of a topic (Kafka's ConfigResource.Type.TOPIC).
TOPIC_RESOURCE = 2

#: ListOffsets timestamps (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP / LATEST_TIMESTAMP).
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1

#: api key -> the response's schema (what `decode_response` takes).
RESPONSES = messages.RESPONSES


class Outgoing(NamedTuple):
    """A request body to send: its schema and its fields (snake_case names)."""
    message: Message
    value: dict[str, Any]


def encode_request(message: Outgoing, api_version: int, correlation_id: int,
                   client_id: str | None = "kafkacodec") -> bytes:
    """`message` framed for `api_version`: int32 size + request header + body."""
    return bytes(messages.encode_request(message.message, api_version, correlation_id, client_id,
                                         message.value))


def decode_response(response: Message, data: Any, api_version: int) -> Any:
    """A response payload (correlation id first) as Structs; CorruptRecordError, naming the
    byte, when the schema does not accept the bytes."""
    return messages.decode_response(response, data, api_version)


def request_encoder(message: Outgoing, client_id: str | None) -> Callable[[int, int], bytes]:
    """`encode(api_version, correlation_id)`, the consumer core's Request.encode, for `message`."""
    def encode(api_version: int, correlation_id: int) -> bytes:
        return encode_request(message, api_version, correlation_id, client_id)

    return encode


def response_decoder(api_key: int) -> Callable[[Any, int], Any]:
    """`decode(response, api_version)` for Cluster.call: a ring response's payload decoded."""
    response = RESPONSES[api_key]

    def decode(ring_response: Any, api_version: int) -> Any:
        return decode_response(response, ring_response.payload, api_version)

    return decode


def list_offsets_request(partitions: Mapping[str, Iterable[tuple[int, int]]], *,
                         isolation_level: int = 0) -> Outgoing:
    """ListOffsets for {topic: [(partition, timestamp)]} (timestamp -2 earliest, -1 latest:
    with isolation_level 1 the last stable offset)."""
    return Outgoing(messages.LIST_OFFSETS_REQUEST, {
        "replica_id": -1, "isolation_level": isolation_level,
        "topics": [{"name": name, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts, "max_num_offsets": 1}
            for p, ts in parts]} for name, parts in partitions.items()]})


def find_coordinator_request(key: str, key_type: int = 0) -> Outgoing:
    """FindCoordinator for a group (key_type 0) or a transactional id (1)."""
    return Outgoing(messages.FIND_COORDINATOR_REQUEST, {"key": key, "key_type": key_type})


def offset_commit_request(group_id: str, offsets: Mapping[str, Iterable[tuple[int, int]]], *,
                          generation_id: int = -1, member_id: str = "",
                          metadata: str | None = "") -> Outgoing:
    """OffsetCommit of {topic: [(partition, next offset to read)]}; generation -1 and an empty
    member id commit for a group without active members (a "simple" consumer's commit)."""
    return Outgoing(messages.OFFSET_COMMIT_REQUEST, {
        "group_id": group_id, "generation_id_or_member_epoch": generation_id,
        "member_id": member_id, "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": name, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
             "commit_timestamp": -1, "committed_metadata": metadata} for p, o in parts]}
            for name, parts in offsets.items()]})


def offset_fetch_request(group_id: str, partitions: Mapping[str, Iterable[int]]) -> Outgoing:
    return Outgoing(messages.OFFSET_FETCH_REQUEST, {
        "group_id": group_id, "require_stable": True,
        "topics": [{"name": name, "partition_indexes": list(parts)}
                   for name, parts in partitions.items()]})


def init_producer_id_request(transactional_id: str | None = None, *,
                             transaction_timeout_ms: int = 60000) -> Outgoing:
    """InitProducerId for an idempotent producer (no transactional id)."""
    return Outgoing(messages.INIT_PRODUCER_ID_REQUEST, {
        "transactional_id": transactional_id, "transaction_timeout_ms": transaction_timeout_ms,
        "producer_id": -1, "producer_epoch": -1})


def describe_configs_request(topics: Iterable[str], keys: Iterable[str] | None = None) -> Outgoing:
    """DescribeConfigs (v1+) of these topics' configs (`keys`, or None: every one), without synonyms."""
    wanted = None if keys is None else list(keys)
    return Outgoing(messages.DESCRIBE_CONFIGS_REQUEST, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": t, "configuration_keys": wanted}
                      for t in topics],
        "include_synonyms": False, "include_documentation": False})


def create_topics_request(topics: Mapping[str, tuple[int, Mapping[str, str]]], *,
                          timeout_ms: int = 30000) -> Outgoing:
    """CreateTopics for {name: (partitions, configs)}, with the cluster's default replication
    factor (-1: KIP-464, v4+)."""
    return Outgoing(messages.CREATE_TOPICS_REQUEST, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                    "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}
                   for name, (partitions, configs) in topics.items()],
        "timeout_ms": timeout_ms, "validate_only": False})


def sasl_handshake_request(mechanism: str) -> Outgoing:
    """SaslHandshake (KIP-43): the mechanism the client will authenticate with ("PLAIN",
    "SCRAM-SHA-512"...); v1 means the tokens follow in SaslAuthenticate requests (KIP-152)."""
    return Outgoing(messages.SASL_HANDSHAKE_REQUEST, {"mechanism": mechanism})


def sasl_authenticate_request(auth_bytes: bytes) -> Outgoing:
    """SaslAuthenticate (KIP-152): one token of the mechanism's exchange."""
    return Outgoing(messages.SASL_AUTHENTICATE_REQUEST, {"auth_bytes": auth_bytes})
