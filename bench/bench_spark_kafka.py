"""The "kafkalog" source against Spark's own Kafka source (spark-sql-kafka-0-10) and Parquet, on
the same records, in one run on one local[2] session (issue 34):

- a real Kafka broker (tests/kafka_broker.py, Kafka 4.1 from Maven Central, KRaft) takes N
  records of 100-byte values in 4 partitions from confluent-kafka (uncompressed batches);
- kafkalog reads that broker's log directory, spark-sql-kafka reads the broker over the
  network (the data is in the page cache on both sides), Parquet reads a copy of the rows
  written once (untimed);
- kafkalog twice in the same session: with its JVM part (kafkacodec.spark.jvm's jar on
  spark.jars: the scans read only the columns a query uses) and as the Python source alone
  (registered here as "kafkalog_python"), which also runs with a schema of the columns a query
  needs (`.schema(...)`: how the Python source alone pays for only those);
- queries: count(), a full scan of `value`, the 1% offset range in the middle of every
  partition as a `where` (filter pushdown on: `spark.sql.python.filterPushdown.enabled`) and as
  the sources' startingOffsets / endingOffsets options, groupBy(partition).count();
- writes of the same rows: df.write.format("kafkalog") (the log laid out by kafkacodec), Spark's
  Parquet writer, and spark-sql-kafka producing to the broker (acks=all, its defaults).

Each cell is the best of `--rounds` runs of the query (noop sink, every selected column
materialized), in seconds and as rows/s.  spark-sql-kafka's jars (and kafka-clients, commons-pool2)
are resolved with Maven before Spark starts (Spark cannot download them here).  Not a CI test:

    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=/work/venv/bin/python \\
        /work/venv/bin/python bench/bench_spark_kafka.py [records] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))          # the Kafka broker from Maven Central
from bench_spark import _once, load, local_session  # noqa: E402  (it puts an in-place build on sys.path)
from kafka_broker import CACHE, DEFAULT_VERSION, KafkaBroker, _resolve  # noqa: E402

SPARK_KAFKA = "4.2.0"        # the newest spark-sql-kafka-0-10_2.13 on Maven Central here (Spark 4.3 runs it)
TOPIC = "bench"
PARTITIONS = 4
VALUE_BYTES = 100
# Only these of its dependencies: the rest (Scala, Hadoop's client, lz4, snappy) is in pyspark's jars.
WANTED_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def spark_kafka_jars() -> str:
    """spark-sql-kafka and the jars it adds to pyspark's, as `spark.jars` (resolved once)."""
    pom = ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\n"
           "<groupId>kafkacodec.bench</groupId><artifactId>spark-sql-kafka-env</artifactId><version>1</version>\n"
           "<dependencies><dependency><groupId>org.apache.spark</groupId>"
           f"<artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{SPARK_KAFKA}</version>"
           "</dependency></dependencies></project>\n")
    cp = _resolve(CACHE / f"spark-sql-kafka-{SPARK_KAFKA}", pom, f"spark-sql-kafka {SPARK_KAFKA}", ("mvn",))
    return ",".join(p for p in cp.split(os.pathsep) if Path(p).name.startswith(WANTED_JARS))


