"""Rows/s of the write side on one local[2] session, same data for every path:

- kafkalog -> kafkalog : spark.read.format("kafkalog") -> df.write.format("kafkalog") (each task
                         holds whole segments in offset order: one run per partition, the commit
                         only renames)
- write_log            : the same rows through write_log (repartition by topic/partition, sort by
                         offset within tasks, then the format)
- convert pq->segments : kafkacodec.spark.job.convert from a Parquet copy of the log
- shuffled, plain      : the rows in random order through the plain format (the commit merges
                         runs of one partition on the driver): a tenth of the data
- parquet (peer)       : the same source rows written by Spark's native Parquet writer
- ceiling              : a Python DataSourceArrowWriter that only counts its Arrow batches (what
                         Spark's Python write path carries here, encoder-free)

Every path reads the log (or its Parquet copy) again, so each rate includes that read.  Use 2
rounds or more: the first job of a path also starts and imports its Python workers.  Not a CI
test:

    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=/work/venv/bin/python \\
        /work/venv/bin/python bench/bench_spark_write.py [records [rounds]]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from itertools import count
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent)
# The checkout's kafkacodec when it is built in place, else the installed one (a fresh clone
# after the README's setup has only the installed wheel: the bare source tree cannot import).
IN_TREE = any(p.suffix in (".so", ".pyd") for p in (HERE.parent / "kafkacodec").glob("_crc*"))
if IN_TREE:
    sys.path.insert(0, ROOT)

sys.path.insert(0, str(HERE))                   # its sibling bench_spark.py, under pytest too
from bench_spark import local_session, timed  # noqa: E402
from bench_spark import write_log as make_log  # noqa: E402


def main(records: int = 4_000_000, rounds: int = 2) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    from kafkacodec.spark import register, write_log
    from kafkacodec.spark.job import convert

    spark = local_session("bench-spark-write", {"spark.driver.memory": "3g", "spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-spark-write-"))
    fresh = (tmp / f"out-{i}" for i in count())
    try:
        make_log(tmp / "log", records)
        print(f"{records:,} records, uncompressed v2, 100-byte values, 4 partitions, local[2]; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)

        def source():
            return spark.read.format("kafkalog").option("includeHeaders", "true").load(str(tmp / "log")).select(
                "key", "value", "topic", "partition", "offset", "timestamp", "headers")

        source().write.parquet(str(tmp / "pq"))
        plain = timed("kafkalog -> kafkalog", records, lambda: source().write.format("kafkalog")
                      .mode("append").save(str(next(fresh))), rounds)
        timed("write_log", records, lambda: write_log(source(), str(next(fresh))), rounds)
        timed("convert pq->segments", records, lambda: convert(spark, tmp / "pq", next(fresh)), rounds)
        tenth = records // 10
        timed("shuffled, plain", tenth, lambda: source().limit(tenth).orderBy(F.rand(1)).write
              .format("kafkalog").mode("append").save(str(next(fresh))), rounds)
        parquet = timed("parquet (peer)", records, lambda: source().write.parquet(str(next(fresh))), rounds)

        class CountingWriter(DataSourceArrowWriter):
            def write(self, iterator):
                sum(rb.num_rows for rb in iterator)
                return WriterCommitMessage()

        class Ceiling(DataSource):
            @classmethod
            def name(cls):
                return "kc_write_ceiling"

            def writer(self, schema, overwrite):
                return CountingWriter()

        spark.dataSource.register(Ceiling)
        ceiling = timed("ceiling (no encode)", records, lambda: source().write.format("kc_write_ceiling")
                        .mode("append").save(), rounds)
        print(f"kafkalog writer: {plain / ceiling:.0%} of the encoder-free Python writer, "
              f"{plain / parquet:.0%} of Spark's Parquet writer on the same rows")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
