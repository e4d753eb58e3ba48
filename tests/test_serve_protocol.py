"""The protocol codecs `kafkacodec serve` speaks, checked against kafka-python's own message
classes (an independent implementation generated from Kafka's schemas): every control-plane
message and version the server serves is written by us and read back by kafka-python; the
Fetch request (v0-17) written by kafka-python is read by us, and our Fetch response read by
kafka-python.  Plus hostile input: truncations and bad lengths raise CorruptRecordError."""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kafkacodec.errors import CorruptRecordError
from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import ApiKey
from kafkacodec.protocol._fetch_server import decode_fetch_request, encode_fetch_response
from kafkacodec.protocol._schema import STRUCT, Field, Message

kafka_protocol = pytest.importorskip("kafka.protocol")
from kafka.protocol.api_message import ApiMessage  # noqa: E402

#: Every version of every schema: what serve answers (dispatch.API_RANGES), what the consumer,
#: the mirror and a SASL client send (protocol/control.py).
SCHEMA_RANGES = {key: (message.min_version, message.max_version) for key, message in m.REQUESTS.items()}


def test_every_version_served_or_sent_has_a_schema():
    from kafkacodec.protocol import control
    from kafkacodec.serve.dispatch import API_RANGES

    # what the clients send: from v0 up to MAX_VERSIONS, DescribeConfigs from v1 (Kafka 4 has no v0)
    sent = [(k, (1 if k == ApiKey.DESCRIBE_CONFIGS else 0, v)) for k, v in control.MAX_VERSIONS.items()]
    for key, (low, high) in list(API_RANGES.items()) + sent:
        if key == ApiKey.FETCH:
            continue                                # the Cython codec (_fetch_server.pyx)
        assert key in m.REQUESTS and key in m.RESPONSES, key
        assert SCHEMA_RANGES[key][0] <= low and high <= SCHEMA_RANGES[key][1], (key.name, low, high)


def kafka_python_classes() -> dict[str, type]:
    import importlib
    import pkgutil

    found = {}
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in info.name or "schemas" in info.name:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:
            continue
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and getattr(cls, "_json", None):
                found[name] = cls
    return found


CLASSES = kafka_python_classes()


def sample(fields: tuple[Field, ...], version: int, rng: random.Random) -> dict:
    """A value for every field of the version (non-default where possible)."""
    out = {}
    for field in fields:
        if not field.present(version) or field.tag is not None:
            continue
        out[field.name] = sample_value(field, version, rng)
    return out


def sample_value(field: Field, version: int, rng: random.Random):
    kind = field.kind
    if kind == "array":
        if isinstance(field.item, str):
            return [scalar(field.item, rng) for _ in range(2)]
        return [sample(field.item, version, rng) for _ in range(2)]
    if kind == STRUCT:
        return sample(field.fields, version, rng)
    if kind in ("string", "bytes", "records") and field.nullable_in(version) and rng.random() < 0.3:
        return None
    return scalar(kind, rng)


def scalar(kind: str, rng: random.Random):
    return {"int8": lambda: rng.randint(-100, 100), "int16": lambda: rng.randint(-30000, 30000),
            "int32": lambda: rng.randint(-2**31, 2**31 - 1), "int64": lambda: rng.randint(-2**63, 2**63 - 1),
            "bool": lambda: rng.random() < 0.5, "uuid": lambda: uuid.UUID(int=rng.getrandbits(128)),
            "string": lambda: "s-%d-é" % rng.randint(0, 999),
            "bytes": lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9))),
            "records": lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 9)))}[kind]()


def normal(value):
    """kafka-python's to_dict() and ours on common ground."""
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if type(value).__name__ == "Uuid" or hasattr(value, "uuid") and not isinstance(value, str):
        return str(uuid.UUID(bytes=bytes(value)) if isinstance(value, (bytes, bytearray)) else value)
    return value


# kafka-python's names where they differ from the schema's
ALIASES = {"topic_authorized_operations": "authorized_operations",
           "cluster_authorized_operations": "authorized_operations"}


