"""Reading log directories without Spark (kafkacodec.logdir): options in Spark's Kafka-source
vocabulary, damage and data-loss policies, Kafka's index and checkpoint files, pushdown,
paths (globs, lists, file://, S3 on a real S3 API server, tiered-storage names).

Expected rows are derived independently: kafka-python decodes the same bytes (tests/kafka_oracle),
offsets for timestamps are found by brute force over every record."""

import json
import itertools
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kafka_oracle import kafka_python_rows  # noqa: E402

from kafkacodec.arrow import encode_v2, scan_entries  # noqa: E402
from kafkacodec.crc import crc32c  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402
from kafkacodec.errors import CorruptRecordError, KafkaCodecError, LogLayoutError  # noqa: E402
from kafkacodec.logdir import Predicate, Pushdown, ReadOptions, discover, plan, read_split  # noqa: E402
from kafkacodec.logdir.partition_log import LogSegment  # noqa: E402
from kafkacodec.logdir._txn import collect_aborted as _collect_aborted  # noqa: E402
from kafkacodec.logdir._problems import Reporter  # noqa: E402
from kafkacodec.logdir.indexes import build_indexes, parse_offset_index, parse_time_index, parse_txn_index  # noqa: E402

BASE_TS = 1_700_000_000_000


# ------------------------------------------------------------------------------ helpers

@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    return root, generate(root, batches_per_segment=6)


def copy(root, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(root, dst)
    return dst


def read_all(path, options=None, *, problems=None, pushdown=None, columns=None, include_headers=False):
    """Every row of a read (as the Spark source reads: plan, then each split)."""
    ro = ReadOptions.parse({"paths": [str(p) for p in (path if isinstance(path, list) else [path])],
                            **(options or {})})
    collected = problems if problems is not None else []
    splits, _ = plan(None, ro, pushdown=pushdown, on_problem=collected.append)
    batches = [rb for s in splits for rb in read_split(
        s, include_headers=include_headers, keep_control=ro.keep_control, mode=ro.mode,
        fail_on_data_loss=ro.fail_on_data_loss, columns=columns, pushdown=pushdown,
        on_problem=collected.append)]
    return pa.Table.from_batches(batches) if batches else None, splits


def offsets_of(table):
    return sorted(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                      table.column("offset").to_pylist())) if table is not None else []


def oracle(root, *, committed=False):
    """(topic, partition, offset) of every data record by kafka-python (minus aborted ones)."""
    rows = []
    for seg in discover(root):
        rows += [(r["topic"], r["partition"], r["offset"])
                 for r in kafka_python_rows(Path(seg.path).read_bytes(), seg.topic, seg.partition)]
    if committed:
        dropped = set()
        for part in {(s.topic, s.partition) for s in discover(root)}:
            segs = [s for s in discover(root) if (s.topic, s.partition) == part]
            open_txn, aborted = {}, []
            for s in segs:
                _collect_aborted(scan_entries(Path(s.path).read_bytes()), open_txn, aborted)
            for s in segs:
                data = Path(s.path).read_bytes()
                scan = scan_entries(data)
                for j in range(len(scan["position"])):
                    if scan["attributes"][j] & 0x10 and not scan["attributes"][j] & 0x20 and any(
                            pid == scan["producer_id"][j] and a <= scan["base_offset"][j] <= b
                            for pid, a, b in aborted):
                        dropped |= {(part[0], part[1], o) for o in
                                    range(int(scan["base_offset"][j]), int(scan["last_offset"][j]) + 1)}
        rows = [r for r in rows if r not in dropped]
    return sorted(rows)


def write_log(root, topic="events", partitions=2, records=6000, per_segment=2000, late_every=97):
    """v2 batches of ~20 records, timestamps rising 10 ms per record except a late record now and
    then (5 s in the past: CreateTime timestamps are not monotonic), rolled every per_segment."""
    for p in range(partitions):
        d = root / f"{topic}-{p}"
        d.mkdir(parents=True)
        for first in range(0, records, per_segment):
            n = np.arange(first, min(records, first + per_segment))
            ts = BASE_TS + n * 10 + p
            ts[n % late_every == 0] -= 5000
            value = pa.array([b"v%07d" % i for i in n], pa.binary())
            key = pa.array([b"k%d" % (i % 7) for i in n], pa.binary())
            data, _ = encode_v2(key, value, ts.astype(np.int64), batch_bytes=300, base_offset=int(first))
            (d / f"{first:020d}.log").write_bytes(data)
    return root


def producer_snapshot(open_txn):
    """A version-1 producer snapshot (Kafka's storage ProducerSnapshot schema) listing the
    transactions open at its offset: producer id -> first offset."""
    entries = b"".join(struct.pack(">qhiqiqiq", pid, 0, 0, first, 0, BASE_TS, 0, first)
                       for pid, first in sorted(open_txn.items()))
    body = struct.pack(">i", len(open_txn)) + entries
    return struct.pack(">hI", 1, crc32c(body)) + body


def add_indexes(root, interval=512, txn=True, snapshots=True):
    """.index/.timeindex (and .txnindex where aborts end) beside every segment, and the producer
    snapshot taken at each roll, as a broker writes."""
    for part in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        open_txn = {}
        for i, seg in enumerate(sorted(part.glob("*.log"))):
            if snapshots and i:
                seg.with_suffix(".snapshot").write_bytes(producer_snapshot(open_txn))
            data = seg.read_bytes()
            scan = scan_entries(data)
            index, times = build_indexes(scan, int(seg.stem), interval=interval)
            seg.with_suffix(".index").write_bytes(index)
            seg.with_suffix(".timeindex").write_bytes(times)
            aborted = []
            _collect_aborted(scan, open_txn, aborted)
            if txn and aborted:
                seg.with_suffix(".txnindex").write_bytes(b"".join(
                    struct.pack(">hqqqq", 0, pid, a, b, b + 1) for pid, a, b in aborted))


def every_record(root):
    """(topic, partition, offset, timestamp ms) of every record, control batches included."""
    from kafkacodec.arrow import ArrowDecoder

    out = []
    for seg in discover(root):
        rb = ArrowDecoder(seg.topic, seg.partition, keep_control=True).decode(Path(seg.path).read_bytes())[0]
        ts = np.asarray(rb.column("timestamp").cast(pa.int64())) // 1000
        out += [(seg.topic, seg.partition, o, int(t)) for o, t in zip(rb.column("offset").to_pylist(), ts)]
    return out


# ------------------------------------------------------------------------------ options

