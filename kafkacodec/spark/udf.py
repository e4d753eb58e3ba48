"""Functions for DataFrames that already hold raw Kafka batches in a binary column (for instance
mirrored Fetch data kept in Parquet): decode into Spark's Kafka schema with `mapInArrow`,
validate (CRC and record structure) per row, down-convert per row.

    from kafkacodec.spark import decode, validate, down_convert
    records = decode(df, "batch", topic_column="topic", partition_column="partition",
                     keep_columns=["fetched_at"], mode="PERMISSIVE")
    checked = validate(df, "batch")          # df + error string (null when valid) + records long
    old = down_convert(df, "batch", 1, mode="PERMISSIVE")   # + error, null cell where it failed

A cell may hold one or more complete entries (v0/v1 messages or v2 batches), as a Fetch
response's records field does; a partial trailing entry is ignored, as Kafka's consumer does.

Corrupt data follows `mode`, as the kafkalog reader: FAILFAST (default) stops the job with the
error; DROPMALFORMED skips what is corrupt (decode: the rest of the cell from the corrupt
entry on, the records before it are kept; down_convert: the row) and goes on; PERMISSIVE also
reports it, in a `_corrupt_record` column (decode: one row per corrupt cell with the source
columns, topic, partition and the failed entry's offset; down_convert: the row with a null
cell).  The column must be binary: a string column is refused with a TypeError.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import pyarrow as pa

from kafkacodec.spark.datasource import BASE_DDL, BATCH_DDL, HEADERS_DDL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# What mapInArrow hands a function and takes back.
ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

__all__ = ["decode", "decode_batches", "validate", "validate_batches", "down_convert",
           "down_convert_batches", "kafka_schema", "MODES", "CORRUPT_COLUMN"]

MODES = ("FAILFAST", "DROPMALFORMED", "PERMISSIVE")
CORRUPT_COLUMN = "_corrupt_record"


def kafka_schema(include_headers: bool = True) -> str:
    """DDL of the decoded rows (Spark's Kafka source schema + batch columns)."""
    return ", ".join([BASE_DDL] + ([HEADERS_DDL] if include_headers else []) + [BATCH_DDL])


def _check_mode(mode: str) -> str:
    m = str(mode).upper()
    if m not in MODES:
        raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}")
    return m


def _check_arrow_binary(rb: pa.RecordBatch, column: str) -> Any:
    if column not in rb.schema.names:
        raise KeyError(f"no column {column!r} (columns: {', '.join(rb.schema.names)})")
    cells = rb.column(column)
    if not (pa.types.is_binary(cells.type) or pa.types.is_large_binary(cells.type)):
        raise TypeError(f"column {column!r} holds {cells.type}, not binary: raw Kafka batches are bytes "
                        "(a base64 string column: unbase64(col) first)")
    return cells


def _check_spark_binary(df: DataFrame, column: str) -> None:
    from pyspark.sql.types import BinaryType

    if column not in df.columns:
        raise KeyError(f"no column {column!r} (columns: {', '.join(df.columns)})")
    kind = df.schema[column].dataType
    if not isinstance(kind, BinaryType):
        raise TypeError(f"column {column!r} is {kind.simpleString()}, not binary: raw Kafka batches are "
                        "bytes (a base64 string column: unbase64(col) first)")


# Interpreters found able (True) or unable (False) to import kafkacodec, by path.
_WORKERS_IMPORT: dict[str, bool] = {}


def _check_workers(df: DataFrame) -> None:
    """Refuse, before the job starts, a local session whose Python workers cannot import
    kafkacodec.  mapInArrow runs `sc.pythonExec`: PYSPARK_PYTHON, else "python3" from PATH,
    which from a venv that is not activated is another interpreter.  Clusters are left alone:
    their executors' Python is theirs to choose (docs/spark-and-cli.md)."""
    import os
    import shutil
    import subprocess
    import tempfile

    sc = df.sparkSession.sparkContext
    if not (sc.master or "").startswith("local") or sc.getConf().get("spark.pyspark.python"):
        return
    exe = shutil.which(sc.pythonExec) or sc.pythonExec
    if os.path.abspath(exe) == os.path.abspath(sys.executable):   # not realpath: a venv's python links to its base
        return
    if exe not in _WORKERS_IMPORT:
        try:
            # from outside any checkout, whose unbuilt sources the probe would import instead
            probe = subprocess.run([exe, "-c", "import kafkacodec"], capture_output=True, timeout=60,
                                   cwd=tempfile.gettempdir())
            _WORKERS_IMPORT[exe] = probe.returncode == 0
        except OSError:
            _WORKERS_IMPORT[exe] = False
    if not _WORKERS_IMPORT[exe]:
        from kafkacodec.errors import MisuseError

        chosen = "PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON") else '"python3" on PATH (PYSPARK_PYTHON unset)'
        raise MisuseError(f"Spark's Python workers run {exe}, {chosen}, which cannot import kafkacodec: "
                          f"start the session with PYSPARK_PYTHON={sys.executable} (or activate its venv)")


