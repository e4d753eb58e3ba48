"""Live log directories (appends, new segments, new partitions, retention, truncation), the long
poll, index files, KIP-72 request memory, clients that go away, stopping, and the metrics."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from kafkacodec import MemoryRecordsBuilder
from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import ApiKey
from blocking_client import BlockingClient
from kafkacodec.serve import Server
from kafkacodec.net.pieces import FilePiece

from serve_support import Appender, confluent_read, expected, kafka_python_read, make_log_dir

pytest.importorskip("confluent_kafka")


def v2(offset: int, count: int, value: bytes = b"x" * 50, codec: str = "none") -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=offset)
    for i in range(count):
        b.append(1_700_000_000_000 + offset + i, b"k%d" % (offset + i), value, [])
    return b.build()


def partition_dir(root: Path, topic: str, batches: list[bytes], base: int = 0) -> Path:
    directory = root / f"{topic}-0"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(b"".join(batches))
    return directory


def fetch(port: int, topic: str, offset: int, version: int = 11, **kwargs):
    with BlockingClient("127.0.0.1", port, timeout=60) as client:
        return client.fetch([(topic, [(0, offset, 1 << 20)])], api_version=version, **kwargs
                            ).responses[0].partitions[0]


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# --- live directories ---------------------------------------------------------------------------
def test_a_consumer_at_the_end_gets_appends_as_they_land(tmp_path):
    directory = partition_dir(tmp_path, "live", [v2(0, 5)])
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        appender = Appender(directory / "00000000000000000000.log", 5, batches=10, interval=0.1)
        want = {("live", 0): [(i, b"k%d" % i, b"x" * 50) for i in range(5)]}
        want[("live", 0)] += [(5 + i, b"live-%d" % (5 + i), b"appended %d" % (5 + i)) for i in range(30)]
        appender.start()
        got = confluent_read(f"127.0.0.1:{srv.port}", want, **{"fetch.wait.max.ms": 5000})
        appender.join()
    assert got == want


def test_a_waiting_fetch_is_answered_with_the_data_that_lands(tmp_path):
    directory = partition_dir(tmp_path, "wait", [v2(0, 3)])
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(
            fetch(srv.port, "wait", 3, max_wait_ms=30000, min_bytes=1)))
        waiter.start()
        wait_for(lambda: len(srv.fetches.parked) == 1)          # it waits for data
        with open(directory / "00000000000000000000.log", "ab") as file:
            file.write(v2(3, 2))
        waiter.join(30)
        part = answers[0]
        assert part.high_watermark == 5 and bytes(part.records) == v2(3, 2)
        # nothing lands: the answer comes empty after max_wait
        part = fetch(srv.port, "wait", 5, max_wait_ms=100, min_bytes=1)
        assert part.error_code == 0 and bytes(part.records) == b""


def test_min_bytes_waits_for_enough_data(tmp_path):
    directory = partition_dir(tmp_path, "minb", [v2(0, 1)])
    one = len(v2(1, 1))
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(
            fetch(srv.port, "minb", 1, max_wait_ms=30000, min_bytes=2 * one + 1)))
        waiter.start()
        wait_for(lambda: len(srv.fetches.parked) == 1)
        for offset in (1, 2):
            with open(directory / "00000000000000000000.log", "ab") as file:
                file.write(v2(offset, 1))
            time.sleep(0.1)
            assert not answers                                   # still below min_bytes
        with open(directory / "00000000000000000000.log", "ab") as file:
            file.write(v2(3, 1))
        waiter.join(30)
        assert len(answers[0].records) == 3 * one


def test_new_segments_partitions_and_topics_become_visible(tmp_path):
    directory = partition_dir(tmp_path, "roll", [v2(0, 4)])
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        assert fetch(srv.port, "roll", 0).high_watermark == 4
        (directory / f"{4:020d}.log").write_bytes(v2(4, 3))      # the broker rolled
        part = fetch(srv.port, "roll", 4)
        assert part.high_watermark == 7 and bytes(part.records) == v2(4, 3)
        partition_dir(tmp_path, "fresh", [v2(0, 2)])             # a new topic
        with BlockingClient("127.0.0.1", srv.port) as client:
            assert client.metadata(["fresh"]).topics[0].error_code == 0
        want = {("fresh", 0): [(0, b"k0", b"x" * 50), (1, b"k1", b"x" * 50)]}
        assert confluent_read(f"127.0.0.1:{srv.port}", want) == want


def test_retention_and_the_log_start_checkpoint_move_the_earliest_offset(tmp_path):
    directory = partition_dir(tmp_path, "ret", [v2(0, 5)])
    (directory / f"{5:020d}.log").write_bytes(v2(5, 5))
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        assert fetch(srv.port, "ret", 0).log_start_offset == 0
        os.unlink(directory / f"{0:020d}.log")                   # retention deleted it
        part = fetch(srv.port, "ret", 0)
        assert part.error_code == 1 and part.log_start_offset == 5   # OFFSET_OUT_OF_RANGE
        (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nret 0 7\n")
        os.utime(directory)                                      # Kafka writes it beside the dirs
        shutil.copy(directory / f"{5:020d}.log", directory / "tmp")   # any change of the directory
        os.unlink(directory / "tmp")
        assert fetch(srv.port, "ret", 7).log_start_offset == 7
        want = {("ret", 0): [(i, b"k%d" % i, b"x" * 50) for i in range(7, 10)]}
        assert confluent_read(f"127.0.0.1:{srv.port}", want, **{"auto.offset.reset": "earliest"}) == want


def test_truncation_never_crashes_and_appends_after_it_are_served(tmp_path):
    directory = partition_dir(tmp_path, "cut", [v2(0, 5), v2(5, 5), v2(10, 5)])
    segment = directory / "00000000000000000000.log"
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        assert fetch(srv.port, "cut", 0).high_watermark == 15
        os.truncate(segment, len(v2(0, 5)) + 20)                  # follower truncation, mid-batch
        part = fetch(srv.port, "cut", 0)
        assert part.high_watermark == 5 and bytes(part.records) == v2(0, 5)
        assert fetch(srv.port, "cut", 12).error_code == 1         # beyond the new end
        with open(segment, "r+b") as file:                        # the log goes on differently
            file.truncate(len(v2(0, 5)))
            file.seek(0, 2)
            file.write(v2(5, 2, value=b"new"))
        part = fetch(srv.port, "cut", 5)
        assert part.high_watermark == 7 and bytes(part.records) == v2(5, 2, value=b"new")
        # an old client's lazy conversion of the same partition
        want = {("cut", 0): [(i, b"k%d" % i, b"x" * 50) for i in range(5)] + [(5, b"k5", b"new"), (6, b"k6", b"new")]}
        assert kafka_python_read(f"127.0.0.1:{srv.port}", want, api_version=(0, 10, 1)) == want


def test_a_file_cut_while_it_is_sent_closes_only_that_connection(tmp_path, monkeypatch):
    directory = partition_dir(tmp_path, "cut", [v2(i * 5, 5) for i in range(20)])
    segment = directory / "00000000000000000000.log"
    real_write = FilePiece.write

    def cut_first(self, sock):
        if not getattr(cut_first, "done", False):
            cut_first.done = True
            os.truncate(segment, 100)
        return real_write(self, sock)

    monkeypatch.setattr(FilePiece, "write", cut_first)
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        with pytest.raises(ConnectionError):
            fetch(srv.port, "cut", 0)
        assert fetch(srv.port, "cut", 0).high_watermark == 0      # the server noticed and goes on


def test_index_files_are_used_when_valid_and_ignored_when_not(tmp_path):
    root = make_log_dir(tmp_path / "logs")
    want = expected(root, {"modern": 1})
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
        assert confluent_read(f"127.0.0.1:{srv.port}", want) == want
        segment = srv.view.partition("modern", 0).segments[0]
        assert segment.table is not None                      # the last segment: indexed in memory
        mixed = srv.view.partition("mixed", 0)
        fetch(srv.port, "mixed", 0)
        assert mixed.segments[0].sparse is not None and mixed.segments[0].times is None
        # ListOffsets by time through the .timeindex (read when first needed)
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{srv.port}", "group.id": "t"})
        first_ts = 1_700_000_000_000
        found = consumer.offsets_for_times([TopicPartition("mixed", 0, first_ts + 500)], timeout=10)[0].offset
        consumer.close()
        assert mixed.segments[0].times is not None and srv.view.index_use.invalid_files == {}
    index = root / "mixed-0" / "00000000000000000000.index"
    index.write_bytes(b"\x00\x00\x00\x07\x00\x00\x00\x05" * 3)    # garbage: out of order, off-boundary
    (root / "mixed-0" / "00000000000000000000.timeindex").write_bytes(b"\x01" * 25)
    want = expected(root, {"mixed": 2})
    with Server([str(root)], listen=("127.0.0.1", 0), zstd_codec="lz4") as srv:
        assert confluent_read(f"127.0.0.1:{srv.port}", want, **{"isolation.level": "read_uncommitted"}) == want
        assert kafka_python_read(f"127.0.0.1:{srv.port}", want, api_version=(0, 10, 1)) == want
        assert srv.view.partition("mixed", 0).segments[0].sparse is None          # rebuilt
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{srv.port}", "group.id": "t"})
        again = consumer.offsets_for_times([TopicPartition("mixed", 0, first_ts + 500)], timeout=10)[0].offset
        consumer.close()
    assert again == found


# --- KIP-72: request memory -------------------------------------------------------------------------
def produce_frame(size: int, correlation_id: int) -> bytes:
    body = m.PRODUCE_REQUEST.encode(3, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                                       "topic_data": [{"name": "t", "partition_data": [
                                           {"index": 0, "records": b"\0" * size}]}]})
    header = struct.pack(">hhih", ApiKey.PRODUCE, 3, correlation_id, -1)
    return struct.pack(">i", len(header) + len(body)) + header + bytes(body)


def read_answer(sock: socket.socket) -> int:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out
    size = struct.unpack(">i", exactly(4))[0]
    return struct.unpack(">i", exactly(size)[:4])[0]


def test_request_memory_pool_mutes_connections_until_memory_returns(tmp_path):
    partition_dir(tmp_path, "t", [v2(0, 1)])
    limit = 64 * 1024
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), max_request_memory=limit,
                socket_request_max_bytes=limit) as srv:
        holder = socket.create_connection(("127.0.0.1", srv.port))
        frame = produce_frame(60_000, 1)
        holder.sendall(frame[:30_000])                            # a big request, half sent
        wait_for(lambda: srv.request_pool.available_memory < limit - 50_000)
        others = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        frames = [produce_frame(10_000, 10 + i) for i in range(3)]
        for sock, small in zip(others, frames):
            sock.sendall(small[:5_000])                           # each starts a request
        # non-strict pool: one more request gets memory (available >= 1), the others are muted
        wait_for(lambda: len(srv._memory_muted) == 2)
        muted = set(srv._memory_muted)
        holder.sendall(frame[30_000:])                            # memory comes back...
        assert read_answer(holder) == 1
        wait_for(lambda: not srv._memory_muted and all(not c.reader.muted for c in muted))
        for sock, small in zip(others, frames):
            sock.sendall(small[5_000:])
        for i, sock in enumerate(others):                         # ...and nobody is left behind
            assert read_answer(sock) == 10 + i
        for sock in [holder] + others:
            sock.close()
        wait_for(lambda: srv.request_pool.available_memory == limit)
        assert not srv._memory_muted


def test_a_client_gone_mid_response_gives_back_what_it_held(tmp_path):
    batches, offset = [], 0
    for _ in range(60):
        batches.append(v2(offset, 20, value=b"v" * 900))
        offset += 20
    partition_dir(tmp_path, "big", batches)
    from kafka.protocol.consumer import FetchRequest
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), max_conversion_memory=1 << 20) as srv:
        for version in (3, 11):
            request = FetchRequest[version](
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                topics=[FetchRequest.FetchTopic(topic="big", partitions=[FetchRequest.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])])
            body = bytes(request.encode(version=version))
            header = struct.pack(">hhih", 1, version, 1, -1)
            sock = socket.create_connection(("127.0.0.1", srv.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            sock.recv(100)                                       # the start of the answer only
            sock.close()
        wait_for(lambda: not srv.connections)
        assert srv.conversion_pool.available_memory == 1 << 20
        assert srv.request_pool.available_memory == srv.request_pool.size


def test_stop_answers_waiting_fetches_before_closing(tmp_path):
    partition_dir(tmp_path, "idle", [v2(0, 2)])
    srv = Server([str(tmp_path)], listen=("127.0.0.1", 0)).start()
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(fetch(srv.port, "idle", 2, max_wait_ms=60000)))
    waiter.start()
    wait_for(lambda: len(srv.fetches.parked) == 1)
    srv.stop()
    waiter.join(30)
    assert answers and answers[0].error_code == 0 and bytes(answers[0].records) == b""


# --- metrics --------------------------------------------------------------------------------------------
def test_metrics_in_prometheus_format(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    root = make_log_dir(tmp_path / "logs")
    want = expected(root, {"modern": 1})
    with Server([str(root)], listen=("127.0.0.1", 0), metrics_listen=("127.0.0.1", 0)) as srv:
        bootstrap = f"127.0.0.1:{srv.port}"
        confluent_read(bootstrap, want)
        kafka_python_read(bootstrap, want, api_version=(0, 10, 1))
        text = urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name, **labels):
        return samples.get((name, tuple(sorted(labels.items()))), 0)

    size = (root / "modern-0" / "00000000000000000000.log").stat().st_size
    assert value("kafka_server_brokertopicmetrics_bytesout_total", topic="modern") >= 2 * size
    assert value("kafka_server_brokertopicmetrics_fetchmessageconversions_total", topic="modern") > 0
    assert value("kafka_network_requestmetrics_requests_total", request="Fetch", version="3") > 0
    assert sum(v for (name, labels), v in samples.items() if name == "kafka_network_requestmetrics_requests_total"
               and dict(labels)["request"] == "Fetch" and int(dict(labels)["version"]) >= 4) > 0
    assert value("kafka_network_requestmetrics_messageconversionstimems_count", request="Fetch") > 0
    assert value("kafka_network_requestmetrics_temporarymemorybytes_sum", request="Fetch") > 0
    assert value("kafka_network_socketserver_memorypoolavailable") == 200 << 20
    assert value("kafka_network_socketserver_memorypoolused") == 0
    assert value("kafkacodec_serve_conversion_pool_available_bytes") == 64 << 20
    assert ("kafkacodec_serve_conversion_pool_depleted_time_ms_total", ()) in samples