def produce(bootstrap: str, topic: str, records: int) -> None:
    """`records` 100-byte values with 10-byte keys, round-robin over the partitions, in batches
    of up to 1 MiB (the broker writes them as received)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "acks": 1, "compression.type": "none"})
    filler = b"v" * (VALUE_BYTES - 11)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, b"%010d:" % i + filler, b"key-%06d" % (i % 50_000),
                                 partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("the producer did not deliver every record")


def main(records: int = 4_000_000, rounds: int = 3, json_path: str | None = None) -> dict:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = spark_kafka_jars()
    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-spark-kafka-"))
    broker = KafkaBroker.start(DEFAULT_VERSION, {"num.partitions": PARTITIONS, "log.segment.bytes": 1 << 30})
    spark = None
    try:
        broker.create_topic(TOPIC, PARTITIONS)
        t = time.perf_counter()
        produce(broker.bootstrap, TOPIC, records)
        print(f"Kafka {DEFAULT_VERSION} took {records:,} records in {time.perf_counter() - t:.0f} s", flush=True)

        from kafkacodec.spark import KafkaLogDataSource, jvm, register

        class PythonOnly(KafkaLogDataSource):
            @classmethod
            def name(cls) -> str:
                return "kafkalog_python"

        jar = jvm.jar()
        spark = local_session("bench-spark-kafka", {"spark.driver.memory": "3g",
                                                    "spark.jars": jars + (f",{jar}" if jar else ""),
                                                    "spark.sql.shuffle.partitions": str(PARTITIONS)})
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(PythonOnly)
        print(f"kafkalog's JVM part: {jar if jvm.loaded(spark) else 'not loaded (no JDK)'}", flush=True)
        log_dir = str(broker.log_dir)
        per = records // PARTITIONS
        lo, width = per // 2, per // 100
        starting = json.dumps({TOPIC: {str(p): lo for p in range(PARTITIONS)}})
        ending = json.dumps({TOPIC: {str(p): lo + width for p in range(PARTITIONS)}})

        def kafkalog(schema: str | None = None, fmt: str = "kafkalog", **options: str):
            reader = spark.read.format(fmt).option("subscribe", TOPIC)
            if schema:
                reader = reader.schema(schema)
            return reader.options(**options).load(log_dir)

        def python_only(schema: str | None = None, **options: str):
            return kafkalog(schema, "kafkalog_python", **options)

        def kafka(**options: str):
            return (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", TOPIC).options(**options).load())

        pq = str(tmp / "parquet")
        kafkalog().write.parquet(pq)

        def parquet(**_: str):
            return spark.read.parquet(pq)

        def noop(df) -> None:
            df.write.format("noop").mode("overwrite").save()

        where = f"offset >= {lo} and offset < {lo + width}"
        queries = {
            "count()": (records, lambda src: src().count()),
            "full scan of value": (records, lambda src: noop(src().select("value"))),
            "1% offsets (where)": (4 * width, lambda src: noop(src().where(where))),
            "1% offsets (options)": (4 * width, lambda src: noop(
                src(startingOffsets=starting, endingOffsets=ending))),
            "groupBy(partition).count()": (records, lambda src: src().groupBy("partition").count().collect()),
        }
        sources = {"kafkalog": kafkalog, "kafkalog, Python only": python_only, "spark-sql-kafka": kafka,
                   "Parquet": parquet}
        narrow = {"count()": "partition int", "full scan of value": "value binary, offset bigint",
                  "groupBy(partition).count()": "partition int, offset bigint"}
        assert kafkalog().count() == python_only().count() == kafka().count() == parquet().count() == records
        assert kafkalog(startingOffsets=starting, endingOffsets=ending).count() == 4 * width
        assert kafka(startingOffsets=starting, endingOffsets=ending).count() == 4 * width
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        assert kafkalog().where(where).count() == 4 * width

        load_start = os.getloadavg()[0]
        seconds: dict[str, dict[str, float]] = {}
        print(f"{records:,} records of {VALUE_BYTES} B, {PARTITIONS} partitions, local[2]; {load()}", flush=True)
        for query, (rows, run) in queries.items():
            cells = seconds.setdefault(query, {})
            for name, src in sources.items():
                if name == "Parquet" and "options" in query:
                    continue
                cells[name] = min(_once(lambda: run(src)) for _ in range(rounds))
            if query in narrow:
                cells["kafkalog, Python only, narrow schema"] = min(
                    _once(lambda: run(lambda **o: python_only(narrow[query], **o))) for _ in range(rounds))
            print(f"{query:<28} " + "  ".join(f"{k} {v:.2f} s" for k, v in cells.items())
                  + f"  | kafkalog x{cells['spark-sql-kafka'] / cells['kafkalog']:.2f} spark-sql-kafka"
                  + (f", {cells['Parquet'] / cells['kafkalog']:.0%} of Parquet" if "Parquet" in cells else ""),
                  flush=True)
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")

        # writes: the same rows (from Parquet, read again each round) out through each sink
        out = (tmp / f"out-{i}" for i in range(1 << 30))
        rows = ("key", "value", "topic", "partition", "offset", "timestamp")
        broker.create_topic("bench-out", PARTITIONS)
        writes = {
            "kafkalog": lambda: parquet().select(*rows).write.format("kafkalog").mode("append").save(str(next(out))),
            "Parquet": lambda: parquet().select(*rows).write.parquet(str(next(out))),
            "spark-sql-kafka": lambda: parquet().select("key", "value", "partition").write.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "bench-out").save(),
        }
        cells = seconds.setdefault("write", {})
        for name, run_write in writes.items():
            cells[name] = min(_once(run_write) for _ in range(rounds))
        print("write                        " + "  ".join(f"{k} {v:.2f} s" for k, v in cells.items()), flush=True)
        result = {"records": records, "rounds": rounds, "kafka": DEFAULT_VERSION, "spark_sql_kafka": SPARK_KAFKA,
                  "load_average": [load_start, os.getloadavg()[0]], "seconds": seconds}
        print(f"{load()}")
        if json_path:
            Path(json_path).write_text(json.dumps(result, indent=1))
        return result
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", type=int, nargs="?", default=4_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (default 3)")
    parser.add_argument("--json", help="also write the seconds here")
    args = parser.parse_args()
    main(args.records, args.rounds, args.json)
