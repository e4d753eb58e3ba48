"""`spark.readStream.format("kafkalog")`: tailing a log directory (new segments, appends to the
active segment, a partial entry being written), maxOffsetsPerTrigger, restart from a checkpoint
(exactly once), on the worker's session (conftest.py)."""

import json

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from kafkacodec.arrow import encode_v2  # noqa: E402

pytestmark = pytest.mark.spark


def batches(first, count, per_batch=10):
    """v2 batches holding offsets first..first+count-1."""
    n = np.arange(first, first + count)
    value = pa.array([b"v%d" % i for i in n], pa.binary())
    key = pa.array([None] * count, pa.binary())
    data, _ = encode_v2(key, value, (1_700_000_000_000 + n).astype(np.int64), batch_bytes=per_batch * 10,
                        base_offset=first)
    return data


# Spark gives a fresh Python worker (the streaming source's) a fixed 10 s to connect back
# (PythonWorkerFactory.createSimpleWorker); a CI machine under load has missed it once.
WORKER_TIMEOUT = "Python worker failed to connect back"


def run(spark, path, checkpoint, name, **options):
    """One Trigger.AvailableNow run from the checkpoint; the offsets it read, per micro-batch.
    A query whose source never started (WORKER_TIMEOUT, no batch run) is started once more."""
    from pyspark.errors import StreamingQueryException

    for attempt in range(2):
        seen = []
        reader = spark.readStream.format("kafkalog").option("startingOffsets", "earliest")
        for k, v in options.items():
            reader = reader.option(k, v)
        query = (reader.load(str(path)).writeStream.queryName(name).option("checkpointLocation", str(checkpoint))
                 .foreachBatch(lambda df, _: seen.append(sorted((r.partition, r.offset) for r in
                                                               df.select("partition", "offset").collect())))
                 .trigger(availableNow=True).start())
        try:
            finished = query.awaitTermination(240)
        except StreamingQueryException as exc:
            query.stop()
            if attempt or seen or WORKER_TIMEOUT not in str(exc):
                raise
            continue
        query.stop()
        assert finished and query.exception() is None
        return seen
    raise AssertionError("unreachable")


def test_tail_appends_new_segments_and_restarts_exactly_once(spark, tmp_path):
    log = tmp_path / "log"
    for p in range(2):
        (log / f"events-{p}").mkdir(parents=True)
        (log / f"events-{p}" / f"{0:020d}.log").write_bytes(batches(0, 40))
    cp = tmp_path / "checkpoint"
    first = run(spark, log, cp, "tail1")
    assert sorted(x for b in first for x in b) == [(p, o) for p in range(2) for o in range(40)]
    # appends to the active segment, a new segment, and half of a batch still being written
    with open(log / "events-0" / f"{0:020d}.log", "ab") as f:
        f.write(batches(40, 25))
    (log / "events-1" / f"{40:020d}.log").write_bytes(batches(40, 30))
    tail = batches(65, 10)
    with open(log / "events-0" / f"{0:020d}.log", "ab") as f:
        f.write(tail[:len(tail) // 2])
    second = run(spark, log, cp, "tail2")                              # a restarted query
    got = [x for b in second for x in b]
    assert sorted(got) == [(0, o) for o in range(40, 65)] + [(1, o) for o in range(40, 70)]
    with open(log / "events-0" / f"{0:020d}.log", "ab") as f:
        f.write(tail[len(tail) // 2:])
    third = run(spark, log, cp, "tail3")
    assert sorted(x for b in third for x in b) == [(0, o) for o in range(65, 75)]
    # Spark's Kafka-source offset JSON in the checkpoint
    last = max((f for f in (cp / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name)).read_text().splitlines()[-1]
    assert json.loads(last) == {"events": {"0": 75, "1": 70}}


def test_max_offsets_per_trigger(spark, tmp_path):
    log = tmp_path / "log"
    (log / "small-0").mkdir(parents=True)
    (log / "small-0" / f"{0:020d}.log").write_bytes(batches(0, 300))
    (log / "small-1").mkdir(parents=True)
    (log / "small-1" / f"{0:020d}.log").write_bytes(batches(0, 3))
    seen = run(spark, log, tmp_path / "cp", "limited", maxOffsetsPerTrigger="60")
    assert all(len(b) <= 61 for b in seen) and len(seen) >= 5            # a small partition gets >= 1
    assert sorted(x for b in seen for x in b) == [(0, o) for o in range(300)] + [(1, o) for o in range(3)]
    text = ""
    try:
        spark.readStream.format("kafkalog").option("endingOffsets", "latest").load(str(log)).writeStream \
            .format("noop").start().awaitTermination(60)
    except Exception as exc:                                             # noqa: BLE001
        text = str(exc)
    assert "batch reads" in text


def test_damage_in_the_active_segment_stops_the_stream_with_its_reason(spark, tmp_path):
    log = tmp_path / "log"
    (log / "events-0").mkdir(parents=True)
    (log / "events-0" / f"{0:020d}.log").write_bytes(batches(0, 20) + bytes(8) + b"\x00\x00\x00\x05" + batches(20, 10))
    query = (spark.readStream.format("kafkalog").option("startingOffsets", "earliest").load(str(log))
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(240)
    except Exception:                                                    # noqa: BLE001
        pass
    query.stop()
    assert query.exception() is not None
    text = str(query.exception())
    assert "entry size 5" in text and "stream stops there" in text and "mode=DROPMALFORMED" in text
