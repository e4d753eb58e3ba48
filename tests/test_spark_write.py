"""Writing Kafka log directories from Spark exactly: `df.write.format("kafkalog")`, `write_log`,
their save modes, atomic commit, remote outputs, `kafkacodec spark convert`, and the round trip
log -> DataFrame -> Parquet (shuffled) -> log.  Every written log is read back with kafka-python
and compared with kafka-python's reading of the source segments."""

import os
import random
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

sys.path.insert(0, os.path.dirname(__file__))
from kafka_oracle import kafka_python_rows  # noqa: E402

import kafkacodec  # noqa: E402
from kafkacodec import MemoryRecordsBuilder  # noqa: E402
from kafkacodec.cli import generate  # noqa: E402
from kafkacodec.logdir import discover, plan  # noqa: E402

pytestmark = pytest.mark.spark

from spark_support import PACKAGE_PARENT  # noqa: E402


@pytest.fixture(scope="module")
def spark(spark):
    """The worker's session (conftest.py) with 3 shuffle partitions for this module."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    yield spark
    spark.conf.set("spark.sql.shuffle.partitions", before)


def add_compacted_topic(root, topic="compacted", partitions=2):
    """A topic as the log cleaner leaves it: magic 1 and magic 2 batches whose records skip
    offsets (gaps inside and between batches), keys kept last-writer-wins."""
    rng = random.Random(7)
    cleaned = {}
    for p in range(partitions):
        folder = root / f"{topic}-{p}"
        folder.mkdir()
        offset, segments = 3, []
        for magic, codec in ((1, "none"), (1, "gzip"), (2, "none"), (2, "lz4"), (2, "zstd"), (2, "none")):
            builder = MemoryRecordsBuilder(magic=magic, compression=codec, base_offset=offset)
            for _ in range(rng.randint(3, 12)):
                offset += rng.choice((1, 1, 2, 5, 40))
                headers = [("h", b"%d" % offset)] if magic == 2 and offset % 3 else []
                builder.append_with_offset(offset, 1_700_000_000_000 + offset * 11 - (offset % 7) * 50,
                                           b"key-%d" % (offset % 9), b"value-%d" % offset, headers)
            segments.append((builder.base_offset, builder.build()))
            offset += rng.choice((1, 30))
        for i in (0, 3):
            chunk = segments[i:i + 3]
            (folder / f"{chunk[0][0]:020d}.log").write_bytes(b"".join(b for _, b in chunk))
        cleaned[(topic, p)] = offset
    # The broker's cleaner-offset-checkpoint: the partitions are cleaned up to there, so the gaps
    # below it (between segments too) are compaction's, not lost data.
    lines = [f"{t} {p} {o}" for (t, p), o in sorted(cleaned.items())]
    (root / "cleaner-offset-checkpoint").write_text("\n".join(["0", str(len(lines)), *lines]) + "\n")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Mixed magics, every codec, committed and aborted transactions (kafkacodec generate) and a
    compacted topic."""
    root = tmp_path_factory.mktemp("source-log")
    generate(root, batches_per_segment=6)
    add_compacted_topic(root)
    return root


