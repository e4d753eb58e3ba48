"""Every code block of docs/serve.md, docs/security.md, docs/mirroring.md, docs/consumer.md and
the ```sh blocks of README.md, run as written (the issue: "every README and docs block is run by
the tests as written (placeholders filled by the test, not by the reader)").

How a block runs:

- The test changes only what the block leaves to its reader's machine, from one visible table,
  SUBSTITUTIONS: the reader's hosts and ports become the test's servers (a bind on 0.0.0.0
  becomes 127.0.0.1: the test opens no port to the network), host paths (/var/kafka-logs,
  /etc/kafkacodec...) its temporary directories.  ENVIRONMENT lists the environment variables
  and files a block expects the reader to have (passwords, a keystore, client.properties, the
  system's CAs); names a Python block leaves to the reader (`forward`, `source`...) are bound
  by the test, each said where it is bound.
- Shell blocks (```sh, ```bash) run with `bash -e` in a temporary directory, with the venv's
  `kafkacodec` first on PATH (a shim that execs the console script, or `python -m
  kafkacodec.cli` in a dev tree without one, and notes its pid so the test can stop it) and a
  `pip` shim: `pip install "kafkacodec[EXTRA]"` checks that EXTRA is one of pyproject's extras
  and that every requirement of it is installed here (the test installs nothing).
- A long-running command (serve, mirror without --until-caught-up) is started in the
  background, the test waits until it is ready (serve's `listening on` line; the mirror's target
  holding every source record), the block that follows it in the doc uses it (serve.md: each
  serve command and the consumer block after it run in one test), then the command is stopped
  with SIGTERM and must exit 0.
- Servers the blocks talk to: librdkafka's mock cluster (tests/mock_cluster.py) for clusters,
  `kafkacodec.serve.Server` in-process for a secured broker or a secured cluster to produce to
  (a gateway with --produce in front of the mock); no block here needs a real Kafka broker.

RUNS maps (doc, index of the block among the doc's python/bash/sh/console blocks) to the test
that runs it; tests/test_docs_blocks.py checks that every block of every doc is run somewhere
or in EXEMPT."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (doc, block index) -> the test running it.  The index counts the doc's ```python, ```bash,
#: ```sh and ```console blocks in order from 0.  A serve command and the consumer block after it
#: run in one test.
RUNS: dict[tuple[str, int], str] = {
    ("docs/serve.md", 0): "test_serve_md_archived_segments_to_a_confluent_group",
    ("docs/serve.md", 1): "test_serve_md_archived_segments_to_a_confluent_group",
    ("docs/serve.md", 2): "test_serve_md_old_clients_get_down_converted_data",
    ("docs/serve.md", 3): "test_serve_md_old_clients_get_down_converted_data",
    ("docs/serve.md", 4): "test_serve_md_gateway_in_front_of_a_cluster",
    ("docs/serve.md", 5): "test_serve_md_gateway_in_front_of_a_cluster",
    ("docs/serve.md", 6): "test_serve_md_python_api",
    ("docs/security.md", 0): "test_security_md_serve_with_tls_scram_and_acls",
    ("docs/security.md", 1): "test_security_md_mirror_between_sasl_ssl_clusters",
    ("docs/security.md", 2): "test_security_md_consumer_core_security",
    ("docs/security.md", 3): "test_security_md_client_settings",
    ("docs/security.md", 4): "test_security_md_oauthbearer_token_callback",
    ("docs/security.md", 5): "test_security_md_users_command",
    ("docs/mirroring.md", 0): "test_mirroring_md_mirror_process_until_caught_up",
    ("docs/mirroring.md", 1): "test_mirroring_md_imports",
    ("docs/mirroring.md", 2): "test_mirroring_md_fetch_to_produce_loop",
    ("docs/consumer.md", 0): "test_consumer_md_opening_example",
    ("README.md", 7): "test_readme_mirror_command",
    ("README.md", 10): "test_readme_serve_command",
    ("README.md", 12): "test_readme_gateway_command",
}

#: Blocks that cannot run here: none.
EXEMPT: dict[tuple[str, int], str] = {}

from doc_blocks import fenced_blocks  # noqa: E402
from isolated import child_env  # noqa: E402

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from mock_cluster import MOCK_PARTITIONS, MockCluster  # noqa: E402
from serve_support import expected, partition_records  # noqa: E402

from kafkacodec import MemoryRecords, MemoryRecordsBuilder, WriteBuffer  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402

#: What a block leaves to its reader's machine -> the test's own.  `{name}` is filled from the
#: running test's places: `serve` the kafkacodec server it starts (127.0.0.1:PORT), `source`,
#: `target`, `upstream*`, `broker*` its clusters' bootstrap addresses, `metrics` a free port,
#: `log_dir`, `state_dir`, `etc` its directories.  A block holding a placeholder its test gave
#: no place for fails (KeyError), so nothing is left to chance.
SUBSTITUTIONS: dict[str, str] = {
    # docs/serve.md, README.md
    "127.0.0.1:9092": "{serve}",
    "0.0.0.0:9092": "{serve}",
    "archive:9092": "{serve}",
    "gateway:9092": "{serve}",
    "kafka4-a:9092": "{upstream_a}",
    "kafka4-b:9092": "{upstream_b}",
    "kafka4:9092": "{upstream}",
    '("0.0.0.0", 9092)': '("127.0.0.1", 0)',
    "/backups/kafka-logs": "{log_dir}",
    "/var/kafka-logs": "{log_dir}",
    '"/data"': '"{log_dir}"',
    '"/tmp/state"': '"{state_dir}"',
    "/var/lib/kafkacodec-mirror": "{state_dir}",
    "/var/lib/kafkacodec": "{state_dir}",
    "/var/lib/mirror": "{state_dir}",
    # the reader's code inside serve.md's `with Server(...)` block
    "...                                       # consumers read": "consumers_read(bootstrap, server)  # consumers read",
    # docs/mirroring.md, README.md
    "old:9092": "{source}",
    "new:9092": "{target}",
    "127.0.0.1:9400": "{metrics}",
    # docs/consumer.md
    "broker1:9092": "{broker1}",
    "broker2:9092": "{broker2}",
    # docs/security.md
    "/etc/kafkacodec": "{etc}",
    "0.0.0.0:9093": "{serve}",
    "archive.example.com:9093": "{serve}",
    "127.0.0.1:9404": "{metrics}",
    "broker:9093": "{serve}",
    "b-1.old.kafka.eu-west-1.amazonaws.com:9096": "{source}",
    "pkc-xyz.eu-west-1.aws.confluent.cloud:9092": "{target}",
}

#: The environment and files a block expects its reader to have, as the test provides them.
ENVIRONMENT = {
    "SERVE_KEY_PASSWORD": "key-secret",          # security.md: the keystore's key password
    "SOURCE_PASSWORD": "mirror-secret",          # security.md: the mirror's SCRAM password
    "TARGET_API_KEY": "api-key",                 # security.md: the target's PLAIN user ...
    "TARGET_API_SECRET": "api-secret",           # ... and password
    "BOB_PASSWORD": "bob-secret",                # security.md: `kafkacodec users add ... bob`
    # SSL_CERT_FILE: the test's CA as "the system's CAs" (security.md's blocks name no CA)
}
READER_FILES = {
    "alice.password": "alice-secret\n",          # security.md: `users add ... < alice.password`
    "etl.password": "etl-secret\n",
}


# --- the blocks ----------------------------------------------------------------------------------
def doc_block(doc: str, index: int, language: str, shows: str) -> str:
    """Block `index` of `doc`, checked to be the one the test means (its language, a line it
    shows): an edit that moves blocks fails here, not somewhere obscure."""
    lang, body = fenced_blocks(doc)[index]
    assert (lang, shows in body) == (language, True), \
        f"{doc} block {index} is not the {language} block showing {shows!r}"
    return body


def fill(text: str, **places: Any) -> str:
    for placeholder in sorted(SUBSTITUTIONS, key=len, reverse=True):
        if placeholder in text:
            text = text.replace(placeholder, SUBSTITUTIONS[placeholder].format(**places))
    return text


def run_python_block(block: str, doc: str, scope: dict[str, Any]) -> dict[str, Any]:
    exec(compile(block, doc, "exec"), scope)
    return scope


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def address(port: int) -> str:
    return f"127.0.0.1:{port}"


# --- shell blocks ----------------------------------------------------------------------------------
PIP_SHIM = '''\
"""pip for the docs' blocks: `pip install "kafkacodec[EXTRA]"` checks EXTRA is one of
pyproject's extras (the installed package's metadata before Python 3.11) and every
requirement of it is installed; it installs nothing."""
import importlib.metadata, os, re, sys
from packaging.requirements import Requirement

args = sys.argv[1:]
match = re.fullmatch(r"kafkacodec(?:\\[(\\w+)\\])?", args[1]) if args[:1] == ["install"] and len(args) == 2 else None
if match is None:
    sys.exit(f"pip shim: only `pip install kafkacodec[EXTRA]` is expected here, not {args}")
extra = match[1] or ""
try:
    import tomllib
except ImportError:                       # Python 3.10
    wanted = importlib.metadata.requires("kafkacodec") or []
    if extra and extra not in (importlib.metadata.metadata("kafkacodec").get_all("Provides-Extra") or []):
        sys.exit(f"pip shim: kafkacodec has no extra {extra!r}")
else:
    with open(PYPROJECT, "rb") as f:
        project = tomllib.load(f)["project"]
    if extra and extra not in project["optional-dependencies"]:
        sys.exit(f"pip shim: kafkacodec has no extra {extra!r}")
    wanted = project["dependencies"] + project["optional-dependencies"].get(extra, [])
for line in wanted:
    requirement = Requirement(line)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
        continue
    have = importlib.metadata.version(requirement.name)
    if not requirement.specifier.contains(have, prereleases=True):
        sys.exit(f"pip shim: {requirement} wanted, {have} installed")
with open(os.environ["KAFKACODEC_TEST_PIP"], "a") as f:
    f.write(args[1] + "\\n")
print(f"Requirement already satisfied: {args[1]}")
'''


@pytest.fixture(scope="module")
def shell_bin(tmp_path_factory) -> Path:
    """The `kafkacodec` and `pip` the blocks find first on PATH."""
    folder = tmp_path_factory.mktemp("bin")
    console = Path(sys.executable).with_name("kafkacodec")
    command = f'"{console}"' if console.exists() else f'"{sys.executable}" -m kafkacodec.cli'
    shim = folder / "kafkacodec"
    shim.write_text("#!/bin/sh\n# the venv's kafkacodec; the pid noted so the test can stop a long-running one\n"
                    f'echo $$ >> "$KAFKACODEC_TEST_PIDS"\nexec {command} "$@"\n')
    pip = folder / "pip"
    pip.write_text(f"#!{sys.executable}\nPYPROJECT = {str(ROOT / 'pyproject.toml')!r}\n" + PIP_SHIM)
    for path in (shim, pip):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


class Shell:
    """A shell block run as written: `bash -e -c BLOCK` in `cwd`, the shims first on PATH."""

    def __init__(self, block: str, cwd: Path, shell_bin: Path, env: dict[str, str] | None = None,
                 stdin: str | None = None):
        self.block, self.cwd, self.stdin = block, cwd, stdin
        self.pids = cwd / ".kafkacodec-pids"
        self.pip_log = cwd / ".pip-installs"
        self.env = child_env()
        self.env.update({"PATH": f"{shell_bin}{os.pathsep}{os.environ['PATH']}",
                         "KAFKACODEC_TEST_PIDS": str(self.pids), "KAFKACODEC_TEST_PIP": str(self.pip_log),
                         **(env or {})})
        self.env.pop("VIRTUAL_ENV", None)
        self.proc: subprocess.Popen[str] | None = None
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []

    def run(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A block that ends: its exit status must be 0."""
        done = subprocess.run(["bash", "-e", "-c", self.block], cwd=self.cwd, env=self.env, input=self.stdin,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, \
            f"{self.block}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        return done

    # -- a block whose last command runs until stopped ------------------------------------------
    def start(self) -> Shell:
        self.proc = subprocess.Popen(["bash", "-e", "-c", self.block], cwd=self.cwd, env=self.env,
                                     stdin=subprocess.PIPE if self.stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        if self.stdin is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(self.stdin)
            self.proc.stdin.close()
        self._readers = [threading.Thread(target=self._drain, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()
        return self

    def _drain(self, stream: Any, lines: list[str]) -> None:
        for line in stream:
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def expect_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """Wait for a stdout line matching `pattern` (the command is ready)."""
        assert self.proc is not None
        wanted = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.out:
                    if (found := wanted.search(line)) is not None:
                        return found
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (
                    f"no line matching {pattern!r} (exit {self.proc.poll()}):\n" + "\n".join(self.out + self.err[-40:]))
                self._changed.wait(min(left, 0.2))

    def expect_shown(self, block: str) -> list[str]:
        """The output the block shows in its comments (`# listening on ...`, `# listener ...`),
        printed by the command; the listener's zero-copy word may be either of its two over TLS."""
        shown = []
        for line in block.splitlines():
            if (comment := re.match(r"\s*# ((listening on|listener) .*)$", line)) is not None:
                pattern = re.escape(comment[1]).replace(re.escape("with buffered"), r"with (buffered|kernel\ TLS)")
                shown.append(self.expect_line(f"^{pattern}$").string)
        assert shown, "the block shows no output"
        return shown

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 40) -> int:
        """SIGTERM to the block's long-running command (the last `kafkacodec` it started); the
        shell's exit status, once it ended (bash -e: the command's own)."""
        assert self.proc is not None
        try:
            if self.proc.poll() is None:
                last = int(self.pids.read_text().split()[-1])
                os.kill(last, signal.SIGTERM)
            code = self.proc.wait(timeout)
            for reader in self._readers:
                reader.join(10)
            with self._changed:
                assert "Traceback" not in "\n".join(self.err), "\n".join(self.err[-60:])
            return code
        finally:
            if self.proc.poll() is None:                 # never left behind
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def __enter__(self) -> Shell:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.running():
            self.stop()

    def installed(self) -> list[str]:
        """What the block's `pip install` lines asked for (each found installed)."""
        return self.pip_log.read_text().split() if self.pip_log.exists() else []


# --- data and servers ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_log(tmp_path_factory) -> Path:
    """The sample log (`kafkacodec generate`): orders and clicks, 2 partitions each; magics 0, 1
    and 2, every codec, committed and aborted transactions."""
    root = tmp_path_factory.mktemp("sample") / "kafka-logs"
    generate(root)
    return root


def write_v2_log(root: Path, topics: dict[str, int]) -> Path:
    """Record batches (magic 2) in every codec, for a mirror's source (magic 0/1 cannot be
    produced with Produce v3+)."""
    for topic, partitions in topics.items():
        for p in range(partitions):
            data, offset = bytearray(), 0
            for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
                builder = MemoryRecordsBuilder(magic=2, compression=codec, base_offset=offset)
                for i in range(8):
                    builder.append(1_700_000_000_000 + offset + i, b"%s-%d-%d" % (topic.encode(), p, offset + i),
                                   b"%s record %d of partition %d " % (topic.encode(), offset + i, p) * 3, [])
                data += builder.build()
                offset += 8
            folder = root / f"{topic}-{p}"
            folder.mkdir(parents=True)
            (folder / "00000000000000000000.log").write_bytes(bytes(data))
    return root


def produce(bootstrap: str, topic: str, count: int, codec: str = "none") -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                            "batch.num.messages": 10})
    for i in range(count):
        producer.produce(topic, key=b"%s-%d" % (codec.encode(), i),
                         value=b"%s %s %d " % (topic.encode(), codec.encode(), i) * (1 + i % 5),
                         partition=i % MOCK_PARTITIONS)
        producer.poll(0)
    assert producer.flush(30) == 0


def read_cluster(bootstrap: str, topic: str, partitions: int = MOCK_PARTITIONS, timeout: float = 30
                 ) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """confluent-kafka reading a cluster's topic up to its high watermarks: {partition: [(key, value)]}."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "docs-oracle",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in range(partitions)}
        seen = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(seen[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, (seen, ends)
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                out[msg.partition()].append((msg.key(), msg.value()))
                seen[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: int, **config: Any) -> dict[int, int]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **config})
    try:
        found = consumer.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def log_records(root: Path, topic: str, partitions: int) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """{partition: [(key, value)]} of a log directory's data records (nothing aborted in it)."""
    return {p: [(key, value) for _, key, value, _ in partition_records(root, topic, p)] for p in range(partitions)}


@pytest.fixture(scope="module")
def cluster():
    """A mock cluster of 3 brokers: `orders` (200 records, every codec) and `users` (40)."""
    mock = MockCluster(3)
    for topic in ("orders", "users"):
        mock.create_topic(topic)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        produce(mock.bootstrap, "orders", 40, codec)
    produce(mock.bootstrap, "users", 40, "lz4")
    return mock


def mock_records(mock: MockCluster, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record, sorted: what confluent-kafka reads directly."""
    records = []
    consumer = ck.Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "docs-oracle",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(MOCK_PARTITIONS)}
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(MOCK_PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(records) < sum(ends.values()):
            assert time.monotonic() < deadline
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                records.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(records)


def kafka_python_drain(consumer: Any, count: int, timeout: float = 60
                       ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Poll a kafka-python consumer a block made until it returned `count` records."""
    got: list[tuple[int, int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records"
        for tp, messages in consumer.poll(timeout_ms=500).items():
            got += [(tp.partition, m.offset, m.key, m.value) for m in messages]
    return sorted(got)


# =================================================================================================
# docs/serve.md
# =================================================================================================
def test_serve_md_archived_segments_to_a_confluent_group(sample_log, shell_bin, tmp_path):
    """Section 1: `pip install`, then `kafkacodec serve` over the archived segments with a
    state directory (background; ready at its `listening on` line), then the confluent-kafka
    block subscribes group `audit` to orders: it gets every committed record of both
    partitions, and its commits are kept in --state-dir."""
    port = free_port()
    places = dict(serve=address(port), log_dir=sample_log, state_dir=tmp_path / "state")
    command = fill(doc_block("docs/serve.md", 0, "bash", "kafkacodec serve /backups/kafka-logs"), **places)
    consumer_block = fill(doc_block("docs/serve.md", 1, "python", "consumer.subscribe"), **places)
    with Shell(command, tmp_path, shell_bin) as serve:
        assert serve.expect_shown(command) == [f"listening on 127.0.0.1:{port}"]
        assert serve.installed() == ["kafkacodec[serve]"]
        consumer = run_python_block(consumer_block, "docs/serve.md", {})["consumer"]
        want = {(t, p): [(o, k, v) for o, k, v in rows]
                for (t, p), rows in expected(sample_log, {"orders": 2}, committed=True).items()}
        got: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]] = {}
        deadline = time.monotonic() + 60
        try:
            while any(len(got.get(tp, [])) < len(rows) for tp, rows in want.items()):
                assert time.monotonic() < deadline, {tp: len(v) for tp, v in got.items()}
                for msg in consumer.consume(500, 0.5):
                    assert not msg.error(), msg.error()
                    got.setdefault((msg.topic(), msg.partition()), []).append((msg.offset(), msg.key(), msg.value()))
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert got == want                       # the aborted transactions left out (read_committed)
        offsets = committed(address(port), "audit", "orders", 2)
        assert all(offsets[p] > want[("orders", p)][-1][0] for p in range(2)), offsets
        assert serve.stop() == 0
    assert list((tmp_path / "state" / "groups").glob("audit~*.json"))


def test_serve_md_old_clients_get_down_converted_data(sample_log, shell_bin, tmp_path):
    """Section 2: serve with an advertised listener and a conversion bound, then the
    kafka-python block as a 0.10.1 client (Fetch v3) in group legacy-app: every data record of
    orders, zstd batches included (rebuilt with gzip for it), as the segment files hold them."""
    port = free_port()
    places = dict(serve=address(port), log_dir=sample_log)
    command = fill(doc_block("docs/serve.md", 2, "bash", "--max-conversion-memory 64MiB"), **places)
    consumer_block = fill(doc_block("docs/serve.md", 3, "python", "api_version=(0, 10, 1)"), **places)
    want = sorted((p, o, k, v) for (_, p), rows in expected(sample_log, {"orders": 2}).items() for o, k, v in rows)
    with Shell(command, tmp_path, shell_bin) as serve:
        serve.expect_line(rf"^listening on 127\.0\.0\.1:{port}$")
        serve.expect_line(rf"advertised as 127\.0\.0\.1:{port}, ")
        consumer = run_python_block(consumer_block, "docs/serve.md", {})["consumer"]
        try:
            assert consumer.config["api_version"] == (0, 10, 1)
            got = kafka_python_drain(consumer, len(want))
        finally:
            consumer.close()
        assert got == want
        assert serve.stop() == 0


def test_serve_md_gateway_in_front_of_a_cluster(cluster, shell_bin, tmp_path):
    """Section 3: `serve --upstream` in front of the mock cluster (kafka4-a and kafka4-b are
    two of its brokers), then the kafka-python block as a 0.9 client (Fetch v1, magic 0) in
    group legacy-app: every record of the cluster's orders, as confluent-kafka reads them
    directly, and the group's commit lands in the cluster."""
    (a, b) = [f"{host}:{port}" for host, port in list(cluster.brokers.values())[:2]]
    port = free_port()
    places = dict(serve=address(port), upstream_a=a, upstream_b=b)
    command = fill(doc_block("docs/serve.md", 4, "bash", "--upstream kafka4-a:9092"), **places)
    consumer_block = fill(doc_block("docs/serve.md", 5, "python", "api_version=(0, 9)"), **places)
    want = mock_records(cluster, "orders")
    with Shell(command, tmp_path, shell_bin) as gateway:
        gateway.expect_line(rf"^listening on 127\.0\.0\.1:{port}$")
        consumer = run_python_block(consumer_block, "docs/serve.md", {})["consumer"]
        try:
            got = kafka_python_drain(consumer, len(want))
            consumer.commit()
        finally:
            consumer.close()
        assert got == want
        ends: dict[int, int] = {}
        for p, offset, _, _ in want:
            ends[p] = max(ends.get(p, 0), offset + 1)
        assert committed(cluster.bootstrap, "legacy-app", "orders", MOCK_PARTITIONS) == ends
        assert gateway.stop() == 0


def test_serve_md_python_api(sample_log, tmp_path):
    """The Python API block: the reader's code in the `with` block (its `...`) is the test's
    `consumers_read`: a confluent-kafka group reads orders from `bootstrap` and the metrics port
    answers; then the second form starts and stops a server on a config."""
    block = doc_block("docs/serve.md", 6, "python", "from kafkacodec.serve import Server, ServeConfig")
    places = dict(log_dir=sample_log, state_dir=tmp_path / "state")
    seen: dict[str, Any] = {}

    def consumers_read(bootstrap: str, server: Any) -> None:
        from serve_support import confluent_read

        want = expected(sample_log, {"orders": 2}, committed=True)
        seen["read"] = confluent_read(bootstrap, want, group="docs-api", timeout=60) == want
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as page:
            seen["metrics"] = page.read().decode()

    scope = run_python_block(fill(block, **places), "docs/serve.md", {"consumers_read": consumers_read})
    assert seen["read"], "the consumer did not read what the segments hold"
    assert 'kafka_network_requestmetrics_requests_total{request="Fetch"' in seen["metrics"]
    assert list((tmp_path / "state" / "groups").glob("docs-api~*.json"))   # state_dir kept its commit
    second = scope["server"]                      # the ServeConfig form: started, then stopped
    assert second.config.log_dirs == [str(sample_log)] and second.port > 0 and second.wait(0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", second.port), timeout=2).close()


# =================================================================================================
# docs/security.md
# =================================================================================================
@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Any]:
    """A CA and a server certificate for 127.0.0.1 and localhost (trustme)."""
    trustme = pytest.importorskip("trustme", reason="certificates are made with trustme (test extra)")
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    return {"ca": root / "ca.pem", "server": ca.issue_cert("127.0.0.1", "localhost"), "root": root}


@pytest.fixture(scope="module")
def secured_broker(pki, tmp_path_factory):
    """`kafkacodec serve` (in-process) with a SASL_SSL listener (SCRAM-SHA-512) over a v2 log
    directory (orders: 2 partitions, users: 1): user `mirror` (ENVIRONMENT's SOURCE_PASSWORD)
    and `alice`."""
    from security_support import write_pem_keystore

    from kafkacodec.net import BrokerSecurity, UsersFile
    from kafkacodec.serve import Server

    root = tmp_path_factory.mktemp("secured")
    logs = write_v2_log(root / "logs", {"orders": 2, "users": 1})
    users = UsersFile()
    users.set_password("mirror", "SCRAM-SHA-512", ENVIRONMENT["SOURCE_PASSWORD"])
    users.set_password("alice", "SCRAM-SHA-512", "alice-secret")
    users.save(root / "users")
    security = BrokerSecurity.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(write_pem_keystore(pki["server"], root / "server.pem")),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "kafkacodec.users.file": str(root / "users")})
    with Server([str(logs)], security=security) as server:
        yield server, logs


