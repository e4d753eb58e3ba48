"""Every fenced block of README.md and docs/*.md runs in a test as written (the issue: "every
README and docs block is run by the tests as written, placeholders filled by the test, not by
the reader").

How a block runs here:
- its text is taken from the file at test time and run unchanged, except for the placeholders
  listed in SUBSTITUTIONS (absolute host paths become tmp paths, host:port placeholders the
  address of what the test started), the one table of every edit made to a block's text;
- the names a block leaves to the reader (`fetch_response_records`, `sock`, `spark`, `df`...)
  are bound by the test before it runs, files it names by a relative path are in the working
  directory (the sample log of `kafkacodec.cli.generate`, one per module), and what it talks to
  is started (librdkafka's mock cluster, `kafkacodec serve` in-process, a SparkSession, moto's
  S3 server);
- each test asserts what the block did: its output, or the names it left.

RUNS maps (file, key) to the test that runs the block, key being the block's index among the
file's fenced python/bash/sh/console blocks or the start of its first line; blocks run by
other test files (tests/test_readme.py runs README's bash blocks in a fresh clone) are listed
with that test.  EXEMPT lists the blocks no test runs, each with its reason.
test_every_block_is_run_or_exempt fails on a block in neither (nor in the RUNS of
tests/test_docs_blocks_services.py, which covers docs/serve.md, security.md, mirroring.md,
consumer.md and README's sh blocks).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

import kafkacodec
from kafkacodec.cli import generate

sys.path.insert(0, os.path.dirname(__file__))
from doc_blocks import fenced_blocks  # noqa: E402
from isolated import child_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THIS = "tests/test_docs_blocks.py"
README_TEST = "tests/test_readme.py::test_a_readme_block_runs_as_shown_in_a_fresh_clone"


# --- the blocks -----------------------------------------------------------------------------
def documented_files() -> list[str]:
    return ["README.md"] + [f"docs/{p.name}" for p in sorted(DOCS.glob("*.md"))]


def matches(key: int | str, index: int, text: str) -> bool:
    return key == index if isinstance(key, int) else text.lstrip().startswith(key)


def find_block(name: str, key: int | str) -> str:
    found = [text for i, (_, text) in enumerate(fenced_blocks(name)) if matches(key, i, text)]
    assert len(found) == 1, f"{name}: {len(found)} blocks match {key!r}"
    return found[0]


#: Every edit a test makes to a block's text: (file, block) -> {placeholder: what replaces it}.
#: Only absolute host paths (a tmp path instead) and host:port placeholders (the address of
#: what the test started); block() refuses any other.
SUBSTITUTIONS: dict[tuple[str, int | str], dict[str, str]] = {
    ("README.md", "from kafkacodec.consumer import Consumer"): {
        "broker:9092": "the bootstrap address of librdkafka's mock cluster"},
    ("README.md", "from kafkacodec.logdir import plan, read_split"): {
        "/var/kafka-logs": "the sample log (kafkacodec.cli.generate)"},
    ("README.md", "from kafka import KafkaConsumer"): {
        "127.0.0.1:9092": "the address of a kafkacodec serve (Server) over the sample log"},
    ("README.md", "from kafkacodec.spark import write_log"): {
        "/data/kafka-logs": "the sample log",
        "/tmp/rewritten-log": "a tmp directory"},
    ("docs/logdir.md", "from kafkacodec.logdir import"): {
        "/var/kafka-logs": "the sample log"},
    ("docs/cli.md", "kafkacodec read /var/kafka-logs"): {
        "/var/kafka-logs": "the sample log"},
    ("docs/spark-and-cli.md", "from kafkacodec.spark import register"): {
        "/var/kafka-logs": "the sample log",
        "/tmp/out-log": "a tmp directory"},
    ("docs/spark-and-cli.md", "from kafkacodec.spark import write_log"): {
        "/data/rewritten-log": "a tmp directory",
        "http://minio:9000": "moto's S3 server (tests/s3_server.py)",
        "/data/log": "a tmp directory"},
    ("docs/spark-and-cli.md", "PYSPARK_PYTHON=/opt/venv/bin/python"): {
        "/opt/venv/bin/python": "this interpreter",
        "spark://host:7077": "local[1] (no cluster here; tests/test_spark_cluster.py has one)",
        "/shared/kafka-logs": "the sample log",
        "/shared/kafka-parquet": "a tmp directory"},
}


def block(name: str, key: int | str, values: dict[str, str] | None = None) -> str:
    """The block's text with SUBSTITUTIONS[(name, key)] filled from `values` (each placeholder
    of the table must be given and must occur in the block)."""
    text = find_block(name, key)
    table = SUBSTITUTIONS.get((name, key), {})
    values = values or {}
    assert set(values) == set(table), f"{name} {key!r}: substitutions {sorted(values)} vs {sorted(table)}"
    for placeholder, value in values.items():
        assert placeholder in text, f"{name} {key!r}: {placeholder!r} is no longer in the block"
        text = text.replace(placeholder, value)
    return text


def run_python(name: str, key: int | str, names: dict | None = None,
               values: dict[str, str] | None = None) -> dict:
    """exec the block with `names` bound (what it leaves to the reader); returns its names."""
    scope = {"__name__": "__doc_block__", **(names or {})}
    exec(compile(block(name, key, values), f"{name} [{key}]", "exec"), scope)
    return scope


RUNS: dict[tuple[str, int | str], str] = {}


def runs(*keys: tuple[str, int | str]):
    """Register the decorated test as the one that runs these blocks."""
    def register(test):
        for key in keys:
            assert key not in RUNS, key
            RUNS[key] = f"{THIS}::{test.__name__}"
        return test
    return register


# README's ```bash blocks run in a fresh clone (tests/test_readme.py, marked slow: scripts/test.sh
# runs it); its `pip install` blocks are checked there (every extra named exists).
RUNS.update({
    ("README.md", "bash scripts/run.sh"): README_TEST,
    ("README.md", "pip install kafkacodec "): README_TEST,
    ("README.md", "source .venv/bin/activate"): README_TEST,
    ("README.md", ".venv/bin/python -m pip install"): README_TEST,
    ("README.md", "python bench/bench_java.py --runs 5 --write-docs"): README_TEST,
})

#: Files whose blocks no test runs, and why.
EXEMPT_FILES: dict[str, str] = {
    "docs/results.md": "a generated report (bench/report.py writes it): its blocks record the command "
                       "lines that produced its measurements (hours, peers, Kafka clusters); README's "
                       "benchmark block runs report.py in its quick mode",
}

#: Blocks no test runs, and why.  test_exemption_reasons_hold checks what each reason claims.
EXEMPT: dict[tuple[str, int | str], str] = {
    ("docs/reliability.md", "python fuzz/fuzz_targets.py list"):
        "the fuzz campaign (an hour by default): .ci/run runs it on every CI run, shortened "
        "(scripts/sanitize.sh -x with SANITIZE_FUZZ_SECONDS, or fuzz_targets.py replay + campaign)",
    ("docs/reliability.md", "bash scripts/sanitize.sh"):
        "the sanitizer build and suite: .ci/run runs scripts/sanitize.sh -x itself",
    ("docs/DEVELOPING.md", "/work/venv/bin/python setup.py build_ext --inplace"):
        "build commands of the dev venv: every in-place build runs them (and pytest the last one)",
    ("docs/DEVELOPING.md", "/work/venv/bin/python scripts/api_docs.py"):
        "dev-venv tools over the in-place build (PYTHONPATH=.): tests/test_api_docs.py runs "
        "scripts/api_docs.py's build(), tests/test_readme.py runs bench/report.py --quick",
    ("docs/packaging.md", "python -m build"):
        "build commands: scripts/test.sh runs `python -m build --wheel --no-isolation` on every "
        "CI run, the workflows `python -m build --sdist` / `--wheel`",
    ("docs/logdir.md", "SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$PWD/.venv/bin/python "
                       ".venv/bin/python bench/bench_tiered.py"):
        "a benchmark (Spark and an S3 server, minutes; bench/ does not run in CI): "
        "tests/test_tiered.py checks the same 1% range's bytes fetched on a partition Kafka tiered",
    ("docs/spark-and-cli.md", "from kafkacodec.spark import jvm"):
        "starts a SparkSession with the JVM part's jar, which a process with a session cannot: "
        "tests/test_spark_jvm.py starts that session (spark.jars) in a child process and runs "
        "these queries and more, against the Python source's answers",
    ("docs/spark-and-cli.md", "python -m venv env"):
        "creates a venv from PyPI and packs it (network, minutes); the same job on a cluster is "
        "run by tests/test_spark_cluster.py",
}


# --- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_log(tmp_path_factory) -> Path:
    """One generated log directory for the module: topics orders and clicks, 2 partitions,
    magics 0/1/2, every codec, committed and aborted transactions.  Blocks only read it."""
    root = tmp_path_factory.mktemp("sample-log")
    generate(root)
    return root


def log_segment(root: Path, topic: str = "orders", partition: int = 0, index: int = 0) -> Path:
    return sorted((root / f"{topic}-{partition}").glob("*.log"))[index]


def build(base_offset: int, values: list[bytes], compression: str = "none") -> bytes:
    builder = kafkacodec.MemoryRecordsBuilder(magic=2, compression=compression, base_offset=base_offset)
    for i, value in enumerate(values):
        builder.append(1_700_000_000_000 + i, b"k%d" % (base_offset + i), value)
    return builder.build()


class Receiver:
    """The far end of a socket pair, read to EOF in a thread: what a block wrote to `sock`."""

    def __init__(self) -> None:
        self.sock, self._peer = socket.socketpair()
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := self._peer.recv(1 << 16):
            self._chunks.append(chunk)

    def received(self) -> bytes:
        self.sock.close()
        self._thread.join(30)
        self._peer.close()
        return b"".join(self._chunks)


def record_tuples(data) -> list[tuple]:
    return [(r.offset, r.key, r.value) for r in kafkacodec.MemoryRecords(data).records()]


# --- README.md ------------------------------------------------------------------------------
@runs(("README.md", "import kafkacodec"))
def test_readme_decode(sample_log, monkeypatch):
    """Opens orders-0/00000000000000000000.log relative to the log directory; `buffer` is two
    batches, the second cut short."""
    monkeypatch.chdir(sample_log)
    whole = build(0, [b"a", b"b"]) + build(2, [b"c", b"d"])
    cut = whole[:-7]
    scope = run_python("README.md", "import kafkacodec", {"buffer": cut})
    segment = (sample_log / "orders-0" / "00000000000000000000.log").read_bytes()
    entries = list(kafkacodec.MemoryRecords(segment).batches())
    assert len(scope["index"]) == len(entries) > 1
    assert list(scope["index"]["last_offset"]) == [b.last_offset for b in entries]
    assert scope["batch"].base_offset == entries[-1].base_offset      # the loop went to the end
    assert scope["record"].offset == entries[-1].last_offset
    assert scope["records"].partial_tail_bytes == len(build(2, [b"c", b"d"])) - 7


@runs(("README.md", "builder = kafkacodec.MemoryRecordsBuilder"))
def test_readme_build():
    """`timestamps, keys, values` are one record's columns: the log is offsets 100 and 101 and
    the commit marker the block writes at 102 follows it."""
    scope = run_python("README.md", "builder = kafkacodec.MemoryRecordsBuilder",
                       {"kafkacodec": kafkacodec, "timestamps": [1_700_000_000_001],
                        "keys": [b"k2"], "values": [b"v2"]})
    log = kafkacodec.MemoryRecords(scope["log"] + scope["marker"])
    batches = list(log.batches())
    assert [b.compression.name for b in batches] == ["ZSTD", "NONE"]
    records = list(log.records())
    assert [(r.offset, r.key, r.value) for r in records[:2]] == [(100, b"key", b"value"), (101, b"k2", b"v2")]
    assert records[0].headers == (("trace", b"abc"),)
    assert batches[1].is_control and records[2].offset == 102 and records[2].control_type == 1   # COMMIT
    assert (batches[1].producer_id, batches[1].producer_epoch) == (7, 1)


@runs(("README.md", "segment = kafkacodec.FileRecords.open"))
def test_readme_down_convert(sample_log, tmp_path, monkeypatch):
    """The block opens orders-0/00000000000000000000.log (in the working directory: a copy of
    a sample segment with v2 batches); `position, size` are a v2 batch in it and `fetch_offset`
    its base offset; `sock` a socket whose far end the test reads; `records` a v2 log."""
    (tmp_path / "orders-0").mkdir()
    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    segment.write_bytes(log_segment(sample_log, index=1).read_bytes())
    monkeypatch.chdir(tmp_path)
    with kafkacodec.FileRecords.open(segment) as log:
        index = log.index()
        row = index[(index["magic"] == 2) & (index["compression"] != 4)][0]     # zstd: refused for v1
        receiver = Receiver()
        records = kafkacodec.MemoryRecords(build(0, [b"x", b"y"], "lz4") + build(2, [b"z"]))
        scope = run_python("README.md", "segment = kafkacodec.FileRecords.open", {
            "kafkacodec": kafkacodec, "position": int(row["position"]),
            "size": int(row["size_in_bytes"]), "fetch_offset": int(row["base_offset"]),
            "sock": receiver.sock, "records": records})
        sent = receiver.received()
        original = record_tuples(log.slice(int(row["position"]), int(row["size_in_bytes"])))
    assert scope["lazy"].completed and len(sent) == scope["lazy"].size_in_bytes
    assert {b.magic for b in kafkacodec.MemoryRecords(sent).batches()} == {1}
    assert record_tuples(sent) == original
    assert {b.magic for b in scope["converted"].records.batches()} == {0}
    assert record_tuples(scope["converted"].records) == record_tuples(records)
    assert scope["converted"].stats.records_converted == 3


@runs(("README.md", "from kafkacodec.mirror import shallow_records"))
def test_readme_mirror_raw_batches():
    """`payload` is a FetchResponse v12 (after its size field) holding orders-0's batches at
    offsets 120-124 and 125-126: offset 123 trims the first."""
    from fetch_fixtures import build_fetch_response

    first, second = build(120, [b"v%d" % i for i in range(5)], "lz4"), build(125, [b"w", b"x"])
    frame = build_fetch_response(12, 9, [("orders", [(0, first + second)])])
    scope = run_python("README.md", "from kafkacodec.mirror import shallow_records", {"payload": frame[4:]})
    raws = list(scope["shallow_records"](scope["response"].responses[0].partitions[0].records, fetch_offset=123))
    assert [record_tuples(r.value)[0][0] for r in raws] == [123, 125]
    assert bytes(scope["raw"].value) == second                     # later batches byte for byte
    request = bytes(scope["request"])
    assert int.from_bytes(request[:4], "big") == len(request) - 4 and request[4:6] == b"\0\0"   # Produce
    assert first in request and second not in request             # one batch per partition


@runs(("README.md", "from kafkacodec.consumer import Consumer"))
def test_readme_consumer():
    """Consumes orders from librdkafka's mock cluster (one broker), where the test produced
    five records into partition 0."""
    pytest.importorskip("confluent_kafka")
    from mock_cluster import MockCluster

    cluster = MockCluster(brokers=1)
    delivered = cluster.produce("orders", [(0, b"k%d" % i, b"v%d" % i, None, 1_700_000_000_000 + i)
                                           for i in range(5)])
    scope = run_python("README.md", "from kafkacodec.consumer import Consumer",
                       values={"broker:9092": cluster.bootstrap})
    part = scope["part"]
    assert (part.topic, part.partition, part.start_offset) == ("orders", 0, 0)
    assert 0 < part.next_offset <= len(delivered) == 5 and part.released


@runs(("README.md", "pool = kafkacodec.SimpleMemoryPool"))
def test_readme_pool_and_ring():
    """`sock` has a framed FetchResponse v12 waiting (two batches of orders-0); `handle`
    collects what the block hands it."""
    from fetch_fixtures import build_fetch_response

    receiver_end, sock = socket.socketpair()
    data = build(0, [b"a", b"b"]) + build(2, [b"c"], "zstd")
    receiver_end.sendall(build_fetch_response(12, 1, [("orders", [(0, data)])]))
    handled = []
    try:
        scope = run_python("README.md", "pool = kafkacodec.SimpleMemoryPool", {
            "kafkacodec": kafkacodec, "sock": sock,
            "handle": lambda offset, value: handled.append((offset, bytes(value)))})
    finally:
        receiver_end.close()
        sock.close()
    assert handled == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert scope["response"] is None and scope["ring"].responses == 1 and scope["ring"].unreleased == 0


@runs(("README.md", "from kafkacodec.logdir import plan, read_split"))
def test_readme_logdir(sample_log):
    pytest.importorskip("pyarrow")
    scope = run_python("README.md", "from kafkacodec.logdir import plan, read_split",
                       values={"/var/kafka-logs": str(sample_log)})
    assert scope["problems"] == []
    assert {(s.topic, s.partition) for s in scope["splits"]} == {("orders", 0), ("orders", 1)}
    batch = scope["batch"]                                  # the last split's last Arrow batch
    last = scope["splits"][-1]
    assert set(batch.column("topic").to_pylist()) == {"orders"}
    assert batch.column("partition").to_pylist()[-1] == last.partition
    assert batch.num_rows > 0 and batch.column("offset").to_pylist() == sorted(batch.column("offset").to_pylist())


@runs(("README.md", "from kafka import KafkaConsumer"))
@pytest.mark.service          # a server over sockets, and the block's 5 s consumer timeout: not under ASan
def test_readme_serve_old_client(sample_log, capsys):
    """kafka-python as a 0.10.1 client reads orders from a kafkacodec serve over the sample log:
    every data record of both partitions (Fetch v3 has no isolation level)."""
    pytest.importorskip("kafka")
    from serve_support import partition_records

    from kafkacodec.serve import Server

    with Server([str(sample_log)], listen=("127.0.0.1", 0)) as server:
        scope = run_python("README.md", "from kafka import KafkaConsumer",
                           values={"127.0.0.1:9092": f"127.0.0.1:{server.port}"})
        scope["consumer"].close()
    want = sum(len(partition_records(sample_log, "orders", p)) for p in (0, 1))
    assert capsys.readouterr().out == f"{want} records\n"


# --- docs/reading.md, building.md, down-conversion.md -----------------------------------------
@runs(("docs/reading.md", "import kafkacodec"))
def test_reading_md(sample_log, monkeypatch, capsys):
    """`fetch_response_records` is a fetch's records (two batches, the second cut short); the
    segment is orders-0's first, in the working directory.  The slice starts at a batch in the
    middle of the segment (a slice from an arbitrary byte, such as 4096, used to raise)."""
    monkeypatch.chdir(sample_log / "orders-0")
    fetched = build(0, [b"a", b"b"], "gzip") + build(2, [b"c", b"d"])[:-3]
    scope = run_python("docs/reading.md", "import kafkacodec", {"fetch_response_records": fetched})
    assert scope["records"].partial_tail_bytes == len(build(2, [b"c", b"d"])) - 3
    assert scope["record"].offset == 1 and scope["records"].validate() == 1
    with kafkacodec.FileRecords.open("00000000000000000000.log") as segment:
        index = segment.index(check_crc=False)
        half = index[len(index) // 2:]
        bases = [b.base_offset for b in segment.slice(int(half[0]["position"]), 1 << 20).batches()]
    printed = [tuple(map(int, line.split())) for line in capsys.readouterr().out.splitlines()]
    assert printed == [(int(r["position"]), base, int(r["last_offset"])) for r, base in zip(half, bases)]
    assert len(printed) == len(half) >= 2


@runs(("docs/building.md", "from kafkacodec import MemoryRecordsBuilder"))
def test_building_md():
    """Two builds concatenated are one log whose offsets continue (0, 1, then 2): kafka-python
    reads it so."""
    from kafka.record import MemoryRecords as KafkaPythonRecords

    scope = run_python("docs/building.md", "from kafkacodec import MemoryRecordsBuilder")
    records = KafkaPythonRecords(scope["log"])
    got = []
    while (batch := records.next_batch()) is not None:
        got += [(r.offset, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(0, b"user-1", b'{"event":"click"}', [("trace", b"abc"), ("retry", None)]),
                   (1, None, None, []), (2, b"user-2", b"...", [])]


@runs(("docs/down-conversion.md", "import kafkacodec"))
def test_down_conversion_md(sample_log):
    """`records` is a slice of a segment (FileRecords) without zstd batches, `fetch_offset` an
    offset inside its first batch, `sock` a socket the test reads."""
    with kafkacodec.FileRecords.open(log_segment(sample_log, index=1)) as segment:
        index = segment.index()
        usable = (index["magic"] == 2) & (index["compression"] != 4) & (index["records_count"] > 1)
        first = index[usable][0]
        size = int(first["size_in_bytes"])
        records = segment.slice(int(first["position"]), size)
        fetch_offset = int(first["base_offset"]) + 1
        receiver = Receiver()
        scope = run_python("docs/down-conversion.md", "import kafkacodec",
                           {"records": records, "fetch_offset": fetch_offset, "sock": receiver.sock})
        sent = receiver.received()
        want = [r for r in record_tuples(records) if r[0] >= fetch_offset]
    converted = scope["result"].records
    assert {b.magic for b in converted.batches()} == {1} and record_tuples(converted) == want
    assert scope["result"].stats.records_converted == len(want)
    assert len(sent) == scope["lazy"].size_in_bytes and record_tuples(sent) == want


# --- docs/logdir.md, pool-and-ring.md -------------------------------------------------------
@runs(("docs/logdir.md", "from kafkacodec.logdir import"))
def test_logdir_md(sample_log):
    pytest.importorskip("pyarrow")
    scope = run_python("docs/logdir.md", "from kafkacodec.logdir import",
                       values={"/var/kafka-logs": str(sample_log)})
    from serve_support import partition_records

    assert scope["problems"] == [] and {s.topic for s in scope["splits"]} == {"orders"}
    frame = scope["batch"].to_pandas()                      # the last split's last batch
    partition = scope["splits"][-1].partition
    rows = partition_records(sample_log, "orders", partition, committed=True)
    start = next(o for o, _, _, t in rows if t >= 1_700_000_000_000)      # startingTimestamp
    assert set(frame["topic"]) == {"orders"} and set(frame["partition"]) == {partition}
    assert frame["offset"].min() >= start and frame["offset"].max() == rows[-1][0]


@runs(("docs/pool-and-ring.md", "from kafkacodec import SimpleMemoryPool"))
def test_pool_and_ring_md():
    """`sock` gets two framed FetchResponses v12 and then EOF; `handle` collects."""
    from fetch_fixtures import build_fetch_response

    peer, sock = socket.socketpair()
    peer.sendall(build_fetch_response(12, 1, [("orders", [(0, build(0, [b"a", b"b"], "lz4"))])]) +
                 build_fetch_response(12, 2, [("orders", [(1, build(5, [b"c"]))])]))
    peer.close()
    handled = []
    try:
        scope = run_python("docs/pool-and-ring.md", "from kafkacodec import SimpleMemoryPool", {
            "sock": sock, "handle": lambda *fields: handled.append(fields)})
    finally:
        sock.close()
    assert handled == [("orders", 0, 0, b"a"), ("orders", 0, 1, b"b"), ("orders", 1, 5, b"c")]
    assert scope["pool"].available_memory == 100 << 20           # the ring gave its 8 MiB back


@runs(("docs/pool-and-ring.md", "import asyncio\n\nclass KafkaConnection("))
def test_pool_and_ring_md_buffered_protocol():
    """The protocol class on a real asyncio connection: a server sends two framed responses;
    `ring` is a ResponseRingBuffer behind a proxy that records what next_response() gave."""
    import asyncio

    from fetch_fixtures import build_fetch_response

    scope = run_python("docs/pool-and-ring.md", "import asyncio\n\nclass KafkaConnection(")
    frames = [build_fetch_response(12, c, [("orders", [(0, build(c, [b"v%d" % c]))])]) for c in (1, 2)]

    class Recording:
        def __init__(self, ring):
            self.ring, self.seen = ring, []

        def __getattr__(self, name):
            return getattr(self.ring, name)

        def next_response(self):
            resp = self.ring.next_response()
            if resp is not None:
                self.seen.append(resp)
            return resp

    async def main():
        async def serve(reader, writer):
            for frame in frames:
                writer.write(frame)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ring = Recording(kafkacodec.ResponseRingBuffer(1 << 20))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: scope["KafkaConnection"](ring),
                                                    *server.sockets[0].getsockname()[:2])
        for _ in range(200):
            if len(ring.seen) == 2:
                break
            await asyncio.sleep(0.01)
        transport.close()
        server.close()
        return ring

    ring = asyncio.run(main())
    got = [(r.correlation_id, [(rec.offset, rec.value) for rec in r.records(api_version=12)]) for r in ring.seen]
    assert got == [(1, [(1, b"v1")]), (2, [(2, b"v2")])]
    for r in ring.seen:
        r.release()


# --- docs/spark-and-cli.md (no Spark), docs/cli.md, docs/DEVELOPING.md ------------------------
@runs(("docs/spark-and-cli.md", "from kafkacodec.arrow import ArrowDecoder"))
def test_spark_and_cli_md_columnar_decode(sample_log, monkeypatch):
    pytest.importorskip("pyarrow")
    from kafka_oracle import kafka_python_rows

    monkeypatch.chdir(sample_log / "orders-0")
    scope = run_python("docs/spark-and-cli.md", "from kafkacodec.arrow import ArrowDecoder")
    data = Path("00000000000000000000.log").read_bytes()
    want = [(r["offset"], r["value"]) for r in kafka_python_rows(data, "orders", 0)]
    batch = scope["batch"]
    assert list(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist())) == want
    assert set(batch.column("topic").to_pylist()) == {"orders"} and scope["next_pos"] == len(data)


@runs(("docs/spark-and-cli.md", "pos = 0"))
def test_spark_and_cli_md_decode_loop(sample_log):
    """`data` is a segment, `dec` a decoder of 16-row batches, so the loop goes round often."""
    pytest.importorskip("pyarrow")
    from kafkacodec.arrow import ArrowDecoder

    data = log_segment(sample_log).read_bytes()
    dec = ArrowDecoder("orders", 0, max_rows=16)
    scope = run_python("docs/spark-and-cli.md", "pos = 0", {"data": data, "dec": dec})
    last = list(kafkacodec.MemoryRecords(data).records())[-1]
    assert scope["pos"] == len(data) and not dec.trailing_bytes
    assert scope["batch"].column("offset").to_pylist()[-1] == last.offset


@runs(("docs/cli.md", "kafkacodec read /var/kafka-logs"))
def test_cli_md_read(sample_log, tmp_path):
    """The block in bash -e -o pipefail, `kafkacodec` being `python -m kafkacodec.cli` (the
    same command, docs/cli.md) of the kafkacodec under test, run in the sample log directory
    (its third line reads orders-0/ from there).  Its four outputs follow each other."""
    pytest.importorskip("pyarrow")
    if shutil.which("jq") is None:
        pytest.skip("the block pipes into jq")
    from serve_support import partition_records

    out = run_bash(block("docs/cli.md", "kafkacodec read /var/kafka-logs", {"/var/kafka-logs": str(sample_log)}),
                   cwd=sample_log, tmp=tmp_path).splitlines()

    def text(b):
        return "" if b is None else b.decode()

    orders = {p: partition_records(sample_log, "orders", p) for p in (0, 1)}
    last10 = [text(v) for _, _, v, _ in orders[0][-10:]]
    formatted = [f"orders [{p}] {o} {t}: {text(k)}={text(v)}" for p in (0, 1) for o, k, v, t in orders[p]]
    start = next(o for o, _, _, t in orders[0] if t >= 1_700_000_000_000)    # -o s@: from that offset on
    since = [r for r in orders[0] if r[0] >= start][:100]
    payloads = ["null" if v is None else v.decode() for _, _, v, _ in since]
    committed = [text(r[2]) for t in ("clicks", "orders") for p in (0, 1)
                 for r in partition_records(sample_log, t, p, committed=True)]
    assert len(since) == 100 and len(committed) > len(formatted)
    assert out[:10] == last10
    assert out[10:10 + len(formatted)] == formatted
    assert out[10 + len(formatted):110 + len(formatted)] == payloads
    assert sorted(out[110 + len(formatted):]) == sorted(committed)


def run_bash(script: str, *, cwd: Path, tmp: Path, env: dict | None = None) -> str:
    """Run a bash block with `kafkacodec` on PATH as `python -m kafkacodec.cli` of this suite."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "kafkacodec"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kafkacodec.cli "$@"\n')
    shim.chmod(0o755)
    environment = child_env()
    environment.update({"PATH": f"{bindir}{os.pathsep}{environment['PATH']}", **(env or {})})
    run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=environment,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{script}\nexit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run.stdout


