# cython: language_level=3
"""Down-conversion of record sets to an older magic (Kafka 3.8 RecordsUtil.downConvert).

The loop runs on the format primitives: entries are framed with `next_entry`, v2 records
parsed in place with `read_v2_record` and re-emitted with `write_legacy_message` straight
into the output buffer.  No Python object is created per record; a compressed source batch
costs one decompression and one compression.  See docs/down-conversion.md and
spec downconvert.md §2 for the rules implemented here.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, INT64_MIN, INT32_MAX
from libc.stdlib cimport free
from cpython.time cimport monotonic_ns

from kafkacodec._cursor cimport Cursor, cursor_init, load_u32
from kafkacodec._writer cimport Writer, WriteBuffer, writer_grow, put_bytes
from kafkacodec._format cimport (BatchHeader, next_entry, LOG_OVERHEAD, SIZE_OFFSET,
                                 V0_RECORD_OVERHEAD, V1_RECORD_OVERHEAD, V2_HEADER_SIZE,
                                 CONTROL_FLAG, TIMESTAMP_TYPE_MASK, TIMESTAMP_LOG_APPEND,
                                 NO_TIMESTAMP, CODEC_NONE, CODEC_LZ4, CODEC_ZSTD, wrap_sub, wrap_add)
from kafkacodec._v2 cimport record_timestamp
from kafkacodec._legacy cimport write_legacy_message
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_open, walk_decompressed, walk_next,
                               walk_step, DataRun, walk_data_begin, walk_data_record,
                               walk_data_end, pin_output, unpin_chunk,
                               OPEN_NONE, OPEN_COMPRESSED)
from kafkacodec._legacy cimport begin_legacy_wrapper, end_legacy_wrapper, wrapper_fits
from kafkacodec._crc cimport kc_crc_init
from kafkacodec._compression cimport (Decompressor, _Chunk, thread_decompressor, compress_into,
                                      LEVEL_DEFAULT, RETAINED_CHUNK, DEFAULT_MAX_DECOMPRESSED)
from kafkacodec._guard cimport Guard, guard_enter, guard_leave
from kafkacodec._mapguard cimport check_read

# Every `cdef inline` function this module uses is inlined (kc_inline.h says why).
cdef extern from "kc_inline.h":
    pass

from kafkacodec._records import MemoryRecords
from kafkacodec._types import recompress_codec_id
from kafkacodec.errors import (CorruptRecordError, KafkaCodecError, RecordTooLargeError,
                               UnsupportedCompressionError, UnsupportedVersionError)

kc_crc_init()                        # kc_crc.h is header-only: this module's own tables


# A legacy entry's Size field is an int32: a wrapper whose compressed value makes it larger
# cannot be written (RecordTooLargeError).  A variable only so tests can lower the limit
# (_set_max_wrapper_size) instead of compressing 2 GiB.
cdef Py_ssize_t max_wrapper_size = INT32_MAX


def _set_max_wrapper_size(Py_ssize_t size):
    """Test hook: the largest Size a written wrapper may have (INT32_MAX); returns the old."""
    global max_wrapper_size
    old, max_wrapper_size = max_wrapper_size, size
    return old

__all__ = ["DownConverter", "RecordConversionStats", "ConvertedRecords", "down_convert",
           "first_entry_above", "records_buffer", "release_file_pages"]


class RecordConversionStats:
    """Kafka's RecordValidationStats of a conversion (additive across chunks).

    temporary_memory_bytes: size of every kept or converted source batch plus the uncompressed
    bytes each rebuilt batch wrote; records_converted: records written by rebuilt batches (kept
    batches count 0); conversion_time_ns: wall time of the conversion.
    """

    __slots__ = ("temporary_memory_bytes", "records_converted", "conversion_time_ns")

    def __init__(self, temporary_memory_bytes=0, records_converted=0, conversion_time_ns=0):
        self.temporary_memory_bytes = temporary_memory_bytes
        self.records_converted = records_converted
        self.conversion_time_ns = conversion_time_ns

    def add(self, other):
        """Add another chunk's stats into these (Kafka's RecordValidationStats.add)."""
        self.temporary_memory_bytes += other.temporary_memory_bytes
        self.records_converted += other.records_converted
        self.conversion_time_ns += other.conversion_time_ns

    def __eq__(self, other):
        if not isinstance(other, RecordConversionStats):
            return NotImplemented
        return (self.temporary_memory_bytes == other.temporary_memory_bytes
                and self.records_converted == other.records_converted
                and self.conversion_time_ns == other.conversion_time_ns)

    def __repr__(self):
        return (f"RecordConversionStats(temporary_memory_bytes={self.temporary_memory_bytes}, "
                f"records_converted={self.records_converted}, "
                f"conversion_time_ns={self.conversion_time_ns})")


class ConvertedRecords:
    """The result of a conversion: `records` (the converted record set, a MemoryRecords) and
    `stats` (RecordConversionStats)."""

    __slots__ = ("records", "stats")

    def __init__(self, records, stats):
        self.records = records
        self.stats = stats

    def __iter__(self):                      # records, stats = down_convert(...)
        yield self.records
        yield self.stats

    def __repr__(self):
        return f"ConvertedRecords(<{memoryview(self.records).nbytes} bytes>, {self.stats!r})"


def records_buffer(records):
    """The contiguous bytes of a record set: MemoryRecords-like objects expose `.buffer`,
    anything else must support the buffer protocol (bytes, bytearray, memoryview, mmap)."""
    if type(records) is memoryview:
        view = <object>records
    elif type(records) is bytes or type(records) is bytearray:
        view = memoryview(records)
    else:
        buffer = getattr(records, "buffer", None)
        view = memoryview(records if buffer is None else buffer)
    if not view.contiguous:
        raise TypeError("records must be a contiguous buffer")
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


cdef inline int check_magic(int to_magic) except -1:
    if to_magic < 0 or to_magic > 2:
        raise UnsupportedVersionError(f"cannot down-convert to magic {to_magic}: use 0, 1 or 2")
    return 0


cdef class DownConverter:
    """DownConverter(to_magic, first_offset=0)

    Converts the complete entries of record sets to `to_magic`, appending to one output.

    `convert()` may be called several times (one call per lazy chunk); `take()` hands the
    output over as a WriteBuffer together with the stats gathered since the last take().

    Beyond Kafka (both off by default, as Kafka behaves):
    - `stop_before_unsupported`: a call that has taken a batch stops before a batch it cannot
      convert (zstd or an unknown codec below magic 2) instead of failing whole, so the lazy
      path sends what precedes it; the next call starting there raises.
    - `zstd_codec` (-1: refuse, as Kafka): a zstd batch converted below magic 2 is rebuilt with
      this codec instead (0 none, 1 gzip, 2 snappy, 3 lz4), every record kept.
    Not for concurrent use (it decompresses without the GIL): a call while another runs
    raises ConcurrentUseError.  Threads may use it one at a time: a compressed batch is
    decompressed by the converting thread's Decompressor (the walker's policy, _walk.pxd)."""

    cdef readonly int to_magic
    cdef readonly int64_t first_offset
    cdef WriteBuffer out
    cdef WriteBuffer inner               # scratch: the inner message set of a wrapper
    cdef int64_t temporary_memory_bytes
    cdef int64_t records_converted
    cdef public bint stop_before_unsupported
    cdef int zstd_codec
    cdef Guard guard                     # one call at a time (convert, take, reserve)
    cdef Py_ssize_t read_end             # bytes of the last convert_range()'s data read

    def __cinit__(self, int to_magic, int64_t first_offset=0):
        check_magic(to_magic)
        self.to_magic = to_magic
        self.first_offset = first_offset
        self.out = WriteBuffer()
        self.inner = WriteBuffer()
        self.zstd_codec = -1

    def convert(self, data, Py_ssize_t max_bytes=-1, Py_ssize_t max_batches=-1,
                Py_ssize_t position=0):
        """Convert the complete entries at the start of `data` (a contiguous buffer).

        Takes at least one entry, then more while the entries taken so far plus the next stay
        within `max_bytes` (-1: no limit) and fewer than `max_batches` (-1: no limit) were taken.
        `position` is where `data` starts in the caller's record set (for error messages).
        Returns the number of input bytes consumed: 0 when `data` holds no complete entry.
        On error the output is left as it was before the call."""
        cdef const unsigned char[::1] view = records_buffer(data)
        cdef Py_ssize_t n = view.shape[0]
        try:
            consumed = self.convert_range(&view[0] if n else NULL, n, position, max_bytes,
                                          max_batches)
        except KafkaCodecError as error:
            check_read(data, self.read_end, error.position, error.offset, error)
            raise
        check_read(data, self.read_end)      # a mapped segment cut under what was read
        return consumed

    def take(self, bint again=True):
        """(output WriteBuffer, temporary_memory_bytes, records_converted) since the last take.
        `again`: more output follows (the next buffer is allocated at this one's size)."""
        cdef WriteBuffer done = self.out
        guard_enter(&self.guard, b"DownConverter")
        try:
            result = (done, self.temporary_memory_bytes, self.records_converted)
            # A chunk's output is likely the size of the last one: allocate it once, no
            # growth copies.
            self.out = WriteBuffer(done.w.length + (done.w.length >> 3) + 256 if again else 0)
            self.temporary_memory_bytes = 0
            self.records_converted = 0
            return result
        finally:
            guard_leave(&self.guard)

    @property
    def zstd_codec(self):
        return self.zstd_codec

    @zstd_codec.setter
    def zstd_codec(self, int codec):
        if not -1 <= codec <= CODEC_LZ4:
            raise ValueError(f"zstd_codec must be -1 (refuse), 0 (none), 1 (gzip), 2 (snappy) "
                             f"or 3 (lz4), got {codec}")
        self.zstd_codec = codec

    @property
    def output_size(self):
        return self.out.w.length

    def reserve(self, Py_ssize_t capacity):
        """Pre-size the output buffer (an estimate; it grows as needed)."""
        guard_enter(&self.guard, b"DownConverter")
        try:
            if capacity > self.out.w.capacity - self.out.w.length:
                writer_grow(&self.out.w, capacity)
        finally:
            guard_leave(&self.guard)

    # --- the loop -------------------------------------------------------------------------
    cdef Py_ssize_t convert_range(self, const unsigned char* data, Py_ssize_t size,
                                  Py_ssize_t position, Py_ssize_t max_bytes,
                                  Py_ssize_t max_batches) except -1:
        """convert() on a pointer: on error the output and stats are rolled back."""
        cdef Py_ssize_t mark
        cdef int64_t temp, converted
        guard_enter(&self.guard, b"DownConverter")
        mark = self.out.w.length
        temp, converted = self.temporary_memory_bytes, self.records_converted
        try:
            if self.out.w.buf == NULL and 0 < max_bytes <= size:
                # a chunk's first output: its size at once (a kept block when one fits,
                # _writer's pool), as take() sizes the next ones, not grown by doubling
                writer_grow(&self.out.w, max_bytes + (max_bytes >> 3) + 256)
            return self.convert_entries(data, size, position, max_bytes, max_batches)
        except BaseException:
            self.out.w.length = mark
            self.temporary_memory_bytes = temp
            self.records_converted = converted
            raise
        finally:
            self.let_go_of_big_buffers()
            guard_leave(&self.guard)

    cdef void let_go_of_big_buffers(self) noexcept:
        """A batch that inflated to hundreds of MiB must not stay resident with the converter:
        the inner-set scratch above 8 MiB goes (the thread's decompression chunk goes by
        itself when convert_entry() unpins it)."""
        if self.inner.w.capacity > RETAINED_CHUNK and self.inner.w.exports == 0:
            free(self.inner.w.buf)
            self.inner.w.buf = NULL
            self.inner.w.capacity = 0
            self.inner.w.length = 0

    cdef Py_ssize_t convert_entries(self, const unsigned char* data, Py_ssize_t size,
                                    Py_ssize_t position, Py_ssize_t max_bytes,
                                    Py_ssize_t max_batches) except -1:
        cdef Cursor cur
        cdef BatchHeader h
        cdef const unsigned char* entry
        cdef Py_ssize_t taken = 0
        cdef Py_ssize_t batches = 0
        cdef Decompressor decompressor = None
        cursor_init(&cur, data, size, position)
        while max_batches < 0 or batches < max_batches:
            self.read_end = min(size, cur.pos + <Py_ssize_t>V2_HEADER_SIZE)   # framing reads
            if batches > 0 and max_bytes >= 0 and not self.next_fits(&cur, max_bytes - taken):
                break
            if not next_entry(&cur, &h):
                break
            self.read_end = cur.pos
            if batches > 0 and self.stop_before_unsupported and self.unsupported(&h):
                cur.pos -= h.size               # ends this chunk; the next call raises
                break
            entry = data + cur.pos - h.size
            taken += h.size
            batches += 1
            if decompressor is None and h.compression != CODEC_NONE:
                decompressor = thread_decompressor()    # the converting thread's, once a call
            self.convert_entry(entry, &h, decompressor)
        return taken

    cdef bint unsupported(self, const BatchHeader* h) noexcept:
        # what convert_entry refuses: zstd (unless recompressed) or an unknown codec below v2
        if self.to_magic >= 2:
            return False
        return h.compression > CODEC_ZSTD or (h.compression == CODEC_ZSTD and self.zstd_codec < 0)

    cdef bint next_fits(self, const Cursor* cur, Py_ssize_t room) noexcept:
        # Kafka's chunk rule: the next batch joins while sizeSoFar + its size <= the limit.
        if cur.end - cur.pos < LOG_OVERHEAD:
            return True                  # next_entry ends the walk
        return LOG_OVERHEAD + <Py_ssize_t><int32_t>load_u32(cur.data + cur.pos + SIZE_OFFSET) <= room

    cdef int convert_entry(self, const unsigned char* entry, BatchHeader* h,
                           Decompressor decompressor) except -1:
        """Convert one entry; a compressed one is decompressed by `decompressor` (the
        converting thread's) into its chunk, pinned while the batch is walked."""
        cdef int to_magic = self.to_magic
        cdef BatchWalk w
        cdef const unsigned char* data
        cdef Py_ssize_t size = 0
        cdef int code
        cdef _Chunk chunk
        if to_magic < 2:
            if h.magic >= 2 and h.attributes & CONTROL_FLAG:
                return 0                 # transaction markers have no v0/v1 form: dropped
            if h.compression == CODEC_ZSTD and self.zstd_codec < 0:
                raise UnsupportedCompressionError(
                    f"cannot down-convert a zstd batch to magic {to_magic} (zstd needs magic 2)",
                    position=h.position, offset=h.base_offset)
            if h.compression > CODEC_ZSTD:     # Kafka's codec lookup fails for every batch
                raise UnsupportedCompressionError(
                    f"unknown compression type id {h.compression}",
                    position=h.position, offset=h.base_offset)
        if h.magic <= to_magic:          # already old enough: copied byte for byte
            put_bytes(&self.out.w, entry, h.size)
            self.temporary_memory_bytes += h.size
            return 0
        # The batch walker checks the rest in Kafka's order (DefaultRecordBatch.iterator(): a
        # negative count before anything is read or decompressed; a count of none: not read).
        w.h = h[0]
        code = walk_open(&w, entry, &data, &size)
        if code == OPEN_NONE:
            return 0
        if code == OPEN_COMPRESSED:
            # one wrapper with the same codec (default level) holding every record (no
            # first_offset filter); wrapper offset = the last record's offset
            data = self.decompress(decompressor, h.compression, h.magic, data, size,
                                   w.data_position, h, &size)
            chunk = pin_output(decompressor)          # walked until the batch ends
            try:
                walk_decompressed(&w, data, size)
                if h.magic >= 2:
                    return self.wrap_v2_records(&w, self.zstd_codec if h.compression == CODEC_ZSTD
                                                else h.compression)
                return self.wrap_v1_messages(&w)
            except KafkaCodecError as error:
                raise in_decompressed(error, &w)
            finally:
                unpin_chunk(chunk)
        if h.magic >= 2:
            return self.convert_v2_plain(&w)
        return self.convert_v1_plain(&w)

    cdef int convert_v2_plain(self, BatchWalk* walk) except -1:
        """Uncompressed v2 batch -> one standalone v0/v1 message per record at or above
        first_offset (offset = the record's offset, its timestamp or the LogAppendTime)."""
        cdef const BatchHeader* h = &walk.h
        cdef RecordView v
        cdef DataRun r               # the walk's position, in registers for the batch
        cdef int64_t offset, timestamp
        cdef Writer* w = &self.out.w
        cdef int8_t to_magic = <int8_t>self.to_magic
        cdef int8_t attributes = 0
        cdef int64_t last = INT64_MIN
        cdef int64_t first_offset = self.first_offset
        cdef int32_t kept = 0
        cdef Py_ssize_t start = w.length
        if to_magic == 1 and h.timestamp_type == TIMESTAMP_LOG_APPEND:
            attributes = TIMESTAMP_TYPE_MASK
        walk_data_begin(walk, &r)
        try:
            while walk_data_record(walk, &r, &v):
                offset = wrap_add(h.base_offset, v.rec.offset_delta)
                if offset < first_offset:
                    continue
                timestamp = record_timestamp(h, &v.rec)
                check_record(offset, timestamp, last, h)
                last = offset
                write_legacy_message(w, to_magic, offset, timestamp, attributes,
                                     v.rec.key, v.rec.key_length, v.rec.value, v.rec.value_length)
                kept += 1
        finally:
            walk_data_end(walk, &r)
        if kept:
            self.temporary_memory_bytes += h.size + (w.length - start)
            self.records_converted += kept
        return 0

    cdef int convert_v1_plain(self, BatchWalk* walk) except -1:
        """Uncompressed v1 message -> v0 message (the timestamp is dropped)."""
        cdef const BatchHeader* h = &walk.h
        cdef RecordView v
        cdef Writer* w = &self.out.w
        cdef Py_ssize_t start = w.length
        walk_next(walk, &v)
        if v.offset < self.first_offset:
            return 0
        check_record(v.offset, v.timestamp, INT64_MIN, h)
        write_legacy_message(w, 0, v.offset, NO_TIMESTAMP, 0, v.rec.key, v.rec.key_length,
                             v.rec.value, v.rec.value_length)
        self.temporary_memory_bytes += h.size + (w.length - start)
        self.records_converted += 1
        return 0

    cdef const unsigned char* decompress(self, Decompressor decompressor, int codec, int magic,
                                         const unsigned char* data, Py_ssize_t size,
                                         Py_ssize_t position, const BatchHeader* h,
                                         Py_ssize_t* out_size) except NULL:
        decompressor.max_size = DEFAULT_MAX_DECOMPRESSED    # other readers set their own cap
        try:
            return decompressor.decompress_into(codec, magic, data, size, out_size)
        except KafkaCodecError as error:
            # name the byte in the caller's record set and the batch
            where = None if error.position is None else position + error.position
            raise error.with_context(position=where, offset=h.base_offset)

    cdef int wrap_v2_records(self, BatchWalk* walk, int codec) except -1:
        """The decompressed records of a v2 batch -> one wrapper compressed with `codec`, or
        for codec none (a recompressed zstd batch) one standalone message per record."""
        cdef const BatchHeader* h = &walk.h
        cdef RecordView v
        cdef bint standalone = codec == CODEC_NONE
        cdef Writer* inner = &self.out.w if standalone else &self.inner.w
        cdef Py_ssize_t start = self.out.w.length
        cdef int8_t to_magic = <int8_t>self.to_magic
        cdef bint log_append = h.timestamp_type == TIMESTAMP_LOG_APPEND
        cdef int8_t attributes = TIMESTAMP_TYPE_MASK if to_magic == 1 and log_append else 0
        cdef int64_t base = 0, last = INT64_MIN, max_timestamp = NO_TIMESTAMP
        cdef bint first = True
        if not standalone:
            inner.length = 0
        while walk_step(walk, &v):
            check_record(v.offset, v.timestamp, last, h)
            if first and not standalone:
                base = v.offset          # v1 inner offsets are relative to the first record
            first = False
            write_legacy_message(inner, to_magic,
                                 wrap_sub(v.offset, base) if to_magic == 1 else v.offset,
                                 v.timestamp, attributes, v.rec.key, v.rec.key_length,
                                 v.rec.value, v.rec.value_length)
            if v.timestamp > max_timestamp:
                max_timestamp = v.timestamp
            last = v.offset
        if standalone:
            self.temporary_memory_bytes += h.size + (self.out.w.length - start)
            self.records_converted += h.records_count
            return 0
        return self.write_wrapper(h, last, h.max_timestamp if log_append else max_timestamp,
                                  h.records_count, codec)

    cdef int wrap_v1_messages(self, BatchWalk* walk) except -1:
        """v1 wrapper -> v0 wrapper: absolute inner offsets, timestamps dropped."""
        cdef const BatchHeader* h = &walk.h
        cdef RecordView v
        cdef int64_t last = INT64_MIN
        cdef int32_t count = 0
        cdef Writer* inner = &self.inner.w
        inner.length = 0
        while walk_step(walk, &v):
            check_record(v.offset, v.timestamp, last, h)
            write_legacy_message(inner, 0, v.offset, NO_TIMESTAMP, 0, v.rec.key,
                                 v.rec.key_length, v.rec.value, v.rec.value_length)
            last = v.offset
            count += 1
        return self.write_wrapper(h, last, NO_TIMESTAMP, count, h.compression)

    cdef int write_wrapper(self, const BatchHeader* h, int64_t last_offset, int64_t timestamp,
                           int32_t records, int codec) except -1:
        """Compress the inner set with `codec` and append the wrapper message (key null)."""
        cdef Writer* inner = &self.inner.w
        cdef int8_t to_magic = <int8_t>self.to_magic
        cdef int8_t attributes = <int8_t>codec
        cdef Py_ssize_t start, compressed
        if to_magic == 1 and h.timestamp_type == TIMESTAMP_LOG_APPEND:
            attributes |= TIMESTAMP_TYPE_MASK
        start = begin_legacy_wrapper(&self.out.w, to_magic, last_offset, timestamp, attributes,
                                     NULL, -1)
        compressed = compress_into(&self.out.w, codec, to_magic, inner.buf, inner.length,
                                   LEVEL_DEFAULT)
        if not wrapper_fits(&self.out.w, start, max_wrapper_size):
            raise RecordTooLargeError(
                f"the down-converted wrapper ({compressed} compressed bytes) is larger than a "
                f"legacy message's int32 size field can hold", position=h.position,
                offset=h.base_offset)
        end_legacy_wrapper(&self.out.w, start, <int32_t>compressed)   # fits: so does the value
        # MemoryRecordsBuilder.uncompressedBytesWritten: inner messages + the wrapper header
        self.temporary_memory_bytes += (h.size + inner.length + LOG_OVERHEAD
                                        + (V1_RECORD_OVERHEAD if to_magic == 1 else V0_RECORD_OVERHEAD))
        self.records_converted += records
        return 0


cdef extern from *:
    """
    #if defined(__unix__) || defined(__APPLE__)
    #include <sys/mman.h>
    #include <unistd.h>
    static int kc_release_pages(const unsigned char *p, Py_ssize_t n) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t start = (uintptr_t)p & ~(page - 1);
        uintptr_t end = ((uintptr_t)p + (uintptr_t)n) & ~(page - 1);
        if (end <= start) return 0;
        return madvise((void *)start, end - start, MADV_DONTNEED);
    }
    #else
    static int kc_release_pages(const unsigned char *p, Py_ssize_t n) { return 0; }
    #endif
    """
    int kc_release_pages(const unsigned char* p, Py_ssize_t n) nogil


cdef class ChunkReader:
    """ChunkReader(data, converter, file_backed=False)

    Walks an in-memory (or mapped) record set chunk by chunk for the lazy path: each
    step() converts one chunk at the current position and moves past it.  Not for
    concurrent use: a step() while another runs raises ConcurrentUseError."""

    cdef const unsigned char[::1] view
    cdef object data                     # what the view reads (a mapped segment is checked)
    cdef DownConverter converter
    cdef public Py_ssize_t position
    cdef readonly bint file_backed
    cdef Guard guard

    def __cinit__(self, data, DownConverter converter, bint file_backed=False):
        self.view = records_buffer(data)
        self.data = data
        self.converter = converter
        self.position = 0
        self.file_backed = file_backed

    def step(self, Py_ssize_t max_bytes, bint again=True):
        """Convert the chunk at `position` (at least one whole entry, then more within
        `max_bytes`; 0: exactly one).  Returns None when no complete entry is left, else
        (output WriteBuffer, temporary_memory_bytes, records_converted, conversion_time_ns);
        the output may be empty.  For a file mapping (`file_backed`) the chunk's pages are
        handed back afterwards (see release_file_pages).  `again`: see DownConverter.take."""
        cdef int64_t started = monotonic_ns()
        cdef Py_ssize_t start, left, consumed
        guard_enter(&self.guard, b"ChunkReader")
        try:
            start = self.position
            left = self.view.shape[0] - start
            if left <= 0:
                return None
            try:
                consumed = self.converter.convert_range(&self.view[start], left, start,
                                                        max_bytes, -1)
            except KafkaCodecError as error:
                check_read(self.data, start + self.converter.read_end, error.position,
                           error.offset, error)
                raise
            check_read(self.data, start + self.converter.read_end)
            if consumed == 0:
                return None
            if self.file_backed:
                kc_release_pages(&self.view[start], consumed)
            self.position = start + consumed
            output, temp, converted = self.converter.take(again)
            return output, temp, converted, monotonic_ns() - started
        finally:
            guard_leave(&self.guard)


cdef object in_decompressed(object error, const BatchWalk* w):
    """An error found walking a batch's decompressed records, as MemoryRecords reports it: the
    byte in the decompressed data, where that data came from, and the batch offset.  Errors
    that already name the batch itself (check_record()) pass as they are."""
    if error.position is None:
        return error.with_context(position=w.data_position, offset=w.h.base_offset)
    if error.offset is not None and error.position == w.h.position:
        return error
    return error.with_context(suffix=f" at byte {error.position} of the decompressed data",
                              position=w.data_position, offset=w.h.base_offset)


cdef inline int check_record(int64_t offset, int64_t timestamp, int64_t last,
                             const BatchHeader* h) except -1:
    # MemoryRecordsBuilder.appendWithOffset: offsets strictly increase, timestamps >= -1.
    # A log offset is never negative; a v1 wrapper could not even express one (its inner
    # offsets are relative to a wrapper offset that must be >= the last of them).
    if offset < 0:
        raise CorruptRecordError(f"negative record offset {offset} cannot be down-converted",
                                 position=h.position, offset=h.base_offset)
    if timestamp < NO_TIMESTAMP:
        raise CorruptRecordError(f"invalid record timestamp {timestamp} at offset {offset}",
                                 position=h.position, offset=h.base_offset)
    if offset <= last:
        raise CorruptRecordError(f"record offset {offset} does not follow {last}",
                                 position=h.position, offset=h.base_offset)
    return 0


def down_convert(records, int to_magic, int64_t first_offset=0, WriteBuffer out=None, *,
                 recompress=None):
    """Convert a record set to `to_magic` exactly as Kafka's RecordsUtil.downConvert does.

    Batches at or below `to_magic` are copied byte for byte; newer ones are rebuilt with the
    same codec; control batches vanish; records below `first_offset` are dropped from
    uncompressed source batches only; a zstd batch raises UnsupportedCompressionError for a
    v0/v1 target, as Kafka answers UNSUPPORTED_COMPRESSION_TYPE, unless `recompress` names
    the codec to rebuild it with ("none", "gzip", "snappy", "lz4", a Compression or its id).
    A trailing partial entry is ignored.  Returns ConvertedRecords.

    `out`: a WriteBuffer the converted set is appended to (reuse one, clear()ed, for fetch
    after fetch; or collect several conversions in it) instead of a new output.  The result's
    records are a view of what this call appended: `out` cannot grow or be cleared while they
    are alive (BufferError).  On an error `out` is left as it was."""
    cdef int64_t started = monotonic_ns()
    cdef DownConverter converter = DownConverter(to_magic, first_offset)
    cdef Py_ssize_t start = 0
    converter.zstd_codec = recompress_codec_id(recompress)
    view = records_buffer(records)
    if out is not None:
        converter.out = out
        start = out.w.length
    if converter.out.w.exports == 0:    # an estimate: a viewed `out` grows only if it must
        converter.reserve(view.nbytes + (view.nbytes >> 3) + 64)
    converter.convert(view)
    output, temp, converted = converter.take(False)
    stats = RecordConversionStats(temp, converted, monotonic_ns() - started)
    if out is not None:
        output = memoryview(out)[start:]
    return ConvertedRecords(MemoryRecords(output), stats)


def first_entry_above(data, int to_magic, Py_ssize_t position=0):
    """Walk the complete entries of `data` up to the first one newer than `to_magic`.

    Returns (bytes walked before it, True), or (bytes of complete entries, False) when none is
    newer.  `position` is where `data` starts in the record set (for error messages)."""
    cdef const unsigned char[::1] view = records_buffer(data)
    cdef Cursor cur
    cdef BatchHeader h
    cursor_init(&cur, &view[0] if view.shape[0] else NULL, view.shape[0], position)
    while True:
        if not next_entry(&cur, &h):
            return cur.pos, False
        if h.magic > to_magic:
            return cur.pos - h.size, True


def release_file_pages(data):
    """Drop the pages of `data` from this process's resident set (madvise MADV_DONTNEED), from
    the page holding its first byte up to the last page that ends inside it; they are read
    again from the page cache if touched later.  Consecutive calls on adjacent ranges thus
    release every page once the range after it is done.

    Only for read-only shared mappings of a file (FileRecords): on anonymous or private memory
    this would discard the contents.  A no-op where madvise is unavailable."""
    cdef const unsigned char[::1] view = records_buffer(data)
    if view.shape[0]:
        kc_release_pages(&view[0], view.shape[0])
