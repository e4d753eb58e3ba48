"""Tiered storage (issue 32): Spark over remote segments on an S3 server against the same
segments on local disk, in one run, and the bytes fetched from S3 for a 1% offset range against
the whole partition.

The log is bench_spark's (uncompressed v2, 100-byte values, .index/.timeindex), rolled into
segments of `segment_bytes` and laid out as Kafka's LocalTieredStorage keeps remote segments
(`kafka-tiered-storage/<topic>-<partition>-<topic id>/<base offset>-<segment id>.log`); the same
files are uploaded to moto's S3 server (tests/s3_server.py) on loopback.  Not a CI test:

    SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=/work/venv/bin/python \\
        /work/venv/bin/python bench/bench_tiered.py [records]

Every Spark path ends in the "noop" sink (all columns materialized), best of three.  The S3
server is moto in Python on the same 2 cores: its rate bounds the remote path, so the ratio says
what the remote path costs here, not on a real object store.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import bench_spark  # noqa: E402  (the log, the session, the timing)
from bench_spark import BASE_TS, build_indexes, encode_v2, fixed_width, np, scan_entries  # noqa: E402


def write_tiered(directory: Path, records: int, partitions: int = 2, segment_bytes: int = 32 << 20) -> None:
    """bench_spark's records, rolled every `segment_bytes`, in LocalTieredStorage's layout."""
    per = records // partitions
    batch = 1000
    for p in range(partitions):
        topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        d = directory / f"bench-{p}-{topic_id}"
        d.mkdir(parents=True)
        start = 0
        while start < per:
            n_records = max(batch, segment_bytes // 118 // batch * batch)
            n = np.arange(start, min(start + n_records, per), dtype=np.int64)
            value = fixed_width(b"", n, 10, b":" + b"v" * 89)
            key = fixed_width(b"key-", n % 50_000, 6)
            data, _ = encode_v2(key, value, n + BASE_TS, batch_bytes=batch * 118, base_offset=start)
            segment_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            stem = d / f"{start:020d}-{segment_id}"
            stem.with_suffix(".log").write_bytes(data)
            index, times = build_indexes(scan_entries(data), start)
            stem.with_suffix(".index").write_bytes(index)
            stem.with_suffix(".timeindex").write_bytes(times)
            start += len(n)


def main(records: int = 4_000_000) -> dict:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from s3_server import counted_reads, start

    from kafkacodec.logdir import plan, read_split

    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-tiered-"))
    server = start()
    try:
        local = tmp / "kafka-tiered-storage"
        write_tiered(local, records)
        remote = server.upload(local, "kafka-tiered-storage")
        for name, value in server.env.items():
            os.environ[name] = value                       # the executors reach S3 through pyarrow's env
        size = sum(f.stat().st_size for f in local.rglob("*.log"))
        print(f"{records:,} records, {size / 1e6:.0f} MB in {len(list(local.rglob('*.log')))} segments; "
              f"{bench_spark.load()}", flush=True)

        # bytes fetched from S3 for 1% of one partition's offsets (ranged reads and whole index files)
        per = records // 2
        first = per // 2
        options = {"assign": json.dumps({"bench": [0]}), "startingOffsets": json.dumps({"bench": {"0": first}}),
                   "endingOffsets": json.dumps({"bench": {"0": first + per // 100}})}
        with counted_reads() as fetched:
            splits, _ = plan(remote, options)
            rows = sum(rb.num_rows for s in splits for rb in read_split(s, columns=["offset"]))
        partition_bytes = sum(f.stat().st_size for f in local.glob("bench-0-*/*.log"))
        share = sum(fetched) / partition_bytes
        print(f"1% offset range       {rows:,} rows: {sum(fetched) / 1e6:.2f} MB fetched of "
              f"{partition_bytes / 1e6:.0f} MB ({share:.2%}; goal < 3%)", flush=True)

        from kafkacodec.spark import register

        spark = bench_spark.local_session("bench-tiered", {})
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def noop(path: str) -> None:
            spark.read.format("kafkalog").load(path).write.format("noop").mode("overwrite").save()

        on_disk = bench_spark.timed("spark local segments", records, lambda: noop(str(local)))
        on_s3 = bench_spark.timed("spark S3 segments", records, lambda: noop(remote))
        print(f"S3 / local            {on_s3 / on_disk:.2f}x", flush=True)
        spark.stop()
        return {"records": records, "local_rows_per_s": on_disk, "s3_rows_per_s": on_s3,
                "range_fetched_share": share}
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000)
