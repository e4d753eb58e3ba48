"""`serve --upstream`: the gateway in front of a cluster (kafkacodec/serve/upstream.py).

Old clients (kafka-python at api_version (0, 9): Fetch v1, magic 0; (0, 10, 1): Fetch v3,
magic 1) and new ones (confluent-kafka, kafka-python negotiated) read every record of the
cluster through the gateway, exactly as confluent-kafka reads them from the cluster directly;
an old client's group is coordinated by the gateway and its offsets are committed upstream, so
a consumer of the cluster itself resumes there.  The librdkafka mock cluster gives the fast
cases; a real Kafka 4.1 broker (which refuses every pre-2.1 protocol version, the point of the
gateway) the real one."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from kafkacodec.serve import Server  # noqa: E402

OLD_APIS = [(0, 9), (0, 10, 1)]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def produce_every_codec(bootstrap: str, topic: str, partitions: int, per_codec: int = 40) -> None:
    for codec in CODECS:
        producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                "linger.ms": 5})
        for i in range(per_codec):
            producer.produce(topic, key=b"%s-%d" % (codec.encode(), i),
                             value=b"%s value %d " % (codec.encode(), i) * (1 + i % 7),
                             partition=i % partitions)
        assert producer.flush(30) == 0


def read_direct(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    """The oracle: confluent-kafka reading the cluster itself."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(out)


def read_kafka_python(port: int, topic: str, partitions: int, count: int, api_version=None,
                      group: str | None = None, idle_ms: int = 15000) -> list[tuple]:
    options = {"api_version": api_version} if api_version else {}
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   consumer_timeout_ms=idle_ms, **options)
    if group is None:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    else:
        consumer.subscribe([topic])
    out: list[tuple] = []
    try:
        for msg in consumer:
            out.append((msg.partition, msg.offset, msg.key, msg.value))
            if len(out) >= count:
                break
        if group is not None:
            consumer.commit()
    finally:
        consumer.close()
    return sorted(out)


def read_confluent(port: int, topic: str, partitions: int, count: int, **config) -> list[tuple]:
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "via-gateway",
                            "enable.auto.commit": False, **config})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(out)


def committed_upstream(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


# --- the librdkafka mock cluster ------------------------------------------------------------

@pytest.fixture(scope="module")
def mock_gateway():
    from mock_cluster import MOCK_PARTITIONS, MockCluster

    cluster = MockCluster(3)
    cluster.create_topic("orders")
    produce_every_codec(cluster.bootstrap, "orders", MOCK_PARTITIONS)
    expected = read_direct(cluster.bootstrap, "orders", MOCK_PARTITIONS, 40 * len(CODECS))
    assert len(expected) == 40 * len(CODECS)
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0),
                zstd_codec="lz4") as server:
        yield cluster, server, expected, MOCK_PARTITIONS


@pytest.mark.parametrize("api_version", OLD_APIS + [None], ids=["0.9", "0.10.1", "negotiated"])
def test_kafka_python_reads_the_cluster_through_the_gateway(mock_gateway, api_version):
    cluster, server, expected, partitions = mock_gateway
    got = read_kafka_python(server.port, "orders", partitions, len(expected), api_version)
    assert got == expected


def test_confluent_kafka_gets_the_upstream_batches(mock_gateway):
    cluster, server, expected, partitions = mock_gateway
    assert read_confluent(server.port, "orders", partitions, len(expected)) == expected
    assert read_confluent(server.port, "orders", partitions, len(expected),
                          **{"api.version.request": False,
                             "broker.version.fallback": "0.9.0.1"}) == expected


