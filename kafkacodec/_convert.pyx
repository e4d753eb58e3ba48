# cython: language_level=3
"""Conversion of record sets between magics: down to an older one (Kafka 3.8
RecordsUtil.downConvert) and up from magic 0/1 to v2 batches (Kafka 3.9 LogValidator, toMagic 2).

The loop runs on the format primitives: entries are framed with `next_entry`, v2 records
parsed in place with `read_v2_record` and re-emitted with `write_legacy_message` straight
into the output buffer.  No Python object is created per record; a compressed source batch
costs one decompression and one compression.  See docs/down-conversion.md and
spec downconvert.md §2 for the rules implemented here.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint16_t, uint32_t, INT64_MIN, INT64_MAX, INT32_MAX
from libc.stdlib cimport free
from cpython.time cimport monotonic_ns

from kafkacodec._cursor cimport Cursor, cursor_init, load_u16, load_u32
from kafkacodec._writer cimport (Writer, WriteBuffer, writer_grow, put_bytes, reserve, store_u16,
                                 store_u32)
from kafkacodec._format cimport (BatchHeader, next_entry, LOG_OVERHEAD, SIZE_OFFSET,
                                 V0_RECORD_OVERHEAD, V1_RECORD_OVERHEAD, V2_HEADER_SIZE,
                                 CONTROL_FLAG, TIMESTAMP_TYPE_MASK, TIMESTAMP_LOG_APPEND,
                                 NO_TIMESTAMP, CODEC_NONE, CODEC_LZ4, CODEC_ZSTD, wrap_sub, wrap_add,
                                 crc_is_valid, compute_crc, MAGIC_OFFSET, LEGACY_CRC_OFFSET,
                                 LEGACY_ATTRIBUTES_OFFSET, COMPRESSION_MASK, TIMESTAMP_CREATE,
                                 V2_ATTRIBUTES_OFFSET, V2_CRC_OFFSET)
from kafkacodec._v2 cimport record_timestamp, write_v2_record, write_v2_batch_header
from kafkacodec._legacy cimport write_legacy_message
from kafkacodec._walk cimport (BatchWalk, RecordView, walk_open, walk_decompressed, walk_next,
                               walk_step, DataRun, walk_data_begin, walk_data_record,
                               walk_data_end, pin_output, unpin_chunk,
                               OPEN_NONE, OPEN_IN_PLACE, OPEN_COMPRESSED, WALK_INNER)
from kafkacodec._legacy cimport (begin_legacy_wrapper, end_legacy_wrapper, wrapper_fits,
                                 next_inner_entry)
from kafkacodec._crc cimport kc_crc_init, kc_crc32, kc_crc32c
from kafkacodec._compression cimport (Decompressor, _Chunk, thread_decompressor, compress_into,
                                      LEVEL_DEFAULT, RETAINED_CHUNK, DEFAULT_MAX_DECOMPRESSED)
from kafkacodec._guard cimport Guard, guard_enter, guard_leave
from kafkacodec._mapguard cimport check_read

# Every `cdef inline` function this module uses is inlined (kc_inline.h says why).
cdef extern from "kc_inline.h":
    pass

import time

from kafkacodec._records import MemoryRecords
from kafkacodec._types import TimestampType, compression_of, recompress_codec_id
from kafkacodec.errors import (CorruptRecordError, InvalidCrcError, InvalidRecordError,
                               KafkaCodecError, RecordTooLargeError,
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
           "first_entry_above", "records_buffer", "release_file_pages", "up_convert",
           "up_convert_log"]


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


cdef const unsigned char* decompress_entry(Decompressor decompressor, int codec, int magic,
                                           const unsigned char* data, Py_ssize_t size,
                                           Py_ssize_t position, const BatchHeader* h,
                                           Py_ssize_t* out_size) except NULL:
    """A compressed entry's records into `decompressor`'s chunk (the converting thread's); an
    error names the byte in the caller's record set and the batch."""
    decompressor.max_size = DEFAULT_MAX_DECOMPRESSED    # other readers set their own cap
    try:
        return decompressor.decompress_into(codec, magic, data, size, out_size)
    except KafkaCodecError as error:
        where = None if error.position is None else position + error.position
        raise error.with_context(position=where, offset=h.base_offset)


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
      this codec instead (0 none, 1 gzip, 2 snappy, 3 lz4), every record kept; with to_magic 2
      it stays a v2 batch, its records recompressed with this codec (Fetch v4-v9 readers).
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
            if h.magic == 2 and h.compression == CODEC_ZSTD and self.zstd_codec >= 0:
                return self.recompress_v2(entry, h, decompressor)
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
            data = decompress_entry(decompressor, h.compression, h.magic, data, size,
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

    cdef int recompress_v2(self, const unsigned char* entry, const BatchHeader* h,
                           Decompressor decompressor) except -1:
        """A zstd v2 batch rebuilt with zstd_codec, v2 kept (to_magic 2: for readers of Fetch
        v4-v9, which cannot read zstd, KIP-110).  Its records are decompressed and walked whole
        (a corrupt one raises: the rebuilt batch would carry a fresh CRC), then compressed
        again; the header is the stored one with the codec, Size and CRC changed, so offsets,
        timestamps, producer state, flags and the leader epoch are kept."""
        cdef BatchWalk w
        cdef RecordView v
        cdef const unsigned char* data = NULL
        cdef Py_ssize_t size = 0, start, n
        cdef _Chunk chunk = None
        cdef Writer* out = &self.out.w
        w.h = h[0]
        if walk_open(&w, entry, &data, &size) == OPEN_COMPRESSED:
            data = decompress_entry(decompressor, h.compression, 2, data, size, w.data_position,
                                    h, &size)
            chunk = pin_output(decompressor)
        else:                            # RecordsCount 0: nothing read, nothing written
            size = 0
        start = out.length
        try:
            if chunk is not None:
                try:
                    walk_decompressed(&w, data, size)
                    while walk_next(&w, &v):
                        pass
                except KafkaCodecError as error:
                    raise in_decompressed(error, &w)
            put_bytes(out, entry, V2_HEADER_SIZE)
            if self.zstd_codec == CODEC_NONE:
                put_bytes(out, data, size)
            else:
                compress_into(out, self.zstd_codec, 2, data, size, LEVEL_DEFAULT)
        except BaseException:
            out.length = start
            raise
        finally:
            if chunk is not None:
                unpin_chunk(chunk)
        n = out.length - start
        if n - LOG_OVERHEAD > INT32_MAX:
            out.length = start
            raise RecordTooLargeError(f"the batch recompressed with codec {self.zstd_codec} exceeds "
                                      f"Kafka's 2 GiB limit", position=h.position, offset=h.base_offset)
        store_u16(out.buf + start + V2_ATTRIBUTES_OFFSET,
                  <uint16_t>((load_u16(entry + V2_ATTRIBUTES_OFFSET) & ~COMPRESSION_MASK) | self.zstd_codec))
        store_u32(out.buf + start + SIZE_OFFSET, <uint32_t>(n - LOG_OVERHEAD))
        store_u32(out.buf + start + V2_CRC_OFFSET,
                  kc_crc32c(0, out.buf + start + V2_ATTRIBUTES_OFFSET, n - V2_ATTRIBUTES_OFFSET))
        self.temporary_memory_bytes += h.size + size
        self.records_converted += h.records_count
        return 0

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
    the codec to rebuild it with ("none", "gzip", "snappy", "lz4", a Compression or its id);
    with to_magic 2 and `recompress`, zstd batches stay v2 batches, recompressed with it (the
    rest is copied).  A trailing partial entry is ignored.  Returns ConvertedRecords.

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


# --- up-conversion: magic 0/1 messages -> v2 batches -----------------------------------------
# Two uses, two rule sets (docs/down-conversion.md, "Up-conversion"):
#   up_convert      a produce request's message set as a Kafka 3.9 broker appends it with
#                   toMagic 2 (LogValidator: convertAndAssignOffsetsNonCompressed and
#                   validateMessagesAndAssignOffsetsCompressed -> buildRecordsAndAssignOffsets):
#                   one v2 batch, offsets assigned from base_offset, the topic's timestamp type.
#   up_convert_log  a log's entries with their offsets and timestamps kept: each compressed
#                   wrapper one batch (same codec), runs of uncompressed messages one batch,
#                   v2 batches copied.

cdef enum:
    ERROR_UNKNOWN = -1               # Kafka's Errors codes an append refusal carries
    ERROR_INVALID_TIMESTAMP = 32
    ERROR_INVALID_RECORD = 87
    RECORD_ERRORS_SHOWN = 3          # Kafka's message lists the first three record errors


cdef class UpConverter:
    """Writes v2 batches (producer id -1, no headers) from the records of magic 0/1 entries:
    the core of up_convert() and up_convert_log().

    Not for concurrent use (one call at a time: a second call, from another thread or from
    code run inside the first, raises ConcurrentUseError); a compressed entry is decompressed
    by the calling thread's Decompressor."""

    cdef WriteBuffer out                 # the converted batches
    cdef WriteBuffer scratch             # a compressed batch's records before compression
    cdef Guard guard
    # the batch being written (open)
    cdef bint open
    cdef Py_ssize_t start                # its first byte in out
    cdef int codec
    cdef int8_t timestamp_type           # TIMESTAMP_CREATE or TIMESTAMP_LOG_APPEND
    cdef int64_t log_append_time
    cdef int32_t leader_epoch
    cdef int64_t base_offset, last_offset, base_timestamp, max_timestamp
    cdef int32_t count
    # stats since the start (RecordConversionStats)
    cdef int64_t uncompressed_bytes      # MemoryRecordsBuilder.uncompressedBytesWritten
    cdef int64_t records_converted

    def __cinit__(self):
        self.out = WriteBuffer()
        self.scratch = WriteBuffer()

    cdef inline Writer* records(self) noexcept:
        return &self.out.w if self.codec == CODEC_NONE else &self.scratch.w

    cdef int begin(self, int codec, int8_t timestamp_type, int64_t log_append_time,
                   int32_t leader_epoch) except -1:
        self.open = True
        self.codec = codec
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self.leader_epoch = leader_epoch
        self.count = 0
        self.max_timestamp = NO_TIMESTAMP
        self.start = self.out.w.length
        if codec == CODEC_NONE:
            reserve(&self.out.w, V2_HEADER_SIZE)     # the header goes in front once known
        else:
            self.scratch.w.length = 0
        return 0

    cdef inline bint fits(self, int64_t offset, const RecordView* v) noexcept:
        """Whether the record can join the open batch: its offset delta is an int32 and the
        records stay below the 2 GiB a batch's Size can describe."""
        cdef Writer* w = self.records()
        return (self.count == 0 or offset - self.base_offset <= INT32_MAX) and (
            w.length + (v.rec.key_length if v.rec.key_length > 0 else 0)
            + (v.rec.value_length if v.rec.value_length > 0 else 0) + 64
            < <Py_ssize_t>INT32_MAX - V2_HEADER_SIZE)

    cdef int add(self, int64_t offset, int64_t timestamp, const RecordView* v) except -1:
        """Append a record (MemoryRecordsBuilder.appendWithOffset; fits() checked)."""
        if self.count == 0:
            self.base_offset = offset
            self.base_timestamp = timestamp
        write_v2_record(self.records(), <int32_t>(offset - self.base_offset),
                        wrap_sub(timestamp, self.base_timestamp), v.rec.key, v.rec.key_length,
                        v.rec.value, v.rec.value_length, NULL, 0, 0)
        self.count += 1
        self.last_offset = offset
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return 0

    cdef int finish(self) except -1:
        """Close the open batch: its header (and the compressed records) into out."""
        cdef BatchHeader h
        cdef Py_ssize_t start = self.start, n
        self.open = False
        if self.count == 0:
            self.out.w.length = start
            return 0
        h.base_offset = self.base_offset
        h.partition_leader_epoch = self.leader_epoch
        h.attributes = self.codec
        if self.timestamp_type == TIMESTAMP_LOG_APPEND:
            h.attributes |= TIMESTAMP_TYPE_MASK
        h.last_offset_delta = <int32_t>(self.last_offset - self.base_offset)
        h.base_timestamp = self.base_timestamp
        # MemoryRecordsBuilder.writeDefaultBatchHeader: LogAppendTime stamps the batch
        h.max_timestamp = (self.log_append_time if self.timestamp_type == TIMESTAMP_LOG_APPEND
                           else self.max_timestamp)
        h.producer_id = -1
        h.producer_epoch = -1
        h.base_sequence = -1
        h.records_count = self.count
        if self.codec == CODEC_NONE:
            self.uncompressed_bytes += self.out.w.length - start
        else:
            self.uncompressed_bytes += V2_HEADER_SIZE + self.scratch.w.length
            start = reserve(&self.out.w, V2_HEADER_SIZE)
            n = compress_into(&self.out.w, self.codec, 2, self.scratch.w.buf,
                              self.scratch.w.length, LEVEL_DEFAULT)
            if n > <Py_ssize_t>INT32_MAX - V2_HEADER_SIZE:
                raise RecordTooLargeError("the compressed v2 batch exceeds Kafka's 2 GiB limit",
                                          offset=self.base_offset)
        write_v2_batch_header(self.out.w.buf + start, self.out.w.length - start, &h)
        self.records_converted += self.count
        return 0

    # --- a produce request's set (LogValidator) ---------------------------------------------
    cdef int produce(self, const unsigned char* data, Py_ssize_t size, int64_t base_offset,
                     int target, int8_t timestamp_type, int64_t now, int64_t before_max,
                     int64_t after_max, bint compacted, int32_t leader_epoch) except -1:
        """target: the topic's codec, -1 for "producer" (the source codec kept)."""
        cdef Cursor cur
        cdef BatchHeader h
        cdef int8_t first_magic = -1
        cdef Py_ssize_t entries = 0
        cdef int source = CODEC_NONE
        cdef int64_t offset = base_offset
        cdef bint rebuilt
        cdef int negative = 0
        # UnifiedLog.analyzeAndValidateRecords: each entry's checksum (CorruptRecordException);
        # the source codec is the last compressed entry's
        cursor_init(&cur, data, size, 0)
        while next_entry(&cur, &h):
            if not crc_is_valid(data + cur.pos - h.size, &h):
                raise InvalidCrcError(f"record is corrupt (magic {h.magic} entry)", stored=h.crc,
                                      computed=compute_crc(data + cur.pos - h.size, &h),
                                      position=h.position, offset=h.base_offset)
            if entries == 0:
                first_magic = h.magic
            if h.compression != CODEC_NONE:
                source = h.compression
            entries += 1
        if entries == 0:
            raise InvalidRecordError("Record batch has no batches at all",
                                     error_code=ERROR_INVALID_RECORD)
        if first_magic >= 2:
            raise UnsupportedVersionError(
                "up_convert takes magic 0/1 message sets; this one starts with a v2 batch "
                "(already the newest format)", position=0)
        if target < 0:
            target = source              # compression.type=producer
        # the uncompressed path takes many entries; the compressed one a single wrapper
        rebuilt = source != CODEC_NONE or target != CODEC_NONE
        if source != CODEC_NONE and entries > 1:
            raise InvalidRecordError("Compressed outer record has more than one batch",
                                     error_code=ERROR_INVALID_RECORD)
        self.begin(target, timestamp_type, now, leader_epoch)
        cursor_init(&cur, data, size, 0)
        while next_entry(&cur, &h):
            if h.magic != first_magic:   # validateBatch
                raise InvalidRecordError(
                    f"Batch magic {h.magic} is not the same as the first batch's magic byte "
                    f"{first_magic}", error_code=ERROR_INVALID_RECORD, position=h.position,
                    offset=h.base_offset)
            offset = self.produce_entry(data + cur.pos - h.size, &h, offset, timestamp_type, now,
                                        before_max, after_max, compacted, not rebuilt, &negative)
        if negative:                     # the builder's check, after every record validated
            raise InvalidRecordError("Invalid negative timestamp", error_code=ERROR_UNKNOWN)
        self.finish()
        return 0

    cdef int64_t produce_entry(self, const unsigned char* entry, BatchHeader* h, int64_t offset,
                               int8_t timestamp_type, int64_t now, int64_t before_max,
                               int64_t after_max, bint compacted, bint append_checks,
                               int* negative) except? -1:
        """Validate one entry's records (validateRecord) and append those kept at `offset` on;
        returns the next offset.  Record errors are raised once the entry is read
        (processRecordErrors): INVALID_TIMESTAMP if any, else INVALID_RECORD.
        append_checks: the uncompressed path appends as it validates, so a negative timestamp
        fails at once (else after every entry: *negative)."""
        cdef BatchWalk w
        cdef RecordView v
        cdef const unsigned char* records
        cdef const unsigned char* inner
        cdef Py_ssize_t size = 0, inner_size = 0
        cdef int code
        cdef int32_t index = 0
        cdef int64_t diff
        cdef uint32_t crc
        cdef _Chunk chunk = None
        cdef Decompressor decompressor
        cdef list errors = None
        cdef bint bad_timestamp = False
        w.h = h[0]
        code = walk_open(&w, entry, &records, &size)
        if code == OPEN_COMPRESSED:
            decompressor = thread_decompressor()
            records = decompress_entry(decompressor, h.compression, h.magic, records, size,
                                       w.data_position, h, &size)
            chunk = pin_output(decompressor)
        try:
            if chunk is not None:
                walk_decompressed(&w, records, size)
            while True:
                if w.state == WALK_INNER and next_inner_entry(&w.cur, &inner_size):
                    # validateRecordCompression, then the magic and the inner checksum
                    # (validateRecord: record.ensureValid() for v0/v1 inner messages)
                    inner = w.cur.data + w.cur.pos
                    if inner[LEGACY_ATTRIBUTES_OFFSET] & COMPRESSION_MASK or inner[MAGIC_OFFSET] != h.magic:
                        errors = record_error(errors, index, (
                            "Compressed outer record should not have an inner record with a "
                            "compression attribute set" if inner[LEGACY_ATTRIBUTES_OFFSET] & COMPRESSION_MASK
                            else f"Record's magic {inner[MAGIC_OFFSET]} does not match outer magic {h.magic}"))
                        w.cur.pos += inner_size
                        index += 1
                        continue
                    crc = kc_crc32(0, inner + MAGIC_OFFSET, inner_size - MAGIC_OFFSET)
                    if crc != load_u32(inner + LEGACY_CRC_OFFSET):
                        raise InvalidCrcError(
                            "Record is corrupt (an inner message of a compressed wrapper)",
                            stored=load_u32(inner + LEGACY_CRC_OFFSET), computed=crc,
                            position=w.data_position, offset=h.base_offset)
                if not walk_next(&w, &v):
                    break
                if compacted and v.rec.key == NULL:       # validateKey
                    errors = record_error(errors, index, "Compacted topic cannot accept message without key")
                elif timestamp_type == TIMESTAMP_CREATE and v.timestamp != NO_TIMESTAMP:
                    diff = wrap_sub(now, v.timestamp)      # validateTimestamp, Java long math
                    if diff > before_max or wrap_sub(0, diff) > after_max:
                        bad_timestamp = True
                        errors = record_error(errors, index, (
                            f"Timestamp {v.timestamp} of message with offset {v.offset} is out of "
                            f"range. The timestamp should be within [{wrap_sub(now, before_max)}, "
                            f"{wrap_add(now, after_max)}]"))
                elif h.timestamp_type == TIMESTAMP_LOG_APPEND:
                    bad_timestamp = True
                    errors = record_error(errors, index, "Invalid timestamp type in message. Producer "
                                                         "should not set timestamp type to LogAppendTime.")
                if errors is None:
                    if v.timestamp < NO_TIMESTAMP:
                        if append_checks:
                            raise InvalidRecordError("Invalid negative timestamp",
                                                     error_code=ERROR_UNKNOWN,
                                                     position=h.position, offset=h.base_offset)
                        negative[0] = 1
                    if offset == INT64_MAX or not self.fits(offset, &v):
                        raise RecordTooLargeError("the converted batch would exceed Kafka's limits "
                                                  "(2 GiB, 2^31 records)", position=h.position,
                                                  offset=h.base_offset)
                    self.add(offset, v.timestamp, &v)
                    offset += 1
                index += 1
        except KafkaCodecError as error:
            if chunk is not None:
                raise in_decompressed(error, &w)
            raise
        finally:
            if chunk is not None:
                unpin_chunk(chunk)
        if errors is not None:           # processRecordErrors
            if bad_timestamp:
                message = "One or more records have been rejected due to invalid timestamp"
            else:
                message = (f"One or more records have been rejected due to {len(errors)} record "
                           f"errors in total, and only showing the first three errors at most: "
                           f"{[m for _, m in errors[:RECORD_ERRORS_SHOWN]]}")
            raise InvalidRecordError(
                message, error_code=ERROR_INVALID_TIMESTAMP if bad_timestamp else ERROR_INVALID_RECORD,
                record_errors=tuple(errors[:RECORD_ERRORS_SHOWN]), position=h.position,
                offset=h.base_offset)
        return offset

    # --- a log's entries, offsets kept --------------------------------------------------------
    cdef Py_ssize_t log(self, const unsigned char* data, Py_ssize_t size, Py_ssize_t position,
                        Py_ssize_t max_batch_bytes, Py_ssize_t max_bytes) except -1:
        """Convert the complete entries of data (at `position` in the caller's set), the first
        and then those within `max_bytes` of input (-1: all); returns the bytes converted."""
        cdef Cursor cur
        cdef BatchHeader h
        cdef BatchWalk w
        cdef RecordView v
        cdef const unsigned char* entry
        cdef const unsigned char* records
        cdef Py_ssize_t records_size = 0
        cdef int code
        cdef int8_t ts_type
        cdef int64_t last = INT64_MIN
        cdef _Chunk chunk
        cdef Decompressor decompressor
        cursor_init(&cur, data, size, position)
        while next_entry(&cur, &h):
            if max_bytes >= 0 and cur.pos > max_bytes and cur.pos > h.size:
                cur.pos -= h.size            # the next chunk's
                break
            entry = data + cur.pos - h.size
            if h.magic >= 2:                 # already v2: copied as it is
                if self.open:
                    self.finish()
                put_bytes(&self.out.w, entry, h.size)
                last = h.last_offset
                continue
            ts_type = TIMESTAMP_LOG_APPEND if h.timestamp_type == TIMESTAMP_LOG_APPEND else TIMESTAMP_CREATE
            w.h = h
            code = walk_open(&w, entry, &records, &records_size)
            if code == OPEN_IN_PLACE:
                walk_next(&w, &v)
                check_record(v.offset, v.timestamp, last, &h)
                # a run of uncompressed messages shares a batch while its timestamp rule holds
                # (LogAppendTime: one append time per batch) and it stays below max_batch_bytes
                if self.open and (self.codec != CODEC_NONE or self.timestamp_type != ts_type
                                  or (ts_type == TIMESTAMP_LOG_APPEND and v.timestamp != self.log_append_time)
                                  or self.out.w.length - self.start >= max_batch_bytes
                                  or not self.fits(v.offset, &v)):
                    self.finish()
                if not self.open:
                    self.begin(CODEC_NONE, ts_type, v.timestamp, -1)
                self.add(v.offset, v.timestamp, &v)
                last = v.offset
                continue
            if self.open:
                self.finish()
            decompressor = thread_decompressor()
            records = decompress_entry(decompressor, h.compression, h.magic, records, records_size,
                                       w.data_position, &h, &records_size)
            chunk = pin_output(decompressor)
            try:
                walk_decompressed(&w, records, records_size)
                self.begin(h.compression, ts_type, h.max_timestamp, -1)
                while walk_next(&w, &v):
                    check_record(v.offset, v.timestamp, last, &h)
                    if not self.fits(v.offset, &v):
                        self.finish()
                        self.begin(h.compression, ts_type, h.max_timestamp, -1)
                    self.add(v.offset, v.timestamp, &v)
                    last = v.offset
                self.finish()
            except KafkaCodecError as error:
                raise in_decompressed(error, &w)
            finally:
                unpin_chunk(chunk)
        if self.open:
            self.finish()
        return cur.pos


cdef list record_error(list errors, int32_t index, str message):
    if errors is None:
        errors = []
    errors.append((index, message))
    return errors


cdef int64_t bound_ms(object value, str name) except? -1:
    if value is None:
        return INT64_MAX
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return min(int(value), INT64_MAX)


def up_convert(records, *, base_offset=0, compression=None,
               timestamp_type=TimestampType.CREATE_TIME, now=None, timestamp_before_max_ms=None,
               timestamp_after_max_ms=None, compacted=False, partition_leader_epoch=-1):
    """A produce request's magic 0/1 message set as one v2 batch, exactly as a Kafka 3.9 broker
    appends it to a partition of message format v2 (LogValidator with toMagic 2).

    Each entry's checksum is checked (InvalidCrcError: Kafka answers CORRUPT_MESSAGE), then every
    record as Kafka validates it: the inner messages of a compressed wrapper (not compressed
    themselves, of the wrapper's magic, their checksums), keys on a `compacted` topic, timestamps
    against `now` (CreateTime: within timestamp_before_max_ms / timestamp_after_max_ms, None: no
    bound; a LogAppendTime message is refused on a LogAppendTime topic).  A refused record raises
    InvalidRecordError with Kafka's error code (INVALID_RECORD 87, INVALID_TIMESTAMP 32) and the
    first three record errors; several entries of which one is compressed, or entries of two
    magics, are refused as Kafka refuses them.

    The batch: offsets from `base_offset` (the broker assigns them; pass the log end offset, or 0
    to forward the batch to a broker), each record's timestamp (magic 0: -1), `timestamp_type` the
    topic's (LogAppendTime: the batch stamped `now`), the codec `compression` (None: the
    producer's, Kafka's compression.type=producer), producer id -1, no headers.  `now`: ms since
    the epoch (default: the clock).  A trailing partial entry is ignored, as the broker drops it.
    Returns ConvertedRecords; its records own their memory."""
    cdef const unsigned char[::1] view = records_buffer(records)
    cdef int64_t started = monotonic_ns()
    cdef UpConverter converter = UpConverter()
    cdef int target = -1 if compression is None else int(compression_of(compression))
    cdef int8_t ts_type
    try:
        ts = TimestampType(timestamp_type)
    except ValueError:
        raise ValueError(f"unknown timestamp_type {timestamp_type!r}: use a TimestampType") from None
    if ts not in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
        raise ValueError("timestamp_type: the topic's, CREATE_TIME or LOG_APPEND_TIME")
    ts_type = TIMESTAMP_LOG_APPEND if ts == TimestampType.LOG_APPEND_TIME else TIMESTAMP_CREATE
    if not 0 <= base_offset < INT64_MAX:
        raise ValueError(f"base_offset {base_offset} is not a log offset")
    if not -1 <= partition_leader_epoch <= INT32_MAX:
        raise ValueError(f"partition_leader_epoch {partition_leader_epoch} is not an int32 epoch")
    now_ms = int(time.time() * 1000) if now is None else int(now)
    guard_enter(&converter.guard, b"UpConverter")
    try:
        converter.produce(&view[0] if view.shape[0] else NULL, view.shape[0], base_offset,
                          target, ts_type, now_ms, bound_ms(timestamp_before_max_ms, "timestamp_before_max_ms"),
                          bound_ms(timestamp_after_max_ms, "timestamp_after_max_ms"),
                          bool(compacted), partition_leader_epoch)
    except KafkaCodecError as error:
        check_read(records, view.shape[0], error.position, error.offset, error)
        raise
    finally:
        guard_leave(&converter.guard)
    check_read(records, view.shape[0])
    stats = RecordConversionStats(converter.uncompressed_bytes, converter.records_converted,
                                  monotonic_ns() - started)
    return ConvertedRecords(MemoryRecords(converter.out), stats)


def up_convert_log(records, *, Py_ssize_t max_batch_bytes=1 << 20, chunk_bytes=None):
    """A log's record set with every magic 0/1 entry rebuilt as v2 batches, each record's offset,
    timestamp, timestamp type, key and value kept (`kafkacodec convert --to-magic 2`).

    A compressed wrapper becomes one batch with the same codec (LogAppendTime: stamped with the
    wrapper's time); consecutive uncompressed messages share a batch until it holds
    `max_batch_bytes` of records (LogAppendTime ones: while their times are equal, as a v2 batch
    has one); magic 0 messages become CreateTime records with no timestamp (-1).  v2 batches are
    copied as they are.  Batches carry no producer id and partition leader epoch -1 (unknown).
    A trailing partial entry is left out.  Offsets that do not increase, and negative ones, raise
    CorruptRecordError.

    Returns ConvertedRecords; a set with no magic 0/1 entry comes back as a view of `records`
    (zero-copy: valid while `records` is).  With `chunk_bytes`, an iterator of ConvertedRecords
    instead, each converting whole entries of about `chunk_bytes` of input (at least one): memory
    stays bounded by the chunk (a batch does not span two chunks)."""
    if max_batch_bytes <= 0:
        raise ValueError(f"max_batch_bytes must be > 0, got {max_batch_bytes}")
    if chunk_bytes is not None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        return _log_chunks(records, max_batch_bytes, chunk_bytes)
    cdef const unsigned char[::1] view = records_buffer(records)
    cdef int64_t started = monotonic_ns()
    consumed, legacy = first_legacy_entry(view)
    check_read(records, consumed)
    if not legacy:
        return ConvertedRecords(MemoryRecords(records_buffer(records)[:consumed]),
                                RecordConversionStats(0, 0, monotonic_ns() - started))
    return convert_log_chunk(records, view, 0, max_batch_bytes, -1)


def _log_chunks(records, Py_ssize_t max_batch_bytes, Py_ssize_t chunk_bytes):
    view = records_buffer(records)
    position = 0
    while True:
        chunk = convert_log_chunk(records, view, position, max_batch_bytes, chunk_bytes)
        if chunk is None:
            return
        position, converted = chunk
        yield converted


cdef object convert_log_chunk(object records, const unsigned char[::1] view, Py_ssize_t position,
                              Py_ssize_t max_batch_bytes, Py_ssize_t max_bytes):
    """Convert from `position`: ConvertedRecords (max_bytes -1: all of it), else (the next
    position, ConvertedRecords), or None when no complete entry is left."""
    cdef int64_t started = monotonic_ns()
    cdef UpConverter converter = UpConverter()
    cdef Py_ssize_t consumed
    if position >= view.shape[0]:
        return None
    guard_enter(&converter.guard, b"UpConverter")
    try:
        consumed = converter.log(&view[position], view.shape[0] - position, position,
                                 max_batch_bytes, max_bytes)
    except KafkaCodecError as error:
        check_read(records, view.shape[0], error.position, error.offset, error)
        raise
    finally:
        guard_leave(&converter.guard)
    check_read(records, position + consumed)   # a mapped segment cut under what was read
    stats = RecordConversionStats(converter.uncompressed_bytes, converter.records_converted,
                                  monotonic_ns() - started)
    converted = ConvertedRecords(MemoryRecords(converter.out), stats)
    if max_bytes < 0:
        return converted
    if consumed == 0:
        return None
    return position + consumed, converted


cdef tuple first_legacy_entry(const unsigned char[::1] view):
    """(bytes of complete entries, whether one of them is magic 0/1)."""
    cdef Cursor cur
    cdef BatchHeader h
    cdef bint legacy = False
    cursor_init(&cur, &view[0] if view.shape[0] else NULL, view.shape[0], 0)
    while next_entry(&cur, &h):
        if h.magic < 2:
            legacy = True
    return cur.pos, legacy
