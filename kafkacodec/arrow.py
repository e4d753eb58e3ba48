"""Kafka records as Arrow: the columnar decoder, the shallow entry scan and the columnar v2
encoder (needs pyarrow: `pip install kafkacodec[arrow]`).

An ArrowDecoder is one per thread (a second thread's decode() raises ConcurrentUseError while
one runs); scan_entries and encode_v2 are safe to call from several threads at once."""

from kafkacodec._arrow import (HEADERS_TYPE, SCAN_FIELDS, SCHEMA, SCHEMA_NO_HEADERS, ArrowDecoder, encode_v2,
                               scan_entries)

__all__ = ["ArrowDecoder", "scan_entries", "encode_v2", "SCHEMA", "SCHEMA_NO_HEADERS", "HEADERS_TYPE",
           "SCAN_FIELDS"]
