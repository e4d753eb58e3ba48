"""Old clients (Fetch v0-3) through `kafkacodec serve`: lazy down-conversion with KIP-283's
framing, one memory pool for every conversion, progress over batches that convert to nothing,
zstd, and message.downconversion.enable.  Real clients: kafka-python with api_version (0, 9)
(Fetch v1, magic 0) and (0, 10, 1) (Fetch v3, magic 1), librdkafka with
api.version.request=false and broker.version.fallback=0.9.0.1, aiokafka limited to Fetch v3."""

from __future__ import annotations

import io
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from kafkacodec import MemoryRecordsBuilder, SimpleMemoryPool
from kafkacodec.lazy import LazyDownConvertRecords
from kafkacodec.serve import Server

from serve_support import (aiokafka_read, confluent_read, entries, expected, kafka_python_read,
                           make_log_dir, old_fetch, records_of)

pytest.importorskip("kafka")

def librdkafka_09(bootstrap: str, want: dict, **kw) -> dict:
    """librdkafka as a 0.9 client.  Its Metadata v0 reader sizes its scratch memory from the
    response's length and runs short on responses of 4 topics with short names (a real
    broker's answer is the same bytes), so it asks for at most 2 topics at a time."""
    topics = sorted({t for t, _ in want})
    got: dict = {}
    for i in range(0, len(topics), 2):
        part = {k: v for k, v in want.items() if k[0] in topics[i:i + 2]}
        got.update(confluent_read(bootstrap, part, **{
            "api.version.request": False, "broker.version.fallback": "0.9.0.1",
            "isolation.level": "read_uncommitted"}, **kw))
    return got


OLD_CLIENTS = {
    "kafka-python-0.9": lambda b, want, **kw: kafka_python_read(b, want, api_version=(0, 9), **kw),
    "kafka-python-0.10.1": lambda b, want, **kw: kafka_python_read(b, want, api_version=(0, 10, 1), **kw),
    "librdkafka-0.9.0.1": librdkafka_09,
}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("old") / "logs")


@pytest.fixture(scope="module")
def server(log_dir):
    # zstd batches rebuilt with LZ4 (opt-in): old clients then read every record
    with Server([str(log_dir)], listen=("127.0.0.1", 0), zstd_codec="lz4",
                max_conversion_memory=4 << 20) as running:
        yield running


def fetch_versions(server) -> set[str]:
    return {s.labels["version"] for m in server.metrics.registry.collect() for s in m.samples
            if s.name == "kafka_network_requestmetrics_requests_total" and s.labels["request"] == "Fetch"}


@pytest.mark.parametrize("client", sorted(OLD_CLIENTS))
def test_old_clients_read_every_record_by_assign(server, log_dir, client):
    want = expected(log_dir)
    assert OLD_CLIENTS[client](f"127.0.0.1:{server.port}", want) == want


def test_the_old_clients_really_fetched_old_versions(server, log_dir):
    want = expected(log_dir, {"v1only": 1})
    for client in OLD_CLIENTS.values():
        client(f"127.0.0.1:{server.port}", want)
    assert {"1", "3"} <= fetch_versions(server)            # magic 0 and magic 1 targets


@pytest.mark.parametrize(("highest", "topics"), [(1, {"legacy": 1}), (3, {"v1only": 1, "modern": 1})])
def test_aiokafka_limited_to_old_fetch_versions(log_dir, highest, topics):
    """aiokafka takes a response's first magic for every entry.  `legacy` stores magic 0 then
    1: at Fetch v1 it comes all magic 0 and aiokafka reads it exactly (at v4+ it misreads it).
    aiokafka cannot decode magic-0 LZ4, so the LZ4 topics are read at Fetch v3 (magic 1)."""
    from aiokafka.protocol.fetch import FetchRequest

    want = expected(log_dir, topics)
    original = FetchRequest._CLASSES
    FetchRequest._CLASSES = [c for c in original if c.API_VERSION <= highest]  # aiokafka's choice
    try:
        with Server([str(log_dir)], listen=("127.0.0.1", 0), zstd_codec="gzip") as srv:
            assert aiokafka_read(f"127.0.0.1:{srv.port}", want) == want
            assert fetch_versions(srv) == {str(highest)}
    finally:
        FetchRequest._CLASSES = original


