"""`df.write.format("kafkalog")`: DataFrame rows encoded into v2 batches by the tasks and laid
out as a Kafka log directory on commit."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Sequence, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kafkacodec.logdir import Options, write_partition
from kafkacodec.spark._options import path_option

__all__ = ["KafkaLogWriter"]

# staged batches of one task: (topic, partition) -> (staging file, records, bytes)
Staged = dict[tuple[str, int], tuple[str, int, int]]


class _Commit(WriterCommitMessage):
    def __init__(self, task: int, staged: Staged):
        self.task = task
        self.staged = staged            # (topic, partition) -> (staging file, records, bytes)


class KafkaLogWriter(DataSourceArrowWriter):
    """Each task encodes its rows into v2 batches per topic-partition in a staging file with
    offsets from 0; commit() on the driver lays them out in task order with dense offsets
    from baseOffset (or after the existing data), rolling segments at segmentBytes."""

    def __init__(self, options: Options, overwrite: bool):
        from kafkacodec._types import compression_of

        self.path = path_option(options)
        self.overwrite = overwrite
        self.topic = options.get("topic")
        self.partition = options.int("partition", 0)
        self.codec = int(compression_of(options.get("compression", "none")))
        self.batch_bytes = options.int("batchSize", 16384)
        self.segment_bytes = options.int("segmentBytes", 1 << 30)
        self.base_offset = options.int("baseOffset", 0)
        self.job = uuid.uuid4().hex[:12]

    @property
    def staging(self) -> Path:
        return Path(self.path) / f"_kafkalog_staging_{self.job}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Commit:
        import numpy as np
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from kafkacodec._arrow import encode_v2

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        folder = self.staging / f"task-{task:06d}-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[tuple[str, int], BinaryIO] = {}
        staged: Staged = {}
        try:
            for rb in iterator:
                names = rb.schema.names
                if "value" not in names:
                    raise ValueError("kafkalog write needs a 'value' column (binary or string)")
                n = rb.num_rows
                value = rb.column("value").cast(pa.binary())
                key = rb.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary())
                if "timestamp" in names:
                    ts = rb.column("timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                    ts = pc.fill_null(pc.floor(pc.divide(ts.cast(pa.float64()), 1000)), -1).cast(pa.int64())
                    ts = np.ascontiguousarray(ts.to_numpy(zero_copy_only=False), dtype=np.int64)
                else:
                    ts = np.full(n, -1, dtype=np.int64)
                headers = rb.column("headers") if "headers" in names else None
                if "topic" in names:
                    topics = rb.column("topic")
                elif self.topic:
                    topics = pa.array([self.topic] * n, pa.string())
                else:
                    raise ValueError("kafkalog write needs a 'topic' column or the option topic")
                parts = rb.column("partition") if "partition" in names else pa.array(np.full(n, self.partition, np.int32))
                table = pa.table({"t": topics, "p": parts.cast(pa.int32()), "i": np.arange(n)})
                for group in table.group_by(["t", "p"], use_threads=False).aggregate([("i", "list")]).to_pylist():
                    topic, partition, rows = group["t"], group["p"], pa.array(group["i_list"])
                    if topic is None or partition is None:
                        raise ValueError("kafkalog write: a row has a null topic or partition")

                    def take(column: Any) -> Any:
                        return column.take(rows)

                    data, _ = encode_v2(take(key), take(value), ts[np.asarray(rows)],
                                        take(headers) if headers is not None else None,
                                        codec=self.codec, batch_bytes=self.batch_bytes,
                                        base_offset=staged.get((topic, partition), (0, 0, 0))[1],
                                        )
                    tp = (topic, partition)
                    if tp not in files:
                        files[tp] = open(folder / f"{topic}-{partition}.batches", "wb")
                    files[tp].write(data)
                    _, records, size = staged.get(tp, (None, 0, 0))
                    staged[tp] = (str(folder / f"{topic}-{partition}.batches"), records + len(rows), size + len(data))
        finally:
            for f in files.values():
                f.close()
        return _Commit(task, staged)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        root = Path(self.path)
        by_tp: dict[tuple[str, int], list[tuple[int, str, int]]] = {}
        commits = [cast(_Commit, m) for m in messages if m is not None]    # what write() returned
        for m in sorted(commits, key=lambda m: m.task):
            for tp, (staged_file, records, _) in m.staged.items():
                by_tp.setdefault(tp, []).append((m.task, staged_file, records))
        try:
            for (topic, partition), parts in sorted(by_tp.items()):
                write_partition(root / f"{topic}-{partition}", [p[1] for p in parts],
                                base_offset=self.base_offset, segment_bytes=self.segment_bytes,
                                overwrite=self.overwrite)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
