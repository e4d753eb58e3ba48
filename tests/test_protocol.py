"""Protocol framing cross-checked with kafka-python's message classes, both ways, over every
version we speak; truncated and malformed responses raise KafkaCodecError with a position."""

import struct
import uuid

import pytest
from hypothesis import given, settings, strategies as st
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest as KMetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KMetadataResponse
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.protocol.producer.produce import ProduceResponse as KProduceResponse

from kafkacodec import CorruptRecordError, KafkaCodecError, UnsupportedVersionError
from kafkacodec import WriteBuffer
from kafkacodec.protocol import (
    AbortedTransaction,
    decode_api_versions_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_produce_response,
    encode_api_versions_request,
    encode_fetch_request,
    encode_metadata_request,
    encode_produce_request,
)

FETCH_VERSIONS = range(4, 17)
PRODUCE_VERSIONS = range(3, 12)
METADATA_VERSIONS = range(0, 13)
TOPIC_IDS = {"alpha": uuid.UUID(int=0xA1), "béta": uuid.UUID(int=0xB2)}


def kp_fetch_response(version, *, with_tags=False):
    """A FetchResponse made by kafka-python: two topics, partitions with and without records,
    aborted transactions null and not, and (flexible versions) tagged partition fields."""
    T = KFetchResponse.FetchableTopicResponse
    P = T.PartitionData
    A = P.AbortedTransaction
    tags = {}
    if with_tags and version >= 12:
        tags = dict(diverging_epoch=P.EpochEndOffset(epoch=3, end_offset=44),
                    current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=9))
    responses = []
    for name, parts in (("alpha", [(0, b"\x01" * 70, [A(producer_id=7, first_offset=3)]), (5, None, None)]),
                        ("béta", [(2, b"", []), (3, bytes(range(256)) * 3, None)])):
        ident = dict(topic=name) if version < 13 else dict(topic_id=TOPIC_IDS[name])
        partitions = [P(partition_index=i, error_code=i, high_watermark=1000 + i, last_stable_offset=900 + i,
                        log_start_offset=10 + i, aborted_transactions=aborted, preferred_read_replica=i - 1,
                        records=records, **(tags if i == 0 else {})) for i, records, aborted in parts]
        responses.append(T(partitions=partitions, **ident))
    top = {}
    if with_tags and version >= 16:
        top = dict(node_endpoints=[KFetchResponse.NodeEndpoint(node_id=2, host="broker-2", port=9093, rack=None)])
    msg = KFetchResponse[version](throttle_time_ms=17, error_code=0, session_id=123456, responses=responses, **top)
    msg.with_header(correlation_id=4242)
    return msg, bytes(msg.encode(header=True))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("with_tags", [False, True])
def test_fetch_response_from_kafka_python(version, with_tags):
    msg, raw = kp_fetch_response(version, with_tags=with_tags)
    ours = decode_fetch_response(raw, version)
    assert ours.correlation_id == 4242 and ours.size == len(raw)
    assert ours.throttle_time_ms == 17
    assert (ours.error_code, ours.session_id) == ((0, 123456) if version >= 7 else (0, 0))
    for theirs_topic, topic in zip(msg.responses, ours.responses, strict=True):
        if version < 13:
            assert topic.topic == theirs_topic.topic and topic.topic_id is None
        else:
            assert topic.topic is None and topic.topic_id == theirs_topic.topic_id
        for theirs, part in zip(theirs_topic.partitions, topic.partitions, strict=True):
            assert part.partition_index == theirs.partition_index
            assert part.error_code == theirs.error_code
            assert part.high_watermark == theirs.high_watermark
            assert part.last_stable_offset == theirs.last_stable_offset
            assert part.log_start_offset == (theirs.log_start_offset if version >= 5 else -1)
            assert part.preferred_read_replica == (theirs.preferred_read_replica if version >= 11 else -1)
            if theirs.aborted_transactions is None:
                assert part.aborted_transactions is None
            else:
                assert part.aborted_transactions == [
                    AbortedTransaction(a.producer_id, a.first_offset) for a in theirs.aborted_transactions]
            if theirs.records is None:
                assert part.records is None and part.records_position == -1
            else:
                assert bytes(part.records) == theirs.records
                assert raw[part.records_position:part.records_position + len(theirs.records)] == theirs.records