@pytest.mark.parametrize("api_version", OLD_APIS + [None], ids=["0.9", "0.10.1", "negotiated"])
def test_a_reader_starting_inside_batches_gets_exactly_the_records_from_there(mock_gateway, api_version):
    """A fresh gateway's first fetch of each partition starts inside a batch: the upstream
    consumer keeps that batch whole, and each client (magic 0, magic 1, v2 batches) gets the
    records from its offset on, none before."""
    cluster, _, expected, partitions = mock_gateway
    start = 7
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), zstd_codec="lz4") as server:
        options = {"api_version": api_version} if api_version else {}
        consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}",
                                       enable_auto_commit=False, consumer_timeout_ms=15000, **options)
        tps = [kafka.TopicPartition("orders", p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start)
        want = [e for e in expected if e[1] >= start]
        got: list[tuple] = []
        try:
            for msg in consumer:
                got.append((msg.partition, msg.offset, msg.key, msg.value))
                if len(got) >= len(want):
                    break
        finally:
            consumer.close()
    assert sorted(got) == want


def test_metadata_names_the_gateway_for_every_partition(mock_gateway):
    cluster, server, expected, partitions = mock_gateway
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", api_version=(0, 9))
    try:
        assert consumer.partitions_for_topic("orders") == set(range(partitions))
        brokers = consumer._client.cluster.brokers()
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", server.port)]
        ends = consumer.end_offsets([kafka.TopicPartition("orders", p) for p in range(partitions)])
    finally:
        consumer.close()
    last = {}
    for p, offset, _, _ in expected:
        last[p] = max(last.get(p, -1), offset)
    assert {tp.partition: o for tp, o in ends.items()} == {p: o + 1 for p, o in last.items()}


def test_an_old_group_commits_upstream_and_resumes_on_the_cluster(mock_gateway):
    cluster, server, expected, partitions = mock_gateway
    half = len(expected) // 2
    got = read_kafka_python(server.port, "orders", partitions, half, (0, 10, 1), group="legacy")
    assert len(got) == half and set(got) <= set(expected)
    upstream = committed_upstream(cluster.bootstrap, "legacy", "orders", partitions)
    read_to = {}
    for p, offset, _, _ in got:
        read_to[p] = max(read_to.get(p, -1), offset + 1)
    assert {p: o for p, o in upstream.items() if o >= 0} == read_to
    # the same group, now on the cluster directly, reads exactly the rest
    consumer = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "legacy",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    rest: list[tuple] = []
    deadline = time.monotonic() + 60
    try:
        while len(rest) < len(expected) - half and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                rest.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    assert sorted(got + rest) == expected


def test_old_and_new_members_share_one_group_through_the_gateway(mock_gateway):
    """kafka-python at (0, 10, 1) (JoinGroup v0) and confluent-kafka (JoinGroup v5+) in one
    group through the gateway, which coordinates both (Kafka's classic protocol, the "range"
    assignor they share): the partitions are split between them, and together they read every
    record."""
    cluster, server, expected, partitions = mock_gateway
    gateway = f"127.0.0.1:{server.port}"
    old = kafka.KafkaConsumer(bootstrap_servers=gateway, api_version=(0, 10, 1), group_id="mixed",
                              auto_offset_reset="earliest", enable_auto_commit=False,
                              partition_assignment_strategy=[kafka.coordinator.assignors.range.RangePartitionAssignor])
    new = ck.Consumer({"bootstrap.servers": gateway, "group.id": "mixed", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "partition.assignment.strategy": "range"})
    got: set[tuple] = set()
    try:
        old.subscribe(["orders"])
        new.subscribe(["orders"])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for records in old.poll(timeout_ms=100).values():
                got.update((r.partition, r.offset, r.key, r.value) for r in records)
            msg = new.poll(0.1)
            if msg is not None and not msg.error():
                got.add((msg.partition(), msg.offset(), msg.key(), msg.value()))
            mine = {tp.partition for tp in old.assignment()}
            theirs = {tp.partition for tp in new.assignment()}
            if got >= set(expected) and mine and theirs and not mine & theirs and \
                    mine | theirs == set(range(partitions)):
                break
        assert mine and theirs and not mine & theirs and mine | theirs == set(range(partitions))
        assert got == set(expected)
    finally:
        old.close()
        new.close()


def test_a_chunk_checks_its_checksums_once_for_every_conversion():
    """The gateway converts an upstream answer for each old client that reads it: every entry's
    checksum is computed once, on the first conversion, and a chunk holding a damaged entry
    leaves the check to each conversion (which refuses the entry, as before)."""
    from kafkacodec import InvalidCrcError, MemoryRecordsBuilder
    from kafkacodec.lazy import LazyDownConvertRecords
    from kafkacodec.serve.upstream import ChunkRange, _Chunk

    builder = MemoryRecordsBuilder(magic=2, base_offset=10)
    for i in range(4):
        builder.append(1000 + i, b"k%d" % i, b"v" * 70_000)
    good = bytes(builder.build())                      # one entry larger than a chunk
    chunk = _Chunk(10, 14, good, "upstream")
    found = ChunkRange(chunk, 0, len(good), len(good))
    assert chunk._crcs_hold is None                     # not before a conversion asks
    assert found.crc_checked and chunk._crcs_hold is True
    lazy = LazyDownConvertRecords(chunk.slice(0, len(good)), 1, 10, chunk_size=4096,
                                  crc_checked=found.crc_checked)
    assert sum(c.records.size_in_bytes for c in lazy) == lazy.size_in_bytes
    damaged = bytearray(good)
    damaged[-1] ^= 1
    chunk = _Chunk(10, 14, bytes(damaged), "upstream")
    found = ChunkRange(chunk, 0, len(damaged), len(damaged))
    assert not found.crc_checked
    with pytest.raises(InvalidCrcError):
        LazyDownConvertRecords(chunk.slice(0, len(damaged)), 1, 10, chunk_size=4096,
                               crc_checked=found.crc_checked)


def test_an_offset_beyond_the_log_is_out_of_range(mock_gateway):
    cluster, server, expected, partitions = mock_gateway
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", api_version=(0, 10, 1),
                                   auto_offset_reset="earliest", consumer_timeout_ms=15000)
    tp = kafka.TopicPartition("orders", 0)
    consumer.assign([tp])
    consumer.seek(tp, 10_000)                 # the gateway asks the cluster, which refuses it
    try:
        first = next(iter(consumer))
    finally:
        consumer.close()
    assert (first.partition, first.offset) == (0, 0)      # reset to earliest, as from a broker