def write_partition(root: Path, topic: str, batches: list[bytes]) -> Path:
    directory = root / f"{topic}-0"
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(batches))
    return directory


def v2(offset: int, count: int, codec: str = "none", value: bytes = b"x" * 100, **kwargs) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=offset, **kwargs)
    for i in range(count):
        b.append(1_700_000_000_000 + offset + i, b"k%d" % (offset + i), value, [])
    return b.build()


@pytest.mark.parametrize(("version", "magic"), [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_kip283_framing(server, log_dir, version, magic):
    """The committed size is max(bytes read, first converted batch); entries are of the target
    magic; what follows the last complete entry is a cut entry or an overflow stub (int64 -1,
    size > what is left), and the records are those stored."""
    error, hw, data = old_fetch(server.port, version, "modern", 0, 0, max_bytes=4000)
    assert error == 0 and hw == 1600
    found, tail = entries(data)
    assert found and {m for _, m, _ in found} == {magic}
    assert len(data) >= 4000                               # at least the bytes read
    if tail[:8] == b"\xff" * 8:
        assert struct.unpack(">i", tail[8:12])[0] > len(tail) - 12
    stored = expected(log_dir, {"modern": 1})[("modern", 0)]
    got = records_of(data)
    assert got == stored[:len(got)] and len(got) > 10


def test_first_batch_larger_than_the_fetch_size_is_sent_whole(server):
    for version in (1, 3):
        error, _, data = old_fetch(server.port, version, "modern", 0, 0, max_bytes=10)
        found, _ = entries(data)
        assert error == 0 and found, version


def test_zstd_without_recompression_ends_the_data_before_it(tmp_path):
    """zstd_codec=None (`--zstd-downconvert-codec refuse`, Kafka's way): batches sharing a chunk
    with a zstd batch are sent; the zstd batch itself is UNSUPPORTED_COMPRESSION_TYPE (76) when
    fetched (Kafka fails the whole chunk)."""
    batches = [v2(0, 3), v2(3, 3, "gzip"), v2(6, 3, "lz4"), v2(9, 3, "zstd"), v2(12, 3)]
    write_partition(tmp_path, "z", batches)
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), zstd_codec=None) as srv:
        for version in (1, 3):
            error, _, data = old_fetch(srv.port, version, "z", 0, 0)
            assert error == 0
            assert [r[0] for r in records_of(data)] == list(range(9))   # the three before zstd
            error, _, data = old_fetch(srv.port, version, "z", 0, 9)
            assert error == 76 and data == b""
            assert [r[0] for r in records_of(old_fetch(srv.port, version, "z", 0, 12)[2])] == [12, 13, 14]
        # Fetch v4+ gets the stored bytes, zstd included
        from blocking_client import BlockingClient
        with BlockingClient("127.0.0.1", srv.port) as client:
            part = client.fetch([("z", [(0, 0, 1 << 20)])], api_version=11, max_wait_ms=0).responses[0].partitions[0]
            assert bytes(part.records) == b"".join(batches)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "default"])
def test_zstd_recompressed_for_old_clients(tmp_path, codec):
    """Old clients read every record of a log with zstd batches, by default (gzip) too."""
    batches = [v2(0, 3), v2(3, 4, "zstd"), v2(7, 2)]
    write_partition(tmp_path, "z", batches)
    want = {("z", 0): [(i, b"k%d" % i, b"x" * 100) for i in range(9)]}
    given = {} if codec == "default" else {"zstd_codec": codec}
    codec = "gzip" if codec == "default" else codec
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), **given) as srv:
        assert kafka_python_read(f"127.0.0.1:{srv.port}", want, api_version=(0, 10, 1)) == want
        error, _, data = old_fetch(srv.port, 3, "z", 0, 3)
        wrapper = entries(data)[0][0]
        assert error == 0 and wrapper[1] == 1
        attributes = data[17]
        assert attributes & 0x07 == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}[codec]


