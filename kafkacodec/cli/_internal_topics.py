"""The records of Kafka's internal topics, decoded as kafka-dump-log's `--offsets-decoder` and
`--transaction-log-decoder` print them (Kafka 4.x): the key as `{"type":"N","data":{...}}`, the
value as `{"version":"N","data":{...}}`, a tombstone as `<DELETE>`.

A key starts with an int16 record type, a value with an int16 version; the rest is the message
of that type at that version, read by protocol/_schema.py's interpreter in its JSON form (the
schemas below are our own definitions of Kafka's group-coordinator and transaction-coordinator
records, checked against Kafka's definitions by tests/test_protocol_schemas.py).  A classic
group's members' `subscription` and `assignment` bytes are decoded too when its protocol type
is "consumer" (ConsumerProtocolSubscription/Assignment, an int16 version first), as Kafka's
tool does; bytes that do not decode stay base64.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from kafkacodec.errors import CorruptRecordError
from kafkacodec.protocol._schema import (BYTES, INT8, INT16, INT32, INT64, JSON, STRING, UUID, Message,
                                         array, f, struct_field)

__all__ = ["offsets_record", "transaction_record", "DELETE"]

DELETE = "<DELETE>"


def _key(name: str, record_type: int, *fields: Any) -> Message:
    return Message(name, record_type, "0", "none", fields)


_OFFSET_KEY = (f("group", STRING, "0"), f("topic", STRING, "0"), f("partition", INT32, "0"))
_GROUP_KEY = (f("group_id", STRING),)
_MEMBER_KEY = (f("group_id", STRING), f("member_id", STRING))
_TOPIC_PARTITIONS = (f("topic_id", UUID), array("partitions", INT32))

# __consumer_offsets: record type -> (key, value); the record types are Kafka's apiKeys of
# the group coordinator's coordinator-key/value definitions.
_GROUP_RECORDS: dict[int, tuple[Message, Message]] = {
    0: (_key("LegacyOffsetCommitKey", 0, *_OFFSET_KEY),
        Message("LegacyOffsetCommitValue", 0, "0", "none", [
            f("offset", INT64, "0"), f("metadata", STRING, "0"), f("commit_timestamp", INT64, "0")])),
    1: (_key("OffsetCommitKey", 1, *_OFFSET_KEY),
        Message("OffsetCommitValue", 1, "0-4", "4+", [
            f("offset", INT64), f("leader_epoch", INT32, "3+", default=-1), f("metadata", STRING),
            f("commit_timestamp", INT64), f("expire_timestamp", INT64, "1", default=-1),
            f("topic_id", UUID, "4+", tag=0)])),
    2: (_key("GroupMetadataKey", 2, f("group", STRING, "0")),
        Message("GroupMetadataValue", 2, "0-4", "4+", [
            f("protocol_type", STRING), f("generation", INT32), f("protocol", STRING, nullable="0+"),
            f("leader", STRING, nullable="0+"), f("current_state_timestamp", INT64, "2+", default=-1),
            array("members", [
                f("member_id", STRING), f("group_instance_id", STRING, "3+", nullable="3+"),
                f("client_id", STRING), f("client_host", STRING),
                f("rebalance_timeout", INT32, "1+", default=-1), f("session_timeout", INT32),
                f("subscription", BYTES), f("assignment", BYTES)])])),
    3: (_key("ConsumerGroupMetadataKey", 3, *_GROUP_KEY),
        Message("ConsumerGroupMetadataValue", 3, "0", "0+", [
            f("epoch", INT32), f("metadata_hash", INT64, tag=0)])),
    4: (_key("ConsumerGroupPartitionMetadataKey", 4, *_GROUP_KEY),
        Message("ConsumerGroupPartitionMetadataValue", 4, "0", "0+", [
            array("topics", [
                f("topic_id", UUID), f("topic_name", STRING), f("num_partitions", INT32),
                array("partition_metadata", [f("partition", INT32), array("racks", STRING)])])])),
    5: (_key("ConsumerGroupMemberMetadataKey", 5, *_MEMBER_KEY),
        Message("ConsumerGroupMemberMetadataValue", 5, "0", "0+", [
            f("instance_id", STRING, nullable="0+"), f("rack_id", STRING, nullable="0+"),
            f("client_id", STRING), f("client_host", STRING), array("subscribed_topic_names", STRING),
            f("subscribed_topic_regex", STRING, nullable="0+"),
            f("rebalance_timeout_ms", INT32, default=-1), f("server_assignor", STRING, nullable="0+"),
            struct_field("classic_member_metadata", [
                f("session_timeout_ms", INT32),
                array("supported_protocols", [f("name", STRING), f("metadata", BYTES)])],
                nullable="0+", tag=0)])),
    6: (_key("ConsumerGroupTargetAssignmentMetadataKey", 6, *_GROUP_KEY),
        Message("ConsumerGroupTargetAssignmentMetadataValue", 6, "0", "0+", [
            f("assignment_epoch", INT32)])),
    7: (_key("ConsumerGroupTargetAssignmentMemberKey", 7, *_MEMBER_KEY),
        Message("ConsumerGroupTargetAssignmentMemberValue", 7, "0", "0+", [
            array("topic_partitions", _TOPIC_PARTITIONS)])),
    8: (_key("ConsumerGroupCurrentMemberAssignmentKey", 8, *_MEMBER_KEY),
        Message("ConsumerGroupCurrentMemberAssignmentValue", 8, "0", "0+", [
            f("member_epoch", INT32), f("previous_member_epoch", INT32), f("state", INT8),
            array("assigned_partitions", _TOPIC_PARTITIONS),
            array("partitions_pending_revocation", _TOPIC_PARTITIONS)])),
    16: (_key("ConsumerGroupRegularExpressionKey", 16, f("group_id", STRING), f("regular_expression", STRING)),
         Message("ConsumerGroupRegularExpressionValue", 16, "0", "0+", [
             array("topics", STRING), f("version", INT64), f("timestamp", INT64)])),
}

# __transaction_state: TransactionLogKey (record type 0) and TransactionLogValue
_TXN_KEY = _key("TransactionLogKey", 0, f("transactional_id", STRING))
_TXN_VALUE = Message("TransactionLogValue", 0, "0-1", "1+", [
    f("producer_id", INT64), f("previous_producer_id", INT64, "1+", tag=0, default=-1),
    f("next_producer_id", INT64, "1+", tag=1, default=-1), f("producer_epoch", INT16),
    f("next_producer_epoch", INT16, "1+", tag=3, default=-1), f("transaction_timeout_ms", INT32),
    f("transaction_status", INT8),
    array("transaction_partitions", [f("topic", STRING), array("partition_ids", INT32)], nullable="0+"),
    f("transaction_last_update_timestamp_ms", INT64), f("transaction_start_timestamp_ms", INT64),
    f("client_transaction_version", INT16, "1+", tag=2)])

# The consumer protocol carried in a classic group's member bytes (kafka-clients' definitions).
_SUBSCRIPTION = Message("ConsumerProtocolSubscription", None, "0-3", "none", [
    array("topics", STRING), f("user_data", BYTES, nullable="0+"),
    array("owned_partitions", [f("topic", STRING, "1+"), array("partitions", INT32, "1+")], "1+"),
    f("generation_id", INT32, "2+", default=-1), f("rack_id", STRING, "3+", nullable="3+")])
_ASSIGNMENT = Message("ConsumerProtocolAssignment", None, "0-3", "none", [
    array("assigned_partitions", [f("topic", STRING), array("partitions", INT32)]),
    f("user_data", BYTES, nullable="0+")])


def _json(message: Message, data: bytes, version: int) -> dict[str, Any]:
    """`message` at `version` after the int16 record type or version, as Kafka's converters
    write it (bytes after the last field ignored, as the coordinators' readers do)."""
    return message.decode(data, version, 2, strict=False, form=JSON)


class UnknownRecordType(Exception):
    def __init__(self, record_type: int):
        super().__init__(record_type)
        self.record_type = record_type


def _text(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _int16(data: bytes) -> int:
    if len(data) < 2:
        raise CorruptRecordError(f"{len(data)} bytes: too short for a version", position=0)
    return int(struct.unpack_from(">h", data)[0])


def _decode_member_bytes(group: dict[str, Any]) -> None:
    """A "consumer" group's member subscription and assignment, decoded in place (left as base64
    when they do not decode)."""
    import base64

    if group.get("protocolType") != "consumer":
        return
    for member in group.get("members") or ():
        for name, message in (("subscription", _SUBSCRIPTION), ("assignment", _ASSIGNMENT)):
            raw = member.get(name)
            if raw is None:
                continue
            data = base64.b64decode(raw)
            try:
                member[name] = _json(message, data, _int16(data))
            except CorruptRecordError:
                pass


def _value_version(value: bytes, message: Message) -> int:
    version = _int16(value)
    low, high = message.valid
    if not low <= version <= high:
        raise CorruptRecordError(f"unknown value version {version} (Kafka writes {low}-{high})",
                                 position=0)
    return version


def _group_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    record_type = _int16(key)
    if record_type not in _GROUP_RECORDS:
        raise UnknownRecordType(record_type)
    key_message, value_message = _GROUP_RECORDS[record_type]
    key_text = _text({"type": str(record_type), "data": _json(key_message, key, 0)})
    if value is None:
        return key_text, DELETE
    version = _value_version(value, value_message)
    data = _json(value_message, value, version)
    if record_type == 2:
        _decode_member_bytes(data)
    return key_text, _text({"version": str(version), "data": data})


def _transaction_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    record_type = _int16(key)
    if record_type != 0:
        raise UnknownRecordType(record_type)
    key_text = _text({"type": "0", "data": _json(_TXN_KEY, key, 0)})
    if value is None:
        return key_text, DELETE
    version = _value_version(value, _TXN_VALUE)
    return key_text, _text({"version": str(version), "data": _json(_TXN_VALUE, value, version)})


def _parse(decode: Any, key: bytes | None, value: bytes | None, offset: int, topic: str) -> tuple[str, str | None]:
    """(key text, payload text or None) as kafka-dump-log prints them; a record that is not of
    the topic's schemas gives kafka-dump-log's "skipping" text as its key."""
    if key is None:
        return (f"Error at offset {offset}, skipping. Failed to decode message at offset {offset} using "
                f"{topic} decoder (message had a missing key)", None)
    try:
        return decode(key, value)  # type: ignore[no-any-return]
    except UnknownRecordType as exc:
        return f"Unknown record type {exc.record_type} at offset {offset}, skipping.", None
    except CorruptRecordError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


def offsets_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """A __consumer_offsets record: (key text, payload text or None)."""
    return _parse(_group_record, key, value, offset, "offset topic")


def transaction_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """A __transaction_state record: (key text, payload text or None)."""
    return _parse(_transaction_record, key, value, offset, "transaction log")
