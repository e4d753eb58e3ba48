"""The foundation: CRC helpers, the write buffer, enums and the error hierarchy."""

import os
import zlib

import crc32c as crc32c_pkg
import pytest
from hypothesis import given, strategies as st

import kafkacodec
from kafkacodec import WriteBuffer, crc
from kafkacodec._types import compression_of


def test_crc32c_check_value_and_hardware_path():
    assert crc.crc32c(b"123456789") == 0xE3069283
    assert isinstance(crc.crc32c_is_hardware(), bool)


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 24576, 24581, 100_003])
def test_crc_matches_reference_libraries(size):
    data = os.urandom(size)
    assert crc.crc32c(data) == crc32c_pkg.crc32c(data)
    assert crc.crc32(data) == zlib.crc32(data)


@given(st.binary(max_size=3000), st.integers(0, 3000))
def test_crc_continues_across_splits(data, cut):
    cut = min(cut, len(data))
    assert crc.crc32c(data[cut:], crc.crc32c(data[:cut])) == crc32c_pkg.crc32c(data)
    assert crc.crc32(data[cut:], crc.crc32(data[:cut])) == zlib.crc32(data)


def test_crc_accepts_any_contiguous_buffer():
    import numpy as np

    data = os.urandom(1000)
    for buffer in (bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8)):
        assert crc.crc32c(buffer) == crc32c_pkg.crc32c(data)


def test_write_buffer_refuses_to_grow_under_a_view():
    buffer = WriteBuffer()
    buffer.write(b"abc")
    view = memoryview(buffer)
    assert bytes(view) == b"abc"
    with pytest.raises(BufferError):
        buffer.write(b"x" * 10_000)
    with pytest.raises(BufferError):
        buffer.clear()
    view.release()
    buffer.write(b"x" * 10_000)
    assert len(buffer) == 10_003 and buffer.getvalue()[:3] == b"abc"


def test_compression_names_and_ids():
    assert compression_of("lz4") is kafkacodec.Compression.LZ4
    assert compression_of(" ZSTD ") is kafkacodec.Compression.ZSTD
    assert compression_of(2) is kafkacodec.Compression.SNAPPY
    assert compression_of(None) is kafkacodec.Compression.NONE
    with pytest.raises(kafkacodec.UnsupportedCompressionError, match="brotli"):
        compression_of("brotli")
    with pytest.raises(kafkacodec.UnsupportedCompressionError, match="id 7"):
        compression_of(7)


def test_error_hierarchy_names_position_and_offset():
    error = kafkacodec.InvalidCrcError("bad batch", stored=1, computed=2, position=70, offset=5)
    assert isinstance(error, kafkacodec.CorruptRecordError)
    assert isinstance(error, kafkacodec.KafkaCodecError)
    assert "byte 70" in str(error) and "offset 5" in str(error) and "0x00000001" in str(error)
    assert error.stored == 1 and error.computed == 2


def test_entry_head_is_what_the_first_twelve_bytes_declare():
    import struct

    from kafkacodec._format import entry_head

    data = b"\x00" * 3 + struct.pack(">qi", -5, 2**31 - 1) + b"\x07"
    assert entry_head(data, 3) == (-5, 12 + 2**31 - 1)
    assert entry_head(memoryview(data), 3) == (-5, 12 + 2**31 - 1)
    assert entry_head(data[:14], 3) is None                 # fewer than 12 bytes left
    assert entry_head(struct.pack(">qi", 9, -3)) == (9, 9)  # as stored: a corrupt size is the caller's to judge
    with pytest.raises(ValueError):
        entry_head(data, -1)