def reader_environment(pki) -> dict[str, str]:
    return {**ENVIRONMENT, "SSL_CERT_FILE": str(pki["ca"])}


def sasl_ssl(port: int, pki, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {"bootstrap.servers": address(port), "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki["ca"]),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def confluent_outcome(conf: dict[str, str], topic: str, partitions: int, count: int, group: str | None = None,
                      timeout: float = 30) -> tuple[list[tuple[int, int, bytes | None, bytes | None]], Any]:
    """What confluent-kafka reads of a topic: (records, the first error or None: a message's or
    the client's, e.g. a failed authentication)."""
    errors: list[Any] = []
    consumer = ck.Consumer({**conf, "group.id": group or "analytics-check", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "error_cb": errors.append})
    if group is None:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    else:
        consumer.subscribe([topic])
    got: list[tuple[int, int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if errors:
                return sorted(got), errors[0]
            if msg is None:
                continue
            if msg.error():
                return sorted(got), msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        if group is not None:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(got), None


def test_security_md_serve_with_tls_scram_and_acls(pki, shell_bin, tmp_path):
    """The first production set-up as written: two `users add` with passwords from files, the ACL
    and properties files by heredoc, then `kafkacodec serve --config` (background; ready at its
    listener line).  Then, as the text after it says, clients read with their usual settings:
    alice reads orders-eu (orders-*) alone and in group analytics-eu, is refused clicks
    (TOPIC_AUTHORIZATION_FAILED); etl reads clicks; a wrong password fails; the metrics answer."""
    from security_support import write_pem_keystore

    from kafkacodec.net import UsersFile

    etc = tmp_path / "etc" / "kafkacodec"
    (etc / "tls").mkdir(parents=True)                    # the reader's: a keystore, its key encrypted
    write_pem_keystore(pki["server"], etc / "tls" / "server.pem", ENVIRONMENT["SERVE_KEY_PASSWORD"].encode())
    for name, text in READER_FILES.items():
        (tmp_path / name).write_text(text)
    logs = tmp_path / "backups"
    generate(logs, ["orders-eu", "clicks"], partitions=1)
    port, metrics = free_port(), free_port()
    places = dict(etc=etc, serve=address(port), metrics=address(metrics), log_dir=logs, state_dir=tmp_path / "state")
    block = fill(doc_block("docs/security.md", 0, "sh", "kafkacodec users add /etc/kafkacodec/users alice"), **places)
    with Shell(block, tmp_path, shell_bin, reader_environment(pki)) as serve:
        assert len(serve.expect_shown(block)) == 2            # its `listening on` and listener lines
        users = UsersFile.load(etc / "users")
        assert {n: users.mechanisms(n) for n in users.names()} == {"alice": ("SCRAM-SHA-512",),
                                                                  "etl": ("SCRAM-SHA-512",)}
        assert stat.S_IMODE((etc / "users").stat().st_mode) == 0o600
        assert "alice-secret" not in (etc / "users").read_text()

        orders = [(0, o, k, v) for o, k, v in expected(logs, {"orders-eu": 1}, committed=True)[("orders-eu", 0)]]
        clicks = [(0, o, k, v) for o, k, v in expected(logs, {"clicks": 1}, committed=True)[("clicks", 0)]]
        alice = sasl_ssl(port, pki, "alice", "alice-secret")
        assert confluent_outcome(alice, "orders-eu", 1, len(orders)) == (orders, None)
        assert confluent_outcome(alice, "orders-eu", 1, len(orders), group="analytics-eu") == (orders, None)
        got, error = confluent_outcome(alice, "clicks", 1, len(clicks), group="analytics-eu", timeout=20)
        assert got == [] and error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, error
        etl = sasl_ssl(port, pki, "etl", "etl-secret")
        assert confluent_outcome(etl, "clicks", 1, len(clicks), group="nightly") == (clicks, None)
        wrong = {**sasl_ssl(port, pki, "etl", "wrong"), "log_level": "0"}
        got, error = confluent_outcome(wrong, "clicks", 1, 1, timeout=10)
        assert got == [] and error.code() == ck.KafkaError._AUTHENTICATION, error
        assert "invalid user name or password" in error.str(), error
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as page:
            assert 'kafkacodec_serve_listener_info{listener="SASL_SSL",protocol="SASL_SSL"' in page.read().decode()
        assert serve.stop() == 0
    assert list((tmp_path / "state" / "groups").glob("analytics-eu~*.json"))


@pytest.fixture
def secured_target(pki, tmp_path):
    """A cluster to produce to over SASL_SSL with PLAIN (ENVIRONMENT's TARGET_API_KEY/SECRET):
    a kafkacodec gateway with --produce (in-process) in front of a mock cluster that holds
    `orders` and `users` (4 partitions each, as the mirror finds them)."""
    from security_support import write_pem_keystore

    from kafkacodec.net import BrokerSecurity, UsersFile
    from kafkacodec.serve import Server

    mock = MockCluster(1)
    for topic in ("orders", "users"):
        mock.create_topic(topic)
    users = UsersFile()
    users.set_password(ENVIRONMENT["TARGET_API_KEY"], "PLAIN", ENVIRONMENT["TARGET_API_SECRET"])
    users.save(tmp_path / "target-users")
    security = BrokerSecurity.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(write_pem_keystore(pki["server"], tmp_path / "target.pem")),
        "sasl.enabled.mechanisms": "PLAIN", "kafkacodec.users.file": str(tmp_path / "target-users")})
    with Server(upstream=mock.bootstrap, produce=True, security=security) as server:
        yield server, mock


def test_security_md_mirror_between_sasl_ssl_clusters(pki, secured_broker, secured_target, shell_bin, tmp_path):
    """The MSK-to-Confluent-Cloud block as written: the two properties files by heredoc (SCRAM
    through a JAAS line with ${env:SOURCE_PASSWORD}; PLAIN with ${env:TARGET_API_*}), the CA the
    system's (SSL_CERT_FILE: the test's CA), then `kafkacodec mirror` without --until-caught-up
    (background) until the target holds every source record; SIGTERM; exit 0 with the
    checkpoint at the source's ends."""
    source, logs = secured_broker
    target, mock = secured_target
    places = dict(source=address(source.port), target=address(target.port), state_dir=tmp_path / "mirror")
    block = fill(doc_block("docs/security.md", 1, "sh", "--source-config source.properties"), **places)
    want = {"orders": log_records(logs, "orders", 2), "users": log_records(logs, "users", 1)}
    with Shell(block, tmp_path, shell_bin, reader_environment(pki)) as mirror:
        deadline = time.monotonic() + 60
        while True:
            got = {topic: {p: rows for p, rows in read_cluster(mock.bootstrap, topic).items() if rows}
                   for topic in want}
            if got == want or time.monotonic() > deadline:
                break
            assert mirror.running(), "\n".join(mirror.err[-40:])
            time.sleep(0.5)
        assert got == want, "\n".join(mirror.err[-40:])
        assert mirror.stop() == 0, "\n".join(mirror.err[-40:])
    checkpoint = json.loads((tmp_path / "mirror" / "checkpoint.json").read_text())
    assert sorted(checkpoint["positions"].values()) == sorted(len(rows) for t in want.values() for rows in t.values())
    assert "mirror-secret" not in "\n".join(mirror.out + mirror.err) + block


def test_security_md_consumer_core_security(pki, secured_broker, tmp_path, monkeypatch):
    """The consumer core block, statement by statement: the first Consumer (client.properties,
    the reader's: SCRAM-SHA-512 as alice, the test's CA) reads every record of the secured
    serve's orders; the second (a dict: OAUTHBEARER, an unsecured token for principal svc, the
    system's CAs = the test's) sends its token, which that listener (SCRAM only) refuses by name."""
    from kafkacodec.errors import KafkaCodecError

    server, logs = secured_broker
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(pki["ca"]))
    write_client_properties(tmp_path, pki)
    block = fill(doc_block("docs/security.md", 2, "python", "sasl.oauthbearer.config"), serve=address(server.port))
    scope: dict[str, Any] = {}
    consumers = []
    for statement in ast.parse(block).body:              # the block as written, one statement at a time
        exec(compile(ast.Module([statement], type_ignores=[]), "docs/security.md", "exec"), scope)
        if "consumer" in scope and (not consumers or scope["consumer"] is not consumers[-1]):
            consumers.append(scope["consumer"])
    first, second = consumers
    want = {p: [v for _, v in rows] for p, rows in log_records(logs, "orders", 2).items()}
    got: dict[int, list[bytes]] = {0: [], 1: []}
    with first:
        first.assign_topics(["orders"], start="earliest")
        deadline = time.monotonic() + 30
        while got != want:
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            for part in first.poll(timeout=0.5):
                with part:
                    for batch in part.batches:
                        got[part.partition] += [r.value for b in MemoryRecords(batch.value).batches() for r in b]
    with second:
        security = second.cluster.security
        assert (security.security_protocol, security.sasl_mechanism) == ("SASL_SSL", "OAUTHBEARER")
        with pytest.raises(KafkaCodecError) as refused:
            second.partitions_for("orders", timeout=5)
    message = str(refused.value)
    assert "OAUTHBEARER" in message and "SCRAM-SHA-512" in message, message