def test_fetch_records_are_zero_copy_slices_at_an_offset():
    _, raw = kp_fetch_response(12)
    buf = bytearray(b"\xee" * 9 + raw + b"\xff" * 5)          # e.g. a ring buffer slot
    ours = decode_fetch_response(buf, 12, offset=9, size=len(raw))
    part = ours.responses[0].partitions[0]
    assert part.records.obj is buf and part.records_position > 9
    buf[part.records_position] = 0x99
    assert part.records[0] == 0x99
    # memoryview input, no header
    body = memoryview(raw)[5:]                                 # skip correlation id + empty tags
    headless = decode_fetch_response(body, 12, header=False)
    assert headless.correlation_id is None
    assert [bytes(p.records or b"") for t in headless.responses for p in t.partitions] == [
        bytes(p.records or b"") for t in decode_fetch_response(raw, 12).responses for p in t.partitions]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_request_to_kafka_python(version):
    topic = "alpha" if version < 13 else TOPIC_IDS["alpha"]
    raw = encode_fetch_request([(topic, [(0, 100), (3, 2**40, 4096)])], api_version=version, correlation_id=77,
                               client_id="me", max_wait_ms=250, min_bytes=5, max_bytes=1 << 20,
                               isolation_level=1, session_id=8, session_epoch=2, rack_id="rack-1")
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    theirs = KFetchRequest.decode(raw[4:], version=version, header=True)
    assert theirs.header.request_api_key == 1 and theirs.header.request_api_version == version
    assert theirs.header.correlation_id == 77 and theirs.header.client_id == "me"
    assert (theirs.max_wait_ms, theirs.min_bytes, theirs.max_bytes, theirs.isolation_level) == (250, 5, 1 << 20, 1)
    if version >= 7:
        assert (theirs.session_id, theirs.session_epoch) == (8, 2)
    (t,) = theirs.topics
    assert (t.topic if version < 13 else t.topic_id) == topic
    assert [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in t.partitions] == [
        (0, 100, 1048576), (3, 2**40, 4096)]
    if version >= 11:
        assert theirs.rack_id == "rack-1"
    # and back: kafka-python's encoding of the same request is byte-identical
    theirs.with_header(correlation_id=77, client_id="me")
    assert bytes(theirs.encode(header=True, framed=True)) == raw


def kp_topic_data(version):
    PT = KProduceRequest.TopicProduceData
    PP = PT.PartitionProduceData
    return [PT(name="alpha", partition_data=[PP(index=0, records=b"\x02" * 90), PP(index=4, records=None)]),
            PT(name="béta", partition_data=[PP(index=1, records=b"xyz" * 50)])]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_request_matches_kafka_python_byte_for_byte(version):
    theirs = KProduceRequest[version](transactional_id="tx" if version % 2 else None, acks=-1,
                                      timeout_ms=1500, topic_data=kp_topic_data(version))
    theirs.with_header(correlation_id=31, client_id="cid")
    expected = bytes(theirs.encode(header=True, framed=True))
    # one buffer per partition, and several buffers sent back to back
    ours = encode_produce_request(
        [("alpha", [(0, b"\x02" * 90), (4, None)]), ("béta", [(1, [b"xyz" * 20, memoryview(b"xyz" * 30)])])],
        api_version=version, correlation_id=31, client_id="cid", acks=-1, timeout_ms=1500,
        transactional_id="tx" if version % 2 else None)
    assert bytes(ours) == expected
    decoded = KProduceRequest.decode(bytes(ours)[4:], version=version, header=True)
    assert decoded.topic_data[1].partition_data[0].records == b"xyz" * 50