@pytest.mark.parametrize("options, message", [
    ({"subscrib": "x"}, "did you mean 'subscribe'"),
    ({"startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
    ({"kafka.bootstrap.servers": "h:9092"}, "not a broker"),
    ({"kafka.max.poll.records": "5"}, "kafka.isolation.level"),
    ({"startingOffsets": "latest"}, "not allowed for batch"),
    ({"startingOffsets": '{"events": {"0": -1}}'}, "not allowed for batch"),
    ({"endingOffsets": "earliest"}, "not allowed for batch"),
    ({"endingOffsets": '{"events": {"0": -2}}'}, "not allowed for batch"),
    ({"maxOffsetsPerTrigger": "10"}, "readStream only"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "only one of"),
    ({"kafka.isolation.level": "serializable"}, "read_committed"),
    ({"keepAborted": "true", "kafka.isolation.level": "read_committed"}, "disagree"),
    ({"startingTimestamp": "yesterday"}, "milliseconds"),
    ({"mode": "LENIENT"}, "FAILFAST"),
])
def test_options_refused_with_the_reason(options, message):
    with pytest.raises(ValueError, match=message):
        ReadOptions.parse({"path": "/x", **options})


def test_stream_only_and_batch_only_options():
    with pytest.raises(ValueError, match="batch reads"):
        ReadOptions.parse({"path": "/x", "endingOffsets": "latest"}, streaming=True)
    assert ReadOptions.parse({"path": "/x", "maxOffsetsPerTrigger": "7"}, streaming=True).max_offsets_per_trigger == 7
    assert ReadOptions.parse({"path": "/x"}, streaming=True).starting.kind == "latest"      # Spark's default
    assert ReadOptions.parse({"path": "/x"}).starting.kind == "earliest"


def test_topic_selection(sample):
    root, summary = sample
    everything = oracle(root)
    for options, wanted in [
        ({"subscribe": "orders"}, lambda t, p: t == "orders"),
        ({"topics": "clicks"}, lambda t, p: t == "clicks"),
        ({"subscribePattern": "ord.*"}, lambda t, p: t == "orders"),
        ({"subscribePattern": "ord"}, None),                    # Java's matches(): the whole name
        ({"assign": '{"orders": [1], "clicks": [0]}'}, lambda t, p: (t, p) in {("orders", 1), ("clicks", 0)}),
    ]:
        if wanted is None:
            with pytest.raises(FileNotFoundError, match="no segment of topics"):
                read_all(root, options)
            continue
        table, _ = read_all(root, options)
        assert offsets_of(table) == [r for r in everything if wanted(r[0], r[1])]
    with pytest.raises(FileNotFoundError, match="orders-7"):
        read_all(root, {"assign": '{"orders": [7]}'})


def test_isolation_levels_against_kafka_python(sample):
    root, summary = sample
    table, _ = read_all(root)                               # read_uncommitted, Spark's default
    assert offsets_of(table) == oracle(root) and table.num_rows == summary["records"]
    table, _ = read_all(root, {"kafka.isolation.level": "read_committed"})
    assert offsets_of(table) == oracle(root, committed=True)
    assert table.num_rows == summary["records"] - summary["aborted_records"]
    assert offsets_of(read_all(root, {"keepAborted": "false"})[0]) == offsets_of(table)   # deprecated alias


def test_json_offsets_must_name_every_partition(sample):
    root, _ = sample
    with pytest.raises(ValueError, match="Missing: orders-1"):
        read_all(root, {"subscribe": "orders", "startingOffsets": '{"orders": {"0": 5}}'})
    table, _ = read_all(root, {"subscribe": "orders", "startingOffsets": '{"orders": {"0": 5, "1": -2}}',
                               "endingOffsets": '{"orders": {"0": 40, "1": -1}}'})
    want = [r for r in oracle(root) if r[0] == "orders" and (r[1] == 1 or 5 <= r[2] < 40)]
    assert offsets_of(table) == want
    with pytest.raises(ValueError, match="after the ending offset"):
        read_all(root, {"subscribe": "orders", "startingOffsets": '{"orders": {"0": 50, "1": 0}}',
                        "endingOffsets": '{"orders": {"0": 40, "1": 1}}'})


def test_offsets_outside_the_log_follow_failOnDataLoss(sample):
    root, _ = sample
    end = max(o for t, p, o in oracle(root) if (t, p) == ("orders", 0)) + 1
    with pytest.raises(LogLayoutError, match="past the end of the log"):
        read_all(root, {"assign": '{"orders": [0]}', "endingOffsets": f'{{"orders": {{"0": {end + 5}}}}}'})
    problems = []
    table, _ = read_all(root, {"assign": '{"orders": [0]}', "endingOffsets": f'{{"orders": {{"0": {end + 5}}}}}',
                               "failOnDataLoss": "false"}, problems=problems)
    assert [p.kind for p in problems] == ["range"] and table.num_rows == len(
        [r for r in oracle(root) if r[:2] == ("orders", 0)])


# ------------------------------------------------------------------------------ damage

def test_corrupt_first_size_field_is_reported_in_every_mode(sample, tmp_path):
    """It read as 0 rows in FAILFAST and PERMISSIVE, without an error (issue 18)."""
    root, _ = sample
    part = tmp_path / "orders-0"
    part.mkdir()
    src = sorted((root / "orders-0").glob("*.log"))[1]
    data = bytearray(src.read_bytes())
    data[8:12] = struct.pack(">i", 0x7FFF0000)             # the first entry now claims 2 GiB
    (part / src.name).write_bytes(data)
    with pytest.raises(CorruptRecordError) as info:
        read_all(tmp_path)
    assert src.name in str(info.value) and "declares" in str(info.value) and "mode=DROPMALFORMED" in str(info.value)
    problems = []
    table, _ = read_all(tmp_path, {"mode": "DROPMALFORMED"}, problems=problems)
    assert table is None and [p.kind for p in problems] == ["partial"]
    table, _ = read_all(tmp_path, {"mode": "PERMISSIVE"}, problems=[])
    assert table.num_rows == 1 and "declares" in table.column("_corrupt_record")[0].as_py()
    # a legacy wrapper names its last offset (its base offset is unknown without decompressing)
    assert table.column("offset")[0].as_py() == scan_entries(src.read_bytes())["last_offset"][0]


def test_partial_entry_problem_names_what_its_header_declares(sample, tmp_path):
    # the reader reports a cut last entry with the size and offset its header declares (read
    # here with struct, independently)
    root, _ = sample
    dst = copy(root, tmp_path)
    seg = sorted((dst / "clicks-1").glob("*.log"))[1]
    data = seg.read_bytes()
    last = int(scan_entries(data)["position"][-1])
    seg.write_bytes(data[:last + 30])
    offset, size = struct.unpack_from(">qi", data, last)
    problems = []
    read_all(dst, {"mode": "DROPMALFORMED", "failOnDataLoss": "false"}, problems=problems)
    (problem,) = problems
    assert (problem.position, problem.offset) == (last, offset)
    assert f"an entry at byte {last} declares {12 + size} bytes but only 30 remain" in problem.message


def test_partial_entry_at_the_end_of_a_segment(sample, tmp_path):
    root, _ = sample
    dst = copy(root, tmp_path)
    seg = sorted((dst / "clicks-1").glob("*.log"))[1]
    data = seg.read_bytes()
    last = int(scan_entries(data)["position"][-1])
    seg.write_bytes(data[:last + 30])                      # the last entry cut short
    with pytest.raises(CorruptRecordError, match="declares"):
        read_all(dst)
    problems = []
    table, _ = read_all(dst, {"mode": "DROPMALFORMED", "failOnDataLoss": "false"}, problems=problems)
    assert [p.kind for p in problems] == ["partial"]       # (not also a gap: the damage is the cause)
    lost = scan_entries(data)
    lost_offsets = set(range(int(lost["base_offset"][-1]), int(lost["last_offset"][-1]) + 1))
    assert set(offsets_of(table)) == {r for r in oracle(root) if not (r[:2] == ("clicks", 1) and r[2] in lost_offsets)}


def test_crc_error_skips_one_entry(sample, tmp_path):
    root, _ = sample
    dst = copy(root, tmp_path)
    seg = sorted((dst / "orders-1").glob("*.log"))[-1]
    data = bytearray(seg.read_bytes())
    scan = scan_entries(data)
    j = int(np.flatnonzero((scan["magic"] == 2) & (scan["attributes"] & 0x20 == 0))[1])
    data[int(scan["position"][j]) + 70] ^= 1
    seg.write_bytes(data)
    table, _ = read_all(dst, {"mode": "PERMISSIVE"}, problems=[])
    bad = [r for r in table.to_pylist() if r["_corrupt_record"]]
    assert len(bad) == 1 and "CRC" in bad[0]["_corrupt_record"] and bad[0]["offset"] == scan["base_offset"][j]
    lost = set(range(int(scan["base_offset"][j]), int(scan["last_offset"][j]) + 1))
    good = [r for r in offsets_of(table.filter(pa.compute.is_null(table.column("_corrupt_record"))))]
    assert good == [r for r in oracle(root) if not (r[:2] == ("orders", 1) and r[2] in lost)]


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling"])
def test_entries_named_like_segments_that_are_not_files(sample, tmp_path, kind):
    """A FIFO blocked the planner forever (issue 14 item 8); a directory or a dangling link
    stopped `verify` (item 16).  They are reported, never opened; the rest is read."""
    root, _ = sample
    dst = copy(root, tmp_path)
    after = max(o for t, p, o, _ in every_record(root) if (t, p) == ("orders", 0)) + 1
    odd = dst / "orders-0" / f"{after:020d}.log"                # where the next segment would start
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "directory":
        odd.mkdir()
    else:
        odd.symlink_to(tmp_path / "nowhere.log")
    code = ("import sys; from kafkacodec.logdir import plan; from kafkacodec.errors import LogLayoutError\n"
            f"try:\n    plan({str(dst)!r})\nexcept LogLayoutError as e:\n    print(e); sys.exit(7)\n")
    from isolated import child_env
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=child_env(), cwd=tmp_path)
    assert proc.returncode == 7, proc.stderr
    assert odd.name in proc.stdout and {"fifo": "FIFO", "directory": "directory",
                                        "dangling": "dangling"}[kind] in proc.stdout
    problems = []
    table, _ = read_all(dst, {"mode": "DROPMALFORMED"}, problems=problems)
    assert [p.kind for p in problems] == ["unreadable"] and offsets_of(table) == oracle(root)


def test_a_tiered_segment_in_a_plugins_format_is_refused(sample, tmp_path):
    """Remote segments a RemoteStorageManager encrypted (or chunked, or compressed whole) are no
    Kafka segment files: refused naming the segment and why, never read as records (issue 32);
    the local segments and the readable remote ones are read."""
    root, _ = sample
    dst = copy(root, tmp_path)
    local = dst / "orders-0"
    segments = sorted(local.glob("*.log"))
    remote = tmp_path / "remote" / "kafka-tiered-storage" / "orders-0-AAECAwQFBgcICQoLDA0ODw"
    remote.mkdir(parents=True)
    for seg in segments[:2]:                                   # tiered, then deleted locally
        for path in local.glob(seg.stem + ".*"):
            path.rename(remote / f"{seg.stem}-ZZECAwQFBgcICQoLDA0ODw{path.suffix}")
    encrypted = remote / f"{segments[1].stem}-ZZECAwQFBgcICQoLDA0ODw.log"
    data = encrypted.read_bytes()
    encrypted.write_bytes(bytes(b ^ k for b, k in zip(data, itertools.cycle(os.urandom(32)))))
    with pytest.raises(LogLayoutError, match="RemoteStorageManager") as raised:
        read_all([dst, remote.parent])
    assert encrypted.name in str(raised.value)
    problems = []
    table, _ = read_all([dst, remote.parent], {"mode": "DROPMALFORMED", "failOnDataLoss": "false"},
                        problems=problems)
    assert [p.kind for p in problems] == ["unreadable"] and encrypted.name in problems[0].message
    lost = set(range(int(segments[1].stem), int(segments[2].stem)))
    assert offsets_of(table) == [r for r in oracle(root) if not (r[:2] == ("orders", 0) and r[2] in lost)]


def test_remote_log_metadata_states():
    """A segment's state is its last record's (a copy started, finished, deleted); a partition
    delete marks the partition; a record that is not Kafka's remote log metadata is reported,
    the others kept.  (The broker's own topic: tests/test_tiered.py.)"""
    import uuid as uuid_module

    from kafkacodec.logdir.remote_log_metadata import RECORDS, remote_segments, segment_id_of

    topic_id = uuid_module.uuid4()
    tp = {"name": "t", "id": topic_id, "partition": 3}

    def framed(kind, **fields):
        body = RECORDS[kind].encode(0, fields)
        return bytes([1, kind, 0]) + bytes(body)

    ids = [uuid_module.uuid4() for _ in range(3)]

    def added(i, start):
        return framed(0, remote_log_segment_id={"topic_id_partition": tp, "id": ids[i]}, start_offset=start,
                      end_offset=start + 9, broker_id=1, max_timestamp_ms=0, event_timestamp_ms=0,
                      segment_leader_epochs=[], segment_size_in_bytes=100, custom_metadata=None,
                      remote_log_segment_state=0)

    def moved(i, state):
        return framed(1, remote_log_segment_id={"topic_id_partition": tp, "id": ids[i]}, broker_id=1,
                      event_timestamp_ms=0, custom_metadata=None, remote_log_segment_state=state)

    values = [added(0, 0), moved(0, 1), added(1, 10), added(2, 20), moved(2, 1), moved(2, 2), b"\x01\x09\x00", None]
    known, deleted, unreadable = remote_segments(values)
    assert {sid: s.state_name for sid, s in known[("t", 3)].items()} == {
        segment_id_of(ids[0]): "COPY_SEGMENT_FINISHED", segment_id_of(ids[1]): "COPY_SEGMENT_STARTED",
        segment_id_of(ids[2]): "DELETE_SEGMENT_STARTED"}
    assert known[("t", 3)][segment_id_of(ids[1])].start_offset == 10 and len(unreadable) == 1 and not deleted
    gone = framed(2, topic_id_partition=tp, broker_id=1, event_timestamp_ms=0, remote_partition_delete_state=0)
    assert remote_segments([gone])[1] == {("t", 3)}


# ------------------------------------------------------------------------------ data loss

def test_overlapping_copy_follows_failOnDataLoss(sample, tmp_path):
    """A copy of a segment under another name gave duplicate offsets (issue 18)."""
    root, _ = sample
    dst = copy(root, tmp_path)
    segs = sorted((dst / "clicks-0").glob("*.log"))
    shutil.copy(segs[2], dst / "clicks-0" / f"{int(segs[2].stem) + 3:020d}.log")
    with pytest.raises(LogLayoutError, match="overlap") as info:
        read_all(dst)
    assert "failOnDataLoss=false" in str(info.value) and "failOnDataLoss=false" in info.value.hint
    problems = []
    table, _ = read_all(dst, {"failOnDataLoss": "false"}, problems=problems)
    assert offsets_of(table) == oracle(root)                     # every offset once
    assert {p.kind for p in problems} == {"overlap"}


def test_same_partition_under_two_paths(sample, tmp_path):
    root, _ = sample
    dst = copy(root, tmp_path)
    with pytest.raises(LogLayoutError, match="two copies"):
        read_all([root, dst])
    table, _ = read_all([root, dst], {"failOnDataLoss": "false"}, problems=[])
    assert offsets_of(table) == oracle(root)


def test_missing_middle_segment_follows_failOnDataLoss(sample, tmp_path):
    root, _ = sample
    dst = copy(root, tmp_path)
    segs = sorted((dst / "orders-1").glob("*.log"))
    gone = scan_entries(segs[2].read_bytes())
    segs[2].unlink()
    first, last = int(segs[2].stem), int(gone["last_offset"][-1])
    with pytest.raises(LogLayoutError, match=f"offsets {first}..{last} are missing"):
        read_all(dst)
    problems = []
    table, _ = read_all(dst, {"failOnDataLoss": "false"}, problems=problems)
    assert [p.kind for p in problems] == ["gap"]
    assert offsets_of(table) == [r for r in oracle(root) if not (r[:2] == ("orders", 1) and first <= r[2] <= last)]
    # a compacted partition (cleaner-offset-checkpoint) has such gaps by design
    (dst / "cleaner-offset-checkpoint").write_text(f"0\n1\norders 1 {last + 50}\n")
    assert offsets_of(read_all(dst)[0]) == offsets_of(table)


def test_log_start_offset_checkpoint(sample, tmp_path):
    """Records below log-start-offset-checkpoint were returned (issue 18)."""
    root, _ = sample
    dst = copy(root, tmp_path)
    (dst / "log-start-offset-checkpoint").write_text("0\n2\norders 0 37\nclicks 1 5\n")
    table, _ = read_all(dst)
    want = [r for r in oracle(root) if not (r[:2] == ("orders", 0) and r[2] < 37 or r[:2] == ("clicks", 1) and r[2] < 5)]
    assert offsets_of(table) == want
    # reading a partition directory finds the checkpoint one level up
    assert min(o for _, _, o in offsets_of(read_all(dst / "orders-0")[0])) == 37
    with pytest.raises(LogLayoutError, match="below the earliest"):
        read_all(dst, {"assign": '{"orders": [0]}', "startingOffsets": '{"orders": {"0": 10}}'})
    # a live broker's files start empty (Kafka creates them so and reads no entries): no problem
    for name in ("log-start-offset-checkpoint", "cleaner-offset-checkpoint"):
        (dst / name).write_text("")
    problems = []
    assert offsets_of(read_all(dst, problems=problems)[0]) == oracle(root) and problems == []
    (dst / "log-start-offset-checkpoint").write_text("7\n")
    assert offsets_of(read_all(dst, problems=problems)[0]) == oracle(root)
    assert [p.kind for p in problems] == ["checkpoint"]


# ------------------------------------------------------------------------------ index files

def test_index_readers_against_brute_force(tmp_path):
    root = write_log(tmp_path / "log", partitions=1, records=3000, per_segment=3000)
    seg = next((root / "events-0").glob("*.log"))
    data = seg.read_bytes()
    scan = scan_entries(data)
    index_bytes, time_bytes = build_indexes(scan, 0, interval=700)
    index = parse_offset_index(index_bytes, 0, len(data), "x.index")
    times = parse_time_index(time_bytes, 0, "x.timeindex")
    assert len(index.offsets) > 20 and len(times.offsets) > 5
    firsts, lasts, positions = scan["base_offset"], scan["last_offset"], scan["position"]
    for offset in range(0, 3000, 7):
        start = index.start_position(offset)
        assert lasts[positions < start].max(initial=-1) < offset             # nothing wanted is skipped
        assert start in set(positions.tolist())
        end = index.end_position(offset)
        if end is not None:
            assert firsts[positions >= end].min() >= offset and end in set(positions.tolist())
    records = every_record(root)
    for target in range(BASE_TS - 6000, BASE_TS + 31000, 333):
        o = times.lookup(target)
        assert all(t <= max(target, times.timestamps[0]) for _, _, off, t in records if off < o) or o == 0
    # preallocated (zero) slots after the entries are not entries
    assert len(parse_offset_index(index_bytes + bytes(80), 0, len(data), "x").offsets) == len(index.offsets)
    for bad, match in [(index_bytes[:-3], "multiple"), (index_bytes[8:16] + index_bytes[:8], "goes back"),
                       (index_bytes[:8] + struct.pack(">ii", 10**6, len(data) + 10), "past the segment")]:
        with pytest.raises(CorruptRecordError, match=match):
            parse_offset_index(bad, 0, len(data), "x.index")
    with pytest.raises(CorruptRecordError, match="goes back"):
        parse_time_index(time_bytes[12:24] + time_bytes[:12], 0, "x.timeindex")
    with pytest.raises(CorruptRecordError, match="version"):
        parse_txn_index(struct.pack(">hqqqq", 1, 5, 0, 3, 4), 0, "x.txnindex")
    with pytest.raises(CorruptRecordError, match="not ending in this segment"):
        parse_txn_index(struct.pack(">hqqqq", 0, 5, 0, 3, 4), 10, "x.txnindex")


def test_indexes_give_the_same_rows_and_cut_splits(tmp_path):
    root = write_log(tmp_path / "log")
    plain = read_all(root, {"maxPartitionBytes": "4000"})
    add_indexes(root, interval=512)
    indexed = read_all(root, {"maxPartitionBytes": "4000"})
    assert offsets_of(indexed[0]) == offsets_of(plain[0]) == sorted(
        ("events", p, o) for p in range(2) for o in range(6000))
    assert len(indexed[1]) > 12                                   # cut at index entries
    ro = ReadOptions.parse({"path": str(root), "startingOffsets": '{"events": {"0": 3333, "1": 10}}',
                            "endingOffsets": '{"events": {"0": 3400, "1": 20}}'})
    splits, _ = plan(None, ro)
    part0 = [s for s in splits if s.partition == 0]
    assert len(part0) == 1 and 0 < part0[0].start and part0[0].end < Path(part0[0].path).stat().st_size
    got = offsets_of(pa.Table.from_batches([rb for s in splits for rb in read_split(s)]))
    assert got == [("events", 0, o) for o in range(3333, 3400)] + [("events", 1, o) for o in range(10, 20)]


def test_invalid_or_lying_index_is_ignored_with_a_warning(tmp_path):
    root = write_log(tmp_path / "log", partitions=1)
    add_indexes(root, interval=512)
    segs = sorted((root / "events-0").glob("*.log"))
    segs[1].with_suffix(".index").write_bytes(b"\x01" * 13)            # not a multiple of 8
    entries = np.frombuffer(segs[2].with_suffix(".index").read_bytes(), ">i4").reshape(-1, 2)
    lie = np.stack([entries[:-3, 0], entries[3:, 1]], axis=1)          # each entry points 3 entries on
    segs[2].with_suffix(".index").write_bytes(lie.astype(">i4").tobytes())
    problems = []
    options = {"startingOffsets": '{"events": {"0": 4100}}', "endingOffsets": '{"events": {"0": 5000}}'}
    table, _ = read_all(root, options, problems=problems)
    assert offsets_of(table) == [("events", 0, o) for o in range(4100, 5000)]
    assert [p.kind for p in problems] == ["index"] and "does not match" in problems[0].message
    problems.clear()
    table, _ = read_all(root, {"startingOffsets": '{"events": {"0": 2100}}', "maxPartitionBytes": "3000"},
                        problems=problems)
    assert offsets_of(table) == [("events", 0, o) for o in range(2100, 6000)]
    assert any("multiple" in p.message for p in problems)


def test_txnindex_replaces_the_scan(sample, tmp_path, monkeypatch):
    """A rolled segment with a .txnindex that holds and the producer snapshot after it is not
    walked (its tail is read for its last offset, its markers are looked at); one without a
    .txnindex is (Kafka writes none for a segment without aborts, and a missing file cannot be
    told from a removed one: the rule serve follows too, logdir/_txn.py)."""
    root, _ = sample
    dst = copy(root, tmp_path)
    add_indexes(dst, interval=256)
    committed = oracle(root, committed=True)
    walked = []
    original = LogSegment.walk
    monkeypatch.setattr(LogSegment, "walk", lambda self, start, end: (     # the whole segment walked
        None if start or end < self.size else walked.append(self.path)) or original(self, start, end))
    assert offsets_of(read_all(dst, {"kafka.isolation.level": "read_committed"})[0]) == committed
    with_txnindex = {str(p.with_suffix(".log")) for p in dst.glob("*/*.txnindex")}
    last_segments = {str(sorted(p.glob("*.log"))[-1]) for p in dst.iterdir() if p.is_dir()}
    assert with_txnindex - last_segments and not (set(walked) & (with_txnindex - last_segments))
    assert set(walked) == {str(p) for p in dst.glob("*/*.log")} - (with_txnindex - last_segments)
    # the index is what decides: with the aborts removed from it, aborted records come back
    for txn in dst.glob("*/*.txnindex"):
        txn.write_bytes(b"")
    assert offsets_of(read_all(dst, {"kafka.isolation.level": "read_committed"})[0]) != committed
    # an invalid one: the scan again
    add_indexes(dst, interval=256)
    next(dst.glob("*/*.txnindex")).write_bytes(b"\x00" * 35)
    problems = []
    assert offsets_of(read_all(dst, {"kafka.isolation.level": "read_committed"}, problems=problems)[0]) == committed
    assert [p.kind for p in problems] == ["index"]


def test_read_committed_stops_at_the_last_stable_offset(tmp_path):
    from kafkacodec import MemoryRecordsBuilder

    part = tmp_path / "t-0"
    part.mkdir()
    out = bytearray()
    for offset, (pid, txn) in enumerate([(-1, False), (7, True), (-1, False), (7, True), (-1, False)]):
        b = MemoryRecordsBuilder(magic=2, base_offset=offset, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                 base_sequence=offset if pid >= 0 else -1, is_transactional=txn)
        b.append(BASE_TS + offset, None, b"x")
        out += b.build()
    (part / f"{0:020d}.log").write_bytes(bytes(out))
    assert [o for _, _, o in offsets_of(read_all(tmp_path)[0])] == [0, 1, 2, 3, 4]
    # the transaction of producer 7 is still open: read_committed stops before its first batch
    assert [o for _, _, o in offsets_of(read_all(tmp_path, {"kafka.isolation.level": "read_committed"})[0])] == [0]


def _segment(*batches):
    from kafkacodec import MemoryRecordsBuilder

    out = bytearray()
    for offset, count, pid in batches:
        b = MemoryRecordsBuilder(magic=2, base_offset=offset, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                 base_sequence=0 if pid >= 0 else -1, is_transactional=pid >= 0)
        for i in range(count):
            b.append(BASE_TS + offset + i, None, b"v%d" % (offset + i))
        out += b.build()
    return bytes(out)


def test_a_transaction_open_in_an_earlier_segment_holds_the_last_stable_offset(tmp_path):
    # producer 5 opens a transaction at 3 in segment 0 and writes nothing more; segment 5 holds
    # plain records only.  With every .index present the planner searched back only while a
    # producer of the later segments had open data: none had, so it stopped at segment 5 and
    # read_committed ran past the open transaction.
    part = tmp_path / "t-0"
    part.mkdir()
    (part / f"{0:020d}.log").write_bytes(_segment((0, 3, -1), (3, 2, 5)))
    (part / f"{5:020d}.log").write_bytes(_segment((5, 4, -1)))
    committed = {"kafka.isolation.level": "read_committed"}
    expected = [0, 1, 2]                                  # up to the open transaction's first offset
    for indexed in (False, True):
        if indexed:
            add_indexes(tmp_path, snapshots=False)
        assert [o for _, _, o in offsets_of(read_all(tmp_path, committed)[0])] == expected, indexed
    # Kafka's producer snapshot at the roll is what tells which transactions were open there:
    # with one after a segment whose .txnindex holds (here: no aborts), that segment is not
    # walked (the snapshot's word decides: here producer 9 at 1); without the .txnindex it is
    (part / f"{5:020d}.snapshot").write_bytes(producer_snapshot({9: 1}))
    assert [o for _, _, o in offsets_of(read_all(tmp_path, committed)[0])] == expected
    (part / f"{0:020d}.txnindex").write_bytes(b"")
    assert [o for _, _, o in offsets_of(read_all(tmp_path, committed)[0])] == [0]
    # an invalid one (a flipped byte: CRC mismatch) is noted and the walk decides again
    bad = bytearray(producer_snapshot({9: 1}))
    bad[-1] ^= 1
    (part / f"{5:020d}.snapshot").write_bytes(bytes(bad))
    problems = []
    assert [o for _, _, o in offsets_of(read_all(tmp_path, committed, problems=problems)[0])] == expected
    assert [p.kind for p in problems] == ["index"] and "snapshot" in problems[0].message


# ------------------------------------------------------------------------------ timestamps

@pytest.mark.parametrize("indexed", [False, True])
def test_offsets_for_timestamps_match_brute_force(tmp_path, indexed):
    root = write_log(tmp_path / "log")
    if indexed:
        add_indexes(root, interval=512)
    records = every_record(root)

    def first_at(p, ts):
        hits = [o for t, q, o, t_ms in sorted(records) if q == p and t_ms >= ts]
        return hits[0] if hits else None

    for ts in (BASE_TS - 10_000, BASE_TS + 12_345, BASE_TS + 40_005, BASE_TS + 59_990):
        start0, start1 = first_at(0, ts), first_at(1, ts)
        end_ts = ts + 5_000
        table, _ = read_all(root, {"startingTimestamp": str(ts), "endingTimestamp": str(end_ts)})
        for p, start in ((0, start0), (1, start1)):
            end = first_at(p, end_ts)
            got = [o for _, q, o in offsets_of(table) if q == p]
            assert got == list(range(start, 6000 if end is None else end))
    by_partition = json.dumps({"events": {"0": BASE_TS + 100, "1": BASE_TS + 50_000}})
    table, _ = read_all(root, {"startingOffsetsByTimestamp": by_partition})
    assert min(o for _, q, o in offsets_of(table) if q == 1) == first_at(1, BASE_TS + 50_000)
    with pytest.raises(ValueError, match="no record at or after"):
        read_all(root, {"startingTimestamp": str(BASE_TS + 10**9)})
    assert read_all(root, {"startingTimestamp": str(BASE_TS + 10**9),
                           "startingOffsetsByTimestampStrategy": "latest"})[0] is None


# ------------------------------------------------------------------------------ pushdown

@pytest.mark.parametrize("indexed", [False, True])
def test_pushdown_is_exact_and_reads_less(tmp_path, indexed):
    root = write_log(tmp_path / "log", records=8000, per_segment=2000)
    if indexed:
        add_indexes(root, interval=512)
    full, full_splits = read_all(root, columns=["offset", "partition", "topic", "timestamp"])
    rows = full.to_pylist()
    ts = lambda ms: __import__("datetime").datetime.fromtimestamp(ms / 1000, __import__("datetime").timezone.utc)  # noqa: E731
    cases = [
        [Predicate("offset", ">=", 3000), Predicate("offset", "<", 3080)],
        [Predicate("offset", "in", (5, 7000, 7001)), Predicate("partition", "=", 1)],
        [Predicate("offset", ">", 7990), Predicate("topic", "=", "events"), Predicate("offset", "notnull")],
        [Predicate("timestamp", ">=", ts(BASE_TS + 60_000)), Predicate("timestamp", "<", ts(BASE_TS + 61_000))],
        [Predicate("partition", "in", (0,)), Predicate("timestamp", "=", ts(BASE_TS + 20_000))],
        [Predicate("topic", "=", "other")],
    ]
    bytes_full = sum(s.end - s.start for s in full_splits)
    for predicates in cases:
        pushdown = Pushdown(list(predicates))
        table, splits = read_all(root, pushdown=pushdown, columns=["offset", "partition", "topic", "timestamp"])
        mask = pushdown.mask(full)
        want = sorted(tuple(r.values()) for r in full.filter(mask).to_pylist())
        got = sorted(tuple(r.values()) for r in table.to_pylist()) if table is not None else []
        assert got == want and rows
        read_bytes = sum(s.end - s.start for s in splits)
        if predicates[0].column == "offset" or predicates[0].column == "topic":
            assert read_bytes < bytes_full / 3
        if predicates[0].op == ">=" and predicates[0].column == "offset":    # 80 of 16000 offsets
            assert read_bytes < bytes_full / 40                            # (index, or a scan locally)
        if predicates[0].column == "timestamp" and indexed:
            assert read_bytes < bytes_full / 2                  # the lower bound, through .timeindex


def test_min_partitions(tmp_path):
    root = write_log(tmp_path / "log", partitions=1, records=4000, per_segment=4000)
    _, splits = read_all(root)
    assert len(splits) == 1
    table, splits = read_all(root, {"minPartitions": "6"})
    assert len(splits) >= 5 and offsets_of(table) == [("events", 0, o) for o in range(4000)]


def test_column_projection(sample):
    root, _ = sample
    table, _ = read_all(root, columns=["value", "offset"])
    assert table.schema.names == ["value", "offset"]
    full, _ = read_all(root)
    def pairs(t):
        return sorted(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()), key=repr)
    assert pairs(table) == pairs(full)


