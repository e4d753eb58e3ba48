"""The JVM part of "kafkalog" (kafkacodec/spark/java, built by kafkacodec.spark.jvm): a session
with the jar gives what the Python source alone gives for every query, while its scans read only
the columns a query uses (the plan's scan output); options, writes and streams go through
unchanged.

The jar's session runs in a child process (one SparkContext per process); the same queries run
on the worker's Python-only session (conftest.py) here, and the answers are compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("pyspark")

from spark_support import PACKAGE_PARENT  # noqa: E402

from kafkacodec.cli import generate  # noqa: E402
from kafkacodec.spark import jvm  # noqa: E402

pytestmark = pytest.mark.spark

# name -> (reader options, columns selected, where, aggregate): run on both sessions
QUERIES = {
    "all": ({}, None, None, None),
    "offset": ({}, ["offset"], None, None),
    "value_where_offset": ({}, ["partition", "value"], "offset >= 40 and offset < 90", None),
    "count": ({}, None, None, "count"),
    "count_where": ({}, None, "offset >= 40 and partition = 1", "count"),
    "count_decoded": ({"countFromHeaders": "false"}, None, None, "count"),
    "count_committed_range": ({"kafka.isolation.level": "read_committed", "subscribe": "orders",
                               "startingOffsets": '{"orders": {"0": 7, "1": 31}}',
                               "endingOffsets": '{"orders": {"0": 150, "1": 99}}'}, None, None, "count"),
    "group_partition": ({}, None, None, "group"),
    "group_partition_where": ({"keepControl": "true"}, None, "partition = 1", "group"),
    "group_topic_partition": ({"minPartitions": "9"}, ["topic", "partition"], None, "group"),
    "committed_headers": ({"kafka.isolation.level": "read_committed", "includeHeaders": "true"},
                          ["topic", "offset", "headers"], None, None),
    "subscribe_key": ({"subscribe": "orders", "startingOffsets": "earliest"}, ["key", "timestamp"], None, None),
}

CHILD = r"""
import json, sys
from pyspark.sql import SparkSession
from kafkacodec.spark import jvm, register
sys.path.insert(0, sys.argv[3])
from test_spark_jvm import QUERIES, answer, rows_of

spark = (SparkSession.builder.master("local[2]").appName("kafkalog-jvm")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC").config("spark.jars", sys.argv[2])
         .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)                            # refused by Spark without the jar's own path
out = {"loaded": jvm.loaded(spark)}
for name in QUERIES:
    out[name] = answer(spark, sys.argv[1], name)
# a write through the JVM source is the Python source's write
df = spark.read.format("kafkalog").option("subscribe", "clicks").load(sys.argv[1])
df.write.format("kafkalog").mode("overwrite").save(sys.argv[4])
out["written"] = rows_of(spark.read.format("kafkalog").load(sys.argv[4]).select("offset", "value"))
# a stream through the JVM source is the Python source's stream
query = (spark.readStream.format("kafkalog").option("startingOffsets", "earliest").load(sys.argv[1])
         .writeStream.format("memory").queryName("tailed").trigger(availableNow=True).start())
query.awaitTermination(300)
out["streamed"] = rows_of(spark.table("tailed").select("topic", "partition", "offset"))
print("RESULT " + json.dumps(out))
"""


def _plain(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def answer(spark, root: str, name: str) -> dict:
    """A query's rows (sorted, as JSON) and the read schema of its scan."""
    options, columns, where, aggregate = QUERIES[name]
    df = spark.read.format("kafkalog").options(**options).load(root)
    if where:
        df = df.where(where)
    if aggregate == "count":
        return {"rows": [[df.count()]], "read": _read_schema(df.groupBy().count())}
    if aggregate == "group":
        df = df.groupBy(*(columns or ["partition"])).count()
    elif columns:
        df = df.select(*columns)
    return {"rows": rows_of(df), "read": _read_schema(df)}


