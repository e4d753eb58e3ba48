"""Every public entry point that takes bytes takes any C-contiguous buffer as raw bytes (the
project's convention): a memoryview cast to int32 items or to two dimensions gives the result
the same bytes give. One table, an entry per entry point; the entry points that take record
bytes are enumerated from the package, so a new one without an entry fails here."""

from __future__ import annotations

import inspect

import pytest

import kafkacodec
from kafkacodec import MemoryRecordsBuilder, compression, crc, down_convert
from kafkacodec.arrow import ArrowDecoder, scan_entries
from kafkacodec.mirror import RawBatchesBuilder, shallow_records, trim_batch


def _batch() -> bytes:
    """One batch of a length that divides into int32 items and into two equal rows."""
    for pad in range(8):
        builder = MemoryRecordsBuilder()
        for i in range(3):
            builder.append(i, b"key", b"value-%d" % i + b"." * pad)
        data = builder.build()
        if len(data) % 8 == 0:
            return data
    raise AssertionError("no padding gave a multiple of 8")


DATA = _batch()

ENTRY_POINTS = {
    "crc32c": lambda d: crc.crc32c(d),
    "crc32": lambda d: crc.crc32(d),
    "MemoryRecords": lambda d: [r.value for r in kafkacodec.MemoryRecords(d).records()],
    "down_convert": lambda d: bytes(down_convert(d, 1).records.buffer),
    "scan_entries": lambda d: scan_entries(d)["stop"],
    "ArrowDecoder.decode": lambda d: ArrowDecoder().decode(d)[0].num_rows,
    "compress": lambda d: bytes(compression.compress(1, 2, d)),
    "shallow_records": lambda d: [bytes(r.value) for r in shallow_records(d)],
    "trim_batch": lambda d: bytes(trim_batch(d, 1).value),
    "RawBatchesBuilder.append": lambda d: _append(d),
}


def _append(d):
    builder = RawBatchesBuilder(1 << 16)
    builder.append(d)
    return bytes(builder.build())


def as_int32(data: bytes) -> memoryview:
    return memoryview(bytearray(data)).cast("i")


def as_2d(data: bytes) -> memoryview:
    return memoryview(bytearray(data)).cast("B", (2, len(data) // 2))


@pytest.mark.parametrize("shape", [as_int32, as_2d], ids=["int32", "2d"])
@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_an_entry_point_reads_any_contiguous_buffer_as_raw_bytes(name, shape):
    fn = ENTRY_POINTS[name]
    assert fn(shape(DATA)) == fn(DATA)


def _gzip_of_8n() -> bytes:
    """A gzip container (magic 2) whose length divides into int32 items and two equal rows."""
    for pad in range(256):
        gz = bytes(compression.compress(1, 2, DATA + bytes(range(pad))))
        if len(gz) % 8 == 0:
            return gz
    raise AssertionError("no padding gave a multiple of 8")


COMPRESSED_ENTRY_POINTS = {
    "decompress": lambda d: compression.decompress(1, 2, d),
    "xxhash32": lambda d: compression.xxhash32(d),
}


@pytest.mark.parametrize("shape", [as_int32, as_2d], ids=["int32", "2d"])
@pytest.mark.parametrize("name", list(COMPRESSED_ENTRY_POINTS))
def test_a_codec_function_reads_any_contiguous_buffer_as_raw_bytes(name, shape):
    gz = _gzip_of_8n()
    fn = COMPRESSED_ENTRY_POINTS[name]
    assert fn(shape(gz)) == fn(gz)


def test_a_non_contiguous_buffer_is_refused_clearly():
    strided = memoryview(bytearray(DATA))[::2]
    for name in ("crc32c", "crc32", "shallow_records"):
        with pytest.raises((TypeError, ValueError, BufferError)):
            ENTRY_POINTS[name](strided)


def test_the_table_covers_every_public_function_of_the_byte_modules():
    """Public functions of the modules whose entry points take record bytes: each is in the
    table or named here as taking no bytes."""
    takes_no_bytes = {"crc32c_is_hardware", "fetch_to_produce"}
    covered = {name.split(".")[0] for name in [*ENTRY_POINTS, *COMPRESSED_ENTRY_POINTS]}
    from kafkacodec import mirror
    for module in (crc, compression, mirror):
        for name, obj in vars(module).items():
            if name.startswith("_") or not callable(obj) or inspect.isclass(obj):
                continue
            assert name in covered | takes_no_bytes, f"{module.__name__}.{name}: add it above"