@runs(("docs/DEVELOPING.md", "from kafkacodec.cli._exit import EXIT_CODES"))
def test_developing_md_command_skeleton(monkeypatch, capsys):
    """The skeleton as a command module, registered as the text says: one entry in COMMANDS."""
    import kafkacodec.cli as cli

    module = types.ModuleType("mycommand")
    text = block("docs/DEVELOPING.md", "from kafkacodec.cli._exit import EXIT_CODES")
    exec(compile(text, "docs/DEVELOPING.md", "exec"), module.__dict__)
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, module))
    assert cli.main(["mycommand", "X"]) == 0
    with pytest.raises(SystemExit):
        cli.main(["mycommand", "--help"])
    help_text = capsys.readouterr().out
    assert "kafkacodec mycommand X" in help_text and "exit codes" in help_text


# --- Spark: README.md and docs/spark-and-cli.md ---------------------------------------------
# One local SparkSession for the module (none is started unless a Spark test runs).  moto's S3
# server is started first and the session's processes get its address and credentials from
# the environment (AWS_*: pyarrow's defaults, as docs/spark-and-cli.md says), so the blocks'
# s3a:// paths reach it without an edit.
S3_BUCKET = "bucket"                 # the blocks' bucket name, created on moto's server


@pytest.fixture
def s3(spark, s3_server):
    """moto's server, reachable from the session's processes through the environment, with the
    blocks' bucket."""
    if spark.sparkContext._jvm.System.getenv("AWS_ENDPOINT_URL") != s3_server.endpoint:
        pytest.skip("the JVM was started before this module's S3 environment was set")
    fs = s3_server.filesystem()
    if fs.get_file_info(S3_BUCKET).type.name == "NotFound":
        fs.create_dir(S3_BUCKET)
    return s3_server