def read_committed(spark):
    """A reader as `spark convert` reads: headers, and aborted transactions left out (Spark's
    Kafka source defaults are no headers and read_uncommitted)."""
    return (spark.read.format("kafkalog").option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed"))


def rows_by_partition(root, *, drop_aborted=True):
    """{(topic, partition): [(offset, key, value, headers, timestamp ms)]} as kafka-python reads
    the segments, in file order, control records and (unless asked) aborted transactions left
    out as a read_committed consumer leaves them."""
    aborted = {}
    if drop_aborted:
        splits, _ = plan(root, {"kafka.isolation.level": "read_committed"})
        for s in splits:
            aborted[(s.topic, s.partition)] = s.aborted
    out = {}
    for seg in discover(root):
        rows = out.setdefault((seg.topic, seg.partition), [])
        for r in kafka_python_rows(Path(seg.path).read_bytes(), seg.topic, seg.partition):
            if any(r["producerId"] == pid and first <= r["offset"] < end and r["isTransactional"]
                   for pid, first, end in aborted.get((seg.topic, seg.partition), ())):
                continue
            ts = round(r["timestamp"].timestamp() * 1000)
            rows.append((r["offset"], r["key"], r["value"], r["headers"], ts))
    return out


def check_layout(root):
    """Segments hold v2 batches only, offsets increase through the partition, and every segment
    but the first is named after the offset that follows the segment before it (as the log
    cleaner leaves them: skipped offsets lie inside segments, never between them); the first is
    named at or below its first batch's base offset."""
    from kafka.record.memory_records import MemoryRecords

    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        last = -1
        for seg in sorted(folder.glob("*.log")):
            records = MemoryRecords(seg.read_bytes())
            first = True
            while records.has_next():
                batch = records.next_batch()
                assert batch.magic == 2
                if first:
                    assert int(seg.stem) == last + 1 if last >= 0 else int(seg.stem) <= batch.base_offset
                    first = False
                for rec in batch:
                    assert rec.offset > last
                    last = rec.offset
            # kafka-python iterates a batch's records: `last` is the batch's last record, and a
            # batch's lastOffsetDelta may reach beyond it only when the cleaner removed its tail


def leftovers(root):
    return [p.name for p in Path(root).rglob("*") if "_kafkalog_temporary" in p.name or p.name.endswith(".tmp")]


def spark_error(info):
    return str(info.value)


def test_round_trip_through_shuffled_parquet_is_exact(spark, source, tmp_path):
    """The issue's "Done when": compaction gaps, transactions, mixed magics -> DataFrame ->
    Parquet -> shuffled -> kafkalog -> every partition back in order with its offsets."""
    from pyspark.sql import functions as F

    expected = rows_by_partition(source)
    assert any(t == "compacted" for t, _ in expected)
    gaps = [o for rows in expected.values() for (a, *_), (o, *_) in zip(rows, rows[1:]) if o != a + 1]
    assert len(gaps) > 10                          # compaction, aborted records and markers
    df = read_committed(spark).load(str(source))
    df.write.parquet(str(tmp_path / "pq"))
    shuffled = spark.read.parquet(str(tmp_path / "pq")).orderBy(F.rand(5)).repartition(7)
    shuffled.write.format("kafkalog").mode("append").option("batchSize", 300) \
        .option("segmentBytes", 2000).save(str(tmp_path / "plain"))
    assert rows_by_partition(tmp_path / "plain", drop_aborted=False) == expected
    from kafkacodec.spark import write_log

    write_log(shuffled, str(tmp_path / "sorted"), compression="lz4", segmentBytes=3000)
    for out in ("plain", "sorted"):
        assert rows_by_partition(tmp_path / out, drop_aborted=False) == expected, out
        check_layout(tmp_path / out)
        assert (tmp_path / out / "_SUCCESS").exists() and not leftovers(tmp_path / out)
    assert len(list((tmp_path / "plain" / "orders-0").glob("*.log"))) > 1      # rolled
    back = read_committed(spark).load(str(tmp_path / "sorted"))
    assert back.count() == sum(map(len, expected.values()))


def test_write_log_refuses_aborted_records_read_uncommitted(spark, source, tmp_path):
    """read_uncommitted (Spark's default) keeps the records of aborted transactions; written
    back without their markers they would be committed data: write_log refuses, naming the
    count and both ways out, before any job runs; allow_aborted=True writes them all."""
    from kafkacodec.spark import write_log

    aborted = sum(len(s.aborted) for s in {(s.topic, s.partition): s for s in
                                           plan(source, {"kafka.isolation.level": "read_committed"})[0]}.values())
    assert aborted > 0
    uncommitted = spark.read.format("kafkalog").load(str(source)).where("offset >= 0")
    with pytest.raises(ValueError) as info:
        write_log(uncommitted, str(tmp_path / "refused"))
    assert f"holds {aborted} aborted transactions" in str(info.value)
    assert "read_committed" in str(info.value) and "allow_aborted=True" in str(info.value)
    assert not (tmp_path / "refused").exists()
    orders = spark.read.format("kafkalog").option("includeHeaders", "true").load(str(source / "orders-0"))
    write_log(orders, str(tmp_path / "all"), allow_aborted=True)
    assert rows_by_partition(source)[("orders", 0)] != rows_by_partition(source, drop_aborted=False)[("orders", 0)]
    assert rows_by_partition(tmp_path / "all", drop_aborted=False)[("orders", 0)] == \
        rows_by_partition(source, drop_aborted=False)[("orders", 0)]


def test_without_offsets_rows_are_numbered_in_timestamp_order(spark, source, tmp_path):
    from pyspark.sql import functions as F

    df = spark.read.format("kafkalog").load(str(source / "orders-1")).drop("offset")
    rows = df.collect()
    by_time = sorted(rows, key=lambda r: r.timestamp)
    shuffled = df.orderBy(F.rand(3)).repartition(4)
    shuffled.write.format("kafkalog").mode("append").option("baseOffset", 100).save(str(tmp_path / "a"))
    from kafkacodec.spark import write_log

    write_log(shuffled, str(tmp_path / "b"), baseOffset=100, allow_aborted=True)   # read_uncommitted
    for out in ("a", "b"):
        got = rows_by_partition(tmp_path / out, drop_aborted=False)[("orders", 1)]
        assert [o for o, *_ in got] == list(range(100, 100 + len(rows)))
        assert [ts for *_, ts in got] == [round(r.timestamp.timestamp() * 1000) for r in by_time]
        assert sorted(v or b"" for _, _, v, _, _ in got) == sorted(bytes(r.value or b"") for r in rows)


def test_duplicate_offsets_are_refused(spark, tmp_path):
    df = spark.createDataFrame([("t", 0, 5, b"a"), ("t", 0, 6, b"b"), ("t", 0, 5, b"c")],
                               "topic string, partition int, offset long, value binary").repartition(3)
    with pytest.raises(Exception) as info:
        df.write.format("kafkalog").mode("append").save(str(tmp_path / "out"))
    assert "offset 5 appears twice in t-0" in spark_error(info)
    assert not list((tmp_path / "out").glob("t-*")) and not leftovers(tmp_path)


def test_bad_topic_names_and_types_are_refused(spark, tmp_path):
    bad = spark.createDataFrame([("../escape", 0, b"x")], "topic string, partition int, value binary")
    with pytest.raises(Exception) as info:
        bad.write.format("kafkalog").mode("append").save(str(tmp_path / "out"))
    assert "not a legal Kafka topic name" in spark_error(info)
    assert not (tmp_path / "escape-0").exists()
    ints = spark.createDataFrame([("t", 0, 1)], "topic string, partition int, value int")
    with pytest.raises(Exception) as info:
        ints.write.format("kafkalog").mode("append").save(str(tmp_path / "out"))
    assert "must be binary or string" in spark_error(info)


def test_commit_failure_rolls_back_and_keeps_what_it_did_not_write(spark, tmp_path):
    out = tmp_path / "out"
    first = spark.createDataFrame([("t", 0, i, b"old-%d" % i) for i in range(10)],
                                  "topic string, partition int, offset long, value binary")
    first.write.format("kafkalog").mode("append").save(str(out))
    (out / "notes.txt").write_text("mine")
    (out / "t-1").write_text("not a directory")            # makes the commit of t-1 fail
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    more = spark.createDataFrame([("t", p, 10 + i, b"new") for p in (0, 1, 2) for i in range(5)],
                                 "topic string, partition int, offset long, value binary")
    with pytest.raises(Exception):
        more.repartition(2).write.format("kafkalog").mode("append").save(str(out))
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before                                 # nothing half-committed
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "notes.txt", "t-0", "t-1"]