def _warn(where: str, exc: Exception) -> None:
    print(f"kafkacodec: skipping corrupt data in {where}: {exc}", file=sys.stderr)


def decode_batches(column: str, *, topic_column: str | None = None, partition_column: str | None = None,
                   topic: str = "", partition: int = 0, validate_crc: bool = True,
                   include_headers: bool = True, keep_control: bool = False,
                   max_rows: int = 65536, keep_columns: Sequence[str] = (),
                   mode: str = "FAILFAST") -> ArrowFunction:
    """A function for `df.mapInArrow(fn, schema)` decoding the raw batches in `column`; the
    schema is `keep_columns` (of the input), then kafka_schema(), then `_corrupt_record` string
    in PERMISSIVE mode (see decode())."""
    mode = _check_mode(mode)
    kept = list(keep_columns)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np

        from kafkacodec.arrow import ArrowDecoder
        from kafkacodec.errors import DataError

        decoders: dict[tuple[str, int], ArrowDecoder] = {}

        def decoder(t: str, p: int) -> ArrowDecoder:
            dec = decoders.get((t, p))
            if dec is None:
                dec = decoders[(t, p)] = ArrowDecoder(
                    t or "", p, validate_crc=validate_crc, include_headers=include_headers,
                    keep_control=keep_control, max_rows=max_rows, source=column)
            return dec

        for rb in batches:
            cells = _check_arrow_binary(rb, column)
            topics = rb.column(topic_column).to_pylist() if topic_column else None
            parts = rb.column(partition_column).to_pylist() if partition_column else None

            def emit(out: pa.RecordBatch, i: int, error: str | None = None) -> pa.RecordBatch:
                if kept:
                    source = rb.select(kept).take(pa.array(np.full(out.num_rows, i, np.int64)))
                    out = pa.RecordBatch.from_arrays(source.columns + out.columns,
                                                     names=kept + out.schema.names)
                if mode == "PERMISSIVE":
                    out = out.append_column(CORRUPT_COLUMN, pa.array([error] * out.num_rows, pa.string()))
                return out

            for i in range(rb.num_rows):
                if not cells[i].is_valid:
                    continue
                t = topics[i] if topics else topic
                p = int(parts[i]) if parts else partition
                dec = decoder(t, p)
                data = cells[i].as_buffer()
                pos, end = 0, len(data)
                try:
                    while pos < end:
                        out, new_pos = dec.decode(data, pos, end)
                        if out.num_rows:
                            yield emit(out, i)
                        if dec.trailing_bytes or (new_pos == pos and out.num_rows == 0):
                            break
                        pos = new_pos
                except DataError as exc:
                    if mode == "FAILFAST":
                        raise exc.with_context(f"row {i} of this task's input: ", hint=(
                            "To go on past corrupt cells use mode='DROPMALFORMED' (or 'PERMISSIVE' for "
                            "a row naming each one)"))
                    del decoders[(t, p)]               # its state is mid-entry: start afresh
                    _warn(f"{column}[row {i}]", exc)
                    if mode == "PERMISSIVE":
                        row = [pa.nulls(1, f.type) for f in dec.schema]
                        names = dec.schema.names
                        row[names.index("topic")] = pa.array([t or ""], pa.string())
                        row[names.index("partition")] = pa.array([p], pa.int32())
                        row[names.index("offset")] = pa.array([exc.offset], pa.int64())
                        yield emit(pa.RecordBatch.from_arrays(row, names=names), i, str(exc))

    return run


