"""kafkacodec.logdir._write without Spark: tasks' sorted runs, the merge of overlapping runs,
the all-or-nothing commit and the save modes.  Every log is read back with kafka-python."""

import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from isolated import child_env
from kafka.record.memory_records import MemoryRecords

from kafkacodec import errors
from kafkacodec.logdir._store import LocalStore, open_store
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


# --- two writers at once: the commit's lock ------------------------------------------------------
HOOKED_STORE = '''
import sys
from kafkacodec.logdir._store import LocalStore

class HookedStore(LocalStore):
    """Says (one line on stdout) when its commit waits for the log directory's lock, and pauses
    its first rename (inside the lock) until released."""

    def __init__(self, pause=None):
        self.pause = pause                  # called once, before the first rename
        self.waiting = None                 # called when the commit asks for the lock

    def lock(self, root, timeout):
        if self.waiting is not None:
            self.waiting()
        return super().lock(root, timeout)

    def move(self, src, dst):
        pause, self.pause = self.pause, None
        if pause is not None:
            pause()
        super().move(src, dst)
'''
exec(HOOKED_STORE)


def stage(store, root, job, offsets, topic="t"):
    """One task's staged runs of `offsets` (a writer that has not committed yet)."""
    w = TaskWriter(store, store.join(str(root), STAGING, job), task=0)
    w.add(pa.RecordBatch.from_pylist(rows(offsets, topic=topic), schema=SCHEMA))
    return w.close()


