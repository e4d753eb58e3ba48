"""One engine, every reader (issue 32): for each directory of a hostile corpus, a Fetch through
`kafkacodec serve` read by librdkafka at both isolation levels, `kafkacodec read`, the log-dir
reader (plan + read_split) and a Spark read (tests/test_spark.py) give the same records, and those are the records
kafka-python's decoder finds in the segment files (aborted transactions dropped by the
consumer's rule for read_committed).

The corpus: the sample log (magic 0, 1 and 2, every codec, committed and aborted transactions
across segment rolls) bare; with the index files and producer snapshots a broker writes; with a
`.txnindex` holding an entry out of order (serve checked it strictly and the planner loosely
before they were one engine); with lying `.index` and `.timeindex` files; without snapshots; its
first segment deleted below a log-start checkpoint; and its last segment ending in a partial
entry (an append in progress; the readers read with mode=DROPMALFORMED).  Directories a real
broker wrote (tests/broker_logs.py, tests/tiered_support.py) are compared with the broker's own
consumer: a log Kafka compacted (below), transactions across rolls with one left open
(tests/test_serve_txnindex.py), a partition Kafka tiered and deleted locally
(tests/test_tiered.py); tests/test_spark.py reads each of them with Spark too.  The corpus is
also copied to S3 and read the way serve reads an object store, never waiting on a read (each
step run again after the reads it asked for, logdir/deferred.py): the engine's answers are those
of the same directory on disk, and serve's answers those of serve on disk."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import sys
from pathlib import Path

import pytest

from kafkacodec.cli import generate, main
from kafkacodec.logdir import discover, plan, read_split
from kafkacodec.serve import Server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_oracle import kafka_python_rows  # noqa: E402
from serve_support import confluent_read  # noqa: E402
from test_logdir import add_indexes, oracle  # noqa: E402

pytestmark = pytest.mark.service
LEVELS = ("read_uncommitted", "read_committed")
Records = dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]]


def _segments(root: Path, topic: str = "orders", partition: int = 0) -> list[Path]:
    return sorted((root / f"{topic}-{partition}").glob("*.log"))


def _txnindex_out_of_order(root: Path) -> None:
    add_indexes(root, interval=256)
    damaged = 0
    for path in sorted(root.glob("*/*.txnindex")):
        if path.with_suffix(".log") == _segments(root, *path.parent.name.rsplit("-", 1))[-1]:
            continue                                   # (the last segment's is never used)
        data = path.read_bytes()
        if len(data) >= 68:                            # two entries: swap them
            path.write_bytes(data[34:68] + data[:34] + data[68:])
        else:                                          # one entry: repeat it after itself
            path.write_bytes(data + data)
        damaged += 1
    assert damaged


def _lying_indexes(root: Path) -> None:
    add_indexes(root, interval=256)
    for path in sorted(root.glob("*/*.index"))[::2]:
        data = bytearray(path.read_bytes())
        if len(data) >= 16:
            struct.pack_into(">i", data, len(data) - 4, struct.unpack_from(">i", data, len(data) - 4)[0] + 7)
            path.write_bytes(bytes(data))
    for path in sorted(root.glob("*/*.timeindex"))[1::2]:
        data = bytearray(path.read_bytes())
        if len(data) >= 24:
            struct.pack_into(">q", data, 12, 2**62)    # a second entry whose time goes backwards later
            path.write_bytes(bytes(data))


def _without_snapshots(root: Path) -> None:
    add_indexes(root, interval=256)
    for path in root.glob("*/*.snapshot"):
        path.unlink()


def _log_start(root: Path) -> None:
    """orders-0's first segment deleted, the log start above the second one's base offset."""
    add_indexes(root, interval=256)
    first, second = _segments(root)[:2]
    for path in first.parent.glob(first.stem + ".*"):
        path.unlink()
    start = int(second.stem) + 3
    (root / "log-start-offset-checkpoint").write_text(f"0\n1\norders 0 {start}\n")


def _partial_tail(root: Path) -> None:
    """The last segment of each partition ends in the first 30 bytes of another entry."""
    for part in sorted(p for p in root.iterdir() if p.is_dir()):
        last = sorted(part.glob("*.log"))[-1]
        data = last.read_bytes()
        last.write_bytes(data + data[:30])


CORPUS = {"bare": lambda root: None, "indexed": lambda root: add_indexes(root, interval=256),
          "txnindex-out-of-order": _txnindex_out_of_order, "lying-indexes": _lying_indexes,
          "no-snapshots": _without_snapshots, "log-start": _log_start, "partial-tail": _partial_tail}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("agree") / "sample"
    generate(base, batches_per_segment=6)
    out = {}
    for name, damage in CORPUS.items():
        root = tmp_path_factory.mktemp(name) / "logs"
        shutil.copytree(base, root)
        damage(root)
        out[name] = root
    return out


def expected_records(root: Path, committed: bool) -> Records:
    """kafka-python's records of every segment (a record below the log start is gone)."""
    start = {}
    checkpoint = root / "log-start-offset-checkpoint"
    if checkpoint.exists():
        for line in checkpoint.read_text().splitlines()[2:]:
            topic, partition, offset = line.split()
            start[(topic, int(partition))] = int(offset)
    kept = set(oracle(root, committed=committed))
    want: Records = {}
    for seg in discover(root):
        for r in kafka_python_rows(Path(seg.path).read_bytes(), seg.topic, seg.partition):
            tp = (seg.topic, seg.partition)
            if (*tp, r["offset"]) in kept and r["offset"] >= start.get(tp, 0):
                want.setdefault(tp, []).append((r["offset"], r["key"], r["value"]))
    return {k: sorted(v) for k, v in want.items()}


