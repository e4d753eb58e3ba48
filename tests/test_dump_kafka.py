"""`kafkacodec dump` against kafka-dump-log itself (`kafka.tools.DumpLogSegments` from Kafka's
4.1.1 and 3.9.1 jars, resolved by Maven as tests/kafka_broker.py does): the same files, the same
options, the same lines.  The files are a real broker's (the `kafka_broker` fixture): segments
rolled and active, `.index`, `.timeindex`, `.txnindex`, producer `.snapshot`, `__consumer_offsets`
and `__transaction_state`, and KRaft's metadata log (`__cluster_metadata-0` segments, its newest
`.checkpoint` snapshot and `bootstrap.checkpoint`, with and without `--cluster-metadata-decoder`),
plus the snapshot `kafka-storage format --standalone` writes (KRaftVersion and KRaftVoters
control records); the sample log (magics 0/1/2, every codec), clean, damaged, and with offsets
that skip (the non-consecutive pairs Kafka lists on stderr, compared too).

Known differences, normalised below: Kafka prints a stray `}` after a v0/v1 record's crc; its
SLF4J warnings; its unknown-file line; its `Found N invalid bytes` (ours is on stdout too, and
the exit status is 1).  Compared on 4.1 only: 3.9's transaction-log decoder printed text, not
JSON; 3.9 printed a KRaft leader change as `controlType: LEADER_CHANGE(2)`, not as 4.1's
`LeaderChange: {json}`, so the metadata log's segments (each starts with one) are compared on 4.1
and its snapshots on both.
"""

import base64
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from kafkacodec.cli import generate

from memory_probe import child_env

JAVA_CLASS = "kafka.tools.DumpLogSegments"
pytestmark = pytest.mark.broker       # Kafka's Java code (see conftest)
VERSIONS = ("4.1.1", "3.9.1")


def kafka_dump_log(version, *argv):
    from kafka_broker import BrokerUnavailable, classpath

    try:
        cp = classpath(version)
    except BrokerUnavailable as exc:
        pytest.skip(f"no Kafka jars: {exc}")
    run = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, JAVA_CLASS,
                          *map(str, argv)], capture_output=True, text=True, timeout=300)
    return run.returncode, normalise(run.stdout), run.stderr


def ours(*argv):
    run = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "dump", *map(str, argv)], capture_output=True,
                         text=True, timeout=300, env=child_env())
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stdout.splitlines(), run.stderr


def normalise(text):
    lines = []
    for line in text.splitlines():
        if line.startswith("SLF4J:"):
            continue
        lines.append(re.sub(r"(crc: \d+)\}", r"\1", line))     # Kafka's stray brace (legacy records)
    return lines


def assert_same(ours_lines, theirs_lines):
    assert len(ours_lines) == len(theirs_lines), (ours_lines[-5:], theirs_lines[-5:])
    for i, (a, b) in enumerate(zip(ours_lines, theirs_lines)):
        assert a == b, f"line {i}:\nours:  {a}\nkafka: {b}"


# ------------------------------------------------------------------------------ a real broker

@pytest.fixture(scope="module")
def broker_files(kafka_broker, tmp_path_factory):
    """A copy of the broker's partitions for a topic with two rolled segments, transactions
    (one aborted) and a consumer group's commits."""
    from confluent_kafka import Consumer, Producer

    topic = "dumped"
    kafka_broker.create_topic(topic, 1, config={"segment.bytes": str(1 << 20), "index.interval.bytes": "2048"})
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 2, "batch.size": 16384,
                         "compression.type": "lz4"})
    txn = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": "dump-test"})
    txn.init_transactions(30)
    for i in range(2600):                         # ~2.6 MB of values lz4 barely shrinks: two rolls
        producer.produce(topic, key=b"k%d" % i, value=base64.b64encode(os.urandom(750)), headers=[("n", b"%d" % i)])
        if i % 500 == 0:
            producer.flush(30)
        if i == 1200:                            # transactions between the rolls: in a snapshot
            for commit in (True, False, True):
                txn.begin_transaction()
                for j in range(5):
                    txn.produce(topic, value=b"t%d" % j)
                txn.flush(30)                    # sent: an abort would otherwise drop them unsent
                (txn.commit_transaction if commit else txn.abort_transaction)(30)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "dump-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    while seen < 2610 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            seen += 1
            if seen % 1000 == 0:
                consumer.commit(m, asynchronous=False)
    consumer.commit(asynchronous=False)
    consumer.close()
    data = kafka_broker.log_dir
    deadline = time.monotonic() + 30
    while not list(data.glob(f"{topic}-0/*.txnindex")) and time.monotonic() < deadline:
        time.sleep(0.2)                          # the ABORT marker is written after the call returns
    time.sleep(1)
    out = tmp_path_factory.mktemp("broker")
    for part in data.iterdir():
        if part.name == f"{topic}-0" or part.name.startswith(("__consumer_offsets-", "__transaction_state-")):
            if any(p.suffix == ".log" and p.stat().st_size for p in part.iterdir()):
                shutil.copytree(part, out / part.name)
    return out, topic