def files_of(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


@pytest.mark.parametrize("second", [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [10, 11]], ids=["overlapping", "after"])
def test_two_threads_commit_one_after_the_other_and_an_overlap_is_refused(tmp_path, second):
    """Writer A holds the lock in the middle of its renames; writer B, which looked at the log
    before A committed, waits for the lock, then finds A's offsets: an overlap is refused with
    WriteConflictError and the directory stays as A left it; offsets after A's commit."""
    first = list(range(10))
    paused, release = threading.Event(), threading.Event()
    a_store = HookedStore(pause=lambda: (paused.set(), release.wait(30)))
    b_store = HookedStore()
    b_waits = threading.Event()
    b_store.waiting = b_waits.set
    a_runs = stage(a_store, tmp_path, "a", first)
    b_runs = stage(b_store, tmp_path, "b", second)
    outcome = {}

    def run(name, store, job, runs):
        try:
            commit(store, str(tmp_path), job, runs, mode="append")
            outcome[name] = "ok"
        except Exception as exc:                     # noqa: BLE001 - the test inspects it
            outcome[name] = exc

    a = threading.Thread(target=run, args=("a", a_store, "a", a_runs))
    a.start()
    assert paused.wait(30)                            # A is inside its commit
    b = threading.Thread(target=run, args=("b", b_store, "b", b_runs))
    b.start()
    deadline = time.monotonic() + 30                  # B asks for the lock, or (no lock) finishes
    while not b_waits.is_set() and b.is_alive():
        assert time.monotonic() < deadline
        b_waits.wait(0.01)
    release.set()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    assert outcome["a"] == "ok"
    got = [r[0] for r in read_partition(tmp_path / "t-0")]
    if second[0] < 10:
        assert outcome["b"] != "ok"
        assert isinstance(outcome["b"], errors.WriteConflictError), outcome["b"]
        assert "already holds offsets up to 9" in str(outcome["b"]) and "another writer" in str(outcome["b"])
        assert got == first
    else:
        assert outcome["b"] == "ok" and got == first + second
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", "t-0"]    # no staging, no lock file left


@pytest.mark.parametrize("mode", ["append", "errorifexists"])
def test_a_writer_overtaken_after_it_looked_is_refused(tmp_path, mode):
    """Writer B looks at the log (empty), then writer A commits the same partition whole, then B
    goes on: B is refused with WriteConflictError and the directory is A's."""
    looked, a_done = threading.Event(), threading.Event()

    def hold_once():
        b_store.pause = b_store.waiting = None
        looked.set()
        assert a_done.wait(30)

    b_store = HookedStore(pause=hold_once)     # B holds before its lock (or, without one, its renames)
    b_store.waiting = hold_once
    b_runs = stage(b_store, tmp_path, "b", [5, 6, 7])
    outcome = {}

    def run_b():
        try:
            commit(b_store, str(tmp_path), "b", b_runs, mode=mode)
            outcome["b"] = "ok"
        except Exception as exc:                     # noqa: BLE001 - the test inspects it
            outcome["b"] = exc

    b = threading.Thread(target=run_b)
    b.start()
    assert looked.wait(30)
    a_store = LocalStore()
    commit(a_store, str(tmp_path), "a", stage(a_store, tmp_path, "a", list(range(10))), mode=mode)
    a_done.set()
    b.join(30)
    assert not b.is_alive()
    assert outcome["b"] != "ok"
    assert isinstance(outcome["b"], errors.WriteConflictError), outcome["b"]
    assert "another writer" in str(outcome["b"])
    assert [r[0] for r in read_partition(tmp_path / "t-0")] == list(range(10))
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", "t-0"]


def child(code, *args):
    """A child interpreter; its stdout lines go to `proc.lines` (read by a thread, so a wait for
    one has a timeout)."""
    proc = subprocess.Popen([sys.executable, "-c", HOOKED_STORE + code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(
                                os.path.dirname(__file__)))
    proc.lines = queue.Queue()
    threading.Thread(target=lambda: [proc.lines.put(text.strip()) for text in proc.stdout], daemon=True).start()
    return proc


WRITER = '''
import sys, pyarrow as pa
from test_logdir_write import SCHEMA, rows, stage
from kafkacodec.logdir._write import commit

root, job, first, last, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "pause"

def say(line):
    print(line, flush=True)

store = HookedStore(pause=(lambda: (say("moving"), sys.stdin.readline())) if pause else None)
store.waiting = lambda: say("waiting")
runs = stage(store, root, job, list(range(first, last)))
say("staged")
try:
    commit(store, root, job, runs, mode="append")
    say("ok")
except Exception as exc:
    say(f"error {type(exc).__name__}: {exc}")
'''


def line(proc, timeout=30):
    try:
        return proc.lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("the child said nothing in time") from None


def inside_commit(proc):
    """Wait until the child pauses at its first rename (holding the lock, if it takes one)."""
    said = [line(proc) for _ in range(2)]
    if said[-1] == "waiting":
        said.append(line(proc))
    assert said[0] == "staged" and said[-1] == "moving", (said, proc.stderr.read() if proc.poll() else "")


def test_two_processes_overlapping_commits_cannot_both_land(tmp_path):
    a = child(WRITER, str(tmp_path), "a", "0", "10", "pause")
    b = None
    try:
        inside_commit(a)                               # A holds the lock
        b = child(WRITER, str(tmp_path), "b", "5", "15", "no")
        assert line(b) == "staged"
        said = line(b)                                 # "waiting" (for the lock), or done without one
        a.stdin.write("go\n")
        a.stdin.flush()
        assert line(a) == "ok"
        if said == "waiting":
            said = line(b)
        assert said.startswith("error WriteConflictError: ") and "already holds offsets up to 9" in said, said
        assert a.wait(30) == 0 and b.wait(30) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [r[0] for r in read_partition(tmp_path / "t-0")] == list(range(10))
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", "t-0"]


def test_a_writer_killed_inside_its_commit_leaves_the_lock_to_the_next(tmp_path):
    """The kernel releases the lock of a process that dies (SIGKILL inside the commit, lock
    held): the next writer takes it at once, and what the dead one staged is only its own."""
    a = child(WRITER, str(tmp_path), "a", "0", "10", "pause")
    try:
        inside_commit(a)
    finally:
        a.kill()
        a.wait()
    store, path = open_store(str(tmp_path))
    started = time.monotonic()
    commit(store, path, "c", stage(store, path, "c", [20, 21]), mode="append", lock_timeout=10)
    assert time.monotonic() - started < 5
    assert [r[0] for r in read_partition(tmp_path / "t-0")] == [20, 21]
    assert sorted(os.listdir(tmp_path)) == ["_SUCCESS", STAGING, "t-0"]        # the lock file went with it
    assert sorted(os.listdir(tmp_path / STAGING)) == ["a"]       # the dead writer's staging: not ours to remove


def test_a_lock_held_past_the_timeout_is_a_clear_error(tmp_path):
    store = LocalStore()
    runs = stage(store, tmp_path, "b", [1, 2])
    with store.lock(str(tmp_path), 1):
        with pytest.raises(TimeoutError, match="_kafkalog.lock"):
            commit(store, str(tmp_path), "b", runs, mode="append", lock_timeout=0.2)
    assert sorted(os.listdir(tmp_path)) == []


def test_a_directory_named_in_another_encoding_is_no_partition_of_the_writer(tmp_path):
    """A `<topic>-<partition>`-looking directory whose name is not UTF-8 is no partition (no Kafka
    topic is named so): append does not read it, overwrite leaves it in place, as any other
    file that is not a partition."""
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9-0")
    os.mkdir(odd)
    with open(os.path.join(odd, b"%020d.log" % 0), "wb") as file:
        file.write(b"\x00" * 40)                      # not even a valid segment: never opened
    write(tmp_path, [[rows(range(3))]], mode="append")
    write(tmp_path, [[rows(range(3, 5))]], mode="append")
    write(tmp_path, [[rows(range(2), partition=1)]], mode="overwrite")
    assert os.listdir(odd) == [b"%020d.log" % 0]
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"_SUCCESS", b"caf\xe9-0", b"t-1"]
