"""`kafkacodec serve` reads a rolled segment's aborted transactions from its `.txnindex` (and
the open ones from the producer snapshot after it) instead of walking its batch headers, and
serves a read_committed consumer exactly what Kafka does either way: the log directory is a
real Kafka 4.1 broker's (the `kafka_broker` fixture), read through the broker and through serve
with its `.txnindex` files intact, removed and corrupted.  The checks of the file itself meet
hostile bytes too."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from kafkacodec.errors import CorruptRecordError
from kafkacodec.logdir.indexes import checked_txn_index
from kafkacodec.serve import Server
from kafkacodec.logdir._layout import find_partitions
from kafkacodec.logdir.partition_log import PartitionLog
from kafkacodec.serve.logview import IndexUse

from broker_logs import TXN_TOPIC as TOPIC, offsets
from serve_support import confluent_read, make_log_dir

pytest.importorskip("confluent_kafka")


def entry(pid: int, first: int, last: int, lso: int, version: int = 0) -> bytes:
    """One `.txnindex` entry as Kafka lays it out (AbortedTxn: int16 version, then four int64)."""
    return struct.pack(">hqqqq", version, pid, first, last, lso)


# --- the file's checks -------------------------------------------------------------------------------
@pytest.mark.parametrize("data, why", [
    (entry(7, 100, 103, 104)[:-1], "multiple of the 34-byte"),                 # a truncated entry
    (entry(7, 100, 103, 104) + entry(8, 104, 106, 107)[:20], "multiple of the 34-byte"),
    (entry(7, 100, 103, 104, version=1), "version 1"),
    (entry(7, 100, 103, 104) + entry(8, 90, 101, 102), "not after the entry before"),  # markers out of order
    (entry(7, 100, 103, 104) * 2, "not after the entry before"),
    (entry(7, 105, 103, 104), "not ending in this segment"),                   # first after last
    (entry(7, 10, 50, 51), "not ending in this segment"),                      # marker before the segment
    (entry(7, 100, 250, 251), "past the segment's last offset 199"),           # marker after it
    (entry(7, -5, 103, 104), "negative first offset"),
    (b"\x00" * 34, "not ending in this segment"),                              # a zeroed entry
])
def test_a_hostile_txnindex_is_refused_naming_the_entry(data, why):
    with pytest.raises(CorruptRecordError, match=why):
        checked_txn_index(data, 100, 199, "x.txnindex")


def test_a_valid_txnindex_gives_its_aborted_transactions():
    data = entry(7, 90, 103, 104) + entry(8, 104, 106, 107) + entry(7, 150, 199, 200)
    assert checked_txn_index(data, 100, 199, "x.txnindex") == [(7, 90, 103), (8, 104, 106), (7, 150, 199)]
    assert checked_txn_index(b"", 100, 199, "x.txnindex") == []


def test_an_invalid_txnindex_falls_back_to_the_walk_and_is_counted_once(tmp_path, caplog):
    root = make_log_dir(tmp_path / "logs")
    log_file = next((root / "modern-0").glob("*.log"))
    txnindex = log_file.with_suffix(".txnindex")
    use = IndexUse()
    for hostile in (b"\x01" * 35, entry(7, 0, 3, 4, version=9), entry(7, 0, 5, 6) + entry(7, 0, 2, 3)):
        txnindex.write_bytes(hostile)
        for _ in range(2):                      # the same file twice (a reload): one warning
            files = next(p for p in find_partitions([str(root)])[0] if p.topic == "modern")
            seg = PartitionLog(files, use).segments[0]
            assert seg.txn_index() is None
            seg.close()
    assert use.invalid_files == {".txnindex": 1}
    assert sum("txnindex" in r.getMessage() for r in caplog.records) == 1


# --- a real broker's log directory -------------------------------------------------------------------
@pytest.fixture(scope="module")
def broker_log(txn_log):
    """A copy of a partition the broker filled with committed and aborted transactions (some
    across a segment roll) between plain records, one transaction left open at the end
    (tests/broker_logs.py); what a read_committed consumer gets from the broker; its LSO."""
    return txn_log.root, {(TOPIC, 0): txn_log.want["read_committed"]}, txn_log.last_stable


def rolled_with_txnindex(root: Path) -> list[Path]:
    logs = sorted((root / f"{TOPIC}-0").glob("*.log"))
    return [p.with_suffix(".txnindex") for p in logs[:-1] if p.with_suffix(".txnindex").exists()]


def serve_read(root: Path, want):
    with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
        got = confluent_read(f"127.0.0.1:{srv.port}", want, **{"isolation.level": "read_committed"})
        lso = offsets(f"127.0.0.1:{srv.port}", TOPIC, "read_committed")   # the last stable offset
        registry = srv.metrics.registry
        counts = {source: registry.get_sample_value("kafkacodec_serve_txn_segments_total", {"source": source})
                  for source in ("txnindex", "rebuilt")}
        invalid = registry.get_sample_value("kafkacodec_serve_invalid_index_files_total", {"suffix": ".txnindex"})
    return got, lso, counts, invalid or 0


def test_the_broker_wrote_what_serve_reads(broker_log):
    root, want, broker_lso = broker_log
    part = root / f"{TOPIC}-0"
    assert len(list(part.glob("*.log"))) >= 3
    assert len(rolled_with_txnindex(root)) >= 2
    keys = [k for _, k, _ in want[(TOPIC, 0)]]
    assert b"t1-0" not in keys and b"t0-0" in keys and b"open" not in keys     # aborted, committed, open


def test_read_committed_through_serve_uses_the_txnindex(broker_log):
    root, want, broker_lso = broker_log
    got, lso, counts, invalid = serve_read(root, want)
    assert got == want
    assert lso == broker_lso == want[(TOPIC, 0)][-1][0] + 2     # the open transaction's first offset
    assert counts["txnindex"] == len(rolled_with_txnindex(root)) >= 2
    assert counts["txnindex"] + counts["rebuilt"] == len(list((root / f"{TOPIC}-0").glob("*.log"))) - 1
    assert invalid == 0


@pytest.mark.parametrize("damage", ["removed", "corrupted"])
def test_without_a_valid_txnindex_the_walk_gives_the_same_records(broker_log, tmp_path, damage):
    root, want, broker_lso = broker_log
    copy = tmp_path / "logs"
    shutil.copytree(root, copy)
    damaged = rolled_with_txnindex(copy)
    for i, path in enumerate(damaged):
        if damage == "removed":
            path.unlink()
            continue
        data = path.read_bytes()
        # a cut entry, then markers out of order (an entry repeated), then an unknown version
        path.write_bytes([data[:-1], data + data[-34:], b"\x00\x07" + data[2:]][i % 3])
    got, lso, counts, invalid = serve_read(copy, want)
    assert got == want
    assert lso == broker_lso
    assert counts["txnindex"] == 0
    if damage == "removed":
        assert counts["rebuilt"] == len(list((copy / f"{TOPIC}-0").glob("*.log"))) - 1 and invalid == 0
    else:
        assert invalid == len(damaged)


def test_the_brokers_index_files_pass_the_readers_checks(broker_log):
    """Every `.index` and `.timeindex` entry a real broker wrote holds by the rule serve and the
    log-dir reader check entries by (logdir/indexes.py): none is refused, so neither reads
    without them."""
    from kafkacodec.logdir import ReadOptions
    from kafkacodec.logdir._plan import Planner
    from kafkacodec.logdir._problems import Reporter

    root, _, _ = broker_log
    problems = []
    planner = Planner(ReadOptions.parse({"paths": [str(root)]}), Reporter("FAILFAST", True, problems.append))
    checked = 0
    for part in planner.partitions():
        for seg in part.segments:
            planner.check_indexes(seg)
            checked += (planner.offset_index(seg) is not None) + (planner.time_index(seg) is not None)
    assert problems == [] and checked >= 4


@pytest.mark.parametrize("damage", ["intact", "removed"])
def test_the_logdir_reader_reads_what_the_broker_serves_read_committed(broker_log, tmp_path, damage):
    """The log-dir reader follows the same rule (logdir/_txn.py): the broker's read_committed
    records, its .txnindex files intact or removed."""
    from kafkacodec.logdir import plan, read_split

    root, want, _ = broker_log
    copy = tmp_path / "logs"
    shutil.copytree(root, copy)
    if damage == "removed":
        for path in rolled_with_txnindex(copy):
            path.unlink()
    splits, _ = plan(str(copy), {"kafka.isolation.level": "read_committed"}, on_problem=lambda p: None)
    got = [row for s in splits for rb in read_split(s, columns=["offset", "key", "value"])
           for row in zip(*(rb.column(c).to_pylist() for c in ("offset", "key", "value")))]
    assert got == want[(TOPIC, 0)]


def test_every_reader_gives_what_the_brokers_consumer_gives(txn_log, capsysbinary):
    """The one engine (issue 32) on a directory Kafka wrote (transactions across rolls, one left
    open): serve (read by librdkafka), `kafkacodec read` and the log-dir reader give, at both
    isolation levels, the records the broker's own consumer gives."""
    import base64
    import json

    from kafkacodec.cli import main
    from kafkacodec.logdir import plan, read_split

    root = txn_log.root
    for level, want in txn_log.want.items():
        splits, _ = plan(str(root), {"kafka.isolation.level": level})
        assert [row for s in splits for rb in read_split(s, columns=["offset", "key", "value"])
                for row in zip(*(rb.column(c).to_pylist() for c in ("offset", "key", "value")))] == want, level
        assert main(["read", "--json-columns", "-q", "-X", f"kafka.isolation.level={level}", str(root)]) == 0
        assert [(d["offset"], base64.b64decode(d["key"]), base64.b64decode(d["value"]))
                for d in map(json.loads, capsysbinary.readouterr().out.splitlines())] == want, level
        with Server([str(root)], listen=("127.0.0.1", 0)) as srv:
            got = confluent_read(f"127.0.0.1:{srv.port}", {(TOPIC, 0): want}, **{"isolation.level": level})
        assert got == {(TOPIC, 0): want}, level
