"""`spark.read.format("kafkalog")` / `df.write.format("kafkalog")`: Kafka log directories as
DataFrames through PySpark's Python Data Source API (Arrow batches both ways).

Reading takes Spark's Kafka-source options (subscribe, assign, subscribePattern,
startingOffsets, endingOffsets, the timestamp forms, failOnDataLoss, minPartitions,
includeHeaders, kafka.isolation.level) plus kafkacodec's own (mode, validateCrc, keepControl,
maxPartitionBytes, ...); unknown names are refused.  Predicates on offset, partition, topic and
timestamp are pushed down when `spark.sql.python.filterPushdown.enabled` is true; a schema
given with `.schema(...)` (any subset of the columns) is decoded alone.  `readStream` tails a
log directory (`kafkacodec.spark.stream`).  See docs/spark-and-cli.md for every option.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualNullSafe, EqualTo, Filter, GreaterThan,
                                    GreaterThanOrEqual, In, InputPartition, IsNotNull, LessThan,
                                    LessThanOrEqual)

from kafkacodec.logdir import Options, Predicate, Pushdown, ReadOptions, Split, count_split, read_split
from kafkacodec.logdir._read import plan
from kafkacodec.spark.writer import KafkaLogWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

    from kafkacodec.spark.stream import KafkaLogStreamReader

__all__ = ["KafkaLogDataSource", "register", "BASE_DDL", "HEADERS_DDL", "BATCH_DDL", "COUNT_COLUMN",
           "output_columns"]

BASE_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
            "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"
BATCH_DDL = "magic tinyint, producerId bigint, isTransactional boolean, isControl boolean"
#: The last column of a reader's schema when the JVM part pushed count(*) to it (grouped by the
#: columns before it: topic, partition): the reader gives counts, not records.  Not a column of
#: the source: no query names it.
COUNT_COLUMN = "kafkalog.count"


def register(spark: SparkSession) -> None:
    """Register the "kafkalog" format on a SparkSession (PySpark 4 registers it in every session
    by itself, through pyspark_kafkalog).  With the JVM part on the driver's classpath
    (kafkacodec.spark.jvm) Spark refuses a Python source under a JVM source's name: the Python
    source, which the JVM part runs, goes to the session's data source manager directly."""
    from kafkacodec.spark import jvm

    if not jvm.loaded(spark):
        spark.dataSource.register(KafkaLogDataSource)
        return
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    if not manager.dataSourceExists(KafkaLogDataSource.name()):
        from pyspark.sql.udf import _wrap_function

        sc = spark.sparkContext
        python = getattr(sc._jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")
        manager.registerDataSource(KafkaLogDataSource.name(), python(_wrap_function(sc, KafkaLogDataSource)))


def _column_types() -> dict[str, DataType]:
    from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, IntegerType, LongType,
                                   StringType, StructField, StructType, TimestampType)

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return {"key": BinaryType(), "value": BinaryType(), "topic": StringType(), "partition": IntegerType(),
            "offset": LongType(), "timestamp": TimestampType(), "timestampType": IntegerType(),
            "headers": ArrayType(header), "magic": ByteType(), "producerId": LongType(),
            "isTransactional": BooleanType(), "isControl": BooleanType()}


def output_columns(ro: ReadOptions, schema: StructType) -> tuple[list[str], bool]:
    """The decoded columns a schema asks for (in its order, without the corrupt-record column)
    and whether headers are decoded; ValueError for a column or type the source cannot give."""
    types = _column_types()
    names = [f.name for f in schema.fields]
    if ro.mode == "PERMISSIVE" and ro.corrupt_column not in names:
        raise ValueError(f"mode=PERMISSIVE needs a {ro.corrupt_column} string column in the schema (or use "
                         "mode=DROPMALFORMED)")
    columns = []
    for f in schema.fields:
        if f.name == ro.corrupt_column and ro.mode == "PERMISSIVE":
            if f.dataType.simpleString() != "string":
                raise ValueError(f"column {f.name}: the corrupt-record column is a string")
            continue
        if f.name not in types:
            raise ValueError(f"column {f.name!r}: kafkalog gives {', '.join(types)}"
                             + (f" (and {ro.corrupt_column} in PERMISSIVE mode)" if f.name == ro.corrupt_column else ""))
        if f.dataType.simpleString() != types[f.name].simpleString():
            raise ValueError(f"column {f.name} is {types[f.name].simpleString()}, not {f.dataType.simpleString()}")
        columns.append(f.name)
    headers = "headers" in columns
    if headers and ro.include_headers is False:
        raise ValueError("includeHeaders=false but the schema has a headers column")
    return columns, headers