def test_the_command_serves_a_cluster(mock_gateway, tmp_path):
    cluster, server, expected, partitions = mock_gateway
    from test_serve import serve_command

    proc = serve_command("--upstream", cluster.bootstrap, "--listen", "127.0.0.1:0",
                         "--zstd-downconvert-codec", "lz4")
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        port = int(line.rsplit(":", 1)[1])
        assert read_kafka_python(port, "orders", partitions, len(expected), (0, 9)) == expected
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_a_cluster_gone_answers_group_offsets_with_coordinator_not_available():
    """The cluster stops answering: OffsetFetch and OffsetCommit through the gateway get
    COORDINATOR_NOT_AVAILABLE (the client retries), never a hang or a crash."""
    from mock_cluster import MockCluster
    from test_serve_groups import request

    from kafkacodec.protocol import messages as m
    from kafkacodec.protocol.api import ApiKey

    cluster = MockCluster(1)
    cluster.create_topic("short-lived")
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), upstream_timeout_s=2) as server:
        commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": "short-lived", "partitions": [
                      {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}]}
        assert request(server.port, ApiKey.OFFSET_COMMIT, 2, commit)["topics"][0]["partitions"][0]["error_code"] == 0
        cluster.producer = None                  # the mock cluster goes with its producer
        import gc
        gc.collect()
        answer = request(server.port, ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": [
            {"name": "short-lived", "partition_indexes": [0]}]})
        assert answer["error_code"] == 15
        assert answer["topics"][0]["partitions"][0]["error_code"] == 15
        assert request(server.port, ApiKey.OFFSET_COMMIT, 2, commit)["topics"][0]["partitions"][0]["error_code"] == 15


# --- an upstream that is slow, or gone: the server answers from callbacks ---------------------

#: A long poll's max wait, and what its answer may take beyond it on a loaded CI machine.
MAX_WAIT_MS, ANSWER_SLACK_S = 300, 0.7


def fetch_to(client, topic: str, partition: int, offset: int, end: int, deadline_s: float = 15) -> int:
    """Fetch (v11) from `offset` until `end`: the upstream consumer follows the partition and
    the gateway keeps what it fetched.  Returns the offset reached."""
    from kafkacodec import MemoryRecords

    deadline = time.monotonic() + deadline_s
    while offset < end and time.monotonic() < deadline:
        part = client.fetch([(topic, [(partition, offset, 1 << 20)])], api_version=11,
                            max_wait_ms=MAX_WAIT_MS).responses[0].partitions[0]
        assert part.error_code == 0, part.error_code
        for batch in MemoryRecords(bytes(part.records or b"")).batches():
            offset = max(offset, batch.last_offset + 1)
    return offset


def long_poll_times(client, topic: str, partition: int, offset: int, until) -> list[tuple[float, int]]:
    """(seconds, records bytes) of each Fetch at `offset` (max wait MAX_WAIT_MS) made until
    `until()`."""
    out = []
    while not until():
        start = time.monotonic()
        part = client.fetch([(topic, [(partition, offset, 1 << 20)])], api_version=11,
                            max_wait_ms=MAX_WAIT_MS).responses[0].partitions[0]
        out.append((time.monotonic() - start, len(part.records or b"")))
    return out


def commit_request(group: str, topic: str, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]}


@contextlib.contextmanager
def steered_gateway(topic: str, timeout: float):
    """A gateway (upstream_timeout_s `timeout`) in front of a one-broker mock cluster the test
    steers, and a client that has read the 20 records of `topic`-0 through it (the gateway
    holds them): (cluster, server, client)."""
    from blocking_client import BlockingClient
    from mock_cluster import SteerableMockCluster

    cluster = SteerableMockCluster(1)
    try:
        cluster.create_topic(topic)
        cluster.produce(topic, [(0, b"k%d" % i, b"v%d" % i, None, None) for i in range(20)])
        with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0),
                    upstream_timeout_s=timeout) as server, \
                BlockingClient("127.0.0.1", server.port, timeout=30) as reader:
            assert fetch_to(reader, topic, 0, 0, 20) == 20
            yield cluster, server, reader
    finally:
        cluster.close()


def test_a_slow_upstream_commit_never_stalls_another_clients_fetches():
    """The cluster holds back its OffsetCommit answer for 5 s.  One client's commit waits for it
    (and is answered, NONE, once the cluster acknowledged); meanwhile another client's long polls
    at the end of a partition are answered within their max wait (before: the server's loop
    thread waited for the upstream call, and the fetch was answered after the 5 s)."""
    from background import in_thread
    from test_serve_groups import request

    from kafkacodec.protocol.api import ApiKey

    with steered_gateway("slow", timeout=20) as (cluster, server, reader):
        cluster.delay(ApiKey.OFFSET_COMMIT, 5000)
        thread, box = in_thread(lambda: request(server.port, ApiKey.OFFSET_COMMIT, 2,
                                                commit_request("patient", "slow", 7)))
        times = long_poll_times(reader, "slow", 0, 20, lambda: not thread.is_alive())
        thread.join(30)
        assert box["result"]["topics"][0]["partitions"][0]["error_code"] == 0, box
        assert box["took"] >= 4.5, box                        # it did wait for the cluster
        assert max(t for t, _ in times) < MAX_WAIT_MS / 1000 + ANSWER_SLACK_S, times
        assert len(times) >= 5, times
        assert committed_upstream(cluster.bootstrap, "patient", "slow", 1) == {0: 7}