# ------------------------------------------------------------------------------ paths

def test_globs_lists_and_file_uris(sample):
    root, _ = sample
    everything = oracle(root)
    assert offsets_of(read_all(f"file://{root}")[0]) == everything
    assert offsets_of(read_all(str(root / "*-1"))[0]) == [r for r in everything if r[1] == 1]
    assert offsets_of(read_all(str(root / "{orders,clicks}-0"))[0]) == [r for r in everything if r[1] == 0]
    assert offsets_of(read_all([root / "orders-0", root / "clicks-1"])[0]) == [
        r for r in everything if r[:2] in {("orders", 0), ("clicks", 1)}]
    seg = sorted((root / "orders-0").glob("*.log"))[1]
    assert offsets_of(read_all(seg)[0]) == [r for r in everything if r[:2] == ("orders", 0)
                                           and int(seg.stem) <= r[2] < int(sorted((root / "orders-0").glob("*.log"))[2].stem)]
    with pytest.raises(FileNotFoundError, match="matches no file"):
        read_all(str(root / "nothing-*"))
    with pytest.raises(ValueError, match="unsupported scheme"):
        read_all("ftp://host/x")


def test_tiered_storage_layout(sample, tmp_path):
    """Kafka's LocalTieredStorage names: <topic>-<partition>-<topic id>/<offset>-<segment id>.log."""
    root, _ = sample
    tiered = tmp_path / "remote"
    for i, part in enumerate(sorted(p for p in root.iterdir() if p.is_dir())):
        d = tiered / f"{part.name}-{'T' * 21}{i}"
        d.mkdir(parents=True)
        for j, seg in enumerate(sorted(part.glob("*.log"))):
            shutil.copy(seg, d / f"{seg.stem}-{'s' * 20}{i}{j}.log")
    assert offsets_of(read_all(tiered)[0]) == oracle(root)