def test_save_modes(spark, tmp_path):
    from kafkacodec.spark import write_log

    def frame(partitions, offsets, tag):
        return spark.createDataFrame([("t", p, o, tag) for p in partitions for o in offsets],
                                     "topic string, partition int, offset long, value binary")

    def values(out):
        return {tp: [(o, v) for o, _, v, _, _ in rows] for tp, rows in rows_by_partition(out, drop_aborted=False).items()}

    out = tmp_path / "log"
    write_log(frame([0, 1], range(3), b"a"), str(out))                  # errorifexists on a new path
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(Exception) as info:
        write_log(frame([0], range(3), b"b"), str(out))
    assert "already holds data" in spark_error(info)
    write_log(frame([0], range(3), b"b"), str(out), mode="ignore")
    assert values(out) == {("t", 0): [(i, b"a") for i in range(3)], ("t", 1): [(i, b"a") for i in range(3)]}
    with pytest.raises(Exception) as info:
        write_log(frame([0], range(2, 5), b"c"), str(out), mode="append")
    assert "already holds offsets up to 2" in spark_error(info)
    write_log(frame([0], range(7, 9), b"c"), str(out), mode="append")
    no_offsets = spark.createDataFrame([("t", 1, b"d"), ("t", 1, b"e")], "topic string, partition int, value binary")
    write_log(no_offsets, str(out), mode="append")
    assert values(out) == {("t", 0): [(0, b"a"), (1, b"a"), (2, b"a"), (7, b"c"), (8, b"c")],
                           ("t", 1): [(0, b"a"), (1, b"a"), (2, b"a"), (3, b"d"), (4, b"e")]}
    frame([2], [4], b"f").write.format("kafkalog").mode("overwrite") \
        .option("partitionOverwriteMode", "dynamic").save(str(out))
    assert set(values(out)) == {("t", 0), ("t", 1), ("t", 2)}
    write_log(frame([1], [0], b"g"), str(out), mode="overwrite")        # static: every partition
    assert values(out) == {("t", 1): [(0, b"g")]}
    assert (out / "notes.txt").read_text() == "keep me" and not leftovers(out)
    with pytest.raises(ValueError, match="use one of"):
        write_log(frame([1], [0], b"g"), str(out), mode="upsert")