def assert_subset(ours, theirs, path="") -> None:
    if isinstance(ours, dict):
        for key, value in ours.items():
            key_theirs = ALIASES.get(key, key) if key not in theirs else key
            if key_theirs != key:
                theirs = {**theirs, key: theirs[key_theirs]}
            assert key in theirs, f"{path}.{key} missing in kafka-python's reading ({sorted(theirs)})"
            assert_subset(value, theirs[key], f"{path}.{key}")
    elif isinstance(theirs, set) and isinstance(ours, int):   # authorized operations: a bit set
        assert {bit for bit in range(32) if (ours & 0xFFFFFFFF) >> bit & 1} == theirs, path
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_subset(a, b, f"{path}[{i}]")
    elif isinstance(ours, str) and isinstance(theirs, (bytes, bytearray)):
        assert ours.encode() == bytes(theirs), path
    elif isinstance(ours, bytes) and isinstance(theirs, str):
        assert ours == theirs.encode("latin-1"), path
    elif isinstance(ours, str) and theirs is not None and not isinstance(theirs, str):
        assert ours == str(theirs), path        # uuids
    else:
        assert ours == theirs, path


def cases():
    for key, (lo, hi) in SCHEMA_RANGES.items():
        for kind, table in (("Request", m.REQUESTS), ("Response", m.RESPONSES)):
            for version in range(lo, hi + 1):
                yield pytest.param(table[key], kind, version,
                                   id=f"{ApiKey(key).message_name}{kind}-v{version}")


@pytest.mark.parametrize(("message", "kind", "version"), list(cases()))
def test_written_by_us_read_by_kafka_python_and_by_us(message: Message, kind: str, version: int):
    cls = CLASSES.get(f"{ApiKey(message.api_key).message_name}{kind}")
    if cls is None:
        pytest.skip("kafka-python has no class for it")
    rng = random.Random(f"{message.name}-{version}")
    value = sample(message.fields, version, rng)
    if message is m.API_VERSIONS_RESPONSE:
        value["error_code"] = 0      # kafka-python reads any error answer in the v0 layout (KIP-511)
    data = bytes(message.encode(version, value))
    # ours both ways
    assert_subset(value, message.decode(data, version))
    # kafka-python (its classes follow Kafka 4's schemas, which keep the old versions' fields)
    theirs = cls.decode(data, version=version).to_dict(json=False)
    assert_subset(normal(value), normal(theirs))


@pytest.mark.parametrize("version", range(0, 18))
def test_fetch_request_of_kafka_python_is_read_by_us(version: int):
    from kafka.protocol.consumer import FetchRequest

    topic_id = uuid.uuid4()
    partition = FetchRequest.FetchTopic.FetchPartition
    request = FetchRequest[version](
        replica_id=-1, max_wait_ms=123, min_bytes=7, max_bytes=4567, isolation_level=1 if version >= 4 else 0,
        session_id=5 if version >= 7 else 0, session_epoch=6 if version >= 7 else -1,
        topics=[FetchRequest.FetchTopic(topic="t1" if version < 13 else None,
                                        topic_id=topic_id if version >= 13 else None,
                                        partitions=[partition(partition=3, fetch_offset=10 + version,
                                                              partition_max_bytes=999, current_leader_epoch=4,
                                                              last_fetched_epoch=8, log_start_offset=2),
                                                    partition(partition=4, fetch_offset=0, partition_max_bytes=1)])],
        forgotten_topics_data=[], rack_id="rack")
    data = request.encode(version=version)
    ours = decode_fetch_request(data, version)
    assert (ours.max_wait_ms, ours.min_bytes) == (123, 7)
    assert ours.max_bytes == (4567 if version >= 3 else 2**31 - 1)
    assert ours.isolation_level == (1 if version >= 4 else 0)
    assert (ours.session_id, ours.session_epoch) == ((5, 6) if version >= 7 else (0, -1))
    assert ours.rack_id == ("rack" if version >= 11 else "")
    name, tid, parts = ours.topics[0]
    assert (name, tid) == (("t1", None) if version < 13 else (None, topic_id))
    p = parts[0]
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (3, 10 + version, 999)
    assert p.current_leader_epoch == (4 if version >= 9 else -1)
    assert p.last_fetched_epoch == (8 if version >= 12 else -1)
    assert p.log_start_offset == (2 if version >= 5 else -1)
    assert (parts[1].partition, parts[1].partition_max_bytes) == (4, 1)