def log_records(root, *, control: bool = False) -> list[tuple]:
    """(topic, partition, offset, value) of every record of a log directory, from its files
    (local, or `fs`), data records only unless `control`."""
    from kafkacodec.logdir import discover

    rows = []
    for seg in discover(str(root)):
        with kafkacodec.FileRecords.open(seg.path) as records:
            for batch in records.batches():
                if control or not batch.is_control:
                    rows += [(seg.topic, seg.partition, r.offset, r.value) for r in batch]
    return sorted(rows)


def codecs_of(root) -> set[str]:
    from kafkacodec.logdir import discover

    found = set()
    for seg in discover(str(root)):
        with kafkacodec.FileRecords.open(seg.path) as records:
            found |= {b.compression.name for b in records.batches()}
    return found


def committed_rows(root: Path, topics=("orders",), *, start: dict | None = None) -> list[tuple]:
    from serve_support import partition_records

    return sorted((t, p, o, v) for t in topics for p in (0, 1)
                  for o, _, v, _ in partition_records(root, t, p, committed=True)
                  if o >= (start or {}).get((t, p), 0))


@pytest.mark.spark
@runs(("README.md", "from kafkacodec.spark import write_log"))
def test_readme_spark(spark, sample_log, tmp_path):
    out = tmp_path / "rewritten-log"
    scope = run_python("README.md", "from kafkacodec.spark import write_log", {"spark": spark},
                       {"/data/kafka-logs": str(sample_log), "/tmp/rewritten-log": str(out)})
    rows = sorted(tuple(r) for r in scope["df"].select("topic", "partition", "offset", "value").collect())
    assert rows == committed_rows(sample_log) == log_records(out)        # offsets kept, aborted dropped
    assert codecs_of(out) == {"LZ4"} and (out / "_SUCCESS").exists()


