"""`kafkacodec serve` with new clients: the startup contract, ApiVersions, Metadata,
ListOffsets, Fetch v4+ straight from the files (sendfile), writes refused, malformed requests.
Each client reads every record of a multi-topic log directory (mixed magics, every codec,
transactions) and must get exactly what the segment files hold (tests/serve_support.py)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from isolated import child_env

import kafkacodec
from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import ApiKey
from blocking_client import BlockingClient
from kafkacodec.serve import Server
from kafkacodec.net.pieces import FilePiece

from serve_support import (TOPICS, aiokafka_read, confluent_read, expected, kafka_python_read, make_log_dir,
                           partition_records)

pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("serve") / "logs")


@pytest.fixture(scope="module")
def server(log_dir):
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as running:
        yield running


@pytest.fixture
def bootstrap(server) -> str:
    return f"127.0.0.1:{server.port}"


def raw_request(port: int, api_key: int, version: int, body: bytes, correlation_id: int = 7,
                flexible: bool = False) -> bytes | None:
    """One request on a fresh connection; the response after its size, or None when the server
    closed the connection instead."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    if flexible:
        header += b"\0"
    frame = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        return read_frame(sock)


def read_frame(sock: socket.socket) -> bytes | None:
    try:
        return _read_frame(sock)
    except ConnectionResetError:               # closed with our bytes unread
        return None


def _read_frame(sock: socket.socket) -> bytes | None:
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    size = struct.unpack(">i", data)[0]
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


# --- startup contract (the command) -----------------------------------------------------------
def serve_command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kafkacodec.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_command_prints_its_address_first_and_stops_cleanly(log_dir, signum):
    proc = serve_command(str(log_dir), "--listen", "127.0.0.1:0")
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        port = int(line.strip().rsplit(":", 1)[1])
        assert port > 0
        with BlockingClient("127.0.0.1", port) as client:       # it answers at once
            assert client.api_versions(3).error_code == 0
        proc.send_signal(signum)
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_command_refuses_a_missing_directory(tmp_path):
    proc = serve_command(str(tmp_path / "nope"), "--listen", "127.0.0.1:0")
    assert proc.wait(30) == 3
    assert "not a directory" in proc.stderr.read()


def test_command_refuses_request_memory_below_the_request_size():
    proc = serve_command(".", "--max-request-memory", "1MiB", "--socket-request-max-bytes", "2MiB")
    assert proc.wait(30) == 2
    assert "max_request_memory" in proc.stderr.read()


# --- ApiVersions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_every_version(server, version):
    from kafka.protocol.metadata import ApiVersionsResponse

    body = m.API_VERSIONS_REQUEST.encode(version, {"client_software_name": "t", "client_software_version": "1"})
    answer = raw_request(server.port, ApiKey.API_VERSIONS, version, bytes(body), flexible=version >= 3)
    assert answer is not None and struct.unpack(">i", answer[:4])[0] == 7
    decoded = ApiVersionsResponse.decode(answer[4:], version=version).to_dict(json=False)   # header v0
    assert decoded["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in decoded["api_keys"]}
    assert ranges[ApiKey.FETCH] == (0, 17) and ranges[ApiKey.METADATA] == (0, 12) and ranges[ApiKey.API_VERSIONS] == (0, 4)


def test_api_versions_newer_than_served_gets_the_v0_fallback(server):
    answer = raw_request(server.port, ApiKey.API_VERSIONS, 9, b"\x00\x00\x00")
    assert answer is not None
    decoded = m.API_VERSIONS_RESPONSE.decode(answer, 0, 4)
    assert decoded["error_code"] == 35                   # UNSUPPORTED_VERSION, the v0 layout
    assert {k["api_key"] for k in decoded["api_keys"]} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18}


# --- malformed requests: the connection closes, the server goes on -------------------------------
@pytest.mark.parametrize("frame", [
    struct.pack(">i", -5),                                   # negative size
    struct.pack(">i", 0),                                    # empty request
    struct.pack(">i", 200 << 20) + b"x" * 10,                # above socket.request.max.bytes
    struct.pack(">i", 6) + b"\x00\x03\x00\x01\x00\x00",      # truncated header
    struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),          # unknown api key
    struct.pack(">i", 10) + struct.pack(">hhih", ApiKey.METADATA, 99, 1, -1),  # unsupported version
    struct.pack(">i", 14) + struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + struct.pack(">i", 2**30),
    struct.pack(">i", 11) + struct.pack(">hhih", ApiKey.FETCH, 4, 1, -1) + b"\x01",  # truncated body
], ids=["negative", "empty", "too-large", "short-header", "unknown-api", "bad-version", "huge-array",
        "short-fetch"])
