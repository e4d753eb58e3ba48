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
  S3 are counted);
- serve reads S3 off its network thread: with the network to S3 held still, other requests are
  answered while a fetch of the remote tier waits; with it resetting every connection, that
  fetch gets KAFKA_STORAGE_ERROR, and records again once S3 is back (tests/s3_server.py's
  StallingProxy)."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import sys
import time
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


def _first_records(client, offset: int, max_wait_ms: int) -> tuple[int, list[tuple[int, bytes | None, bytes | None]]]:
    import kafkacodec

    part = client.fetch([(TOPIC, [(0, offset, 1 << 20)])], api_version=12,
                        max_wait_ms=max_wait_ms).responses[0].partitions[0]
    records = [(r.offset, r.key, r.value) for r in kafkacodec.MemoryRecords(bytes(part.records)).records()
               if r.offset >= offset and r.control_type is None] if part.error_code == 0 else []
    return part.error_code, records


@contextlib.contextmanager
def _served_through_a_bad_network(tiered_log, tiered_s3, s3_server, monkeypatch):
    """serve over the local directory and the S3 store, S3 reached through a StallingProxy:
    (server, proxy, first local offset, first remote offset, offset -> record)."""
    from s3_server import StallingProxy

    local, _, want = tiered_log
    uri, _ = tiered_s3
    with StallingProxy(s3_server.host, s3_server.port) as proxy:
        for name, value in {**s3_server.env, "AWS_ENDPOINT_URL": proxy.endpoint}.items():
            monkeypatch.setenv(name, value)
        with Server([str(local), uri], listen=("127.0.0.1", 0)) as srv:
            part = srv.view.partition(TOPIC, 0)
            local_first = next(s.base_offset for s in part.segments if not s.storage.scheme)
            assert part.segments[0].storage.scheme == "s3" and part.log_start < local_first
            yield srv, proxy, local_first, part.log_start, {r[0]: r for r in want["read_uncommitted"]}


def test_a_stalled_store_stalls_only_the_fetches_that_wait_for_it(tiered_log, tiered_s3, s3_server, monkeypatch):
    """Remote segments are read off the network thread (serve/remote.py): while the network to
    S3 holds every byte, a fetch of the remote tier waits, and Metadata and a fetch of the local
    tier on another connection are answered meanwhile; once the bytes flow, the waiting fetch
    gets the remote records, and a consumer then reads the whole log exactly."""
    import threading

    from blocking_client import BlockingClient

    want = tiered_log[2]
    with _served_through_a_bad_network(tiered_log, tiered_s3, s3_server, monkeypatch) as (
            srv, proxy, local_first, remote_first, everything):
        proxy.stall()
        waited: dict[str, object] = {}

        def remote_fetch() -> None:
            with BlockingClient("127.0.0.1", srv.port) as client:
                while True:
                    error, records = _first_records(client, remote_first, 1000)
                    if records or error:
                        waited["answer"], waited["flowing"] = (error, records), proxy.flowing.is_set()
                        return

        waiter = threading.Thread(target=remote_fetch, daemon=True)
        waiter.start()
        with BlockingClient("127.0.0.1", srv.port) as other:
            assert other.metadata([TOPIC]).topics[0].error_code == 0
            error, records = _first_records(other, local_first, 0)
            assert error == 0 and records[0] == everything[local_first]
        assert "answer" not in waited and not proxy.flowing.is_set()       # answered while it waits
        proxy.flow()
        waiter.join(60)
        error, records = waited["answer"]                                  # type: ignore[misc]
        assert waited["flowing"] and error == 0
        assert records and all(everything[r[0]] == r for r in records) and records[0][0] == remote_first
        for level in LEVELS:
            got = confluent_read(f"127.0.0.1:{srv.port}", {(TOPIC, 0): want[level]}, **{"isolation.level": level})
            assert got == {(TOPIC, 0): want[level]}, level
        registry = srv.metrics.registry
        assert registry.get_sample_value("kafkacodec_serve_remote_reads_total") == srv.remote.cache.reads > 0
        assert registry.get_sample_value("kafkacodec_serve_remote_reads_waited_on") == 0


def test_a_store_that_fails_answers_a_storage_error_then_serves_again(tiered_log, tiered_s3, s3_server, monkeypatch):
    """When the store's reads fail (every connection reset), a fetch of the remote tier is
    answered with KAFKA_STORAGE_ERROR (not a closed connection, not a hang), the local tier is
    served meanwhile, and once the store is back the same fetch gets its records."""
    from blocking_client import BlockingClient

    with _served_through_a_bad_network(tiered_log, tiered_s3, s3_server, monkeypatch) as (
            srv, proxy, local_first, remote_first, everything), BlockingClient("127.0.0.1", srv.port) as client:
        proxy.refuse()
        deadline = time.monotonic() + 60
        while (answer := _first_records(client, remote_first, 500)) == (0, []):
            assert time.monotonic() < deadline, "no answer from a failing store"
        assert answer == (56, [])                                           # KAFKA_STORAGE_ERROR
        error, records = _first_records(client, local_first, 0)
        assert error == 0 and records[0] == everything[local_first]
        proxy.flow()
        deadline = time.monotonic() + 60
        while (answer := _first_records(client, remote_first, 500))[1] == []:
            assert time.monotonic() < deadline, f"the store came back, the fetch did not: {answer}"
        assert answer[1][0] == everything[remote_first]