def test_a_cluster_gone_mid_serving_leaves_the_server_answering():
    """Every broker of the cluster goes down while clients are served.  Group requests
    (OffsetCommit, OffsetFetch) and ListOffsets of three clients, at once, end after their
    deadline (upstream_timeout_s) with COORDINATOR_NOT_AVAILABLE / KAFKA_STORAGE_ERROR, and
    meanwhile another client's fetches of data the gateway already holds are answered at once,
    and Metadata too (before: the loop thread waited out each upstream call in turn, and the
    fetches waited with it)."""
    from background import in_thread
    from test_serve_groups import request

    from kafkacodec import MemoryRecords
    from kafkacodec.protocol.api import ApiKey

    with steered_gateway("fading", timeout=2) as (cluster, server, reader):
        cluster.set_down()
        asks = {
            "commit": (ApiKey.OFFSET_COMMIT, 2, commit_request("g", "fading", 3)),
            "offsets": (ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": [
                {"name": "fading", "partition_indexes": [0]}]}),
            "list": (ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
                {"name": "fading", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
        }
        waiting = {name: in_thread(lambda ask=ask: request(server.port, *ask))
                   for name, ask in asks.items()}
        cached = []
        while any(thread.is_alive() for thread, _ in waiting.values()):
            start = time.monotonic()
            part = reader.fetch([("fading", [(0, 0, 1 << 20)])], api_version=11,
                                max_wait_ms=MAX_WAIT_MS).responses[0].partitions[0]
            took = time.monotonic() - start
            records = [r.offset for b in MemoryRecords(bytes(part.records or b"")).batches() for r in b]
            cached.append((took, part.error_code, records[:1]))
            assert reader.metadata(["fading"], api_version=1).topics[0].error_code == 0
        for thread, _ in waiting.values():
            thread.join(30)
    committed, fetched, listed = (waiting[name][1]["result"] for name in ("commit", "offsets", "list"))
    assert committed["topics"][0]["partitions"][0]["error_code"] == 15, committed
    assert fetched["error_code"] == 15 and fetched["topics"][0]["partitions"][0]["error_code"] == 15
    assert listed["topics"][0]["partitions"][0]["error_code"] == 56, listed    # KAFKA_STORAGE_ERROR
    assert all(box["took"] >= 1.8 for _, box in waiting.values()), waiting   # their deadline
    assert max(t for t, _, _ in cached) < ANSWER_SLACK_S, cached
    assert all(code == 0 and first == [0] for _, code, first in cached), cached
    assert len(cached) >= 10, cached


def upstream_sockets(ports: set[int]) -> int:
    """This process's established TCP connections to `ports` (/proc/self/fd's sockets found
    in /proc/self/net/tcp{,6}): what the gateway holds open toward the cluster, plus the
    mock's own client."""
    import os

    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "01" and fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) in ports:
                count += 1
    return count


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/net/tcp"), reason="counts sockets in /proc")
def test_many_groups_share_the_gateways_upstream_connections(mock_gateway):
    """Twelve groups, each found, joined, committed, fetched and left through the gateway: the
    gateway's connections to the cluster grow by at most one per broker and bootstrap address
    (the coordinator connections every group shares), not two per group id for the gateway's
    lifetime as before (24 here); every group's offsets land in the cluster."""
    from test_serve_groups import request

    from kafkacodec.protocol import messages as m
    from kafkacodec.protocol.api import ApiKey

    cluster, server, _, partitions = mock_gateway
    ports = {port for _, port in cluster.brokers.values()}
    groups = [f"many-{i}" for i in range(12)]
    before = upstream_sockets(ports)
    for i, group in enumerate(groups):
        found = request(server.port, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        assert found["error_code"] == 0 and found["port"] == server.port
        joined = request(server.port, ApiKey.JOIN_GROUP, 5, {
            "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\0"}]})
        member, generation = joined["member_id"], joined["generation_id"]
        assert request(server.port, ApiKey.SYNC_GROUP, 3, {
            "group_id": group, "generation_id": generation, "member_id": member,
            "assignments": [{"member_id": member, "assignment": b""}]})["error_code"] == 0
        commit = request(server.port, ApiKey.OFFSET_COMMIT, 2, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": "orders", "partitions": [
                {"partition_index": p, "committed_offset": i + p, "committed_metadata": ""}
                for p in range(partitions)]}]})
        assert [p["error_code"] for p in commit["topics"][0]["partitions"]] == [0] * partitions
        fetched = request(server.port, ApiKey.OFFSET_FETCH, 2, {"group_id": group, "topics": [
            {"name": "orders", "partition_indexes": list(range(partitions))}]})
        assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == \
            [i + p for p in range(partitions)]
        left = request(server.port, ApiKey.LEAVE_GROUP, 1, {"group_id": group, "member_id": member})
        assert left["error_code"] == 0
    # a coordinator connection per broker, and one to the bootstrap address FindCoordinator
    # may have gone to: 6 here at most, 24 before (two per group)
    grown = upstream_sockets(ports) - before
    assert grown <= len(cluster.brokers) + len(cluster.bootstrap.split(",")), grown
    for i, group in enumerate(groups):
        assert committed_upstream(cluster.bootstrap, group, "orders", partitions) == \
            {p: i + p for p in range(partitions)}


def test_readers_far_apart_through_a_small_cache(mock_gateway):
    """Two old clients reading the same partitions at different places, with a cache that holds
    about one chunk: the upstream consumer seeks between them, chunks are dropped and fetched
    again, and each client still gets every record exactly."""
    import threading

    cluster, _, expected, partitions = mock_gateway
    bound = 2 << 10
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), zstd_codec="lz4",
                upstream_cache_memory=bound) as server:
        results: dict[tuple, list[tuple]] = {}

        def read(api_version: tuple) -> None:
            # a loaded machine may thrash the one-chunk cache for a while: patience, not records
            results[api_version] = read_kafka_python(server.port, "orders", partitions, len(expected),
                                                     api_version, idle_ms=45000)

        first = threading.Thread(target=read, args=((0, 9),))
        first.start()
        time.sleep(0.5)                       # the second starts behind the first
        read((0, 10, 1))
        first.join(120)
        view = server.view
        assert view.cached_bytes <= bound or len(view._lru) == 1
    assert results == {(0, 9): expected, (0, 10, 1): expected}