def test_s3(sample, s3_server, monkeypatch):
    """The same rows from a real S3 API server, read in ranges (small windows force many)."""
    import kafkacodec.logdir._read as read_module
    import kafkacodec.logdir.partition_log as log_module

    root, _ = sample
    bucket = s3_server.upload(root, "logs")[len("s3://"):].split("/")[0]
    options = s3_server.options
    monkeypatch.setattr(log_module, "REMOTE_WINDOW", 700)
    monkeypatch.setattr(read_module, "WINDOW", 700)
    assert offsets_of(read_all(f"s3a://{bucket}/logs", options)[0]) == oracle(root)
    assert offsets_of(read_all(f"s3://{bucket}/logs/orders-*", {**options, "kafka.isolation.level": "read_committed"})[0]) == \
        [r for r in oracle(root, committed=True) if r[0] == "orders"]
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)                         # or the environment, as pyarrow reads it
    assert offsets_of(read_all(f"s3://{bucket}/logs/clicks-1")[0]) == [r for r in oracle(root) if r[:2] == ("clicks", 1)]
    with pytest.raises(FileNotFoundError):
        read_all(f"s3://{bucket}/nothing-here", options)


def test_deferred_reads_shared_by_threads_give_the_files_bytes(sample, s3_server, monkeypatch):
    """DeferredReads (logdir/deferred.py) is shared by serve's loop and its workers: threads
    that each look up random ranges of S3 objects, and make the reads they are told to wait
    for, through one cache far smaller than what they read (4 KiB blocks, 8 kept), always get
    the file's bytes; the cache stays in its bound, a file over its limit is refused."""
    import random
    import threading

    from kafkacodec.logdir import deferred
    from kafkacodec.logdir.deferred import DeferredReads, ReadPending
    from kafkacodec.logdir.storage import resolve

    root, _ = sample
    uri = s3_server.upload(root, "logs")
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(deferred, "BLOCK", 4096)
    files = sorted(root.glob("*/*.log"))
    storage, base = resolve([uri])[0]
    paths = [storage.join(base, f"{f.parent.name}/{f.name}") for f in files]
    reads = DeferredReads(limit=8 * 4096)
    failures: list[BaseException] = []

    def settle(step):
        while True:
            try:
                return step()
            except ReadPending as pending:
                pending.read()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(150):
                i = rng.randrange(len(files))
                data = files[i].read_bytes()
                start = rng.randrange(len(data))
                end = min(len(data), start + rng.choice((1, 100, 5000, 20000)))
                buf, at = settle(lambda: reads.range(storage, paths[i], start, end))
                assert bytes(memoryview(buf)[start - at:end - at]) == data[start:end]
                assert settle(lambda: reads.size(storage, paths[i])) == len(data)
        except BaseException as exc:           # noqa: BLE001 (reported below)
            failures.append(exc)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[0]
    assert reads.cached_bytes <= reads.limit and reads.reads > 8
    with pytest.raises(OSError, match="more than 10"):
        settle(lambda: reads.whole(storage, paths[0], limit=10))


