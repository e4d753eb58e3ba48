"""kafkacodec.logdir._write without Spark: tasks' sorted runs, the merge of overlapping runs,
the all-or-nothing commit and the save modes.  Every log is read back with kafka-python."""

import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkacodec.logdir._store import open_store
from kafkacodec.logdir._write import STAGING, TaskWriter, abort, commit, next_offsets

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()), ("value", pa.binary())])


def read_partition(folder):
    """kafka-python's reading of the partition's segments; checks that each segment is named at
    or below its first batch, and each after the first right after the last offset before it
    (skipped offsets lie inside segments, as the log cleaner leaves them)."""
    rows = []
    next_offset = None
    for seg in sorted(Path(folder).glob("*.log")):
        records = MemoryRecords(seg.read_bytes())
        if not records.has_next():
            next_offset = None             # an empty active segment: the next one keeps its batch's name
        first = True
        while records.has_next():
            batch = records.next_batch()
            assert batch.magic == 2
            if first:
                assert int(seg.stem) <= batch.base_offset
                assert next_offset is None or int(seg.stem) == next_offset
                first = False
            rows += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
            next_offset = batch.base_offset + batch.last_offset_delta + 1
    return rows


def write(root, tasks, job="job", **kwargs):
    """Each task: a list of Arrow batches (rows as dicts)."""
    store, path = open_store(str(root))
    options = {k: kwargs[k] for k in ("segment_bytes", "batch_bytes") if k in kwargs}
    if "buffer_bytes" in kwargs:
        options["buffer_bytes"] = kwargs.pop("buffer_bytes")
    runs = []
    try:
        for task, batches in enumerate(tasks):
            w = TaskWriter(store, store.join(path, STAGING, job), task=task,
                           next_offsets=kwargs.get("expected_next"), base_offset=kwargs.get("base_offset", 0),
                           **options)
            for rows in batches:
                schema = SCHEMA if "offset" in rows[0] else SCHEMA.remove(2)
                w.add(pa.RecordBatch.from_pylist(rows, schema=schema))
            runs += w.close()
    except BaseException:
        abort(store, path, job)               # as Spark calls the writer's abort()
        raise
    return commit(store, path, job, runs, **kwargs)


def rows(offsets, partition=0, topic="t"):
    return [{"topic": topic, "partition": partition, "offset": o, "timestamp": 1_700_000_000_000_000 + o * 1000,
             "key": b"k%d" % o, "value": b"v%d" % o} for o in offsets]


def test_gaps_stay_inside_batches_like_the_log_cleaner_leaves_them(tmp_path):
    offsets = [0, 2, 3, 7, 8, 9, 40, *range(41, 141), 300, 302]        # a dense stretch between gaps
    write(tmp_path, [[rows(offsets)]], batch_bytes=400)
    assert [r[0] for r in read_partition(tmp_path / "t-0")] == offsets
    seg = next((tmp_path / "t-0").glob("*.log"))
    records = MemoryRecords(seg.read_bytes())
    spans = []
    while records.has_next():
        batch = records.next_batch()
        got = [r.offset for r in batch]
        assert batch.base_offset == got[0] and len(got) == len(set(got))
        spans.append(got)
    assert spans[0][:4] == [0, 2, 3, 7]                     # one batch across gaps
    assert [o for span in spans for o in span] == offsets


def test_runs_from_many_tasks_in_any_order_are_merged_by_offset(tmp_path):
    rng = random.Random(1)
    offsets = sorted(rng.sample(range(5000), 1500))                 # compaction-like gaps
    shuffled = rows(offsets, 0) + rows(offsets[:700], 1)
    rng.shuffle(shuffled)
    batches = [shuffled[i:i + 25] for i in range(0, len(shuffled), 25)]
    plans = write(tmp_path, [batches[t::4] for t in range(4)], segment_bytes=4000, batch_bytes=500,
                  buffer_bytes=3000)
    assert plans[("t", 0)].records == 1500 and len(plans[("t", 0)].segments) > 3
    for p, expected in ((0, offsets), (1, offsets[:700])):
        got = read_partition(tmp_path / f"t-{p}")
        assert [r[0] for r in got] == expected
        assert got == [(o, 1_700_000_000_000 + o, b"k%d" % o, b"v%d" % o) for o in expected]
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", "t-0", "t-1"]