def test_a_reader_from_the_start_after_one_at_the_end_gets_every_record(mock_gateway):
    """A client reads every partition to its end through a cache that keeps only the last part
    of it; then another reads from offset 0.  The chunks the first left (far ahead of offset 0,
    not continuing from it) must not count as read-ahead: the upstream consumer fetches from 0
    again (it paused there for good, and the second client got nothing)."""
    cluster, _, expected, partitions = mock_gateway
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), zstd_codec="lz4",
                upstream_cache_memory=6 << 10) as server:
        assert read_confluent(server.port, "orders", partitions, len(expected)) == expected
        ahead = [len(server.view.partition("orders", p).committed.chunks) for p in range(partitions)]
        assert max(ahead) > 2                    # more than CHUNKS_AHEAD left behind the end
        assert read_confluent(server.port, "orders", partitions, len(expected)) == expected


def test_an_upstream_long_poll_runs_only_while_a_client_waits_at_the_end(mock_gateway):
    """A broker answers a connection's requests in order, so a reader that seeks (and the
    ListOffsets asked for it) waited behind the upstream long poll the last reader left at the
    end.  Caught up and demanded by no client for TAIL_IDLE_S, a partition is paused upstream;
    a client waiting at the end keeps it fetching; a new reader resumes it and reads all."""
    from kafkacodec.serve.upstream import COMMITTED, TAIL_IDLE_S

    cluster, _, expected, partitions = mock_gateway
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), zstd_codec="lz4") as server:
        def paused() -> list[bool]:
            states = server.view._consumer(COMMITTED).fetcher.states
            return [states[("orders", p)].paused for p in range(partitions)]

        assert read_confluent(server.port, "orders", partitions, len(expected)) == expected
        deadline = time.monotonic() + 10
        while not all(paused()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(paused())
        waiting = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", api_version=(0, 10, 1),
                                      fetch_max_wait_ms=5000, consumer_timeout_ms=int(20 * TAIL_IDLE_S * 1000))
        tp = kafka.TopicPartition("orders", 0)
        waiting.assign([tp])
        waiting.seek_to_end(tp)
        waited: list = []
        thread = threading.Thread(target=lambda: waited.extend(waiting))   # waits at the end ...
        thread.start()
        try:
            deadline = time.monotonic() + 20 * TAIL_IDLE_S
            while paused()[0] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not paused()[0]                      # ... with partition 0 fetched upstream
        finally:
            thread.join()
            waiting.close()
        assert waited == []
        assert read_confluent(server.port, "orders", partitions, len(expected)) == expected


def test_the_upstream_pauses_at_the_end_after_a_reader_whose_last_fetch_was_inside_the_chunks(mock_gateway):
    """A reader gone after a fetch inside the chunks (its last records, no fetch at the end):
    the upstream consumer, caught up, stops its long poll too (it polled on until the partition
    went idle for a minute, and a reader starting meanwhile waited behind each poll)."""
    from blocking_client import BlockingClient

    from kafkacodec.serve.upstream import COMMITTED, TAIL_IDLE_S

    cluster = mock_gateway[0]
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0)) as server:
        end = server.view.partition("orders", 0).log_end
        client = BlockingClient("127.0.0.1", server.port, timeout=30)
        try:
            answer = client.fetch([("orders", [(0, end - 1, 1 << 20)])], api_version=4, max_wait_ms=5000)
        finally:
            client.close()
        assert len(answer.responses[0].partitions[0].records) > 0

        def paused() -> bool:
            return server.view._consumer(COMMITTED).fetcher.states[("orders", 0)].paused

        deadline = time.monotonic() + 20 * TAIL_IDLE_S
        while not paused() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paused()


def test_a_fetch_waiting_for_upstream_data_is_answered_when_it_lands(mock_gateway):
    """Kafka completes a waiting fetch when data is appended, not at a timer: a fetch that
    waits for a chunk the gateway is fetching is answered as soon as the chunk is kept, not at
    the next poll interval (2 s here; before, the answer came with it)."""
    from blocking_client import BlockingClient

    cluster = mock_gateway[0]
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), poll_interval_ms=2000) as server:
        assert server.view.cached_bytes == 0
        client = BlockingClient("127.0.0.1", server.port, timeout=30)
        try:
            started = time.monotonic()
            answer = client.fetch([("orders", [(0, 0, 1 << 20)])], api_version=4,
                                  max_wait_ms=10_000, min_bytes=1)
            took = time.monotonic() - started
        finally:
            client.close()
        records = answer.responses[0].partitions[0].records
        assert records is not None and len(records) > 0
        assert server.fetches.parked == [] and server.view.cached_bytes > 0
        assert took < 1.0, took


