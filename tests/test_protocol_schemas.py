"""Every schema kafkacodec defines, checked version by version against Kafka's own message
definitions: protocol/messages.py (the control-plane messages, SASL, the headers),
cli/_internal_topics.py (the records of __consumer_offsets and __transaction_state, the consumer
protocol) and cli/_cluster_metadata.py (KRaft's metadata records and control records).  Kafka's
definitions (`common/message/*.json`, `common/metadata/*.json`) are read at test time from Kafka
4.1's jars on Maven Central (kafka-clients; the group and transaction coordinators' jars for the
internal topics; kafka-metadata for the metadata records), resolved with `mvn` as
tests/kafka_broker.py does; kafkacodec commits none of Kafka's files.  Skipped, saying why, when
Maven cannot resolve the jars.

For every version we define (what serve answers, what the consumer, the mirror and the SASL
client send): the api key, whether the version is flexible, and each field present in it, in
wire order: its name (snake_case of Kafka's), type, nullability, tag, compactness, and the
default where Kafka gives one or the field is tagged (a tagged field is sent, and printed by
Kafka's JSON converters, only when it differs from its default).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import zipfile
from typing import Any

import pytest

from kafkacodec.cli import _cluster_metadata, _internal_topics
from kafkacodec.protocol import _schema as s
from kafkacodec.protocol import messages
from kafkacodec.protocol._schema import Field, Message

KAFKA = "4.1.1"

#: Versions we define that Kafka 4.0 removed (KIP-896), so that Kafka 4.1's definitions do not
#: describe them: Kafka 3.9's, which `kafkacodec serve` still answers for old clients (it
#: serves Kafka 3.9's ranges, docs/serve.md).  The test fails when this list is not exact.
REMOVED_IN_KAFKA_4 = {
    "ProduceRequest": (0, 2), "ProduceResponse": (0, 2),
    "ListOffsetsRequest": (0, 0), "ListOffsetsResponse": (0, 0),
    "OffsetCommitRequest": (0, 1), "OffsetCommitResponse": (0, 1),
    "OffsetFetchRequest": (0, 0), "OffsetFetchResponse": (0, 0),
    "CreateTopicsRequest": (0, 1), "CreateTopicsResponse": (0, 1),
    "DeleteTopicsRequest": (0, 0), "DeleteTopicsResponse": (0, 0),
}

_PRIMITIVE = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid",
              "string", "bytes", "records"}


@pytest.fixture(scope="module")
def kafka_definitions() -> dict[str, dict[str, Any]]:
    """Kafka's message definitions by name, from every jar of Kafka's that carries some."""
    from kafka_broker import BrokerUnavailable, classpath

    try:
        jars = classpath(KAFKA, tools=("mvn",)).split(os.pathsep)
    except BrokerUnavailable as exc:
        pytest.skip(f"Kafka {KAFKA}'s message definitions come from its jars, which Maven could "
                    f"not resolve: {str(exc)[:300]}")
    found: dict[str, dict[str, Any]] = {}
    for jar in jars:
        if not os.path.basename(jar).startswith("kafka"):
            continue
        with zipfile.ZipFile(jar) as archive:
            for name in archive.namelist():
                if re.fullmatch(r"common/(message|metadata)/\w+\.json", name):
                    text = archive.read(name).decode()
                    spec = json.loads(re.sub(r"(?m)^\s*//.*$", "", text))   # their licence header
                    found[spec["name"]] = spec
    assert {"ProduceRequest", "TransactionLogValue", "PartitionRecord"} <= set(found), sorted(found)[:20]
    return found


def our_schemas() -> list[Message]:
    """Every Message defined in the modules that hold schemas (module level, or in tables)."""
    seen: dict[int, Message] = {}

    def visit(value: Any) -> None:
        if isinstance(value, Message):
            seen.setdefault(id(value), value)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)

    for module in (messages, _internal_topics, _cluster_metadata):
        for value in vars(module).values():
            visit(value)
    return sorted(seen.values(), key=lambda m: m.name)


SCHEMAS = our_schemas()


def test_the_schemas_are_found():
    names = {m.name for m in SCHEMAS}
    assert {"ProduceRequest", "SaslAuthenticateResponse", "RequestHeader", "OffsetCommitValue",
            "TransactionLogValue", "ConsumerProtocolAssignment", "PartitionRecord", "VotersRecord"} <= names
    assert len(names) == len(SCHEMAS) >= 60            # one definition per name


def _in(text: str | None, version: int) -> bool:
    low, high = s.versions(text)
    return low <= version <= high


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _kafka_default(kind: str, text: Any, nullable: bool) -> Any:
    """A Kafka default ("default": -1, "-1", "true", "null"...) as our decoder's value."""
    if text is None or text == "null":
        return None
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(str(text), 0)
    if kind == "float64":
        return float(text)
    if kind == "bool":
        return str(text).lower() == "true"
    return text


def _kafka_implicit_default(kind: str) -> Any:
    """Kafka's default where a definition gives none (MessageGenerator's rules)."""
    return {"bool": False, "uuid": s.ZERO_UUID, "string": "", "bytes": b"", "records": None,
            "float64": 0.0}.get(kind, 0)


