"""The control-plane messages kafkacodec speaks, as schemas for protocol/_schema.py: what
`kafkacodec serve` answers, what the consumer core and the mirror send (protocol/control.py),
the SASL messages, and the request and response headers.

These are kafkacodec's own definitions (the facts of Kafka's message definitions, in our
format): field names (snake_case of Kafka's), types, the versions carrying each field,
nullability, tags.  Version ranges are Kafka 3.9's, which old and new clients both negotiate
within (Kafka 4 removed some of the oldest; Fetch is in protocol/_fetch_server.pyx).
tests/test_protocol_schemas.py checks every schema, version by version, against Kafka's own
message definitions read from the kafka-clients jar at test time.

`REQUESTS[api_key]` / `RESPONSES[api_key]` give a Message; `FLEXIBLE[api_key]` the first
flexible version.  Framing: `encode_request` (a whole request frame, client side),
`parse_request_header` and `frame_response` (server side), `decode_response` (client side):
request header v2 from an API's first flexible version (v1 before), response header v1 from
there (v0 before), except ApiVersions responses, always v0 (KIP-511).
"""

from __future__ import annotations

import struct
from typing import Any

from kafkacodec.protocol._schema import (ATTRS, BOOL, BYTES, INT8, INT16, INT32, INT64, RECORDS,
                                         STRING, UUID, Message, Reader, array, f, struct_field)
from kafkacodec.protocol.api import ApiKey

__all__ = ["REQUESTS", "RESPONSES", "FLEXIBLE", "REQUEST_HEADER", "RESPONSE_HEADER",
           "encode_request", "decode_response", "parse_request_header", "frame_response",
           "response_header_version"]

# --- the headers ---------------------------------------------------------------------------------
REQUEST_HEADER = Message("RequestHeader", None, "1-2", "2+", [
    f("request_api_key", INT16),
    f("request_api_version", INT16),
    f("correlation_id", INT32),
    f("client_id", STRING, "1+", nullable="1+", flexible="none"),     # never compact
])
RESPONSE_HEADER = Message("ResponseHeader", None, "0-1", "1+", [
    f("correlation_id", INT32),
])