def test_produce_request_reuses_its_output_buffer():
    out = WriteBuffer()
    first = bytes(encode_produce_request([("a", [(0, b"x" * 100)])], out=out))
    assert encode_produce_request([("a", [(0, b"y")])], out=out) is out
    assert len(out) < len(first)
    view = memoryview(out)
    with pytest.raises(BufferError):
        encode_produce_request([("a", [(0, b"z")])], out=out)
    view.release()


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_response_from_kafka_python(version):
    T = KProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    extra = {}
    if version >= 8:
        extra = dict(record_errors=[P.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="bad"),
                                    P.BatchIndexAndErrorMessage(batch_index=2, batch_index_error_message=None)],
                     error_message="oops")
    msg = KProduceResponse[version](responses=[T(name="alpha", partition_responses=[
        P(index=3, error_code=87, base_offset=12345, log_append_time_ms=-1, log_start_offset=7, **extra)])],
        throttle_time_ms=9)
    msg.with_header(correlation_id=5)
    ours = decode_produce_response(bytes(msg.encode(header=True)), version)
    assert ours.correlation_id == 5 and ours.throttle_time_ms == 9
    (p,) = ours.responses[0].partition_responses
    assert ours.responses[0].name == "alpha"
    assert (p.partition_index, p.error_code, p.base_offset, p.log_append_time_ms) == (3, 87, 12345, -1)
    assert p.log_start_offset == (7 if version >= 5 else -1)
    if version >= 8:
        assert p.record_errors == [(1, "bad"), (2, None)] and p.error_message == "oops"


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_metadata_both_ways(version):
    raw = encode_metadata_request(["alpha", "béta"], api_version=version, correlation_id=3)
    theirs = KMetadataRequest.decode(raw[4:], version=version, header=True)
    assert [t.name for t in theirs.topics] == ["alpha", "béta"]
    if version >= 1:
        all_topics = KMetadataRequest.decode(encode_metadata_request(None, api_version=version)[4:],
                                             version=version, header=True)
        assert all_topics.topics is None
    B = KMetadataResponse.MetadataResponseBroker
    T = KMetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    def since(first, last=99, **fields):
        return fields if first <= version <= last else {}

    brokers = [B(node_id=1, host="h1", port=9092, **since(1, rack="r")),
               B(node_id=2, host="h2", port=9093, **since(1, rack=None))]
    partitions = [P(error_code=0, partition_index=i, leader_id=1 + i % 2, replica_nodes=[1, 2], isr_nodes=[2],
                    **since(7, leader_epoch=5), **since(5, offline_replicas=[1])) for i in range(3)]
    topic = T(error_code=0, name="alpha", partitions=partitions, **since(10, topic_id=TOPIC_IDS["alpha"]),
              **since(1, is_internal=False), **since(8, authorized_operations=set()))
    msg = KMetadataResponse[version](brokers=brokers, topics=[topic], **since(3, throttle_time_ms=4),
                                     **since(2, cluster_id="cluster"), **since(1, controller_id=2),
                                     **since(8, 10, authorized_operations=set()))
    msg.with_header(correlation_id=3)
    ours = decode_metadata_response(bytes(msg.encode(header=True)), version)
    assert ours.correlation_id == 3
    assert [(b.node_id, b.host, b.port) for b in ours.brokers] == [(1, "h1", 9092), (2, "h2", 9093)]
    assert ours.brokers[0].rack == ("r" if version >= 1 else None)
    assert ours.leader("alpha", 1).node_id == 2 and ours.leader("alpha", 2).node_id == 1
    (topic,) = ours.topics
    # the walked sequences show their items (one __repr__ for all of them)
    assert repr(ours.brokers) == repr(list(ours.brokers)) and repr(topic.partitions) == repr(list(topic.partitions))
    assert topic.topic_id == (TOPIC_IDS["alpha"] if version >= 10 else None)
    assert topic.partitions[0].isr_nodes == [2] and topic.partitions[0].replica_nodes == [1, 2]
    assert topic.partitions[0].leader_epoch == (5 if version >= 7 else -1)
    assert topic.partitions[0].offline_replicas == ([1] if version >= 5 else [])
    if version >= 2:
        assert ours.cluster_id == "cluster"


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_both_ways(version):
    raw = encode_api_versions_request(api_version=version, correlation_id=11, client_id="c")
    theirs = KApiVersionsRequest.decode(raw[4:], version=version, header=True)
    assert theirs.header.correlation_id == 11
    if version >= 3:
        assert theirs.client_software_name == "kafkacodec"
    K = KApiVersionsResponse.ApiVersion
    msg = KApiVersionsResponse[version](error_code=0, api_keys=[K(api_key=0, min_version=3, max_version=11),
                                                                K(api_key=1, min_version=4, max_version=16)],
                                        throttle_time_ms=2)
    msg.with_header(correlation_id=11)
    ours = decode_api_versions_response(bytes(msg.encode(header=True)), version)
    assert ours.correlation_id == 11 and ours.max_version(1) == 16 and ours.max_version(3) is None
    assert [tuple(k) for k in ours.api_keys] == [(0, 3, 11), (1, 4, 16)]


