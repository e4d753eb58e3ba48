"""`kafkacodec serve` with new clients: the startup contract, ApiVersions, Metadata,
ListOffsets, Fetch v4+ straight from the files (sendfile), writes refused, malformed requests.
Each client reads every record of a multi-topic log directory (mixed magics, every codec,
transactions) and must get exactly what the segment files hold (tests/serve_support.py)."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("holds", ["segments", "nothing"])
def test_command_says_what_it_serves_and_warns_of_an_empty_directory(log_dir, tmp_path, holds):
    """At start, one line of what the directories hold; a directory with no segment (a wrong
    path, a parent of the log dir) is warned about, not served silently as an empty broker."""
    root = log_dir if holds == "segments" else tmp_path / "empty"
    root.mkdir(exist_ok=True)
    proc = serve_command(str(root), "--listen", "127.0.0.1:0")
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        served = next(line for line in lines if line.startswith("serving "))
        parts = sorted(p for p in root.iterdir() if p.is_dir() and list(p.glob("*.log")))
        segments = sum(len(list(p.glob("*.log"))) for p in parts)
        topics = {p.name.rsplit("-", 1)[0] for p in parts}
        assert served.startswith(f"serving {len(topics)} topics, {len(parts)} partitions, "
                                 f"{segments} segments ("), served
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        warned = "warning: no Kafka segment in" in proc.stderr.read()
        assert warned == (holds == "nothing") and (len(parts) > 0) == (holds == "segments")
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
            flexible = m.is_flexible(key, version)
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


# --- serve and the log-dir reader agree on lying index files -------------------------------------
AGREE_BASE_TS = 1_700_000_000_000


def agreement_log(root: Path) -> Path:
    """`agree-0`: a rolled segment (offsets 0..239, with the .index and .timeindex a broker
    writes: an entry every ~200 bytes) and the active one (240..299); batches of 1 to 6 records,
    timestamps rising 10 ms an offset except a late record (5 s early) every 37."""
    from kafkacodec.arrow import scan_entries
    from kafkacodec.logdir.indexes import build_indexes

    part = root / "agree-0"
    part.mkdir(parents=True)
    offset = 0
    for base, end in ((0, 240), (240, 300)):
        data = bytearray()
        while offset < end:
            n = min(1 + offset % 6, end - offset)
            b = kafkacodec.MemoryRecordsBuilder(magic=2, base_offset=offset)
            for o in range(offset, offset + n):
                b.append(AGREE_BASE_TS + 10 * o - (5000 if o % 37 == 0 else 0), b"k%d" % o, b"v%d" % o * 3, [])
            data += b.build()
            offset += n
        seg = part / f"{base:020d}.log"
        seg.write_bytes(bytes(data))
        index, times = build_indexes(scan_entries(bytes(data)), base, interval=200, rolled=base == 0)
        seg.with_suffix(".index").write_bytes(index)
        seg.with_suffix(".timeindex").write_bytes(times)
    return root


def lie_in_index(segment: Path, lie: str) -> None:
    """Rewrite the segment's .index with one lie in a middle entry (or its order)."""
    from kafkacodec.arrow import scan_entries

    entries = [list(e) for e in struct.iter_unpack(">ii", segment.with_suffix(".index").read_bytes())]
    boundaries = [int(p) for p in scan_entries(segment.read_bytes())["position"]]
    k = next(i for i in range(len(entries) // 2, len(entries) - 1)         # a batch lies between k and k+1
             if any(entries[i][1] < p < entries[i + 1][1] for p in boundaries))
    if lie == "wrong-position":          # another batch boundary: a later batch
        entries[k][1] = next(p for p in boundaries if entries[k][1] < p < entries[k + 1][1])
    elif lie == "inside-a-batch":
        entries[k][1] += 9
    elif lie == "offset-too-small":      # says the batch there holds offsets it does not
        entries[k][0] = entries[k - 1][0] + 1
    elif lie == "offset-too-large":      # says earlier batches hold offsets they do not
        entries[k][0] = entries[k + 1][0] - 1
    elif lie == "non-monotonic":
        entries[k][0], entries[k + 1][0] = entries[k + 1][0], entries[k][0]
    elif lie == "past-the-file":
        entries[-1][1] = segment.stat().st_size + 100
    segment.with_suffix(".index").write_bytes(b"".join(struct.pack(">ii", *e) for e in entries))


def logdir_rows(root: Path, starting: int | None = None) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record the log-dir reader (plan + read_split) reads."""
    from kafkacodec.logdir import plan, read_split

    options = {"startingOffsets": f'{{"agree": {{"0": {starting}}}}}'} if starting is not None else {}
    splits, _ = plan(str(root), options, on_problem=lambda p: None)
    out = []
    for split in splits:
        for rb in read_split(split, columns=["offset", "key", "value"], on_problem=lambda p: None):
            out += zip(rb.column("offset").to_pylist(), rb.column("key").to_pylist(), rb.column("value").to_pylist())
    return out


@pytest.mark.parametrize("lie", ["wrong-position", "inside-a-batch", "offset-too-small", "offset-too-large",
                                 "non-monotonic", "past-the-file"])
def test_serve_fetches_what_the_logdir_reader_reads_despite_a_lying_index(tmp_path, lie):
    root = agreement_log(tmp_path / "logs")
    truth = logdir_rows(root)                                        # with the true indexes
    assert [o for o, _, _ in truth] == list(range(300))
    lie_in_index(root / "agree-0" / f"{0:020d}.log", lie)
    assert logdir_rows(root) == truth
    for start in range(0, 300, 23):                                  # the reader seeks through the index
        assert logdir_rows(root, start) == truth[start:], start
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv, \
            BlockingClient("127.0.0.1", srv.port, timeout=30) as client:
        for offset in range(300):                                    # a Fetch at every offset
            part = client.fetch([("agree", [(0, offset, 1 << 20)])], api_version=11,
                                max_wait_ms=0).responses[0].partitions[0]
            assert part.error_code == 0, (offset, part.error_code)
            got = [(r.offset, r.key, r.value) for r in kafkacodec.MemoryRecords(bytes(part.records)).records()
                   if r.offset >= offset]
            assert got and got == truth[offset:offset + len(got)], offset


def lie_in_time_index(segment: Path, lie: str) -> None:
    """Rewrite the segment's .timeindex with one lie that its own checks (order) cannot see."""
    entries = [list(e) for e in struct.iter_unpack(">qi", segment.with_suffix(".timeindex").read_bytes())]
    k = len(entries) // 2
    if lie == "offset-too-large":        # a middle entry names the next entry's offset
        entries[k][1] = entries[k + 1][1]
    elif lie == "timestamp-too-small":   # a middle entry claims less than the largest so far
        entries[k][0] = entries[k - 1][0] + 1
    elif lie == "largest-too-small":     # the rolled segment's largest timestamp, understated
        entries[-1][0] = entries[-2][0] + 1
    segment.with_suffix(".timeindex").write_bytes(b"".join(struct.pack(">qi", *e) for e in entries))


def serve_offset_for_time(port: int, timestamp: int) -> int:
    body = m.LIST_OFFSETS_REQUEST.encode(1, {"replica_id": -1, "topics": [
        {"name": "agree", "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
    answer = raw_request(port, ApiKey.LIST_OFFSETS, 1, bytes(body))
    assert answer is not None
    part = m.LIST_OFFSETS_RESPONSE.decode(answer, 1, 4)["topics"][0]["partitions"][0]
    assert part["error_code"] == 0
    return part["offset"]


def logdir_offset_for_time(root: Path, timestamp: int) -> int:
    from kafkacodec.logdir import plan

    splits, _ = plan(str(root), {"startingTimestamp": str(timestamp), "startingOffsetsByTimestampStrategy": "latest"},
                     on_problem=lambda p: None)
    return min((s.start_offset for s in splits), default=-1)


@pytest.mark.parametrize("index", ["valid", "wrong-position", "non-monotonic"])
@pytest.mark.parametrize("lie", ["offset-too-large", "timestamp-too-small", "largest-too-small"])
def test_list_offsets_by_time_agrees_with_the_logdir_reader_despite_a_lying_timeindex(tmp_path, lie, index):
    root = agreement_log(tmp_path / "logs")
    segment = root / "agree-0" / f"{0:020d}.log"
    stamps = [(r.timestamp, r.offset) for seg in sorted((root / "agree-0").glob("*.log"))
              for r in kafkacodec.FileRecords.open(seg).records()]
    indexed = [t for t, _ in struct.iter_unpack(">qi", segment.with_suffix(".timeindex").read_bytes())]
    targets = sorted({t + d for t in indexed for d in (-15, -5, 0, 5)} | set(range(AGREE_BASE_TS - 6000, AGREE_BASE_TS
                                                                                 + 3100, 70)))
    lie_in_time_index(segment, lie)
    if index != "valid":
        lie_in_index(segment, index)
    if os.environ.get("KAFKACODEC_SANITIZED") == "1":   # every 5th under ASan: the same C paths,
        targets = targets[::5]                          # a fifth of the Python time
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
        for target in targets:
            want = min((o for t, o in stamps if t >= target), default=-1)       # Kafka's rule, by brute force
            want_logdir = want if want >= 0 else 300                           # the reader starts at the end
            assert (serve_offset_for_time(srv.port, target), logdir_offset_for_time(root, target)) == \
                (want, want_logdir), target


# --- a partition directory whose name is not UTF-8 -----------------------------------------------
def odd_named_log(root: Path) -> bytes:
    """`root` with `plain-0` and a partition directory named b"caf\\xe9-0" (Latin-1, not UTF-8)
    holding a valid segment; returns the odd name."""
    part = root / "plain-0"
    part.mkdir(parents=True)
    b = kafkacodec.MemoryRecordsBuilder(magic=2, base_offset=0)
    for i in range(3):
        b.append(AGREE_BASE_TS + i, b"k%d" % i, b"v%d" % i, [])
    (part / f"{0:020d}.log").write_bytes(b.build())
    odd = b"caf\xe9-0"
    os.mkdir(os.path.join(os.fsencode(root), odd))
    with open(os.path.join(os.fsencode(root), odd, b"%020d.log" % 0), "wb") as file:
        file.write(b.build())
    return odd


def test_a_partition_directory_named_in_another_encoding_is_skipped_with_a_warning(tmp_path, caplog):
    root = tmp_path / "logs"
    odd_named_log(root)
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv, \
            BlockingClient("127.0.0.1", srv.port, timeout=30) as client:
        assert sorted(t.name for t in client.metadata(None).topics) == ["plain"]
        part = client.fetch([("plain", [(0, 0, 1 << 20)])], api_version=11, max_wait_ms=0).responses[0].partitions[0]
        assert [r.offset for r in kafkacodec.MemoryRecords(bytes(part.records)).records()] == [0, 1, 2]
    warned = [r.getMessage() for r in caplog.records if "caf" in r.getMessage()]
    assert warned and "caf\\xe9-0" in warned[0] and "not UTF-8" in warned[0]


def test_a_state_file_named_in_another_encoding_is_skipped_with_a_warning(tmp_path, caplog):
    from kafkacodec.serve.offsets import OffsetStore

    groups = tmp_path / "groups"
    groups.mkdir()
    stored = {"format": 1, "group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": 5}]}
    (groups / "g.json").write_text(json.dumps(stored))
    with open(os.path.join(os.fsencode(groups), b"\xff.json"), "w") as file:
        json.dump(dict(stored, group="odd"), file)
    store = OffsetStore(str(tmp_path))
    assert sorted(store.groups) == ["g"] and store.get("g")[("t", 0)].offset == 5
    assert any("\\xff.json" in r.getMessage() and "not UTF-8" in r.getMessage() for r in caplog.records)


# --- read_committed: serve and the log-dir reader take a partition's transactions by one rule ----
TXN_SCRIPT = [        # per segment: plain batches, transactional data of a producer, its COMMIT/ABORT marker
    [("plain",), ("txn", 7), ("plain",), ("txn", 7), ("abort", 7), ("txn", 8), ("plain",)],
    [("txn", 8), ("txn", 9), ("abort", 8), ("plain",), ("txn", 9), ("commit", 9)],
    [("plain",), ("txn", 10), ("plain",), ("plain",)],
    [("txn", 10), ("abort", 10), ("plain",), ("txn", 11), ("plain",)],
]


def txn_log(root: Path) -> Path:
    """`txn-0`: four segments as a broker writes them (.index, .timeindex, a .txnindex where
    aborts end, the producer .snapshot at each roll): aborts ending in the first, second (begun
    in the first) and last segment, a committed transaction, one left open at the end."""
    from test_logdir import add_indexes

    part = root / "txn-0"
    part.mkdir(parents=True)
    offset = 0
    for segment in TXN_SCRIPT:
        data = bytearray()
        base = offset
        for step in segment:
            if step[0] in ("commit", "abort"):
                data += kafkacodec.MemoryRecordsBuilder.build_end_txn_marker(
                    step[0] == "commit", step[1], 0, coordinator_epoch=0, base_offset=offset,
                    timestamp=AGREE_BASE_TS + offset)
                offset += 1
                continue
            pid = step[1] if step[0] == "txn" else -1
            b = kafkacodec.MemoryRecordsBuilder(magic=2, base_offset=offset, producer_id=pid,
                                                producer_epoch=0 if pid >= 0 else -1,
                                                base_sequence=offset if pid >= 0 else -1, is_transactional=pid >= 0)
            for o in range(offset, offset + 3):
                b.append(AGREE_BASE_TS + o, b"k%d" % o, b"%s %d" % (step[0].encode(), o), [])
            data += b.build()
            offset += 3
        (part / f"{base:020d}.log").write_bytes(bytes(data))
    add_indexes(root, interval=64)
    return root


def lie_in_txn_index(part: Path, lie: str) -> None:
    segments = sorted(part.glob("*.log"))
    entries = [list(e) for e in struct.iter_unpack(">hqqqq", segments[0].with_suffix(".txnindex").read_bytes())]
    if lie == "removed":                      # the abort begun in the first segment, ended in the second
        segments[1].with_suffix(".txnindex").unlink()
    elif lie == "marker-past-the-segment":    # an entry of the first segment ending in the second
        entries[0][3] = int(segments[1].stem) + 2
        segments[0].with_suffix(".txnindex").write_bytes(b"".join(struct.pack(">hqqqq", *e) for e in entries))
    elif lie == "active-segment-emptied":     # the active segment's file lost its entry
        segments[-1].with_suffix(".txnindex").write_bytes(b"")
    elif lie == "committed-called-aborted":   # producer 9's committed transaction listed as aborted
        scan = [(int(b.base_offset), b.producer_id, b.is_control) for b in kafkacodec.FileRecords.open(
            segments[1]).batches()]
        first = min(o for o, pid, control in scan if pid == 9)
        marker = max(o for o, pid, control in scan if pid == 9 and control)
        with open(segments[1].with_suffix(".txnindex"), "ab") as file:
            file.write(struct.pack(">hqqqq", 0, 9, first, marker, marker + 1))


@pytest.mark.parametrize("lie", ["none", "removed", "marker-past-the-segment", "active-segment-emptied",
                                 "committed-called-aborted"])
def test_read_committed_agrees_with_the_logdir_reader_despite_lying_txn_files(tmp_path, lie):
    root = txn_log(tmp_path / "logs")
    records = partition_records(root, "txn", 0, committed=True)
    every = partition_records(root, "txn", 0)
    last_marker = max(set(range(every[-1][0])) - {r[0] for r in every})
    lso = min(o for o, _, v, _ in every if v.startswith(b"txn") and o > last_marker)   # producer 11's, open
    truth = [r[:3] for r in records if r[0] < lso]
    assert {v.split()[0] for _, _, v in truth} == {b"plain", b"txn"} and len(truth) < len(records)
    lie_in_txn_index(root / "txn-0", lie)
    from kafkacodec.logdir import plan, read_split

    splits, _ = plan(str(root), {"kafka.isolation.level": "read_committed", "failOnDataLoss": "false"},
                     on_problem=lambda p: None)
    logdir = [(o, k, v) for s in splits for rb in read_split(s, columns=["offset", "key", "value"],
                                                              on_problem=lambda p: None)
              for o, k, v in zip(*(rb.column(c).to_pylist() for c in ("offset", "key", "value")))]
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
        served = confluent_read(f"127.0.0.1:{srv.port}", {("txn", 0): truth}, timeout=10,
                                **{"isolation.level": "read_committed"}).get(("txn", 0), [])
    assert (served, logdir) == (truth, truth)


def test_a_remote_read_that_never_answers_fails_its_waiters_at_the_read_timeout():
    """serve/remote.py: a store that holds a read open and sends nothing (the read blocks on its
    worker) fails the requests waiting for it after `read_timeout`: they run again and get the
    storage error, while the worker is still stuck; later lookups fail the same way until
    retry_after, then ask for the read again."""
    import threading

    from kafkacodec.logdir.deferred import RemoteReadError
    from kafkacodec.logdir.storage import Storage
    from kafkacodec.net.loop import Loop
    from kafkacodec.serve.remote import ReadPending, RemoteReads

    stuck = threading.Event()

    class Hung(ReadPending):
        def read(self) -> None:
            stuck.wait(30)

    loop = Loop()
    remote = RemoteReads(loop, read_timeout=0.3)
    remote.cache.retry_after = 0.5
    store = Storage("s3", "s3://bucket")
    outcomes: list[object] = []

    def step() -> None:
        try:
            outcomes.append(remote.cache.size(store, "bucket/00000000000000000000.log"))
        except ReadPending as pending:
            remote.defer(Hung(pending.reads, pending.key, str(pending)), step)
        except OSError as exc:
            outcomes.append(exc)

    try:
        began = time.monotonic()
        step()
        assert outcomes == [] and remote.pending == 1
        assert loop.run_until(lambda: bool(outcomes), 10)
        assert isinstance(outcomes[0], RemoteReadError) and "no answer from the store" in str(outcomes[0])
        assert 0.3 <= time.monotonic() - began < 5 and remote.pending == 0 and not stuck.is_set()
        with pytest.raises(RemoteReadError):
            remote.cache.size(store, "bucket/00000000000000000000.log")
        time.sleep(0.6)                          # past retry_after: the read is asked for again
        with pytest.raises(ReadPending):
            remote.cache.size(store, "bucket/00000000000000000000.log")
    finally:
        stuck.set()
        remote.close()
        loop.close()
