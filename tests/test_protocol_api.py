"""kafkacodec.protocol.api (ApiKey, Error: the one table of each) checked against Kafka's own
enums: a small Java program run at test time lists Kafka 4.1's `ApiKeys` and `Errors` from the
kafka-clients jar on Maven Central (with each error's exception class: a RetriableException, an
InvalidMetadataException), resolved with `mvn` as tests/kafka_broker.py does.  Skipped, saying
why, without Java or Maven.  Plus the enums' own rules, and the compiled codecs' api keys (a
C enum in protocol/_wire.pxd) checked against ApiKey through the frames they write."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import pytest

from kafkacodec.protocol.api import ApiKey, Error

KAFKA = "4.1.1"

_LISTER = """
import org.apache.kafka.common.errors.InvalidMetadataException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;

public class ListEnums {
    public static void main(String[] args) {
        for (ApiKeys key : ApiKeys.values())
            System.out.println("key " + key.id + " " + key.name() + " " + key.name);
        for (Errors error : Errors.values()) {
            Object e = error.exception();
            System.out.println("error " + error.code() + " " + error.name() + " "
                + (e instanceof RetriableException) + " " + (e instanceof InvalidMetadataException));
        }
    }
}
"""


@pytest.fixture(scope="module")
def kafka_enums(tmp_path_factory) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, bool, bool]]]:
    from kafka_broker import BrokerUnavailable, classpath

    if shutil.which("java") is None:
        pytest.skip("java is not on PATH: Kafka's enums are listed by a Java program")
    try:
        jars = classpath(KAFKA).split(os.pathsep)
    except BrokerUnavailable as exc:
        pytest.skip(f"Kafka {KAFKA}'s jars could not be resolved: {str(exc)[:300]}")
    needed = [j for j in jars if os.path.basename(j).startswith(("kafka-clients-", "slf4j-api-"))]
    source = tmp_path_factory.mktemp("enums") / "ListEnums.java"
    source.write_text(_LISTER)
    run = subprocess.run(["java", "-cp", os.pathsep.join(needed), str(source)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    keys, errors = [], []
    for line in run.stdout.splitlines():
        kind, number, *rest = line.split()
        if kind == "key":
            keys.append((int(number), rest[0], rest[1]))
        elif kind == "error":
            errors.append((int(number), rest[0], rest[1] == "true", rest[2] == "true"))
    assert len(keys) > 80 and len(errors) > 120
    return keys, errors


def test_api_keys_are_kafkas(kafka_enums):
    keys, _ = kafka_enums
    assert [(k.value, k.name, k.message_name) for k in ApiKey] == keys


def test_errors_are_kafkas_with_their_retry_rules(kafka_enums):
    _, errors = kafka_enums
    assert [(e.value, e.name, e.retriable, e.invalid_metadata) for e in Error] == errors


def test_error_rules():
    assert Error.NOT_LEADER_OR_FOLLOWER == 6 and Error(6) is Error.NOT_LEADER_OR_FOLLOWER
    assert Error.NOT_LEADER_OR_FOLLOWER.retriable and Error.NOT_LEADER_OR_FOLLOWER.invalid_metadata
    assert Error.COORDINATOR_NOT_AVAILABLE.retriable and not Error.COORDINATOR_NOT_AVAILABLE.invalid_metadata
    assert not Error.OFFSET_OUT_OF_RANGE.retriable and not Error.NONE.retriable
    assert all(e.retriable for e in Error if e.invalid_metadata)   # InvalidMetadata is Retriable
    assert Error.name_of(6) == "NOT_LEADER_OR_FOLLOWER" and Error.name_of(-1) == "UNKNOWN_SERVER_ERROR"
    assert Error.name_of(32000) == "unknown error code 32000"
    assert Error.for_code(32000) is Error.UNKNOWN_SERVER_ERROR and not Error.for_code(32000).retriable
    assert ApiKey.API_VERSIONS.message_name == "ApiVersions" and ApiKey(36) is ApiKey.SASL_AUTHENTICATE
    assert struct.pack(">h", Error.UNSUPPORTED_VERSION) == b"\x00\x23"           # a plain int16


def test_compiled_codecs_write_the_api_keys_of_ApiKey():
    """The Cython encoders keep a C enum of the api keys they write (protocol/_wire.pxd): each
    writes ApiKey's number into its request header (bytes 4-6 of the frame)."""
    from kafkacodec import MemoryRecordsBuilder
    from kafkacodec.protocol import (encode_api_versions_request, encode_fetch_request,
                                     encode_metadata_request, encode_produce_request)

    builder = MemoryRecordsBuilder()
    builder.append(0, b"k", b"v")
    records = builder.build()
    frames = {
        ApiKey.FETCH: encode_fetch_request([("t", [(0, 0, 1 << 20)])], api_version=12,
                                           correlation_id=1),
        ApiKey.PRODUCE: encode_produce_request([("t", [(0, records)])], api_version=9,
                                               correlation_id=1),
        ApiKey.METADATA: encode_metadata_request(["t"], api_version=12, correlation_id=1),
        ApiKey.API_VERSIONS: encode_api_versions_request(api_version=3, correlation_id=1),
    }
    for key, frame in frames.items():
        assert struct.unpack_from(">h", frame, 4)[0] == key, key.name


@pytest.mark.parametrize("version", range(4, 17))
def test_the_compiled_fetch_codecs_and_messages_agree_on_fetchs_flexible_versions(version):
    """Fetch has no schema: its first flexible version is a C constant in _wire.pxd and an
    entry of messages.FLEXIBLE.  A request the client codec frames has its header read by
    messages.parse_request_header (header v2 from FLEXIBLE[FETCH]) and its body by the server
    codec from there, strictly: a disagreement leaves a byte over or runs short."""
    from kafkacodec.protocol import encode_fetch_request, messages
    from kafkacodec.protocol._fetch_server import decode_fetch_request

    import uuid

    topic = "t" if version < 13 else uuid.UUID(int=7)                   # v13+: topic ids
    frame = encode_fetch_request([(topic, [(0, 5, 1 << 20)])], api_version=version, correlation_id=9)
    payload = memoryview(frame)[4:]
    key, got, cid, _, start = messages.parse_request_header(payload)
    assert (key, got, cid) == (ApiKey.FETCH, version, 9)
    request = decode_fetch_request(payload, version, start, strict=True)
    assert request.topics[0][2][0].fetch_offset == 5
