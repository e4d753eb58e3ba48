"""Functions for DataFrames that already hold raw Kafka batches in a binary column (for instance
mirrored Fetch data kept in Parquet): decode into Spark's Kafka schema with `mapInArrow`, and
validate (CRC and record structure) per row.

    from kafkacodec.spark import decode, validate
    records = decode(df, "batch", topic_column="topic", partition_column="partition")
    checked = validate(df, "batch")          # df + error string (null when valid) + records long
    old = down_convert(df, "batch", 1)       # the column rebuilt as magic 1 (Kafka's rules)

A cell may hold one or more complete entries (v0/v1 messages or v2 batches), as a Fetch
response's records field does; a partial trailing entry is ignored, as Kafka's consumer does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa

from kafkacodec.spark.datasource import BASE_DDL, BATCH_DDL, HEADERS_DDL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# What mapInArrow hands a function and takes back.
ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

__all__ = ["decode", "decode_batches", "validate", "validate_batches", "down_convert",
           "down_convert_batches", "kafka_schema"]


def kafka_schema(include_headers: bool = True) -> str:
    """DDL of the decoded rows (Spark's Kafka source schema + batch columns)."""
    return ", ".join([BASE_DDL] + ([HEADERS_DDL] if include_headers else []) + [BATCH_DDL])


def decode_batches(column: str, *, topic_column: str | None = None, partition_column: str | None = None,
                   topic: str = "", partition: int = 0, validate_crc: bool = True,
                   include_headers: bool = True, keep_control: bool = False,
                   max_rows: int = 65536) -> ArrowFunction:
    """A function for `df.mapInArrow(fn, kafka_schema())` decoding the raw batches in `column`."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafkacodec._arrow import ArrowDecoder

        decoders: dict[tuple[str, int], ArrowDecoder] = {}
        for rb in batches:
            cells = rb.column(column)
            topics = rb.column(topic_column).to_pylist() if topic_column else None
            parts = rb.column(partition_column).to_pylist() if partition_column else None
            for i in range(rb.num_rows):
                if not cells[i].is_valid:
                    continue
                t = topics[i] if topics else topic
                p = int(parts[i]) if parts else partition
                dec = decoders.get((t, p))
                if dec is None:
                    dec = decoders[(t, p)] = ArrowDecoder(
                        t or "", p, validate_crc=validate_crc, include_headers=include_headers,
                        keep_control=keep_control, max_rows=max_rows, source=f"{column}[row {i}]")
                data = cells[i].as_buffer()
                pos, end = 0, len(data)
                while pos < end:
                    out, new_pos = dec.decode(data, pos, end)
                    if out.num_rows:
                        yield out
                    if new_pos == pos or dec.trailing_bytes:
                        break
                    pos = new_pos

    return run


def decode(df: DataFrame, column: str, **options: Any) -> DataFrame:
    """The decoded records of `df[column]` as a DataFrame (mapInArrow; options as decode_batches)."""
    return df.mapInArrow(decode_batches(column, **options),
                         kafka_schema(options.get("include_headers", True)))


def validate_batches(column: str) -> ArrowFunction:
    """A function for mapInArrow adding `error` (null when valid) and `records` to each row."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafkacodec._arrow import ArrowDecoder
        from kafkacodec.errors import KafkaCodecError

        for rb in batches:
            errors: list[str | None] = []
            counts: list[int] = []
            for cell in rb.column(column):
                if not cell.is_valid:
                    errors.append(None)
                    counts.append(0)
                    continue
                data = cell.as_buffer()
                dec = ArrowDecoder(validate_crc=True, include_headers=False, keep_control=True)
                pos, n = 0, 0
                error: str | None = None
                try:
                    while pos < len(data):
                        out, new_pos = dec.decode(data, pos)
                        n += out.num_rows
                        if new_pos == pos or dec.trailing_bytes:
                            break
                        pos = new_pos
                except KafkaCodecError as exc:
                    error = str(exc)
                errors.append(error)
                counts.append(n)
            yield rb.append_column("error", pa.array(errors, pa.string())) \
                    .append_column("records", pa.array(counts, pa.int64()))

    return run


def validate(df: DataFrame, column: str) -> DataFrame:
    """`df` with `error` (null when every entry of the cell is valid) and `records` columns."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(list(df.schema.fields) + [StructField("error", StringType()),
                                                  StructField("records", LongType())])
    return df.mapInArrow(validate_batches(column), schema)


def down_convert_batches(column: str, to_magic: int) -> ArrowFunction:
    """A function for mapInArrow replacing `column` by its records converted to `to_magic`
    with kafkacodec.down_convert (Kafka's RecordsUtil.downConvert: control batches vanish,
    zstd cannot go below magic 2)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafkacodec import down_convert as convert

        for rb in batches:
            cells = rb.column(column)
            # pyarrow buffers export signed chars: view them as unsigned bytes (no copy)
            out = [None if not cell.is_valid else
                   bytes(convert(memoryview(cell.as_buffer()).cast("B"), to_magic).records.buffer)
                   for cell in cells]
            index = rb.schema.get_field_index(column)
            yield rb.set_column(index, rb.schema.field(index), pa.array(out, pa.binary()))

    return run


def down_convert(df: DataFrame, column: str, to_magic: int) -> DataFrame:
    """`df` with `column` (raw batches) converted to magic `to_magic` (0 or 1)."""
    return df.mapInArrow(down_convert_batches(column, to_magic), df.schema)