def test_remote_output_through_pyarrow_fs(spark, s3_server, tmp_path):
    from kafka.record.memory_records import MemoryRecords

    bucket = s3_server.new_bucket()
    df = spark.createDataFrame([("t", p, o, b"v%d" % o) for p in (0, 1) for o in (0, 1, 5)],
                               "topic string, partition int, offset long, value binary")
    options = {"fs.s3a.endpoint": s3_server.endpoint, "fs.s3a.access.key": s3_server.env["AWS_ACCESS_KEY_ID"],
               "fs.s3a.secret.key": s3_server.env["AWS_SECRET_ACCESS_KEY"],
               "fs.s3a.endpoint.region": s3_server.env["AWS_DEFAULT_REGION"]}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        df.write.format("kafkalog").mode("append").options(**options).save(f"s3a://{bucket}/plain")
        assert s3_server.filesystem().get_file_info(f"{bucket}/plain/_SUCCESS").size == 0
        assert not list(tmp_path.iterdir())                # no local "s3a:" folder
        from kafkacodec.spark import write_log

        write_log(df, f"s3://{bucket}/logs", **options)
    finally:
        os.chdir(cwd)
    fs = s3_server.filesystem()
    from pyarrow.fs import FileSelector

    for prefix in ("logs", "plain"):
        names = sorted(i.path for i in fs.get_file_info(FileSelector(f"{bucket}/{prefix}", recursive=True)))
        assert f"{bucket}/{prefix}/_SUCCESS" in names and not [n for n in names if "_kafkalog_temporary" in n]
        for p in (0, 1):
            with fs.open_input_stream(f"{bucket}/{prefix}/t-{p}/{0:020d}.log") as f:
                records = MemoryRecords(f.read())
            got = []
            while records.has_next():
                got += [(r.offset, r.value) for r in records.next_batch()]
            assert got == [(o, b"v%d" % o) for o in (0, 1, 5)]
    with pytest.raises(Exception) as info:
        write_log(df, f"s3a://{bucket}/logs", **options)
    assert "already holds data" in spark_error(info)


