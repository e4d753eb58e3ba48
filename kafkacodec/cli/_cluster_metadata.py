"""KRaft's metadata log (`__cluster_metadata-0`: segments and `.checkpoint` snapshots) as
kafka-dump-log 4.1 prints it: its records with `--cluster-metadata-decoder`, its KRaft control
records always.

A metadata record's value is a frame (KIP-631: unsigned varints frame version 1, record type,
version) then the record of that type at that version, read by protocol/_schema.py's interpreter
in its JSON form and printed as `{"type":"TOPIC_RECORD","version":0,"data":{...}}` (Kafka's
MetadataRecordType name); the record has no key.  A KRaft control record's value is its message
read at version 0 and written as JSON at the version its own `version` field names, after a
label: `LeaderChange: {...}`, `SnapshotHeader {...}`, `SnapshotFooter {...}`, `KRaftVersion
{...}`, `KRaftVoters {...}` (Kafka 3.9 printed a leader change as `controlType:
LEADER_CHANGE(2)`).  The schemas are our own definitions of Kafka 4.1's metadata records and
KRaft control records, checked against Kafka's by tests/test_protocol_schemas.py.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from kafkacodec.errors import CorruptRecordError, RecordTooLargeError
from kafkacodec.protocol._schema import (BOOL, BYTES, FLOAT64, INT8, INT16, INT32, INT64, JSON, STRING, UINT16,
                                         UUID, Message, Reader, array, f, struct_field)

__all__ = ["metadata_record", "control_record", "CONTROL_LABELS"]


def _record(name: str, api_key: int, valid: str, *fields: Any) -> Message:
    return Message(name, api_key, valid, "0+", fields)     # every metadata record is flexible


_ENDPOINT = (f("name", STRING), f("host", STRING), f("port", UINT16), f("security_protocol", INT16))
_FEATURE = (f("name", STRING), f("min_supported_version", INT16), f("max_supported_version", INT16))

# Kafka 4.1's metadata records (metadata/src/main/resources/common/metadata), by record type
RECORDS: dict[int | None, Message] = {m.api_key: m for m in (
    _record("RegisterBrokerRecord", 0, "0-3",
            f("broker_id", INT32), f("is_migrating_zk_broker", BOOL, "2+", default=False),
            f("incarnation_id", UUID), f("broker_epoch", INT64), array("end_points", _ENDPOINT),
            array("features", _FEATURE), f("rack", STRING, nullable="0+"), f("fenced", BOOL, default=True),
            f("in_controlled_shutdown", BOOL, "1+", default=False), array("log_dirs", UUID, "3+", tag=0)),
    _record("UnregisterBrokerRecord", 1, "0", f("broker_id", INT32), f("broker_epoch", INT64)),
    _record("TopicRecord", 2, "0", f("name", STRING), f("topic_id", UUID)),
    _record("PartitionRecord", 3, "0-2",
            f("partition_id", INT32, default=-1), f("topic_id", UUID), array("replicas", INT32),
            array("isr", INT32), array("removing_replicas", INT32), array("adding_replicas", INT32),
            f("leader", INT32, default=-1), f("leader_recovery_state", INT8, tag=0, default=0),
            f("leader_epoch", INT32, default=-1), f("partition_epoch", INT32, default=-1),
            array("directories", UUID, "1+"),
            array("eligible_leader_replicas", INT32, "2+", nullable="2+", tag=1),
            array("last_known_elr", INT32, "2+", nullable="2+", tag=2)),
    _record("ConfigRecord", 4, "0", f("resource_type", INT8), f("resource_name", STRING), f("name", STRING),
            f("value", STRING, nullable="0+")),
    _record("PartitionChangeRecord", 5, "0-2",
            f("partition_id", INT32, default=-1), f("topic_id", UUID), array("isr", INT32, tag=0, nullable="0+"),
            f("leader", INT32, tag=1, default=-2), array("replicas", INT32, tag=2, nullable="0+"),
            array("removing_replicas", INT32, tag=3, nullable="0+"),
            array("adding_replicas", INT32, tag=4, nullable="0+"),
            f("leader_recovery_state", INT8, tag=5, default=-1),
            array("directories", UUID, "1+", nullable="1+", tag=8),
            array("eligible_leader_replicas", INT32, "2+", nullable="2+", tag=6),
            array("last_known_elr", INT32, "2+", nullable="2+", tag=7)),
    _record("FenceBrokerRecord", 7, "0", f("id", INT32), f("epoch", INT64)),
    _record("UnfenceBrokerRecord", 8, "0", f("id", INT32), f("epoch", INT64)),
    _record("RemoveTopicRecord", 9, "0", f("topic_id", UUID)),
    _record("DelegationTokenRecord", 10, "0",
            f("owner", STRING), f("requester", STRING), array("renewers", STRING), f("issue_timestamp", INT64),
            f("max_timestamp", INT64), f("expiration_timestamp", INT64), f("token_id", STRING)),
    _record("UserScramCredentialRecord", 11, "0",
            f("name", STRING), f("mechanism", INT8), f("salt", BYTES), f("stored_key", BYTES),
            f("server_key", BYTES), f("iterations", INT32)),
    _record("FeatureLevelRecord", 12, "0", f("name", STRING), f("feature_level", INT16)),
    _record("ClientQuotaRecord", 14, "0",
            array("entity", [f("entity_type", STRING), f("entity_name", STRING, nullable="0+")]),
            f("key", STRING), f("value", FLOAT64), f("remove", BOOL)),
    _record("ProducerIdsRecord", 15, "0",
            f("broker_id", INT32), f("broker_epoch", INT64, default=-1), f("next_producer_id", INT64)),
    _record("BrokerRegistrationChangeRecord", 17, "0-2",
            f("broker_id", INT32), f("broker_epoch", INT64), f("fenced", INT8, tag=0),
            f("in_controlled_shutdown", INT8, "1+", tag=1), array("log_dirs", UUID, "2+", tag=2)),
    _record("AccessControlEntryRecord", 18, "0",
            f("id", UUID), f("resource_type", INT8), f("resource_name", STRING), f("pattern_type", INT8),
            f("principal", STRING), f("host", STRING), f("operation", INT8), f("permission_type", INT8)),
    _record("RemoveAccessControlEntryRecord", 19, "0", f("id", UUID)),
    _record("NoOpRecord", 20, "0"),
    _record("ZkMigrationStateRecord", 21, "0", f("zk_migration_state", INT8)),
    _record("RemoveUserScramCredentialRecord", 22, "0", f("name", STRING), f("mechanism", INT8)),
    _record("BeginTransactionRecord", 23, "0", f("name", STRING, nullable="0+", tag=0)),
    _record("EndTransactionRecord", 24, "0"),
    _record("AbortTransactionRecord", 25, "0", f("reason", STRING, nullable="0+", tag=0)),
    _record("RemoveDelegationTokenRecord", 26, "0", f("token_id", STRING)),
    _record("RegisterControllerRecord", 27, "0",
            f("controller_id", INT32), f("incarnation_id", UUID), f("zk_migration_ready", BOOL),
            array("end_points", _ENDPOINT), array("features", _FEATURE)),
    _record("ClearElrRecord", 28, "0", f("topic_name", STRING)),
)}
# Kafka's MetadataRecordType names: TopicRecord -> TOPIC_RECORD
TYPE_NAMES = {key: re.sub(r"(?<!^)(?=[A-Z])", "_", m.name).upper() for key, m in RECORDS.items()}

_VOTER = (f("voter_id", INT32), f("voter_directory_id", UUID, "1+"))

# The KRaft control records (clients' common/message), by control record type (KIP-595, KIP-630,
# KIP-853), with kafka-dump-log 4.1's label before each one's JSON
CONTROL_RECORDS: dict[int, tuple[str, Message]] = {
    2: ("LeaderChange: ", Message("LeaderChangeMessage", None, "0-1", "0+", [
        f("version", INT16), f("leader_id", INT32), array("voters", _VOTER), array("granting_voters", _VOTER)])),
    3: ("SnapshotHeader ", Message("SnapshotHeaderRecord", None, "0", "0+", [
        f("version", INT16), f("last_contained_log_timestamp", INT64)])),
    4: ("SnapshotFooter ", Message("SnapshotFooterRecord", None, "0", "0+", [f("version", INT16)])),
    5: ("KRaftVersion ", Message("KRaftVersionRecord", None, "0", "0+", [
        f("version", INT16), f("k_raft_version", INT16)])),
    6: ("KRaftVoters ", Message("VotersRecord", None, "0", "0+", [
        f("version", INT16),
        array("voters", [
            f("voter_id", INT32), f("voter_directory_id", UUID),
            array("endpoints", [f("name", STRING), f("host", STRING), f("port", UINT16)]),
            struct_field("k_raft_version_feature", _FEATURE[1:])])])),
}
CONTROL_LABELS = {control: label for control, (label, _) in CONTROL_RECORDS.items()}

_FRAME_VERSION = 1          # the only frame version Kafka reads (0 was KRaft's 2.8 preview)


def _java_double(x: float) -> str:
    """A float64 as Jackson writes Java's Double.toString: plain from 10^-3 to 10^7, else
    d.dddE-n; NaN and infinities as strings (Jackson's WRITE_NAN_AS_STRINGS)."""
    if math.isnan(x) or math.isinf(x):
        return '"NaN"' if math.isnan(x) else ('"Infinity"' if x > 0 else '"-Infinity"')
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    _, ds, exp = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, ds))
    n = len(digits) + int(exp) - 1                  # x = d.ddd * 10^n
    sign = "-" if x < 0 else ""
    if -3 <= n < 7:
        if n >= 0:
            return f"{sign}{digits[:n + 1].ljust(n + 1, '0')}.{digits[n + 1:] or '0'}"
        return f"{sign}0.{'0' * (-n - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{n}"