class KafkaLogDataSource(DataSource):
    """The "kafkalog" format."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        options = Options(self.options)
        parts = [BASE_DDL]
        if options.bool("includeHeaders", False):           # Spark's Kafka source: false
            parts.append(HEADERS_DDL)
        parts.append(BATCH_DDL)
        if str(options.get("mode", "FAILFAST")).upper() == "PERMISSIVE":
            parts.append(f"{options.get('columnNameOfCorruptRecord', '_corrupt_record')} string")
        return ", ".join(parts)

    def reader(self, schema: StructType) -> KafkaLogReader:
        return KafkaLogReader(ReadOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> KafkaLogStreamReader:
        from kafkacodec.spark.stream import KafkaLogStreamReader

        return KafkaLogStreamReader(ReadOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaLogWriter:
        return KafkaLogWriter(Options(self.options), overwrite)


_COMPARISONS = {EqualTo: "=", EqualNullSafe: "=", GreaterThan: ">", GreaterThanOrEqual: ">=",
                LessThan: "<", LessThanOrEqual: "<="}
_VALUE_TYPES = {"offset": int, "partition": int, "topic": str, "timestamp": object}


def predicate_of(f: Filter) -> Predicate | None:
    """The Predicate a Spark filter is, when the source can apply it exactly."""
    import datetime

    attribute = getattr(f, "attribute", None)
    # a column the reader does not output is still decoded for its predicate (logdir's read
    # path): with the JVM part, Spark prunes a column that only a pushed filter uses
    if not attribute or len(attribute) != 1 or attribute[0] not in _VALUE_TYPES:
        return None
    column = attribute[0]

    def fits(v: Any) -> bool:
        if column == "timestamp":
            return isinstance(v, datetime.datetime)
        return isinstance(v, _VALUE_TYPES[column]) and not isinstance(v, bool)

    if isinstance(f, IsNotNull):
        return Predicate(column, "notnull")
    value: Any = getattr(f, "value", None)
    if isinstance(f, In):
        values = tuple(value)
        return Predicate(column, "in", values) if values and all(fits(v) for v in values) else None
    op = _COMPARISONS.get(type(f))
    if op is None or not fits(value):
        return None
    return Predicate(column, op, value)


class _PushFilters:
    """The reader's `pushFilters`, as Spark's planner sees it.

    With `spark.sql.python.filterPushdown.enabled` false (Spark's default) Spark 4.1+ refuses a
    reader that overrides pushFilters, for a source that needs its filters to be correct.  This
    reader does not: a read without pushed predicates is complete and exact (Spark then filters
    the rows itself).  So the bound method shows the inherited one to that check (`__func__`),
    every read works with the setting off, and predicates are pushed when it is on."""

    def __get__(self, reader: KafkaLogReader | None, owner: type | None = None) -> Any:
        return self if reader is None else _BoundPushFilters(reader)


class _BoundPushFilters:
    __func__: Any = staticmethod(DataSourceReader.pushFilters)

    def __init__(self, reader: KafkaLogReader):
        self.reader = reader

    def __call__(self, filters: list[Filter]) -> Iterable[Filter]:
        return self.reader.push_filters(filters)


class KafkaLogReader(DataSourceReader):
    pushFilters = _PushFilters()

    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.names = [f.name for f in schema.fields]
        self.counting = bool(self.names) and self.names[-1] == COUNT_COLUMN
        if self.counting:                    # count(*) pushed (kafkacodec/spark/java): by topic, partition
            if any(n not in ("topic", "partition") for n in self.names[:-1]):
                raise ValueError(f"{COUNT_COLUMN} is grouped by topic and partition only, not {self.names[:-1]}")
            self.columns, self.include_headers = self.names[:-1], False
        else:
            self.columns, self.include_headers = output_columns(options, schema)
        self.pushdown = Pushdown()
        self.schema_json = schema.json()

    def push_filters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep the predicates the source applies exactly; hand back the rest to Spark."""
        for f in filters:
            predicate = predicate_of(f)
            if predicate is None:
                yield f
            else:
                self.pushdown.predicates.append(predicate)

    def partitions(self) -> Sequence[InputPartition]:
        splits, _ = plan(None, self.options, pushdown=self.pushdown)
        return [InputPartition(s) for s in splits] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split: Split | None = partition.value
        if self.counting:
            yield from self._count(split)
            return
        if split is None:
            return
        yield from read_arrow(split, self.options, self.columns, self.include_headers, self.names,
                              self.schema_json, self.pushdown)

    def _count(self, split: Split | None) -> Iterator[pa.RecordBatch]:
        """The split's count as one row (its topic and partition first when grouped by them).
        Spark sums them: a split with no rows gives a 0 to the total but no group."""
        ro = self.options
        n = 0 if split is None else count_split(
            split, validate_crc=ro.validate_crc, keep_control=ro.keep_control, mode=ro.mode,
            corrupt_column=ro.corrupt_column, fail_on_data_loss=ro.fail_on_data_loss,
            pushdown=self.pushdown or None)
        if self.columns and not n:
            return
        fixed = {"topic": None if split is None else split.topic,
                 "partition": None if split is None else split.partition}
        target = arrow_schema(self.schema_json)
        yield pa.RecordBatch.from_arrays([pa.array([fixed[c]], target.field(c).type) for c in self.columns]
                                         + [pa.array([n], pa.int64())], schema=target)


def read_arrow(split: Split, ro: ReadOptions, columns: list[str], include_headers: bool, names: list[str],
               schema_json: str, pushdown: Pushdown | None) -> Iterator[pa.RecordBatch]:
    """read_split with the reader's options, in the exact Arrow schema Spark expects."""
    target = arrow_schema(schema_json)
    for rb in read_split(split, validate_crc=ro.validate_crc, include_headers=include_headers,
                         keep_control=ro.keep_control, max_rows=ro.max_rows, mode=ro.mode,
                         corrupt_column=ro.corrupt_column, fail_on_data_loss=ro.fail_on_data_loss,
                         columns=columns, pushdown=pushdown or None):
        if rb.schema.names != names:
            rb = rb.select(names)
        if not rb.schema.equals(target):
            rb = pa.RecordBatch.from_arrays(rb.columns, schema=target)
        yield rb


def arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema Spark expects for a reader's schema (as JSON: a reader is pickled)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    return to_arrow_schema(StructType.fromJson(json.loads(schema_json)), timezone="UTC")
