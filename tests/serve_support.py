"""Shared by the serve tests and bench/bench_serve.py: a multi-topic log directory with mixed
magics and every codec, what a consumer must read from it (computed from the segment files
with kafkacodec.FileRecords, independently of the server), and the real clients that read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from kafkacodec import FileRecords, MemoryRecordsBuilder
from kafkacodec.sample import write_sample_log

TOPICS = {"mixed": 2, "legacy": 1, "v1only": 1, "modern": 1}


def make_log_dir(root: Path, *, indexes: bool = True) -> Path:
    """`mixed` (the sample log: magic 0, 1 and 2, every codec incl. zstd, transactions, several
    segments; 2 partitions), `legacy` (magic 0 then 1, no LZ4), `v1only` (magic 1, every legacy
    codec, null keys and values) and `modern` (v2 without zstd, one segment with
    .index/.timeindex and partition.metadata)."""
    root.mkdir(parents=True, exist_ok=True)
    write_sample_log(root, topic="mixed", partitions=2, batches_per_segment=7, records_per_batch=12)
    legacy = root / "legacy-0"
    legacy.mkdir()
    offset = 0
    data = bytearray()
    for magic, codec in [(0, "none"), (0, "gzip"), (1, "none"), (1, "snappy"), (1, "gzip"), (0, "snappy")]:
        b = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=offset)
        for i in range(5):
            b.append(1_600_000_000_000 + offset + i if magic else -1, b"k%d" % (offset + i),
                     b"legacy value %d" % (offset + i), [])
        data += b.build()
        offset += 5
    (legacy / "00000000000000000000.log").write_bytes(bytes(data))
    v1only = root / "v1only-0"
    v1only.mkdir()
    data = bytearray()
    for offset, codec in zip(range(0, 40, 8), ["none", "gzip", "snappy", "lz4", "none"]):
        b = MemoryRecordsBuilder(magic=1, compression=codec, base_offset=offset)
        for i in range(8):
            b.append(1_610_000_000_000 + offset + i, None if i == 3 else b"v1-%d" % (offset + i),
                     None if i == 5 else b"magic one %d" % (offset + i), [])
        data += b.build()
    (v1only / "00000000000000000000.log").write_bytes(bytes(data))
    modern = root / "modern-0"
    modern.mkdir()
    data = bytearray()
    offset = 0
    for n, codec in enumerate(["none", "gzip", "snappy", "lz4"] * 40):
        b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=offset)
        for i in range(10):
            b.append(1_650_000_000_000 + 10 * (offset + i), b"m%d" % (offset + i),
                     os.urandom(8).hex().encode() * 20, [("h", b"v")])
        data += b.build()
        offset += 10
    (modern / "00000000000000000000.log").write_bytes(bytes(data))
    (modern / "partition.metadata").write_text("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n")
    if indexes:
        write_indexes(modern / "00000000000000000000.log")
        write_indexes(root / "mixed-0" / "00000000000000000000.log")
    return root


def write_indexes(segment: Path) -> None:
    """The .index and .timeindex a broker would have written (kafkacodec.logdir.indexes)."""
    from kafkacodec.arrow import scan_entries
    from kafkacodec.logdir.indexes import build_indexes

    data = segment.read_bytes()
    index, times = build_indexes(scan_entries(data), int(segment.stem), interval=1024)
    segment.with_suffix(".index").write_bytes(index)
    segment.with_suffix(".timeindex").write_bytes(times)


def partition_records(root: Path, topic: str, partition: int, *, committed: bool = False
                      ) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every data record of a partition, in offset order,
    read from its segment files; `committed` drops aborted transactions (batches of a producer
    from its first transactional batch to an ABORT marker)."""
    directory = root / f"{topic}-{partition}"
    rows: list[tuple[int, bytes | None, bytes | None, int]] = []
    open_txn: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for segment in sorted(directory.glob("*.log")):
        with FileRecords.open(segment) as records:
            for batch in records.batches():
                if batch.magic == 2 and batch.is_control:
                    first = next(iter(batch))
                    indexes = open_txn.pop(batch.producer_id, [])
                    if first.control_type == 0:          # ABORT
                        aborted.update(indexes)
                    continue
                for record in batch:
                    if batch.magic == 2 and batch.is_transactional:
                        open_txn.setdefault(batch.producer_id, []).append(len(rows))
                    rows.append((record.offset, record.key, record.value, record.timestamp))
    if committed:
        rows = [row for i, row in enumerate(rows) if i not in aborted]
    return rows


def expected(root: Path, topics: dict[str, int] | None = None, *, committed: bool = False
             ) -> dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]]:
    return {(t, p): [r[:3] for r in partition_records(root, t, p, committed=committed)]
            for t, n in (topics or TOPICS).items() for p in range(n)}