def test_new_topics_and_appends_reach_clients(mock_gateway):
    """A topic created after the gateway started is found; a consumer at the end long-polls and
    gets records as they land upstream; an offset past the bounds the gateway last heard (but
    inside the log now) is read, not refused."""
    cluster, server, _, partitions = mock_gateway
    cluster.create_topic("late")
    first = cluster.produce("late", [(0, b"a%d" % i, b"first %d" % i, None, None) for i in range(10)])
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", api_version=(0, 9),
                                   auto_offset_reset="earliest", consumer_timeout_ms=15000)
    tp = kafka.TopicPartition("late", 0)
    try:
        consumer.assign([tp])
        got = [next(consumer) for _ in range(10)]
        assert [(m.offset, m.value) for m in got] == sorted((o, v) for (_, o), (_, v) in first.items())
        later = cluster.produce("late", [(0, b"b%d" % i, b"later %d" % i, None, None) for i in range(10)])
        got = [next(consumer) for _ in range(10)]
        assert [(m.offset, m.value) for m in got] == sorted((o, v) for (_, o), (_, v) in later.items())
        part = server.view.partition("late", 1)
        stale = part.log_end
        more = cluster.produce("late", [(1, b"c%d" % i, b"more %d" % i, None, None) for i in range(10)])
        assert part.log_end == stale               # nobody read partition 1: bounds not heard
        target = kafka.TopicPartition("late", 1)
        consumer.assign([target])
        consumer.seek(target, stale + 5)
        got = [next(consumer) for _ in range(5)]
        assert [(m.offset, m.value) for m in got] == sorted((o, v) for (_, o), (_, v) in more.items())[5:]
    finally:
        consumer.close()


def test_upstream_metrics(mock_gateway):
    import urllib.request

    cluster, _, expected, partitions = mock_gateway
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0),
                metrics_listen=("127.0.0.1", 0), zstd_codec="lz4") as server:
        def sample(name: str) -> float:
            text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                          timeout=10).read().decode()
            return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))

        assert sample("kafkacodec_serve_upstream_cached_bytes") == 0
        assert sample("kafkacodec_serve_upstream_pool_available_bytes") == 64 << 20
        assert read_kafka_python(server.port, "orders", partitions, len(expected), (0, 10, 1)) == expected
        assert sample("kafkacodec_serve_upstream_cached_bytes") > 0
        assert sample("kafkacodec_serve_upstream_partitions") == partitions


def test_an_unreachable_cluster_is_an_error_at_start():
    import socket

    from kafkacodec.serve.upstream import UpstreamError

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]            # bound, not listening: connections refused
        with pytest.raises(UpstreamError, match="did not answer|refused|upstream"):
            Server(upstream=f"127.0.0.1:{port}", listen=("127.0.0.1", 0), upstream_timeout_s=1)


def test_log_dirs_and_upstream_are_exclusive(tmp_path):
    from kafkacodec.serve import ServeConfig

    with pytest.raises(ValueError, match="not both"):
        ServeConfig(log_dirs=[str(tmp_path)], upstream="127.0.0.1:9")
    with pytest.raises(ValueError, match="upstream cluster"):
        ServeConfig(log_dirs=[])


# --- a real Kafka 4.1 broker -----------------------------------------------------------------

def test_old_clients_read_kafka_4_through_the_gateway(kafka_broker):
    topic, partitions = "gateway-k4", 3
    kafka_broker.create_topic(topic, partitions)
    produce_every_codec(kafka_broker.bootstrap, topic, partitions, per_codec=30)
    expected = read_direct(kafka_broker.bootstrap, topic, partitions, 30 * len(CODECS))
    assert len(expected) == 30 * len(CODECS)
    # Kafka 4 itself refuses the old protocol: that is why the gateway exists
    with pytest.raises(kafka.errors.KafkaError):
        old = kafka.KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, api_version=(0, 9),
                                  request_timeout_ms=5000, consumer_timeout_ms=3000)
        try:
            old.assign([kafka.TopicPartition(topic, 0)])
            old.seek_to_beginning()
            records = list(old)
            if not records:
                raise kafka.errors.KafkaError("nothing read")
        finally:
            old.close()
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), zstd_codec="gzip") as server:
        for api_version in OLD_APIS:
            assert read_kafka_python(server.port, topic, partitions, len(expected), api_version) == expected
        assert read_confluent(server.port, topic, partitions, len(expected)) == expected
        half = len(expected) // 2
        got = read_kafka_python(server.port, topic, partitions, half, (0, 9), group="legacy-k4")
        upstream = committed_upstream(kafka_broker.bootstrap, "legacy-k4", topic, partitions)
    read_to = {}
    for p, offset, _, _ in got:
        read_to[p] = max(read_to.get(p, -1), offset + 1)
    committed = {p: o for p, o in upstream.items() if o >= 0}
    # a member commits its positions: after what it read, or the log start of a partition it
    # was assigned and had read nothing from yet (kafka-python commits that too, as it may)
    assert {p: o for p, o in committed.items() if p in read_to} == read_to
    assert all(o == 0 for p, o in committed.items() if p not in read_to), committed


#: Kafka's own Java consumers that Kafka 4 turns away (Fetch v1 magic 0 for 0.9, v2-v3 magic 1).
OLD_JAVA_CONSUMERS = ("0.9.0.1", "0.10.0.1", "0.10.2.2")


@pytest.fixture(scope="module")
def kafka_4_topic(kafka_broker):
    """A Kafka 4.1 topic of 2 partitions written with every codec (zstd too), and what
    confluent-kafka reads from the cluster itself: {(topic, partition): [(offset, key, value)]}."""
    topic, partitions = "old-java-k4", 2
    kafka_broker.create_topic(topic, partitions)
    produce_every_codec(kafka_broker.bootstrap, topic, partitions, per_codec=30)
    want: dict = {}
    for p, offset, key, value in read_direct(kafka_broker.bootstrap, topic, partitions, 30 * len(CODECS)):
        want.setdefault((topic, p), []).append((offset, key, value))
    assert sum(map(len, want.values())) == 30 * len(CODECS)
    return topic, want