# --- ApiVersions (18) ------------------------------------------------------------------------------
API_VERSIONS_REQUEST = Message("ApiVersionsRequest", ApiKey.API_VERSIONS, "0-4", "3+", [
    f("client_software_name", STRING, "3+"),
    f("client_software_version", STRING, "3+"),
])
API_VERSIONS_RESPONSE = Message("ApiVersionsResponse", ApiKey.API_VERSIONS, "0-4", "3+", [
    f("error_code", INT16),
    array("api_keys", [f("api_key", INT16), f("min_version", INT16), f("max_version", INT16)]),
    f("throttle_time_ms", INT32, "1+"),
    array("supported_features", [f("name", STRING), f("min_version", INT16), f("max_version", INT16)],
          "3+", tag=0),
    f("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
    array("finalized_features", [f("name", STRING), f("max_version_level", INT16),
                                 f("min_version_level", INT16)], "3+", tag=2),
    f("zk_migration_ready", BOOL, "3+", tag=3),
])

# --- Metadata (3) ----------------------------------------------------------------------------------
METADATA_REQUEST = Message("MetadataRequest", ApiKey.METADATA, "0-12", "9+", [
    array("topics", [f("topic_id", UUID, "10+"), f("name", STRING, nullable="10+")], nullable="1+"),
    f("allow_auto_topic_creation", BOOL, "4+", default=True),
    f("include_cluster_authorized_operations", BOOL, "8-10"),
    f("include_topic_authorized_operations", BOOL, "8+"),
])
METADATA_RESPONSE = Message("MetadataResponse", ApiKey.METADATA, "0-12", "9+", [
    f("throttle_time_ms", INT32, "3+"),
    array("brokers", [f("node_id", INT32), f("host", STRING), f("port", INT32),
                      f("rack", STRING, "1+", nullable="1+")]),
    f("cluster_id", STRING, "2+", nullable="2+"),
    f("controller_id", INT32, "1+", default=-1),
    array("topics", [
        f("error_code", INT16),
        f("name", STRING, nullable="12+"),
        f("topic_id", UUID, "10+"),
        f("is_internal", BOOL, "1+"),
        array("partitions", [
            f("error_code", INT16), f("partition_index", INT32), f("leader_id", INT32),
            f("leader_epoch", INT32, "7+", default=-1),
            array("replica_nodes", INT32), array("isr_nodes", INT32),
            array("offline_replicas", INT32, "5+"),
        ]),
        f("topic_authorized_operations", INT32, "8+", default=-(2**31)),
    ]),
    f("cluster_authorized_operations", INT32, "8-10", default=-(2**31)),
])

# --- ListOffsets (2) -------------------------------------------------------------------------------
LIST_OFFSETS_REQUEST = Message("ListOffsetsRequest", ApiKey.LIST_OFFSETS, "0-9", "6+", [
    f("replica_id", INT32),
    f("isolation_level", INT8, "2+"),
    array("topics", [
        f("name", STRING),
        array("partitions", [
            f("partition_index", INT32),
            f("current_leader_epoch", INT32, "4+", default=-1),
            f("timestamp", INT64),
            f("max_num_offsets", INT32, "0", default=1),
        ]),
    ]),
])
LIST_OFFSETS_RESPONSE = Message("ListOffsetsResponse", ApiKey.LIST_OFFSETS, "0-9", "6+", [
    f("throttle_time_ms", INT32, "2+"),
    array("topics", [
        f("name", STRING),
        array("partitions", [
            f("partition_index", INT32), f("error_code", INT16),
            array("old_style_offsets", INT64, "0"),
            f("timestamp", INT64, "1+", default=-1),
            f("offset", INT64, "1+", default=-1),
            f("leader_epoch", INT32, "4+", default=-1),
        ]),
    ]),
])

# --- FindCoordinator (10) --------------------------------------------------------------------------
FIND_COORDINATOR_REQUEST = Message("FindCoordinatorRequest", ApiKey.FIND_COORDINATOR, "0-5", "3+", [
    f("key", STRING, "0-3"),
    f("key_type", INT8, "1+"),
    array("coordinator_keys", STRING, "4+"),
])
FIND_COORDINATOR_RESPONSE = Message("FindCoordinatorResponse", ApiKey.FIND_COORDINATOR, "0-5", "3+", [
    f("throttle_time_ms", INT32, "1+"),
    f("error_code", INT16, "0-3"),
    f("error_message", STRING, "1-3", nullable="1-3"),
    f("node_id", INT32, "0-3"),
    f("host", STRING, "0-3"),
    f("port", INT32, "0-3"),
    array("coordinators", [f("key", STRING), f("node_id", INT32), f("host", STRING),
                           f("port", INT32), f("error_code", INT16),
                           f("error_message", STRING, nullable="4+")], "4+"),
])

# --- JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) -------------------------------
JOIN_GROUP_REQUEST = Message("JoinGroupRequest", ApiKey.JOIN_GROUP, "0-9", "6+", [
    f("group_id", STRING),
    f("session_timeout_ms", INT32),
    f("rebalance_timeout_ms", INT32, "1+", default=-1),
    f("member_id", STRING),
    f("group_instance_id", STRING, "5+", nullable="5+"),
    f("protocol_type", STRING),
    array("protocols", [f("name", STRING), f("metadata", BYTES)]),
    f("reason", STRING, "8+", nullable="8+"),
])
JOIN_GROUP_RESPONSE = Message("JoinGroupResponse", ApiKey.JOIN_GROUP, "0-9", "6+", [
    f("throttle_time_ms", INT32, "2+"),
    f("error_code", INT16),
    f("generation_id", INT32, default=-1),
    f("protocol_type", STRING, "7+", nullable="7+"),
    f("protocol_name", STRING, nullable="7+"),
    f("leader", STRING),
    f("skip_assignment", BOOL, "9+"),
    f("member_id", STRING),
    array("members", [f("member_id", STRING), f("group_instance_id", STRING, "5+", nullable="5+"),
                      f("metadata", BYTES)]),
])
SYNC_GROUP_REQUEST = Message("SyncGroupRequest", ApiKey.SYNC_GROUP, "0-5", "4+", [
    f("group_id", STRING),
    f("generation_id", INT32),
    f("member_id", STRING),
    f("group_instance_id", STRING, "3+", nullable="3+"),
    f("protocol_type", STRING, "5+", nullable="5+"),
    f("protocol_name", STRING, "5+", nullable="5+"),
    array("assignments", [f("member_id", STRING), f("assignment", BYTES)]),
])
SYNC_GROUP_RESPONSE = Message("SyncGroupResponse", ApiKey.SYNC_GROUP, "0-5", "4+", [
    f("throttle_time_ms", INT32, "1+"),
    f("error_code", INT16),
    f("protocol_type", STRING, "5+", nullable="5+"),
    f("protocol_name", STRING, "5+", nullable="5+"),
    f("assignment", BYTES),
])
HEARTBEAT_REQUEST = Message("HeartbeatRequest", ApiKey.HEARTBEAT, "0-4", "4+", [
    f("group_id", STRING),
    f("generation_id", INT32),
    f("member_id", STRING),
    f("group_instance_id", STRING, "3+", nullable="3+"),
])
HEARTBEAT_RESPONSE = Message("HeartbeatResponse", ApiKey.HEARTBEAT, "0-4", "4+", [
    f("throttle_time_ms", INT32, "1+"),
    f("error_code", INT16),
])
LEAVE_GROUP_REQUEST = Message("LeaveGroupRequest", ApiKey.LEAVE_GROUP, "0-5", "4+", [
    f("group_id", STRING),
    f("member_id", STRING, "0-2"),
    array("members", [f("member_id", STRING), f("group_instance_id", STRING, nullable="3+"),
                      f("reason", STRING, "5+", nullable="5+")], "3+"),
])
LEAVE_GROUP_RESPONSE = Message("LeaveGroupResponse", ApiKey.LEAVE_GROUP, "0-5", "4+", [
    f("throttle_time_ms", INT32, "1+"),
    f("error_code", INT16),
    array("members", [f("member_id", STRING), f("group_instance_id", STRING, nullable="3+"),
                      f("error_code", INT16)], "3+"),
])

# --- OffsetCommit (8), OffsetFetch (9) -------------------------------------------------------------
OFFSET_COMMIT_REQUEST = Message("OffsetCommitRequest", ApiKey.OFFSET_COMMIT, "0-9", "8+", [
    f("group_id", STRING),
    f("generation_id_or_member_epoch", INT32, "1+", default=-1),
    f("member_id", STRING, "1+"),
    f("group_instance_id", STRING, "7+", nullable="7+"),
    f("retention_time_ms", INT64, "2-4", default=-1),
    array("topics", [
        f("name", STRING),
        array("partitions", [
            f("partition_index", INT32),
            f("committed_offset", INT64),
            f("committed_leader_epoch", INT32, "6+", default=-1),
            f("commit_timestamp", INT64, "1", default=-1),
            f("committed_metadata", STRING, nullable="0+"),
        ]),
    ]),
])
OFFSET_COMMIT_RESPONSE = Message("OffsetCommitResponse", ApiKey.OFFSET_COMMIT, "0-9", "8+", [
    f("throttle_time_ms", INT32, "3+"),
    array("topics", [f("name", STRING),
                     array("partitions", [f("partition_index", INT32), f("error_code", INT16)])]),
])
OFFSET_FETCH_REQUEST = Message("OffsetFetchRequest", ApiKey.OFFSET_FETCH, "0-9", "6+", [
    f("group_id", STRING, "0-7"),
    array("topics", [f("name", STRING), array("partition_indexes", INT32)], "0-7", nullable="2-7"),
    array("groups", [
        f("group_id", STRING),
        f("member_id", STRING, "9+", nullable="9+"),
        f("member_epoch", INT32, "9+", default=-1),
        array("topics", [f("name", STRING), array("partition_indexes", INT32)], nullable="8+"),
    ], "8+"),
    f("require_stable", BOOL, "7+"),
])
_OFFSET_FETCH_PARTITION = [
    f("partition_index", INT32),
    f("committed_offset", INT64),
    f("committed_leader_epoch", INT32, "5+", default=-1),
    f("metadata", STRING, nullable="0+"),
    f("error_code", INT16),
]
OFFSET_FETCH_RESPONSE = Message("OffsetFetchResponse", ApiKey.OFFSET_FETCH, "0-9", "6+", [
    f("throttle_time_ms", INT32, "3+"),
    array("topics", [f("name", STRING), array("partitions", _OFFSET_FETCH_PARTITION)], "0-7"),
    f("error_code", INT16, "2-7"),
    array("groups", [
        f("group_id", STRING),
        array("topics", [f("name", STRING), array("partitions", _OFFSET_FETCH_PARTITION)]),
        f("error_code", INT16),
    ], "8+"),
])

# --- writes: answered with an error (the server is read-only) --------------------------------------
PRODUCE_REQUEST = Message("ProduceRequest", ApiKey.PRODUCE, "0-11", "9+", [
    f("transactional_id", STRING, "3+", nullable="3+"),
    f("acks", INT16),
    f("timeout_ms", INT32),
    array("topic_data", [
        f("name", STRING),
        array("partition_data", [f("index", INT32), f("records", RECORDS, nullable="0+")]),
    ]),
])
PRODUCE_RESPONSE = Message("ProduceResponse", ApiKey.PRODUCE, "0-11", "9+", [
    array("responses", [
        f("name", STRING),
        array("partition_responses", [
            f("index", INT32), f("error_code", INT16), f("base_offset", INT64),
            f("log_append_time_ms", INT64, "2+", default=-1),
            f("log_start_offset", INT64, "5+", default=-1),
            array("record_errors", [f("batch_index", INT32),
                                    f("batch_index_error_message", STRING, nullable="8+")], "8+"),
            f("error_message", STRING, "8+", nullable="8+"),
            struct_field("current_leader", [f("leader_id", INT32, default=-1),
                                            f("leader_epoch", INT32, default=-1)], "10+", tag=0),
        ]),
    ]),
    f("throttle_time_ms", INT32, "1+"),
    array("node_endpoints", [f("node_id", INT32), f("host", STRING), f("port", INT32),
                             f("rack", STRING, nullable="0+")], "10+", tag=0),
])
CREATE_TOPICS_REQUEST = Message("CreateTopicsRequest", ApiKey.CREATE_TOPICS, "0-7", "5+", [
    array("topics", [
        f("name", STRING), f("num_partitions", INT32), f("replication_factor", INT16),
        array("assignments", [f("partition_index", INT32), array("broker_ids", INT32)]),
        array("configs", [f("name", STRING), f("value", STRING, nullable="0+")]),
    ]),
    f("timeout_ms", INT32, default=60000),
    f("validate_only", BOOL, "1+"),
])
CREATE_TOPICS_RESPONSE = Message("CreateTopicsResponse", ApiKey.CREATE_TOPICS, "0-7", "5+", [
    f("throttle_time_ms", INT32, "2+"),
    array("topics", [
        f("name", STRING), f("topic_id", UUID, "7+"), f("error_code", INT16),
        f("error_message", STRING, "1+", nullable="0+"),
        f("topic_config_error_code", INT16, "5+", tag=0),
        f("num_partitions", INT32, "5+", default=-1),
        f("replication_factor", INT16, "5+", default=-1),
        array("configs", [f("name", STRING), f("value", STRING, nullable="5+"), f("read_only", BOOL),
                          f("config_source", INT8, default=-1), f("is_sensitive", BOOL)],
              "5+", nullable="5+"),
    ]),
])
DELETE_TOPICS_REQUEST = Message("DeleteTopicsRequest", ApiKey.DELETE_TOPICS, "0-6", "4+", [
    array("topics", [f("name", STRING, nullable="6+"), f("topic_id", UUID)], "6+"),
    array("topic_names", STRING, "0-5"),
    f("timeout_ms", INT32),
])
DELETE_TOPICS_RESPONSE = Message("DeleteTopicsResponse", ApiKey.DELETE_TOPICS, "0-6", "4+", [
    f("throttle_time_ms", INT32, "1+"),
    array("responses", [f("name", STRING, nullable="6+"), f("topic_id", UUID, "6+"),
                        f("error_code", INT16), f("error_message", STRING, "5+", nullable="5+")]),
])
DELETE_RECORDS_REQUEST = Message("DeleteRecordsRequest", ApiKey.DELETE_RECORDS, "0-2", "2+", [
    array("topics", [f("name", STRING),
                     array("partitions", [f("partition_index", INT32), f("offset", INT64)])]),
    f("timeout_ms", INT32),
])
DELETE_RECORDS_RESPONSE = Message("DeleteRecordsResponse", ApiKey.DELETE_RECORDS, "0-2", "2+", [
    f("throttle_time_ms", INT32),
    array("topics", [f("name", STRING),
                     array("partitions", [f("partition_index", INT32), f("low_watermark", INT64),
                                          f("error_code", INT16)])]),
])
INIT_PRODUCER_ID_REQUEST = Message("InitProducerIdRequest", ApiKey.INIT_PRODUCER_ID, "0-5", "2+", [
    f("transactional_id", STRING, nullable="0+"),
    f("transaction_timeout_ms", INT32),
    f("producer_id", INT64, "3+", default=-1),
    f("producer_epoch", INT16, "3+", default=-1),
])
INIT_PRODUCER_ID_RESPONSE = Message("InitProducerIdResponse", ApiKey.INIT_PRODUCER_ID, "0-5", "2+", [
    f("throttle_time_ms", INT32),
    f("error_code", INT16),
    f("producer_id", INT64, default=-1),
    f("producer_epoch", INT16),
])
CREATE_PARTITIONS_REQUEST = Message("CreatePartitionsRequest", ApiKey.CREATE_PARTITIONS, "0-3", "2+", [
    array("topics", [f("name", STRING), f("count", INT32),
                     array("assignments", [array("broker_ids", INT32)], nullable="0+")]),
    f("timeout_ms", INT32),
    f("validate_only", BOOL),
])
CREATE_PARTITIONS_RESPONSE = Message("CreatePartitionsResponse", ApiKey.CREATE_PARTITIONS, "0-3", "2+", [
    f("throttle_time_ms", INT32),
    array("results", [f("name", STRING), f("error_code", INT16),
                      f("error_message", STRING, nullable="0+")]),
])

# --- transactions (KIP-98): what a transactional producer sends its transaction coordinator
# (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and its group's coordinator (TxnOffsetCommit);
# serve --upstream --produce forwards them.  AddPartitionsToTxn v4+ is broker to broker.
ADD_PARTITIONS_TO_TXN_REQUEST = Message("AddPartitionsToTxnRequest", ApiKey.ADD_PARTITIONS_TO_TXN, "0-3", "3+", [
    f("v3_and_below_transactional_id", STRING),
    f("v3_and_below_producer_id", INT64),
    f("v3_and_below_producer_epoch", INT16),
    array("v3_and_below_topics", [f("name", STRING), array("partitions", INT32)]),
])
ADD_PARTITIONS_TO_TXN_RESPONSE = Message("AddPartitionsToTxnResponse", ApiKey.ADD_PARTITIONS_TO_TXN, "0-3", "3+", [
    f("throttle_time_ms", INT32),
    array("results_by_topic_v3_and_below", [
        f("name", STRING),
        array("results_by_partition", [f("partition_index", INT32), f("partition_error_code", INT16)]),
    ]),
])
ADD_OFFSETS_TO_TXN_REQUEST = Message("AddOffsetsToTxnRequest", ApiKey.ADD_OFFSETS_TO_TXN, "0-4", "3+", [
    f("transactional_id", STRING),
    f("producer_id", INT64),
    f("producer_epoch", INT16),
    f("group_id", STRING),
])
ADD_OFFSETS_TO_TXN_RESPONSE = Message("AddOffsetsToTxnResponse", ApiKey.ADD_OFFSETS_TO_TXN, "0-4", "3+", [
    f("throttle_time_ms", INT32),
    f("error_code", INT16),
])
END_TXN_REQUEST = Message("EndTxnRequest", ApiKey.END_TXN, "0-4", "3+", [
    f("transactional_id", STRING),
    f("producer_id", INT64),
    f("producer_epoch", INT16),
    f("committed", BOOL),
])
END_TXN_RESPONSE = Message("EndTxnResponse", ApiKey.END_TXN, "0-4", "3+", [
    f("throttle_time_ms", INT32),
    f("error_code", INT16),
])
TXN_OFFSET_COMMIT_REQUEST = Message("TxnOffsetCommitRequest", ApiKey.TXN_OFFSET_COMMIT, "0-4", "3+", [
    f("transactional_id", STRING),
    f("group_id", STRING),
    f("producer_id", INT64),
    f("producer_epoch", INT16),
    f("generation_id", INT32, "3+", default=-1),
    f("member_id", STRING, "3+", default=""),
    f("group_instance_id", STRING, "3+", nullable="3+"),
    array("topics", [
        f("name", STRING),
        array("partitions", [
            f("partition_index", INT32),
            f("committed_offset", INT64),
            f("committed_leader_epoch", INT32, "2+", default=-1),
            f("committed_metadata", STRING, nullable="0+"),
        ]),
    ]),
])
TXN_OFFSET_COMMIT_RESPONSE = Message("TxnOffsetCommitResponse", ApiKey.TXN_OFFSET_COMMIT, "0-4", "3+", [
    f("throttle_time_ms", INT32),
    array("topics", [f("name", STRING),
                     array("partitions", [f("partition_index", INT32), f("error_code", INT16)])]),
])

# --- SASL (KIP-43, KIP-152): SaslHandshake (17), then SaslAuthenticate (36) ---------------------
# --- DescribeConfigs (32, v1+): the mirror copies a source topic's configs to a topic it creates
DESCRIBE_CONFIGS_REQUEST = Message("DescribeConfigsRequest", ApiKey.DESCRIBE_CONFIGS, "1-4", "4+", [
    array("resources", [f("resource_type", INT8), f("resource_name", STRING),
                        array("configuration_keys", STRING, nullable="0+")]),
    f("include_synonyms", BOOL, "1+"),
    f("include_documentation", BOOL, "3+"),
])
DESCRIBE_CONFIGS_RESPONSE = Message("DescribeConfigsResponse", ApiKey.DESCRIBE_CONFIGS, "1-4", "4+", [
    f("throttle_time_ms", INT32),
    array("results", [
        f("error_code", INT16), f("error_message", STRING, nullable="0+"),
        f("resource_type", INT8), f("resource_name", STRING),
        array("configs", [
            f("name", STRING), f("value", STRING, nullable="0+"), f("read_only", BOOL),
            f("config_source", INT8, "1+", default=-1),
            f("is_sensitive", BOOL),
            array("synonyms", [f("name", STRING, "1+"), f("value", STRING, "1+", nullable="0+"),
                               f("source", INT8, "1+")], "1+"),
            f("config_type", INT8, "3+"),
            f("documentation", STRING, "3+", nullable="0+"),
        ]),
    ]),
])
SASL_HANDSHAKE_REQUEST = Message("SaslHandshakeRequest", ApiKey.SASL_HANDSHAKE, "0-1", "none", [
    f("mechanism", STRING),
])
SASL_HANDSHAKE_RESPONSE = Message("SaslHandshakeResponse", ApiKey.SASL_HANDSHAKE, "0-1", "none", [
    f("error_code", INT16),
    array("mechanisms", STRING),
])
SASL_AUTHENTICATE_REQUEST = Message("SaslAuthenticateRequest", ApiKey.SASL_AUTHENTICATE, "0-2", "2+", [
    f("auth_bytes", BYTES),
])
SASL_AUTHENTICATE_RESPONSE = Message("SaslAuthenticateResponse", ApiKey.SASL_AUTHENTICATE, "0-2", "2+", [
    f("error_code", INT16),
    f("error_message", STRING, nullable="0+"),
    f("auth_bytes", BYTES),
    f("session_lifetime_ms", INT64, "1+"),
])

_PAIRS = (
    (API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE), (METADATA_REQUEST, METADATA_RESPONSE),
    (LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE), (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
    (JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE), (SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
    (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE), (LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE),
    (OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE), (OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE),
    (PRODUCE_REQUEST, PRODUCE_RESPONSE), (CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE),
    (DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE), (DELETE_RECORDS_REQUEST, DELETE_RECORDS_RESPONSE),
    (INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE),
    (CREATE_PARTITIONS_REQUEST, CREATE_PARTITIONS_RESPONSE),
    (DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE),
    (ADD_PARTITIONS_TO_TXN_REQUEST, ADD_PARTITIONS_TO_TXN_RESPONSE),
    (ADD_OFFSETS_TO_TXN_REQUEST, ADD_OFFSETS_TO_TXN_RESPONSE),
    (END_TXN_REQUEST, END_TXN_RESPONSE), (TXN_OFFSET_COMMIT_REQUEST, TXN_OFFSET_COMMIT_RESPONSE),
    (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
    (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE))
REQUESTS: dict[int, Message] = {request.api_key: request for request, _ in _PAIRS}  # type: ignore[misc]
RESPONSES: dict[int, Message] = {response.api_key: response for _, response in _PAIRS}  # type: ignore[misc]
#: First flexible version of every API with a schema here that has one, and of Fetch
#: (_fetch*.pyx).
FLEXIBLE: dict[int, int] = {key: m.flexible[0] for key, m in REQUESTS.items()
                            if m.flexible[0] <= m.flexible[1]}
FLEXIBLE[ApiKey.FETCH] = 12

_FRAME = struct.Struct(">i")
#: request header v1 up to the client id's characters: api key, version, correlation id, the
#: client id's int16 length (-1: null)
_HEADER_V1 = struct.Struct(">hhih")
#: a response frame's size and correlation id (header v0), and with no tagged fields (v1)
_RESPONSE_V0 = struct.Struct(">ii")
_RESPONSE_V1 = struct.Struct(">iib")


def is_flexible(api_key: int, version: int) -> bool:
    """Whether `version` of the API uses flexible versions (compact forms, tagged fields)."""
    first = FLEXIBLE.get(api_key)
    return first is not None and version >= first


def response_header_version(api_key: int, version: int) -> int:
    """1 for a flexible version, else 0; ApiVersions responses always 0 (KIP-511: a client
    that sent a newer version than served must read the answer)."""
    return 1 if is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS else 0


def encode_request(message: Message, version: int, correlation_id: int, client_id: str | None,
                   value: dict[str, Any]) -> bytearray:
    """A whole request frame: int32 size, request header (v2 for a flexible version, else
    v1), the body `value` in `version`."""
    out = bytearray(_FRAME.size)
    REQUEST_HEADER.encode(2 if message.is_flexible(version) else 1, {
        "request_api_key": message.api_key, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": client_id}, out)
    message.encode(version, value, out)
    _FRAME.pack_into(out, 0, len(out) - _FRAME.size)
    return out


def parse_request_header(body: Any) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, where the request body starts) of a
    request (the int32 size already taken off).  CorruptRecordError when malformed.  Header
    v2's tagged section is skipped for the APIs that have one (an unknown API's header is read
    as v1: its body is never read).  A client id that is not UTF-8 is read as Kafka reads it,
    with replacement characters."""
    if len(body) >= _HEADER_V1.size:           # the usual header, read in one step
        api_key, version, correlation_id, size = _HEADER_V1.unpack_from(body, 0)
        pos = _HEADER_V1.size + max(size, 0)
        if -1 <= size and pos <= len(body):
            client_id = None if size < 0 else bytes(body[_HEADER_V1.size:pos]).decode("utf-8", "replace")
            if not is_flexible(api_key, version):
                return api_key, version, correlation_id, client_id, pos
            if pos < len(body) and body[pos] == 0:              # no tagged fields
                return api_key, version, correlation_id, client_id, pos + 1
    reader = Reader(body)                      # the rest (and every error) field by field
    header = REQUEST_HEADER.read(reader, 1, invalid_utf8="replace")
    api_key, version = header["request_api_key"], header["request_api_version"]
    if is_flexible(api_key, version):
        reader.skip_tags()
    return api_key, version, header["correlation_id"], header["client_id"], reader.pos


def frame_response(api_key: int, version: int, correlation_id: int,
                   body: bytes | bytearray) -> bytearray:
    """A whole response frame: int32 size, response header, `body`."""
    if response_header_version(api_key, version):
        out = bytearray(_RESPONSE_V1.pack(_RESPONSE_V1.size - _FRAME.size + len(body), correlation_id, 0))
    else:
        out = bytearray(_RESPONSE_V0.pack(_RESPONSE_V0.size - _FRAME.size + len(body), correlation_id))
    out += body
    return out


def decode_response(message: Message, data: Any, version: int, *, form: str = ATTRS) -> Any:
    """The body of a response payload (correlation id first, the int32 size already taken off),
    in `form` (Structs: fields read as attributes).  CorruptRecordError naming the byte when
    the schema does not accept the bytes; bytes after the last field are ignored, as Kafka's
    clients do."""
    header_version = response_header_version(message.api_key or 0, version)
    reader = Reader(data)
    reader.fixed(INT32, f"{message.name} correlation id")
    if header_version == 1:
        reader.skip_tags()
    return message.decode(data, version, reader.pos, strict=False, form=form)