@pytest.mark.parametrize("zstd_codec", ["gzip", "lz4", None])
def test_fetch_below_v10_gets_zstd_batches_rebuilt_as_v2(tmp_path, zstd_codec):
    """Fetch v4-v9 cannot carry zstd (KIP-110): the zstd batch comes back as a v2 batch with the
    configured codec, its producer state, offsets (a compaction gap too), timestamps and
    headers kept, the others byte for byte (kafka-python reads them all); None answers
    UNSUPPORTED_COMPRESSION_TYPE (76) as Kafka; Fetch v10+ gets the stored bytes."""
    from blocking_client import BlockingClient
    from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

    zstd = MemoryRecordsBuilder(magic=2, compression="zstd", base_offset=3, producer_id=41, producer_epoch=2,
                                base_sequence=3, partition_leader_epoch=5)
    for i, offset in enumerate([3, 4, 6]):                     # offset 5 compacted away
        zstd.append_with_offset(offset, 1_700_000_000_100 + i, b"z%d" % offset, b"zstd %d" % offset,
                                [("h", b"%d" % i)])
    batches = [v2(0, 3), zstd.build(), v2(7, 2, "lz4")]
    write_partition(tmp_path, "z", batches)
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), zstd_codec=zstd_codec) as srv, \
            BlockingClient("127.0.0.1", srv.port) as client:
        def fetch(version, offset=0):
            return client.fetch([("z", [(0, offset, 1 << 20)])], api_version=version,
                                max_wait_ms=0).responses[0].partitions[0]

        assert bytes(fetch(10).records) == b"".join(batches)
        for version in (4, 9):
            part = fetch(version)
            if zstd_codec is None:
                assert part.error_code == 76 and not bytes(part.records or b"")
                continue
            data = bytes(part.records)
            assert part.error_code == 0 and data.startswith(batches[0])
            got = []
            while True:
                records = KafkaPythonRecords(data)            # a partial last batch is left out
                while (batch := records.next_batch()) is not None:
                    got += [(batch.compression_type, batch.producer_id, batch.producer_epoch,
                             batch.base_sequence, r.offset, r.timestamp, r.key, r.value, list(r.headers))
                            for r in batch]
                if got[-1][4] == 8:
                    break
                # the lazy send declares the stored size (KIP-283): a rebuilt batch that grew
                # pushes the last one out of this answer, and the client fetches it next
                part = fetch(version, got[-1][4] + 1)
                data = bytes(part.records)
                assert part.error_code == 0 and data == batches[2]
            rebuilt = [g for g in got if g[6] and g[6].startswith(b"z")]
            codec_id = {"gzip": 1, "lz4": 3}[zstd_codec]
            assert rebuilt == [(codec_id, 41, 2, 3, offset, 1_700_000_000_100 + i, b"z%d" % offset,
                                b"zstd %d" % offset, [("h", b"%d" % i)]) for i, offset in enumerate([3, 4, 6])]
            assert [g[4] for g in got] == [0, 1, 2, 3, 4, 6, 7, 8]


