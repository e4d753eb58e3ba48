# Kafka's codec containers (spec: compression.md), C-level API for the other modules.
#
#   gzip    one RFC 1952 member (libdeflate from 1 KiB of input, else zlib with Java's
#           GZIPOutputStream header), concatenated members on read
#           (libdeflate for a lone member, zlib for the rest and for every error)
#   snappy  snappy-java (xerial) stream framing: 16-byte header, int32 BE length + raw block
#   lz4     Kafka's LZ4 frame (FLG 0x60, BD 0x40, 64 KiB independent blocks, magic-0 HC quirk)
#   zstd    standard zstd frames without content size (magic 2 only)
#
# Errors (kafkacodec.errors): CorruptRecordError for bad/truncated data (InvalidCrcError for an
# lz4 block checksum), RecordTooLargeError when the output would exceed the cap,
# UnsupportedCompressionError for zstd below magic 2 and ids 5-7, UnsupportedVersionError for
# a magic other than 0/1/2.  `position` in these errors is the byte position inside the
# compressed data passed in (callers add the position of that data in their own buffer).
# Codec 0 (none) is not a container: every entry point raises ValueError for it.

from cpython.object cimport PyObject
from kafkacodec._writer cimport Writer

# The cap on the decompressed size of one batch records section / legacy wrapper value
# (256 MiB; see _compression.pyx for why).
cdef Py_ssize_t DEFAULT_MAX_DECOMPRESSED

# Level value meaning "Kafka's default level for the codec" (gzip 6, lz4 fast compressor,
# zstd 3).
cdef enum:
    LEVEL_DEFAULT = -1

# Where a decompressor writes: a _Chunk's buffer, grown as needed (never beyond `limit`).
cdef struct Out:
    unsigned char* p         # start of the output
    Py_ssize_t length        # bytes written
    Py_ssize_t capacity      # bytes allocated
    Py_ssize_t limit         # the cap (max_size): never allocate or write more
    PyObject* owner          # the _Chunk that owns p


# A chunk keeps at most this much allocated between uses (one batch inflating to hundreds of
# MiB must not stay resident in every thread that read it once).
cdef enum:
    RETAINED_CHUNK = 8 * 1024 * 1024


cdef class _Chunk:
    # A malloc'd output buffer that exports the buffer protocol (read-only).  A Decompressor
    # reuses its chunk while no view of it is alive, and starts a new one otherwise, so a
    # memoryview handed to Python never changes under its holder nor dangles.  `exports`
    # counts those views and the pins of readers (_records' iterators) that hold a pointer.
    cdef unsigned char* buf
    cdef Py_ssize_t capacity
    cdef Py_ssize_t length
    cdef Py_ssize_t exports

    # Drop a pin (or view): the last one frees a buffer above RETAINED_CHUNK (nobody reads it
    # any more; the next use grows it again).
    cdef void unpin(self) noexcept
    # Free the buffer if it is above RETAINED_CHUNK and nobody reads it.
    cdef void shrink(self) noexcept


cdef class Decompressor:
    # Reusable decompression state: the output buffer, a zlib inflate stream and a zstd
    # decompression context.  Not for concurrent use (use one per thread): a second thread
    # entering while a call runs gets ConcurrentUseError instead of a data race.
    cdef public Py_ssize_t max_size    # the cap; settable from Python too
    cdef _Chunk _chunk
    cdef void* _inflate          # z_stream*, made on first gzip use
    cdef void* _libdeflate       # libdeflate_decompressor*, made on first gzip use
    cdef object _zstd            # zstandard.ZstdDecompressor, made on first zstd use
    cdef bint _busy

    # Decompress one batch records section / legacy wrapper value into the reusable internal
    # buffer; returns a pointer valid until the next call on this object; *out_size = bytes
    # out.  The pointer is never NULL on success (also for an empty result).
    cdef const unsigned char* decompress_into(self, int codec, int magic, const unsigned char* data,
                                              Py_ssize_t size, Py_ssize_t* out_size) except NULL
    # internals
    cdef int _enter(self) except -1          # ConcurrentUseError while a call runs
    cdef const unsigned char* _decompress_into(self, int codec, int magic,
                                               const unsigned char* data, Py_ssize_t size,
                                               Py_ssize_t* out_size) except NULL
    cdef _Chunk _take_chunk(self)
    cdef int _run(self, int codec, int magic, const unsigned char* data, Py_ssize_t size,
                  Out* out) except -1


# The calling thread's Decompressor (made on first use): the one every reader that has no
# Decompressor of its own decompresses with (see the policy in _walk.pxd).
cdef Decompressor thread_decompressor()

# A new bytes object (for results that must outlive the call, e.g. zero-copy record slices).
cdef object decompress(int codec, int magic, const unsigned char* data, Py_ssize_t size,
                       Py_ssize_t max_size)

# Append Kafka's container for (codec, magic) of `data` to w; returns its size.  level -1
# (LEVEL_DEFAULT) means Kafka's default for the codec (gzip 6, lz4 fast compressor, zstd 3);
# else gzip 1..9, lz4 1..17 (9 = fast compressor as Kafka, others LZ4 HC at that level),
# zstd -131072..22.  w grows first by the codec's bound (deflateBound, snappy's
# MaxCompressedLength per 32 KiB block, the LZ4 frame with every block raw), then the codec
# writes in place; zstd copies python-zstandard's output pieces in.  `data` must not point
# into w (growth moves it).
cdef Py_ssize_t compress_into(Writer* w, int codec, int magic, const unsigned char* data,
                              Py_ssize_t size, int level) except -1
# The same as a new bytes object (the Python API, and callers that keep the result alone).
cdef bytes compress(int codec, int magic, const unsigned char* data, Py_ssize_t size, int level)

# Raise UnsupportedCompressionError / UnsupportedVersionError / ValueError unless the codec
# is a container allowed for the magic (the checks every entry point above makes).
cdef int check_codec(int codec, int magic) except -1
