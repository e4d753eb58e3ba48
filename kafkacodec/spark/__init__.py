"""kafkacodec on Spark: the "kafkalog" data source, functions for raw batches in a column, and
the segments <-> Parquet job behind `kafkacodec spark convert`.  Needs `kafkacodec[spark]`."""

from kafkacodec.spark.datasource import KafkaLogDataSource, register
from kafkacodec.spark.writer import write_log
from kafkacodec.spark.udf import (decode, decode_batches, down_convert, down_convert_batches, kafka_schema,
                                  validate, validate_batches)

__all__ = ["KafkaLogDataSource", "register", "decode", "decode_batches", "validate",
           "validate_batches", "down_convert", "down_convert_batches", "kafka_schema", "write_log"]