def test_a_deferred_scan_of_a_segment_larger_than_the_cache_goes_through(sample, s3_server, monkeypatch):
    """A segment with no .index, read never waiting through a cache of 3 KiB (128-byte blocks,
    128-byte header windows): its header scan resumes where each pending read stopped it
    (a restart from the first byte would find its first windows evicted, and read for ever);
    every offset and the log end come out as on disk, in a bounded number of reruns."""
    import kafkacodec.logdir.partition_log as log_module
    from kafkacodec.logdir import deferred
    from kafkacodec.logdir._layout import find_partitions
    from kafkacodec.logdir.deferred import DeferredReads, ReadPending
    from kafkacodec.logdir.partition_log import PartitionLog

    root, _ = sample
    uri = s3_server.upload(root, "logs")
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(deferred, "BLOCK", 128)
    monkeypatch.setattr(log_module, "REMOTE_WINDOW", 128)
    reads = DeferredReads(limit=24 * 128)
    disk = next(p for p in find_partitions([str(root)])[0] if (p.topic, p.partition) == ("orders", 0))
    remote = next(p for p in find_partitions([uri])[0] if (p.topic, p.partition) == ("orders", 0))
    assert max(seg.size for seg in remote.segments) > reads.limit and not remote.segments[0].index(".index")
    want, got = PartitionLog(disk), PartitionLog(remote, reads=reads)
    reruns = 0

    def settle(step):
        nonlocal reruns
        while True:
            try:
                return step()
            except ReadPending as pending:
                reruns += 1
                assert reruns < 5_000, "the scan keeps reading what it read before"
                pending.read()

    assert settle(lambda: got.log_end) == want.log_end
    assert [settle(lambda: got.read(o, 1, True, want.log_end)).position for o in range(0, want.log_end, 7)] == \
        [want.read(o, 1, True, want.log_end).position for o in range(0, want.log_end, 7)]
    assert reads.cached_bytes <= reads.limit


