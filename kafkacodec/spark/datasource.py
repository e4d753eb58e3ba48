"""`spark.read.format("kafkalog")` / `df.write.format("kafkalog")`: Kafka log directories as
DataFrames through PySpark's Python Data Source API (Arrow batches both ways).

Reading: `load(path)` takes a directory of `<topic>-<partition>` directories (as copied from a
broker's log.dirs or downloaded from tiered storage), one partition directory, or one `.log`
file.  One input partition per segment; segments larger than `maxPartitionBytes` are split at
batch boundaries found by a shallow scan.

Options (read): topics, startingOffsets, endingOffsets, validateCrc, includeHeaders,
keepControl, keepAborted, mode, columnNameOfCorruptRecord, maxPartitionBytes, maxRowsPerBatch.
Options (write): topic, partition, compression, batchSize, segmentBytes, baseOffset.
See docs/spark-and-cli.md for each option.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kafkacodec.logdir import MODES, Options, Split, plan, read_split
from kafkacodec.spark._options import path_option
from kafkacodec.spark.writer import KafkaLogWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["KafkaLogDataSource", "register", "BASE_DDL", "HEADERS_DDL", "BATCH_DDL"]

BASE_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
            "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"
BATCH_DDL = "magic tinyint, producerId bigint, isTransactional boolean, isControl boolean"


def register(spark: SparkSession) -> None:
    """Register the "kafkalog" format on a SparkSession."""
    spark.dataSource.register(KafkaLogDataSource)


class KafkaLogDataSource(DataSource):
    """The "kafkalog" format."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        options = Options(self.options)
        parts = [BASE_DDL]
        if options.bool("includeHeaders", True):
            parts.append(HEADERS_DDL)
        parts.append(BATCH_DDL)
        if str(options.get("mode", "FAILFAST")).upper() == "PERMISSIVE":
            parts.append(f"{options.get('columnNameOfCorruptRecord', '_corrupt_record')} string")
        return ", ".join(parts)

    def reader(self, schema: StructType) -> KafkaLogReader:
        return KafkaLogReader(Options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaLogWriter:
        return KafkaLogWriter(Options(self.options), overwrite)


class KafkaLogReader(DataSourceReader):
    def __init__(self, options: Options):
        self.options = options
        self.path = path_option(options)
        self.mode = str(options.get("mode", "FAILFAST")).upper()
        if self.mode not in MODES:
            raise ValueError(f"option mode={self.mode!r}: use one of {', '.join(MODES)}")
        self.validate_crc = options.bool("validateCrc", True)
        self.include_headers = options.bool("includeHeaders", True)
        self.keep_control = options.bool("keepControl", False)
        self.max_rows = options.int("maxRowsPerBatch", 65536)
        self.corrupt_column = options.get("columnNameOfCorruptRecord", "_corrupt_record")

    def partitions(self) -> Sequence[InputPartition]:
        splits, corrupt = plan(self.path, self.options)
        for path, position, reason in corrupt:
            print(f"kafkalog: {reason} at byte {position}; the rest of the segment is skipped "
                  f"(mode={self.mode})", file=sys.stderr)
        return [InputPartition(s) for s in splits] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split: Split | None = partition.value
        if split is None:
            return
        yield from read_split(split, validate_crc=self.validate_crc, include_headers=self.include_headers,
                              keep_control=self.keep_control, max_rows=self.max_rows, mode=self.mode,
                              corrupt_column=self.corrupt_column)
