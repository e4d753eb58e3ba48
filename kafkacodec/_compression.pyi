"""Kafka's codec containers: gzip, xerial snappy, Kafka LZ4 frames, zstd (magic 2 only)."""

from typing_extensions import Buffer

from kafkacodec._types import Compression

__all__ = ["DEFAULT_MAX_DECOMPRESSED", "Decompressor", "compress", "decompress", "xxhash32"]

#: The default cap on the decompressed size of one batch records section / wrapper value.
DEFAULT_MAX_DECOMPRESSED: int

_Codec = Compression | int | str

def decompress(codec: _Codec, magic: int, data: Buffer, max_size: int | None = None) -> bytes:
    """Decompress one container; ``max_size`` defaults to DEFAULT_MAX_DECOMPRESSED."""

def compress(codec: _Codec, magic: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress into Kafka's container; ``level`` None is Kafka's default for the codec."""

def xxhash32(data: Buffer, seed: int = 0) -> int:
    """xxHash32 (the LZ4 frame checksum)."""

class Decompressor:
    """Reusable decompression state and output buffer (one per thread)."""

    max_size: int
    def __init__(self, max_size: int | None = None) -> None: ...
    def decompress(self, codec: _Codec, magic: int, data: Buffer) -> memoryview:
        """A read-only view of the internal buffer; it never changes while alive (the next
        call reuses the buffer only once no view of it is left)."""
