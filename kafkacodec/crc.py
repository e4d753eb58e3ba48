"""The checksums of Kafka's record formats: CRC-32C (v2 batches, hardware instruction when the
CPU has one) and CRC-32 (v0/v1 messages).  Any C-contiguous buffer is read as its raw bytes;
`crc` continues a running checksum.  Safe to call from several threads at once (the GIL is
released)."""

from kafkacodec._crc import crc32, crc32c, crc32c_is_hardware

__all__ = ["crc32c", "crc32", "crc32c_is_hardware"]