def test_serve_answers_a_lookup_that_keeps_needing_reads_with_a_storage_error(sample, s3_server, monkeypatch):
    """serve's ListOffsets over a partition in S3 runs again after each remote read it waits
    for, up to MAX_RERUNS times; one that still needs more (here: allowed 2, and MAX_TIMESTAMP
    walks every segment) gets a storage error instead of reading for ever.  Allowed enough, the
    same lookup gives the answer of the directory on disk."""
    from kafkacodec.logdir.partition_log import StorageError
    from kafkacodec.net.loop import Loop
    from kafkacodec.serve import logview, remote as remote_module
    from kafkacodec.serve.logview import LogView
    from kafkacodec.serve.remote import RemoteReads

    root, _ = sample
    uri = s3_server.upload(root, "logs")
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    want = LogView([str(root)]).partition("orders", 0).offset_at(-3, False)
    loop = Loop()
    remote = RemoteReads(loop)
    try:
        for allowed, expect in ((2, StorageError), (10_000, want)):
            monkeypatch.setattr(logview, "MAX_RERUNS", allowed)
            monkeypatch.setattr(remote_module, "MAX_RERUNS", allowed)
            remote.cache.close()
            part = LogView([uri], remote).partition("orders", 0)
            answers: list[object] = []
            part.list_offset(-3, False, lambda found, error: answers.append(error or found))
            assert loop.run_until(lambda: bool(answers), 60)
            if expect is StorageError:
                assert isinstance(answers[0], StorageError) and "remote read cache" in str(answers[0])
            else:
                assert answers == [want]
    finally:
        remote.close()
        loop.close()