def _java_lines(stdout: str) -> dict:
    got: dict = {}
    for line in stdout.splitlines():
        topic, partition, offset, key, value = line.split(" ")
        got.setdefault((topic, int(partition)), []).append(
            (int(offset), None if key == "-" else bytes.fromhex(key), None if value == "-" else bytes.fromhex(value)))
    return got


@pytest.mark.broker
@pytest.mark.parametrize("version", OLD_JAVA_CONSUMERS)
def test_kafkas_old_java_consumers_read_kafka_4_through_the_gateway(kafka_broker, kafka_4_topic, version, tmp_path):
    """Kafka's own consumers 0.9.0.1, 0.10.0.1 and 0.10.2.2 (Maven Central), through the gateway
    to Kafka 4.1: by assign every record (zstd batches rebuilt with gzip); in a group, a first
    run reads part and commits, a restarted consumer resumes at the commit and reads the rest:
    every record exactly once, and the cluster holds the group's offsets at the end."""
    import subprocess

    from serve_support import compile_java_driver, java_consumer_classpath, java_read, run_java_consumer

    cp = java_consumer_classpath(version)
    if cp is None:
        pytest.skip(f"needs java, javac and Maven (kafka-clients {version})")
    compile_java_driver(tmp_path, cp)
    topic, want = kafka_4_topic
    group = f"old-java-{version}"
    # Kafka 4 turns it away: no record within 10 s (0.9's poll() blocks for good; the later ones
    # end with their timeout)
    try:
        direct = run_java_consumer(cp, tmp_path, kafka_broker.bootstrap, f"{topic}:0:1", timeout=8, grace=4)
        assert direct.returncode != 0 and not direct.stdout
    except subprocess.TimeoutExpired as stuck:
        assert not stuck.stdout
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), zstd_codec="gzip") as server:
        gateway = f"127.0.0.1:{server.port}"
        assert java_read(cp, tmp_path, gateway, want) == want
        first_spec = ",".join(f"{t}:{p}:{len(rows) // 3}" for (t, p), rows in sorted(want.items()))
        first = run_java_consumer(cp, tmp_path, gateway, first_spec, group=group)
        assert first.returncode == 0, first.stderr[-3000:]
        got = _java_lines(first.stdout)
        rest_spec = ",".join(f"{t}:{p}:{len(rows) - len(got.get((t, p), []))}" for (t, p), rows in sorted(want.items()))
        second = run_java_consumer(cp, tmp_path, gateway, rest_spec, group=group)   # restarted
        assert second.returncode == 0, second.stderr[-3000:]
        for key, rows in _java_lines(second.stdout).items():
            got.setdefault(key, []).extend(rows)
    assert got == want                                  # resumed where it committed: nothing twice
    assert committed_upstream(kafka_broker.bootstrap, group, topic, 2) == {
        p: rows[-1][0] + 1 for (_, p), rows in want.items()}


@pytest.mark.broker
@pytest.mark.parametrize("commit_version", [0, 1])
def test_the_scala_0_8_2_consumer_reads_kafka_4_through_the_gateway(kafka_broker, kafka_4_topic, commit_version,
                                                                     tmp_path):
    """Kafka 0.8.2.2's Scala SimpleConsumer (kafka_2.10 from Maven Central, its javaapi;
    tests/java/ScalaSimpleConsumer.java) through the gateway to Kafka 4.1: Metadata v0,
    ListOffsets v0 for the earliest offset, Fetch v0 (magic 0 message sets, zstd rebuilt with
    gzip), OffsetCommit v0 or v1 of its position; restarted, OffsetFetch of the group's offset
    and the rest: every record exactly once, the offsets on the cluster."""
    import subprocess

    from kafka_broker import CACHE, BrokerUnavailable, _pom, _resolve

    try:
        cp = _resolve(CACHE / "kafka_2.10-0.8.2.2", _pom("kafka_2.10", "0.8.2.2"), "kafka_2.10:0.8.2.2",
                      ("java", "javac", "mvn"))
    except BrokerUnavailable as exc:
        pytest.skip(str(exc)[:300])
    source = Path(__file__).parent / "java" / "ScalaSimpleConsumer.java"
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", cp, str(source)], check=True, capture_output=True)
    topic, want = kafka_4_topic
    group = f"scala-0.8.2-v{commit_version}"

    def run(address: str, spec: str, start: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["java", "-Xmx256m", "-cp", os.pathsep.join([cp, str(tmp_path)]),
                               "ScalaSimpleConsumer", address, group, spec, start, str(commit_version),
                               "60000"], capture_output=True, text=True, timeout=120)

    direct = run(kafka_broker.bootstrap, f"{topic}:0:1", "earliest")
    assert direct.returncode == 1 and not direct.stdout, direct.stderr[-2000:]   # Kafka 4 closes on Metadata v0
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), zstd_codec="gzip") as server:
        gateway = f"127.0.0.1:{server.port}"
        first = run(gateway, ",".join(f"{t}:{p}:{len(rows) // 3}" for (t, p), rows in sorted(want.items())),
                    "earliest")
        assert first.returncode == 0, first.stderr[-3000:]
        got = _java_lines(first.stdout)
        second = run(gateway, ",".join(f"{t}:{p}:{len(rows) - len(got[(t, p)])}"
                                       for (t, p), rows in sorted(want.items())), "committed")
        assert second.returncode == 0, second.stderr[-3000:]
        rest = _java_lines(second.stdout)
    for key, rows in rest.items():
        got[key].extend(rows)
    assert got == want
    assert committed_upstream(kafka_broker.bootstrap, group, topic, 2) == {
        p: rows[-1][0] + 1 for (_, p), rows in want.items()}