def test_downconversion_switches(tmp_path, log_dir):
    """message.downconversion.enable: off answers UNSUPPORTED_VERSION (35) to a fetch that needs
    conversion; data already old enough passes; per topic over the server default."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0), downconversion=False,
                topic_downconversion={"mixed": True}) as srv:
        assert old_fetch(srv.port, 3, "modern", 0, 0)[0] == 35
        assert old_fetch(srv.port, 3, "mixed", 0, 0)[0] == 0             # the topic's override
        error, _, data = old_fetch(srv.port, 3, "v1only", 0, 0)          # magic 1 already
        assert error == 0 and data == (log_dir / "v1only-0" / "00000000000000000000.log").read_bytes()
        assert old_fetch(srv.port, 1, "v1only", 0, 0)[0] == 35           # v1 -> v0 needs it
    with Server([str(log_dir)], listen=("127.0.0.1", 0), topic_downconversion={"modern": False}) as srv:
        assert old_fetch(srv.port, 3, "modern", 0, 0)[0] == 35
        assert old_fetch(srv.port, 3, "legacy", 0, 0)[0] == 0


def test_without_downconversion_a_newer_batch_past_the_fetch_size_refuses_nothing(tmp_path):
    """Off, a fetch whose bytes are all magic 1 passes even when a v2 batch follows just past
    its size (the range converted from is read wider only when converting)."""
    old = MemoryRecordsBuilder(magic=1, base_offset=0)
    for i in range(5):
        old.append(1_700_000_000_000 + i, b"k%d" % i, b"v" * 100)
    legacy = bytes(old.build())
    write_partition(tmp_path, "mixed1", [legacy, v2(5, 1, value=b"x")])   # whole within the wider read
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), downconversion=False) as srv:
        error, _, data = old_fetch(srv.port, 3, "mixed1", 0, 0, max_bytes=len(legacy))
        assert error == 0 and data == legacy
        assert old_fetch(srv.port, 3, "mixed1", 0, 5)[0] == 35


# --- progress over batches that convert to nothing ----------------------------------------------
def transactional_log(root: Path) -> list[tuple[int, bytes, bytes]]:
    """Data, a committed transaction, then its marker at the very end of the log."""
    batches = [v2(0, 2), v2(2, 3, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True),
               MemoryRecordsBuilder.build_end_txn_marker(True, 7, 0, coordinator_epoch=1, base_offset=5,
                                                         timestamp=1_700_000_000_100)]
    write_partition(root, "txn", batches)
    return [(i, b"k%d" % i, b"x" * 100) for i in range(5)]


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)])
def test_old_consumer_at_a_closing_marker_keeps_polling_without_error(tmp_path, api_version):
    from kafka import KafkaConsumer, TopicPartition

    want = transactional_log(tmp_path)
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{srv.port}", api_version=api_version,
                                 fetch_max_wait_ms=50, enable_auto_commit=False)
        tp = TopicPartition("txn", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 4                 # polls well past the end: no error
        while time.monotonic() < deadline:
            for msg in consumer.poll(timeout_ms=200).get(tp, []):
                got.append((msg.offset, msg.key, msg.value))
        consumer.close()
    assert got == want


def test_markers_filling_the_fetch_size_are_skipped(tmp_path):
    """A fetch whose bytes hold only batches that convert to nothing gets the next data, never
    a 12-byte overflow stub alone (Kafka 3.8's answer, on which kafka-python stops)."""
    markers = [MemoryRecordsBuilder.build_end_txn_marker(True, 7, 0, coordinator_epoch=1, base_offset=i,
                                                         timestamp=1) for i in range(20)]
    write_partition(tmp_path, "m", markers + [v2(20, 2)])
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        for version in (1, 3):
            error, hw, data = old_fetch(srv.port, version, "m", 0, 0, max_bytes=200)
            assert (error, hw) == (0, 22)
            assert [r[0] for r in records_of(data)] == [20, 21]
            assert old_fetch(srv.port, version, "m", 0, 22)[2] == b""      # the end: nothing


# --- one pool for every conversion ----------------------------------------------------------------
def test_a_refused_first_chunk_waits_like_missing_data(server, log_dir):
    pool = server.conversion_pool
    held = pool.try_allocate(pool.available_memory)              # strict: everything
    assert held is not None
    result: list = []
    thread = threading.Thread(target=lambda: result.append(
        old_fetch(server.port, 3, "modern", 0, 0, max_wait_ms=5000)))
    thread.start()
    time.sleep(0.5)
    assert not result                                            # waiting, not answered empty
    pool.release(held)
    thread.join(10)
    error, _, data = result[0]
    assert error == 0 and records_of(data)


@pytest.mark.skipif(os.environ.get("KAFKACODEC_SANITIZED") == "1",
                    reason="20 s of sockets under ASan; the pool and the converters under concurrent use "
                           "are fuzzed there (fuzz/concurrency.py)")
def test_many_old_consumers_share_a_small_pool(tmp_path):
    """The pool never gives out more than its size; when it refuses, partitions end early and
    the consumers fetch the rest: every consumer still reads every record."""
    batches, offset = [], 0
    for _ in range(120):
        batches.append(v2(offset, 20, value=b"v" * 900))
        offset += 20
    write_partition(tmp_path, "big", batches)
    want = {("big", 0): [(i, b"k%d" % i, b"v" * 900) for i in range(offset)]}
    size = 100 * 1024                        # a first batch, never a whole 128 KiB chunk
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), max_conversion_memory=size) as srv:
        pool = srv.conversion_pool
        lowest = [pool.available_memory]
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                lowest[0] = min(lowest[0], pool.available_memory)
                time.sleep(0.0005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        results: dict[int, dict] = {}

        def consume(i: int) -> None:
            results[i] = kafka_python_read(f"127.0.0.1:{srv.port}", want, api_version=(0, 10, 1))

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        stop.set()
        watcher.join()
        refusals = sum(s.value for m in srv.metrics.registry.collect() for s in m.samples
                       if s.name == "kafkacodec_serve_conversion_pool_refusals_total")
        assert pool.available_memory == size                     # every block came back
    assert all(results[i] == want for i in range(8))
    assert lowest[0] >= 0                                        # never past the bound
    assert refusals > 0                                          # and the bound was reached


# --- the conversion machinery (kafkacodec.lazy) ------------------------------------------------
def write_all(lazy) -> bytes:
    out = io.BytesIO()
    while not lazy.completed:
        lazy.write_to(out)
    return out.getvalue()


def test_pooled_conversion_is_byte_identical_and_gives_every_block_back():
    data = b"".join(v2(i * 5, 5, codec) for i, codec in enumerate(["none", "gzip", "lz4", "snappy"] * 30))
    pool = SimpleMemoryPool(1 << 20, 1 << 20, True)
    plain = write_all(LazyDownConvertRecords(data, 1, chunk_size=4096))
    lazy = LazyDownConvertRecords(data, 1, chunk_size=4096, pool=pool)
    assert pool.available_memory < 1 << 20                       # the first chunk is held
    assert write_all(lazy) == plain
    assert pool.available_memory == 1 << 20 and lazy.pool_refusals == 0


def test_a_refused_later_chunk_ends_the_data_with_overflow_stubs():
    data = b"".join(v2(i * 5, 5) for i in range(40))
    pool = SimpleMemoryPool(1 << 20, 1 << 20, True)
    lazy = LazyDownConvertRecords(data, 1, chunk_size=2048, pool=pool)
    taken = pool.try_allocate(pool.available_memory)             # nothing left for later chunks
    out = write_all(lazy)
    assert len(out) == lazy.size_in_bytes and lazy.pool_refusals == 1
    found, tail = entries(out)
    assert [r[0] for r in records_of(out)] == [0, 1, 2, 3, 4]    # the first chunk only
    assert tail[:8] == b"\xff" * 8                                # then a stub
    pool.release(taken)
    assert pool.available_memory == 1 << 20


def test_a_refused_first_chunk_commits_nothing():
    data = v2(0, 5)
    pool = SimpleMemoryPool(1000, 1000, True)
    taken = pool.try_allocate(1000)
    lazy = LazyDownConvertRecords(data, 1, pool=pool)
    assert lazy.refused and lazy.size_in_bytes == 0 and lazy.completed
    pool.release(taken)


def test_close_gives_back_what_a_half_written_conversion_holds():
    data = b"".join(v2(i * 5, 5) for i in range(40))
    pool = SimpleMemoryPool(1 << 20, 1 << 20, True)
    lazy = LazyDownConvertRecords(data, 1, chunk_size=2048, pool=pool)

    class Slow(io.RawIOBase):                  # takes 100 bytes, then would block
        taken = 0

        def writable(self):
            return True

        def write(self, b):
            if self.taken:
                return None
            self.taken = min(len(b), 100)
            return self.taken

    lazy.write_to(Slow())                                         # partly written
    assert pool.available_memory < 1 << 20
    lazy.close()
    assert pool.available_memory == 1 << 20
    lazy.close()                                                  # idempotent