@pytest.mark.parametrize("version", range(0, 18))
def test_fetch_response_written_by_us_is_read_by_kafka_python(version: int):
    from kafka.protocol.consumer import FetchResponse

    records = [b"A" * 17, b"", b"B" * 5]
    topic_id = uuid.uuid4()
    partitions = [(0, 0, 100, 90, 3, [(7, 11), (8, 12)], len(records[0])),
                  (1, 1, 5, -1, 0, None, len(records[1])),
                  (2, 0, 50, 50, 0, [], len(records[2])),
                  (3, 3, -1, -1, -1, None, -1)]
    head, cuts, frame = encode_fetch_response(version, 77, [("topic-a", topic_id, partitions)])
    # the records go into the cuts
    data = bytearray()
    at = 0
    for cut, rec in zip(cuts, records + [b""]):
        data += head[at:cut] + rec
        at = cut
    data += head[at:]
    assert struct.unpack(">i", data[:4])[0] == frame == len(data) - 4
    correlation = struct.unpack(">i", data[4:8])[0]
    assert correlation == 77
    body = bytes(data[8 + (1 if version >= 12 else 0):])
    theirs = FetchResponse.decode(body, version=version).to_dict(json=False)
    topic = theirs["responses"][0]
    if version >= 13:
        assert str(topic["topic_id"]) == str(topic_id)
    else:
        assert topic["topic"] == "topic-a"
    got = topic["partitions"]
    assert [p["partition_index"] for p in got] == [0, 1, 2, 3]
    assert [p["error_code"] for p in got] == [0, 1, 0, 3]
    assert [p["high_watermark"] for p in got] == [100, 5, 50, -1]
    assert [bytes(p["records"]) if p["records"] is not None else None for p in got] == records + [None]
    if version >= 4:
        assert [p["last_stable_offset"] for p in got] == [90, -1, 50, -1]
        aborted = got[0]["aborted_transactions"]
        assert [(a["producer_id"], a["first_offset"]) for a in aborted] == [(7, 11), (8, 12)]
        assert got[1]["aborted_transactions"] is None
    if version >= 5:
        assert [p["log_start_offset"] for p in got] == [3, 0, 0, -1]


def test_fetch_request_extra_bytes_and_truncations_are_refused():
    from kafka.protocol.consumer import FetchRequest

    for version in (0, 3, 4, 12, 13, 17):
        request = FetchRequest[version](
            replica_id=-1, max_wait_ms=1, min_bytes=1, max_bytes=10,
            topics=[FetchRequest.FetchTopic(topic="t" if version < 13 else None,
                                            topic_id=uuid.uuid4() if version >= 13 else None,
                                            partitions=[FetchRequest.FetchTopic.FetchPartition(
                                                partition=0, fetch_offset=0, partition_max_bytes=1)])])
        data = bytes(request.encode(version=version))
        for cut in range(len(data)):
            with pytest.raises(CorruptRecordError):
                decode_fetch_request(data[:cut], version)
        with pytest.raises(CorruptRecordError, match="left after"):
            decode_fetch_request(data + b"\0", version)


def test_a_huge_array_count_is_refused_before_allocating():
    body = struct.pack(">iiii", -1, 0, 0, 2**31 - 1)            # Fetch v0: 2^31-1 topics
    with pytest.raises(CorruptRecordError):
        decode_fetch_request(body, 0)
    with pytest.raises(CorruptRecordError):
        m.METADATA_REQUEST.decode(struct.pack(">i", 2**31 - 1), 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(sorted(m.REQUESTS)), st.integers(0, 12))
def test_random_bytes_decode_or_raise_corrupt_record(data: bytes, key: int, version: int):
    message = m.REQUESTS[key]
    version = min(version, message.max_version)
    try:
        message.decode(data, version)
    except CorruptRecordError:
        pass
    try:
        decode_fetch_request(data, min(version, 17))
    except CorruptRecordError:
        pass


def test_fields_absent_from_a_version_read_as_kafkas_defaults():
    # aiokafka's SyncGroup v3 was refused as INCONSISTENT_GROUP_PROTOCOL while the absent
    # ProtocolType (v5+) read as "" instead of null
    sync = m.SYNC_GROUP_REQUEST.encode(3, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                           "group_instance_id": None, "assignments": []})
    decoded = m.SYNC_GROUP_REQUEST.decode(bytes(sync), 3)
    assert decoded["protocol_type"] is None and decoded["protocol_name"] is None
    join = m.JOIN_GROUP_REQUEST.decode(bytes(m.JOIN_GROUP_REQUEST.encode(0, {
        "group_id": "g", "session_timeout_ms": 1, "member_id": "", "protocol_type": "consumer",
        "protocols": []})), 0)
    assert join["rebalance_timeout_ms"] == -1 and join["group_instance_id"] is None
    commit = m.OFFSET_COMMIT_REQUEST.decode(bytes(m.OFFSET_COMMIT_REQUEST.encode(0, {
        "group_id": "g", "topics": []})), 0)
    assert commit["generation_id_or_member_epoch"] == -1 and commit["member_id"] == ""