def test_without_offsets_numbered_in_timestamp_order_ties_in_task_order(tmp_path):
    def row(ts, tag):
        return {"topic": "t", "partition": 0, "timestamp": ts * 1000, "key": None, "value": tag}

    tasks = [[[row(5, b"a5"), row(1, b"a1"), row(5, b"a5b")]], [[row(3, b"b3"), row(5, b"b5")]]]
    write(tmp_path, tasks, base_offset=10)
    got = read_partition(tmp_path / "t-0")
    assert [(o, v) for o, _, _, v in got] == [(10, b"a1"), (11, b"b3"), (12, b"a5"), (13, b"a5b"), (14, b"b5")]


def test_duplicate_offsets_are_refused_and_nothing_is_left(tmp_path):
    with pytest.raises(ValueError, match="offset 7 appears twice in t-0"):
        write(tmp_path, [[rows([5, 7])], [rows([7, 9])]])
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="offset 7 appears twice"):
        write(tmp_path, [[rows([5, 7, 7])]])


def test_commit_failure_puts_everything_back(tmp_path):
    write(tmp_path, [[rows(range(3), 0)]])
    (tmp_path / "t-2").write_text("in the way")
    (tmp_path / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(OSError):
        write(tmp_path, [[rows(range(3, 6), 0) + rows(range(3), 1) + rows(range(3), 2)]], mode="append")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", "notes.txt", "t-0", "t-2"]
    with pytest.raises(OSError):        # overwrite: the replaced partitions come back too
        write(tmp_path, [[rows(range(9), 0) + rows(range(3), 2)]], mode="overwrite")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_append_after_an_empty_active_segment(tmp_path):
    write(tmp_path, [[rows(range(4))]])
    (tmp_path / "t-0" / f"{10:020d}.log").write_bytes(b"")        # rolled, nothing written yet
    store, path = open_store(str(tmp_path))
    assert next_offsets(store, path) == {("t", 0): 10}
    with pytest.raises(ValueError, match="already holds offsets up to 9"):
        write(tmp_path, [[rows([8])]], mode="append")
    no_offsets = [{k: v for k, v in r.items() if k != "offset"} for r in rows([0, 1])]
    with pytest.raises(FileExistsError, match="an empty active segment"):
        write(tmp_path, [[no_offsets]], mode="append", expected_next={("t", 0): 10})
    write(tmp_path, [[rows([12, 13])]], mode="append")
    assert [r[0] for r in read_partition(tmp_path / "t-0")] == [0, 1, 2, 3, 12, 13]
    assert (tmp_path / "t-0" / f"{10:020d}.log").read_bytes() == b""


def test_errorifexists_ignore_and_bad_names(tmp_path):
    (tmp_path / "x.txt").write_text("data")
    with pytest.raises(FileExistsError, match="already holds data"):
        write(tmp_path, [[rows([1])]])
    assert write(tmp_path, [[rows([1])]], mode="ignore") == {}
    assert sorted(os.listdir(tmp_path)) == ["x.txt"]
    for topic in ("../up", "a/b", ".", "x" * 250):
        with pytest.raises(ValueError, match="legal Kafka topic"):
            write(tmp_path / "new", [[rows([1], topic=topic)]])
    with pytest.raises(ValueError, match="negative"):
        write(tmp_path / "new", [[rows([1], partition=-1)]])
    early = rows([1])
    early[0]["timestamp"] = -5000
    with pytest.raises(ValueError, match="before 1970"):
        write(tmp_path / "new", [[early]])
    assert not (tmp_path / "up-0").exists() and not (tmp_path / "new" / STAGING).exists()


def test_timestamps_are_floored_to_milliseconds():
    from kafkacodec.logdir._write import _to_ms

    us = pa.array([-1500, -1000, 0, 1999, None], pa.timestamp("us", tz="UTC"))
    assert _to_ms(us).tolist() == [-2, -1, 0, 1, -1]
    assert _to_ms(pa.array([5, None], pa.int64())).tolist() == [5, -1]
    assert np.asarray(_to_ms(pa.array([2**62], pa.timestamp("us")))).tolist() == [2**62 // 1000]