# --- malformed input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_every_truncation_of_a_fetch_response_raises_with_a_position(version):
    _, raw = kp_fetch_response(version, with_tags=True)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError) as e:
            decode_fetch_response(raw[:cut], version)
        assert e.value.position is not None and 0 <= e.value.position <= cut


@pytest.mark.parametrize("decode,version", [
    (decode_produce_response, 9), (decode_metadata_response, 12), (decode_api_versions_response, 3)])
def test_truncated_other_responses_raise(decode, version):
    if decode is decode_produce_response:
        T = KProduceResponse.TopicProduceResponse
        msg = KProduceResponse[9](responses=[T(name="a", partition_responses=[T.PartitionProduceResponse(
            index=0, error_code=0, base_offset=1, log_append_time_ms=-1, log_start_offset=0)])], throttle_time_ms=0)
    elif decode is decode_metadata_response:
        B = KMetadataResponse.MetadataResponseBroker
        msg = KMetadataResponse[12](throttle_time_ms=0, brokers=[B(node_id=1, host="h", port=1, rack=None)],
                                    cluster_id=None, controller_id=1, topics=[])
    else:
        msg = KApiVersionsResponse[3](error_code=0, api_keys=[KApiVersionsResponse.ApiVersion(
            api_key=0, min_version=0, max_version=9)], throttle_time_ms=0)
    msg.with_header(correlation_id=1)
    raw = bytes(msg.encode(header=True))
    decode(raw, version)
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            decode(raw[:cut], version)


def test_malformed_lengths_and_versions():
    _, raw = kp_fetch_response(11)
    # topic count -1 (not nullable) and a huge partition count
    bad = bytearray(raw)
    bad[4 + 10:4 + 14] = b"\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordError) as e:
        decode_fetch_response(bytes(bad), 11)
    assert e.value.position == 14
    bad = bytearray(raw)
    bad[4 + 10:4 + 14] = b"\x7f\xff\xff\xff"
    with pytest.raises(CorruptRecordError):
        decode_fetch_response(bytes(bad), 11)
    # invalid UTF-8 in a topic name
    bad = bytearray(raw)
    bad[4 + 16] = 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetch_response(bytes(bad), 11)
    # an over-long unsigned varint in a flexible version
    with pytest.raises(CorruptRecordError):
        decode_fetch_response(b"\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff", 12)
    with pytest.raises(UnsupportedVersionError):
        decode_fetch_response(raw, 3)
    with pytest.raises(UnsupportedVersionError):
        encode_produce_request([], api_version=12)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([4, 7, 11, 12, 13, 16]))
def test_fetch_decoder_never_fails_outside_the_error_hierarchy(data, version):
    try:
        decode_fetch_response(data, version)
    except KafkaCodecError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fetch_decoder_on_mutated_responses(data):
    version = data.draw(st.sampled_from([4, 12, 16]))
    _, raw = kp_fetch_response(version, with_tags=True)
    raw = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_fetch_response(bytes(raw), version)
    except KafkaCodecError:
        pass


# --- the compiled codecs against the schema codec (protocol/messages.py) ----------------------
# ApiVersions, Metadata and Produce keep compiled client codecs (_metadata.pyx: the consumer's
# typed answers; _produce.pyx: the hot path); the schema codec, itself checked against Kafka's
# definitions (test_protocol_schemas.py), reads what they write and writes what they read.

