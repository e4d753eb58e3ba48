"""The main job: Kafka log segments -> Parquet and Parquet -> segments on Spark, with a summary.

`convert(spark, src, dst)` picks the direction from `src` (a Parquet directory, or Kafka log
segments) and counts, in the same pass, records, bytes, per-topic records and corrupt entries
(CRC failures included) through accumulators.

Nothing is lost or reordered: the Parquet rows keep topic, partition and offset, and Parquet ->
segments writes every partition in offset order with those offsets (`write_log`).  A non-empty
`dst` is refused unless `overwrite`; then only what an earlier conversion wrote there (Spark's
part files and `_SUCCESS`, or `<topic>-<partition>` directories) is replaced, other files stay.
The output appears at once: Parquet is written to a temporary directory beside `dst` and moved
in, segments are committed by the kafkalog writer (staged, then renamed).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.accumulators import AccumulatorParam

from kafkacodec.logdir import discover

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kafkacodec._progress import Progress

__all__ = ["convert", "ConvertSummary", "make_session", "session_conf", "StageProgress"]

CORRUPT_COLUMN = "_corrupt_record"
# What Spark's file writers leave in an output directory (replaced by --overwrite).
SPARK_OUTPUT_RE = re.compile(r"^(part-.*|\.part-.*\.crc|_SUCCESS|\._SUCCESS\.crc|_committed_.*|_started_.*)$")


class _DictSum(AccumulatorParam[dict[str, int]]):
    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


class _ListSum(AccumulatorParam[list[str]]):
    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, a: list[str], b: list[str]) -> list[str]:
        a.extend(b)
        return a


@dataclass
class ConvertSummary:
    direction: str                       # "segments->parquet" or "parquet->segments"
    source: str
    output: str
    records: int = 0
    value_bytes: int = 0                 # key + value bytes of the records
    input_bytes: int = 0
    output_bytes: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    corrupt_entries: int = 0
    crc_failures: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dir_bytes(path: str | os.PathLike[str]) -> int:
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def check_output(src: str, dst: str, overwrite: bool) -> None:
    """Refuse, before any Spark work, an output that is (inside) the input or not empty."""
    from kafkacodec._atomic import SameFileError

    if "://" in dst:
        return
    if os.path.abspath(dst) == os.path.abspath(src) or \
            os.path.abspath(dst).startswith(os.path.abspath(src).rstrip(os.sep) + os.sep):
        raise SameFileError(f"{dst}: the output is (inside) the input {src}; write elsewhere")
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise FileExistsError(f"{dst} exists and is not a directory")
    if os.path.isdir(dst) and os.listdir(dst) and not overwrite:
        raise FileExistsError(f"{dst} is not empty; give --overwrite to replace what an earlier "
                              "conversion wrote there (other files are kept), or another output")


def is_parquet(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and any(f.suffix == ".parquet" for f in p.rglob("*.parquet"))


def session_conf(master: str, conf: dict[str, Any] | None = None) -> dict[str, str]:
    """The Spark properties make_session sets.  Local masters run Python workers with this
    interpreter and this kafkacodec (same host: its path works for them even from a source
    checkout).  On a cluster the executors import kafkacodec from their own Python
    (PYSPARK_PYTHON or spark.pyspark.python: the same environment on every node, or a packed
    one shipped with spark.archives): no path of the driver's is handed to them."""
    props = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if master.startswith("local"):
        props["spark.executorEnv.PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    props.update({k: str(v) for k, v in (conf or {}).items()})
    return props


def make_session(master: str | None = None, app: str = "kafkacodec",
                 conf: dict[str, Any] | None = None) -> SparkSession:
    """A SparkSession (local[*] unless master is given) with session_conf(), registered with
    the "kafkalog" format."""
    import sys

    from pyspark.sql import SparkSession

    from kafkacodec.spark.datasource import register

    master = master or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for k, v in session_conf(master, conf).items():
        builder = builder.config(k, v)
    # Python workers run `python -m pyspark.daemon` in the JVM's working directory, first on
    # their sys.path: start the JVM outside any source checkout that would shadow this package.
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        spark = builder.getOrCreate()
    finally:
        os.chdir(cwd)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


class StageProgress:
    """Polls Spark's status tracker and feeds a Progress bar with finished/total tasks."""

    def __init__(self, spark: SparkSession, bar: Progress):
        self.tracker = spark.sparkContext.statusTracker()
        self.bar = bar
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.seen: dict[int, tuple[int, int]] = {}

    def __enter__(self) -> StageProgress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._poll()

    def _poll(self) -> None:
        for sid in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(sid)
            if info:
                self.seen[sid] = (info.numCompletedTasks, info.numTasks)
        done = sum(d for d, _ in self.seen.values())
        total = sum(t for _, t in self.seen.values())
        self.bar.set(done, total or None, note=f"tasks, {len(self.seen)} stage(s)")

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self._poll()
            except Exception:  # the tracker may be gone while Spark stops
                return


def convert(spark: SparkSession, src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
            compression: str = "none", mode: str = "PERMISSIVE",
            validate_crc: bool = True, segment_bytes: int = 1 << 30,
            overwrite: bool = False) -> ConvertSummary:
    """Convert `src` to `dst`: segments -> Parquet, or Parquet -> segments when `src` holds
    Parquet files.  A non-empty `dst` is refused unless `overwrite` (see the module doc)."""
    from kafkacodec._atomic import atomic_directory
    from kafkacodec.spark.writer import write_log

    start = time.monotonic()
    # Executors do not share the driver's working directory: hand Spark absolute local paths.
    src, dst = (str(p) if "://" in str(p) else os.path.abspath(p) for p in (src, dst))
    check_output(src, dst, overwrite)
    sc = spark.sparkContext
    records = sc.accumulator(0)
    payload = sc.accumulator(0)
    per_topic = sc.accumulator({}, _DictSum())
    problems = sc.accumulator([], _ListSum())
    to_segments = is_parquet(src)

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc

        for rb in batches:
            names = rb.schema.names
            if CORRUPT_COLUMN in names:
                bad = rb.column(CORRUPT_COLUMN)
                if bad.null_count < rb.num_rows:
                    problems.add([m for m in bad.to_pylist() if m is not None])
                    rb = rb.filter(pc.is_null(bad))
                rb = rb.drop_columns([CORRUPT_COLUMN])
            records.add(rb.num_rows)
            nbytes = 0
            for name in ("key", "value"):
                if name in names and rb.num_rows:
                    nbytes += pc.sum(pc.binary_length(rb.column(name))).as_py() or 0
            payload.add(nbytes)
            if rb.num_rows:
                topics = pc.value_counts(rb.column("topic")).to_pylist()
                per_topic.add({t["values"]: t["counts"] for t in topics})
            yield rb

    if to_segments:
        df = spark.read.parquet(str(src))
        summary = ConvertSummary("parquet->segments", str(src), str(dst), input_bytes=_dir_bytes(src))
        counted = df.mapInArrow(count, df.schema)
        # Parquet written by this job holds each segment's rows in offset order: no shuffle,
        # the commit only renames (and merges what arrives out of order).
        write_log(counted, str(dst), mode="overwrite" if overwrite else "errorifexists", shuffle=False,
                  compression=compression, segmentBytes=segment_bytes)
    else:
        segments = discover(src)
        summary = ConvertSummary("segments->parquet", str(src), str(dst),
                                 input_bytes=sum(s.size for s in segments))
        df = (spark.read.format("kafkalog").option("mode", mode)
              .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed")
              .option("validateCrc", str(validate_crc).lower()).load(str(src)))
        out_schema = df.schema if mode != "PERMISSIVE" else \
            df.drop(CORRUPT_COLUMN).schema
        counted = df.mapInArrow(count, out_schema)
        if "://" in str(dst):
            counted.write.mode("overwrite" if overwrite else "errorifexists").parquet(str(dst))
        else:
            with atomic_directory(dst, inputs=[src], overwrite=overwrite,
                                  replaceable=lambda name: bool(SPARK_OUTPUT_RE.match(name))) as tmp:
                counted.write.mode("overwrite").parquet(tmp)      # our own, empty, directory
    summary.records = records.value
    summary.value_bytes = payload.value
    summary.per_topic = dict(sorted(per_topic.value.items()))
    summary.problems = problems.value
    summary.corrupt_entries = len(summary.problems)
    summary.crc_failures = sum("CRC mismatch" in p for p in summary.problems)
    summary.output_bytes = _dir_bytes(dst)
    summary.seconds = time.monotonic() - start
    return summary
