"""The records of Kafka's internal topics, decoded as kafka-dump-log's `--offsets-decoder` and
`--transaction-log-decoder` print them (Kafka 4.x): the key as `{"type":"N","data":{...}}`, the
value as `{"version":"N","data":{...}}`, a tombstone as `<DELETE>`.

A key starts with an int16 record type, a value with an int16 version; the rest is the message
of that type at that version (the field lists below are those of Kafka's schemas:
group-coordinator's and transaction-coordinator's `common/message/*.json`, read for their
fields).  A classic group's members' `subscription` and `assignment` bytes are decoded too when
its protocol type is "consumer" (ConsumerProtocolSubscription/Assignment, an int16 version
first), as Kafka's tool does; bytes that do not decode stay base64.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from kafkacodec.cli._schemas import Field as F
from kafkacodec.cli._schemas import SchemaError, in_versions, read

__all__ = ["offsets_record", "transaction_record", "DELETE"]

DELETE = "<DELETE>"

_PARTITIONS = (F("TopicId", "uuid"), F("Partitions", "[]int32"))

# __consumer_offsets: record type -> (key fields, value fields, value versions, flexible from)
_GROUP_RECORDS: dict[int, tuple[tuple[F, ...], tuple[F, ...], str, int | None]] = {
    0: ((F("group", "string"), F("topic", "string"), F("partition", "int32")),      # LegacyOffsetCommit
        (F("offset", "int64"), F("metadata", "string"), F("commitTimestamp", "int64")), "0", None),
    1: ((F("group", "string"), F("topic", "string"), F("partition", "int32")),      # OffsetCommit
        (F("offset", "int64"), F("leaderEpoch", "int32", "3+"), F("metadata", "string"),
         F("commitTimestamp", "int64"), F("expireTimestamp", "int64", "1"),
         F("topicId", "uuid", "4+", tag=0, default="AAAAAAAAAAAAAAAAAAAAAA")), "0-4", 4),
    2: ((F("group", "string"),),                                                     # GroupMetadata
        (F("protocolType", "string"), F("generation", "int32"), F("protocol", "string", nullable="0+"),
         F("leader", "string", nullable="0+"), F("currentStateTimestamp", "int64", "2+"),
         F("members", "[]struct", fields=(
             F("memberId", "string"), F("groupInstanceId", "string", "3+", nullable="3+"),
             F("clientId", "string"), F("clientHost", "string"), F("rebalanceTimeout", "int32", "1+"),
             F("sessionTimeout", "int32"), F("subscription", "bytes"), F("assignment", "bytes")))),
        "0-4", 4),
    3: ((F("GroupId", "string"),),                                                   # ConsumerGroupMetadata
        (F("Epoch", "int32"), F("MetadataHash", "int64", tag=0, default=0)), "0", 0),
    4: ((F("GroupId", "string"),),                                                   # ConsumerGroupPartitionMetadata
        (F("Topics", "[]struct", fields=(
            F("TopicId", "uuid"), F("TopicName", "string"), F("NumPartitions", "int32"),
            F("PartitionMetadata", "[]struct", fields=(F("Partition", "int32"), F("Racks", "[]string")))),),),
        "0", 0),
    5: ((F("GroupId", "string"), F("MemberId", "string")),                          # ConsumerGroupMemberMetadata
        (F("InstanceId", "string", nullable="0+"), F("RackId", "string", nullable="0+"),
         F("ClientId", "string"), F("ClientHost", "string"), F("SubscribedTopicNames", "[]string"),
         F("SubscribedTopicRegex", "string", nullable="0+"), F("RebalanceTimeoutMs", "int32"),
         F("ServerAssignor", "string", nullable="0+"),
         F("ClassicMemberMetadata", "struct", nullable="0+", tag=0, fields=(
             F("SessionTimeoutMs", "int32"),
             F("SupportedProtocols", "[]struct", fields=(F("Name", "string"), F("Metadata", "bytes")))))),
        "0", 0),
    6: ((F("GroupId", "string"),),                                                   # ConsumerGroupTargetAssignmentMetadata
        (F("AssignmentEpoch", "int32"),), "0", 0),
    7: ((F("GroupId", "string"), F("MemberId", "string")),                          # ConsumerGroupTargetAssignmentMember
        (F("TopicPartitions", "[]struct", fields=_PARTITIONS),), "0", 0),
    8: ((F("GroupId", "string"), F("MemberId", "string")),                          # ConsumerGroupCurrentMemberAssignment
        (F("MemberEpoch", "int32"), F("PreviousMemberEpoch", "int32"), F("State", "int8"),
         F("AssignedPartitions", "[]struct", fields=_PARTITIONS),
         F("PartitionsPendingRevocation", "[]struct", fields=_PARTITIONS)), "0", 0),
    16: ((F("GroupId", "string"), F("RegularExpression", "string")),                # ConsumerGroupRegularExpression
         (F("Topics", "[]string"), F("Version", "int64"), F("Timestamp", "int64")), "0", 0),
}

# __transaction_state: TransactionLogKey (type 0) and TransactionLogValue
_TXN_KEY = (F("TransactionalId", "string"),)
_TXN_VALUE = (
    F("ProducerId", "int64"), F("PreviousProducerId", "int64", "1+", tag=0, default=-1),
    F("NextProducerId", "int64", "1+", tag=1, default=-1), F("ProducerEpoch", "int16"),
    F("NextProducerEpoch", "int16", "1+", tag=3, default=-1), F("TransactionTimeoutMs", "int32"),
    F("TransactionStatus", "int8"),
    F("TransactionPartitions", "[]struct", nullable="0+", fields=(F("Topic", "string"), F("PartitionIds", "[]int32"))),
    F("TransactionLastUpdateTimestampMs", "int64"), F("TransactionStartTimestampMs", "int64"),
    F("ClientTransactionVersion", "int16", "1+", tag=2, default=0))

# The consumer protocol carried in a classic group's member bytes (kafka-clients' schemas).
_SUBSCRIPTION = (
    F("Topics", "[]string"), F("UserData", "bytes", nullable="0+"),
    F("OwnedPartitions", "[]struct", "1+", fields=(F("Topic", "string"), F("Partitions", "[]int32"))),
    F("GenerationId", "int32", "2+"), F("RackId", "string", "3+", nullable="3+"))
_ASSIGNMENT = (
    F("AssignedPartitions", "[]struct", fields=(F("Topic", "string"), F("Partitions", "[]int32"))),
    F("UserData", "bytes", nullable="0+"))


class UnknownRecordType(Exception):
    def __init__(self, record_type: int):
        super().__init__(record_type)
        self.record_type = record_type


def _text(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _int16(data: bytes) -> int:
    if len(data) < 2:
        raise SchemaError(f"{len(data)} bytes: too short for a version", position=0)
    return int(struct.unpack_from(">h", data)[0])


def _decode_member_bytes(group: dict[str, Any]) -> None:
    """A "consumer" group's member subscription and assignment, decoded in place (left as base64
    when they do not decode)."""
    import base64

    if group.get("protocolType") != "consumer":
        return
    for member in group.get("members") or ():
        for name, fields in (("subscription", _SUBSCRIPTION), ("assignment", _ASSIGNMENT)):
            raw = member.get(name)
            if raw is None:
                continue
            data = base64.b64decode(raw)
            try:
                member[name] = read(data, fields, _int16(data), False, start=2)
            except SchemaError:
                pass


def _value_version(value: bytes, versions: str) -> int:
    version = _int16(value)
    if not in_versions(versions, version):
        raise SchemaError(f"unknown value version {version} (Kafka writes {versions})", position=0)
    return version


def _group_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    record_type = _int16(key)
    if record_type not in _GROUP_RECORDS:
        raise UnknownRecordType(record_type)
    key_fields, value_fields, versions, flexible_from = _GROUP_RECORDS[record_type]
    key_text = _text({"type": str(record_type), "data": read(key, key_fields, 0, False, start=2)})
    if value is None:
        return key_text, DELETE
    version = _value_version(value, versions)
    data = read(value, value_fields, version, flexible_from is not None and version >= flexible_from, start=2)
    if record_type == 2:
        _decode_member_bytes(data)
    return key_text, _text({"version": str(version), "data": data})


def _transaction_record(key: bytes, value: bytes | None) -> tuple[str, str]:
    record_type = _int16(key)
    if record_type != 0:
        raise UnknownRecordType(record_type)
    key_text = _text({"type": "0", "data": read(key, _TXN_KEY, 0, False, start=2)})
    if value is None:
        return key_text, DELETE
    version = _value_version(value, "0-1")
    return key_text, _text({"version": str(version), "data": read(value, _TXN_VALUE, version, version >= 1, start=2)})


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
    except SchemaError as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


def offsets_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """A __consumer_offsets record: (key text, payload text or None)."""
    return _parse(_group_record, key, value, offset, "offset topic")


def transaction_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """A __transaction_state record: (key text, payload text or None)."""
    return _parse(_transaction_record, key, value, offset, "transaction log")