def _json_text(value: Any) -> str:
    """Compact JSON as Jackson's JsonNode.toString writes it (floats as Java's)."""
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(_json_text, value)) + "]"
    return json.dumps(value, ensure_ascii=False)


_HAS_FLOAT = {key for key, m in RECORDS.items() if any(field.kind == FLOAT64 for field in m.fields)}


class _Skip(Exception):
    """A metadata record that cannot be read: kafka-dump-log's message for it."""


def _frame_short(r: Reader, entity: str) -> int:
    """One of the frame's unsigned varints, which Kafka reads into an int16."""
    try:
        value = r.uvarint(entity)
    except CorruptRecordError:
        raise _Skip(f"Error while reading {entity}") from None
    if value > 0x7FFF:
        raise _Skip(f"Value for {entity} was too large.")
    return value


def _metadata_json(value: Any) -> str:
    r = Reader(value)
    frame = _frame_short(r, "frame version")
    if frame == 0:
        raise _Skip("Could not deserialize metadata record with frame version 0. Note that upgrades from the "
                    "preview release of KRaft in 2.8 to newer versions are not supported.")
    if frame != _FRAME_VERSION:
        raise _Skip(f"Could not deserialize metadata record due to unknown frame version {frame}(only frame "
                    f"version {_FRAME_VERSION} is supported)")
    record_type = _frame_short(r, "type")
    version = _frame_short(r, "version")
    message = RECORDS.get(record_type)
    if message is None:
        raise _Skip(f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {record_type}")
    try:
        # as Kafka's generated readers: any version is read, each field where its versions say
        data = message.read(r, version, form=JSON)
    except (CorruptRecordError, RecordTooLargeError) as exc:
        raise _Skip(f"Failed to deserialize record with type {record_type}: {exc}") from None
    if r.pos != r.end:
        raise _Skip(f"Found {r.end - r.pos} byte(s) of garbage after {record_type}")
    out = {"type": TYPE_NAMES[record_type], "version": version, "data": data}
    return _json_text(out) if record_type in _HAS_FLOAT else json.dumps(out, separators=(",", ":"),
                                                                           ensure_ascii=False)


def metadata_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """A __cluster_metadata record: (None: no key is printed, payload text) as kafka-dump-log's
    --cluster-metadata-decoder prints it; one that cannot be read gives its "skipping" text."""
    try:
        if value is None:
            raise _Skip("Error while reading frame version")      # Kafka reads a null value's frame
        return None, _metadata_json(value)
    except _Skip as exc:
        return None, f"Error at {offset}, skipping. {exc}"


def control_record(control: int, value: bytes | None) -> dict[str, Any] | None:
    """A KRaft control record's message as kafka-dump-log 4.1 prints it (None for another
    control type): read at version 0, written at the version its `version` field names (a
    leader change of version 1 lists voters' directory ids, zero here).  CorruptRecordError
    when it cannot be read."""
    known = CONTROL_RECORDS.get(control)
    if known is None:
        return None
    message = known[1]
    if value is None:
        raise CorruptRecordError(f"{message.name}: the control record has no value", position=0)
    fields = message.decode(value, 0, strict=False)         # Kafka's readers ignore bytes after
    version = max(int(fields["version"]), 0)                # below 0, as version 0 writes
    if version == 0:
        return message.decode(value, 0, strict=False, form=JSON)
    return message.decode(message.encode(version, fields), version, form=JSON)