# --- clients -------------------------------------------------------------------------------------
def _done(got: dict[tuple[str, int], list[Any]], want: dict[tuple[str, int], list[Any]]) -> bool:
    return all(len(got.get(k, [])) >= len(v) for k, v in want.items())


def confluent_read(bootstrap: str, want: dict[tuple[str, int], list[Any]], *, group: str | None = None,
                   timeout: float = 60, **config: Any) -> dict[tuple[str, int], list[Any]]:
    from confluent_kafka import Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": group or "assign-only",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "fetch.wait.max.ms": 100, **config}
    consumer = Consumer(conf)
    if group is None:
        consumer.assign([TopicPartition(t, p, 0) for t, p in want])
    else:
        consumer.subscribe(sorted({t for t, _ in want}))
    got: dict[tuple[str, int], list[Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while not _done(got, want) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    raise AssertionError(f"confluent-kafka: {msg.error()}")
                got.setdefault((msg.topic(), msg.partition()), []).append(
                    (msg.offset(), msg.key(), msg.value()))
        if group is not None:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def kafka_python_read(bootstrap: str, want: dict[tuple[str, int], list[Any]], *, group: str | None = None,
                      timeout: float = 60, **config: Any) -> dict[tuple[str, int], list[Any]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             consumer_timeout_ms=int(timeout * 1000), **config)
    if group is None:
        consumer.assign([TopicPartition(t, p) for t, p in want])
        for t, p in want:
            consumer.seek(TopicPartition(t, p), 0)
    else:
        consumer.subscribe(sorted({t for t, _ in want}))
    got: dict[tuple[str, int], list[Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while not _done(got, want) and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for msg in messages:
                    got.setdefault((tp.topic, tp.partition), []).append((msg.offset, msg.key, msg.value))
        if group is not None:
            consumer.commit()
    finally:
        consumer.close()
    return got


def aiokafka_read(bootstrap: str, want: dict[tuple[str, int], list[Any]], *, group: str | None = None,
                  timeout: float = 60, **config: Any) -> dict[tuple[str, int], list[Any]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> dict[tuple[str, int], list[Any]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100, **config)
        await consumer.start()
        got: dict[tuple[str, int], list[Any]] = {}
        try:
            if group is None:
                consumer.assign([TopicPartition(t, p) for t, p in want])
                for t, p in want:
                    consumer.seek(TopicPartition(t, p), 0)
            else:
                consumer.subscribe(sorted({t for t, _ in want}))
            deadline = time.monotonic() + timeout
            while not _done(got, want) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for tp, messages in batches.items():
                    for msg in messages:
                        got.setdefault((tp.topic, tp.partition), []).append((msg.offset, msg.key, msg.value))
            if group is not None:
                await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


# --- raw Fetch v0-3 (kafka-python's request and response classes) ------------------------------
def old_fetch(port: int, version: int, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              max_wait_ms: int = 0, timeout: float = 10) -> tuple[int, int, bytes]:
    """(error code, high watermark, records bytes) of one Fetch v<version> partition."""
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    request = FetchRequest[version](
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 30,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])
    body = bytes(request.encode(version=version))
    header = struct.pack(">hhih", 1, version, 9, -1)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        data = recv_exactly(sock, size)
    decoded = FetchResponse.decode(data[4:], version=version).to_dict(json=False)
    part = decoded["responses"][0]["partitions"][0]
    return part["error_code"], part["high_watermark"], bytes(part["records"] or b"")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def entries(data: bytes) -> tuple[list[tuple[int, int, int]], bytes]:
    """(offset, magic, size) of the complete entries, and the bytes after them."""
    out, pos = [], 0
    while len(data) - pos >= 17:
        offset, size = struct.unpack_from(">qi", data, pos)
        if pos + 12 + size > len(data):
            break
        out.append((offset, data[pos + 16], 12 + size))
        pos += 12 + size
    return out, data[pos:]


def records_of(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        out += [(r.offset, r.key, r.value) for r in batch]
    return out


# --- the Java client ------------------------------------------------------------------------------
JAVA_DRIVER = Path(__file__).with_name("java") / "ServeConsumer.java"


def java_consumer_classpath(version: str) -> str | None:
    """kafka-clients <version> and its runtime dependencies (resolved by Maven into
    ~/.cache/kafkacodec, outside the repository), or None without java, javac or mvn."""
    from kafka_broker import BrokerUnavailable, client_classpath

    try:
        return client_classpath(version)
    except BrokerUnavailable:
        return None


def compile_java_driver(classes: Path, cp: str) -> None:
    subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(JAVA_DRIVER)], check=True,
                   capture_output=True)


@contextlib.contextmanager
def _java_consumer_command(cp: str, classes: Path, bootstrap: str, spec: str, group: str | None,
                           timeout: float, isolation: str, config: dict[str, str] | None,
                           log_level: str) -> Iterator[list[str]]:
    from kafka_broker import properties_text

    with tempfile.TemporaryDirectory(prefix="java-consumer-") as folder:
        extra = []
        if config:
            path = Path(folder) / "client.properties"
            path.write_text(properties_text(config), encoding="latin-1")
            extra = [str(path)]
        yield ["java", "-Xmx256m", f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
               "-cp", os.pathsep.join([cp, str(classes)]), "ServeConsumer",
               bootstrap, group or "-", isolation, spec, str(int(timeout * 1000)), *extra]


def run_java_consumer(cp: str, classes: Path, bootstrap: str, spec: str, *, group: str | None = None,
                      timeout: float = 90, isolation: str = "read_uncommitted",
                      config: dict[str, str] | None = None, log_level: str = "warn",
                      grace: float = 60) -> subprocess.CompletedProcess[str]:
    """ServeConsumer as it ran: `spec` TOPIC:PARTITION:COUNT[,...]; `config` more client settings
    (a properties file); the client's log (slf4j-simple, at `log_level`) on stderr.  Killed
    (subprocess.TimeoutExpired) `grace` seconds after its own `timeout`: an old client can block
    in poll() for good."""
    with _java_consumer_command(cp, classes, bootstrap, spec, group, timeout, isolation, config,
                                log_level) as command:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout + grace)


def watch_java_consumer(cp: str, classes: Path, bootstrap: str, spec: str, *, until: str, keep: str,
                        timeout: float = 30, config: dict[str, str] | None = None,
                        log_level: str = "debug", max_kept: int = 500) -> tuple[bool, list[str]]:
    """ServeConsumer run until a line of its stderr (its log, at `log_level`) matches the regex
    `until`, then killed: whether one did within `timeout`, and the lines that matched `keep`
    or `until` up to then (at most `max_kept`).  For a client that fails in a loop without
    ever raising (a debug log can grow by 50 MB a second)."""
    stop, wanted = re.compile(until), re.compile(keep)
    kept: list[str] = []
    matched = threading.Event()
    wake = threading.Event()                 # a match, or the end of its stderr (it exited)
    with _java_consumer_command(cp, classes, bootstrap, spec, None, timeout, "read_uncommitted", config,
                                log_level) as command:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, errors="replace")

        def read() -> None:
            assert process.stderr is not None
            try:
                for line in process.stderr:
                    if matched.is_set():
                        continue                 # drained until the kill
                    if (wanted.search(line) or stop.search(line)) and len(kept) < max_kept:
                        kept.append(line.rstrip("\n"))
                    if stop.search(line):
                        matched.set()
                        wake.set()
            finally:
                wake.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            wake.wait(timeout)
        finally:
            process.kill()
            process.wait(30)
            reader.join(30)
    found = matched.is_set()
    return found, kept


def java_read(cp: str, classes: Path, bootstrap: str, want: dict[tuple[str, int], list[Any]], *,
              group: str | None = None, timeout: float = 90, isolation: str = "read_uncommitted",
              config: dict[str, str] | None = None) -> dict[tuple[str, int], list[Any]]:
    """Kafka's own consumer reads the partitions (ServeConsumer.java) and prints one line per
    record: topic, partition, offset, key and value in hex ("-" for null)."""
    spec = ",".join(f"{t}:{p}:{len(v)}" for (t, p), v in sorted(want.items()))
    run = run_java_consumer(cp, classes, bootstrap, spec, group=group, timeout=timeout,
                            isolation=isolation, config=config)
    if run.returncode != 0:
        raise AssertionError(f"java consumer failed ({run.returncode}):\n{run.stderr[-4000:]}")
    got: dict[tuple[str, int], list[Any]] = {}
    for line in run.stdout.splitlines():
        topic, partition, offset, key, value = line.split(" ")
        got.setdefault((topic, int(partition)), []).append(
            (int(offset), None if key == "-" else bytes.fromhex(key),
             None if value == "-" else bytes.fromhex(value)))
    return got


class Appender(threading.Thread):
    """Appends batches to a partition's active segment while clients read (a live log)."""

    def __init__(self, segment: Path, start_offset: int, batches: int, interval: float):
        super().__init__(daemon=True)
        self.segment, self.offset, self.batches, self.interval = segment, start_offset, batches, interval
        self.written: list[tuple[int, bytes | None, bytes | None]] = []

    def run(self) -> None:
        for _ in range(self.batches):
            time.sleep(self.interval)
            b = MemoryRecordsBuilder(magic=2, compression="lz4", base_offset=self.offset)
            for i in range(3):
                key, value = b"live-%d" % (self.offset + i), b"appended %d" % (self.offset + i)
                b.append(int(time.time() * 1000), key, value, [])
                self.written.append((self.offset + i, key, value))
            with open(self.segment, "ab") as file:
                file.write(b.build())
            self.offset += 3

