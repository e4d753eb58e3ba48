# cython: language_level=3
"""Kafka's codec containers (spec: compression.md).

gzip is inflated by libdeflate (vendored in csrc/libdeflate, about twice zlib's speed) when
the data is one plain gzip member, else by zlib, which also reports every error (GIL released
in both); snappy blocks are compressed by Google snappy 1.1.10 (vendored in csrc/snappy, the
release snappy-java bundles: Kafka's bytes) and decompressed by cramjam's raw functions, lz4
blocks to cramjam (decompression into our buffer) and lz4.block (compression), zstd frames to
the zstandard package (streaming, into our buffer).  The containers themselves (xerial
framing, Kafka's LZ4 frame, gzip member chaining, zstd frame walking) are parsed here, so
every error names the codec, the magic and the byte position in the compressed data, and no
length field is trusted for an allocation beyond what the data could hold or the cap allows.

Choices (see also the .pxd):
- gzip output: a records section of GZIP_LIBDEFLATE_MIN bytes or more is compressed by
  libdeflate (the `deflate` package's gzip_compress) at Kafka's level: 1.2-1.6x faster and
  7-10% smaller than zlib on producer-sized batches, but not Kafka's bytes.  Smaller sections
  keep zlib, byte-for-byte what Kafka writes on JDK 17 (header 1f8b 0800 00000000 00 ff, raw
  deflate from the same zlib, CRC-32 and ISIZE): there libdeflate is larger (it stores inputs
  up to 51 bytes, up to 27 bytes more, and is 0.2-0.3% larger on average below 1 KiB).
- lz4 blocks come from lz4.block's default mode (liblz4's LZ4_compress_default); Kafka's default
  level uses lz4-java's fastCompressor, another match finder, so the frames are the same format
  but not the same bytes (docs/building.md); other levels use LZ4 HC.
  cramjam's block compressor ignores the HC mode and is no faster, so it is not used.
- zstd frames are the bytes Kafka's producer writes (with the same libzstd): zstd-jni's stream
  with only the level set, fed with the size unknown, closed by a flush and the frame end (see
  zstd()); tests compare with zstd-jni at several levels.
- Codec 0 (none) is not a container: ValueError (callers never pass it).

Why DEFAULT_MAX_DECOMPRESSED is 256 MiB: a batch is at most 2 GiB on the wire (int32 sizes)
and in practice bounded by message.max.bytes / max.partition.fetch.bytes (1 MiB by default,
raised to tens of MB on brokers for large messages).  256 MiB is far above any legitimate
batch (even 10 MB of data compressing 20x) yet bounds what one hostile batch (gzip and zstd
reach ratios of 1000:1 and beyond) can make us allocate.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset
from kafkacodec._crc cimport kc_crc32, kc_crc_init
from kafkacodec._cursor cimport load_u32 as be32, load_le32 as le32
from kafkacodec._writer cimport (Writer, WriteBuffer, ensure, put_bytes, writer_release,
                                 store_u32 as put_be32, store_le32 as put_le32)
from kafkacodec._format cimport (CODEC_NONE, CODEC_GZIP as GZIP, CODEC_SNAPPY as SNAPPY,
                                 CODEC_LZ4 as LZ4, CODEC_ZSTD as ZSTD)

import threading

import cramjam
import deflate as libdeflate_py      # `deflate` is zlib's function here
import lz4.block
import zstandard

from kafkacodec._types import compression_of
from kafkacodec.errors import (
    ConcurrentUseError,
    CorruptRecordError,
    InvalidCrcError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
)

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char* mem, Py_ssize_t size, int flags)
    enum:
        PyBUF_READ
        PyBUF_WRITE

cdef extern from "kc_xxhash32.h" nogil:
    uint32_t kc_xxhash32(const unsigned char* p, size_t n, uint32_t seed)

cdef extern from "libdeflate.h" nogil:
    struct libdeflate_decompressor:
        pass
    enum libdeflate_result:
        LIBDEFLATE_SUCCESS
    libdeflate_decompressor* libdeflate_alloc_decompressor()
    void libdeflate_free_decompressor(libdeflate_decompressor* d)
    libdeflate_result libdeflate_deflate_decompress_ex(
        libdeflate_decompressor* d, const void* data, size_t size, void* out, size_t out_size,
        size_t* actual_in, size_t* actual_out)

cdef extern from "snappy-c.h" nogil:
    ctypedef enum snappy_status:
        SNAPPY_OK
    snappy_status snappy_compress(const char* input, size_t input_length, char* compressed,
                                  size_t* compressed_length)
    size_t snappy_max_compressed_length(size_t source_length)

cdef extern from "zlib.h" nogil:
    ctypedef struct z_stream:
        unsigned char* next_in
        unsigned int avail_in
        unsigned char* next_out
        unsigned int avail_out
        const char* msg
    enum:
        Z_OK
        Z_STREAM_END
        Z_NEED_DICT
        Z_BUF_ERROR
        Z_MEM_ERROR
        Z_NO_FLUSH
        Z_FINISH
        Z_DEFLATED
        Z_DEFAULT_STRATEGY
    int inflateInit2(z_stream* strm, int window_bits)
    int inflate(z_stream* strm, int flush)
    int inflateReset(z_stream* strm)
    int inflateEnd(z_stream* strm)
    int deflateInit2(z_stream* strm, int level, int method, int window_bits, int mem_level,
                     int strategy)
    int deflate(z_stream* strm, int flush)
    int deflateEnd(z_stream* strm)
    unsigned long deflateBound(z_stream* strm, unsigned long source_len)
    unsigned long zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int n)


DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024
globals()["DEFAULT_MAX_DECOMPRESSED"] = DEFAULT_MAX_DECOMPRESSED

cdef enum:
    # Kafka batches carry int32 sizes; nothing larger is ever compressed.
    MAX_INPUT = 0x7FFFFFFF
    # Feed zlib at most this much per call (its counters are 32-bit).
    ZLIB_STEP = 1 << 30
    SNAPPY_BLOCK = 32 * 1024
    LZ4_BLOCK = 64 * 1024
    LZ4_FRAME_MAGIC = 0x184D2204

cdef uint32_t LZ4_RAW_BLOCK = 0x80000000U      # size word flag: block stored uncompressed
cdef uint32_t ZSTD_FRAME_MAGIC = 0xFD2FB528U

cdef const char* CODEC_NAMES[5]
CODEC_NAMES[:] = [b"none", b"gzip", b"snappy", b"lz4", b"zstd"]

# Java's GZIPOutputStream header: no flags, mtime 0, XFL 0, OS 0xFF ("unknown"; JDK 16+,
# JDK-8244706 changed it from 0 — Kafka on JDK 17 writes 0xFF).  Readers ignore this byte.
cdef unsigned char GZIP_HEADER[10]
GZIP_HEADER[:] = [0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF]
cdef unsigned char SNAPPY_HEADER[16]
SNAPPY_HEADER[:] = [0x82, 0x53, 0x4E, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]
# Kafka's LZ4 frame header: magic, FLG 0x60, BD 0x40, HC (filled in below per magic).
cdef unsigned char LZ4_HEADER[7]
LZ4_HEADER[:] = [0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x00]
# HC for magic 1/2: xxHash32 of FLG, BD (0x82).  Magic 0 (KAFKA-3160): also over the magic (0x1A).
cdef unsigned char LZ4_HC = <unsigned char>((kc_xxhash32(LZ4_HEADER + 4, 2, 0) >> 8) & 0xFF)
cdef unsigned char LZ4_HC_MAGIC0 = <unsigned char>((kc_xxhash32(LZ4_HEADER, 6, 0) >> 8) & 0xFF)
cdef unsigned char EMPTY[1]
EMPTY[0] = 0

_snappy_decompress_raw_into = cramjam.snappy.decompress_raw_into
_lz4_decompress_block_into = cramjam.lz4.decompress_block_into
_lz4_decompress_block = cramjam.lz4.decompress_block
_lz4_compress_block = lz4.block.compress
_CramjamError = cramjam.DecompressionError
_ZstdError = zstandard.ZstdError


# --- small helpers ------------------------------------------------------------------------

cdef inline const unsigned char* buffer_start(const Py_buffer* view) noexcept:
    return <const unsigned char*>view.buf if view.buf != NULL else EMPTY


cdef inline object view_of(const unsigned char* p, Py_ssize_t n, int flags):
    """A memoryview over raw memory, no copy (the memory must outlive the view)."""
    return PyMemoryView_FromMemory(<char*>(p if p != NULL else EMPTY), n, flags)


cdef int check_codec(int codec, int magic) except -1:
    if codec == CODEC_NONE:
        raise ValueError("compression none (0) is not a container: there is nothing to "
                         "compress or decompress")
    if codec < 0 or codec > ZSTD:
        raise UnsupportedCompressionError(f"unknown compression type id {codec}")
    if magic < 0 or magic > 2:
        raise UnsupportedVersionError(f"unsupported magic {magic}: Kafka record formats have "
                                      "magic 0, 1 or 2")
    if codec == ZSTD and magic < 2:
        raise UnsupportedCompressionError(
            f"zstd compression needs magic 2 (v2 batches, Produce v7+ / Fetch v10+), "
            f"got magic {magic}")
    return 0


cdef int corrupt(int codec, int magic, str what, Py_ssize_t position) except -1:
    raise CorruptRecordError(f"{CODEC_NAMES[codec].decode()} data (magic {magic}): {what}",
                             position=position if position >= 0 else None)


cdef int truncated(int codec, int magic, str what, Py_ssize_t wanted, Py_ssize_t position,
                   Py_ssize_t size) except -1:
    return corrupt(codec, magic, f"truncated {what}: needs {wanted} bytes, "
                   f"{max(size - position, 0)} left", position)


cdef int too_large(int codec, Py_ssize_t limit) except -1:
    raise RecordTooLargeError(
        f"{CODEC_NAMES[codec].decode()} data decompresses to more than the cap of {limit} "
        f"bytes; if such batches are legitimate, raise the cap with "
        f"Decompressor(max_size=...) or decompress(..., max_size=...)")


cdef int check_input_size(Py_ssize_t size) except -1:
    if size < 0 or size > MAX_INPUT:
        raise RecordTooLargeError(f"{size} bytes to compress: Kafka batches are at most "
                                  f"{MAX_INPUT} bytes (int32 sizes)")
    return 0


# The codec argument of the Python functions: a dict hit for the common spellings (an enum
# member, its id, a lower/upper-case name), compression_of() for anything else.
_CODEC_IDS = {}
for _name, _id in (("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)):
    _CODEC_IDS[_name] = _CODEC_IDS[_name.upper()] = _CODEC_IDS[_id] = _id


cdef inline int codec_id(codec) except -1:
    found = _CODEC_IDS.get(codec)
    if found is not None:
        return found
    return compression_of(codec)


# --- output buffers -----------------------------------------------------------------------

cdef int out_grow(Out* out, Py_ssize_t needed) except -1:
    """Make room for `needed` bytes in total (callers check needed <= out.limit first)."""
    cdef Py_ssize_t capacity = out.capacity * 2
    cdef unsigned char* grown
    cdef _Chunk chunk
    if capacity < needed:
        capacity = needed
    if capacity < 4096:
        capacity = 4096
    if capacity > out.limit:
        capacity = out.limit
    if capacity < needed:
        raise AssertionError("output buffer growth past the cap")
    chunk = <_Chunk>out.owner
    grown = <unsigned char*>realloc(chunk.buf, capacity if capacity > 0 else 1)
    if grown == NULL:
        raise MemoryError(f"cannot grow the decompression buffer to {capacity} bytes")
    chunk.buf = grown
    chunk.capacity = capacity
    out.p = grown
    out.capacity = capacity
    return 0


cdef inline int out_reserve(Out* out, Py_ssize_t n) except -1:
    """Room for n more bytes (n <= limit - length, checked by the caller)."""
    if out.capacity - out.length < n:
        return out_grow(out, out.length + n)
    return 0


cdef class _Chunk:
    """A decompression output buffer exported read-only to Python (see Decompressor)."""

    def __dealloc__(self):
        free(self.buf)
        self.buf = NULL

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.buf if self.buf != NULL else EMPTY, self.length, 1,
                          flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.unpin()

    def __len__(self):
        return self.length

    cdef void unpin(self) noexcept:
        self.exports -= 1
        self.shrink()

    cdef void shrink(self) noexcept:
        if self.exports == 0 and self.capacity > RETAINED_CHUNK:
            free(self.buf)
            self.buf = NULL
            self.capacity = 0
            self.length = 0


# --- per-thread state for the module-level functions --------------------------------------

kc_crc_init()      # kc_crc.h keeps its dispatch state per extension module

_local = threading.local()


cdef Decompressor thread_decompressor():
    try:
        return <Decompressor>_local.decompressor
    except AttributeError:
        _local.decompressor = Decompressor()
        return <Decompressor>_local.decompressor


cdef object zstd_compressor(int level):
    cdef dict compressors
    try:
        compressors = _local.zstd_compressors
    except AttributeError:
        compressors = _local.zstd_compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        # zstd-jni's defaults (libzstd's): content size flag on, no checksum, no dictionary.
        compressor = compressors[level] = zstandard.ZstdCompressor(
            level=level, write_content_size=True, write_checksum=False, write_dict_id=False)
    return compressor


# --- Decompressor -------------------------------------------------------------------------

cdef class Decompressor:
    """Decompressor(max_size=None)

    Decompress Kafka codec containers into one reusable buffer.  ``max_size`` (None:
    DEFAULT_MAX_DECOMPRESSED) caps the decompressed size of one call (RecordTooLargeError
    beyond it).  Not thread-safe: use one per thread; a call made while another runs (in
    another thread, the GIL being released while it decompresses) raises ConcurrentUseError.
    The buffer is kept for reuse up to 8 MiB: a bigger one is freed once its views are
    released, as is the zstd context after a frame that inflated beyond that.
    """

    def __cinit__(self, max_size=None):
        cdef Py_ssize_t cap = DEFAULT_MAX_DECOMPRESSED if max_size is None else max_size
        if cap < 0:
            raise ValueError(f"max_size must be >= 0, got {cap}")
        self.max_size = cap
        self._chunk = _Chunk()

    def __dealloc__(self):
        if self._libdeflate != NULL:
            libdeflate_free_decompressor(<libdeflate_decompressor*>self._libdeflate)
            self._libdeflate = NULL
        if self._inflate != NULL:
            inflateEnd(<z_stream*>self._inflate)
            free(self._inflate)
            self._inflate = NULL

    def decompress(self, codec, int magic, data) -> memoryview:
        """Decompress into the internal buffer and return a read-only memoryview of it.

        The buffer is reused by the next call unless a view of it is still alive (then the
        next call uses a fresh buffer), so a returned view never changes nor dangles; drop
        (or ``release()``) views promptly to keep the reuse.
        """
        cdef int codec_number = codec_id(codec)
        cdef Py_buffer src
        cdef Py_ssize_t size
        self._enter()           # until the view is made: the chunk is not reused meanwhile
        try:
            PyObject_GetBuffer(data, &src, PyBUF_SIMPLE)
            try:
                self._decompress_into(codec_number, magic, buffer_start(&src), src.len, &size)
            finally:
                PyBuffer_Release(&src)
            return memoryview(self._chunk)
        finally:
            self._busy = False

    cdef _Chunk _take_chunk(self):
        if self._chunk.exports > 0:
            self._chunk = _Chunk()
        return self._chunk

    cdef int _enter(self) except -1:
        if self._busy:
            raise ConcurrentUseError("Decompressor is in use by another thread: use one per "
                                     "thread")
        self._busy = True
        return 0

    cdef const unsigned char* decompress_into(self, int codec, int magic, const unsigned char* data,
                                              Py_ssize_t size, Py_ssize_t* out_size) except NULL:
        self._enter()
        try:
            return self._decompress_into(codec, magic, data, size, out_size)
        finally:
            self._busy = False

    cdef const unsigned char* _decompress_into(self, int codec, int magic,
                                               const unsigned char* data, Py_ssize_t size,
                                               Py_ssize_t* out_size) except NULL:
        cdef Out out
        cdef _Chunk chunk
        if self.max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {self.max_size}")
        chunk = self._take_chunk()
        chunk.length = 0
        out.p = chunk.buf
        out.length = 0
        # A buffer grown by an earlier call with a higher cap is only used up to this cap.
        out.capacity = min(chunk.capacity, self.max_size)
        out.limit = self.max_size
        out.owner = <PyObject*>chunk
        try:
            self._run(codec, magic, data, size, &out)
        finally:
            if codec == ZSTD and out.length > RETAINED_CHUNK:
                self._zstd = None        # its window buffer grew with the frame: let it go
        chunk.length = out.length
        out_size[0] = out.length
        return chunk.buf if chunk.buf != NULL else EMPTY

    cdef int _run(self, int codec, int magic, const unsigned char* data, Py_ssize_t size,
                  Out* out) except -1:
        check_codec(codec, magic)
        if size < 0:
            raise ValueError(f"negative size {size}")
        if codec == GZIP:
            return gunzip(self, magic, data, size, out)
        if codec == SNAPPY:
            return unsnappy(magic, data, size, out)
        if codec == LZ4:
            return unlz4(magic, data, size, out)
        return unzstd(self, data, size, out)


cdef object decompress(int codec, int magic, const unsigned char* data, Py_ssize_t size,
                       Py_ssize_t max_size):
    # Decompress into the thread's warm buffer, then copy once into an exact-size bytes:
    # measured faster than growing a fresh bytes object (over-allocation and page faults
    # on new memory cost more than one memcpy from cache-warm memory).
    cdef Decompressor state = thread_decompressor()
    cdef Py_ssize_t n
    cdef const unsigned char* p
    if max_size < 0:
        raise ValueError(f"max_size must be >= 0, got {max_size}")
    state.max_size = max_size
    try:
        p = state.decompress_into(codec, magic, data, size, &n)
        return PyBytes_FromStringAndSize(<const char*>p, n)
    finally:
        state._chunk.shrink()               # do not pin a huge buffer to the thread


# --- gzip ---------------------------------------------------------------------------------

cdef enum:
    GZIP_FHCRC = 0x02
    GZIP_FEXTRA = 0x04
    GZIP_FNAME = 0x08
    GZIP_FCOMMENT = 0x10


cdef inline Py_ssize_t past_zero(const unsigned char* data, Py_ssize_t pos,
                                  Py_ssize_t size) noexcept nogil:
    # after a zero-terminated header field (FNAME, FCOMMENT); past `size` when unterminated
    while pos < size and data[pos] != 0:
        pos += 1
    return pos + 1


cdef Py_ssize_t gzip_header_size(const unsigned char* data, Py_ssize_t size) noexcept nogil:
    """Bytes taken by the RFC 1952 member header at data, or -1 when it is not one the fast
    path takes (not gzip/deflate, reserved flag bits, a header CRC, truncated)."""
    cdef Py_ssize_t pos = 10
    cdef int flags
    if size < 18 or data[0] != 0x1F or data[1] != 0x8B or data[2] != 8:
        return -1
    flags = data[3]
    if flags & ~(GZIP_FEXTRA | GZIP_FNAME | GZIP_FCOMMENT):
        return -1        # FHCRC (zlib checks it) or reserved bits (zlib rejects them)
    if flags & GZIP_FEXTRA:
        pos += 2 + (data[10] | (data[11] << 8))
    if flags & GZIP_FNAME:
        pos = past_zero(data, pos, size)
    if flags & GZIP_FCOMMENT:
        pos = past_zero(data, pos, size)
    return pos if pos <= size - 8 else -1


cdef bint inflate_lone_member(Decompressor state, const unsigned char* data, Py_ssize_t size,
                              Out* out) except -1:
    """libdeflate's inflate for the common input: one gzip member filling `data`, whose
    ISIZE is plausible and within the cap.  The member must end exactly at the 8-byte
    trailer and match its CRC-32 and ISIZE.  Returns False with nothing written for any
    other input, which gunzip then reads with zlib (and its error messages)."""
    cdef Py_ssize_t header = gzip_header_size(data, size)
    cdef Py_ssize_t body, isize
    cdef size_t used_in = 0, used_out = 0
    cdef libdeflate_result result
    cdef libdeflate_decompressor* decompressor
    if header < 0:
        return False
    body = size - header - 8
    isize = le32(data + size - 4)
    # An empty member, more than deflate's best ratio (1032:1) allows, or past the cap.
    if isize == 0 or isize > body * 1032 or isize > out.limit - out.length:
        return False
    if state._libdeflate == NULL:
        state._libdeflate = libdeflate_alloc_decompressor()
        if state._libdeflate == NULL:
            raise MemoryError("cannot allocate a libdeflate decompressor")
    decompressor = <libdeflate_decompressor*>state._libdeflate
    out_reserve(out, isize)
    with nogil:
        result = libdeflate_deflate_decompress_ex(decompressor, data + header, body,
                                                  out.p + out.length, isize, &used_in, &used_out)
        if (result != LIBDEFLATE_SUCCESS or <Py_ssize_t>used_in != body
                or <Py_ssize_t>used_out != isize
                or kc_crc32(0, out.p + out.length, isize) != le32(data + size - 8)):
            return False
    out.length += isize
    return True


cdef int gunzip(Decompressor state, int magic, const unsigned char* data, Py_ssize_t size,
                Out* out) except -1:
    cdef z_stream* zs
    if inflate_lone_member(state, data, size, out):
        return 0
    zs = <z_stream*>state._inflate
    cdef int ret
    cdef unsigned char probe[1]
    cdef bint probing
    cdef Py_ssize_t consumed, hint, fed
    if zs == NULL:
        zs = <z_stream*>calloc(1, sizeof(z_stream))
        if zs == NULL:
            raise MemoryError()
        if inflateInit2(zs, 16 + 15) != Z_OK:      # gzip wrapper only, 32 KiB window
            free(zs)
            raise MemoryError("zlib inflateInit2 failed")
        state._inflate = zs
    else:
        inflateReset(zs)
    # First guess at the output size: the last member's ISIZE, never more than deflate's
    # best ratio (1032:1) lets the data hold, never more than the cap.
    if size >= 18:
        hint = le32(data + size - 4)
        if hint > size * 1032:
            hint = size * 1032
    else:
        hint = 64
    if hint > out.limit - out.length:
        hint = out.limit - out.length
    out_reserve(out, hint)
    zs.next_in = <unsigned char*>data
    fed = size if size < ZLIB_STEP else ZLIB_STEP
    zs.avail_in = <unsigned int>fed
    while True:
        if out.length == out.capacity and out.capacity < out.limit:
            out_grow(out, out.length + 1)
        probing = out.length == out.capacity
        if probing:
            # At the cap: one more byte of output means the data is over the limit.
            zs.next_out = probe
            zs.avail_out = 1
        else:
            zs.next_out = out.p + out.length
            zs.avail_out = <unsigned int>min(out.capacity - out.length, <Py_ssize_t>ZLIB_STEP)
        with nogil:
            ret = inflate(zs, Z_NO_FLUSH)
        if probing:
            if zs.avail_out == 0:
                return too_large(GZIP, out.limit)
        else:
            out.length = zs.next_out - out.p
        consumed = zs.next_in - data
        if zs.avail_in == 0 and fed < size:
            zs.avail_in = <unsigned int>min(size - fed, <Py_ssize_t>ZLIB_STEP)
            fed += zs.avail_in
        if ret == Z_STREAM_END:
            # Java's GZIPInputStream reads further members back to back; bytes after a member
            # that are not a gzip header are ignored.
            if (size - consumed >= 10 and data[consumed] == 0x1F and data[consumed + 1] == 0x8B
                    and data[consumed + 2] == 0x08):
                inflateReset(zs)
                continue
            return 0
        if ret == Z_OK:
            continue
        if ret == Z_BUF_ERROR:
            if zs.avail_in == 0:
                return corrupt(GZIP, magic, "truncated data: the stream ends inside a gzip member "
                               "(unexpected end of ZLIB input)", size)
            continue
        if ret == Z_MEM_ERROR:
            raise MemoryError("zlib inflate is out of memory")
        return corrupt(GZIP, magic, f"invalid gzip data: "
                       f"{(zs.msg if zs.msg != NULL else b'inflate error').decode()}", consumed)


cdef enum:
    # Below this many input bytes zlib's output is the smaller (see the module docstring).
    GZIP_LIBDEFLATE_MIN = 1024


cdef Py_ssize_t gzip(Writer* w, const unsigned char* data, Py_ssize_t size, int level) except -1:
    cdef z_stream zs
    cdef bytearray member
    cdef unsigned char* p
    cdef Py_ssize_t bound, n
    cdef int ret
    cdef uint32_t crc
    if level == LEVEL_DEFAULT:
        level = 6
    elif level < 1 or level > 9:
        raise ValueError(f"gzip level must be 1..9 (or -1 for the default 6), got {level}")
    check_input_size(size)
    if size >= GZIP_LIBDEFLATE_MIN:
        # One whole gzip member (its header's XFL byte varies with the level; GIL released
        # inside), copied once into w: the package has no into-buffer call.
        member = libdeflate_py.gzip_compress(view_of(data, size, PyBUF_READ), level)
        put_bytes(w, <const unsigned char*>PyByteArray_AS_STRING(member),
                  PyByteArray_GET_SIZE(member))
        return PyByteArray_GET_SIZE(member)
    memset(&zs, 0, sizeof(z_stream))
    # Raw deflate (no zlib/gzip wrapper): the header and trailer are written here, exactly
    # as Java's GZIPOutputStream writes them.
    if deflateInit2(&zs, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK:
        raise MemoryError("zlib deflateInit2 failed")
    try:
        bound = <Py_ssize_t>deflateBound(&zs, <unsigned long>size)
        ensure(w, 10 + bound + 8)
        p = w.buf + w.length
        memcpy(p, GZIP_HEADER, 10)
        zs.next_in = <unsigned char*>(data if data != NULL else EMPTY)
        zs.avail_in = <unsigned int>size
        zs.next_out = p + 10
        zs.avail_out = <unsigned int>bound
        # The GIL stays held (inputs under GZIP_LIBDEFLATE_MIN: microseconds): w may be a
        # caller's WriteBuffer, which another thread could append to (and move) meanwhile.
        ret = deflate(&zs, Z_FINISH)
        crc = <uint32_t>zlib_crc32(0, data if data != NULL else EMPTY, <unsigned int>size)
        if ret != Z_STREAM_END:
            raise MemoryError(f"zlib deflate failed ({ret})")
        n = zs.next_out - p
        put_le32(p + n, crc)
        put_le32(p + n + 4, <uint32_t>size)
    finally:
        deflateEnd(&zs)
    w.length += n + 8
    return n + 8


# --- snappy (xerial framing) --------------------------------------------------------------

cdef int unsnappy(int magic, const unsigned char* data, Py_ssize_t size, Out* out) except -1:
    cdef Py_ssize_t pos = 16
    cdef int32_t length
    if size == 0:
        return corrupt(SNAPPY, magic, "empty input (snappy-java: cannot decompress an empty "
                       "stream)", 0)
    if size < 16 or memcmp(data, SNAPPY_HEADER, 8) != 0:
        # snappy-java: no stream header -> the whole input is one raw snappy block.
        return snappy_block(magic, data, 0, size, out)
    while size - pos >= 4:          # up to 3 trailing bytes are ignored
        if memcmp(data + pos, SNAPPY_HEADER, 4) == 0:
            # A concatenated stream: a new 16-byte header follows.
            if size - pos < 16:
                return truncated(SNAPPY, magic, "header of a concatenated stream", 16, pos, size)
            if memcmp(data + pos, SNAPPY_HEADER, 8) != 0:
                return 0            # snappy-java treats an invalid header as the end
            if <int32_t>be32(data + pos + 8) < 1:
                return corrupt(SNAPPY, magic, f"incompatible stream version "
                               f"{<int32_t>be32(data + pos + 8)}", pos + 8)
            pos += 16
            continue
        length = <int32_t>be32(data + pos)
        if length < 0:
            return corrupt(SNAPPY, magic, f"negative block length {length}", pos)
        pos += 4
        if length > size - pos:
            return truncated(SNAPPY, magic, "block", length, pos, size)
        snappy_block(magic, data, pos, length, out)
        pos += length
    return 0


cdef int snappy_block(int magic, const unsigned char* data, Py_ssize_t pos, Py_ssize_t n,
                      Out* out) except -1:
    """Decompress one raw snappy block data[pos:pos+n] onto the output."""
    cdef uint64_t declared = 0
    cdef int i = 0
    cdef unsigned char byte
    # The block's own varint: its uncompressed length (at most 5 bytes, 32 bits).
    while True:
        if i >= n or i >= 5:
            return corrupt(SNAPPY, magic, "invalid uncompressed-length varint of a block", pos)
        byte = data[pos + i]
        declared |= <uint64_t>(byte & 0x7F) << (7 * i)
        i += 1
        if not (byte & 0x80):
            break
    if declared > 0xFFFFFFFFULL:
        return corrupt(SNAPPY, magic, "invalid uncompressed-length varint of a block", pos)
    # A 3-byte copy element yields at most 64 bytes: anything beyond is a lie.
    if <int64_t>declared > (<int64_t>n * 64) // 3 + 64:
        return corrupt(SNAPPY, magic, f"block of {n} bytes declares {declared} uncompressed "
                       "bytes, more than it can hold", pos)
    if <int64_t>declared > out.limit - out.length:
        return too_large(SNAPPY, out.limit)
    if declared == 0:
        if n != i:
            return corrupt(SNAPPY, magic, "empty block followed by data", pos)
        return 0
    out_reserve(out, <Py_ssize_t>declared)
    try:
        written = _snappy_decompress_raw_into(
            view_of(data + pos, n, PyBUF_READ),
            view_of(out.p + out.length, <Py_ssize_t>declared, PyBUF_WRITE))
    except _CramjamError as e:
        return corrupt(SNAPPY, magic, f"invalid snappy block ({e})", pos)
    if written != declared:
        return corrupt(SNAPPY, magic, f"block decompressed to {written} bytes, its header "
                       f"says {declared}", pos)
    out.length += <Py_ssize_t>declared
    return 0


cdef Py_ssize_t snappy(Writer* w, const unsigned char* data, Py_ssize_t size) except -1:
    """snappy-java's SnappyOutputStream as Kafka opens it (default 32 KiB blocks): the 16-byte
    xerial header, then per block its compressed size (big-endian int32) and the raw snappy
    block, from Google snappy 1.1.10 (csrc/snappy), the release snappy-java bundles: Kafka's
    bytes exactly.  The GIL stays held: w may be a caller's WriteBuffer, which relies on it."""
    cdef Py_ssize_t blocks = (size + SNAPPY_BLOCK - 1) // SNAPPY_BLOCK
    cdef Py_ssize_t pos = 16, done = 0, chunk
    cdef size_t written
    cdef unsigned char* p
    cdef snappy_status status
    check_input_size(size)
    ensure(w, 16 + blocks * (4 + <Py_ssize_t>snappy_max_compressed_length(SNAPPY_BLOCK)))
    p = w.buf + w.length
    memcpy(p, SNAPPY_HEADER, 16)
    while done < size:
        chunk = min(size - done, <Py_ssize_t>SNAPPY_BLOCK)
        written = snappy_max_compressed_length(<size_t>chunk)
        status = snappy_compress(<const char*>data + done, <size_t>chunk, <char*>p + pos + 4,
                                 &written)
        if status != SNAPPY_OK:             # only a too small output buffer: a bug here
            raise SystemError(f"snappy_compress failed ({<int>status})")
        put_be32(p + pos, <uint32_t>written)
        pos += 4 + <Py_ssize_t>written
        done += chunk
    w.length += pos
    return pos