def test_errors_are_kafkacodec_errors(sample, tmp_path):
    root, _ = sample
    dst = copy(root, tmp_path)
    seg = sorted((dst / "orders-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[16] = 9                                                 # bad magic in the first entry
    seg.write_bytes(data)
    with pytest.raises(KafkaCodecError, match="magic"):
        read_all(dst)
    reporter = Reporter("DROPMALFORMED", True, [].append)
    assert reporter.mode == "DROPMALFORMED"


def test_windows_smaller_than_entries(sample, tmp_path, monkeypatch):
    """Reads go window by window (bounding the entry table); an entry larger than a window is
    read whole, damage past a window boundary is still found."""
    import kafkacodec.logdir._read as read_module

    root, _ = sample
    monkeypatch.setattr(read_module, "WINDOW", 97)
    assert offsets_of(read_all(root)[0]) == oracle(root)
    dst = copy(root, tmp_path)
    seg = sorted((dst / "clicks-0").glob("*.log"))[0]
    data = seg.read_bytes()
    scan = scan_entries(data)
    seg.write_bytes(data[:int(scan["position"][-1]) + 40])
    with pytest.raises(CorruptRecordError, match=f"entry at byte {int(scan['position'][-1])} declares"):
        read_all(dst)


def test_decoder_column_pruning_is_used_when_available(sample, monkeypatch):
    """The reader hands the columns it needs to ArrowDecoder(columns=...) when the compiled core
    takes that argument (docs/spark-and-cli.md), and selects them itself otherwise."""
    import kafkacodec.arrow as arrow

    root, _ = sample
    plain, _ = read_all(root, columns=["value", "offset"])
    real = arrow.ArrowDecoder
    asked = []

    class WithColumns:
        def __init__(self, topic, partition, *, columns, **kwargs):
            asked.append(list(columns))
            self.inner, self.columns = real(topic, partition, **kwargs), list(columns)

        def decode(self, *args):
            rb, pos = self.inner.decode(*args)
            return rb.select(self.columns), pos

        @property
        def failed_entry(self):
            return self.inner.failed_entry

    monkeypatch.setattr(arrow, "ArrowDecoder", WithColumns)
    pruned, _ = read_all(root, columns=["value", "offset"])
    assert asked and all(a == ["value", "offset"] for a in asked)       # in the schema's order
    assert pruned.equals(plain)


def test_unlistable_partition_directory(sample, monkeypatch):
    """A partition directory that cannot be listed (no permission; simulated, the tests may run
    as root) is reported as unreadable; the rest is read."""
    from kafkacodec.logdir.storage import Storage

    root, _ = sample
    real = Storage.list

    def listing(self, directory, skipped=None):
        if directory.endswith("orders-1"):
            raise PermissionError(13, "Permission denied", directory)
        return real(self, directory, skipped)

    monkeypatch.setattr(Storage, "list", listing)
    problems = []
    table, _ = read_all(root, {"mode": "DROPMALFORMED"}, problems=problems)
    assert [p.kind for p in problems] == ["unreadable"] and "Permission denied" in problems[0].message
    assert offsets_of(table) == [r for r in oracle(root) if r[:2] != ("orders", 1)]


def test_s3a_options_become_pyarrow_s3_arguments_for_reader_and_writer():
    from kafkacodec.logdir._store import open_store
    from kafkacodec.logdir.storage import s3_filesystem_arguments

    options = {"fs.s3a.endpoint": "minio:9000", "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK",
               "fs.s3a.endpoint.region": "eu-west-1", "fs.s3a.path.style.access": "true",
               "fs.s3a.session.token": None}
    assert s3_filesystem_arguments(options) == {
        "access_key": "AK", "secret_key": "SK", "region": "eu-west-1", "endpoint_override": "minio:9000",
        "scheme": "https", "force_virtual_addressing": False}
    assert s3_filesystem_arguments({"fs.s3a.endpoint": "http://h:1"})["scheme"] == "http"
    assert s3_filesystem_arguments({"fs.s3a.endpoint": "http://h:1",
                                    "fs.s3a.connection.ssl.enabled": "TRUE"})["scheme"] == "https"
    # None means "not set" for every option, ssl.enabled too (it fell back to http)
    assert s3_filesystem_arguments({"fs.s3a.endpoint": "minio:9000",
                                    "fs.s3a.connection.ssl.enabled": None})["scheme"] == "https"
    store, root = open_store("s3a://bucket/dir?x=1", {k.upper(): v for k, v in options.items()})
    assert root == "bucket/dir"
    assert store.fs.region == "eu-west-1"


# ------------------------------------------------------------------------------ names

def test_names_that_are_not_utf8_are_skipped_and_reported_everywhere(tmp_path):
    """A partition directory (and a segment) named in another encoding: every listing skips it
    and says so, the rest is read; a name of non-ASCII digits is no segment either."""
    from test_serve import odd_named_log

    root = tmp_path / "logs"
    odd_named_log(root)
    with open(os.path.join(os.fsencode(root / "plain-0"), b"\xff%019d.log" % 5), "wb") as file:
        file.write(b"not read")
    (root / "plain-0" / ("\u0660" * 20 + ".log")).write_bytes(b"not read either")   # Arabic-Indic digits
    problems = []
    table, _ = read_all(root, problems=problems)
    assert offsets_of(table) == [("plain", 0, 0), ("plain", 0, 1), ("plain", 0, 2)]
    named = sorted(p.path for p in problems if p.kind == "name")
    assert named == [str(root / "caf\\xe9-0"), str(root / "plain-0" / ("\\xff%019d.log" % 5))]
    assert all("not UTF-8" in p.message for p in problems if p.kind == "name")
    assert [s.path for s in discover(root)] == [str(root / "plain-0" / f"{0:020d}.log")]
    # kafkacodec verify and read: the odd names reported, on a stdout that is strict UTF-8
    from isolated import child_env

    verify = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "verify", str(root), "--no-progress"],
                            capture_output=True, text=True, env=dict(child_env(), PYTHONIOENCODING="utf-8:strict"),
                            timeout=120)
    assert verify.returncode == 1, verify.stderr
    assert "caf\\xe9-0" in verify.stdout and "3 records" in verify.stdout
    as_json = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "verify", str(root), "--json", "--no-progress"],
                             capture_output=True, text=True, env=child_env(), timeout=120)
    result = json.loads(as_json.stdout)
    assert result["records"] == 3 and result["counts"] == {"name": 2}