def _header_field_by_field(body):
    from kafkacodec.protocol import messages as m
    from kafkacodec.protocol._schema import Reader

    reader = Reader(body)
    header = m.REQUEST_HEADER.read(reader, 1, invalid_utf8="replace")
    if m.is_flexible(header["request_api_key"], header["request_api_version"]):
        reader.skip_tags()
    return (header["request_api_key"], header["request_api_version"], header["correlation_id"],
            header["client_id"], reader.pos)


def test_request_headers_read_in_one_step_as_field_by_field():
    """parse_request_header reads the usual header with one struct; every header, hostile ones
    too (lengths past the end, below -1, invalid UTF-8, tagged fields, cut anywhere), gives what
    the schema reader gives, or the same error."""
    import random

    from kafkacodec.protocol import messages as m

    def outcome(read, body):
        try:
            return read(body)
        except KafkaCodecError as exc:
            return type(exc).__name__, str(exc)

    rng = random.Random(31)
    bodies = []
    for key in list(m.REQUESTS)[:40]:
        for version in (0, 1, 3, 9, 12, 13):
            for client_id in (None, b"", b"producer-1", b"\xff\xfe bad"):
                size = -1 if client_id is None else len(client_id)
                head = struct.pack(">hhih", key, version, 5, size) + (client_id or b"")
                for tags in (b"", b"\x00", b"\x01\x00\x02ab", b"\x01\x00\x05ab", b"\x80"):
                    body = head + tags + b"body"
                    bodies += [body] + [body[:rng.randrange(len(body) + 1)] for _ in range(3)]
    bodies += [struct.pack(">hhih", 0, 3, 1, n) + b"x" * 8 for n in (-2, -32768, 9, 32767)]
    bodies += [bytes(rng.randrange(256) for _ in range(rng.randrange(24))) for _ in range(20000)]
    for body in bodies:
        assert outcome(m.parse_request_header, body) == outcome(_header_field_by_field, body), body
        assert outcome(m.parse_request_header, memoryview(body)) == outcome(_header_field_by_field, body)


def test_response_frames_carry_the_schema_header():
    from kafkacodec.protocol import messages as m

    for key in m.REQUESTS:
        for version in range(0, 18):
            header = bytearray()
            m.RESPONSE_HEADER.encode(m.response_header_version(key, version), {"correlation_id": -7}, header)
            frame = m.frame_response(key, version, -7, b"body")
            assert bytes(frame) == struct.pack(">i", len(header) + 4) + bytes(header) + b"body", (key, version)


def _request_body(frame, message, version):
    from kafkacodec.protocol import messages as m

    payload = memoryview(frame)[4:]
    api_key, got_version, correlation_id, client_id, start = m.parse_request_header(payload)
    assert (api_key, got_version, correlation_id, client_id) == (message.api_key, version, 77, "cc")
    return message.decode(payload, version, start)


def _response_frame(message, version, value):
    from kafkacodec.protocol import messages as m

    body = message.encode(version, value)
    payload = bytes(m.frame_response(message.api_key, version, 31, body))[4:]
    return payload, message.decode(body, version)