def test_fetch_v13_topic_id_is_a_uuid_or_its_16_bytes_in_both_encoders():
    from kafkacodec.protocol._fetch import encode_fetch_request

    topic_id = uuid.uuid4()
    partitions = [(0, 0, 100, 90, 3, None, 0)]
    for same in (topic_id.bytes, bytearray(topic_id.bytes)):
        assert encode_fetch_request([(same, [(0, 5)])], api_version=13) == \
            encode_fetch_request([(topic_id, [(0, 5)])], api_version=13)
        assert encode_fetch_response(13, 1, [("t", same, partitions)]) == \
            encode_fetch_response(13, 1, [("t", topic_id, partitions)])
    with pytest.raises(ValueError, match="16-byte topic id"):
        encode_fetch_request([(topic_id.bytes[:15], [(0, 5)])], api_version=13)
    with pytest.raises(ValueError, match="16-byte topic id"):
        encode_fetch_response(13, 1, [("t", topic_id.bytes + b"x", partitions)])


# --- protocol/control.py: the consumer's, the mirror's and a SASL client's requests ---------------

def _control_cases():
    from kafkacodec.protocol import control

    requests = {
        ApiKey.LIST_OFFSETS: control.list_offsets_request({"t": [(0, -2), (3, 1700)], "u": [(1, -1)]},
                                                          isolation_level=1),
        ApiKey.FIND_COORDINATOR: control.find_coordinator_request("group-é", 0),
        ApiKey.OFFSET_COMMIT: control.offset_commit_request("g", {"t": [(0, 42), (1, 7)]},
                                                            metadata=None),
        ApiKey.OFFSET_FETCH: control.offset_fetch_request("g", {"t": [0, 1], "u": [5]}),
        ApiKey.INIT_PRODUCER_ID: control.init_producer_id_request(transaction_timeout_ms=9000),
        ApiKey.SASL_HANDSHAKE: control.sasl_handshake_request("SCRAM-SHA-512"),
        ApiKey.SASL_AUTHENTICATE: control.sasl_authenticate_request(b"n,,n=user,r=abc"),
    }
    for key, outgoing in requests.items():
        for version in range(m.REQUESTS[key].min_version, control.MAX_VERSIONS[key] + 1):
            yield pytest.param(key, outgoing, version, id=f"{key.message_name}-v{version}")


@pytest.mark.parametrize(("key", "outgoing", "version"), list(_control_cases()))
def test_control_requests_are_read_by_kafka_python_and_answers_by_us(key, outgoing, version):
    """Each control.py request, framed by us, read by kafka-python (header and body); an answer
    framed as a broker frames it read by control.decode_response (fields as attributes) and by
    kafka-python."""
    from kafkacodec.protocol import control

    frame = control.encode_request(outgoing, version, 4321, "kc-test")
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    request_cls = CLASSES[f"{key.message_name}Request"]
    theirs = request_cls.decode(frame[4:], version=version, header=True)
    assert (theirs._header.request_api_key, theirs._header.request_api_version) == (key, version)
    assert (theirs._header.correlation_id, theirs._header.client_id) == (4321, "kc-test")
    start = m.parse_request_header(memoryview(frame)[4:])[4]
    sent = outgoing.message.decode(frame, version, 4 + start)        # the fields of the version
    assert all(sent[f.name] == outgoing.value[f.name] for f in outgoing.message.fields
               if f.present(version) and f.name in outgoing.value and f.kind != "array")
    assert_subset(normal(theirs.to_dict(json=False)), normal(sent))   # theirs: the version's fields
    # an answer (sampled values) framed as a broker does, read by us and by kafka-python
    response = m.RESPONSES[key]
    value = sample(response.fields, version, random.Random(f"{response.name}-{version}"))
    payload = bytes(m.frame_response(key, version, 4321, response.encode(version, value)))[4:]
    ours = control.decode_response(response, payload, version)
    assert_subset(value, ours)
    answer = CLASSES[f"{key.message_name}Response"].decode(payload, version=version, header=True)
    assert answer._header.correlation_id == 4321
    assert_subset(normal(value), normal(answer.to_dict(json=False)))
    first = next(f for f in response.fields if f.present(version) and f.tag is None)
    assert getattr(ours, first.name) == ours[first.name]            # attribute access