# --- lz4 (Kafka's frame) ------------------------------------------------------------------

cdef int unlz4(int magic, const unsigned char* data, Py_ssize_t size, Out* out) except -1:
    cdef Py_ssize_t pos, block_max, n, window
    cdef bint capped
    cdef unsigned char flg, bd, code, expected
    cdef uint32_t word, stored, computed
    if size < 6:
        return truncated(LZ4, magic, "frame header (stream ended prematurely)", 6, 0, size)
    if le32(data) != LZ4_FRAME_MAGIC:
        return corrupt(LZ4, magic, f"invalid frame magic {le32(data):#010x} (expected "
                       f"{LZ4_FRAME_MAGIC:#010x})", 0)
    flg = data[4]
    bd = data[5]
    if flg >> 6 != 1:
        return corrupt(LZ4, magic, f"unsupported frame version {flg >> 6} in FLG {flg:#04x}", 4)
    if flg & 0x03:
        return corrupt(LZ4, magic, f"FLG {flg:#04x} has the dictionary id or reserved bit "
                       "set (Kafka requires both to be 0)", 4)
    if not flg & 0x20:
        return corrupt(LZ4, magic, f"FLG {flg:#04x}: dependent (linked) blocks are not "
                       "supported by Kafka; write independent blocks", 4)
    code = (bd >> 4) & 0x07
    if bd & 0x8F or code < 4:
        return corrupt(LZ4, magic, f"invalid BD {bd:#04x} (block max size code must be 4..7, "
                       "reserved bits 0)", 5)
    block_max = 1 << (2 * code + 8)
    pos = 6
    if flg & 0x08:                  # content size: skipped, not checked (as Kafka)
        if size - pos < 8:
            return truncated(LZ4, magic, "content size", 8, pos, size)
        pos += 8
    if size - pos < 1:
        return truncated(LZ4, magic, "frame header checksum", 1, pos, size)
    if magic > 0:
        # Magic 0 frames may carry the broken HC of KAFKA-3160; Kafka skips it unchecked.
        expected = <unsigned char>((kc_xxhash32(data + 4, pos - 4, 0) >> 8) & 0xFF)
        if data[pos] != expected:
            return corrupt(LZ4, magic, f"frame descriptor corrupted: header checksum "
                           f"{data[pos]:#04x} != {expected:#04x}", pos)
    pos += 1
    while True:
        if size - pos < 4:
            return truncated(LZ4, magic, "block size (stream ended prematurely, no EndMark)",
                             4, pos, size)
        word = le32(data + pos)
        n = word & ~LZ4_RAW_BLOCK
        if n == 0:                  # EndMark; anything after the frame is ignored
            if flg & 0x04:          # content checksum: consumed, not verified (as Kafka)
                if size - pos - 4 < 4:
                    return truncated(LZ4, magic, "content checksum", 4, pos + 4, size)
            return 0
        if n > block_max:
            return corrupt(LZ4, magic, f"block size {n} exceeds the frame's max block size "
                           f"{block_max}", pos)
        pos += 4
        if size - pos < n:
            return truncated(LZ4, magic, "block (stream ended prematurely)", n, pos, size)
        if flg & 0x10:
            if size - pos - n < 4:
                return truncated(LZ4, magic, "block checksum", 4, pos + n, size)
            with nogil:
                computed = kc_xxhash32(data + pos, <size_t>n, 0)
            stored = le32(data + pos + n)
            if stored != computed:
                raise InvalidCrcError(f"lz4 data (magic {magic}): block checksum (xxHash32) "
                                      f"mismatch", stored=stored, computed=computed,
                                      position=pos + n)
        if word & LZ4_RAW_BLOCK:
            if n > out.limit - out.length:
                return too_large(LZ4, out.limit)
            out_reserve(out, n)
            with nogil:
                memcpy(out.p + out.length, data + pos, n)
            out.length += n
        else:
            # An LZ4 block expands at most 255x (one length byte = 255 more match bytes).
            window = min(block_max, n * 255)
            capped = window > out.limit - out.length
            if capped:
                window = out.limit - out.length
            out_reserve(out, window)
            try:
                # output_len always: without it cramjam may read the block's first 4 bytes as
                # a size prefix (a block starting with a token and three zero bytes was).
                written = _lz4_decompress_block_into(
                    view_of(data + pos, n, PyBUF_READ),
                    view_of(out.p + out.length, window, PyBUF_WRITE), output_len=window)
            except _CramjamError:
                if capped and lz4_block_fits(data + pos, n, block_max):
                    return too_large(LZ4, out.limit)
                return corrupt(LZ4, magic, f"invalid lz4 block of {n} bytes", pos)
            out.length += <Py_ssize_t>written
        pos += n + (4 if flg & 0x10 else 0)