def write_client_properties(folder: Path, pki) -> Path:
    """The reader's client.properties (security.md's client blocks read it)."""
    path = folder / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\n"
                    f"sasl.password=alice-secret\nssl.ca.location={pki['ca']}\n")
    return path


def test_security_md_client_settings(pki, secured_broker, tmp_path, monkeypatch):
    """`ClientSecurity.from_file("client.properties")`, `client_context`, `client_for`: the
    context completes a TLS handshake with the secured serve (its certificate checked against
    the file's CA, its host name checked), the mechanism a SCRAM-SHA-512 exchange with the
    server side over the same users as the serve."""
    import ssl

    from kafkacodec.net import ScramServer, UsersFile

    server, _ = secured_broker
    monkeypatch.chdir(tmp_path)
    write_client_properties(tmp_path, pki)
    scope = run_python_block(doc_block("docs/security.md", 3, "python", "ClientSecurity.from_file"),
                             "docs/security.md", {})
    context, mechanism = scope["context"], scope["mechanism"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    users = UsersFile.load(server.config.security.users_file)
    scram = ScramServer("SCRAM-SHA-512", users)
    final = scram.evaluate_response(mechanism.evaluate_challenge(scram.evaluate_response(mechanism.start())))
    assert mechanism.evaluate_challenge(final) is None and scram.principal == "User:alice"


def test_security_md_oauthbearer_token_callback(tmp_path):
    """The token callback block: the reader's `fetch_token`, `expiry_ms` and `props` bound by the
    test; each authentication calls it again and sends its token."""
    from kafkacodec.net import client_for

    tokens = iter(["token-one", "token-two"])
    calls: list[str] = []

    def fetch_token() -> str:
        calls.append(token := next(tokens))
        return token

    scope = {"fetch_token": fetch_token, "expiry_ms": int(time.time() * 1000) + 3_600_000,
             "props": {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}}
    run_python_block(doc_block("docs/security.md", 4, "python", "def token():"), "docs/security.md", scope)
    security = scope["security"]
    first, second = client_for(security).start(), client_for(security).start()
    assert first == b"n,,\x01auth=Bearer token-one\x01\x01" and second == b"n,,\x01auth=Bearer token-two\x01\x01"
    assert calls == ["token-one", "token-two"]


def test_security_md_users_command(shell_bin, tmp_path):
    """`kafkacodec users add` (its password on standard input, from the test), `printf ... |
    users add` with two mechanisms, `users list`: the file holds alice (SCRAM-SHA-512) and bob
    (SCRAM-SHA-256, PLAIN), and each password authenticates against it."""
    from kafkacodec.net import PlainServer, ScramServer, ScramClient, UsersFile

    etc = tmp_path / "etc" / "kafkacodec"
    etc.mkdir(parents=True)
    block = fill(doc_block("docs/security.md", 5, "bash", "kafkacodec users list"), etc=etc)
    done = Shell(block, tmp_path, shell_bin, ENVIRONMENT, stdin="alice-typed\n").run()
    assert re.search(r"^alice\b.*SCRAM-SHA-512", done.stdout, re.M), done.stdout
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        assert re.search(rf"^bob\b.*{mechanism}", done.stdout, re.M), done.stdout
    users = UsersFile.load(etc / "users")
    assert PlainServer(users).evaluate_response(b"\0bob\0" + ENVIRONMENT["BOB_PASSWORD"].encode()) == b""
    for name, mechanism, password in (("alice", "SCRAM-SHA-512", "alice-typed"),
                                      ("bob", "SCRAM-SHA-256", ENVIRONMENT["BOB_PASSWORD"])):
        client, server = ScramClient(mechanism, name, password), ScramServer(mechanism, users)
        final = server.evaluate_response(client.evaluate_challenge(server.evaluate_response(client.start())))
        assert client.evaluate_challenge(final) is None and server.principal == f"User:{name}"


# =================================================================================================
# docs/mirroring.md
# =================================================================================================
def test_mirroring_md_mirror_process_until_caught_up(cluster, shell_bin, tmp_path):
    """The mirror process block: `pip install "kafkacodec[mirror]"`, then `kafkacodec mirror
    ... --until-caught-up` from the mock cluster (old) to another (new): exit 0 once the target
    holds every record of orders and users, in order per partition."""
    target = MockCluster(1)
    for topic in ("orders", "users"):
        target.create_topic(topic)
    places = dict(source=cluster.bootstrap, target=target.bootstrap, state_dir=tmp_path / "state")
    block = fill(doc_block("docs/mirroring.md", 0, "sh", "kafkacodec mirror --source old:9092"), **places)
    shell = Shell(block, tmp_path, shell_bin)
    done = shell.run()
    assert shell.installed() == ["kafkacodec[mirror]"]
    for topic in ("orders", "users"):
        assert read_cluster(target.bootstrap, topic) == read_cluster(cluster.bootstrap, topic)
    assert "kafkacodec mirror: caught up:" in done.stderr
    assert (tmp_path / "state" / "checkpoint.json").exists()


def test_mirroring_md_imports():
    """The pieces' import block: each name is kafkacodec's public object of that name."""
    import kafkacodec.mirror
    import kafkacodec.protocol

    scope = run_python_block(doc_block("docs/mirroring.md", 1, "python", "from kafkacodec.mirror import"),
                             "docs/mirroring.md", {})
    names = ("RawBytesBatchRecord", "shallow_records", "trim_batch", "RawBatchesBuilder", "fetch_to_produce")
    assert all(scope[n] is getattr(kafkacodec.mirror, n) for n in names)
    assert scope["decode_fetch_response"] is kafkacodec.protocol.decode_fetch_response
    assert scope["encode_produce_request"] is kafkacodec.protocol.encode_produce_request


class CaughtUp(Exception):
    """Ends the block's `while True` loop: the source was asked for the end of every partition."""


def test_mirroring_md_fetch_to_produce_loop():
    """The fetch_to_produce loop as written; the names it leaves to its reader are bound by the
    test: `source` and `target` one-broker mock clusters through tests/blocking_client.py (the
    source ends the loop by raising CaughtUp when asked for the end of both partitions), `cid` a
    correlation id, `reusable_buffer` a WriteBuffer, `fetch_to_produce` from the import block.
    The target then holds orders-0 and orders-1 as the source does."""
    from blocking_client import BlockingClient

    from kafkacodec.mirror import fetch_to_produce

    source_cluster, target_cluster = MockCluster(1), MockCluster(1)
    source_cluster.create_topic("orders")
    target_cluster.create_topic("orders")
    producer = ck.Producer({"bootstrap.servers": source_cluster.bootstrap, "compression.type": "lz4",
                            "linger.ms": 5, "batch.num.messages": 7})
    for i in range(40):
        producer.produce("orders", key=b"k%d" % i, value=b"value %d " % i * (1 + i % 6), partition=i % 2)
    assert producer.flush(30) == 0
    ends = {("orders", p): 20 for p in (0, 1)}

    class Source(BlockingClient):
        def fetch(self, topics: Any, api_version: int = 12, **kwargs: Any) -> Any:
            asked = {(topic, p): offset for topic, parts in topics for p, offset in parts}
            if asked == ends:
                raise CaughtUp
            return super().fetch(topics, api_version, **kwargs)

    source = Source.from_bootstrap(source_cluster.bootstrap)
    target = BlockingClient.from_bootstrap(target_cluster.bootstrap)
    scope = {"source": source, "target": target, "cid": 7, "reusable_buffer": WriteBuffer(),
             "fetch_to_produce": fetch_to_produce}
    try:
        with pytest.raises(CaughtUp):
            run_python_block(doc_block("docs/mirroring.md", 2, "python", "fetch_to_produce(fetched"),
                             "docs/mirroring.md", scope)
    finally:
        source.close()
        target.close()
    assert scope["positions"] == ends
    assert read_cluster(target_cluster.bootstrap, "orders", 2) == read_cluster(source_cluster.bootstrap, "orders", 2)


# =================================================================================================
# docs/consumer.md
# =================================================================================================
class Forwarded(Exception):
    """Ends the block's `while True` loop: `forward` got the test's last record."""


def test_consumer_md_opening_example():
    """The opening example as written, against a mock cluster of 3 brokers (broker1 and broker2
    two of them) whose orders hold plain records and a committed and an aborted transaction.
    `forward` is the reader's: bound by the test, it decodes each batch; once every committed
    record arrived it produces one more record, whose arrival ends the loop (so the commit()
    after the poll that completed the data has run).  Every committed record was forwarded once,
    in order, none of the aborted ones, and group my-group's commits cover them."""
    mock = MockCluster(3)
    mock.create_topic("orders")
    plain = ck.Producer({"bootstrap.servers": mock.bootstrap, "linger.ms": 1, "batch.num.messages": 5})
    txn = ck.Producer({"bootstrap.servers": mock.bootstrap, "transactional.id": "docs-consumer-tx",
                       "linger.ms": 1, "compression.type": "zstd"})
    txn.init_transactions(10)
    want: dict[int, list[bytes]] = {p: [] for p in range(MOCK_PARTITIONS)}
    for t, outcome in enumerate(["commit", "abort", "commit"]):
        for p in range(MOCK_PARTITIONS):
            for i in range(6):
                plain.produce("orders", value=b"plain %d %d p%d" % (t, i, p), partition=p)
                want[p].append(b"plain %d %d p%d" % (t, i, p))
        assert plain.flush(10) == 0
        txn.begin_transaction()
        for p in range(MOCK_PARTITIONS):
            for i in range(4):
                txn.produce("orders", value=b"txn %d %d p%d" % (t, i, p), partition=p)
                if outcome == "commit":
                    want[p].append(b"txn %d %d p%d" % (t, i, p))
        txn.flush(10)
        txn.commit_transaction(10) if outcome == "commit" else txn.abort_transaction(10)
    got: dict[int, list[bytes]] = {p: [] for p in range(MOCK_PARTITIONS)}
    last_data: dict[int, int] = {}
    sentinel = b"the test's last record"

    def forward(topic: str, partition: int, value: memoryview) -> None:
        assert topic == "orders"
        for batch in MemoryRecords(value).batches():
            for record in batch:
                if record.value == sentinel:
                    raise Forwarded
                got[partition].append(record.value)
                last_data[partition] = record.offset
        if got == want:
            plain.produce("orders", value=sentinel, partition=0)
            assert plain.flush(10) == 0

    brokers = [f"{host}:{port}" for host, port in mock.brokers.values()]
    block = fill(doc_block("docs/consumer.md", 0, "python", "forward(part.topic"),
                 broker1=brokers[0], broker2=brokers[1])
    with pytest.raises(Forwarded):
        run_python_block(block, "docs/consumer.md", {"forward": forward})
    assert got == want
    offsets = committed(mock.bootstrap, "my-group", "orders", MOCK_PARTITIONS)
    assert all(offsets[p] > last_data[p] for p in range(MOCK_PARTITIONS)), (offsets, last_data)


# =================================================================================================
# README.md's ```sh blocks
# =================================================================================================
def test_readme_mirror_command(cluster, shell_bin, tmp_path):
    """The README's mirror command, every option it shows: orders into orders-dc1 and users from
    the mock cluster (old) to another (new), --until-caught-up: exit 0 with every record there,
    the positions committed to the source group `mirror`."""
    target = MockCluster(1)
    for topic in ("orders-dc1", "users"):
        target.create_topic(topic)
    places = dict(source=cluster.bootstrap, target=target.bootstrap, state_dir=tmp_path / "mirror",
                  metrics=address(free_port()))
    block = fill(doc_block("README.md", 7, "sh", "kafkacodec mirror --source old:9092"), **places)
    done = Shell(block, tmp_path, shell_bin).run()
    assert "kafkacodec mirror: caught up:" in done.stderr
    assert read_cluster(target.bootstrap, "orders-dc1") == read_cluster(cluster.bootstrap, "orders")
    assert read_cluster(target.bootstrap, "users") == read_cluster(cluster.bootstrap, "users")
    ends = {p: len(rows) for p, rows in read_cluster(cluster.bootstrap, "orders").items()}
    assert committed(cluster.bootstrap, "mirror", "orders", MOCK_PARTITIONS) == ends


def test_readme_serve_command(sample_log, shell_bin, tmp_path):
    """The README's `pip install` + `kafkacodec serve` block over the sample log (background;
    ready at the `listening on` line it shows), then its kafka-python block as a 0.10.1 client:
    it prints every data record of orders, zstd batches rebuilt for it."""
    port = free_port()
    places = dict(serve=address(port), log_dir=sample_log, state_dir=tmp_path / "state")
    command = fill(doc_block("README.md", 10, "bash", "kafkacodec serve /backups/kafka-logs"), **places)
    consumer_block = fill(doc_block("README.md", 11, "python", "api_version=(0, 10, 1)"), **places)
    # kafka-python's log (stderr) and the server's say why, should it read nothing: it once did,
    # when the block subscribed in KafkaConsumer(): kafka-python 3.0.12 sent its bootstrap
    # Metadata request for no topic while the subscription was being set, took the answer as
    # up to date and slept 300 s (the block assigns the partitions it looked up now).
    logged = "import logging; logging.basicConfig(level=logging.INFO, format='%(relativeCreated)d %(name)s %(message)s')\n"
    want = sum(len(rows) for rows in expected(sample_log, {"orders": 2}).values())
    with Shell(command, tmp_path, shell_bin) as serve:
        assert serve.expect_shown(command) == [f"listening on 127.0.0.1:{port}"]
        assert serve.installed() == ["kafkacodec[serve]"]
        printed = subprocess.run([sys.executable, "-c", logged + consumer_block], capture_output=True,
                                 text=True, timeout=120, env=child_env())
        assert printed.stdout.split() == [str(want), "records"], \
            printed.stderr[-3000:] + "\nserve:\n" + "\n".join(serve.err[-40:])
        assert serve.stop() == 0


def test_readme_gateway_command(cluster, shell_bin, tmp_path):
    """The README's `serve --upstream` command in front of the mock cluster (background; ready at
    its `listening on` line): an old client (kafka-python as 0.10.1: Fetch v3, magic 1) and a new
    one (confluent-kafka) read every record of orders through it, as the cluster holds them."""
    port = free_port()
    block = fill(doc_block("README.md", 12, "sh", "kafkacodec serve --upstream kafka4:9092"),
                 upstream=cluster.bootstrap, serve=address(port))
    want = mock_records(cluster, "orders")
    with Shell(block, tmp_path, shell_bin) as gateway:
        gateway.expect_line(rf"^listening on 127\.0\.0\.1:{port}$")
        old = kafka.KafkaConsumer(bootstrap_servers=address(port), api_version=(0, 10, 1), auto_offset_reset="earliest")
        try:
            old.assign([kafka.TopicPartition("orders", p) for p in range(MOCK_PARTITIONS)])
            assert kafka_python_drain(old, len(want)) == want
        finally:
            old.close()
        new, error = confluent_outcome({"bootstrap.servers": address(port)}, "orders", MOCK_PARTITIONS, len(want))
        assert (new, error) == (want, None)
        assert gateway.stop() == 0


def test_runs_names_this_modules_tests():
    """Every RUNS entry names a test here and a block that exists; every test here that runs a
    block is in RUNS."""
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    assert set(RUNS.values()) <= tests
    for doc, index in RUNS:
        assert index < len(fenced_blocks(doc)), (doc, index)
    block_tests = {name for name in tests if name.startswith(("test_serve_md", "test_security_md", "test_mirroring_md",
                                                             "test_consumer_md", "test_readme"))}
    assert block_tests == set(RUNS.values())