@pytest.mark.parametrize("version", range(0, 4))
def test_compiled_api_versions_codec_agrees_with_the_schema(version):
    from kafkacodec.protocol import messages as m

    frame = encode_api_versions_request(api_version=version, correlation_id=77, client_id="cc",
                                        client_software_name="py", client_software_version="1.2")
    body = _request_body(frame, m.API_VERSIONS_REQUEST, version)
    assert (body["client_software_name"], body["client_software_version"]) == (
        ("py", "1.2") if version >= 3 else ("", ""))
    payload, sent = _response_frame(m.API_VERSIONS_RESPONSE, version, {
        "error_code": 35, "throttle_time_ms": 9,
        "api_keys": [{"api_key": k, "min_version": k % 3, "max_version": k + 2} for k in (0, 1, 3, 18)],
        "finalized_features_epoch": 5})
    theirs = decode_api_versions_response(payload, version)
    assert theirs.correlation_id == 31 and theirs.error_code == sent["error_code"]
    assert theirs.throttle_time_ms == sent["throttle_time_ms"]
    assert [tuple(r) for r in theirs.api_keys] == [
        (k["api_key"], k["min_version"], k["max_version"]) for k in sent["api_keys"]]


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_compiled_metadata_codec_agrees_with_the_schema(version):
    from kafkacodec.protocol import messages as m

    frame = encode_metadata_request(["alpha", "béta"], api_version=version, correlation_id=77,
                                    client_id="cc", allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=True)
    body = _request_body(frame, m.METADATA_REQUEST, version)
    assert [t["name"] for t in body["topics"]] == ["alpha", "béta"]
    assert body["allow_auto_topic_creation"] is (False if version >= 4 else True)
    assert body["include_topic_authorized_operations"] is (version >= 8)
    none = encode_metadata_request(None, api_version=version, correlation_id=77, client_id="cc")
    assert _request_body(none, m.METADATA_REQUEST, version)["topics"] == (None if version >= 1 else [])
    payload, sent = _response_frame(m.METADATA_RESPONSE, version, {
        "throttle_time_ms": 4, "cluster_id": "cluster-x", "controller_id": 2,
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": "r1"},
                    {"node_id": 2, "host": "h2", "port": 9093, "rack": None}],
        "topics": [{"error_code": 0, "name": "alpha", "topic_id": TOPIC_IDS["alpha"], "is_internal": True,
                    "partitions": [{"error_code": 9, "partition_index": 3, "leader_id": 1, "leader_epoch": 6,
                                    "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": [2]}]},
                   {"error_code": 3, "name": "béta", "partitions": []}]})
    theirs = decode_metadata_response(payload, version)
    assert theirs.correlation_id == 31
    assert (theirs.throttle_time_ms, theirs.cluster_id, theirs.controller_id) == (
        sent["throttle_time_ms"], sent["cluster_id"], sent["controller_id"])
    assert [tuple(b) for b in theirs.brokers] == [
        (b["node_id"], b["host"], b["port"], b["rack"]) for b in sent["brokers"]]
    for topic, expected in zip(theirs.topics, sent["topics"], strict=True):
        assert (topic.error_code, topic.name, topic.is_internal) == (
            expected["error_code"], expected["name"], expected["is_internal"])
        assert topic.topic_id == (expected.get("topic_id", uuid.UUID(int=0)) if version >= 10 else None)
        assert [tuple(p) for p in topic.partitions] == [
            (p["error_code"], p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"],
             p["isr_nodes"], p["offline_replicas"]) for p in expected["partitions"]]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_compiled_produce_codec_agrees_with_the_schema(version):
    from kafkacodec import MemoryRecordsBuilder
    from kafkacodec.protocol import messages as m

    builder = MemoryRecordsBuilder()
    builder.append(5, b"k", b"v")
    records = builder.build()
    frame = encode_produce_request([("alpha", [(0, records), (4, records)])], api_version=version,
                                   correlation_id=77, client_id="cc", acks=-1, timeout_ms=1500)
    body = _request_body(frame, m.PRODUCE_REQUEST, version)
    assert (body["acks"], body["timeout_ms"], body["transactional_id"]) == (-1, 1500, None)
    assert [(t["name"], [(p["index"], p["records"]) for p in t["partition_data"]]) for t in body["topic_data"]] == [
        ("alpha", [(0, bytes(records)), (4, bytes(records))])]
    payload, sent = _response_frame(m.PRODUCE_RESPONSE, version, {
        "throttle_time_ms": 8, "responses": [{"name": "alpha", "partition_responses": [
            {"index": 4, "error_code": 87, "base_offset": 100, "log_append_time_ms": 7, "log_start_offset": 2,
             "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
             "error_message": "rejected"}]}]})
    theirs = decode_produce_response(payload, version)
    assert theirs.correlation_id == 31 and theirs.throttle_time_ms == sent["throttle_time_ms"]
    (topic,) = theirs.responses
    (part,) = topic.partition_responses
    (expected,) = sent["responses"][0]["partition_responses"]
    assert topic.name == "alpha"
    assert tuple(part) == (expected["index"], expected["error_code"], expected["base_offset"],
                           expected["log_append_time_ms"], expected["log_start_offset"],
                           [(e["batch_index"], e["batch_index_error_message"]) for e in expected["record_errors"]],
                           expected["error_message"])