cdef bint lz4_block_fits(const unsigned char* block, Py_ssize_t n, Py_ssize_t block_max):
    """Whether a block that failed against a window cut by the cap is valid data (so the
    failure means the cap, not corruption).  Only runs on that error path."""
    try:
        _lz4_decompress_block(view_of(block, n, PyBUF_READ), output_len=block_max)
    except _CramjamError:
        return False
    return True


cdef Py_ssize_t lz4_frame(Writer* w, int magic, const unsigned char* data, Py_ssize_t size,
                          int level) except -1:
    cdef Py_ssize_t blocks = (size + LZ4_BLOCK - 1) // LZ4_BLOCK
    cdef Py_ssize_t pos = 7, done = 0, chunk, n
    cdef unsigned char* p
    cdef bytes block
    cdef bint high = False
    if level != LEVEL_DEFAULT and level != 9:
        if level < 1 or level > 17:
            raise ValueError(f"lz4 level must be 1..17 (or -1 for Kafka's default 9, the fast "
                             f"compressor), got {level}")
        high = True
    check_input_size(size)
    # A block is stored raw when compression does not shrink it, so this bound is exact.
    ensure(w, 7 + 4 * blocks + size + 4)
    p = w.buf + w.length
    memcpy(p, LZ4_HEADER, 6)
    p[6] = LZ4_HC_MAGIC0 if magic == 0 else LZ4_HC
    while done < size:
        chunk = min(size - done, <Py_ssize_t>LZ4_BLOCK)
        src = view_of(data + done, chunk, PyBUF_READ)
        # lz4.block returns a new bytes per block (copied below): cramjam's block compressor
        # writes into a buffer but emits different (valid) bytes than Kafka's lz4-java
        if high:
            block = _lz4_compress_block(src, mode="high_compression", compression=level,
                                        store_size=False)
        else:
            block = _lz4_compress_block(src, store_size=False)
        n = len(block)
        if n < chunk:
            put_le32(p + pos, <uint32_t>n)
            memcpy(p + pos + 4, <const char*>block, n)
        else:
            n = chunk
            put_le32(p + pos, <uint32_t>(LZ4_RAW_BLOCK | n))
            memcpy(p + pos + 4, data + done, n)
        pos += 4 + n
        done += chunk
    put_le32(p + pos, 0)        # EndMark, no content checksum
    w.length += pos + 4
    return pos + 4


