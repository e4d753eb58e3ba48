"""Tiered storage (KIP-405) read without a broker (issue 32): a partition's history is its local
segments plus the remote ones, read through the one engine (logdir/partition_log.py).

A real Kafka 4.1 broker tiers the data itself: the session broker runs Kafka's own
LocalTieredStorage (the `kafka-storage` test jar from Maven Central) with the topic-based
metadata manager, and a topic with `remote.storage.enable=true`, 1 MiB segments and 2 MiB of
local retention.  Transactions (one aborted) are written first, so their segments, `.txnindex`
files and producer snapshots are tiered.  Once the broker has deleted the first segments locally,
the log directory and the remote store are copied (tests/tiered_support.py), and every reader is
compared with what a consumer of the broker reads at both isolation levels:
- the local directory plus the remote store (`kafka-tiered-storage/<topic>-<partition>-<topic
  id>/`): the log-dir reader, `kafkacodec read`, `kafkacodec verify`, and `kafkacodec serve`
  (read by librdkafka, ListOffsets earliest at the remote start);
- the local directory plus the remote objects copied to S3 (moto's server), read through
  pyarrow.fs: the log-dir reader (a Spark read of it: tests/test_spark.py);
- an offset range in the remote tier reads only the segments holding it (the bytes fetched from
  S3 are counted)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkacodec.cli import main
from kafkacodec.logdir import ReadOptions, plan, read_split
from kafkacodec.logdir._plan import Planner
from kafkacodec.logdir._problems import Reporter
from kafkacodec.serve import Server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3_server import counted_reads  # noqa: E402
from serve_support import confluent_read  # noqa: E402
from tiered_support import ABORTED, LEVELS, TOPIC  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.service]


def _read(paths: list[str], level: str, options: dict[str, str] | None = None
          ) -> list[tuple[int, bytes | None, bytes | None]]:
    splits, _ = plan(paths, {"kafka.isolation.level": level, **(options or {})})
    return [row for s in splits for rb in read_split(s, columns=["offset", "key", "value"])
            for row in zip(*(rb.column(c).to_pylist() for c in ("offset", "key", "value")))]


def test_the_broker_tiered_the_partition(tiered_log):
    local, remote, want = tiered_log
    local_bases = sorted(int(p.stem) for p in (local / f"{TOPIC}-0").glob("*.log"))
    remote_bases = sorted(int(p.name[:20]) for p in remote.glob(f"{TOPIC}-0-*/*.log"))
    assert remote_bases[0] == 0 < local_bases[0]                         # the oldest are remote only
    assert set(remote_bases) & set(local_bases)                          # tiered, still kept locally
    assert list(remote.glob(f"{TOPIC}-0-*/*.txnindex")) and list(remote.glob(f"{TOPIC}-0-*/*.snapshot"))
    assert all(p.stat().st_size for p in remote.glob(f"{TOPIC}-0-*/*.index"))   # the ranges come from them
    assert len(want["read_uncommitted"]) == len(want["read_committed"]) + ABORTED
    # the local directory alone holds the newest records only
    assert _read([str(local)], "read_uncommitted")[0][0] == local_bases[0]


@pytest.mark.parametrize("level", LEVELS)
def test_local_and_remote_read_as_one_log(tiered_log, capsysbinary, level):
    local, remote, want = tiered_log
    assert _read([str(local), str(remote)], level) == want[level]
    assert main(["read", "--json-columns", "-q", "-X", f"kafka.isolation.level={level}", str(local),
                 str(remote)]) == 0
    got = [(d["offset"], base64.b64decode(d["key"]), base64.b64decode(d["value"]))
           for d in map(json.loads, capsysbinary.readouterr().out.splitlines())]
    assert got == want[level]


def test_verify_checks_both_tiers(tiered_log):
    local, remote, want = tiered_log
    run = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "verify", "--json", "--no-progress",
                          str(local), str(remote)], capture_output=True, timeout=120)
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["ok"], report
    assert report["records"] == len(want["read_uncommitted"]) and report["aborted_records"] == ABORTED


def test_serve_serves_both_tiers(tiered_log):
    local, remote, want = tiered_log
    with Server([str(local), str(remote)], listen=("127.0.0.1", 0)) as srv:
        for level in LEVELS:
            got = confluent_read(f"127.0.0.1:{srv.port}", {(TOPIC, 0): want[level]}, **{"isolation.level": level})
            assert got == {(TOPIC, 0): want[level]}, level
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{srv.port}", "group.id": "tiered-offsets"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)
        finally:
            consumer.close()
    assert low == 0 and high == want["read_uncommitted"][-1][0] + 1


@pytest.mark.parametrize("level", LEVELS)
def test_local_and_s3_read_as_one_log(tiered_log, tiered_s3, s3_server, monkeypatch, capsysbinary, level):
    local, _, want = tiered_log
    uri, options = tiered_s3
    assert _read([str(local), uri], level, options) == want[level]
    for name, value in s3_server.env.items():           # the command line: S3 configured by the environment
        monkeypatch.setenv(name, value)
    assert main(["read", "--json-columns", "-q", "-X", f"kafka.isolation.level={level}", str(local), uri]) == 0
    got = [(d["offset"], base64.b64decode(d["key"]), base64.b64decode(d["value"]))
           for d in map(json.loads, capsysbinary.readouterr().out.splitlines())]
    assert got == want[level]


def test_a_time_range_across_the_tiers_starts_where_the_broker_says(kafka_broker, tiered_log, tiered_s3):
    """startingTimestamp in the remote tier: the first offset at or after it is the one the
    broker's own ListOffsets (offsetsForTimes, which reads remote indexes) gives."""
    from confluent_kafka import Consumer, TopicPartition

    local, remote, want = tiered_log
    uri, options = tiered_s3
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "tiered-times"})
    try:
        rows = want["read_uncommitted"]
        # a timestamp inside the second remote segment (record timestamps of the plain records)
        first_local = min(int(p.stem) for p in (local / f"{TOPIC}-0").glob("*.log"))
        probe = TopicPartition(TOPIC, 0, rows[len(rows) // 8][0])
        consumer.assign([probe])
        message = None
        while message is None or message.error():
            message = consumer.poll(5)
        stamp = message.timestamp()[1]
        answer = consumer.offsets_for_times([TopicPartition(TOPIC, 0, stamp)], timeout=10)[0].offset
    finally:
        consumer.close()
    assert 0 < answer < first_local
    options = {**options, "startingOffsetsByTimestamp": json.dumps({TOPIC: {"0": stamp}})}
    with Planner(ReadOptions.parse({"paths": [str(local), uri], **options}), Reporter()) as planner:
        assert [r.start for r in planner.ranges()] == [answer]     # (a control record's offset, maybe)
    assert _read([str(local), uri], "read_uncommitted", options) == [r for r in rows if r[0] >= answer]


def test_an_offset_range_reads_only_its_remote_segment(tiered_log, tiered_s3):
    """1% of the partition's offsets, inside the remote tier: the bytes read from S3 are those
    of the segment holding them (its index narrows them further), not the partition's."""
    local, remote, want = tiered_log
    uri, options = tiered_s3
    rows = want["read_uncommitted"]
    first, last = rows[len(rows) // 10][0], rows[len(rows) // 10 + len(rows) // 100][0]
    with counted_reads() as fetched:
        got = _read([str(local), uri], "read_uncommitted",
                    {**options, "startingOffsets": json.dumps({TOPIC: {"0": first}}),
                     "endingOffsets": json.dumps({TOPIC: {"0": last}})})
    assert got == [r for r in rows if first <= r[0] < last]
    segments = [*remote.rglob("*.log"), *(local / f"{TOPIC}-0").glob("*.log")]
    sizes = {int(p.name[:20]): p.stat().st_size for p in segments}           # the partition: each segment once
    assert sum(fetched) < 0.03 * sum(sizes.values()), (sum(fetched), sizes)


# --- the broker's remote log metadata (__remote_log_metadata) ----------------------------------------

def test_the_remote_log_metadata_lists_the_stores_segments(tiered_log):
    """Kafka's own record of its remote segments, read offline: every segment in the store is a
    finished copy there, with its offsets."""
    from kafkacodec._records import FileRecords
    from kafkacodec.logdir.remote_log_metadata import COPY_FINISHED, remote_segments

    local, remote, _ = tiered_log
    values = [r.value for seg in sorted((local.parent / "metadata").glob("*/*.log"))
              for r in FileRecords.open(seg).records()]
    known, deleted, unreadable = remote_segments(values)
    assert not unreadable and not deleted
    stored = {p.name[21:43]: int(p.name[:20]) for p in remote.glob(f"{TOPIC}-0-*/*.log")}
    finished = {sid: s.start_offset for sid, s in known[(TOPIC, 0)].items() if s.state == COPY_FINISHED}
    assert finished == stored


def test_a_copy_the_metadata_does_not_list_is_left_out(tiered_log, tmp_path):
    """A stray copy in the store (a copy a broker abandoned, or one being deleted) overlaps the
    segment Kafka copied: read from the listing alone the log has two copies of those offsets
    (data loss, refused by default); with the broker's __remote_log_metadata among the paths,
    only finished copies are read, and the stray is named."""
    from kafkacodec.errors import LogLayoutError

    local, remote, want = tiered_log
    store = tmp_path / "kafka-tiered-storage"
    shutil.copytree(remote, store)
    first = min(store.glob(f"{TOPIC}-0-*/*.log"))
    stray = "AAAAAAAAAAAAAAAAAAAAAA"
    for path in first.parent.glob(first.name[:43] + ".*"):
        shutil.copy(path, path.with_name(f"{path.name[:20]}-{stray}{path.suffix}"))
    with pytest.raises(LogLayoutError, match="overlap|both start"):
        _read([str(local), str(store)], "read_committed")
    problems = []
    splits, _ = plan([str(local), str(local.parent / "metadata"), str(store)],
                     {"subscribe": TOPIC, "kafka.isolation.level": "read_committed"}, on_problem=problems.append)
    got = [row for s in splits for rb in read_split(s, columns=["offset", "key", "value"])
           for row in zip(*(rb.column(c).to_pylist() for c in ("offset", "key", "value")))]
    assert got == want["read_committed"]
    assert [p.kind for p in problems] == ["remote"] and stray in problems[0].message


def test_serve_serves_the_remote_tier_from_s3(tiered_log, tiered_s3, s3_server, monkeypatch):
    """`kafkacodec serve /var/kafka-logs s3://bucket/kafka-tiered-storage`: the local segments
    sent from their files, the remote ones read by range from S3 (pyarrow.fs, configured by
    the environment as the AWS SDK is), at both isolation levels."""
    local, _, want = tiered_log
    uri, _ = tiered_s3
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    with Server([str(local), uri], listen=("127.0.0.1", 0)) as srv:
        for level in LEVELS:
            got = confluent_read(f"127.0.0.1:{srv.port}", {(TOPIC, 0): want[level]}, **{"isolation.level": level})
            assert got == {(TOPIC, 0): want[level]}, level


def test_serve_keeps_the_metadatas_choice_as_it_follows_the_log(tiered_log, tmp_path):
    """serve follows the local directory (a new file there re-lists it); the remote segments
    stay those the broker's __remote_log_metadata chose at startup: an abandoned partial copy
    in the store (same base offset, listed first) is never served, before or after."""
    local, remote, want = tiered_log
    logs, store = tmp_path / "logs", tmp_path / "kafka-tiered-storage"
    shutil.copytree(local, logs)
    shutil.copytree(remote, store)
    first = min(store.glob(f"{TOPIC}-0-*/*.log"))
    data = first.read_bytes()
    first.with_name(f"{first.name[:20]}-AAAAAAAAAAAAAAAAAAAAAA.log").write_bytes(data[:len(data) * 3 // 5])
    metadata = [str(p) for p in (local.parent / "metadata").iterdir()]
    with Server([str(logs), *metadata, str(store)], listen=("127.0.0.1", 0)) as srv:
        bootstrap = f"127.0.0.1:{srv.port}"
        assert confluent_read(bootstrap, {(TOPIC, 0): want["read_committed"]},
                              **{"isolation.level": "read_committed"}) == {(TOPIC, 0): want["read_committed"]}
        (logs / f"{TOPIC}-0" / "leader-epoch-checkpoint.tmp").write_text("")     # the directory changes
        assert confluent_read(bootstrap, {(TOPIC, 0): want["read_committed"]}, group="after-a-change",
                              **{"isolation.level": "read_committed"}) == {(TOPIC, 0): want["read_committed"]}