def decode(df: DataFrame, column: str, *, keep_columns: bool | Sequence[str] = False, **options: Any) -> DataFrame:
    """The decoded records of `df[column]` as a DataFrame (mapInArrow; options as
    decode_batches).  keep_columns: True keeps every input column whose name the decoded
    schema does not use (topic, partition... are decoded), or a list of input columns to keep
    (beside each of the cell's records)."""
    from pyspark.sql.types import StringType, StructField, StructType

    _check_spark_binary(df, column)
    _check_workers(df)
    mode = _check_mode(options.get("mode", "FAILFAST"))
    decoded = StructType.fromDDL(kafka_schema(options.get("include_headers", True)))
    assert isinstance(decoded, StructType)
    if keep_columns is True:
        kept = [c for c in df.columns if c not in decoded.fieldNames()]
    else:
        kept = list(keep_columns or [])
        clash = [c for c in kept if c in decoded.fieldNames() or c not in df.columns]
        if clash:
            raise ValueError(f"keep_columns {clash}: not an input column, or a decoded column's name "
                             "(rename it first)")
    fields = [df.schema[c] for c in kept] + list(decoded.fields)
    if mode == "PERMISSIVE":
        fields.append(StructField(CORRUPT_COLUMN, StringType()))
    return df.mapInArrow(decode_batches(column, keep_columns=kept, **options), StructType(fields))


def validate_batches(column: str) -> ArrowFunction:
    """A function for mapInArrow adding `error` (null when valid) and `records` to each row."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafkacodec.arrow import ArrowDecoder
        from kafkacodec.errors import DataError

        for rb in batches:
            errors: list[str | None] = []
            counts: list[int] = []
            for cell in _check_arrow_binary(rb, column):
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
                        if dec.trailing_bytes or (new_pos == pos and out.num_rows == 0):
                            break
                        pos = new_pos
                except DataError as exc:
                    error = str(exc)
                errors.append(error)
                counts.append(n)
            yield rb.append_column("error", pa.array(errors, pa.string())) \
                    .append_column("records", pa.array(counts, pa.int64()))

    return run


def validate(df: DataFrame, column: str) -> DataFrame:
    """`df` with `error` (null when every entry of the cell is valid) and `records` columns."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    _check_spark_binary(df, column)
    _check_workers(df)
    schema = StructType(list(df.schema.fields) + [StructField("error", StringType()),
                                                  StructField("records", LongType())])
    return df.mapInArrow(validate_batches(column), schema)


def down_convert_batches(column: str, to_magic: int, *, mode: str = "FAILFAST") -> ArrowFunction:
    """A function for mapInArrow replacing `column` by its records converted to `to_magic`
    with kafkacodec.down_convert (Kafka's RecordsUtil.downConvert: control batches vanish,
    zstd cannot go below magic 2: UnsupportedCompressionError, as Kafka answers
    UNSUPPORTED_COMPRESSION_TYPE).  PERMISSIVE adds `_corrupt_record`."""
    mode = _check_mode(mode)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafkacodec import down_convert as convert
        from kafkacodec.errors import DataError

        for rb in batches:
            cells = _check_arrow_binary(rb, column)
            out: list[bytes | None] = []
            errors: list[str | None] = []
            keep: list[bool] = []
            for i, cell in enumerate(cells):
                converted, error = None, None
                if cell.is_valid:
                    try:
                        # pyarrow buffers export signed chars: view them as unsigned bytes (no copy)
                        converted = bytes(convert(memoryview(cell.as_buffer()).cast("B"), to_magic).records.buffer)
                    except DataError as exc:
                        if mode == "FAILFAST":
                            raise exc.with_context(f"{column}[row {i}]: ", hint=(
                                "To go on use mode='DROPMALFORMED' (or 'PERMISSIVE' for an error column)"))
                        _warn(f"{column}[row {i}]", exc)
                        error = str(exc)
                out.append(converted)
                errors.append(error)
                keep.append(error is None or mode == "PERMISSIVE")
            index = rb.schema.get_field_index(column)
            result = rb.set_column(index, pa.field(column, pa.binary()), pa.array(out, pa.binary()))
            if mode == "PERMISSIVE":
                result = result.append_column(CORRUPT_COLUMN, pa.array(errors, pa.string()))
            elif not all(keep):
                result = result.filter(pa.array(keep))
            yield result

    return run


def down_convert(df: DataFrame, column: str, to_magic: int, *, mode: str = "FAILFAST") -> DataFrame:
    """`df` with `column` (raw batches) converted to magic `to_magic` (0 or 1); mode as
    decode() (PERMISSIVE: + `_corrupt_record`, the cell null where conversion failed)."""
    from pyspark.sql.types import StringType, StructField, StructType

    _check_spark_binary(df, column)
    _check_workers(df)
    schema = df.schema
    if _check_mode(mode) == "PERMISSIVE":
        schema = StructType(list(schema.fields) + [StructField(CORRUPT_COLUMN, StringType())])
    return df.mapInArrow(down_convert_batches(column, to_magic, mode=mode), schema)