def test_convert_round_trip_is_exact_and_keeps_unrelated_files(spark, source, tmp_path, capsys):
    import json

    from kafkacodec.cli import main

    pq, back = tmp_path / "pq", tmp_path / "back"
    pq.mkdir()
    (pq / "notes.txt").write_text("mine")
    assert main(["spark", "convert", "--no-progress", str(source), str(pq)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert sorted(p.name for p in pq.iterdir()) == ["notes.txt"]
    for _ in range(2):                       # a second --overwrite replaces, not adds
        assert main(["spark", "convert", "--json", "--no-progress", "--overwrite", str(source), str(pq)]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert (pq / "notes.txt").read_text() == "mine"
        parts = [p for p in pq.iterdir() if p.suffix == ".parquet"]
        assert spark.read.parquet(*map(str, parts)).count() == summary["records"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]      # no temporary dir left
    assert main(["spark", "convert", "--json", "--no-progress", "--compression", "zstd",
                 str(tmp_path / "pq-only"), str(back)]) == 3      # missing input
    capsys.readouterr()
    only = tmp_path / "pq-only"
    only.mkdir()
    for p in pq.iterdir():
        if p.suffix == ".parquet":
            os.link(p, only / p.name)
    assert main(["spark", "convert", "--json", "--no-progress", "--compression", "zstd", str(only), str(back)]) == 0
    assert json.loads(capsys.readouterr().out)["direction"] == "parquet->segments"
    assert rows_by_partition(back, drop_aborted=False) == rows_by_partition(source)
    check_layout(back)
    assert main(["spark", "convert", "--no-progress", str(only), str(back)]) == 2     # not empty
    assert main(["spark", "convert", "--no-progress", str(source), str(source / "inside")]) == 2


FRESH_SESSION_JOB = r"""
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
src, out = sys.argv[1], sys.argv[2]
df = spark.read.format("kafkalog").load(src)                  # no register(spark)
n = df.count()
df.write.format("kafkalog").mode("append").save(out)
print("rows", n, spark.read.format("kafkalog").load(out).count())
from kafkacodec.errors import MisuseError
from kafkacodec.spark import validate
try:
    validate(spark.createDataFrame([(b"",)], "batch binary"), "batch")
except MisuseError as exc:
    print("refused:", exc)
spark.stop()
"""


def pth_environment(bin_dir: Path, **extra: str) -> dict[str, str]:
    """This interpreter's environment as a venv that is not activated sees it: no PYSPARK_*,
    VIRTUAL_ENV or PYTHONPATH; `python3` on PATH is the base interpreter (bin_dir/python3)."""
    venv_bin = str(Path(sys.executable).parent)
    path = [str(bin_dir)] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    bin_dir.mkdir(exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(base)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PATH": os.pathsep.join(path), "SPARK_LOCAL_IP": "127.0.0.1", **extra}


def test_spark_pth_names_the_driver_only_from_a_venv_that_is_not_activated(tmp_path):
    """pyspark_kafkalog/kafkacodec-spark.pth's line (run by site at start-up once installed, by
    the probe here too: it is idempotent): it sets
    PYSPARK_DRIVER_PYTHON to the interpreter only in a venv that is not activated, and never
    over PYSPARK_PYTHON or an existing PYSPARK_DRIVER_PYTHON."""
    import subprocess

    if sys.prefix == sys.base_prefix:
        pytest.skip("needs a venv interpreter")
    source = Path(__file__).resolve().parents[1] / "pyspark_kafkalog" / "kafkacodec-spark.pth"   # the checkout's
    line = next(l for l in source.read_text()
                .splitlines() if l.startswith("import "))
    probe = f"{line}\nimport os; print(os.environ.get('PYSPARK_DRIVER_PYTHON'))"

    def driver(**extra):
        env = pth_environment(tmp_path / "bin", **extra)
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                              timeout=60, check=True).stdout.strip()

    assert driver() == sys.executable
    assert driver(VIRTUAL_ENV=sys.prefix) == "None"
    assert driver(PYSPARK_PYTHON="/opt/py/bin/python") == "None"
    assert driver(PYSPARK_DRIVER_PYTHON="/opt/py/bin/python") == "/opt/py/bin/python"


def test_kafkalog_in_a_fresh_session_from_a_venv_that_is_not_activated(source, tmp_path):
    """One fresh session (a Spark JVM is the slow part): pyspark_kafkalog ships beside
    kafkacodec and PySpark 4 registers its DefaultSource, so `format("kafkalog")` reads and
    writes with no register(spark).  Run as the installed wheel's venv is, by path with no venv
    activated and no PYSPARK_PYTHON (python3 on PATH is the base interpreter, without
    kafkacodec): kafkacodec-spark.pth names the driver, and the mapInArrow functions, which
    Spark runs in python3, refuse before the job with the interpreter and the setting to change.
    From a source checkout (no wheel installed) the session gets PYTHONPATH instead."""
    import importlib.util
    import site
    import subprocess

    from pyspark.sql.datasource import DataSource

    import pyspark_kafkalog

    spec = importlib.util.find_spec("pyspark_kafkalog")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).parents[1] == Path(kafkacodec.__file__).parents[1]      # same install
    assert issubclass(pyspark_kafkalog.DefaultSource, DataSource) and pyspark_kafkalog.DefaultSource.name() == "kafkalog"
    installed = [Path(d) / "kafkacodec-spark.pth" for d in site.getsitepackages()
                 if (Path(d) / "kafkacodec-spark.pth").exists()]
    if os.environ.get("KAFKACODEC_TEST_INSTALLED") == "1":
        assert installed, "the installed wheel put no kafkacodec-spark.pth in site-packages"
    base = str(tmp_path / "bin" / "python3")
    env = pth_environment(tmp_path / "bin")
    unactivated = bool(installed) and subprocess.run(
        [base, "-c", "import kafkacodec"], env=env, capture_output=True).returncode != 0
    if not unactivated:           # a checkout, or a base interpreter that has kafkacodec too
        env = {**os.environ, "PYTHONPATH": PACKAGE_PARENT, "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run([sys.executable, "-c", FRESH_SESSION_JOB, str(source / "orders-0"),
                             str(tmp_path / "out")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[:3000]
    n = len(rows_by_partition(source, drop_aborted=False)[("orders", 0)])       # read_uncommitted
    assert n < sum(len(rows) for rows in rows_by_partition(source).values())
    assert f"rows {n} {n}" in result.stdout
    if unactivated:
        refused = next(l for l in result.stdout.splitlines() if l.startswith("refused:"))
        assert base in refused and f"PYSPARK_PYTHON={sys.executable}" in refused


def raw_cells(source):
    """(id, topic, partition, batch) per entry of orders-0's segments, plus a corrupt copy of a
    v2 batch (CRC) and the ids of the zstd ones."""
    from kafkacodec.arrow import scan_entries

    cells = []
    for seg in discover(source / "orders-0"):
        data = Path(seg.path).read_bytes()
        scan = scan_entries(data)
        for pos, size in zip(scan["position"].tolist(), scan["size"].tolist()):
            cells.append((len(cells), seg.topic, seg.partition, data[pos:pos + size]))
    v2 = next(c for c in cells if c[3][16] == 2 and not c[3][22] & 0x20 and c[3][22] & 7 == 0)
    broken = bytearray(v2[3])
    broken[-1] ^= 0xFF
    corrupt_id = len(cells)
    cells.append((corrupt_id, "orders", 0, bytes(broken)))
    zstd_ids = {c[0] for c in cells if c[3][16] == 2 and c[3][22] & 7 == 4 and not c[3][22] & 0x20}
    return cells, corrupt_id, zstd_ids


def test_decode_modes_and_kept_columns(spark, source):
    from kafkacodec.spark import decode

    cells, corrupt_id, _ = raw_cells(source)
    df = spark.createDataFrame(cells, "id long, topic string, partition int, batch binary")
    good = sum(len(kafka_python_rows(c[3], "orders", 0)) for c in cells[:-1])
    opts = {"topic_column": "topic", "partition_column": "partition"}
    with pytest.raises(Exception) as info:
        decode(df, "batch", **opts).count()
    assert "CRC" in spark_error(info) and "DROPMALFORMED" in spark_error(info)
    dropped = decode(df, "batch", keep_columns=["id"], mode="DROPMALFORMED", **opts)
    assert dropped.columns[0] == "id" and dropped.count() == good
    permissive = decode(df, "batch", keep_columns=True, mode="PERMISSIVE", **opts)
    assert permissive.columns[:2] == ["id", "batch"] and permissive.columns[-1] == "_corrupt_record"
    bad = permissive.where("_corrupt_record is not null").collect()
    assert len(bad) == 1 and bad[0].id == corrupt_id and "CRC" in bad[0]._corrupt_record
    assert bad[0].topic == "orders" and bad[0].offset == int.from_bytes(cells[-1][3][:8], "big")
    rows = permissive.where("_corrupt_record is null").select("id", "offset", "value").collect()
    expected = {(c[0], r["offset"], r["value"]) for c in cells[:-1] for r in kafka_python_rows(c[3], "orders", 0)}
    assert {(r.id, r.offset, None if r.value is None else bytes(r.value)) for r in rows} == expected
    strings = spark.createDataFrame([("abc",)], "batch string")
    for fn in (decode, lambda d, c: __import__("kafkacodec.spark", fromlist=["validate"]).validate(d, c)):
        with pytest.raises(TypeError, match="not binary"):
            fn(strings, "batch")


def test_down_convert_modes(spark, source):
    from kafkacodec.spark import down_convert

    cells, corrupt_id, zstd_ids = raw_cells(source)
    assert zstd_ids
    df = spark.createDataFrame(cells, "id long, topic string, partition int, batch binary")
    with pytest.raises(Exception) as info:
        down_convert(df, "batch", 1).count()
    assert "zstd" in spark_error(info).lower() or "UnsupportedCompression" in spark_error(info)
    failing = zstd_ids | {corrupt_id}
    permissive = {r.id: r for r in down_convert(df, "batch", 1, mode="PERMISSIVE").collect()}
    assert len(permissive) == len(cells)
    assert {i for i, r in permissive.items() if r._corrupt_record is not None} == failing
    assert all(permissive[i].batch is None for i in failing)
    dropped = down_convert(df, "batch", 1, mode="DROPMALFORMED").collect()
    assert sorted(r.id for r in dropped) == sorted(i for i in permissive if i not in failing)
    from kafka.record.memory_records import MemoryRecords

    for r in dropped:
        before = [x["value"] for x in kafka_python_rows(cells[r.id][3], "orders", 0)]
        records, after = MemoryRecords(bytes(r.batch)), []
        while records.has_next():
            batch = records.next_batch()
            assert batch.magic <= 1
            after += [x.value for x in batch]
        assert after == before
