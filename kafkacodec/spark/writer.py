"""`df.write.format("kafkalog")` and `write_log(df, path)`: DataFrame rows laid out as a Kafka log
directory, every (topic, partition) in offset order with its offsets, committed all at once
(see kafkacodec.logdir._write for the steps and the save modes).

Spark refuses the save modes errorifexists and ignore for every Python data source before any
Python runs (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), and a Python writer cannot ask Spark to group
or sort its input: `write_log` does both (a repartition by topic and partition plus a sort by
offset, so each partition is written by one task and the commit only renames), and the plain
format stays exact by merging on the driver what tasks wrote of one partition out of order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kafkacodec.logdir import Options
from kafkacodec.logdir._store import open_store
from kafkacodec.logdir._write import (SAVE_MODES, STAGING, Run, TaskWriter, abort, check_target, commit,
                                      new_job_id, next_offsets)
from kafkacodec.spark._options import path_option

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["KafkaLogWriter", "write_log"]

_MODE_ALIASES = {"error": "errorifexists", "default": "errorifexists"}


class _Commit(WriterCommitMessage):
    def __init__(self, runs: list[Run]):
        self.runs = runs


class KafkaLogWriter(DataSourceArrowWriter):
    """Runs on the driver (construction, commit, abort) and, pickled, in every task (write)."""

    def __init__(self, options: Options, overwrite: bool):
        from kafkacodec._types import compression_of

        self.options = options
        self.path = path_option(options)
        mode = str(options.get("saveMode", "overwrite" if overwrite else "append")).lower()
        self.mode = _MODE_ALIASES.get(mode, mode)
        if self.mode not in SAVE_MODES:
            raise ValueError(f"kafkalog write: saveMode={mode!r}: use one of {', '.join(SAVE_MODES)}")
        if overwrite != (self.mode == "overwrite"):
            raise ValueError(f"kafkalog write: saveMode={self.mode} needs .mode("
                             f"{'overwrite' if self.mode == 'overwrite' else 'append'!r})")
        self.partition_overwrite = str(options.get("partitionOverwriteMode", "static")).lower()
        if self.partition_overwrite not in ("static", "dynamic"):
            raise ValueError("kafkalog write: partitionOverwriteMode: use static or dynamic")
        self.topic = options.get("topic")
        self.partition = options.int("partition", 0)
        self.codec = int(compression_of(options.get("compression", "none")))
        self.batch_bytes = options.int("batchSize", 16384)
        self.segment_bytes = options.int("segmentBytes", 1 << 30)
        self.base_offset = options.int("baseOffset", 0)
        self.buffer_bytes = options.int("sortBufferBytes", 64 << 20)
        self.job = new_job_id()
        store, self.root = self._store()
        self.write_nothing = not check_target(store, self.root, self.mode)
        # An append numbers rows without an offset column on from each partition's end: the
        # tasks need those offsets, and commit() checks that they did not move meanwhile.
        self.expected_next = next_offsets(store, self.root) \
            if self.mode == "append" and not self.write_nothing else {}

    def _store(self) -> Any:
        return open_store(self.path, {k: v for k, v in self.options._values.items() if k.startswith("fs.")})

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Commit:
        from pyspark import TaskContext

        if self.write_nothing:
            for _ in iterator:
                pass
            return _Commit([])
        ctx = TaskContext.get()
        store, root = self._store()
        writer = TaskWriter(store, store.join(root, STAGING, self.job), task=ctx.partitionId() if ctx else 0,
                            codec=self.codec, batch_bytes=self.batch_bytes, segment_bytes=self.segment_bytes,
                            next_offsets=self.expected_next, base_offset=self.base_offset,
                            topic=self.topic, partition=self.partition, buffer_bytes=self.buffer_bytes)
        try:
            for rb in iterator:
                writer.add(rb)
            return _Commit(writer.close())
        except BaseException:
            writer.discard()
            raise

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        store, root = self._store()
        if self.write_nothing:
            abort(store, root, self.job)
            return
        runs = [run for m in messages if m is not None for run in cast(_Commit, m).runs]
        commit(store, root, self.job, runs, mode=self.mode, partition_overwrite=self.partition_overwrite,
               codec=self.codec, batch_bytes=self.batch_bytes, segment_bytes=self.segment_bytes,
               base_offset=self.base_offset, expected_next=self.expected_next)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        store, root = self._store()
        abort(store, root, self.job)


def write_log(df: DataFrame, path: str, *, mode: str = "errorifexists", shuffle: bool = True,
              allow_aborted: bool = False, **options: Any) -> None:
    """Write `df` as a Kafka log directory at `path` (a local path or a URI) with any of Spark's
    save modes (errorifexists, append, overwrite, ignore); options as the "kafkalog" format's.

    shuffle=True: rows are repartitioned by topic and partition and sorted by offset (by
    timestamp without an offset column) first, so each partition is written whole by one task.
    shuffle=False keeps the DataFrame's partitioning (no shuffle): still exact, the commit
    merges what tasks wrote of one partition out of order on the driver; the fast way when the
    input partitions already hold offset-ordered stretches (a Parquet copy of a log).

    A DataFrame that reads a "kafkalog" source with read_uncommitted (the default) from a log
    holding aborted transactions is refused (ValueError): written back, those records would be
    committed data. Read with kafka.isolation.level=read_committed, or allow_aborted=True to
    write them anyway. (Rows with isControl=true are transaction markers and always refused.)"""
    from kafkacodec.spark.datasource import register

    if not allow_aborted:
        _refuse_aborted_input(df)
    save_mode = _MODE_ALIASES.get(mode.lower(), mode.lower())
    if save_mode not in SAVE_MODES:
        raise ValueError(f"write_log: mode={mode!r}: use one of {', '.join(SAVE_MODES)}")
    columns = df.columns
    keys = [c for c in ("topic", "partition") if c in columns]
    order = [c for c in ("offset", "timestamp") if c in columns][:1]
    if shuffle and order:  # without either, the input order is the order: no shuffle
        df = (df.repartition(*keys) if keys else df.coalesce(1)).sortWithinPartitions(*keys, *order)
    register(df.sparkSession)
    writer = df.write.format("kafkalog").mode("overwrite" if save_mode == "overwrite" else "append")
    for name, value in {"saveMode": save_mode, **options}.items():
        writer = writer.option(name, str(value) if not isinstance(value, str) else value)
    writer.save(path)


def _refuse_aborted_input(df: DataFrame) -> None:
    """ValueError when `df` reads a kafkalog source read_uncommitted whose log holds aborted
    transactions (the sources are found in Spark's analyzed plan, with their options)."""
    from kafkacodec.logdir._read import aborted_transactions

    jdf = getattr(df, "_jdf", None)
    if jdf is None:                       # Spark Connect: the plan is not reachable from here
        return
    leaves = jdf.queryExecution().analyzed().collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if not leaf.getClass().getName().endswith("DataSourceV2Relation") or leaf.table().name() != "kafkalog":
            continue
        source = dict(leaf.options().asCaseSensitiveMap())
        if str(source.get("kafka.isolation.level", "read_uncommitted")).lower() == "read_committed":
            continue
        aborted = aborted_transactions(source)
        if aborted:
            raise ValueError(
                f"write_log: the DataFrame reads {source.get('path', source.get('paths'))} with "
                f"kafka.isolation.level=read_uncommitted and that log holds {aborted} aborted "
                "transactions, whose records would be written as committed data: read it with "
                ".option('kafka.isolation.level', 'read_committed'), or pass allow_aborted=True")
