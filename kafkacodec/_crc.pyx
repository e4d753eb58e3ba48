# cython: language_level=3
"""Python access to the CRC helpers: CRC-32C (v2 batches) and CRC-32 (v0/v1 messages)."""

kc_crc_init()


cdef object byte_view(object data):
    """`data` as one dimension of unsigned bytes: any C-contiguous buffer is read as its raw
    bytes (memoryview.cast refuses a non-contiguous one with TypeError)."""
    if type(data) is bytes or type(data) is bytearray:
        return data
    view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def crc32c(data, unsigned int crc=0) -> int:
    """CRC-32C (Castagnoli) of any C-contiguous buffer (its raw bytes), continuing from `crc`."""
    cdef const unsigned char[::1] view = byte_view(data)
    cdef size_t n = view.shape[0]
    with nogil:
        crc = kc_crc32c(crc, &view[0] if n else NULL, n)
    return crc


def crc32(data, unsigned int crc=0) -> int:
    """CRC-32 (IEEE, as zlib.crc32) of any C-contiguous buffer (its raw bytes), continuing from
    `crc`."""
    cdef const unsigned char[::1] view = byte_view(data)
    cdef size_t n = view.shape[0]
    with nogil:
        crc = kc_crc32(crc, &view[0] if n else NULL, n)
    return crc


def crc32c_is_hardware() -> bool:
    """True when CRC-32C runs on the CPU's CRC instruction (SSE4.2 / ARMv8 CRC)."""
    return bool(kc_crc32c_is_hardware())