def _logdir_read(root: Path, level: str) -> Records:
    splits, _ = plan(str(root), {"kafka.isolation.level": level, "failOnDataLoss": "false",
                                 "mode": "DROPMALFORMED"}, on_problem=lambda p: None)
    got: Records = {}
    for s in splits:
        for rb in read_split(s, columns=["topic", "partition", "offset", "key", "value"], fail_on_data_loss=False,
                             mode="DROPMALFORMED", on_problem=lambda p: None):
            for t, p, o, k, v in zip(*(rb.column(c).to_pylist() for c in ("topic", "partition", "offset", "key",
                                                                         "value"))):
                got.setdefault((t, p), []).append((o, k, v))
    return got


def _cli_read(root: Path, level: str, capsysbinary: pytest.CaptureFixture[bytes]) -> Records:
    code = main(["read", "--json-columns", "-q", "-X", f"kafka.isolation.level={level}", "-X", "failOnDataLoss=false",
                 "-X", "mode=DROPMALFORMED", str(root)])
    out, err = capsysbinary.readouterr()
    assert code in (0, 1) and b"Traceback" not in err, err               # 1: damaged data skipped
    got: Records = {}
    for line in out.splitlines():
        doc = json.loads(line)
        got.setdefault((doc["topic"], doc["partition"]), []).append(
            (doc["offset"], None if doc["key"] is None else base64.b64decode(doc["key"]),
             None if doc["value"] is None else base64.b64decode(doc["value"])))
    return got


def _served(root: Path, want: Records, level: str) -> Records:
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
        return confluent_read(f"127.0.0.1:{srv.port}", want, timeout=20, **{"isolation.level": level})


@pytest.mark.parametrize("name", list(CORPUS))
def test_serve_read_and_the_logdir_reader_agree(corpus, name, capsysbinary):
    root = corpus[name]
    for level in LEVELS:
        want = expected_records(root, level == "read_committed")
        assert sum(map(len, want.values())) > 100
        assert _logdir_read(root, level) == want, (name, level, "logdir reader")
        assert _cli_read(root, level, capsysbinary) == want, (name, level, "kafkacodec read")
        assert _served(root, want, level) == want, (name, level, "serve + librdkafka")


# --- a directory Kafka compacted -------------------------------------------------------------------