@pytest.mark.spark
@runs(("docs/spark-and-cli.md", "from kafkacodec.spark import register"))
def test_spark_and_cli_md_data_source(spark, sample_log, s3, tmp_path):
    """The log is split as the block's two paths suggest: the first segment of each orders
    partition in s3a://bucket/tiered/ (moto), the rest in the local directory."""
    local, out = tmp_path / "kafka-logs", tmp_path / "out-log"
    shutil.copytree(sample_log, local)
    fs = s3.filesystem()
    for p in (0, 1):
        first = log_segment(local, "orders", p)
        with fs.open_output_stream(f"{S3_BUCKET}/tiered/{first.parent.name}/{first.name}") as f:
            f.write(first.read_bytes())
        first.unlink()
    scope = run_python("docs/spark-and-cli.md", "from kafkacodec.spark import register", {"spark": spark},
                       {"/var/kafka-logs": str(local), "/tmp/out-log": str(out)})
    from serve_support import partition_records

    start = {("orders", p): next(o for o, _, _, t in partition_records(sample_log, "orders", p)
                                 if t >= 1_700_000_000_000) for p in (0, 1)}
    want = committed_rows(sample_log, start=start)
    assert 0 < len(want) < len(committed_rows(sample_log))
    assert log_records(out) == want and codecs_of(out) == {"ZSTD"}
    assert scope["stream"].isStreaming