# --- zstd ---------------------------------------------------------------------------------

cdef Py_ssize_t zstd_frame_end(const unsigned char* data, Py_ssize_t pos, Py_ssize_t size,
                               bint* skippable, int64_t* content_size) except -1:
    """Walk the frame at `pos` (headers and block headers only) and return where it ends.

    zstandard's stream reader stops silently at a cut frame; zstd-jni (Kafka) raises
    "Truncated source".  This walk finds the cut (and its position) before decompressing.
    """
    cdef uint32_t frame_magic, block_header, frame_size
    cdef unsigned char fhd
    cdef int fcs_flag, single, header_size, fcs_size
    cdef Py_ssize_t block_size
    cdef uint64_t fcs_bits
    cdef int i
    skippable[0] = False
    content_size[0] = -1
    if size - pos < 4:
        return truncated(ZSTD, 2, "frame magic", 4, pos, size)
    frame_magic = le32(data + pos)
    if frame_magic & 0xFFFFFFF0 == 0x184D2A50:
        if size - pos < 8:
            return truncated(ZSTD, 2, "skippable frame header", 8, pos, size)
        frame_size = le32(data + pos + 4)
        if frame_size > size - pos - 8:
            return truncated(ZSTD, 2, "skippable frame", frame_size, pos + 8, size)
        skippable[0] = True
        return pos + 8 + frame_size
    if frame_magic != ZSTD_FRAME_MAGIC:
        return corrupt(ZSTD, 2, f"invalid frame magic {frame_magic:#010x} (expected "
                       f"{ZSTD_FRAME_MAGIC:#010x}; unknown frame descriptor)", pos)
    pos += 4
    if size - pos < 1:
        return truncated(ZSTD, 2, "frame header", 1, pos, size)
    fhd = data[pos]
    if fhd & 0x08:
        return corrupt(ZSTD, 2, f"frame header descriptor {fhd:#04x} has the reserved bit set",
                       pos)
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    fcs_size = (1 if single else 0) if fcs_flag == 0 else (1 << fcs_flag)
    header_size = 1 + (0 if single else 1) + (4 if fhd & 3 == 3 else fhd & 3) + fcs_size
    if size - pos < header_size:
        return truncated(ZSTD, 2, "frame header", header_size, pos, size)
    if fcs_size:
        fcs_bits = 0                   # little-endian, unsigned (RFC 8878 3.1.1.1.4)
        for i in range(fcs_size):
            fcs_bits |= <uint64_t>data[pos + header_size - fcs_size + i] << (8 * i)
        if fcs_size == 2:
            fcs_bits += 256
        # a size past int64 cannot fit any output: the limit check after this refuses it
        content_size[0] = <int64_t>fcs_bits if fcs_bits <= <uint64_t>INT64_MAX else INT64_MAX
    pos += header_size
    while True:
        if size - pos < 3:
            return truncated(ZSTD, 2, "block header (truncated source)", 3, pos, size)
        block_header = data[pos] | (<uint32_t>data[pos + 1] << 8) | (<uint32_t>data[pos + 2] << 16)
        if (block_header >> 1) & 3 == 3:
            return corrupt(ZSTD, 2, "reserved block type", pos)
        block_size = 1 if (block_header >> 1) & 3 == 1 else block_header >> 3
        pos += 3
        if size - pos < block_size:
            return truncated(ZSTD, 2, "block (truncated source)", block_size, pos, size)
        pos += block_size
        if block_header & 1:
            break
    if fhd & 0x04:
        if size - pos < 4:
            return truncated(ZSTD, 2, "content checksum", 4, pos, size)
        pos += 4
    return pos