def rows_of(df) -> list[str]:
    return sorted(json.dumps(_plain(list(r))) for r in df.collect())


def _read_schema(df) -> str:
    """The ReadSchema the optimised plan's scan reads (`struct<...>`)."""
    plan = df._jdf.queryExecution().optimizedPlan().toString()
    start = plan.find("RelationV2[")
    return plan[start:plan.find("]", start) + 1] if start >= 0 else plan


def scanned(read: str) -> list[str]:
    """The column names of a `RelationV2[name#1, ...]` scan."""
    return [column.split("#")[0] for column in read[read.index("[") + 1:read.index("]")].split(", ") if column]


@pytest.fixture(scope="module")
def log_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("jvm-log")
    generate(root, batches_per_segment=4)
    return root


@pytest.fixture(scope="module")
def jar(tmp_path_factory):
    try:
        path = jvm.jar(cache=tmp_path_factory.mktemp("jvm-cache"))
    except jvm.JarBuildError as exc:                        # a pyspark whose internal API moved
        pytest.fail(str(exc))
    if path is None:
        pytest.skip("no javac (a JDK) here: the JVM part cannot be built")
    return path


def test_the_jar_is_built_once_and_holds_the_service_entry(jar, tmp_path):
    built = os.stat(jar).st_mtime_ns
    assert jvm.jar(cache=os.path.dirname(jar)) == jar                   # cached: the same file,
    assert os.stat(jar).st_mtime_ns == built                             # not written again
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        service = z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode()
    assert "kafkacodec/spark/KafkaLogSource.class" in names and service.strip() == jvm.CLASS_NAME


def with_jar(jar, log_root, work) -> dict:
    """The child session's answers (the jar on spark.jars)."""
    env = {**os.environ, "PYTHONPATH": PACKAGE_PARENT, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    run = subprocess.run([sys.executable, "-c", CHILD, str(log_root), jar, os.path.dirname(__file__),
                          str(work / "written")], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    line = next(l for l in run.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


# One test for the child's session (a JVM start, 30-60 s under load): wherever pytest-xdist
# shares out tests alone, separate tests would each start their own.
def test_with_the_jar_every_query_write_and_stream_answer_as_the_python_source(spark, log_root, jar, tmp_path):
    got = with_jar(jar, log_root, tmp_path)
    assert got["loaded"]
    for name in QUERIES:
        python = answer(spark, str(log_root), name)
        assert got[name]["rows"] == python["rows"] and python["rows"], name

    # scans read only the columns a query uses; the Python source alone reads every column
    assert "offset" in answer(spark, str(log_root), "offset")["read"]
    assert "value" in answer(spark, str(log_root), "offset")["read"]
    read = {name: got[name]["read"] for name in QUERIES}
    assert "value" not in read["offset"] and "offset" in read["offset"]
    assert "key" not in read["value_where_offset"] and "value" in read["value_where_offset"]
    # counts grouped by nothing, partition or topic come from batch headers (the reader's
    # count column); a filter on another column, or countFromHeaders=false, decodes offsets
    counted = {"count": [], "count_committed_range": [], "group_partition": ["partition"],
               "group_partition_where": ["partition"], "group_topic_partition": ["topic", "partition"]}
    for name, grouped in counted.items():
        assert scanned(read[name]) == grouped + ["kafkalog.count"], (name, read[name])
    for name in ("count_where", "count_decoded"):
        assert "kafkalog.count" not in read[name] and "value" not in read[name], name
    # a pushed filter's columns stay in the reader's schema (Spark resolves the filter there)
    assert "offset" in read["count_where"] and "key" not in read["count_where"]

    # a write and a stream through the jar are the Python source's
    clicks = spark.read.format("kafkalog").option("subscribe", "clicks").load(str(log_root))
    assert got["written"] == rows_of(clicks.select("offset", "value"))
    everything = spark.read.format("kafkalog").load(str(log_root))
    assert got["streamed"] == rows_of(everything.select("topic", "partition", "offset"))