@pytest.mark.spark
@runs(("docs/spark-and-cli.md", "from kafkacodec.spark import write_log"))
def test_spark_and_cli_md_writer(spark, sample_log, s3, tmp_path):
    """`df` reads the sample log read_committed; the s3a target is on moto's server (the
    credentials from the environment)."""
    rewritten, plain = tmp_path / "rewritten-log", tmp_path / "log"
    df = spark.read.format("kafkalog").option("kafka.isolation.level", "read_committed").load(str(sample_log))
    run_python("docs/spark-and-cli.md", "from kafkacodec.spark import write_log", {"df": df},
               {"/data/rewritten-log": str(rewritten), "http://minio:9000": s3.endpoint,
                "/data/log": str(plain)})
    want = committed_rows(sample_log, ("orders", "clicks"))
    assert log_records(rewritten) == want == log_records(plain)
    fs = s3.filesystem()
    from pyarrow.fs import FileSelector

    remote = tmp_path / "from-s3"
    for info in fs.get_file_info(FileSelector(f"{S3_BUCKET}/log", recursive=True)):
        if info.is_file:
            target = remote / Path(info.path).relative_to(f"{S3_BUCKET}/log")
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as f:
                target.write_bytes(f.read())
    assert (remote / "_SUCCESS").exists() and log_records(remote) == want and codecs_of(remote) == {"ZSTD"}


