"""Kafka's codec containers as Kafka writes them into batches: gzip, snappy (xerial framing for
magic 0/1, raw blocks for 2), LZ4 (Kafka's frame; magic 0's broken header checksum) and zstd
(magic 2 only).  `codec` is a Compression (or its name or id), `magic` the record format.

decompress() and Decompressor refuse output past a cap (`max_size`, default
DEFAULT_MAX_DECOMPRESSED) with RecordTooLargeError; every error names the codec, the magic and
the byte position in the compressed data.  A Decompressor is one per thread (a second thread
gets ConcurrentUseError); the functions are safe to call from several threads at once."""

from kafkacodec._compression import DEFAULT_MAX_DECOMPRESSED, Decompressor, compress, decompress, xxhash32

__all__ = ["compress", "decompress", "Decompressor", "DEFAULT_MAX_DECOMPRESSED", "xxhash32"]