cdef int unzstd(Decompressor state, const unsigned char* data, Py_ssize_t size,
                Out* out) except -1:
    cdef Py_ssize_t pos = 0, end, hint, n
    cdef bint skippable
    cdef int64_t content_size
    if size == 0:
        return corrupt(ZSTD, 2, "empty input (no zstd frame)", 0)
    if state._zstd is None:
        state._zstd = zstandard.ZstdDecompressor()
    while pos < size:
        end = zstd_frame_end(data, pos, size, &skippable, &content_size)
        if not skippable:
            # Content size is a hint only (Kafka's frames have none): never beyond what the
            # cap allows or a generous ratio of the frame size.
            hint = (end - pos) * 8 + 4096 if content_size < 0 else content_size
            if content_size > out.limit - out.length:
                return too_large(ZSTD, out.limit)
            hint = min(hint, (end - pos) * 1024 + 65536, out.limit - out.length)
            out_reserve(out, hint)
            reader = state._zstd.stream_reader(view_of(data + pos, end - pos, PyBUF_READ))
            try:
                while True:
                    if out.length == out.capacity:
                        if out.capacity < out.limit:
                            out_grow(out, out.length + 1)
                        elif reader.readinto(bytearray(1)):
                            return too_large(ZSTD, out.limit)
                        else:
                            break
                    n = reader.readinto(view_of(out.p + out.length, out.capacity - out.length,
                                                PyBUF_WRITE))
                    if n == 0:
                        break
                    out.length += n
            except _ZstdError as e:
                return corrupt(ZSTD, 2, f"invalid zstd frame ({e})", pos)
        pos = end
    return 0