@pytest.mark.spark
@runs(("docs/spark-and-cli.md", "from kafkacodec.spark import decode, validate, down_convert"))
def test_spark_and_cli_md_raw_batch_columns(spark):
    """`df` holds fetched batches in its binary column "batch" beside topic, partition and
    fetched_at; the third cell is damaged (a flipped byte in its records)."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    cells = [build(0, [b"a", b"b"], "lz4"), build(2, [b"c"]), bytearray(build(3, [b"dd"]))]
    cells[2][-1] ^= 0xFF
    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("batch", BinaryType()), StructField("fetched_at", LongType())])
    df = spark.createDataFrame([("orders", 0, bytes(c), 1000 + i) for i, c in enumerate(cells)], schema)
    scope = run_python("docs/spark-and-cli.md", "from kafkacodec.spark import decode, validate, down_convert",
                       {"df": df})
    records = scope["records"].orderBy("fetched_at", "offset").collect()
    good = [(r["fetched_at"], r["offset"], r["value"]) for r in records if r["_corrupt_record"] is None]
    assert good == [(1000, 0, b"a"), (1000, 1, b"b"), (1001, 2, b"c")]
    bad = [r for r in records if r["_corrupt_record"] is not None]
    assert len(bad) == 1 and bad[0]["fetched_at"] == 1002 and bad[0]["topic"] == "orders"
    checked = sorted(scope["checked"].select("fetched_at", "error", "records").collect())
    assert [(r["error"] is None, r["records"]) for r in checked][:2] == [(True, 2), (True, 1)]
    assert checked[2]["error"] and "CRC" in checked[2]["error"].upper()
    old = sorted(scope["old"].select("fetched_at", "batch").collect())
    assert [r["fetched_at"] for r in old] == [1000, 1001]               # DROPMALFORMED: the damaged row goes
    assert [b.magic for r in old for b in kafkacodec.MemoryRecords(r["batch"]).batches()] == [1, 1]
    assert [rec.value for r in old for rec in kafkacodec.MemoryRecords(r["batch"]).records()] == [b"a", b"b", b"c"]


@pytest.mark.spark
@runs(("docs/spark-and-cli.md", "PYSPARK_PYTHON=/opt/venv/bin/python"))
def test_spark_and_cli_md_convert_command(sample_log, tmp_path):
    """The same-environment way, on local[1] instead of a cluster: segments to Parquet, every
    record kept (as `spark convert` reads: read_committed)."""
    pytest.importorskip("pyspark")
    import pyarrow.parquet as pq

    out = tmp_path / "kafka-parquet"
    run_bash(block("docs/spark-and-cli.md", "PYSPARK_PYTHON=/opt/venv/bin/python", {
        "/opt/venv/bin/python": sys.executable, "spark://host:7077": "local[1]",
        "/shared/kafka-logs": str(sample_log), "/shared/kafka-parquet": str(out)}),
        cwd=tmp_path, tmp=tmp_path, env={"SPARK_LOCAL_IP": "127.0.0.1"})
    table = pq.read_table(out)
    got = sorted(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                     table.column("offset").to_pylist(), table.column("value").to_pylist()))
    assert got == committed_rows(sample_log, ("orders", "clicks"))


# --- completeness ---------------------------------------------------------------------------
SERVICES_FILES = {"docs/serve.md", "docs/security.md", "docs/mirroring.md", "docs/consumer.md"}


def services_registry() -> dict | None:
    """RUNS and EXEMPT of tests/test_docs_blocks_services.py merged, or None while it does not
    exist.  Imported; where its imports skip (no confluent-kafka), read from its source (the
    two tables are literals)."""
    try:
        module = importlib.import_module("test_docs_blocks_services")
    except ModuleNotFoundError as exc:
        if exc.name != "test_docs_blocks_services":
            raise
        return None
    except pytest.skip.Exception:
        import ast

        tables = {}
        for node in ast.parse((ROOT / "tests" / "test_docs_blocks_services.py").read_text()).body:
            target = node.target if isinstance(node, ast.AnnAssign) else \
                node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(target, ast.Name) and target.id in ("RUNS", "EXEMPT"):
                tables[target.id] = ast.literal_eval(node.value)
        module = types.SimpleNamespace(**tables)
    return {**dict(getattr(module, "EXEMPT", {})), **dict(module.RUNS)}


def owned_by_services(name: str, language: str) -> bool:
    return name in SERVICES_FILES or (name == "README.md" and language == "sh")


def unaccounted(registries: list[dict], services: bool) -> list[str]:
    missing = []
    for name in documented_files():
        for i, (language, text) in enumerate(fenced_blocks(name)):
            if owned_by_services(name, language) != services:
                continue
            if name in EXEMPT_FILES:
                continue
            if not any(f == name and matches(k, i, text) for registry in registries for f, k in registry):
                missing.append(f"{name} block {i} ({language}): {text.splitlines()[0][:70]}")
    return missing


def test_every_block_is_run_or_exempt():
    """Every python/bash/sh/console block of README.md and docs/*.md (but the other module's)
    is run by a test (RUNS) or exempt with a reason (EXEMPT)."""
    services = services_registry() or {}
    missing = unaccounted([RUNS, EXEMPT, services], services=False)
    assert not missing, "blocks no test runs; run them here (RUNS) or give a reason (EXEMPT):\n" + "\n".join(missing)


def test_every_services_block_is_run_or_exempt():
    services = services_registry()
    if services is None:
        pytest.skip("tests/test_docs_blocks_services.py (serve, security, mirroring, consumer docs) is not there yet")
    missing = unaccounted([RUNS, EXEMPT, services], services=True)
    assert not missing, "blocks no test runs:\n" + "\n".join(missing)


def test_registry_entries_name_one_block_and_a_real_test():
    for registry in (RUNS, EXEMPT):
        for name, key in registry:
            blocks = fenced_blocks(name)
            hits = [i for i, (_, text) in enumerate(blocks) if matches(key, i, text)]
            assert len(hits) == 1, f"{name} {key!r} matches blocks {hits}: update the registry"
    assert not set(RUNS) & set(EXEMPT)
    for test in set(RUNS.values()):
        path, function = test.split("::")
        assert re.search(rf"^def {function}\(", (ROOT / path).read_text(), flags=re.M), test
    for (name, key), table in SUBSTITUTIONS.items():
        assert (name, key) in RUNS, (name, key)
        for placeholder in table:       # an absolute host path, or a host:port (with its scheme)
            assert re.fullmatch(r"/\S+|([a-z]+://)?[\w.-]+:\d+", placeholder), placeholder


def test_exemption_reasons_hold():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/sanitize.sh -x" in ci and "fuzz/fuzz_targets.py replay" in ci \
        and "fuzz/fuzz_targets.py campaign" in ci and "bash scripts/test.sh" in ci
    assert "python -m build --wheel --no-isolation" in (ROOT / "scripts" / "test.sh").read_text()
    workflows = "".join(p.read_text() for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert "python -m build --sdist" in workflows and "python -m build --wheel" in workflows
    assert (DOCS / "results.md").read_text().startswith("# Benchmark results")
    assert "counted_reads()" in (ROOT / "tests" / "test_tiered.py").read_text()
    assert "results.md" in (ROOT / "bench" / "report.py").read_text()
    assert '.config("spark.jars", sys.argv[2])' in (ROOT / "tests" / "test_spark_jvm.py").read_text()
    assert "kafkacodec spark convert" in (ROOT / "tests" / "test_spark_cluster.py").read_text() or \
        '"spark", "convert"' in (ROOT / "tests" / "test_spark_cluster.py").read_text()
