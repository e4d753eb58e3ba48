"""Sarama (Go, github.com/IBM/sarama from the module proxy) as the old clients Kafka 4 turns away,
through `serve --upstream --produce` (tests/go/sarama/main.go).

`V0_10_2_0` produces (Produce v2, magic 1) and consumes in a group (JoinGroup v1, SyncGroup v0,
OffsetCommit v2, Fetch v3); `V0_8_2_0` produces (Produce v0, magic 0) and consumes a partition
with its offset manager (OffsetCommit v1, OffsetFetch v1, Fetch v0).  What they produce is read
back from the cluster by confluent-kafka; what they read is what confluent-kafka produced; what
they commit is the group's committed offset on the cluster."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")

from kafkacodec.serve import Server  # noqa: E402

pytestmark = pytest.mark.service

SOURCE = Path(__file__).with_name("go") / "sarama"
CACHE = Path(os.environ.get("KAFKACODEC_JAR_CACHE", Path.home() / ".cache" / "kafkacodec"))


def rows(n: int) -> list[tuple[bytes | None, bytes]]:
    """What main.go sends."""
    return [(None if i % 9 == 4 else b"key-%d" % i, b"value %d " % i * (1 + i % 5)) for i in range(n)]


@pytest.fixture(scope="module")
def sarama() -> Path:
    """The client, built once per source (go build, modules from the proxy)."""
    if shutil.which("go") is None:
        pytest.skip("needs Go (Sarama is built from the module proxy)")
    digest = hashlib.sha256(b"".join((SOURCE / name).read_bytes()
                                     for name in ("main.go", "go.mod", "go.sum"))).hexdigest()[:16]
    binary = CACHE / f"sarama-{digest}"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(f".{os.getpid()}.tmp")
        build = subprocess.run(["go", "build", "-o", str(tmp), "."], cwd=SOURCE, capture_output=True,
                               text=True, timeout=900)
        if build.returncode != 0:
            pytest.fail(f"go build failed:\n{build.stderr[-3000:]}")
        os.replace(tmp, binary)
    return binary


def run(binary: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=120)


def read_lines(out: str) -> list[tuple[int, bytes | None, bytes | None]]:
    got = []
    for line in out.splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[0].isdigit():
            got.append((int(parts[0]), None if parts[1] == "-" else bytes.fromhex(parts[1]),
                        None if parts[2] == "-" else bytes.fromhex(parts[2])))
    return got


def read_cluster(bootstrap: str, topic: str, count: int) -> list[tuple]:
    from test_serve_produce import read_cluster as read
    return read(bootstrap, topic, count)


def create(cluster, server, topic: str) -> None:
    """A topic on the cluster, once the gateway knows it (Sarama retries for 300 ms only)."""
    cluster.create_topic(topic)
    deadline = time.monotonic() + 20
    while server.view.partition(topic, 0) is None and time.monotonic() < deadline:
        server.view.refresh()
        time.sleep(0.1)
    assert server.view.partition(topic, 0) is not None


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.committed([ck.TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def gateway():
    from mock_cluster import MockCluster

    cluster = MockCluster(3)
    with Server(upstream=cluster.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        yield cluster, server


@pytest.mark.parametrize("version,codec", [("0.10.2.0", "snappy"), ("0.10.2.0", "lz4"),
                                           ("0.8.2.0", "gzip"), ("0.8.2.0", "none")])
def test_sarama_produces_through_the_gateway(gateway, sarama, version, codec):
    cluster, server = gateway
    topic = f"sarama-{version}-{codec}"
    create(cluster, server, topic)
    result = run(sarama, "produce", f"127.0.0.1:{server.port}", topic, version, 50, codec)
    assert result.returncode == 0 and "sent 50" in result.stdout, result.stderr[-2000:]
    got = read_cluster(cluster.bootstrap, topic, 50)
    assert [(k, v) for _, k, v, _ in got] == rows(50)


@pytest.mark.parametrize("mode,version", [("group", "0.10.2.0"), ("partition", "0.8.2.0")])
def test_sarama_consumes_and_commits_through_the_gateway(gateway, sarama, mode, version):
    cluster, server = gateway
    topic, group = f"sarama-read-{mode}", f"sarama-{mode}"
    create(cluster, server, topic)
    produced = cluster.produce(topic, [(0, key, value, None, None) for key, value in rows(40)],
                               **{"compression.type": "zstd"})
    result = run(sarama, mode, f"127.0.0.1:{server.port}", topic, version, 40, group)
    assert result.returncode == 0 and "committed" in result.stdout, result.stderr[-2000:]
    got = read_lines(result.stdout)
    assert got == [(offset, key, value) for (_, offset), (key, value) in sorted(produced.items())]
    # the group's offset is the cluster's: a consumer of the cluster itself resumes there
    assert committed(cluster.bootstrap, group, topic) == 40
    # and Sarama resumes there too: nothing more to read, the commit stays
    again = run(sarama, mode, f"127.0.0.1:{server.port}", topic, version, 0, group)
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.broker
def test_sarama_writes_and_reads_kafka_4_through_the_gateway(kafka_broker, sarama):
    topic, group = "sarama-k4", "sarama-k4-group"
    kafka_broker.create_topic(topic, 1)
    # directly, Kafka 4.1 turns Sarama V0_10_2_0 away
    direct = run(sarama, "produce", kafka_broker.bootstrap, topic, "0.10.2.0", 1, "none")
    assert direct.returncode != 0, direct.stdout
    with Server(upstream=kafka_broker.bootstrap, listen=("127.0.0.1", 0), produce=True) as server:
        gateway = f"127.0.0.1:{server.port}"
        for version, codec in (("0.8.2.0", "gzip"), ("0.10.2.0", "lz4")):
            result = run(sarama, "produce", gateway, topic, version, 30, codec)
            assert result.returncode == 0, result.stderr[-2000:]
        result = run(sarama, "group", gateway, topic, "0.10.2.0", 60, group)
        assert result.returncode == 0, result.stderr[-2000:]
    assert [(k, v) for _, k, v in read_lines(result.stdout)] == rows(30) * 2
    assert [(k, v) for _, k, v, _ in read_cluster(kafka_broker.bootstrap, topic, 60)] == rows(30) * 2
    assert committed(kafka_broker.bootstrap, group, topic) == 60