def test_malformed_requests_close_the_connection(server, frame):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(frame)
        assert read_frame(sock) is None                       # closed, no answer
    with BlockingClient("127.0.0.1", server.port) as client:  # the server still serves
        assert client.metadata(["modern"]).topics[0].error_code == 0


def test_client_gone_in_the_middle_of_a_request(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
    deadline = time.monotonic() + 10
    while server.request_pool.available_memory != server.request_pool.size and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.request_pool.available_memory == server.request_pool.size


# --- Metadata -------------------------------------------------------------------------------------
def test_metadata_lists_every_topic_with_this_server_as_leader(server, bootstrap, log_dir):
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert {t: len(md.partitions) for t, md in listed.topics.items()} == TOPICS
    assert [(b.host, b.port) for b in listed.brokers.values()] == [("127.0.0.1", server.port)]
    with BlockingClient("127.0.0.1", server.port) as client:
        answer = client.metadata(["modern", "nope"], api_version=12)
        modern, nope = answer.topics
        # the id written in modern-0/partition.metadata; the others' ids derive from their names
        assert modern.topic_id.bytes == bytes(range(16))
        assert nope.error_code == 3                            # UNKNOWN_TOPIC_OR_PARTITION
        again = client.metadata(None, api_version=12)
        ids = {t.name: t.topic_id for t in again.topics}
        assert ids["mixed"] != ids["legacy"] and ids["mixed"] is not None


# --- ListOffsets ------------------------------------------------------------------------------------
def test_list_offsets_earliest_latest_and_by_time(bootstrap, log_dir):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    try:
        for topic, partition in [(t, p) for t, n in TOPICS.items() for p in range(n)]:
            rows = partition_records(log_dir, topic, partition)
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            assert low == 0
            # the high watermark is past the last entry (markers included)
            with kafkacodec.FileRecords.open(sorted((log_dir / f"{topic}-{partition}").glob("*.log"))[-1]) as r:
                assert high == list(r.batches())[-1].next_offset
            # by time: the first record at or after each timestamp (v0 messages have none)
            for ts in sorted({r[3] for r in rows if r[3] >= 0})[::7]:
                want = min(r[1] for r in [(r[3], r[0]) for r in rows] if r[0] >= ts)
                found = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=10)[0]
                assert found.offset == want, (topic, partition, ts)
            later = consumer.offsets_for_times([TopicPartition(topic, partition, 2**62)], timeout=10)[0]
            assert later.offset == -1          # none that late: the latest (librdkafka's end mark)
    finally:
        consumer.close()


# --- Fetch v4+: every client, exact, from the files -----------------------------------------------
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_confluent_kafka_reads_every_record_by_assign(bootstrap, log_dir, isolation):
    want = expected(log_dir, committed=isolation == "read_committed")
    assert confluent_read(bootstrap, want, **{"isolation.level": isolation}) == want


def test_kafka_python_negotiated_reads_every_record(bootstrap, log_dir):
    want = expected(log_dir)
    assert kafka_python_read(bootstrap, want) == want


def test_aiokafka_reads_every_record(bootstrap, log_dir):
    # aiokafka takes the magic of a response's first entry for every entry, so it misreads a
    # partition whose stored messages change magic (from any broker: Kafka sends the same bytes
    # for Fetch v4+).  It reads the partitions of one magic here; mixed ones with Fetch v3
    # (down-converted to magic 1) in test_serve_old_clients.py.
    topics = {"v1only": 1, "modern": 1}
    want = expected(log_dir, topics)
    assert aiokafka_read(bootstrap, want) == want


def test_fetch_v4_sends_the_stored_bytes_with_sendfile(log_dir, monkeypatch):
    sent = []
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        n = real(out_fd, in_fd, offset, count)
        sent.append(n)
        return n

    monkeypatch.setattr(os, "sendfile", counting)
    want = expected(log_dir, {"modern": 1})
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        assert confluent_read(f"127.0.0.1:{srv.port}", want) == want
    assert sum(sent) >= (log_dir / "modern-0" / "00000000000000000000.log").stat().st_size