def test_broker_files_are_all_there(broker_files):
    out, topic = broker_files
    part = out / f"{topic}-0"
    suffixes = {p.suffix for p in part.iterdir()}
    assert {".log", ".index", ".timeindex", ".txnindex", ".snapshot"} <= suffixes, sorted(suffixes)
    assert len(list(part.glob("*.log"))) >= 3
    assert list(out.glob("__consumer_offsets-*")) and list(out.glob("__transaction_state-*"))


@pytest.mark.parametrize("version", VERSIONS)
def test_segment_indexes_and_snapshots_as_kafka_prints_them(broker_files, version):
    out, topic = broker_files
    files = sorted(p for p in (out / f"{topic}-0").iterdir()
                   if p.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"))
    joined = ",".join(map(str, files))
    for options in ([], ["--deep-iteration"], ["--print-data-log"], ["--verify-index-only"]):
        if version != VERSIONS[0] and options != ["--deep-iteration"]:
            continue                              # 3.9: one pass over every file kind is enough
        code, theirs, _ = kafka_dump_log(version, "--files", joined, *options)
        code_ours, mine, err = ours("--files", joined, *options)
        assert code == 0
        assert code_ours == 0, err
        assert_same(mine, theirs)
    mine = ours("--files", joined, "--deep-iteration")[1]
    txn = [line for line in mine if line.startswith("version: 0 producerId:")]
    assert len(txn) == 1                           # the aborted transaction
    assert any(line.startswith("producerId: ") for line in mine)   # a snapshot entry
    rolled = [p for p in files if p.suffix in (".index", ".timeindex") and p.stem != files[-1].stem]
    code, theirs, _ = kafka_dump_log(VERSIONS[0], "--files", ",".join(map(str, rolled)), "--index-sanity-check")
    assert code == 0 and len(theirs) == 2 * len(rolled) >= 4
    assert_same(ours("--files", ",".join(map(str, rolled)), "--index-sanity-check")[1], theirs)
    logs = ",".join(str(p) for p in files if p.suffix == ".log")
    text = [line for line in ours("--files", logs, "--print-data-log")[1] if line.startswith("| ")]
    as_hex = [line for line in ours("--files", logs, "--value-decoder-class", "hex", "--key-decoder-class",
                                    "org.apache.kafka.tools.api.StringDecoder")[1] if line.startswith("| ")]
    assert len(text) == len(as_hex) > 2600
    for a, b in zip(text, as_hex):
        head, _, value = b.partition(" payload: ")
        assert a == (f"{head} payload: {bytes.fromhex(value).decode()}" if value else head)


@pytest.mark.parametrize("version", VERSIONS)
def test_internal_topics_as_kafka_decodes_them(broker_files, version):
    out, _ = broker_files
    offsets = sorted(out.glob("__consumer_offsets-*/*.log"))
    code, theirs, _ = kafka_dump_log(version, "--offsets-decoder", "--files", ",".join(map(str, offsets)))
    code_ours, mine, err = ours("--offsets-decoder", "--files", ",".join(map(str, offsets)))
    assert code == code_ours == 0, err
    assert_same(mine, theirs)
    assert any('"type":"1"' in line and '"offset":' in line for line in mine)   # an offset commit
    assert any('"type":"2"' in line and '"protocolType":"consumer"' in line for line in mine)
    if version == "4.1.1":
        txns = sorted(out.glob("__transaction_state-*/*.log"))
        code, theirs, _ = kafka_dump_log(version, "--transaction-log-decoder", "--files", ",".join(map(str, txns)))
        code_ours, mine, err = ours("--transaction-log-decoder", "--files", ",".join(map(str, txns)))
        assert code == code_ours == 0, err
        assert_same(mine, theirs)
        assert any('"transactionalId":"dump-test"' in line for line in mine)


def test_sanity_check_of_an_active_segments_time_index(broker_files):
    """An active segment's time index is preallocated with zero slots: Kafka's sanity check at
    broker start fails on it (the last slot's timestamp 0 is below the first), so a broker
    rebuilds it after a crash.  Both tools say so; kafka-dump-log with a stack trace."""
    out, topic = broker_files
    active = sorted((out / f"{topic}-0").glob("*.timeindex"))[-1]
    code, _, err = kafka_dump_log(VERSIONS[0], "--files", active, "--index-sanity-check")
    assert code == 1 and "CorruptIndexException" in err and "less than the first timestamp" in err
    code, lines, err = ours("--files", active, "--index-sanity-check")
    assert code == 1 and lines == [f"Dumping {active}"]
    assert err.startswith(f"kafkacodec: error: {active}: failed Kafka's sanity check") and "below its first" in err
    code, lines, _ = ours("--files", active)             # the entries before the zero slots
    assert code == 0 and len(lines) > 1 and all(line.startswith("timestamp: ") for line in lines[1:])


# ------------------------------------------------------------------------------ KRaft's metadata log

@pytest.fixture(scope="module")
def metadata_files(broker_files, kafka_broker, tmp_path_factory):
    """Copies of the broker's metadata log after `broker_files` (a topic, its configs, producer
    ids): segments, the newest snapshot (kafka_broker.py has one made every 5 s) and the
    bootstrap snapshot; and the snapshot of a controller formatted `--standalone` (KIP-853)."""
    from kafka_broker import classpath, properties_text

    data = kafka_broker.log_dir
    meta = data / "__cluster_metadata-0"
    deadline = time.monotonic() + 30
    while not list(meta.glob("*.checkpoint")) and time.monotonic() < deadline:
        time.sleep(0.2)
    snapshots = sorted(meta.glob("*.checkpoint"))        # zero-padded names: the newest last
    assert snapshots, "the broker wrote no KRaft snapshot (metadata.log.max.snapshot.interval.ms)"
    out = tmp_path_factory.mktemp("metadata")
    logs = []
    for src in sorted(meta.glob("*.log")):
        logs.append(out / src.name)
        shutil.copyfile(src, logs[-1])
    copied = [out / snapshots[-1].name, out / "bootstrap.checkpoint"]
    shutil.copyfile(snapshots[-1], copied[0])
    shutil.copyfile(data / "bootstrap.checkpoint", copied[1])
    standalone = out / "standalone"
    (standalone / "data").mkdir(parents=True)
    (standalone / "server.properties").write_text(properties_text({
        "process.roles": "broker,controller", "node.id": 1, "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", "log.dirs": standalone / "data"}))
    run = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                          classpath(VERSIONS[0]), "kafka.tools.StorageTool", "format", "-t", "a2Fma2Fjb2RlYy1kdW1wIQ",
                          "--standalone", "-c", standalone / "server.properties"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    copied += sorted((standalone / "data" / "__cluster_metadata-0").glob("*.checkpoint"))
    return logs, copied


@pytest.mark.parametrize("version", VERSIONS)
def test_kraft_metadata_log_and_snapshots_as_kafka_prints_them(metadata_files, version):
    logs, snapshots = metadata_files
    runs = [(logs + snapshots, ["--deep-iteration"]), (logs + snapshots, ["--cluster-metadata-decoder"])]
    if version != VERSIONS[0]:
        runs = [(snapshots, ["--cluster-metadata-decoder"])]     # 3.9: no LeaderChange JSON (docstring)
    for files, options in runs:
        joined = ",".join(map(str, files))
        code, theirs, _ = kafka_dump_log(version, "--files", joined, *options)
        code_ours, mine, err = ours("--files", joined, *options)
        assert code == 0
        # the active segment, copied while the broker writes it, may end in part of a batch
        assert code_ours == (1 if any(line.startswith("Found ") for line in theirs) else 0), err
        assert_same(mine, theirs)
    text = "\n".join(mine)
    for seen in ("SnapshotHeader {", "SnapshotFooter {", "KRaftVersion {", "KRaftVoters {", "KRaft bootstrap snapshot",
                 "Snapshot end offset: ", *(() if version != VERSIONS[0] else (
                     "LeaderChange: {", '"type":"TOPIC_RECORD"', '"type":"PARTITION_RECORD"', '"type":"CONFIG_RECORD"',
                     '"type":"REGISTER_BROKER_RECORD"', '"type":"BROKER_REGISTRATION_CHANGE_RECORD"',
                     '"type":"PRODUCER_IDS_RECORD"', '"type":"NO_OP_RECORD"', '"type":"FEATURE_LEVEL_RECORD"'))):
        assert seen in text, seen
    assert "Error at" not in text


# ------------------------------------------------------------------------------ the sample log

@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    generate(root, ("t",), partitions=1, batches_per_segment=50)
    return sorted(root.glob("t-0/*.log"))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_magic_and_codec_as_kafka_prints_them(sample, version):
    joined = ",".join(map(str, sample))
    for options in (["--deep-iteration", "--print-data-log"],
                    ["--deep-iteration", "--skip-record-metadata", "--print-data-log"]):
        code, theirs, _ = kafka_dump_log(version, "--files", joined, *options)
        code_ours, mine, err = ours("--files", joined, *options)
        assert code == code_ours == 0, err
        assert_same(mine, theirs)
    assert {m for line in mine if (m := re.search(r"magic: (\d)", line))} is not None


def test_damage_as_kafka_prints_it_but_exit_1(sample, tmp_path):
    """A CRC mismatch (isvalid: false) and a cut last batch (Found N invalid bytes): the same
    lines as Kafka's, and exit status 1 (Kafka exits 0)."""
    from kafkacodec.arrow import scan_entries

    data = bytearray(sample[-1].read_bytes())
    data[int(scan_entries(data)["position"][1]) + 80] ^= 0x40       # inside the second entry's records
    bad = tmp_path / sample[-1].name
    bad.write_bytes(bytes(data[:-9]))
    code, theirs, _ = kafka_dump_log(VERSIONS[0], "--files", bad, "--deep-iteration")
    code_ours, mine, err = ours("--files", bad, "--deep-iteration")
    assert code == 0 and code_ours == 1
    assert_same(mine, theirs)
    assert any("isvalid: false" in line for line in mine)
    assert mine[-1].startswith("Found ") and mine[-1].endswith(f"invalid bytes at the end of {bad.name}")


def test_non_consecutive_offsets_listed_as_kafka_lists_them(sample, tmp_path):
    """Offsets that skip (as in a compacted log): after the dump, on stderr, each pair, the
    latest first, as kafka-dump-log lists them."""
    from kafkacodec.arrow import scan_entries

    data = bytearray(sample[-1].read_bytes())                       # v2 batches: base offset outside the CRC
    for i, position in enumerate(scan_entries(data)["position"]):
        base = int.from_bytes(data[position:position + 8], "big")
        data[position:position + 8] = (base + 3 * i).to_bytes(8, "big")
    gapped = tmp_path / sample[-1].name
    gapped.write_bytes(bytes(data))
    code, theirs, their_err = kafka_dump_log(VERSIONS[0], "--files", gapped, "--deep-iteration")
    code_ours, mine, err = ours("--files", gapped, "--deep-iteration")
    assert code == code_ours == 0, err
    assert_same(mine, theirs)
    their_err = their_err.splitlines()
    their_err = their_err[their_err.index(f"Non-consecutive offsets in {gapped}"):]
    assert err.splitlines() == their_err and len(their_err) > 3