def test_a_log_kafka_compacted_reads_as_its_consumer_reads_it(compacted_log, capsysbinary):
    """Kafka's log cleaner removed superseded keys from rolled segments (gaps inside and between
    segments, `cleaner-offset-checkpoint` written; tests/broker_logs.py): serve, `kafkacodec
    read` and the log-dir reader give what the broker's own consumer gives."""
    records = {(compacted_log.topic, 0): compacted_log.want["read_uncommitted"]}
    root = compacted_log.root
    assert _logdir_read(root, "read_uncommitted") == records
    assert _cli_read(root, "read_uncommitted", capsysbinary) == records
    assert _served(root, records, "read_uncommitted") == records


# --- the same corpus in an object store, read without waiting --------------------------------------

def _settled(step):
    """`step()` as serve runs it over an object store (logdir/deferred.py): each read it waits
    for made (here, at once), then the step again from the start."""
    from kafkacodec.logdir.deferred import ReadPending

    for _ in range(10_000):
        try:
            return step()
        except ReadPending as pending:
            pending.read()
    raise AssertionError("the step never stopped waiting for reads")


def _engine_answers(log, settle) -> dict:
    """Every question serve asks a partition's engine, answered (offsets every few, all times)."""
    start, end = settle(lambda: log.log_start), settle(lambda: log.log_end)
    times = sorted({int(t) + d for seg in log.segments for t in settle(lambda: seg.scan()["max_timestamp"])
                    for d in (-1, 0, 1)})
    out: dict = {"start": start, "end": end, "lso": settle(log.last_stable_offset),
                 "aborted": settle(lambda: log.aborted_between(0, 2**62))}
    for committed in (False, True):
        for ts in [-1, -2, -3, *times]:
            out["time", committed, ts] = settle(lambda: log.offset_at(ts, committed))
    for offset in sorted({*range(start, end, 13), end - 1}):
        found = settle(lambda: log.read(offset, 4096, True, end))
        out["read", offset] = None if found is None else (
            found.segment.base_offset, found.position, found.size, found.first_size,
            settle(lambda: bytes(found.segment.read_bytes(found.position, found.size))))
    return out


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_engine_answers_alike_from_disk_and_from_s3_without_waiting(corpus, name, s3_server, monkeypatch):
    """Each directory of the corpus copied to S3 and read the way serve reads an object store:
    never waiting, each step run again after the reads it asked for, through a cache of 4 KiB
    blocks holding 16 of them (so bytes are read, dropped and read again mid-step).  Offsets,
    times, ranges, bytes, aborted transactions and the last stable offset are those of the same
    directory on disk, read by the usual blocking path."""
    from kafkacodec.logdir import deferred
    from kafkacodec.logdir._layout import find_partitions
    from kafkacodec.logdir.deferred import DeferredReads
    from kafkacodec.logdir.partition_log import PartitionLog

    root = corpus[name]
    uri = s3_server.upload(root, "logs")
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(deferred, "BLOCK", 4096)
    reads = DeferredReads(limit=16 * 4096)
    on_disk = {(p.topic, p.partition): p for p in find_partitions([str(root)])[0]}
    in_s3 = {(p.topic, p.partition): p for p in find_partitions([uri])[0]}
    assert sorted(on_disk) == sorted(in_s3)
    for tp in sorted(on_disk):
        want = _engine_answers(PartitionLog(on_disk[tp]), lambda step: step())
        got = _engine_answers(PartitionLog(in_s3[tp], reads=reads), _settled)
        assert got == want, (name, tp)
    assert reads.reads > 0 and reads.cached_bytes <= reads.limit


def test_serve_from_s3_agrees_with_serve_from_disk(corpus, s3_server, monkeypatch):
    """`kafkacodec serve s3://...` (every remote read on a worker, the network thread never
    waiting): librdkafka reads the lying-index and out-of-order-.txnindex directories from S3 as
    from disk, at both isolation levels."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    for name in ("lying-indexes", "txnindex-out-of-order"):
        root = corpus[name]
        uri = s3_server.upload(root, "logs")
        for level in LEVELS:
            want = expected_records(root, level == "read_committed")
            with Server([uri], listen=("127.0.0.1", 0)) as srv:
                got = confluent_read(f"127.0.0.1:{srv.port}", want, timeout=30, **{"isolation.level": level})
                assert srv.remote.cache.reads > 0
            assert got == want, (name, level)