def test_without_sendfile_the_file_is_read_and_sent(log_dir, monkeypatch):
    monkeypatch.setattr(FilePiece, "use_sendfile", False)
    want = expected(log_dir)
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        assert confluent_read(f"127.0.0.1:{srv.port}", want, **{"isolation.level": "read_uncommitted"}) == want


def test_fetch_responses_decode_with_our_client(server, log_dir):
    """Fetch v4..v16 through the project's own client: each version's response frames parse
    and the records are the segment's bytes."""
    segment = (log_dir / "modern-0" / "00000000000000000000.log").read_bytes()
    with BlockingClient("127.0.0.1", server.port) as client:
        topic_id = client.metadata(["modern"]).topics[0].topic_id
        for version in range(4, 17):
            topic = topic_id if version >= 13 else "modern"
            answer = client.fetch([(topic, [(0, 0, 1 << 20)])], api_version=version, max_wait_ms=0)
            part = answer.responses[0].partitions[0]
            assert part.error_code == 0 and part.high_watermark == 1600
            assert bytes(part.records) == segment[:len(part.records)] and len(part.records) > 0


# --- writes are refused ------------------------------------------------------------------------
def test_produce_is_refused_with_policy_violation(bootstrap):
    from kafka import KafkaProducer
    from kafka.errors import PolicyViolationError

    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_block_ms=10000)
    try:
        future = producer.send("modern", b"value")
        with pytest.raises(PolicyViolationError):
            future.get(timeout=20)
    finally:
        producer.close(timeout=5)


def test_confluent_producer_gets_a_clear_error(bootstrap):
    from confluent_kafka import KafkaError, Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0,
                         "message.timeout.ms": 20000})
    producer.produce("modern", b"value", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0].code() == KafkaError.POLICY_VIOLATION


def test_produce_with_acks_0_gets_no_answer_and_no_hang(server):
    body = m.PRODUCE_REQUEST.encode(3, {"transactional_id": None, "acks": 0, "timeout_ms": 1000,
                                       "topic_data": [{"name": "modern", "partition_data": [
                                           {"index": 0, "records": b""}]}]})
    meta = m.METADATA_REQUEST.encode(1, {"topics": [{"name": "modern"}]})
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        for key, version, data, cid in [(ApiKey.PRODUCE, 3, body, 1), (ApiKey.METADATA, 1, meta, 2)]:
            header = struct.pack(">hhih", key, version, cid, -1)
            sock.sendall(struct.pack(">i", len(header) + len(data)) + header + bytes(data))
        answer = read_frame(sock)
    assert answer is not None and struct.unpack(">i", answer[:4])[0] == 2   # only the Metadata


def test_admin_writes_are_refused(bootstrap):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic("new-topic", 1, 1)])["new-topic"]
    with pytest.raises(Exception) as failure:
        future.result(20)
    assert failure.value.args[0].code() == KafkaError.POLICY_VIOLATION
    future = admin.delete_topics(["modern"])["modern"]
    with pytest.raises(Exception) as failure:
        future.result(20)
    assert failure.value.args[0].code() == KafkaError.POLICY_VIOLATION


def test_garbage_bodies_of_every_api_and_version_never_break_the_server(server):
    """Random bodies and truncations of valid ones behind valid headers: each is answered or
    its connection closed; the server goes on and every request buffer comes back."""
    import random

    from kafkacodec.serve.dispatch import API_RANGES

    rng = random.Random(16)
    for key, (lo, hi) in sorted(API_RANGES.items()):
        for version in range(lo, hi + 1):
            flexible = version >= m.FLEXIBLE[key]
            bodies = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 48))) for _ in range(2)]
            if key != ApiKey.FETCH:
                valid = bytes(m.REQUESTS[key].encode(version, {}))
                bodies.append(valid[:rng.randint(0, max(0, len(valid) - 1))])
            for body in bodies:
                header = struct.pack(">hhih", key, version, 5, -1) + (b"\0" if flexible else b"")
                with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
                    sock.shutdown(socket.SHUT_WR)
                    answer = read_frame(sock)
                    assert answer is None or struct.unpack(">i", answer[:4])[0] == 5
    with BlockingClient("127.0.0.1", server.port) as client:
        assert client.metadata(["modern"]).topics[0].error_code == 0
    deadline = time.monotonic() + 10
    while server.request_pool.available_memory != server.request_pool.size and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.request_pool.available_memory == server.request_pool.size
    assert server.loop.thread.is_alive()
