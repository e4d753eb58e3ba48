"""The broker side of Produce in C (protocol/_produce_server.pyx) against the generic codec
built from Kafka's message definitions (protocol/_schema.py): the same values from the same
request bytes, the same response bytes from the same values, for every version 0-11, and the
same refusals of damaged requests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kafkacodec import KafkaCodecError
from kafkacodec.errors import CorruptRecordError, RecordTooLargeError, UnsupportedVersionError
from kafkacodec.protocol import messages as m
from kafkacodec.protocol._produce_server import decode_produce_request, encode_produce_response

VERSIONS = st.integers(0, 11)
INT16 = st.integers(-2**15, 2**15 - 1)
INT32 = st.integers(-2**31, 2**31 - 1)
INT64 = st.integers(-2**63, 2**63 - 1)
NAMES = st.text(min_size=0, max_size=12)


def requests(version: int):
    partition = st.fixed_dictionaries({"index": INT32, "records": st.none() | st.binary(max_size=64)})
    topic = st.fixed_dictionaries({"name": NAMES, "partition_data": st.lists(partition, max_size=3)})
    return st.fixed_dictionaries({
        "transactional_id": (st.none() | NAMES) if version >= 3 else st.none(),
        "acks": INT16, "timeout_ms": INT32, "topic_data": st.lists(topic, max_size=3)})


def responses(version: int):
    error = st.fixed_dictionaries({"batch_index": INT32, "batch_index_error_message": st.none() | NAMES})
    leader = st.fixed_dictionaries({"leader_id": INT32, "leader_epoch": INT32})
    partition = st.fixed_dictionaries(
        {"index": INT32, "error_code": INT16, "base_offset": INT64},
        optional={"log_append_time_ms": INT64, "log_start_offset": INT64,
                  "record_errors": st.lists(error, max_size=2), "error_message": st.none() | NAMES,
                  "current_leader": leader})
    topic = st.fixed_dictionaries({"name": NAMES, "partition_responses": st.lists(partition, max_size=3)})
    node = st.fixed_dictionaries({"node_id": INT32, "host": NAMES, "port": INT32, "rack": st.none() | NAMES})
    return st.fixed_dictionaries({"responses": st.lists(topic, max_size=3)},
                                  optional={"throttle_time_ms": INT32, "node_endpoints": st.lists(node, max_size=2)})


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=VERSIONS)
def test_requests_decode_as_the_generic_codec_decodes_them(data, version):
    value = data.draw(requests(version))
    body = bytes(m.PRODUCE_REQUEST.encode(version, value))
    prefix = data.draw(st.binary(max_size=5))
    assert decode_produce_request(prefix + body, version, len(prefix)) == \
        m.PRODUCE_REQUEST.decode(prefix + body, version, len(prefix)) == value


@settings(max_examples=300, deadline=None)
@given(data=st.data(), version=VERSIONS)
def test_responses_encode_as_the_generic_codec_encodes_them(data, version):
    value = data.draw(responses(version))
    assert encode_produce_response(version, value) == bytes(m.PRODUCE_RESPONSE.encode(version, value))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=VERSIONS)
def test_damaged_requests_are_refused_as_the_generic_codec_refuses_them(data, version):
    """Every cut of a request, and bytes flipped in it: both refuse, or both give the same
    values.  A cut is refused no later than the generic codec finds bytes missing (a count
    that the bytes left cannot hold is refused before its entries are read)."""
    body = bytearray(m.PRODUCE_REQUEST.encode(version, data.draw(requests(version))))
    cut = data.draw(st.integers(0, len(body)))
    flips = data.draw(st.lists(st.integers(0, max(0, len(body) - 1)), max_size=3)) if body else []
    for i in flips:
        body[i] ^= data.draw(st.integers(1, 255))
    damaged = bytes(body[:cut])
    try:
        theirs = m.PRODUCE_REQUEST.decode(damaged, version)
    except KafkaCodecError as error:
        with pytest.raises(KafkaCodecError) as ours:
            decode_produce_request(damaged, version)
        assert type(ours.value) is type(error)
        if not flips and isinstance(error, CorruptRecordError):
            assert 0 <= ours.value.position <= error.position
    else:
        assert decode_produce_request(damaged, version) == theirs


def test_extra_bytes_are_refused_only_when_strict_and_versions_outside_0_11_never_read():
    body = bytes(m.PRODUCE_REQUEST.encode(2, {"transactional_id": None, "acks": 1, "timeout_ms": 5,
                                               "topic_data": []}))
    with pytest.raises(CorruptRecordError, match="1 bytes left"):
        decode_produce_request(body + b"x", 2)
    assert decode_produce_request(body + b"x", 2, strict=False)["acks"] == 1
    for version in (-1, 12):
        with pytest.raises(UnsupportedVersionError):
            decode_produce_request(body, version)
        with pytest.raises(UnsupportedVersionError):
            encode_produce_response(version, {"responses": []})


@pytest.mark.parametrize("version", [2, 9])
def test_topics_and_partitions_past_the_allowance_are_refused_before_they_are_built(version):
    """max_entries (serve's max_request_entries): a topic and each of its partitions count."""
    value = {"transactional_id": None, "acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": i, "records": b"r"} for i in range(50)]}]}
    body = bytes(m.PRODUCE_REQUEST.encode(version, value))
    assert decode_produce_request(body, version, max_entries=51) == value
    with pytest.raises(RecordTooLargeError, match="partitions: 50 entries where 49 more are allowed"):
        decode_produce_request(body, version, max_entries=50)