# --- transactions through the gateway ------------------------------------------------------------

def read_through(port: int, topic: str, partitions: list[int], count: int, isolation: str) -> list[tuple]:
    """confluent-kafka (Fetch v4+: it asks for read_committed with the aborted lists) through
    the gateway: (partition, value) of every data record."""
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"txn-{isolation}",
                            "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    idle_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.value()))
                idle_until = None
            elif len(out) >= count:
                idle_until = idle_until or time.monotonic() + 2     # nothing more may come
                if time.monotonic() > idle_until:
                    break
    finally:
        consumer.close()
    return sorted(out)


def test_read_committed_through_the_gateway_is_exact(mock_gateway):
    """Committed and aborted transactions (the mock lists no aborted transactions in its
    Fetch answers: the gateway's consumer reads the markers): a read_committed client gets the
    committed records only, a read_uncommitted one every data record, old ones too."""
    from test_consumer import transactional_history

    cluster, server, _, _ = mock_gateway
    topic = "gateway-transactions"
    cluster.create_topic(topic)
    committed, everything = transactional_history(cluster, topic, [0, 1])
    assert len(committed) < len(everything)
    assert read_through(server.port, topic, [0, 1], len(committed), "read_committed") == committed
    assert read_through(server.port, topic, [0, 1], len(everything), "read_uncommitted") == everything
    old = read_kafka_python(server.port, topic, 2, len(everything), (0, 10, 1))
    assert sorted((p, v) for p, _, _, v in old) == everything


def test_read_committed_through_the_gateway_from_kafka_4(kafka_broker):
    """The same against a Kafka 4.1 broker, whose Fetch answers list the aborted transactions."""
    from test_consumer_kafka import write_transactions

    topic = "gateway-transactions-k4"
    kafka_broker.create_topic(topic, 2)
    committed, everything = write_transactions(kafka_broker.bootstrap, topic, 2, "gateway-k4")
    committed, everything = sorted(committed), sorted(everything)
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0)) as server:
        assert read_through(server.port, topic, [0, 1], len(committed), "read_committed") == committed
        assert read_through(server.port, topic, [0, 1], len(everything), "read_uncommitted") == everything


def test_a_fetch_inside_a_batch_gets_the_brokers_batches_byte_for_byte(kafka_broker):
    """Kafka answers a fetch offset inside a batch with the whole batch (the client skips the
    offsets before its own); so does the gateway, from the bytes the cluster sent, not a batch
    re-encoded from the offset (for lz4, decompressed and compressed again)."""
    from blocking_client import BlockingClient

    topic = "gateway-inside-a-batch"
    kafka_broker.create_topic(topic, 1)
    producer = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 1000,
                            "compression.type": "lz4"})
    for batch in range(3):                    # three batches of 50 records
        for i in range(50):
            producer.produce(topic, b"v%d-%d" % (batch, i), partition=0)
        producer.flush(30)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)

    def records(client, offset: int) -> bytes:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:    # (the gateway's first answer may come before the data)
            part = client.fetch([(topic, [(0, offset, 1 << 20)])], api_version=12,
                                max_wait_ms=300).responses[0].partitions[0]
            assert part.error_code == 0, part.error_code
            if part.records:
                return bytes(part.records)
        raise AssertionError(f"nothing at offset {offset}")

    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0)) as server, \
            BlockingClient(host, int(port), timeout=30) as direct, \
            BlockingClient("127.0.0.1", server.port, timeout=30) as gateway:
        for offset in (75, 0, 149, 120):      # a seek inside a batch, then the starts of others
            assert records(gateway, offset) == records(direct, offset), offset


def test_read_uncommitted_through_the_gateway_passes_an_open_transaction(kafka_broker):
    """A transaction left open holds the last stable offset back, not the high watermark: Kafka
    serves read_uncommitted clients (every Fetch v0-3 client is one) up to the high watermark,
    the open transaction's records and the plain ones after them.  Through the gateway too (its
    read_uncommitted consumer follows them past the LSO); read_committed ones stop at the LSO."""
    topic = "gateway-open-transaction"
    kafka_broker.create_topic(topic, 1)
    plain = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        plain.produce(topic, value=b"before %d" % i, partition=0)
    plain.flush(30)
    txn = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "gateway-open",
                       "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic, value=b"open %d" % i, partition=0)
    txn.flush(30)
    for i in range(20):
        plain.produce(topic, value=b"after %d" % i, partition=0)
    plain.flush(30)
    try:
        everything = sorted([(0, b"before %d" % i) for i in range(10)] + [(0, b"open %d" % i) for i in range(5)]
                            + [(0, b"after %d" % i) for i in range(20)])
        committed = [(0, b"before %d" % i) for i in range(10)]
        port = int(kafka_broker.bootstrap.rsplit(":", 1)[1])
        assert read_through(port, topic, [0], len(everything), "read_uncommitted") == everything   # Kafka itself
        with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0)) as server:
            assert read_through(server.port, topic, [0], len(committed), "read_committed") == sorted(committed)
            assert read_through(server.port, topic, [0], len(everything), "read_uncommitted") == everything
            old = read_kafka_python(server.port, topic, 1, len(everything), (0, 10, 1))    # Fetch v3
            assert sorted((p, v) for p, _, _, v in old) == everything
            assert server.view.tail_consumer is not None
    finally:
        txn.abort_transaction(30)