cdef Py_ssize_t zstd(Writer* w, const unsigned char* data, Py_ssize_t size, int level) except -1:
    cdef Py_ssize_t start = w.length
    if level == LEVEL_DEFAULT:
        level = 3
    elif level < -131072 or level > 22:
        raise ValueError(f"zstd level must be -131072..22 (or -1 for the default 3), got {level}")
    check_input_size(size)
    compressor = zstd_compressor(level)
    if size == 0:
        # zstd-jni's close() of a frame never written to ends it at once (ZSTD_e_end first):
        # the size, 0, is known and written.
        put_chunk(w, compressor.compress(b""))
        return w.length - start
    # Kafka's ZstdCompression: zstd-jni's ZstdOutputStreamNoFinalizer (level only) behind a
    # 16 KiB BufferedOutputStream.  Its writes are ZSTD_e_continue with the size unknown, so
    # libzstd takes the level's parameters for unknown sizes (level 3: 2 MiB window, 2^17 hash
    # table: ~4% smaller than sizing them to a 16 KiB batch) and cuts full 128 KiB blocks
    # whatever the write sizes; close() flushes (ZSTD_e_flush ends the last block) then ends
    # the frame (ZSTD_e_end: an empty last block).  No content size, no checksum.
    # python-zstandard hands each piece back as a new bytes object: one copy of the output
    # each, into w (ZSTD_compressBound is not reachable through it).
    stream = compressor.compressobj(size=-1)
    put_chunk(w, stream.compress(view_of(data, size, PyBUF_READ)))
    put_chunk(w, stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    put_chunk(w, stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
    return w.length - start


cdef inline int put_chunk(Writer* w, bytes chunk) except -1:
    return put_bytes(w, <const unsigned char*>PyBytes_AS_STRING(chunk), PyBytes_GET_SIZE(chunk))


cdef Py_ssize_t compress_into(Writer* w, int codec, int magic, const unsigned char* data,
                              Py_ssize_t size, int level) except -1:
    check_codec(codec, magic)
    if codec == GZIP:
        return gzip(w, data, size, level)
    if codec == SNAPPY:
        return snappy(w, data, size)
    if codec == LZ4:
        return lz4_frame(w, magic, data, size, level)
    return zstd(w, data, size, level)


cdef bytes compress(int codec, int magic, const unsigned char* data, Py_ssize_t size, int level):
    cdef Writer w
    w.buf = NULL
    w.length = w.capacity = w.exports = 0
    try:
        compress_into(&w, codec, magic, data, size, level)
        return PyBytes_FromStringAndSize(<const char*>w.buf, w.length)
    finally:
        writer_release(&w)


# --- Python API ---------------------------------------------------------------------------

cdef object codec_call(codec, int magic, data, bint unpack, Py_ssize_t max_size, int level,
                       Writer* into):
    """The Python entry points' one borrow of `data`: decompress it (unpack), else compress
    it into `into` (returns the size) or into a new bytes."""
    cdef int codec_number = codec_id(codec)
    cdef Py_buffer src
    PyObject_GetBuffer(data, &src, PyBUF_SIMPLE)
    try:
        if unpack:
            return decompress(codec_number, magic, buffer_start(&src), src.len, max_size)
        if into != NULL:
            return compress_into(into, codec_number, magic, buffer_start(&src), src.len, level)
        return compress(codec_number, magic, buffer_start(&src), src.len, level)
    finally:
        PyBuffer_Release(&src)


def _decompress(codec, int magic, data, max_size=None) -> bytes:
    """Decompress one Kafka codec container (a v2 records section or a v0/v1 wrapper value).

    ``codec`` is a Compression, its id or a name ("lz4"); ``data`` any contiguous buffer.
    Raises CorruptRecordError for bad data, RecordTooLargeError beyond ``max_size``
    (default DEFAULT_MAX_DECOMPRESSED), UnsupportedCompressionError for zstd below magic 2.
    """
    return codec_call(codec, magic, data, True,
                      DEFAULT_MAX_DECOMPRESSED if max_size is None else max_size, LEVEL_DEFAULT, NULL)


def _compress(codec, int magic, data, level=None) -> bytes:
    """Compress ``data`` into Kafka's container for the codec and magic.

    ``level`` None (or -1) is Kafka's default for the codec: gzip 6, lz4 9 (the fast
    compressor), zstd 3; else gzip 1..9, lz4 1..17 (LZ4 HC unless 9), zstd -131072..22.
    """
    return codec_call(codec, magic, data, False, 0, LEVEL_DEFAULT if level is None else level,
                      NULL)


def _compress_into(WriteBuffer buffer, codec, int magic, data, level=None) -> int:
    """compress_into for tests: append the container to `buffer`; returns its size."""
    return codec_call(codec, magic, data, False, 0, LEVEL_DEFAULT if level is None else level,
                      &buffer.w)


def xxhash32(data, unsigned int seed=0) -> int:
    """xxHash32 of any C-contiguous buffer, read as its raw bytes (the LZ4 frame checksum
    function)."""
    cdef Py_buffer src
    cdef const unsigned char* p
    cdef uint32_t h
    PyObject_GetBuffer(data, &src, PyBUF_SIMPLE)
    try:
        p = buffer_start(&src)
        with nogil:
            h = kc_xxhash32(p, <size_t>src.len, seed)
    finally:
        PyBuffer_Release(&src)
    return h


# `decompress` / `compress` are the C-level names (see the .pxd); Python sees these wrappers
# under the same names.
_decompress.__name__ = _decompress.__qualname__ = "decompress"
_compress.__name__ = _compress.__qualname__ = "compress"
globals()["decompress"] = _decompress
globals()["compress"] = _compress
del _decompress, _compress

__all__ = ["DEFAULT_MAX_DECOMPRESSED", "Decompressor", "compress", "decompress", "xxhash32"]