def kafka_lines(spec: dict[str, Any], version: int) -> list[str]:
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", ())}
    flexible = _in(spec.get("flexibleVersions"), version)
    out: list[str] = []

    def walk(fields: list[dict[str, Any]], path: str) -> None:
        for fj in fields:
            present = fj.get("versions") or fj.get("taggedVersions")
            if not _in(present, version):
                continue
            name = path + snake(fj["name"])
            kind = fj["type"]
            nullable = _in(fj.get("nullableVersions"), version)
            tag = fj.get("tag") if flexible and _in(fj.get("taggedVersions"), version) else None
            compact = flexible if "flexibleVersions" not in fj else _in(fj["flexibleVersions"], version)
            default: Any = "-"
            if "default" in fj:
                default = _kafka_default(kind, fj["default"], nullable)
            elif tag is not None and kind in _PRIMITIVE:
                default = _kafka_implicit_default(kind)
            if kind.startswith("[]"):
                item = kind[2:]
                out.append(_line(name, "array", item if item in _PRIMITIVE else "struct",
                                 nullable, tag, compact, "-" if tag is None else default))
                if item not in _PRIMITIVE:
                    walk(fj.get("fields") or common[item], name + "[].")
            elif kind in _PRIMITIVE:
                out.append(_line(name, kind, "", nullable, tag, compact, default))
            else:                                           # a struct
                out.append(_line(name, "struct", "", nullable, tag, compact,
                                 "-" if "default" not in fj else default))
                walk(fj.get("fields") or common[kind], name + ".")

    walk(spec["fields"], "")
    return out


def our_lines(message: Message, version: int) -> list[str]:
    flexible = message.is_flexible(version)
    out: list[str] = []

    def walk(fields: tuple[Field, ...], path: str, kafka_fields: dict[str, dict[str, Any]]) -> None:
        for field in fields:
            if not field.present(version):
                continue
            name = path + field.name
            tag = field.tag if flexible else None
            compact = field.is_compact(flexible, version)
            spec = kafka_fields.get(name, {})
            default: Any = "-"
            if "default" in spec or (tag is not None and field.kind not in ("array", s.STRUCT)):
                default = field.default_value(version)
            if field.kind == "array":
                item = field.item if isinstance(field.item, str) else "struct"
                out.append(_line(name, "array", item, field.nullable_in(version), tag, compact,
                                 "-" if tag is None else default))
                if not isinstance(field.item, str):
                    walk(field.item, name + "[].", kafka_fields)
            else:
                out.append(_line(name, field.kind, "", field.nullable_in(version), tag, compact,
                                 default))
                if field.kind == s.STRUCT:
                    walk(field.fields, name + ".", kafka_fields)

    walk(message.fields, "", _KAFKA_FIELDS.get(message.name, {}))
    return out


_KAFKA_FIELDS: dict[str, dict[str, dict[str, Any]]] = {}


def _index_kafka_fields(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Kafka's field definitions by our path (topics[].partitions[].error_code)."""
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", ())}
    index: dict[str, dict[str, Any]] = {}

    def walk(fields: list[dict[str, Any]], path: str) -> None:
        for fj in fields:
            name = path + snake(fj["name"])
            index[name] = fj
            kind = fj["type"]
            item = kind[2:] if kind.startswith("[]") else kind
            if item not in _PRIMITIVE:
                walk(fj.get("fields") or common[item], name + ("[]." if kind.startswith("[]") else "."))

    walk(spec["fields"], "")
    return index


def _line(name: str, kind: str, item: str, nullable: bool, tag: int | None, compact: bool,
          default: Any) -> str:
    text = f"{name}: {kind}{'<' + item + '>' if item else ''}"
    if nullable:
        text += " nullable"
    if tag is not None:
        text += f" tag={tag}"
    if not compact and kind in ("string", "bytes", "records", "array"):
        text += " int-length"
    if default != "-":
        text += f" default={default!r}"
    return text


@pytest.mark.parametrize("message", SCHEMAS, ids=lambda m: m.name)
def test_schema_matches_kafkas_definition(message: Message, kafka_definitions):
    spec = kafka_definitions.get(message.name)
    assert spec is not None, f"Kafka {KAFKA} defines no message named {message.name}"
    assert message.api_key == spec.get("apiKey"), "api key (a record type for the coordinators')"
    _KAFKA_FIELDS[message.name] = _index_kafka_fields(spec)
    low, high = s.versions(spec["validVersions"])
    ours = range(message.min_version, message.max_version + 1)
    assert message.max_version <= high, f"we define v{message.max_version}, Kafka {KAFKA} stops at v{high}"
    older = [v for v in ours if v < low]
    removed = REMOVED_IN_KAFKA_4.get(message.name)
    assert (older[0], older[-1]) == removed if older else removed is None, (
        f"versions below Kafka 4's v{low}: {older}; REMOVED_IN_KAFKA_4 says {removed}")
    for version in ours:
        if version < low:
            continue
        assert message.is_flexible(version) == _in(spec.get("flexibleVersions"), version), (
            f"v{version} flexible")
        theirs, mine = kafka_lines(spec, version), our_lines(message, version)
        assert mine == theirs, f"{message.name} v{version}:\n" + "\n".join(
            difflib.unified_diff(theirs, mine, f"Kafka {KAFKA}", "kafkacodec", lineterm=""))


def test_the_removed_versions_are_below_kafka_4s(kafka_definitions):
    """Every entry of REMOVED_IN_KAFKA_4 ends just below the oldest version Kafka 4 defines."""
    for name, (_, high) in REMOVED_IN_KAFKA_4.items():
        assert s.versions(kafka_definitions[name]["validVersions"])[0] == high + 1, name
